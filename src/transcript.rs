//! What ralph shows and keeps of one iteration's agent output.
//!
//! Shows: the agent's text as it arrives (or all at the end with `--no-stream`), tool calls folded
//! into a periodic `| Tools` summary (or one line each with `--verbose-tools`), failures and
//! retries in one line each, and a heartbeat after a silence. In JSON mode the agent's events are
//! parsed and raw JSON is never shown; a line that is not an event ralph knows is shown as text.
//!
//! Keeps: tool counts, tokens, cost, turns, the failure, the first ten error lines, and the tail
//! of the lines promise detection needs — a bounded amount whatever the agent prints. Buffered
//! output is spilled to unnamed temporary files, not kept in memory.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Seek as _, SeekFrom, Write as _};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use regex::Regex;

use crate::agents::{Agent, AgentEvent, AgentKind, Failure, OutputFormat, Usage};
use crate::output::{self, Voice};
use crate::promise::Promise;
use crate::storage::logs::IterationLog;
use crate::stream::{Asking, EndedBy, OutputHandler, Segment, Source};

mod answer;
mod events;
mod promises;
mod runs;
mod tail;

use promises::Promises;
use tail::{push_tail, set_last_line, without_ansi};

/// Longest error line kept, in characters.
const ERROR_CHARS: usize = 200;
/// Most error lines kept per iteration.
const MAX_ERRORS: usize = 10;
/// Bytes of a line kept for promise detection (the tag must end the line).
const LINE_TAIL_BYTES: usize = 4096;
/// Longest JSON event line ralph parses; a longer one is skipped with a notice.
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// How the transcript displays output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DisplayOptions {
    pub(crate) stream: bool,
    pub(crate) verbose_tools: bool,
    pub(crate) heartbeat: Duration,
    pub(crate) tool_summary: Duration,
    pub(crate) format: OutputFormat,
}

/// What the transcript found once the agent exited.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    pub(crate) tools: BTreeMap<String, u64>,
    pub(crate) errors: Vec<String>,
    /// Per promise given to [`Transcript::new`], whether the agent made it.
    pub(crate) promises: Vec<bool>,
    pub(crate) legacy_plugin: bool,
    /// Tokens, when the agent reported any.
    pub(crate) usage: Option<Usage>,
    /// Cost in USD, when the agent reported it.
    pub(crate) cost: Option<f64>,
    pub(crate) turns: Option<u32>,
    /// The agent's session id, when it reported one (the first).
    pub(crate) session_id: Option<String>,
    /// Why the agent ended its turn, when it says (ACP).
    pub(crate) stop_reason: Option<String>,
    /// The failure the agent reported, if any (the last one).
    pub(crate) failure: Option<Failure>,
    /// The end of the agent's final message (at most 2 KB), to show when it gives up.
    pub(crate) final_text: String,
    /// The "stopping" message was already shown.
    pub(crate) stop_announced: bool,
}

/// Told the tools an agent used so far (name → calls).
type ToolsHook<'a> = Box<dyn FnMut(&BTreeMap<String, u64>) + 'a>;

