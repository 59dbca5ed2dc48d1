//! What ralph shows and keeps of one iteration's agent output.
//!
//! Shows: the agent's lines as they arrive (or all at the end with `--no-stream`), tool lines
//! folded into a periodic `| Tools` summary (or shown one by one with `--verbose-tools`), and a
//! heartbeat after a silence. Keeps: tool counts, the first ten error lines, and the tail of the
//! last non-empty stdout line for promise detection — a bounded amount whatever the agent prints.
//! Buffered output is spilled to an unnamed temporary file, not kept in memory.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Seek as _, SeekFrom, Write as _};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use regex::Regex;

use crate::agents::Agent;
use crate::output;
use crate::promise::Promise;
use crate::stream::{OutputHandler, Segment, Source};

/// Longest error line kept, in characters.
const ERROR_CHARS: usize = 200;
/// Most error lines kept per iteration.
const MAX_ERRORS: usize = 10;
/// Bytes of a line kept for promise detection (the tag must end the line).
const LINE_TAIL_BYTES: usize = 4096;
/// OpenCode prints this when the obsolete placeholder plugin is loaded.
static LEGACY_PLUGIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&regex::escape(
        "ralph-wiggum is not yet ready for use. This is a placeholder package.",
    ))
    .expect("valid regex")
});

/// How the transcript displays output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DisplayOptions {
    pub(crate) stream: bool,
    pub(crate) verbose_tools: bool,
    pub(crate) heartbeat: Duration,
    pub(crate) tool_summary: Duration,
}

/// The output handler for one agent run.
pub(crate) struct Transcript<'a> {
    agent: &'a dyn Agent,
    display: DisplayOptions,
    promises: Vec<&'a Promise>,
    anywhere: bool,
    started: Instant,
    last_printed: Instant,
    last_summary: Option<Instant>,
    /// Spill files for `--no-stream` (stdout, stderr).
    buffered: Option<(File, File)>,
    /// Per source: is the line being received a suppressed tool line?
    hiding_line: [bool; 2],
    /// Per source: the tail of the line being received (ANSI codes included).
    line_tail: [String; 2],
    last_stdout_line: String,
    promises_seen_anywhere: Vec<bool>,
    tools: BTreeMap<String, u64>,
    errors: Vec<String>,
    legacy_plugin: bool,
}

/// What the transcript found once the agent exited.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    pub(crate) tools: BTreeMap<String, u64>,
    pub(crate) errors: Vec<String>,
    /// Per promise given to [`Transcript::new`], whether the agent made it.
    pub(crate) promises: Vec<bool>,
    pub(crate) legacy_plugin: bool,
}

impl<'a> Transcript<'a> {
    pub(crate) fn new(
        agent: &'a dyn Agent,
        display: DisplayOptions,
        promises: Vec<&'a Promise>,
        anywhere: bool,
    ) -> anyhow::Result<Self> {
        let buffered = if display.stream {
            None
        } else {
            Some((tempfile::tempfile()?, tempfile::tempfile()?))
        };
        let now = Instant::now();
        let count = promises.len();
        Ok(Self {
            agent,
            display,
            promises,
            anywhere,
            started: now,
            last_printed: now,
            last_summary: None,
            buffered,
            hiding_line: [false; 2],
            line_tail: [String::new(), String::new()],
            last_stdout_line: String::new(),
            promises_seen_anywhere: vec![false; count],
            tools: BTreeMap::new(),
            errors: Vec::new(),
            legacy_plugin: false,
        })
    }

