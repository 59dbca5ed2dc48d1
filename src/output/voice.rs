//! A loop's voice: how its lines and its agent's output reach the one shared terminal.
//!
//! A run of several loops shares the terminal, so each loop speaks with its own voice: a task
//! loop of `--parallel` or `--worker` prefixes its lines with `[id] `, drops blank lines and shows
//! its agent's own output only with `--verbose` (prefixed too); with `--json`, stdout carries
//! only events, so nothing human is written there (warnings stay on stderr).

use std::borrow::Cow;
use std::io::{self, IsTerminal as _, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Style, paint, stdout};

/// A test's record of what a voice would have written: `out: …` and `err: …`, one entry per
/// line of `say` and `warn`, one per piece of output otherwise (`⏎` marks a line's end).
#[cfg(test)]
pub(crate) type Captured = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// How one loop's human output is shown.
#[derive(Debug)]
pub(crate) struct Voice {
    /// `--json`: nothing human on stdout.
    json: bool,
    /// A task loop's id: its lines carry `[id] `.
    task: Option<String>,
    /// Whether the agent's own output and verification output are shown.
    echo: bool,
    /// Whether the agent's (or a command's) output is at the start of a line.
    at_line_start: AtomicBool,
    /// A test's record: what would be written goes there instead.
    #[cfg(test)]
    capture: Option<Captured>,
}

impl Clone for Voice {
    fn clone(&self) -> Self {
        Self {
            json: self.json,
            task: self.task.clone(),
            echo: self.echo,
            at_line_start: AtomicBool::new(self.at_line_start.load(Ordering::Relaxed)),
            #[cfg(test)]
            capture: self.capture.clone(),
        }
    }
}

impl Default for Voice {
    fn default() -> Self {
        Self::plain()
    }
}

impl Voice {
    /// The terminal as a command uses it: everything shown, nothing prefixed.
    pub(crate) fn plain() -> Self {
        Self {
            json: false,
            task: None,
            echo: true,
            at_line_start: AtomicBool::new(true),
            #[cfg(test)]
            capture: None,
        }
    }

    /// A loop's voice: `task` for a task loop of a run; `verbose` shows a task loop's agent.
    pub(crate) fn for_loop(json: bool, task: Option<String>, verbose: bool) -> Self {
        let echo = !json && (task.is_none() || verbose);
        Self {
            json,
            task,
            echo,
            at_line_start: AtomicBool::new(true),
            #[cfg(test)]
            capture: None,
        }
    }

    /// A loop's voice (as [`Voice::for_loop`]) that records what it would write, for a test.
    #[cfg(test)]
    pub(crate) fn capturing(json: bool, task: Option<String>, verbose: bool) -> (Self, Captured) {
        let captured = Captured::default();
        let voice = Self {
            capture: Some(captured.clone()),
            ..Self::for_loop(json, task, verbose)
        };
        (voice, captured)
    }

    /// In a test with a capturing voice, records `text` (a piece of output, or whole lines
    /// when `lines`) as written to `stream` and says so; nothing is written then.
    #[cfg(test)]
    fn captured(&self, stream: &str, text: &str, lines: bool) -> bool {
        let Some(capture) = &self.capture else {
            return false;
        };
        let mut capture = capture
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = |text: &str| {
            if text.is_empty() {
                format!("{stream}:")
            } else {
                format!("{stream}: {text}")
            }
        };
        if lines {
            capture.extend(text.split('\n').map(entry));
        } else {
            capture.push(entry(&text.replace('\n', "⏎")));
        }
        true
    }

    /// This voice without the agent's own output (ralph's lines stay): a planning call's answer
    /// is a JSON plan, which ralph shows as its own table.
    pub(crate) fn without_agent_output(&self) -> Self {
        Self {
            echo: false,
            ..self.clone()
        }
    }

    /// Whether this is a task loop's voice (its lines are prefixed; no boxes, no banner).
    /// `--json`: stdout carries events, never a person's lines.
    pub(crate) fn is_json(&self) -> bool {
        self.json
    }

    pub(crate) fn is_task_loop(&self) -> bool {
        self.task.is_some()
    }

    /// Whether a countdown may update one line in place: ralph's own terminal, one loop on it.
    pub(crate) fn in_place(&self) -> bool {
        #[cfg(test)]
        if self.capture.is_some() {
            return false;
        }
        !self.json && self.task.is_none() && io::stdout().is_terminal()
    }

