//! Iteration logs, hooks and notifications: what is said when they cannot do their work, and
//! hooks' output.

use std::path::Path;

use super::{Voice, say};

/// An iteration's log could not be created; the iteration runs anyway.
pub(crate) fn log_unavailable(out: &Voice, dir: &Path, err: &std::io::Error) {
    out.warn(&[&format!(
        "⚠️  Cannot write this iteration's log in {} ({err}); the iteration runs without one",
        dir.display()
    )]);
}

/// A hook failed or ran out of time; the loop goes on.
pub(crate) fn hook_failed(out: &Voice, (key, goes_on): (&str, bool), why: &str) {
    // `on_complete`, `on_stop` and the hooks of end events run once the loop has ended.
    let after = if goes_on {
        "the loop goes on"
    } else {
        "the loop's outcome is unchanged"
    };
    out.warn(&[&format!(
        "⚠️  The {key} hook failed ({why}); {after}. Check the command in your settings (ralph --config)"
    )]);
}

/// A piece of a hook's output, with a `hook │ ` margin at the start of each line.
pub(crate) fn hook_output(out: &Voice, text: &str, starts_line: bool, ends_line: bool) {
    out.command_output("   hook │ ", text, (starts_line, ends_line), true);
}

/// A notification could not be sent; the loop's outcome is unchanged.
pub(crate) fn notify_failed(out: &Voice, url: &str, why: &str) {
    out.warn(&[&format!(
        "⚠️  Could not notify {url} ({why}); check the URL (ralph --config shows it)"
    )]);
}

/// `--report` wrote its page.
/// `--report -`: the page itself, on stdout.
pub(crate) fn report_page(page: &str) {
    let mut out = super::stdout();
    let _ = std::io::Write::write_all(&mut *out, page.as_bytes());
    let _ = std::io::Write::flush(&mut *out);
}

pub(crate) fn report_written(path: &Path) {
    say(&[&format!("📄 Report written to {}", path.display())]);
}

/// `report = true`: the page could not be written after an iteration; the loop goes on.
pub(crate) fn report_failed(out: &Voice, path: &Path, why: &str) {
    out.warn(&[&format!(
        "⚠️  Cannot update the report {} ({why}); the loop goes on",
        path.display()
    )]);
}