/// The output handler for one agent run.
pub(crate) struct Transcript<'a> {
    agent: &'a dyn Agent,
    display: DisplayOptions,
    promises: Promises<'a>,
    started: Instant,
    last_printed: Instant,
    last_summary: Option<Instant>,
    /// How many tool calls the last tool summary counted (the final one is left out when it
    /// would say the same again).
    tools_summarised: u64,
    /// A failure line held back until something else is shown: an agent that retries by itself
    /// (pi) reports each failed attempt before it retries, and a retried one is not shown.
    held_failure: Option<String>,
    /// Spill files for `--no-stream` (stdout, stderr).
    buffered: Option<(File, File)>,
    /// Per source: is the line being received a suppressed tool line?
    hiding_line: [bool; 2],
    /// Per source: the tail of the line being received (ANSI codes removed).
    line_tail: [String; 2],
    /// The JSON event line being received on stdout, if it is one.
    event_line: Option<String>,
    event_overflow: usize,
    /// The last non-empty line of plain stdout.
    last_plain_line: String,
    /// The end of the agent's last text and of its final message.
    last_text: Option<String>,
    final_text: Option<String>,
    /// The streamed pieces of the assistant message being received.
    pieces: String,
    /// Everything the agent said on stdout, when asked for ([`Transcript::keeping_answer`]).
    answer: Option<String>,
    /// Per source: whether the chunk being read may hold an error line (it has an error word,
    /// or "test" and "fail"), and whether the next segment is the chunk's first (which may
    /// continue a line begun in the chunk before, so it is always looked at).
    chunk_may_err: [bool; 2],
    chunk_first: [bool; 2],
    /// Whether the segment being handled is searched for error words (from the two above).
    segment_may_err: bool,
    findings: Findings,
    /// Told the agent's process group once it runs.
    spawn_hook: Option<Box<dyn FnMut(i32) + 'a>>,
    /// Asked on every tick whether the agent waits for a person's answer.
    ask_hook: Option<Box<dyn FnMut(Instant) -> Asking + 'a>>,
    /// What `ask_hook` said last.
    asking: Asking,
    /// Told the tools used so far, when the tool summary is due.
    tools_hook: Option<ToolsHook<'a>>,
    /// How the agent's output and ralph's lines about it are shown.
    voice: Voice,
    /// The iteration's log, written as the output arrives.
    log: Option<IterationLog>,
    /// The agent's tool pattern, matched line by line in a whole run of lines (see `runs`).
    tool_lines: Option<Regex>,
    /// Room to lowercase a chunk in.
    scratch: Vec<u8>,
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
        Ok(Self {
            agent,
            display,
            promises: Promises::new(promises, anywhere),
            started: now,
            last_printed: now,
            last_summary: None,
            tools_summarised: 0,
            held_failure: None,
            buffered,
            hiding_line: [false; 2],
            line_tail: [String::new(), String::new()],
            event_line: None,
            event_overflow: 0,
            last_plain_line: String::new(),
            last_text: None,
            final_text: None,
            pieces: String::new(),
            answer: None,
            chunk_may_err: [true; 2],
            chunk_first: [true; 2],
            segment_may_err: true,
            findings: Findings::default(),
            spawn_hook: None,
            ask_hook: None,
            asking: Asking::default(),
            tools_hook: None,
            voice: Voice::plain(),
            log: None,
            tool_lines: agent.tool_pattern().and_then(runs::multi_line),
            scratch: Vec::new(),
        })
    }

    /// Writes every line of the agent's output to `log` too.
    pub(crate) fn with_log(mut self, log: Option<IterationLog>) -> Self {
        self.log = log;
        self
    }

    /// Ends the log with the agent's exit code.
    pub(crate) fn end_log(&mut self, exit_code: i32) {
        if let Some(log) = &mut self.log {
            log.end(exit_code);
        }
    }

    /// Calls `hook` with the agent's process group once it runs.
    pub(crate) fn on_spawn(mut self, hook: impl FnMut(i32) + 'a) -> Self {
        self.spawn_hook = Some(Box::new(hook));
        self
    }

    /// Asks `hook` on every tick whether the agent waits for a person's answer (`ralph_ask`):
    /// the time limits leave the waits out, and the heartbeat says so.
    pub(crate) fn on_asking(mut self, hook: impl FnMut(Instant) -> Asking + 'a) -> Self {
        self.ask_hook = Some(Box::new(hook));
        self
    }

    /// Shows the agent's output in `voice` (a task loop's, `--json`'s), not on the plain terminal.
    pub(crate) fn with_voice(mut self, voice: Voice) -> Self {
        self.voice = voice;
        self
    }

    /// Tells `hook` the tools used so far whenever the summary line is due.
    pub(crate) fn on_tools(mut self, hook: impl FnMut(&BTreeMap<String, u64>) + 'a) -> Self {
        self.tools_hook = Some(Box::new(hook));
        self
    }

    /// The tool summary is due: the loop hears it (as its `tools` event), or it is shown.
    fn tools_shown(&mut self) {
        self.tools_summarised = self.findings.tools.values().sum();
        match &mut self.tools_hook {
            Some(hook) => hook(&self.findings.tools),
            None => output::tool_progress(&self.voice, &self.findings.tools),
        }
    }

    /// What the agent's exit tells: the usage report it wrote, and a failure its exit code
    /// stands for when it printed none.
    pub(crate) fn agent_exited(&mut self, code: i32, usage_report: Option<&str>) {
        let now = Instant::now();
        for event in usage_report
            .map(|text| self.agent.usage_file_events(text))
            .unwrap_or_default()
        {
            self.event(event, now);
        }
        if code != 0
            && self.findings.failure.is_none()
            && let Some(failure) = self.agent.exit_failure(code)
        {
            self.event(AgentEvent::Failure(failure), now);
        }
    }

    /// Prints what is still pending and returns the findings.
    pub(crate) fn finish(mut self) -> Findings {
        if let Some(line) = self.event_line.take() {
            self.end_event_line(&line, Instant::now());
        }
        self.end_pieces(Instant::now());
        self.show_held_failure(Instant::now());
        if let Some((mut stdout, mut stderr)) = self.buffered.take() {
            for (file, to_stderr) in [(&mut stderr, true), (&mut stdout, false)] {
                if file.seek(SeekFrom::Start(0)).is_ok() {
                    self.voice.copy_to(file, to_stderr);
                }
            }
        } else if !self.display.verbose_tools
            && !self.findings.tools.is_empty()
            // The loop hears the final counts as always (its `tools` event); the terminal leaves
            // out a line that would say the same again.
            && (self.tools_hook.is_some()
                || self.findings.tools.values().sum::<u64>() != self.tools_summarised)
        {
            self.tools_shown();
        }
        output::flush();
        // The final message decides; without one, the last text; without any, plain stdout.
        let decisive_text = self
            .final_text
            .take()
            .or(self.last_text.take())
            .unwrap_or_else(|| self.last_plain_line.clone());
        let promises = self.promises.kept(&decisive_text).collect();
        Findings {
            promises,
            final_text: decisive_text.trim().to_owned(),
            ..self.findings
        }
    }

    /// Shows one line of agent output (or spills it in buffered mode), after a failure line held
    /// back.
    fn show(&mut self, source: Source, text: &str, ends_line: bool, now: Instant) {
        self.keep_answer(source, text, ends_line);
        self.show_held_failure(now);
        self.show_now(source, text, ends_line, now);
    }

    fn show_held_failure(&mut self, now: Instant) {
        if let Some(line) = self.held_failure.take() {
            self.show_now(Source::Stderr, &line, true, now);
        }
    }

    fn show_now(&mut self, source: Source, text: &str, ends_line: bool, now: Instant) {
        if let Some(file) = self.spill_file(source) {
            let _ = file.write_all(text.as_bytes());
            if ends_line {
                let _ = file.write_all(b"\n");
            }
            return;
        }
        if source == Source::Stdout {
            self.voice.agent_stdout(text, ends_line);
        } else {
            self.voice.agent_stderr(text, ends_line);
        }
        self.last_printed = now;
    }

    /// Where buffered output of `source` is spilled (`--no-stream`), if it is.
    fn spill_file(&mut self, source: Source) -> Option<&mut File> {
        let (stdout, stderr) = self.buffered.as_mut()?;
        Some(if source == Source::Stdout {
            stdout
        } else {
            stderr
        })
    }

    fn count_tool(&mut self, name: String, now: Instant) {
        *self.findings.tools.entry(name).or_default() += 1;
        let due = self
            .last_summary
            .is_none_or(|at| now.duration_since(at) >= self.display.tool_summary);
        if !self.display.verbose_tools && self.display.stream && due {
            self.tools_shown();
            self.last_summary = Some(now);
            self.last_printed = now;
        }
    }

    fn note_error(&mut self, line: &str, force: bool) {
        if self.findings.errors.len() >= MAX_ERRORS {
            return;
        }
        let is_error = force
            || ERROR_WORDS.is_match(line)
            || (TEST_WORD.is_match(line) && FAIL_WORD.is_match(line));
        if !is_error {
            return;
        }
        let line: String = line.trim().chars().take(ERROR_CHARS).collect();
        if !line.is_empty() && !self.findings.errors.contains(&line) {
            self.findings.errors.push(line);
        }
    }

    /// A whole line of plain stdout: the answer's last line so far, unless the agent prints it
    /// after its answer (see [`Agent::trailer`]), when what it tells is taken in.
    fn stdout_line_ended(&mut self, line: &str, now: Instant) {
        match self.agent.trailer(line) {
            Some(events) => {
                for event in events {
                    self.event(event, now);
                }
            }
            None => set_last_line(&mut self.last_plain_line, line),
        }
    }

    /// A piece of a plain-text line (text mode, stderr, or stdout that is not an event).
    fn plain_segment(&mut self, segment: &Segment<'_>, text: &str) {
        let now = segment.received;
        let index = usize::from(segment.source == Source::Stderr);
        let clean = without_ansi(text);
        if segment.starts_line {
            self.line_tail[index].clear();
            let tool = if self.display.format == OutputFormat::Text {
                self.agent.tool_in_line(&clean)
            } else {
                None
            };
            // Buffered output is shown whole, as the agent printed it.
            self.hiding_line[index] =
                tool.is_some() && !self.display.verbose_tools && self.buffered.is_none();
            if let Some(tool) = tool {
                self.count_tool(tool, now);
            }
        }
        if self.segment_may_err {
            self.note_error(&clean, false);
        }
        if self.promises.anywhere {
            let window = format!("{}{}", self.line_tail[index], clean);
            self.promises.check_anywhere(&window);
        }
        if self.agent.kind() == Some(AgentKind::OpenCode)
            && clean.contains("ralph-wiggum")
            && LEGACY_PLUGIN.is_match(&clean)
        {
            self.findings.legacy_plugin = true;
        }
        if segment.starts_line && segment.ends_line && !self.promises.anywhere {
            // A whole line in one piece (the common case): no need to keep its tail.
            if segment.source == Source::Stdout {
                self.stdout_line_ended(&clean, now);
            }
        } else {
            push_tail(&mut self.line_tail[index], &clean);
            if segment.ends_line && segment.source == Source::Stdout {
                let tail = std::mem::take(&mut self.line_tail[index]);
                self.stdout_line_ended(&tail, now);
                self.line_tail[index] = tail;
            }
        }
        if !self.hiding_line[index] {
            self.show(segment.source, text, segment.ends_line, now);
        }
    }

    /// A complete stdout line that looked like JSON.
    fn end_event_line(&mut self, line: &str, now: Instant) {
        if self.event_overflow > 0 {
            let size = self.event_overflow;
            self.event_overflow = 0;
            let notice = format!(
                "[ralph: skipped an agent event of {} MB, too large to show]",
                size / (1024 * 1024)
            );
            self.show(Source::Stdout, &notice, true, now);
            return;
        }
        let events = self.agent.parse_event(line);
        self.parsed_line(line, events.map(Vec::into_iter), now);
    }
}

