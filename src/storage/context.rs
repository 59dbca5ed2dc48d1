//! `ralph-context.md`: hints the user adds while a loop runs, injected into the next prompt.
//!
//! The loop snapshots the file when an iteration starts and, after the iteration, removes only
//! that snapshot: text appended with `--add-context` while the agent worked stays pending for the
//! next iteration. Both sides take a short OS lock so an append never lands between the loop's
//! read and its rewrite.

use std::path::Path;

use chrono::{DateTime, SecondsFormat, Utc};

use super::{CONTEXT_LOCK_FILE, RalphDir, read_raw, remove_file, write_atomic};

/// The heading a new context file starts with.
pub(crate) const HEADING: &str = "# Ralph Loop Context";

/// What consuming the injected context did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Consumed {
    /// The file held only what was injected and is gone.
    All,
    /// Text added during the iteration remains for the next one.
    NewerKept,
    /// The injected text was edited during the iteration, so the file was left alone.
    EditedKept,
}

/// Appends a timestamped section (creating the file with its heading) and returns its path.
pub(crate) fn append(dir: &RalphDir, text: &str, now: DateTime<Utc>) -> anyhow::Result<()> {
    dir.ensure()?;
    let _lock = super::lock::exclusive(dir, CONTEXT_LOCK_FILE)?;
    let path = dir.context();
    let mut content = read_raw(&path)?.unwrap_or_else(|| format!("{HEADING}\n").into_bytes());
    let stamp = now.to_rfc3339_opts(SecondsFormat::Millis, true);
    content.extend_from_slice(format!("\n## Context added at {stamp}\n{text}\n").as_bytes());
    write_atomic(&path, &content)
}

/// The context waiting for the next prompt: the file's bytes as they are, for [`consume`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pending(Vec<u8>);

impl Pending {
    /// The text for the prompt (invalid UTF-8 shown as U+FFFD).
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }
}

/// The file's content when it holds anything but white space.
pub(crate) fn pending(path: &Path) -> std::io::Result<Option<Pending>> {
    Ok(read_raw(path)?
        .filter(|bytes| !is_blank(bytes))
        .map(Pending))
}

fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
}

/// Removes the part of the file that was injected (`injected` is the snapshot), keeping every
/// other byte as it is.
pub(crate) fn consume(dir: &RalphDir, injected: &Pending) -> anyhow::Result<Consumed> {
    let _lock = super::lock::exclusive(dir, CONTEXT_LOCK_FILE)?;
    let path = dir.context();
    let current = read_raw(&path)?.unwrap_or_default();
    let Some(rest) = current.strip_prefix(injected.0.as_slice()) else {
        if is_blank(&current) {
            remove_file(&path)?;
            return Ok(Consumed::All);
        }
        return Ok(Consumed::EditedKept);
    };
    if is_blank(rest) {
        remove_file(&path)?;
        return Ok(Consumed::All);
    }
    let start = rest.iter().position(|&b| b != b'\n').unwrap_or(rest.len());
    let mut kept = format!("{HEADING}\n\n").into_bytes();
    kept.extend_from_slice(&rest[start..]);
    write_atomic(&path, &kept)?;
    Ok(Consumed::NewerKept)
}

/// Deletes the context file; true when it held anything.
pub(crate) fn clear(dir: &RalphDir) -> anyhow::Result<bool> {
    let path = dir.context();
    if !path.exists() {
        return Ok(false);
    }
    let _lock = super::lock::exclusive(dir, CONTEXT_LOCK_FILE)?;
    let had_content = pending(&path)?.is_some();
    remove_file(&path)?;
    Ok(had_content)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-01-24T12:34:56.789Z".parse().unwrap()
    }

    #[test]
    fn append_creates_the_heading_then_adds_sections() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RalphDir::new(tmp.path());
        append(&dir, "use sqlite", now()).unwrap();
        append(&dir, "and tests", now()).unwrap();
        let text = std::fs::read_to_string(dir.context()).unwrap();
        assert_eq!(
            text,
            "# Ralph Loop Context\n\n## Context added at 2026-01-24T12:34:56.789Z\nuse sqlite\n\
             \n## Context added at 2026-01-24T12:34:56.789Z\nand tests\n"
        );
    }

    #[test]
    fn consume_keeps_what_was_added_after_the_snapshot() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RalphDir::new(tmp.path());
        append(&dir, "first", now()).unwrap();
        let snapshot = pending(&dir.context()).unwrap().unwrap();
        append(&dir, "second", now()).unwrap();
        assert_eq!(consume(&dir, &snapshot).unwrap(), Consumed::NewerKept);
        let text = std::fs::read_to_string(dir.context()).unwrap();
        assert!(text.starts_with(HEADING) && text.contains("second") && !text.contains("first"));
        assert!(snapshot.text().contains("first"));
        let snapshot = pending(&dir.context()).unwrap().unwrap();
        assert_eq!(consume(&dir, &snapshot).unwrap(), Consumed::All);
        assert!(!dir.context().exists());
    }

    #[test]
    fn consume_keeps_bytes_that_are_not_utf8() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RalphDir::new(tmp.path());
        append(&dir, "first", now()).unwrap();
        let snapshot = pending(&dir.context()).unwrap().unwrap();
        let mut bytes = std::fs::read(dir.context()).unwrap();
        bytes.extend_from_slice(b"\n## Later\ncaf\xe9\n");
        std::fs::write(dir.context(), &bytes).unwrap();
        assert_eq!(consume(&dir, &snapshot).unwrap(), Consumed::NewerKept);
        assert_eq!(
            std::fs::read(dir.context()).unwrap(),
            b"# Ralph Loop Context\n\n## Later\ncaf\xe9\n"
        );
    }

    #[test]
    fn clear_reports_whether_there_was_anything() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RalphDir::new(tmp.path());
        assert!(!clear(&dir).unwrap());
        append(&dir, "x", now()).unwrap();
        assert!(clear(&dir).unwrap());
        assert!(!dir.context().exists());
    }
}
