//! `ralph-context.md`: hints the user adds while a loop runs, injected into the next prompt.
//!
//! The loop snapshots the file when an iteration starts and, after the iteration, removes only
//! that snapshot: text appended with `--add-context` while the agent worked stays pending for the
//! next iteration. Both sides take a short OS lock so an append never lands between the loop's
//! read and its rewrite.
//!
//! The file is a heading and sections, each `## Context added at <stamp>` (with ` for task <id>`
//! when it is meant for one task) and its text. In a run of several loops (`--parallel`,
//! `--worker`) each task loop also reads the base's file ([`shared_for`]): a section for every
//! loop goes into the next prompt of every task loop once (those that start later included), a
//! section for one task into that task's next prompt; [`given`] records where each went, and a
//! section leaves the file once it reached the prompt(s) it was for.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use super::{CONTEXT_LOCK_FILE, RalphDir, read_raw, remove_file, write_atomic};

/// Where the sections of a run's context went (see [`given`]).
pub(crate) const GIVEN_FILE: &str = "ralph-context-given.json";

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

impl Section {
    /// Its text, heading included (invalid UTF-8 shown as U+FFFD).
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
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

/// Where the sections of a run's context went: for each (by [`Section::key`]), the task loops
/// whose prompt held it and the iteration that did. `.ralph/ralph-context-given.json`, kept
/// beside the context file in the base, under its lock.
type Given = BTreeMap<String, BTreeMap<String, u32>>;

fn load_given(base: &RalphDir) -> Given {
    super::read_json(&base.file(GIVEN_FILE))
        .ok()
        .unwrap_or_default()
}

impl Section {
    /// What names the section in the record of where it went: a hash of its bytes (two
    /// identical sections, stamp included, are one).
    fn key(&self) -> String {
        // FNV-1a, 64 bits: stable from one ralph to the next.
        let hash = (self.bytes.iter()).fold(0xcbf2_9ce4_8422_2325_u64, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("{hash:016x}")
    }

    /// Whether the loop of `task` is meant to get it.
    fn is_for(&self, task: &str) -> bool {
        self.task.as_deref().is_none_or(|id| id == task)
    }
}

/// The sections of a run's context (`base`'s file) that the loop of `task` has not had in a
/// prompt yet: each for every task loop, and those for this task alone. They stay in the base
/// until they reached a prompt ([`given`]); a task loop that starts later gets those for every
/// loop too.
pub(crate) fn shared_for(base: &RalphDir, task: &str) -> anyhow::Result<Vec<Section>> {
    let path = base.context();
    if !path.exists() {
        return Ok(Vec::new());
    }
    let _lock = super::lock::exclusive(base, CONTEXT_LOCK_FILE)?;
    let content = read_raw(&path)?.unwrap_or_default();
    let given = load_given(base);
    Ok(sections(&content)
        .into_iter()
        .filter(|section| section.is_for(task))
        .filter(|section| {
            !(given.get(&section.key())).is_some_and(|tasks| tasks.contains_key(task))
        })
        .collect())
}

/// Records that the prompt of `task`'s iteration `iteration` held `sections` (from
/// [`shared_for`]). A section for this task alone has reached the prompt it was for and leaves
/// the base's file; one for every loop stays for the loops that start or iterate later, until the
/// run ends ([`settle`]).
pub(crate) fn given(
    base: &RalphDir,
    task: &str,
    iteration: u32,
    sections: &[Section],
) -> anyhow::Result<()> {
    if sections.is_empty() {
        return Ok(());
    }
    let _lock = super::lock::exclusive(base, CONTEXT_LOCK_FILE)?;
    let mut given = load_given(base);
    for section in sections.iter().filter(|section| section.task.is_none()) {
        (given.entry(section.key()).or_default()).insert(task.to_owned(), iteration);
    }
    let done: Vec<String> = (sections.iter())
        .filter(|section| section.task.is_some())
        .map(Section::key)
        .collect();
    rewrite(base, &mut given, |section| !done.contains(&section.key()))
}

/// At the end of a run of several loops: each section for every loop that reached a prompt
/// leaves the base's file; one that reached none stays pending, for the next run.
pub(crate) fn settle(base: &RalphDir) -> anyhow::Result<()> {
    let path = base.context();
    if !path.exists() && !base.file(GIVEN_FILE).exists() {
        return Ok(());
    }
    let _lock = super::lock::exclusive(base, CONTEXT_LOCK_FILE)?;
    let mut given = load_given(base);
    let reached: Vec<String> = (given.iter())
        .filter(|(_, tasks)| !tasks.is_empty())
        .map(|(key, _)| key.clone())
        .collect();
    rewrite(base, &mut given, |section| {
        !reached.contains(&section.key())
    })
}

/// Rewrites the base's context file with the sections `keep` keeps (removed when none is left)
/// and the record of where they went, for those sections only. Called under the context lock.
fn rewrite(
    base: &RalphDir,
    given: &mut Given,
    keep: impl Fn(&Section) -> bool,
) -> anyhow::Result<()> {
    let path = base.context();
    let content = read_raw(&path)?.unwrap_or_default();
    let all = sections(&content);
    let kept: Vec<Section> = all
        .iter()
        .filter(|section| keep(section))
        .cloned()
        .collect();
    if kept.len() != all.len() {
        if kept.is_empty() {
            remove_file(&path)?;
        } else {
            write_atomic(&path, &file_of(&kept))?;
        }
    }
    let keys: Vec<String> = kept.iter().map(Section::key).collect();
    given.retain(|key, _| keys.contains(key));
    let ledger = base.file(GIVEN_FILE);
    if given.is_empty() {
        remove_file(&ledger).map(drop)
    } else {
        super::write_json(&ledger, given)
    }
}

/// One section of the run's pending context, for `--status`: its text, the task it is for, and
/// the task loops whose prompt already held it (with the iteration).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Where {
    pub(crate) text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) task: Option<String>,
    pub(crate) given_to: BTreeMap<String, u32>,
}

