//! Everything ralph shows on the terminal. No other module prints.
//!
//! Agent output is written through a large buffer that the loop flushes at every tick, so a
//! chatty agent costs one write per chunk instead of one per line; ralph's own messages flush
//! it first, so the two never interleave out of order. Write errors (a closed pipe, a full disk)
//! are ignored: losing the display must never stop the loop.

mod agents;
mod commands;
pub(crate) mod format;
pub(crate) mod html;
mod logs;
mod messages;
mod parallel;
mod remote;
pub(crate) mod report;
pub(crate) mod status;
pub(crate) mod watch;

use std::io::{self, BufWriter, IsTerminal as _, Stdout, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use crate::event::{LoopEvent, Reporter, Stamped};

pub(crate) use agents::*;
pub(crate) use commands::*;
pub(crate) use logs::*;
pub(crate) use messages::*;
pub(crate) use parallel::*;
pub(crate) use remote::*;

/// When ralph colours its own messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set.
    #[default]
    Auto,
    Always,
    Never,
}

static COLOR_STDOUT: AtomicBool = AtomicBool::new(false);
static COLOR_STDERR: AtomicBool = AtomicBool::new(false);
static JSON: AtomicBool = AtomicBool::new(false);

/// Sets the colour choice and JSON-lines mode for the rest of the run.
pub(crate) fn configure(color: ColorChoice, no_color: bool, json: bool) {
    let decide = |is_terminal: bool| match color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => is_terminal && !no_color,
    };
    COLOR_STDOUT.store(
        decide(io::stdout().is_terminal()) && !json,
        Ordering::Relaxed,
    );
    COLOR_STDERR.store(decide(io::stderr().is_terminal()), Ordering::Relaxed);
    JSON.store(json, Ordering::Relaxed);
}

thread_local! {
    /// The task a parallel worker thread works on: its messages carry `[id] `, and its agent's
    /// own output is shown only with `--verbose` (then prefixed too, line by line).
    static WORKER: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
    /// `--verbose`, and whether the agent's output is at the start of a line.
    static WORKER_ECHO: std::cell::Cell<(bool, bool)> = const { std::cell::Cell::new((false, true)) };
}

/// Marks this thread as the worker of task `id` (or, with `None`, as no worker); `verbose`:
/// its agent's output is shown.
pub(crate) fn set_worker(id: Option<&str>, verbose: bool) {
    WORKER.with(|worker| *worker.borrow_mut() = id.map(str::to_owned));
    WORKER_ECHO.with(|echo| echo.set((verbose, true)));
}

/// For a worker's agent output: `None` to hide it, else the prefix to write first (empty in
/// the middle of a line).
fn worker_echo(ends_line: bool) -> Option<Option<String>> {
    let id = worker()?;
    let (verbose, at_start) = WORKER_ECHO.with(std::cell::Cell::get);
    if !verbose {
        return None;
    }
    WORKER_ECHO.with(|echo| echo.set((true, ends_line)));
    Some(at_start.then(|| format!("[{id}] ")))
}

/// The task of this thread's worker, if it is one.
fn worker() -> Option<String> {
    WORKER.with(|worker| worker.borrow().clone())
}

/// Lines as this thread shows them: a worker's prefixed with its task, without blank lines.
fn for_thread<'a>(lines: &'a [&'a str]) -> Vec<std::borrow::Cow<'a, str>> {
    match worker() {
        None => lines.iter().map(|line| (*line).into()).collect(),
        Some(id) => lines
            .iter()
            .flat_map(|line| line.lines())
            .filter(|line| !line.trim().is_empty())
            .map(|line| format!("[{id}] {line}").into())
            .collect(),
    }
}

/// Whether a run prints JSON events instead of human output.
/// Whether ralph's own messages on stdout are coloured (`--color`, `NO_COLOR`, a terminal).
pub(crate) fn colour_on_stdout() -> bool {
    COLOR_STDOUT.load(Ordering::Relaxed)
}

pub(crate) fn is_json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// How a message is coloured.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Style {
    Bold,
    Good,
    Warn,
    Bad,
    Dim,
}