impl OutputHandler for Transcript<'_> {
    fn on_chunk(&mut self, source: Source, data: &[u8]) {
        let index = usize::from(source == Source::Stderr);
        // One search of the chunk spares one per line in the usual chunk without an error.
        self.chunk_may_err[index] = runs::may_hold_error(data, &mut self.scratch);
        if let Some(log) = &mut self.log {
            // The chunk's lines arrived together: their records share its time.
            log.stamp_now();
        }
        self.chunk_first[index] = true;
    }

    fn on_chunk_end(&mut self) {
        // Segments that come outside a chunk (the end of the output) are all looked at.
        self.chunk_may_err = [true; 2];
        self.segment_may_err = true;
        if let Some(log) = &mut self.log {
            log.flush();
        }
    }

    fn on_lines(
        &mut self,
        source: Source,
        text: &str,
        received: Instant,
        parsed: Option<crate::stream::ParsedLines>,
    ) {
        self.lines(source, text, received, parsed);
    }

    fn line_parser(&self) -> Option<crate::stream::LineParser> {
        if self.display.format != OutputFormat::Json {
            return None;
        }
        let agent = self.agent.events_of()?.agent();
        Some(Box::new(move |line| runs::events_in(agent.as_ref(), line)))
    }

    fn on_segment(&mut self, segment: &Segment<'_>) {
        if let Some(log) = &mut self.log {
            log.segment(
                segment.source == Source::Stderr,
                segment.text,
                segment.ends_line,
            );
        }
        let index = usize::from(segment.source == Source::Stderr);
        self.segment_may_err =
            std::mem::take(&mut self.chunk_first[index]) || self.chunk_may_err[index];
        let structured =
            self.display.format == OutputFormat::Json && segment.source == Source::Stdout;
        let event = structured && segment.starts_line && runs::opens_event(segment.text);
        if event && segment.ends_line {
            // A whole event line in one segment, the usual case: read in place.
            self.end_event_line(segment.text, segment.received);
            return;
        }
        if event {
            self.event_line = Some(String::new());
        }
        if !structured || self.event_line.is_none() {
            self.plain_segment(segment, segment.text);
            return;
        }
        if let Some(line) = &mut self.event_line {
            if self.event_overflow > 0 || line.len() + segment.text.len() > MAX_EVENT_BYTES {
                self.event_overflow += line.len() + segment.text.len();
                line.clear();
            } else {
                line.push_str(segment.text);
            }
        }
        if segment.ends_line
            && let Some(line) = self.event_line.take()
        {
            self.end_event_line(&line, segment.received);
        }
    }

    fn on_spawn(&mut self, group: i32) {
        if let Some(hook) = &mut self.spawn_hook {
            hook(group);
        }
    }

    fn asking(&mut self, now: Instant) -> Asking {
        if let Some(hook) = &mut self.ask_hook {
            self.asking = hook(now);
        }
        self.asking
    }

    fn on_stopping(&mut self, reason: EndedBy) {
        if reason == EndedBy::User {
            output::stopping(&self.voice);
            self.findings.stop_announced = true;
        }
    }

    fn on_agent_event(&mut self, event: AgentEvent) {
        self.event(event, Instant::now());
    }

    fn promise_said(&self) -> bool {
        // The answer so far, as `finish` would judge it; text still streaming in is the newest.
        let answer = if self.pieces.trim().is_empty() {
            self.final_text
                .as_deref()
                .or(self.last_text.as_deref())
                .unwrap_or(&self.last_plain_line)
        } else {
            &self.pieces
        };
        self.promises.kept(answer).any(|kept| kept)
    }

    fn on_tick(&mut self, now: Instant, last_output: Instant) {
        if self.buffered.is_some() {
            return;
        }
        output::flush();
        if now.duration_since(self.last_printed) >= self.display.heartbeat {
            let elapsed = now.duration_since(self.started);
            match self.asking.waiting_since {
                Some(since) => output::heartbeat_asking(&self.voice, elapsed, now - since),
                None => output::heartbeat(&self.voice, elapsed, now.duration_since(last_output)),
            }
            self.last_printed = now;
        }
    }
}