/// Where each section pending in `dir` went so far (reads only).
pub(crate) fn whereabouts(dir: &RalphDir) -> Vec<Where> {
    let Ok(Some(content)) = read_raw(&dir.context()) else {
        return Vec::new();
    };
    let given = load_given(dir);
    sections(&content)
        .into_iter()
        .map(|section| Where {
            given_to: given.get(&section.key()).cloned().unwrap_or_default(),
            text: String::from_utf8_lossy(&section.bytes).into_owned(),
            task: section.task,
        })
        .collect()
}

/// The context one iteration's prompt holds: the loop's own pending file, and for a task loop
/// the run's sections meant for it ([`shared_for`]).
#[derive(Debug, Default)]
pub(crate) struct Injected {
    pub(crate) own: Option<Pending>,
    pub(crate) shared: Vec<Section>,
}

impl Injected {
    /// The text for the prompt, when there is any: the own file, then the run's sections.
    pub(crate) fn text(&self) -> Option<String> {
        if self.shared.is_empty() {
            return self.own.as_ref().map(Pending::text);
        }
        let mut text = match &self.own {
            Some(own) => own.text().trim_end().to_owned() + "\n",
            None => format!("{HEADING}\n"),
        };
        for section in &self.shared {
            text.push('\n');
            text.push_str(&String::from_utf8_lossy(&section.bytes));
            text.push('\n');
        }
        Some(text)
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

    fn read(dir: &RalphDir) -> String {
        std::fs::read_to_string(dir.context()).unwrap_or_default()
    }

    fn texts(sections: &[Section]) -> Vec<String> {
        (sections.iter())
            .map(|section| String::from_utf8_lossy(&section.bytes).into_owned())
            .collect()
    }

    #[test]
    fn every_task_loop_gets_a_shared_section_once_even_one_that_starts_later() {
        let tmp = crate::testing::tempdir().unwrap();
        let base = RalphDir::new(tmp.path());
        append(&base, "USE SQLITE", None, now()).unwrap();
        append(&base, "alpha only", Some("alpha"), now()).unwrap();
        append(&base, "gamma only", Some("gamma"), now()).unwrap();
        let alpha = shared_for(&base, "alpha").unwrap();
        assert_eq!(
            texts(&alpha),
            [
                "## Context added at 2026-01-24T12:34:56.789Z\nUSE SQLITE",
                "## Context added at 2026-01-24T12:34:56.789Z for task alpha\nalpha only"
            ]
        );
        let injected = Injected {
            own: None,
            shared: alpha.clone(),
        };
        assert_eq!(
            injected.text().unwrap(),
            "# Ralph Loop Context\n\n## Context added at 2026-01-24T12:34:56.789Z\nUSE SQLITE\n\
             \n## Context added at 2026-01-24T12:34:56.789Z for task alpha\nalpha only\n"
        );
        // Not yet in a prompt (an interrupted iteration): alpha gets them again.
        assert_eq!(shared_for(&base, "alpha").unwrap(), alpha);
        given(&base, "alpha", 2, &alpha).unwrap();
        assert!(shared_for(&base, "alpha").unwrap().is_empty());
        // Alpha's own section has reached its prompt and left; the shared one stays, for beta
        // (which starts after it was added) and for gamma with its own.
        let pending = read(&base);
        assert!(!pending.contains("alpha only"), "{pending}");
        assert!(pending.contains("USE SQLITE") && pending.contains("gamma only"));
        assert_eq!(
            texts(&shared_for(&base, "beta").unwrap()),
            ["## Context added at 2026-01-24T12:34:56.789Z\nUSE SQLITE"]
        );
        let beta = shared_for(&base, "beta").unwrap();
        given(&base, "beta", 1, &beta).unwrap();
        // `--status` says where each went.
        let whereabouts = whereabouts(&base);
        assert_eq!(whereabouts.len(), 2);
        assert_eq!(
            whereabouts[0].given_to,
            BTreeMap::from([("alpha".to_owned(), 2), ("beta".to_owned(), 1)])
        );
        assert_eq!(whereabouts[1].task.as_deref(), Some("gamma"));
        assert!(whereabouts[1].given_to.is_empty());
        // The run ends: what reached a prompt leaves; gamma's, which reached none, stays.
        settle(&base).unwrap();
        assert_eq!(
            read(&base),
            "# Ralph Loop Context\n\n## Context added at 2026-01-24T12:34:56.789Z for task gamma\ngamma only\n"
        );
        assert!(!base.file(GIVEN_FILE).exists());
        let gamma = shared_for(&base, "gamma").unwrap();
        given(&base, "gamma", 1, &gamma).unwrap();
        assert!(!base.context().exists());
    }

    #[test]
    fn a_shared_section_that_reached_no_prompt_stays_pending_after_the_run() {
        let tmp = crate::testing::tempdir().unwrap();
        let base = RalphDir::new(tmp.path());
        append(&base, "hint", None, now()).unwrap();
        let before = std::fs::read(base.context()).unwrap();
        settle(&base).unwrap();
        assert_eq!(std::fs::read(base.context()).unwrap(), before);
    }

    #[test]
    fn text_added_meanwhile_is_kept_when_a_section_leaves() {
        let tmp = crate::testing::tempdir().unwrap();
        let base = RalphDir::new(tmp.path());
        append(&base, "alpha only", Some("alpha"), now()).unwrap();
        let alpha = shared_for(&base, "alpha").unwrap();
        append(&base, "later", None, now()).unwrap();
        given(&base, "alpha", 1, &alpha).unwrap();
        assert_eq!(
            read(&base),
            "# Ralph Loop Context\n\n## Context added at 2026-01-24T12:34:56.789Z\nlater\n"
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
