//! Messages of the commands (`--add-task`, `--reset`, …) and about ralph's own files: locks,
//! corrupt files, the task and context files.

use std::path::Path;

use super::format::plural;
use super::{Voice, say, warn};

/// A ralph file could not be parsed.
pub(crate) fn corrupt_file(out: &Voice, path: &Path, reason: &str, copy: Option<&Path>) {
    let kept = copy.map_or_else(String::new, |copy| {
        format!(" A copy was kept at {}.", copy.display())
    });
    out.warn(&[&format!(
        "⚠️  Ignoring {}: {reason}. Treating it as absent.{kept}",
        path.display()
    )]);
}

/// Tasks mode created the task file.
pub(crate) fn tasks_file_created(out: &Voice, path: &Path) {
    out.say(&[&format!("📋 Created tasks file: {}", path.display())]);
}

/// Lines of the task file ralph reads otherwise than they are written: one warning each.
pub(crate) fn task_file_problems(out: &Voice, path: &Path, problems: &[String]) {
    let mut lines = vec![format!(
        "⚠️  {} has lines ralph reads otherwise than they are written; fix them, or the tasks they meant are not run as you think:",
        path.display()
    )];
    lines.extend(problems.iter().map(|problem| format!("   {problem}")));
    out.warn(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// A task file that could not be read.
pub(crate) fn tasks_file_unreadable(out: &Voice, path: &Path, reason: &str) {
    out.warn(&[&format!(
        "⚠️  Cannot read {}: {reason}. The agent is told so in its prompt.",
        path.display()
    )]);
}

/// `--resume` flags that replace saved options.
pub(crate) fn resume_overrides(out: &Voice, changes: &[String]) {
    for change in changes {
        out.say(&[&format!("↪ Overriding the saved option {change}")]);
    }
}

/// What `--reset` removed.
pub(crate) fn reset_done(removed: &[std::path::PathBuf]) {
    if removed.is_empty() {
        say(&["ℹ️  Nothing to reset: no loop state, history or context here."]);
        return;
    }
    let mut lines = vec!["✅ Reset the loop. Removed:".to_owned()];
    for path in removed {
        lines.push(format!("   {}", path.display()));
    }
    lines.push("The task file, if any, was kept.".to_owned());
    say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// Who reads context added now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ContextReaders {
    /// No loop runs here: the next one to start.
    NextLoop,
    /// The one loop running here.
    OneLoop,
    /// The task loops of a run of several (`--parallel`, `--worker`).
    TaskLoops,
}

/// `--add-context` succeeded (`task`: with `--task ID`).
pub(crate) fn context_added(path: &Path, readers: ContextReaders, task: Option<&str>) {
    let added = match task {
        Some(id) => format!("✅ Context for task {id} added to {}", path.display()),
        None => format!("✅ Context added to {}", path.display()),
    };
    let when = match (readers, task) {
        (ContextReaders::NextLoop, None) => "It will be used when the next loop starts.".to_owned(),
        (ContextReaders::OneLoop, None) => {
            "The running loop picks it up when its next iteration starts.".to_owned()
        }
        (ContextReaders::TaskLoops, None) => {
            "Every task's loop picks it up once, at its next iteration: those running now and those that start later in this run.".to_owned()
        }
        (ContextReaders::TaskLoops, Some(id)) => format!(
            "Only task {id}'s loop picks it up, when its next iteration starts (or when the task starts)."
        ),
        (ContextReaders::OneLoop, Some(id)) => format!(
            "The running loop picks it up when its next iteration starts; a --parallel run or a --worker gives it to task {id}'s loop only."
        ),
        (ContextReaders::NextLoop, Some(id)) => format!(
            "It will be used when the next loop starts; a --parallel run or a --worker gives it to task {id}'s loop only."
        ),
    };
    say(&[&added, &format!("   {when}")]);
}

/// A task loop's prompt holds `hints` sections of the run's pending context.
pub(crate) fn context_given(out: &Voice, hints: usize) {
    let what = if hints == 1 {
        "The hint added with --add-context goes".to_owned()
    } else {
        format!("{hints} hints added with --add-context go")
    };
    out.say(&[&format!("📨 {what} into this iteration's prompt")]);
}

/// The run's pending context could not be read or recorded for a task loop's prompt.
pub(crate) fn context_not_given(out: &Voice, why: &str) {
    out.warn(&[&format!(
        "⚠️  The run's pending context could not be used for this task: {why}; it stays in .ralph/ralph-context.md for its next iteration"
    )]);
}

/// `--clear-context` finished.
pub(crate) fn context_cleared(had_content: bool) {
    if had_content {
        say(&["✅ Pending context cleared."]);
    } else {
        say(&["ℹ️  No pending context to clear."]);
    }
}

/// `--list-tasks` without a task file.
pub(crate) fn no_tasks_file(path: &Path) {
    say(&[&format!(
        "No tasks file yet ({}). Add one with: ralph --add-task \"description\"",
        path.display()
    )]);
}

/// `--add-task` succeeded.
pub(crate) fn task_added(description: &str, number: usize) {
    say(&[&format!("✅ Task {number} added: \"{description}\"")]);
}

/// The prompt's bytes are not UTF-8; ralph goes on with U+FFFD in their place.
pub(crate) fn prompt_not_utf8(source: &str) {
    warn(&[&format!(
        "⚠️  The text of {source} is not valid UTF-8; ralph replaced the bytes that are not with U+FFFD. Save it as UTF-8 to give the agent exactly what you wrote."
    )]);
}

/// `--add-task --blocked-by` named ids that no task has yet.
pub(crate) fn unknown_blockers(ids: &[String]) {
    warn(&[&format!(
        "⚠️  No task has the id {} yet; the new task waits until one with that id is added and done.",
        ids.iter()
            .map(|id| format!("'{id}'"))
            .collect::<Vec<_>>()
            .join(", ")
    )]);
}

/// `--import` added `added` tasks from `file`, left out `skipped` already in the list, and
/// gave the tasks in `renamed` new ids (the one taken, the new one).
pub(crate) fn tasks_imported(
    file: &str,
    format: &str,
    (added, skipped): (usize, usize),
    renamed: &[(String, String)],
) {
    let mut line = format!(
        "📥 Imported {} from {file} ({format})",
        plural(added as u64, "task")
    );
    if !renamed.is_empty() {
        const SHOWN: usize = 10;
        let mut pairs: Vec<String> = (renamed.iter().take(SHOWN))
            .map(|(old, new)| format!("{old} → {new}"))
            .collect();
        if renamed.len() > SHOWN {
            pairs.push(format!("and {} more", renamed.len() - SHOWN));
        }
        line.push_str(&format!(
            "; {} had an id already in use and got a new one: {}",
            renamed.len(),
            pairs.join(", ")
        ));
    }
    if skipped > 0 {
        line.push_str(&format!(
            "; left out {} already in the list (same id and text, or same text without an id)",
            plural(skipped as u64, "task")
        ));
    }
    say(&[&line]);
}

/// `--remove-task` succeeded.
pub(crate) fn task_removed(number: usize) {
    say(&[&format!("✅ Removed task {number} and its subtasks")]);
}

/// `--resume` found the previous run's agent still running and stopped it.
pub(crate) fn leftover_agent_stopped(out: &Voice, group: i32) {
    out.warn(&[&format!(
        "⚠️  The agent started by the previous ralph (process group {group}) was still running; stopping it before resuming."
    )]);
}