    /// Prints what is still pending and returns the findings.
    pub(crate) fn finish(mut self) -> Findings {
        if let Some((mut stdout, mut stderr)) = self.buffered.take() {
            for (file, to_stderr) in [(&mut stderr, true), (&mut stdout, false)] {
                if file.seek(SeekFrom::Start(0)).is_ok() {
                    output::copy_to(file, to_stderr);
                }
            }
        } else if !self.tools.is_empty() && !self.display.verbose_tools {
            output::tool_progress(&self.tools);
        }
        output::flush();
        let last_line = self.last_stdout_line;
        let promises = self
            .promises
            .iter()
            .zip(&self.promises_seen_anywhere)
            .map(|(promise, &anywhere)| {
                (self.anywhere && anywhere) || promise.ends_line(&last_line)
            })
            .collect();
        Findings {
            tools: self.tools,
            errors: self.errors,
            promises,
            legacy_plugin: self.legacy_plugin,
        }
    }

    fn note_line_start(&mut self, index: usize, clean: &str, now: Instant) {
        let tool = self.agent.tool_in_line(clean);
        self.hiding_line[index] = tool.is_some() && !self.display.verbose_tools;
        if let Some(tool) = tool {
            *self.tools.entry(tool).or_default() += 1;
            let due = self
                .last_summary
                .is_none_or(|at| now.duration_since(at) >= self.display.tool_summary);
            if self.hiding_line[index] && self.display.stream && due {
                output::tool_progress(&self.tools);
                self.last_summary = Some(now);
                self.last_printed = now;
            }
        }
    }

    fn note_errors(&mut self, clean: &str) {
        if self.errors.len() >= MAX_ERRORS {
            return;
        }
        let is_error =
            ERROR_WORDS.is_match(clean) || (TEST_WORD.is_match(clean) && FAIL_WORD.is_match(clean));
        if !is_error {
            return;
        }
        let line: String = clean.trim().chars().take(ERROR_CHARS).collect();
        if !line.is_empty() && !self.errors.contains(&line) {
            self.errors.push(line);
        }
    }
}

impl OutputHandler for Transcript<'_> {
    fn on_segment(&mut self, segment: &Segment<'_>) {
        let now = segment.received;
        let index = usize::from(segment.source == Source::Stderr);
        let clean = without_ansi(segment.text);
        if segment.starts_line {
            self.line_tail[index].clear();
            self.note_line_start(index, &clean, now);
        }
        self.note_errors(&clean);
        if self.anywhere {
            let window = format!("{}{}", self.line_tail[index], clean);
            for (seen, promise) in self.promises_seen_anywhere.iter_mut().zip(&self.promises) {
                *seen |= promise.appears_in(&window);
            }
        }
        if self.agent.kind() == crate::agents::AgentKind::OpenCode && LEGACY_PLUGIN.is_match(&clean)
        {
            self.legacy_plugin = true;
        }
        push_tail(&mut self.line_tail[index], &clean);
        if segment.ends_line && segment.source == Source::Stdout {
            let line = self.line_tail[index].trim();
            if !line.is_empty() {
                self.last_stdout_line = line.to_owned();
            }
        }

        if self.hiding_line[index] {
            return;
        }
        match &mut self.buffered {
            Some((stdout, stderr)) => {
                let file = if index == 0 { stdout } else { stderr };
                let _ = file.write_all(segment.text.as_bytes());
                if segment.ends_line {
                    let _ = file.write_all(b"\n");
                }
            }
            None => {
                if segment.source == Source::Stdout {
                    output::agent_stdout(segment.text, segment.ends_line);
                } else {
                    output::agent_stderr(segment.text, segment.ends_line);
                }
                self.last_printed = now;
            }
        }
    }

    fn on_tick(&mut self, now: Instant, last_output: Instant) {
        if self.buffered.is_some() {
            return;
        }
        output::flush();
        if now.duration_since(self.last_printed) >= self.display.heartbeat {
            output::heartbeat(
                now.duration_since(self.started),
                now.duration_since(last_output),
            );
            self.last_printed = now;
        }
    }
}

/// Lines that count as errors (reference 7.1), matched case-insensitively.
static ERROR_WORDS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)error:|failed:|exception:|typeerror|syntaxerror|referenceerror")
        .expect("valid regex")
});
static TEST_WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?i)test").expect("valid regex"));
static FAIL_WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?i)fail").expect("valid regex"));

