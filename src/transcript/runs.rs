//! Chunks and runs of whole plain lines, taken at once: the usual output (text mode, or stderr)
//! arrives in chunks of hundreds of lines, and looking at each line alone costs more than moving
//! it. A chunk is searched once for error stems; in a run of its whole lines one search finds
//! the tool lines, one the lines that may be errors, the lines between hidden tool lines are
//! written in one call, and the log takes the run in one pass. What the run path does not cover
//! (escape codes, carriage returns, `--promise-anywhere`) goes line by line as before.

use std::sync::LazyLock;
use std::time::Instant;

use regex::Regex;

use super::{AgentKind, ERROR_HINT, LEGACY_PLUGIN, MAX_ERRORS, OutputFormat, Transcript};
use crate::agents::{Agent, AgentEvent};
use crate::stream::{ParsedLines, Segment, Source};

/// What every error line holds, in any case: a chunk without one of these has no error line.
static ERROR_STEMS: LazyLock<[memchr::memmem::Finder<'static>; 3]> = LazyLock::new(|| {
    ["error", "fail", "exception"].map(|stem| memchr::memmem::Finder::new(stem.as_bytes()))
});

/// Whether `data` may hold an error line: one of [`ERROR_STEMS`] in its ASCII-lowercase copy
/// (made in `scratch`; setting bit 5 lowers every letter and only ever adds a match).
pub(super) fn may_hold_error(data: &[u8], scratch: &mut Vec<u8>) -> bool {
    scratch.clear();
    scratch.extend(data.iter().map(|byte| byte | 0x20));
    ERROR_STEMS.iter().any(|stem| stem.find(scratch).is_some())
}

