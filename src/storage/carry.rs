//! What a task's branch added to ralph's own files, for its merge into the base.
//!
//! A merge keeps the base's version of `progress.md` and `ralph-tasks.md` (they never conflict),
//! so what the task's agent wrote in them is worked out from three versions of each file: the
//! merge base's (where the branch and the base parted), the branch's and the base's.
//!
//! - Notes: the progress log only grows, so the branch's new text is what follows the merge
//!   base's content in the branch's file (or, when the branch's file does not start with it —
//!   the base was merged into the branch meanwhile —, what follows the lines the two files start
//!   with). It is appended to the base's log under a heading naming the task.
//! - Tasks: the branch's tasks that the merge base does not have (compared by id, else by text,
//!   in file order, so a task whose text the agent rewrote is an edit, not a new task), and that
//!   the base does not have yet either, are appended to the base's list as open tasks, with their
//!   properties and subtasks. What the agent changed in existing tasks (their status above all)
//!   is not carried: the base's list is the one ralph keeps the statuses in.

use std::collections::HashMap;

use super::progress::HEADER;
use super::tasks::{self, Task, TaskList, TaskStatus};

/// What joined the base from a task's branch at its merge.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Carried {
    /// The branch's notes were appended to the base's progress log.
    pub(crate) notes: bool,
    /// The descriptions of the tasks added to the base's list.
    pub(crate) tasks: Vec<String>,
    /// What could not be carried, and why: the branch keeps it.
    pub(crate) problems: Vec<String>,
}

/// The base's progress log with the notes the branch added appended under a `## Task <id>`
/// heading; `None` when the branch added nothing. `base`: the base's log (`None`: it has none,
/// and the new log starts with the usual header).
pub(crate) fn notes(
    merge_base: Option<&[u8]>,
    branch: &[u8],
    base: Option<&[u8]>,
    id: &str,
) -> Option<Vec<u8>> {
    let added = added_text(merge_base.unwrap_or_default(), branch);
    // A log the branch created starts with the header, which the base's log has already.
    let added = added.strip_prefix(HEADER.as_bytes()).unwrap_or(added);
    let start = added.iter().position(|b| !b.is_ascii_whitespace())?;
    let mut log = match base {
        Some(base) if !base.is_empty() => base.to_vec(),
        _ => HEADER.as_bytes().to_vec(),
    };
    if !log.ends_with(b"\n") {
        log.push(b'\n');
    }
    log.extend_from_slice(format!("\n## Task {id} — notes from its branch\n\n").as_bytes());
    // From the line the text starts on, so its indentation stays.
    let line = added[..start]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |at| at + 1);
    log.extend_from_slice(&added[line..]);
    if !log.ends_with(b"\n") {
        log.push(b'\n');
    }
    Some(log)
}

/// What `branch` has after the text it shares with `merge_base`: all of `merge_base` when the
/// branch starts with it, else the lines both start with.
fn added_text<'b>(merge_base: &[u8], branch: &'b [u8]) -> &'b [u8] {
    if let Some(rest) = branch.strip_prefix(merge_base) {
        return rest;
    }
    let shared: usize = branch
        .split_inclusive(|&b| b == b'\n')
        .zip(merge_base.split_inclusive(|&b| b == b'\n'))
        .take_while(|(ours, theirs)| ours == theirs && ours.ends_with(b"\n"))
        .map(|(line, _)| line.len())
        .sum();
    &branch[shared..]
}

