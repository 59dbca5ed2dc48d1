//! Everything ralph shows on the terminal. No other module prints.
//!
//! Agent output is written through a large buffer that the loop flushes at every tick, so a
//! chatty agent costs one write per chunk instead of one per line; ralph's own messages flush
//! it first, so the two never interleave out of order. Write errors (a closed pipe, a full disk)
//! are ignored: losing the display must never stop the loop.

pub(crate) mod format;
mod messages;
pub(crate) mod status;

use std::io::{self, BufWriter, Stdout, Write as _};
use std::sync::{LazyLock, Mutex, MutexGuard};

pub(crate) use messages::*;

static STDOUT: LazyLock<Mutex<BufWriter<Stdout>>> =
    LazyLock::new(|| Mutex::new(BufWriter::with_capacity(64 * 1024, io::stdout())));

pub(crate) fn stdout() -> MutexGuard<'static, BufWriter<Stdout>> {
    STDOUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes lines to stdout and flushes.
pub(crate) fn say(lines: &[&str]) {
    let mut out = stdout();
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}

/// Writes lines to stderr (after flushing stdout, to keep the order).
pub(crate) fn warn(lines: &[&str]) {
    let _ = stdout().flush();
    let mut err = io::stderr().lock();
    for line in lines {
        let _ = writeln!(err, "{line}");
    }
}

/// Writes a piece of the agent's stdout without flushing.
pub(crate) fn agent_stdout(text: &str, ends_line: bool) {
    let mut out = stdout();
    let _ = out.write_all(text.as_bytes());
    if ends_line {
        let _ = out.write_all(b"\n");
    }
}

/// Writes a piece of the agent's stderr.
pub(crate) fn agent_stderr(text: &str, ends_line: bool) {
    let _ = stdout().flush();
    let mut err = io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    if ends_line {
        let _ = err.write_all(b"\n");
    }
}

/// Copies a reader (buffered agent output) to stdout or stderr.
pub(crate) fn copy_to(reader: &mut dyn io::Read, to_stderr: bool) {
    let mut out = stdout();
    if to_stderr {
        let _ = out.flush();
        let _ = io::copy(reader, &mut io::stderr().lock());
    } else {
        let _ = io::copy(reader, &mut *out);
        let _ = out.flush();
    }
}

/// Flushes buffered agent output.
pub(crate) fn flush() {
    let _ = stdout().flush();
}

/// Prints an error as one line on stderr: `Error: …`.
pub(crate) fn error(message: &str) {
    warn(&[&format!("Error: {message}")]);
}

/// Prints a fatal error with its cause chain on one line.
pub(crate) fn fatal(err: &anyhow::Error) {
    error(&format!("{err:#}"));
}
