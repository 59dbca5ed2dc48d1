//! `ralph-context.md`: hints the user adds while a loop runs, injected into the next prompt.
//!
//! The loop snapshots the file when an iteration starts and, after the iteration, removes only
//! that snapshot: text appended with `--add-context` while the agent worked stays pending for the
//! next iteration. Both sides take a short OS lock so an append never lands between the loop's
//! read and its rewrite.
//!
//! The file is a heading and sections, each `## Context added at <stamp>` (with ` for task <id>`
//! when it is meant for one task) and its text. A run of several loops (`--parallel`, `--worker`)
//! keeps its own loops' context in their worktrees; [`deliver`] passes the sections pending in the
//! base on to them: each section to every running task loop, or to its task's loop alone.

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

/// How every section's heading starts.
const SECTION: &str = "## Context added at ";

/// What a targeted section's heading says after its stamp.
const FOR_TASK: &str = " for task ";

/// Appends a timestamped section (creating the file with its heading); `task`: the one task
/// whose loop it is for (in a run of several loops).
pub(crate) fn append(
    dir: &RalphDir,
    text: &str,
    task: Option<&str>,
    now: DateTime<Utc>,
) -> anyhow::Result<()> {
    let stamp = now.to_rfc3339_opts(SecondsFormat::Millis, true);
    let target = task.map(|id| format!("{FOR_TASK}{id}")).unwrap_or_default();
    let section = format!("{SECTION}{stamp}{target}\n{text}");
    append_section(dir, section.as_bytes())
}

/// Appends `section` (its heading line included) after a blank line, under the file's lock.
fn append_section(dir: &RalphDir, section: &[u8]) -> anyhow::Result<()> {
    dir.ensure()?;
    let _lock = super::lock::exclusive(dir, CONTEXT_LOCK_FILE)?;
    let path = dir.context();
    let mut content = read_raw(&path)?.unwrap_or_else(|| format!("{HEADING}\n").into_bytes());
    if !content.ends_with(b"\n") {
        content.push(b'\n');
    }
    content.push(b'\n');
    content.extend_from_slice(section);
    content.push(b'\n');
    write_atomic(&path, &content)
}

/// One section of a context file: a `## Context added at …` heading and its text, or the text a
/// person wrote above the first heading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Section {
    /// The task whose loop it is for; `None`: every loop.
    pub(crate) task: Option<String>,
    /// Its lines, heading included, without the blank lines around them or the last newline.
    bytes: Vec<u8>,
}

/// The sections of a context file, in file order. The file's own heading is not part of any;
/// other text above the first section heading is a section for every loop.
pub(crate) fn sections(content: &[u8]) -> Vec<Section> {
    let mut sections = Vec::new();
    let mut current: Option<Section> = None;
    let mut preamble = Section {
        task: None,
        bytes: Vec::new(),
    };
    for line in content.split_inclusive(|&b| b == b'\n') {
        if line.starts_with(SECTION.as_bytes()) {
            sections.extend(current.take());
            current = Some(Section {
                task: target(line),
                bytes: Vec::new(),
            });
        }
        match current.as_mut() {
            Some(section) => section.bytes.extend_from_slice(line),
            None if line.trim_ascii_end() == HEADING.as_bytes() => {}
            None => preamble.bytes.extend_from_slice(line),
        }
    }
    sections.extend(current);
    if !is_blank(&preamble.bytes) {
        sections.insert(0, preamble);
    }
    for section in &mut sections {
        section.bytes = trim_blank_lines(&section.bytes).to_vec();
    }
    sections
}

/// The task a section heading names (`… for task <id>`).
fn target(heading: &[u8]) -> Option<String> {
    let heading = String::from_utf8_lossy(heading.trim_ascii_end()).into_owned();
    let (_, id) = heading.rsplit_once(FOR_TASK)?;
    let id = id.trim();
    (!id.is_empty() && !id.contains(char::is_whitespace)).then(|| id.to_owned())
}

/// `bytes` without its leading and trailing blank lines (and its last newline).
fn trim_blank_lines(bytes: &[u8]) -> &[u8] {
    let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    let Some(first) = lines.iter().position(|line| !is_blank(line)) else {
        return &[];
    };
    let last = lines
        .iter()
        .rposition(|line| !is_blank(line))
        .unwrap_or(first);
    let start: usize = lines[..first].iter().map(|line| line.len() + 1).sum();
    let end: usize = lines[..=last]
        .iter()
        .map(|line| line.len() + 1)
        .sum::<usize>()
        - 1;
    &bytes[start..end]
}

/// A context file holding `sections`: the heading, then each section after a blank line.
fn file_of(sections: &[Section]) -> Vec<u8> {
    let mut content = format!("{HEADING}\n").into_bytes();
    for section in sections {
        content.push(b'\n');
        content.extend_from_slice(&section.bytes);
        content.push(b'\n');
    }
    content
}