/// The base's task list with the tasks the branch added appended as open tasks, and their
/// descriptions; `None` when the branch added none the base lacks. `base`: the base's list
/// (`None`: it has none).
pub(crate) fn tasks(
    merge_base: Option<&[u8]>,
    branch: &[u8],
    base: Option<&[u8]>,
) -> Option<(Vec<u8>, Vec<String>)> {
    let parse = |content: &[u8]| TaskList::parse(&String::from_utf8_lossy(content));
    let before = parse(merge_base.unwrap_or_default());
    let after = parse(branch);
    let now = parse(base.unwrap_or_default());
    // Tasks the base gained since the merge base, per key: a branch's task the base already
    // has (added twice, or carried before) is not added again.
    let mut gained: HashMap<&str, isize> = HashMap::new();
    for task in &now.tasks {
        *gained.entry(task.key()).or_default() += 1;
    }
    for task in &before.tasks {
        *gained.entry(task.key()).or_default() -= 1;
    }
    let lines: Vec<&[u8]> = branch.split_inclusive(|&b| b == b'\n').collect();
    let mut list = tasks::appendable(base);
    let mut texts = Vec::new();
    for task in added_tasks(&before.tasks, &after.tasks) {
        if let Some(count) = gained.get_mut(task.key())
            && *count > 0
        {
            *count -= 1;
            continue;
        }
        let mut block: Vec<u8> = lines[task.line..tasks::block_end(&lines, task.line)].concat();
        if !block.ends_with(b"\n") {
            block.push(b'\n');
        }
        let open = tasks::set_status(&block, 1, TaskStatus::Todo, None).unwrap_or(block);
        list.extend_from_slice(&open);
        texts.push(task.text.clone());
    }
    (!texts.is_empty()).then_some((list, texts))
}

/// The tasks of `after` that are not in `before`, compared by key in order: between two tasks
/// both lists keep, as many of `after`'s tasks as `before` lost there are edits of those (a
/// rewritten description), the rest are new.
fn added_tasks<'t>(before: &[Task], after: &'t [Task]) -> Vec<&'t Task> {
    let kept = common_keys(before, after);
    let mut added = Vec::new();
    let (mut b, mut a) = (0, 0);
    for (next_b, next_a) in kept
        .into_iter()
        .chain(std::iter::once((before.len(), after.len())))
    {
        let lost = next_b - b;
        added.extend(after[a..next_a].iter().skip(lost));
        (b, a) = (next_b + 1, next_a + 1);
    }
    added
}