/// Lines that count as errors (reference 7.1), matched case-insensitively.
/// Words that make a line of output an error line; "test" and "fail" together do too.
const ERROR_PATTERN: &str = r"(?i)error:|failed:|exception:|typeerror|syntaxerror|referenceerror";
const TEST_PATTERN: &str = r"(?i)test";
const FAIL_PATTERN: &str = r"(?i)fail";
static ERROR_WORDS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(ERROR_PATTERN).expect("valid regex"));
static TEST_WORD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(TEST_PATTERN).expect("valid regex"));
static FAIL_WORD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(FAIL_PATTERN).expect("valid regex"));
/// What every error line holds (an error word, or "fail" beside "test"), searched in a run of
/// whole lines to find the lines to look at.
static ERROR_HINT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!("{ERROR_PATTERN}|{FAIL_PATTERN}")).expect("valid regex"));
/// OpenCode prints this when the obsolete placeholder plugin is loaded.
static LEGACY_PLUGIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&regex::escape(
        "ralph-wiggum is not yet ready for use. This is a placeholder package.",
    ))
    .expect("valid regex")
});

#[cfg(test)]
mod tests {
    use super::*;

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

    fn quiet(format: OutputFormat) -> DisplayOptions {
        DisplayOptions {
            stream: false,
            verbose_tools: false,
            heartbeat: Duration::from_secs(3600),
            tool_summary: Duration::from_secs(3600),
            format,
        }
    }