/// A task loop running in a run of several: its task's id and its own `.ralph/`.
pub(crate) struct TaskLoop {
    pub(crate) task: String,
    pub(crate) dir: RalphDir,
}

/// Passes the context pending in `base` on to the running task loops, under the base's context
/// lock: each section for every loop is appended to every loop's context file, each section for
/// one task to that task's loop when it runs (else it stays pending here). What was passed on
/// leaves the base's file (removed when nothing is left). Returns the tasks whose loops got
/// something. A section that could not be written to one of its loops stays pending, and the
/// first error is returned once the base's file is rewritten.
pub(crate) fn deliver(base: &RalphDir, loops: &[TaskLoop]) -> anyhow::Result<Vec<String>> {
    let path = base.context();
    if loops.is_empty() || !path.exists() {
        return Ok(Vec::new());
    }
    let _lock = super::lock::exclusive(base, CONTEXT_LOCK_FILE)?;
    let Some(content) = read_raw(&path)?.filter(|bytes| !is_blank(bytes)) else {
        return Ok(Vec::new());
    };
    let mut kept = Vec::new();
    let mut reached: Vec<String> = Vec::new();
    let mut failure = None;
    for section in sections(&content) {
        let targets: Vec<&TaskLoop> = match &section.task {
            None => loops.iter().collect(),
            Some(id) => loops.iter().filter(|each| &each.task == id).collect(),
        };
        let mut delivered = !targets.is_empty();
        for each in targets {
            match append_section(&each.dir, &section.bytes) {
                Ok(()) if !reached.contains(&each.task) => reached.push(each.task.clone()),
                Ok(()) => {}
                Err(err) => {
                    delivered = false;
                    failure.get_or_insert(err.context(format!(
                        "failed to pass the context on to task {}",
                        each.task
                    )));
                }
            }
        }
        if !delivered {
            kept.push(section);
        }
    }
    if kept.is_empty() {
        remove_file(&path)?;
    } else if !reached.is_empty() {
        write_atomic(&path, &file_of(&kept))?;
    }
    match failure {
        Some(err) => Err(err),
        None => Ok(reached),
    }
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
        let tmp = crate::testing::tempdir().unwrap();
        let dir = RalphDir::new(tmp.path());
        append(&dir, "use sqlite", None, now()).unwrap();
        append(&dir, "and tests", None, now()).unwrap();
        let text = std::fs::read_to_string(dir.context()).unwrap();
        assert_eq!(
            text,
            "# Ralph Loop Context\n\n## Context added at 2026-01-24T12:34:56.789Z\nuse sqlite\n\
             \n## Context added at 2026-01-24T12:34:56.789Z\nand tests\n"
        );
    }

    #[test]
    fn consume_keeps_what_was_added_after_the_snapshot() {
        let tmp = crate::testing::tempdir().unwrap();
        let dir = RalphDir::new(tmp.path());
        append(&dir, "first", None, now()).unwrap();
        let snapshot = pending(&dir.context()).unwrap().unwrap();
        append(&dir, "second", None, now()).unwrap();
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
        let tmp = crate::testing::tempdir().unwrap();
        let dir = RalphDir::new(tmp.path());
        append(&dir, "first", None, now()).unwrap();
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
    fn a_section_for_one_task_names_it_in_its_heading() {
        let tmp = crate::testing::tempdir().unwrap();
        let dir = RalphDir::new(tmp.path());
        append(&dir, "use sqlite", Some("alpha"), now()).unwrap();
        let text = std::fs::read_to_string(dir.context()).unwrap();
        assert_eq!(
            text,
            "# Ralph Loop Context\n\n## Context added at 2026-01-24T12:34:56.789Z for task alpha\nuse sqlite\n"
        );
    }

    fn section(task: Option<&str>, bytes: &str) -> Section {
        Section {
            task: task.map(str::to_owned),
            bytes: bytes.as_bytes().to_vec(),
        }
    }

    #[test]
    fn sections_split_at_headings_and_know_their_task() {
        let content = "# Ralph Loop Context\n\n\
            ## Context added at 2026-01-24T12:34:56.789Z\nuse sqlite\nnot postgres\n\n\n\
            ## Context added at 2026-01-24T12:34:57.000Z for task alpha\nalpha only\n\n\
            ## Context added at 2026-01-24T12:34:58.000Z for task two words\nfor all\n";
        assert_eq!(
            sections(content.as_bytes()),
            [
                section(
                    None,
                    "## Context added at 2026-01-24T12:34:56.789Z\nuse sqlite\nnot postgres"
                ),
                section(
                    Some("alpha"),
                    "## Context added at 2026-01-24T12:34:57.000Z for task alpha\nalpha only"
                ),
                section(
                    None,
                    "## Context added at 2026-01-24T12:34:58.000Z for task two words\nfor all"
                ),
            ]
        );
        // Text a person wrote above the first heading is for every loop; the file's own heading
        // and blank text are no section.
        assert_eq!(
            sections(b"  \nsee the README\n# Ralph Loop Context\n"),
            [section(None, "see the README")]
        );
        assert_eq!(sections(b"# Ralph Loop Context\n\n"), []);
        assert_eq!(sections(b""), []);
        // The file rebuilt from its sections is the file `append` writes.
        let tmp = crate::testing::tempdir().unwrap();
        let dir = RalphDir::new(tmp.path());
        append(&dir, "one\n\ntwo", None, now()).unwrap();
        append(&dir, "three", Some("beta"), now()).unwrap();
        let written = std::fs::read(dir.context()).unwrap();
        assert_eq!(file_of(&sections(&written)), written);
    }

    fn task_loop(root: &Path, id: &str) -> TaskLoop {
        TaskLoop {
            task: id.to_owned(),
            dir: RalphDir::new(&root.join(id)),
        }
    }

    fn read(dir: &RalphDir) -> String {
        std::fs::read_to_string(dir.context()).unwrap_or_default()
    }

    #[test]
    fn delivery_gives_every_loop_the_shared_sections_and_one_loop_its_own() {
        let tmp = crate::testing::tempdir().unwrap();
        let base = RalphDir::new(tmp.path());
        let loops = [
            task_loop(tmp.path(), "alpha"),
            task_loop(tmp.path(), "beta"),
        ];
        // Beta's loop already has context of its own, not yet used.
        append(&loops[1].dir, "beta's own", None, now()).unwrap();
        append(&base, "USE SQLITE", None, now()).unwrap();
        append(&base, "alpha only", Some("alpha"), now()).unwrap();
        append(&base, "gamma only", Some("gamma"), now()).unwrap();
        assert_eq!(deliver(&base, &loops).unwrap(), ["alpha", "beta"]);
        assert_eq!(
            read(&loops[0].dir),
            "# Ralph Loop Context\n\n## Context added at 2026-01-24T12:34:56.789Z\nUSE SQLITE\n\
             \n## Context added at 2026-01-24T12:34:56.789Z for task alpha\nalpha only\n"
        );
        let beta = read(&loops[1].dir);
        assert!(beta.contains("beta's own\n\n## Context added at"), "{beta}");
        assert!(
            beta.contains("USE SQLITE") && !beta.contains("only"),
            "{beta}"
        );
        // Gamma does not run: its section stays pending in the base, alone.
        assert_eq!(
            read(&base),
            "# Ralph Loop Context\n\n## Context added at 2026-01-24T12:34:56.789Z for task gamma\ngamma only\n"
        );
        // Nothing new: nothing changes.
        assert_eq!(deliver(&base, &loops).unwrap(), Vec::<String>::new());
        assert!(!read(&loops[0].dir).contains("gamma"));
        // Gamma starts: it gets its section and the base's file is gone.
        let gamma = [task_loop(tmp.path(), "gamma")];
        assert_eq!(deliver(&base, &gamma).unwrap(), ["gamma"]);
        assert!(read(&gamma[0].dir).contains("gamma only"));
        assert!(!base.context().exists());
        assert_eq!(deliver(&base, &gamma).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn without_running_loops_the_context_stays_pending() {
        let tmp = crate::testing::tempdir().unwrap();
        let base = RalphDir::new(tmp.path());
        append(&base, "hint", None, now()).unwrap();
        let before = std::fs::read(base.context()).unwrap();
        assert!(deliver(&base, &[]).unwrap().is_empty());
        assert_eq!(std::fs::read(base.context()).unwrap(), before);
    }

    #[test]
    fn a_loop_that_cannot_be_written_to_leaves_the_section_pending() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = crate::testing::tempdir().unwrap();
        let base = RalphDir::new(tmp.path());
        let loops = [
            task_loop(tmp.path(), "alpha"),
            task_loop(tmp.path(), "beta"),
        ];
        // Beta's context file is write-protected: ralph refuses to replace it.
        append(&loops[1].dir, "old", None, now()).unwrap();
        let protected = std::fs::Permissions::from_mode(0o400);
        std::fs::set_permissions(loops[1].dir.context(), protected).unwrap();
        append(&base, "for all", None, now()).unwrap();
        append(&base, "alpha only", Some("alpha"), now()).unwrap();
        let err = deliver(&base, &loops).unwrap_err();
        assert!(format!("{err:#}").contains("task beta"), "{err:#}");
        assert!(read(&loops[0].dir).contains("alpha only"));
        let pending = read(&base);
        assert!(
            pending.contains("for all") && !pending.contains("alpha only"),
            "{pending}"
        );
    }

    #[test]
    fn clear_reports_whether_there_was_anything() {
        let tmp = crate::testing::tempdir().unwrap();
        let dir = RalphDir::new(tmp.path());
        assert!(!clear(&dir).unwrap());
        append(&dir, "x", None, now()).unwrap();
        assert!(clear(&dir).unwrap());
        assert!(!dir.context().exists());
    }
}