/// The pairs of indices (`before`, `after`) of a longest common subsequence of the two lists'
/// keys, in order.
fn common_keys(before: &[Task], after: &[Task]) -> Vec<(usize, usize)> {
    // Lists are short (tens, rarely hundreds of tasks); longer ones are compared by key alone.
    const MOST: usize = 4_000_000;
    let (n, m) = (before.len(), after.len());
    if n.saturating_mul(m) > MOST {
        let mut pairs = Vec::new();
        let mut from = 0;
        for (i, task) in before.iter().enumerate() {
            if let Some(j) = (from..m).find(|&j| after[j].key() == task.key()) {
                pairs.push((i, j));
                from = j + 1;
            }
        }
        return pairs;
    }
    // lengths[i][j]: the longest common subsequence of before[i..] and after[j..].
    let mut lengths = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lengths[at(i, j)] = if before[i].key() == after[j].key() {
                lengths[at(i + 1, j + 1)] + 1
            } else {
                lengths[at(i + 1, j)].max(lengths[at(i, j + 1)])
            };
        }
    }
    let mut pairs = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if before[i].key() == after[j].key() {
            pairs.push((i, j));
            (i, j) = (i + 1, j + 1);
        } else if lengths[at(i + 1, j)] >= lengths[at(i, j + 1)] {
            i += 1;
        } else {
            j += 1;
        }
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notes_of(merge_base: Option<&str>, branch: &str, base: Option<&str>) -> Option<String> {
        notes(
            merge_base.map(str::as_bytes),
            branch.as_bytes(),
            base.map(str::as_bytes),
            "alpha",
        )
        .map(|log| String::from_utf8(log).unwrap())
    }

    const LOG: &str = "# Ralph Progress Log\n\nintro\n\n## Iteration 1\n\n- Outcome: continued\n";

    #[test]
    fn the_notes_a_branch_appended_follow_the_base_log_under_the_task() {
        let branch = format!("{LOG}\nLEARNED: the API needs header X-Key\n");
        let base = format!("{LOG}\n## Task beta — notes from its branch\n\nbeta's note\n");
        let merged = notes_of(Some(LOG), &branch, Some(&base)).unwrap();
        assert_eq!(
            merged,
            format!(
                "{base}\n## Task alpha — notes from its branch\n\nLEARNED: the API needs header X-Key\n"
            )
        );
        assert_eq!(notes_of(Some(LOG), LOG, Some(&base)), None, "nothing new");
        assert_eq!(notes_of(Some(LOG), &format!("{LOG}\n\n"), None), None);
    }

    #[test]
    fn a_log_new_on_the_branch_loses_its_header_and_a_base_without_one_gains_it() {
        let branch = format!("{HEADER}\n## Iteration 1\n\n- Outcome: completed\n");
        let merged = notes_of(None, &branch, None).unwrap();
        assert_eq!(
            merged,
            format!(
                "{HEADER}\n## Task alpha — notes from its branch\n\n## Iteration 1\n\n- Outcome: completed\n"
            )
        );
        // An agent that wrote first made the file without the header: all of it is new.
        let merged = notes_of(None, "\nLEARNED: x", Some("kept")).unwrap();
        assert_eq!(
            merged,
            "kept\n\n## Task alpha — notes from its branch\n\nLEARNED: x\n"
        );
    }

    #[test]
    fn a_branch_that_merged_the_base_in_keeps_only_its_own_lines() {
        // The base merged into the branch while both had added to the log: the branch kept its
        // version, so the new merge base has the base's notes and the branch does not.
        let merge_base = format!("{LOG}\n## Task beta — notes from its branch\n\n- Outcome: ok\n");
        let branch = format!("{LOG}\n## Iteration 2\n\n- Outcome: ok\nLEARNED: y\n");
        let merged = notes_of(Some(&merge_base), &branch, Some(&merge_base)).unwrap();
        assert!(
            merged.ends_with(
                "## Task alpha — notes from its branch\n\n## Iteration 2\n\n- Outcome: ok\nLEARNED: y\n"
            ),
            "{merged}"
        );
        assert_eq!(merged.matches("## Task beta").count(), 1);
    }

    fn tasks_of(
        merge_base: Option<&str>,
        branch: &str,
        base: Option<&str>,
    ) -> Option<(String, Vec<String>)> {
        tasks(
            merge_base.map(str::as_bytes),
            branch.as_bytes(),
            base.map(str::as_bytes),
        )
        .map(|(list, texts)| (String::from_utf8(list).unwrap(), texts))
    }

    const LIST: &str = "# Tasks\n\n- [ ] Write alpha\n  - id: alpha\n- [ ] Write beta\n";

    #[test]
    fn tasks_a_branch_added_join_the_base_list_open_with_their_properties() {
        let branch = "# Tasks\n\n- [x] Write alpha\n  - id: alpha\n- [/] Write beta\n\
                      - [x] Follow-up found by alpha\n  - verify: true\n  - [x] step\n";
        let base = "# Tasks\n\n- [ ] Write alpha\n  - id: alpha\n- [x] Write beta\n- [ ] Mine\n";
        let (list, texts) = tasks_of(Some(LIST), branch, Some(base)).unwrap();
        assert_eq!(texts, ["Follow-up found by alpha"]);
        assert_eq!(
            list,
            format!("{base}- [ ] Follow-up found by alpha\n  - verify: true\n  - [x] step\n"),
            "statuses stay the base's; the new task is open"
        );
        assert_eq!(tasks_of(Some(LIST), LIST, Some(base)), None);
        let (list, _) = tasks_of(None, "- [ ] First", None).unwrap();
        assert_eq!(list, "# Ralph Tasks\n\n- [ ] First\n");
    }

    #[test]
    fn a_rewritten_task_is_an_edit_and_a_task_the_base_has_is_not_added_again() {
        let branch = "# Tasks\n\n- [x] Write alpha\n  - id: alpha\n- [x] Write beta (done)\n\
                      - [ ] Follow-up\n- [ ] Shared idea\n";
        let base = format!("{LIST}- [ ] Shared idea\n");
        let (list, texts) = tasks_of(Some(LIST), branch, Some(&base)).unwrap();
        assert_eq!(texts, ["Follow-up"], "the rewritten beta is not new");
        assert_eq!(list, format!("{base}- [ ] Follow-up\n"));
        // A second copy of a task the merge base had is new.
        let twice = format!("{LIST}- [ ] Write beta\n");
        let (_, texts) = tasks_of(Some(LIST), &twice, Some(LIST)).unwrap();
        assert_eq!(texts, ["Write beta"]);
        // A task the user removed from the base meanwhile is not brought back.
        let (list, texts) =
            tasks_of(Some(LIST), &format!("{LIST}- [ ] New\n"), Some("# Tasks\n")).unwrap();
        assert_eq!(texts, ["New"]);
        assert_eq!(list, "# Tasks\n- [ ] New\n");
    }
}