/// `text` wrapped in the style's escape codes when colour is on for that stream.
pub(crate) fn paint(style: Style, text: &str, stderr: bool) -> String {
    let on = if stderr { &COLOR_STDERR } else { &COLOR_STDOUT };
    if !on.load(Ordering::Relaxed) || text.is_empty() {
        return text.to_owned();
    }
    let code = match style {
        Style::Bold => "1",
        Style::Good => "1;32",
        Style::Warn => "1;33",
        Style::Bad => "1;31",
        Style::Dim => "2",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// `--json`: every event as one line on stdout, its public object.
pub(crate) struct JsonLines;

impl Reporter for JsonLines {
    fn event(&mut self, event: &Stamped<'_>) {
        let mut out = stdout();
        let _ = writeln!(out, "{}", event.to_value());
        let _ = out.flush();
    }
}

/// The terminal: the human lines of each event (nothing in JSON-lines mode but warnings).
pub(crate) struct Human;

impl Reporter for Human {
    fn event(&mut self, stamped: &Stamped<'_>) {
        match stamped.event {
            LoopEvent::Tools { tools } => tool_progress(tools),
            LoopEvent::Verified(result) => verify_finished(result),
            LoopEvent::Fallback { to, reason, .. } => fallback_switch(to, reason),
            LoopEvent::RunEnded(end) => run_ended(end),
            LoopEvent::TaskStarted {
                task,
                description,
                branch,
            } => worker_started(task, description, branch),
            LoopEvent::TaskMerged { task, into, commit } => task_merged(task, into, commit),
            LoopEvent::MergeConflicted { task, files } => merge_conflicted(task, files),
            LoopEvent::NotesCarried {
                task,
                into,
                branch,
                tasks,
                problems,
                ..
            } => notes_carried(task, into, branch, tasks, problems),
            LoopEvent::TaskFailed { task, reason } => task_given_up(task, reason),
            LoopEvent::ParallelEnded(end) => parallel_ended(end),
            LoopEvent::WorkerStarted {
                worker,
                remote,
                base,
            } => remote_worker_started(worker, remote, base),
            LoopEvent::TaskClaimed {
                task,
                description,
                taken_over_from,
            } => task_claimed(task, description, taken_over_from.as_deref()),
            LoopEvent::ClaimLost { task } => claim_lost(task),
            LoopEvent::WorkerEnded { reason, exit_code } => remote_worker_ended(reason, *exit_code),
            LoopEvent::RunStarted { .. }
            | LoopEvent::IterationStarted { .. }
            | LoopEvent::IterationFinished(_)
            | LoopEvent::RetryWait { .. }
            | LoopEvent::Completed { .. } => {}
        }
    }
}

static STDOUT: LazyLock<Mutex<BufWriter<Stdout>>> =
    LazyLock::new(|| Mutex::new(BufWriter::with_capacity(64 * 1024, io::stdout())));

pub(crate) fn stdout() -> MutexGuard<'static, BufWriter<Stdout>> {
    STDOUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes lines to stdout and flushes (nothing in JSON-lines mode).
pub(crate) fn say(lines: &[&str]) {
    if is_json() {
        return;
    }
    let mut out = stdout();
    for line in for_thread(lines) {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}

/// Writes lines to stderr (after flushing stdout, to keep the order).
pub(crate) fn warn(lines: &[&str]) {
    let _ = stdout().flush();
    let mut err = io::stderr().lock();
    for line in for_thread(lines) {
        let line = line.as_ref();
        // A worker's line starts with `[id] `: the icon after it sets the style.
        let bare = match worker() {
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

/// Writes a piece of the agent's stdout without flushing.
pub(crate) fn agent_stdout(text: &str, ends_line: bool) {
    if is_json() {
        return;
    }
    let mut out = stdout();
    if worker().is_some() {
        let Some(prefix) = worker_echo(ends_line) else {
            return;
        };
        let _ = out.write_all(prefix.unwrap_or_default().as_bytes());
    }
    let _ = out.write_all(text.as_bytes());
    if ends_line {
        let _ = out.write_all(b"\n");
    }
}

/// Whole lines of the agent's output (`text` ends with a line break), in one write.
pub(crate) fn agent_lines(text: &str, to_stderr: bool) {
    if is_json() {
        return;
    }
    if worker().is_some() {
        // A worker's lines each carry its task.
        for line in text.split_terminator('\n') {
            if to_stderr {
                agent_stderr(line, true);
            } else {
                agent_stdout(line, true);
            }
        }
        return;
    }
    if to_stderr {
        let _ = stdout().flush();
        let _ = io::stderr().lock().write_all(text.as_bytes());
    } else {
        let _ = stdout().write_all(text.as_bytes());
    }
}

/// A piece of a command's output (a verification, a hook), with `margin` at the start of each
/// line. Not in JSON mode (stdout carries only events) or in a parallel worker.
pub(crate) fn command_output(margin: &str, text: &str, (starts_line, ends_line): (bool, bool)) {
    if is_json() || is_worker() {
        return;
    }
    let mut out = stdout();
    if starts_line {
        let _ = out.write_all(margin.as_bytes());
    }
    let _ = out.write_all(text.as_bytes());
    if ends_line {
        let _ = out.write_all(b"\n");
    }
}

/// Writes a piece of the agent's stderr.
pub(crate) fn agent_stderr(text: &str, ends_line: bool) {
    if is_json() {
        return;
    }
    let _ = stdout().flush();
    let mut err = io::stderr().lock();
    if worker().is_some() {
        let Some(prefix) = worker_echo(ends_line) else {
            return;
        };
        let _ = err.write_all(prefix.unwrap_or_default().as_bytes());
    }
    let _ = err.write_all(text.as_bytes());
    if ends_line {
        let _ = err.write_all(b"\n");
    }
}

/// Copies a reader (buffered agent output) to stdout or stderr.
pub(crate) fn copy_to(reader: &mut dyn io::Read, to_stderr: bool) {
    if is_json() || worker().is_some() {
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

/// Whether this thread's agent output is hidden (a parallel worker's).
pub(crate) fn is_worker() -> bool {
    worker().is_some()
}

/// Flushes buffered agent output.
pub(crate) fn flush() {
    let _ = stdout().flush();
}

/// Prints an error as one line on stderr: `Error: …`.
pub(crate) fn error(message: &str) {
    warn(&[&format!("{} {message}", paint(Style::Bad, "Error:", true))]);
}