/// Whether a stdout line in JSON mode (or its first piece) may be an event: it opens an object.
pub(super) fn opens_event(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

/// The events of a stdout line in JSON mode (`None`: it is not an event).
pub(crate) fn events_in(agent: &dyn Agent, line: &str) -> Option<Vec<AgentEvent>> {
    if opens_event(line) {
        agent.parse_event(line)
    } else {
        None
    }
}

/// `pattern` made to match on any line of a run: `^` and `$` at each line's ends.
pub(super) fn multi_line(pattern: &Regex) -> Option<Regex> {
    Regex::new(&format!("(?m:{})", pattern.as_str())).ok()
}

/// The line of `text` around byte `at`: its start and the position of its line break (or the
/// end of the text).
fn line_around(text: &str, at: usize) -> (usize, usize) {
    let bytes = text.as_bytes();
    let start = memchr::memrchr(b'\n', &bytes[..at]).map_or(0, |newline| newline + 1);
    let end = memchr::memchr(b'\n', &bytes[at..]).map_or(text.len(), |newline| at + newline);
    (start, end)
}

impl Transcript<'_> {
    /// Whole lines (`text` starts a line and ends with `\n`).
    pub(super) fn lines(
        &mut self,
        source: Source,
        text: &str,
        now: Instant,
        parsed: Option<ParsedLines>,
    ) {
        let plain = self.display.format == OutputFormat::Text || source == Source::Stderr;
        if !plain && self.event_line.is_none() {
            self.event_run(text, now, parsed);
            return;
        }
        let tools_searchable = self.agent.tool_pattern().is_none() || self.tool_lines.is_some();
        if !plain
            || self.promises.anywhere
            || !tools_searchable
            || memchr::memchr2(0x1b, b'\r', text.as_bytes()).is_some()
        {
            crate::stream::each_line(source, text, now, self);
            return;
        }
        let index = usize::from(source == Source::Stderr);
        if let Some(log) = &mut self.log {
            log.lines(source == Source::Stderr, crate::stream::lines_of(text));
        }
        // The run holds the chunk's first segment, and starts a line.
        self.chunk_first[index] = false;
        self.hiding_line[index] = false;
        if self.chunk_may_err[index] {
            self.note_error_lines(text);
        }
        if self.agent.kind() == Some(AgentKind::OpenCode)
            && text.contains("ralph-wiggum")
            && LEGACY_PLUGIN.is_match(text)
        {
            self.findings.legacy_plugin = true;
        }
        if source == Source::Stdout {
            self.stdout_run_ended(text, now);
        }
        // Whole lines, each with its line break: the answer gets them as they are (a planning
        // call reads its plan there, in text mode as in JSON mode).
        self.keep_answer(source, text, false);
        self.show_tools_and_lines(source, text, now);
    }

    /// A run of whole plain stdout lines: what the lines the agent prints after its answer tell
    /// (see `Agent::trailer`) is taken in, and the last of the others is the answer's last line
    /// so far.
    fn stdout_run_ended(&mut self, text: &str, now: Instant) {
        let has_trailers =
            (self.agent.trailer_marker()).is_some_and(|marker| text.contains(marker));
        let mut last = None;
        for line in text.split_terminator('\n').rev() {
            if line.trim().is_empty() {
                continue;
            }
            let trailer = if has_trailers {
                self.agent.trailer(line)
            } else {
                None
            };
            match trailer {
                Some(events) => events.into_iter().for_each(|event| self.event(event, now)),
                None if last.is_none() => {
                    last = Some(line);
                    if !has_trailers {
                        break;
                    }
                }
                None => {}
            }
        }
        if let Some(line) = last {
            super::set_last_line(&mut self.last_plain_line, line);
        }
    }

    /// A run of stdout lines in JSON mode, handled line by line in order: the reader thread
    /// parsed the last lines already (`parsed`, see [`crate::stream::LineParser`]), the first
    /// are parsed here meanwhile.
    fn event_run(&mut self, text: &str, now: Instant, mut parsed: Option<ParsedLines>) {
        if let Some(log) = &mut self.log {
            log.lines(false, crate::stream::lines_of(text));
        }
        self.chunk_first[0] = false;
        self.segment_may_err = self.chunk_may_err[0];
        // The reader thread's part: the lines from `first` to the end of the run.
        let first = parsed.as_ref().map_or(usize::MAX, |parsed| parsed.first);
        let agent = self.agent;
        for (index, line) in crate::stream::lines_of(text).enumerate() {
            match &mut parsed {
                Some(parsed) if index >= first => {
                    let events = parsed.next_line();
                    self.parsed_line(line, events, now);
                }
                _ => {
                    let events = events_in(agent, line).map(Vec::into_iter);
                    self.parsed_line(line, events, now);
                }
            }
        }
    }

    /// A stdout line in JSON mode with what parsing it gave: its events, or `None` (not JSON,
    /// or not an event ralph knows: shown as text).
    pub(super) fn parsed_line(
        &mut self,
        line: &str,
        events: Option<impl Iterator<Item = AgentEvent>>,
        now: Instant,
    ) {
        match events {
            Some(events) => {
                for event in events {
                    self.event(event, now);
                }
            }
            None => {
                let segment = Segment {
                    source: Source::Stdout,
                    text: line,
                    starts_line: true,
                    ends_line: true,
                    received: now,
                };
                self.plain_segment(&segment, line);
            }
        }
    }

    /// Counts the tool lines of the run and shows the rest (the tool lines too with
    /// `--verbose-tools` or `--no-stream`), in order.
    fn show_tools_and_lines(&mut self, source: Source, text: &str, now: Instant) {
        let hide = !self.display.verbose_tools && self.buffered.is_none();
        let mut shown = 0;
        if let Some(finder) = self.tool_lines.clone() {
            let mut from = 0;
            while from < text.len()
                && let Some(found) = finder.captures_at(text, from)
            {
                let whole = found.get(0).map_or(from..from, |whole| whole.range());
                let (start, end) = line_around(text, whole.start);
                from = end + 1;
                // A match within its line is the line's own; one that runs into the next line
                // is checked on its line alone.
                let tool = match found.get(1) {
                    Some(name) if whole.end <= end => Some(name.as_str().to_owned()),
                    _ => self.agent.tool_in_line(&text[start..end]),
                };
                let Some(tool) = tool else {
                    continue;
                };
                if hide {
                    self.show_lines(source, &text[shown..start], now);
                    shown = from.min(text.len());
                }
                self.count_tool(tool, now);
            }
        }
        self.show_lines(source, &text[shown..], now);
    }

    /// Looks at the lines of the run that hold an error word (or "fail").
    fn note_error_lines(&mut self, text: &str) {
        let mut from = 0;
        while self.findings.errors.len() < MAX_ERRORS
            && from < text.len()
            && let Some(found) = ERROR_HINT.find_at(text, from)
        {
            let (start, end) = line_around(text, found.start());
            self.note_error(&text[start..end], false);
            from = end + 1;
        }
    }

    /// Shows whole lines in one write (or spills them in buffered mode).
    fn show_lines(&mut self, source: Source, text: &str, now: Instant) {
        if text.is_empty() {
            return;
        }
        if let Some(file) = self.spill_file(source) {
            let _ = std::io::Write::write_all(file, text.as_bytes());
            return;
        }
        self.voice.agent_lines(text, source == Source::Stderr);
        self.last_printed = now;
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Seek as _, SeekFrom};
    use std::time::{Duration, Instant};

    use crate::agents::{AgentKind, OutputFormat};
    use crate::promise::{Promise, PromiseFormat};
    use crate::stream::{OutputHandler as _, Source};
    use crate::transcript::{DisplayOptions, Findings, Transcript};

    /// `text` read by a transcript as one chunk, as a run of lines or line by line: what it
    /// found, and what it would show on stdout (`--no-stream`, so nothing is printed here).
    fn read(kind: AgentKind, text: &str, as_run: bool) -> (Findings, String) {
        read_as(kind, OutputFormat::Text, text, as_run)
    }

    fn read_as(
        kind: AgentKind,
        format: OutputFormat,
        text: &str,
        as_run: bool,
    ) -> (Findings, String) {
        let agent = kind.agent();
        let complete = Promise::new("COMPLETE", PromiseFormat::Xml);
        let display = DisplayOptions {
            stream: false,
            verbose_tools: true,
            heartbeat: Duration::from_secs(3600),
            tool_summary: Duration::from_secs(3600),
            format,
        };
        let mut transcript =
            Transcript::new(agent.as_ref(), display, vec![&complete], false).expect("a transcript");
        let now = Instant::now();
        for source in [Source::Stdout, Source::Stderr] {
            transcript.on_chunk(source, text.as_bytes());
            if as_run {
                let parser = transcript.line_parser();
                let parsed = parser
                    .as_ref()
                    .and_then(|parse| crate::stream::parse_run(text.as_bytes(), &mut true, parse));
                transcript.on_lines(source, text, now, parsed);
            } else {
                crate::stream::each_line(source, text, now, &mut transcript);
            }
            transcript.on_chunk_end();
        }
        let (mut shown, _) = transcript.buffered.take().expect("buffered output");
        let mut text = String::new();
        shown.seek(SeekFrom::Start(0)).expect("a spill file");
        shown.read_to_string(&mut text).expect("a spill file");
        (transcript.finish(), text)
    }

    #[test]
    fn a_run_of_lines_is_read_as_its_lines_are() {
        let output = "\
|  Bash  ls -la
plain line
Using
Using Read on a.rs
|  Read  src/lib.rs
✓ write_file hello.txt

Error: the build broke
3 tests FAILED
tests pass, nothing failed here... wait: failed
ralph-wiggum is not yet ready for use. This is a placeholder package.
done <promise>COMPLETE</promise>
  
";
        for kind in [
            AgentKind::OpenCode,
            AgentKind::ClaudeCode,
            AgentKind::Gemini,
        ] {
            let (run, shown) = read(kind, output, true);
            let (lines, shown_by_line) = read(kind, output, false);
            assert_eq!(shown, output, "{kind:?}");
            assert_eq!(shown, shown_by_line, "{kind:?}");
            assert_eq!(run.tools, lines.tools, "{kind:?}");
            assert!(!run.tools.is_empty(), "{kind:?}");
            assert_eq!(run.errors, lines.errors, "{kind:?}");
            assert_eq!(run.errors.len(), 3, "{kind:?}: {:?}", run.errors);
            assert_eq!(run.promises, [true], "{kind:?}");
            assert_eq!(run.promises, lines.promises, "{kind:?}");
            assert_eq!(run.final_text, lines.final_text, "{kind:?}");
            assert_eq!(run.legacy_plugin, lines.legacy_plugin, "{kind:?}");
        }
        // A match that runs from a line into the next does not hide the next line's own tool.
        let (claude, _) = read(AgentKind::ClaudeCode, "Using\nUsing Read\n", true);
        assert_eq!(claude.tools.keys().collect::<Vec<_>>(), ["Read"]);
    }

    #[test]
    fn a_run_of_events_is_read_as_its_lines_are_also_when_parsed_in_two_places() {
        let events = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/agents/opencode-tool-use.jsonl"
        ))
        .expect("the fixture");
        let mut output = String::from("not an event\n{\"broken\": \n");
        // Small and large (parsed in part as the reader thread would).
        for text in [&events, &events.repeat(1 + 70 * 1024 / events.len())] {
            output.truncate("not an event\n{\"broken\": \n".len());
            output.push_str(text);
            let (run, shown) = read_as(AgentKind::OpenCode, OutputFormat::Json, &output, true);
            let (lines, by_line) = read_as(AgentKind::OpenCode, OutputFormat::Json, &output, false);
            assert_eq!(shown, by_line);
            assert!(
                shown.starts_with("not an event\n{\"broken\": \n"),
                "{shown}"
            );
            assert_eq!(run.tools, lines.tools);
            assert!(!run.tools.is_empty());
            assert_eq!(run.usage, lines.usage);
            assert!(run.usage.is_some());
            assert_eq!(run.cost, lines.cost);
            assert_eq!(run.turns, lines.turns);
            assert_eq!(run.session_id, lines.session_id);
            assert_eq!(run.promises, [true]);
            assert_eq!(run.promises, lines.promises);
            assert_eq!(run.final_text, lines.final_text);
        }
    }
}