/// The text without ANSI escape sequences (borrowed when there are none, the common case).
fn without_ansi(text: &str) -> Cow<'_, str> {
    if text.contains('\x1b') {
        Cow::Owned(strip_ansi_escapes::strip_str(text))
    } else {
        Cow::Borrowed(text)
    }
}

/// Appends to a bounded tail, keeping the last [`LINE_TAIL_BYTES`] bytes.
fn push_tail(tail: &mut String, text: &str) {
    tail.push_str(text);
    if tail.len() > LINE_TAIL_BYTES {
        let mut cut = tail.len() - LINE_TAIL_BYTES;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail.drain(..cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::AgentKind;

    fn feed(transcript: &mut Transcript<'_>, source: Source, lines: &[&str]) {
        for line in lines {
            transcript.on_segment(&Segment {
                source,
                text: line,
                starts_line: true,
                ends_line: true,
                received: Instant::now(),
            });
        }
    }

    fn quiet() -> DisplayOptions {
        DisplayOptions {
            stream: false,
            verbose_tools: false,
            heartbeat: Duration::from_secs(3600),
            tool_summary: Duration::from_secs(3600),
        }
    }

    #[test]
    fn promise_counts_only_at_the_end_of_the_last_stdout_line() {
        let agent = AgentKind::OpenCode.agent();
        let promise = Promise::new("COMPLETE");
        let mut transcript =
            Transcript::new(agent.as_ref(), quiet(), vec![&promise], false).unwrap();
        feed(
            &mut transcript,
            Source::Stdout,
            &["Print <promise>COMPLETE</promise> when done", "working", ""],
        );
        feed(
            &mut transcript,
            Source::Stderr,
            &["<promise>COMPLETE</promise>"],
        );
        assert_eq!(transcript.finish().promises, [false]);

        let mut transcript =
            Transcript::new(agent.as_ref(), quiet(), vec![&promise], false).unwrap();
        feed(
            &mut transcript,
            Source::Stdout,
            &[
                "all done",
                "\x1b[32mDone. <promise>COMPLETE</promise>\x1b[0m",
                "  ",
            ],
        );
        assert_eq!(transcript.finish().promises, [true]);
    }

    #[test]
    fn anywhere_mode_accepts_a_tag_mid_output() {
        let agent = AgentKind::OpenCode.agent();
        let promise = Promise::new("COMPLETE");
        let mut transcript =
            Transcript::new(agent.as_ref(), quiet(), vec![&promise], true).unwrap();
        feed(
            &mut transcript,
            Source::Stdout,
            &["I said <promise>COMPLETE</promise> earlier", "more"],
        );
        assert_eq!(transcript.finish().promises, [true]);
    }

    #[test]
    fn tools_and_errors_are_counted_and_bounded() {
        let agent = AgentKind::OpenCode.agent();
        let mut transcript = Transcript::new(agent.as_ref(), quiet(), vec![], false).unwrap();
        feed(
            &mut transcript,
            Source::Stdout,
            &["|  Bash ls", "|  Bash pwd", "\x1b[1m|  Read\x1b[0m a"],
        );
        let errors: Vec<String> = (0..20).map(|i| format!("Error: number {i}")).collect();
        let errors: Vec<&str> = errors.iter().map(String::as_str).collect();
        feed(&mut transcript, Source::Stderr, &errors);
        feed(&mut transcript, Source::Stderr, &["test foo FAILED"]);
        let findings = transcript.finish();
        assert_eq!(findings.tools["Bash"], 2);
        assert_eq!(findings.tools["Read"], 1);
        assert_eq!(findings.errors.len(), MAX_ERRORS);
        assert_eq!(findings.errors[0], "Error: number 0");
    }

    #[test]
    fn tails_stay_bounded() {
        let mut tail = String::new();
        for _ in 0..100 {
            push_tail(&mut tail, &"é".repeat(100));
        }
        assert!(tail.len() <= LINE_TAIL_BYTES);
    }
}