    /// Lines as this loop shows them: a task loop's prefixed with its task, without blank lines.
    fn shown<'a>(&self, lines: &'a [&'a str]) -> Vec<Cow<'a, str>> {
        match &self.task {
            None => lines.iter().map(|line| (*line).into()).collect(),
            Some(id) => lines
                .iter()
                .flat_map(|line| line.lines())
                .filter(|line| !line.trim().is_empty())
                .map(|line| format!("[{id}] {line}").into())
                .collect(),
        }
    }

    /// Writes lines to stdout and flushes (nothing with `--json`).
    pub(crate) fn say(&self, lines: &[&str]) {
        if self.json {
            return;
        }
        #[cfg(test)]
        if self.capture.is_some() {
            for line in self.shown(lines) {
                self.captured("out", &line, true);
            }
            return;
        }
        let mut out = stdout();
        for line in self.shown(lines) {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }

    /// Writes lines to stderr (after flushing stdout, to keep the order); a line's icon sets its
    /// colour.
    pub(crate) fn warn(&self, lines: &[&str]) {
        #[cfg(test)]
        if self.capture.is_some() {
            for line in self.shown(lines) {
                self.captured("err", &line, true);
            }
            return;
        }
        let _ = stdout().flush();
        let mut err = io::stderr().lock();
        for line in self.shown(lines) {
            let line = line.as_ref();
            let bare = match &self.task {
                Some(_) => line.split_once("] ").map_or(line, |(_, rest)| rest),
                None => line,
            };
            let style = if bare.starts_with("⚠️") {
                Some(Style::Warn)
            } else if bare.starts_with("❌") {
                Some(Style::Bad)
            } else {
                None
            };
            let line = style.map_or_else(|| line.to_owned(), |style| paint(style, line, true));
            let _ = writeln!(err, "{line}");
        }
    }

    /// The prefix to write before a piece of output that ends a line or not: the task's at the
    /// start of a line of a task loop, nothing otherwise.
    fn piece_prefix(&self, ends_line: bool) -> Option<String> {
        let at_start = self.at_line_start.swap(ends_line, Ordering::Relaxed);
        self.task
            .as_ref()
            .filter(|_| at_start)
            .map(|id| format!("[{id}] "))
    }

    /// Writes a piece of the agent's stdout without flushing.
    pub(crate) fn agent_stdout(&self, text: &str, ends_line: bool) {
        self.agent_piece(text, ends_line, false);
    }

    /// Writes a piece of the agent's stderr.
    pub(crate) fn agent_stderr(&self, text: &str, ends_line: bool) {
        self.agent_piece(text, ends_line, true);
    }

    /// A piece of the agent's output, prefixed at the start of a task loop's line; stderr after
    /// flushing stdout, to keep the order.
    fn agent_piece(&self, text: &str, ends_line: bool, to_stderr: bool) {
        if !self.echo {
            return;
        }
        let prefix = self.piece_prefix(ends_line).unwrap_or_default();
        #[cfg(test)]
        if self.capture.is_some() {
            let end = if ends_line { "\n" } else { "" };
            let stream = if to_stderr { "err" } else { "out" };
            self.captured(stream, &format!("{prefix}{text}{end}"), false);
            return;
        }
        let write = |to: &mut dyn Write| {
            let _ = to.write_all(prefix.as_bytes());
            let _ = to.write_all(text.as_bytes());
            if ends_line {
                let _ = to.write_all(b"\n");
            }
        };
        if to_stderr {
            let _ = stdout().flush();
            write(&mut io::stderr().lock());
        } else {
            write(&mut *stdout());
        }
    }

    /// Whole lines of the agent's output (`text` ends with a line break), in one write.
    pub(crate) fn agent_lines(&self, text: &str, to_stderr: bool) {
        if !self.echo {
            return;
        }
        if self.task.is_some() {
            // A task loop's lines each carry its task.
            for line in text.split_terminator('\n') {
                if to_stderr {
                    self.agent_stderr(line, true);
                } else {
                    self.agent_stdout(line, true);
                }
            }
            return;
        }
        #[cfg(test)]
        if self.captured(if to_stderr { "err" } else { "out" }, text, false) {
            return;
        }
        if to_stderr {
            let _ = stdout().flush();
            let _ = io::stderr().lock().write_all(text.as_bytes());
        } else {
            let _ = stdout().write_all(text.as_bytes());
        }
    }

    /// Copies a reader (buffered agent output) to stdout or stderr.
    pub(crate) fn copy_to(&self, reader: &mut dyn io::Read, to_stderr: bool) {
        if !self.echo || self.task.is_some() {
            return;
        }
        #[cfg(test)]
        if self.capture.is_some() {
            let mut text = Vec::new();
            let _ = reader.read_to_end(&mut text);
            let stream = if to_stderr { "err" } else { "out" };
            self.captured(stream, &String::from_utf8_lossy(&text), false);
            return;
        }
        let mut out = stdout();
        if to_stderr {
            let _ = out.flush();
            let _ = io::copy(reader, &mut io::stderr().lock());
        } else {
            let _ = io::copy(reader, &mut *out);
            let _ = out.flush();
        }
    }

    /// A piece of a command's output, with `margin` at the start of each line: a verification's
    /// (shown where the agent's is), or a hook's (`always`: shown in a task loop too).
    pub(crate) fn command_output(
        &self,
        margin: &str,
        text: &str,
        (starts_line, ends_line): (bool, bool),
        always: bool,
    ) {
        if self.json || !(self.echo || always) {
            return;
        }
        #[cfg(test)]
        if self.capture.is_some() {
            let start = match (&self.task, starts_line) {
                (Some(id), true) => format!("[{id}] {margin}"),
                (None, true) => margin.to_owned(),
                (_, false) => String::new(),
            };
            let end = if ends_line { "\n" } else { "" };
            self.captured("out", &format!("{start}{text}{end}"), false);
            return;
        }
        let mut out = stdout();
        if starts_line {
            if let Some(id) = &self.task {
                let _ = write!(out, "[{id}] ");
            }
            let _ = out.write_all(margin.as_bytes());
        }
        let _ = out.write_all(text.as_bytes());
        if ends_line {
            let _ = out.write_all(b"\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_loops_lines_carry_its_task_and_lose_blank_lines() {
        let voice = Voice::for_loop(false, Some("api".to_owned()), false);
        let shown: Vec<String> = voice
            .shown(&["", "🔄 Iteration 1", "two\nlines"])
            .into_iter()
            .map(Cow::into_owned)
            .collect();
        assert_eq!(shown, ["[api] 🔄 Iteration 1", "[api] two", "[api] lines"]);
        assert!(voice.is_task_loop() && !voice.echo);
        assert!(Voice::for_loop(false, Some("api".to_owned()), true).echo);
        assert!(
            !Voice::for_loop(true, None, true).echo,
            "--json shows no agent output"
        );
    }

    #[test]
    fn a_piece_is_prefixed_only_at_the_start_of_a_line() {
        let voice = Voice::for_loop(false, Some("t".to_owned()), true);
        assert_eq!(voice.piece_prefix(false).as_deref(), Some("[t] "));
        assert_eq!(voice.piece_prefix(true), None, "the rest of the line");
        assert_eq!(voice.piece_prefix(true).as_deref(), Some("[t] "));
        assert_eq!(Voice::plain().piece_prefix(true), None);
    }

    #[test]
    fn a_capturing_voice_records_lines_and_pieces_as_written() {
        let (voice, captured) = Voice::capturing(false, Some("t".to_owned()), true);
        voice.say(&["", "one", "two\nthree"]);
        voice.warn(&["⚠️  careful"]);
        voice.agent_stdout("par", false);
        voice.agent_stdout("tial", true);
        voice.agent_stderr("oops", true);
        voice.agent_lines("a\nb\n", false);
        voice.command_output("   │ ", "ok", (true, true), false);
        voice.clone().say(&["cloned"]);
        assert_eq!(
            *captured.lock().unwrap(),
            [
                "out: [t] one",
                "out: [t] two",
                "out: [t] three",
                "err: [t] ⚠️  careful",
                "out: [t] par",
                "out: tial⏎",
                "err: [t] oops⏎",
                "out: [t] a⏎",
                "out: [t] b⏎",
                "out: [t]    │ ok⏎",
                "out: [t] cloned",
            ]
        );
        let (plain, captured) = Voice::capturing(false, None, false);
        plain.say(&["", "two\nlines"]);
        plain.agent_lines("a\nb\n", true);
        plain.copy_to(&mut "buffered\n".as_bytes(), false);
        assert!(!plain.in_place());
        assert_eq!(
            *captured.lock().unwrap(),
            [
                "out:",
                "out: two",
                "out: lines",
                "err: a⏎b⏎",
                "out: buffered⏎"
            ]
        );
    }
}
