//! Messages of a parallel run: one line per event, prefixed with the task.

use serde_json::json;

use super::format::{long_duration_ms, plural};
use super::{event, say, warn};

/// A parallel run starts.
pub(crate) fn parallel_started(workers: u32, base: &str) {
    say(&[&format!(
        "🚀 Running the task list with up to {workers} agents at once; finished tasks are merged into {base}."
    )]);
}

/// A parallel worker starts on its task.
pub(crate) fn worker_started(id: &str, text: &str, branch: &str) {
    event(
        "task_started",
        json!({"task": id, "description": text, "branch": branch}),
    );
    say(&[&format!(
        "[{id}] ▶️  \"{text}\" in .ralph/worktrees/{id} (branch {branch})"
    )]);
}

/// A finished task was merged into the base.
pub(crate) fn task_merged(id: &str, base: &str, hash: &str) {
    event(
        "task_merged",
        json!({"task": id, "into": base, "commit": hash}),
    );
    say(&[&format!(
        "[{id}] 🔀 Merged into {base} ({hash}); task marked [x]"
    )]);
}

/// A finished task's merge conflicted: its worker resolves it.
pub(crate) fn merge_conflicted(id: &str, files: &[String]) {
    event("merge_conflicted", json!({"task": id, "files": files}));
    warn(&[&format!(
        "[{id}] ⚠️  Merge conflict in {}; the agent resolves it in the task's worktree",
        files.join(", ")
    )]);
}

/// A task could not be done: it is marked failed.
pub(crate) fn task_given_up(id: &str, why: &str) {
    event("task_failed", json!({"task": id, "reason": why}));
    warn(&[&format!("[{id}] ❌ Task failed: {why}; marked [!]")]);
}

/// A parallel run ends; returns the `parallel_ended` event object (for hooks and notifications).
pub(crate) fn parallel_ended(reason: &str, exit_code: u8) -> serde_json::Value {
    let fields = json!({"reason": reason, "exit_code": exit_code});
    event("parallel_ended", fields.clone());
    say(&[&format!("Parallel run ended: {reason} (exit {exit_code})")]);
    super::event_object("parallel_ended", fields)
}

/// A parallel worker's task is done (and verified) in its branch.
pub(crate) fn worker_done(iterations: u32, total_ms: u64) {
    say(&[&format!(
        "✅ Task done in {} ({}); merging",
        plural(u64::from(iterations), "iteration"),
        long_duration_ms(total_ms)
    )]);
}

/// A `--worktree` loop starts.
pub(crate) fn worktree_loop(name: &str, branch: &str) {
    say(&[&format!(
        "🌿 Running in .ralph/worktrees/{name} on branch {branch}"
    )]);
}

/// A `--worktree` loop completed without `--merge`: its branch waits for review.
pub(crate) fn worktree_left(name: &str, branch: &str, base: &str) {
    say(&[&format!(
        "🌿 The work of {name} is on branch {branch}. Review it, then merge it into {base}: git merge {branch} (or run with --merge next time)"
    )]);
}

/// A merge cut off by a kill was undone; the task is merged again when it is done.
pub(crate) fn unfinished_merge_undone() {
    warn(&[
        "⚠️  A merge of a task was cut off (ralph was stopped while it merged); it is undone and will be redone.",
    ]);
}

/// A failed task's `[!]` could not be written or committed.
pub(crate) fn task_not_recorded(id: &str, why: &str) {
    warn(&[&format!(
        "[{id}] ⚠️  Could not record the failure in the task file ({why}); mark it yourself"
    )]);
}

/// A task's worktree has uncommitted work, so it is kept.
pub(crate) fn worktree_kept(id: &str, paths: &[String]) {
    let shown: Vec<&str> = paths.iter().take(3).map(String::as_str).collect();
    warn(&[&format!(
        "[{id}] ⚠️  .ralph/worktrees/{id} has uncommitted changes ({}{}), so it is kept; look at them, then remove it with git worktree remove",
        shown.join(", "),
        if paths.len() > 3 { ", …" } else { "" }
    )]);
}

/// At a task's merge, what its agent added to ralph's own files on its branch joined the base
/// (`into`); what could not is said in one line, with the branch that keeps it.
pub(crate) fn notes_carried(
    id: &str,
    into: &str,
    branch: &str,
    carried: &crate::storage::carry::Carried,
) {
    if carried == &crate::storage::carry::Carried::default() {
        return;
    }
    event(
        "notes_carried",
        json!({"task": id, "into": into, "notes": carried.notes, "tasks": carried.tasks, "problems": carried.problems}),
    );
    if !carried.tasks.is_empty() {
        let texts: Vec<String> = carried.tasks.iter().map(|t| format!("\"{t}\"")).collect();
        say(&[&format!(
            "[{id}] 📝 {} it added joined the task list of {into}: {}",
            plural(carried.tasks.len() as u64, "task"),
            texts.join(", ")
        )]);
    }
    if !carried.problems.is_empty() {
        warn(&[&format!(
            "[{id}] ⚠️  Not carried into {into}: {}; branch {branch} keeps them",
            carried.problems.join("; ")
        )]);
    }
}