    fn run(kind: AgentKind, format: OutputFormat, anywhere: bool, stdout: &[&str]) -> Findings {
        let agent = kind.agent();
        let complete = Promise::new("COMPLETE", crate::promise::PromiseFormat::Xml);
        let mut transcript =
            Transcript::new(agent.as_ref(), quiet(format), vec![&complete], anywhere).unwrap();
        feed(&mut transcript, Source::Stdout, stdout);
        transcript.finish()
    }

    #[test]
    fn promise_counts_only_at_the_end_of_the_last_stdout_line() {
        let text = OutputFormat::Text;
        let echoed = ["Print <promise>COMPLETE</promise> when done", "working", ""];
        assert_eq!(
            run(AgentKind::OpenCode, text, false, &echoed).promises,
            [false]
        );
        let done = [
            "all done",
            "\x1b[32mDone. <promise>COMPLETE</promise>\x1b[0m",
            "  ",
        ];
        assert_eq!(
            run(AgentKind::OpenCode, text, false, &done).promises,
            [true]
        );
        let quoted = ["I said <promise>COMPLETE</promise> earlier", "more"];
        assert_eq!(
            run(AgentKind::OpenCode, text, true, &quoted).promises,
            [true]
        );
    }

    /// Aider's token report after its answer gives the tokens and cost and leaves the promise
    /// the answer's last line, whether the lines come one by one or as one run.
    #[test]
    fn a_trailer_after_the_answer_is_taken_in_and_not_the_last_line() {
        let complete = Promise::new("COMPLETE", crate::promise::PromiseFormat::Xml);
        let findings = |kind: AgentKind, lines: &[&str], as_run: bool| {
            let agent = kind.agent();
            let options = quiet(OutputFormat::Text);
            let mut transcript =
                Transcript::new(agent.as_ref(), options, vec![&complete], false).unwrap();
            if as_run {
                let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
                transcript.on_lines(Source::Stdout, &text, Instant::now(), None);
            } else {
                feed(&mut transcript, Source::Stdout, lines);
            }
            transcript.finish()
        };
        let answer = "Done. <promise>COMPLETE</promise>";
        let report = "Tokens: 1.2k sent, 35 received. Cost: $0.02 message, $0.05 session.";
        for as_run in [false, true] {
            let found = findings(
                AgentKind::Aider,
                &["Applied edit to a.txt", answer, report, ""],
                as_run,
            );
            assert_eq!(found.promises, [true], "as a run: {as_run}");
            assert_eq!(
                found.usage.map(|usage| (usage.input, usage.output)),
                Some((1200, 35))
            );
            assert_eq!(found.cost, Some(0.02));
            assert_eq!(found.tools.get("edit"), Some(&1));
            let more = findings(AgentKind::Aider, &[answer, report, "more text"], as_run);
            assert_eq!(
                more.promises,
                [false],
                "a line after the report ends the answer"
            );
            assert!(more.usage.is_some(), "as a run: {as_run}");
            // Another agent's line that looks like one is just a line.
            let other = findings(AgentKind::OpenCode, &[answer, report], as_run);
            assert_eq!(other.promises, [false]);
            assert_eq!(other.usage, None);
        }
    }

    #[test]
    fn stderr_never_completes() {
        let agent = AgentKind::OpenCode.agent();
        let complete = Promise::new("COMPLETE", crate::promise::PromiseFormat::Xml);
        let mut transcript = Transcript::new(
            agent.as_ref(),
            quiet(OutputFormat::Text),
            vec![&complete],
            false,
        )
        .unwrap();
        feed(
            &mut transcript,
            Source::Stderr,
            &["<promise>COMPLETE</promise>"],
        );
        assert_eq!(transcript.finish().promises, [false]);
    }

    #[test]
    fn tools_and_errors_are_counted_and_bounded() {
        let agent = AgentKind::OpenCode.agent();
        let mut transcript =
            Transcript::new(agent.as_ref(), quiet(OutputFormat::Text), vec![], false).unwrap();
        feed(
            &mut transcript,
            Source::Stdout,
            &["|  Bash ls", "|  Bash pwd", "\x1b[1m|  Read\x1b[0m a"],
        );
        let errors: Vec<String> = (0..20).map(|i| format!("Error: number {i}")).collect();
        let errors: Vec<&str> = errors.iter().map(String::as_str).collect();
        feed(&mut transcript, Source::Stderr, &errors);
        let findings = transcript.finish();
        assert_eq!(findings.tools["Bash"], 2);
        assert_eq!(findings.tools["Read"], 1);
        assert_eq!(findings.errors.len(), MAX_ERRORS);
        assert_eq!(findings.errors[0], "Error: number 0");
    }

    #[test]
    fn the_loop_hears_the_final_tool_counts_and_the_terminal_does_not_repeat_them() {
        let agent = AgentKind::OpenCode.agent();
        let summaries = std::cell::RefCell::new(Vec::new());
        let display = DisplayOptions {
            stream: true,
            ..quiet(OutputFormat::Text)
        };
        let mut transcript = Transcript::new(agent.as_ref(), display, vec![], false)
            .unwrap()
            .on_tools(|tools| summaries.borrow_mut().push(tools.values().sum::<u64>()));
        feed(&mut transcript, Source::Stdout, &["|  Bash ls", "done"]);
        transcript.finish();
        // When the tool ran, and the final counts (the `tools` events as they always were).
        assert_eq!(*summaries.borrow(), [1, 1]);
        // Without a loop to hear them, the final line that says the same again is left out.
        let (voice, captured) = crate::output::Voice::capturing(false, None, false);
        let mut transcript = Transcript::new(agent.as_ref(), display, vec![], false)
            .unwrap()
            .with_voice(voice);
        feed(&mut transcript, Source::Stdout, &["|  Bash ls", "done"]);
        transcript.finish();
        let tool_lines = captured
            .lock()
            .unwrap()
            .iter()
            .filter(|line| line.contains("| Tools"))
            .count();
        assert_eq!(tool_lines, 1);
        // A tool counted after the last summary is told at the end.
        let summaries = std::cell::RefCell::new(Vec::new());
        let mut transcript = Transcript::new(agent.as_ref(), display, vec![], false)
            .unwrap()
            .on_tools(|tools| summaries.borrow_mut().push(tools.values().sum::<u64>()));
        feed(
            &mut transcript,
            Source::Stdout,
            &["|  Bash ls", "|  Read a", "done"],
        );
        transcript.finish();
        assert_eq!(*summaries.borrow(), [1, 2]);
    }

    #[test]
    fn a_failure_the_agent_retries_by_itself_is_not_shown() {
        let agent = AgentKind::Pi.agent();
        let (voice, captured) = crate::output::Voice::capturing(false, None, false);
        let display = DisplayOptions {
            stream: true,
            ..quiet(OutputFormat::Json)
        };
        let mut transcript = Transcript::new(agent.as_ref(), display, vec![], false)
            .unwrap()
            .with_voice(voice);
        let failed = r#"{"type":"message_end","message":{"role":"assistant","content":[],"stopReason":"error","errorMessage":"429 busy"}}"#;
        let retry = |n: u32| {
            format!(
                r#"{{"type":"auto_retry_start","attempt":{n},"maxAttempts":2,"errorMessage":"429 busy"}}"#
            )
        };
        let (first, second) = (retry(1), retry(2));
        feed(
            &mut transcript,
            Source::Stdout,
            &[failed, &first, failed, &second, failed],
        );
        let findings = transcript.finish();
        assert!(findings.failure.is_some());
        let shown = captured.lock().unwrap().clone();
        let failures = shown.iter().filter(|line| line.contains("❌")).count();
        let retries = shown.iter().filter(|line| line.contains("↻")).count();
        assert_eq!((failures, retries), (1, 2), "{shown:#?}");
        assert!(shown.last().unwrap().contains("❌ pi failed"), "{shown:#?}");
    }

    #[test]
    fn json_events_drive_tools_usage_and_the_final_message() {
        let lines = [
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"I will print <promise>COMPLETE</promise> later"}]}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Write","input":{"file_path":"a.txt"}}]}}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"<promise>COMPLETE</promise>"}]}}"#,
            "not json at all",
            r#"{"type":"mystery"}"#,
            r#"{"type":"result","is_error":false,"result":"Done.\n<promise>COMPLETE</promise>","total_cost_usd":0.5,"num_turns":2,"usage":{"input_tokens":10,"output_tokens":5}}"#,
        ];
        let findings = run(AgentKind::ClaudeCode, OutputFormat::Json, false, &lines);
        assert_eq!(findings.promises, [true]);
        assert_eq!(findings.tools["Write"], 1);
        assert_eq!(
            findings.usage,
            Some(Usage {
                input: 10,
                output: 5,
                ..Usage::default()
            })
        );
        assert_eq!(findings.cost, Some(0.5));
        assert_eq!(findings.turns, Some(2));
        assert!(findings.failure.is_none());
    }

    #[test]
    fn a_promise_in_a_tool_result_or_early_text_does_not_count() {
        let lines = [
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"<promise>COMPLETE</promise>"}]}}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"file says <promise>COMPLETE</promise>"}]}}"#,
            r#"{"type":"result","is_error":false,"result":"Still working on it."}"#,
        ];
        assert_eq!(
            run(AgentKind::ClaudeCode, OutputFormat::Json, false, &lines).promises,
            [false]
        );
    }

    #[test]
    fn failures_are_recorded() {
        let lines =
            [r#"{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized"}}"#];
        let failure = run(AgentKind::Codex, OutputFormat::Json, false, &lines)
            .failure
            .unwrap();
        assert_eq!(failure.kind, crate::agents::FailureKind::Auth);
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
