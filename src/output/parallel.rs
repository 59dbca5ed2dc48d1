//! Messages of a parallel run: one line per event, prefixed with the task.

use super::Voice;
use super::format::{long_duration_ms, plural};
use super::remote::{
    base_moved, claim_lost, claim_lost_no_push, claim_race_lost, merged_along,
    pushed_work_set_aside, remote_worker_ended, remote_worker_started, task_claimed,
    worker_waiting,
};
use crate::event::{LoopEvent, Notice, ParallelEnd};

/// A parallel run starts.
pub(crate) fn parallel_started(out: &Voice, at_once: u32, base: &str) {
    out.say(&[&format!(
        "🚀 Running the task list with up to {} at once; finished tasks are merged into {base}.",
        plural(u64::from(at_once), "agent")
    )]);
}

/// A task loop of a parallel run starts on its task.
pub(crate) fn task_started(out: &Voice, id: &str, text: &str, branch: &str) {
    out.say(&[&format!(
        "[{id}] ▶️  \"{text}\" in .ralph/worktrees/{id} (branch {branch})"
    )]);
}

/// A finished task was merged into the base.
pub(crate) fn task_merged(out: &Voice, id: &str, base: &str, hash: &str) {
    out.say(&[&format!(
        "[{id}] 🔀 Merged into {base} ({hash}); task marked [x]"
    )]);
}

/// A finished task's merge conflicted: its loop resolves it.
pub(crate) fn merge_conflicted(out: &Voice, id: &str, files: &[String]) {
    out.warn(&[&format!(
        "[{id}] ⚠️  Merge conflict in {}; the agent resolves it in the task's worktree",
        files.join(", ")
    )]);
}

/// A task could not be done: it is marked failed.
pub(crate) fn task_given_up(out: &Voice, id: &str, why: &str) {
    out.warn(&[&format!("[{id}] ❌ Task failed: {why}; marked [!]")]);
}

/// A parallel run ends: why, and what it took.
pub(crate) fn parallel_ended(out: &Voice, end: &ParallelEnd) {
    let mut lines = vec![super::paint(
        super::Style::Bold,
        &format!(
            "Parallel run ended: {} (exit {})",
            parallel_summary(end),
            end.exit_code
        ),
        false,
    )];
    lines.extend(
        (end.not_started.iter()).map(|task| format!("   {} never ran: {}", task.task, task.why)),
    );
    lines.extend(end.not_carried.iter().map(|task| {
        format!("   {task}: its notes or added tasks are not in the base; its branch ralph/{task} keeps them")
    }));
    out.say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// What a parallel run did: why it ended, its tasks, iterations, time and cost.
pub(crate) fn parallel_summary(end: &ParallelEnd) -> String {
    let interrupted = if end.tasks_interrupted > 0 {
        format!(", {} interrupted", end.tasks_interrupted)
    } else {
        String::new()
    };
    let mut line = format!(
        "{} · {} done, {} failed{interrupted}, {} not started · {} · total time {}",
        end.reason,
        plural(u64::from(end.tasks_done), "task"),
        end.tasks_failed,
        end.tasks_not_started,
        plural(u64::from(end.iterations), "iteration"),
        long_duration_ms(end.total_duration_ms)
    );
    if end.tokens > 0 {
        line.push_str(&format!(" · {} tokens", super::compact_number(end.tokens)));
    }
    if let Some(cost) = end.cost_usd {
        line.push_str(&format!(" · {}", super::cost_text(cost)));
    }
    line
}

/// A task loop's task is done (and verified) in its branch.
pub(crate) fn task_loop_done(out: &Voice, iterations: u32, total_ms: u64) {
    out.say(&[&format!(
        "✅ Task done in {} ({}); merging",
        plural(u64::from(iterations), "iteration"),
        long_duration_ms(total_ms)
    )]);
}

/// A `--worktree` loop starts.
pub(crate) fn worktree_loop(out: &Voice, name: &str, branch: &str) {
    out.say(&[&format!(
        "🌿 Running in .ralph/worktrees/{name} on branch {branch}"
    )]);
}

/// A `--worktree` loop completed without `--merge`: its branch waits for review.
pub(crate) fn worktree_left(out: &Voice, name: &str, branch: &str, base: &str) {
    out.say(&[&format!(
        "🌿 The work of {name} is on branch {branch}. Review it, then merge it into {base}: git merge {branch} (or run with --merge next time)"
    )]);
}

/// A merge cut off by a kill was undone; the task is merged again when it is done.
pub(crate) fn unfinished_merge_undone(out: &Voice) {
    out.warn(&[
        "⚠️  A merge of a task was cut off (ralph was stopped while it merged); it is undone and will be redone.",
    ]);
}

/// A merge a stopped ralph had begun to land was finished.
pub(crate) fn landing_finished(out: &Voice, task: &str) {
    out.warn(&[&format!(
        "[{task}] ⚠️  The task's merge was cut off (ralph was stopped while it moved the base to it); it is finished now."
    )]);
}

/// A worker's task was taken over while it was gone: its worktree of it is removed.
pub(crate) fn taken_over_elsewhere(out: &Voice, task: &str, by: &str) {
    out.say(&[&format!(
        "[{task}] 🧹 Worker {by} took this task over while this worker was stopped, and goes on with it from the pushed branch; its worktree here is removed."
    )]);
}

/// The plan a spec became: one line per task, with what it waits for.
pub(crate) fn plan_created(out: &Voice, tasks: &[crate::event::PlannedTask]) {
    let mut lines = vec![format!(
        "🗺️  Planned {} task{}:",
        tasks.len(),
        if tasks.len() == 1 { "" } else { "s" }
    )];
    for task in tasks {
        let waits = if task.blocked_by.is_empty() {
            String::new()
        } else {
            format!(" (after {})", task.blocked_by.join(", "))
        };
        lines.push(format!("   {}  {}{waits}", task.id, task.content));
    }
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    out.say(&lines);
}

/// A task's merge failed the run's `--verify` gate: back to its agent.
pub(crate) fn merge_refused(
    out: &Voice,
    (task, command, base): (&str, &str, &str),
    (tries, most): (u32, u32),
) {
    out.warn(&[&format!(
        "[{task}] 🚧 Not merged: `{command}` fails on its work merged with {base}. Back to its agent with the output ({tries} of {most})."
    )]);
}

/// A task's worktree lacks the base's submodules.
pub(crate) fn submodules_missing(out: &Voice, task: &str, why: &str) {
    out.warn(&[&format!(
        "[{task}] ⚠️  The task's worktree has no submodules ({why}); a build that needs them fails there. Check `git submodule update --init` in your repository."
    )]);
}

/// A done task's merge waits for the user's uncommitted edits in the base.
pub(crate) fn merge_waits(out: &Voice, task: &str, files: &[String]) {
    out.warn(&[&format!(
        "[{task}] ⏳ Task done; its merge waits: you have uncommitted changes to {}, which it changed too. Commit or stash them (git stash), and the merge goes on by itself.",
        files.join(", ")
    )]);
}

/// A task's saved work was made for another text: kept aside, never merged.
pub(crate) fn work_set_aside(out: &Voice, task: &str, made_for: &str, branch: &str) {
    out.warn(&[&format!(
        "[{task}] ⚠️  The work saved for this task was made for \"{made_for}\" (the task list changed since); it is kept on branch {branch} and not merged. The task starts afresh."
    )]);
}

/// Worktrees and branches of merged tasks removed, and those kept (task, why).
pub(crate) fn swept(out: &Voice, removed: &[String], kept: &[(String, String)]) {
    if !removed.is_empty() {
        out.say(&[&format!(
            "🧹 Removed the worktrees and branches of {} (their work is in the base): {}",
            plural(removed.len() as u64, "merged task"),
            removed.join(", ")
        )]);
    }
    for (task, why) in kept {
        out.warn(&[&format!("⚠️  Kept task {task}'s worktree or branch: {why}")]);
    }
}

/// A task's new box (`[/]`, `[!]`) could not be written or committed.
pub(crate) fn task_not_recorded(out: &Voice, id: &str, status: &str, why: &str) {
    out.warn(&[&format!(
        "[{id}] ⚠️  Could not mark the task {status} in the task file ({why}); mark it yourself"
    )]);
}

/// A task's worktree has uncommitted work, so it is kept.
pub(crate) fn worktree_kept(out: &Voice, id: &str, paths: &[String]) {
    let shown: Vec<&str> = paths.iter().take(3).map(String::as_str).collect();
    out.warn(&[&format!(
        "[{id}] ⚠️  .ralph/worktrees/{id} has uncommitted changes ({}{}), so it is kept; look at them, then remove it with git worktree remove",
        shown.join(", "),
        if paths.len() > 3 { ", …" } else { "" }
    )]);
}

/// At a task's merge, what its agent added to ralph's own files on its branch joined the base
/// (`into`); what could not is said in one line, with the branch that keeps it.
pub(crate) fn notes_carried(
    out: &Voice,
    id: &str,
    into: &str,
    branch: &str,
    tasks: &[String],
    problems: &[String],
) {
    if !tasks.is_empty() {
        let texts: Vec<String> = tasks.iter().map(|t| format!("\"{t}\"")).collect();
        out.say(&[&format!(
            "[{id}] 📝 {} it added joined the task list of {into}: {}",
            plural(tasks.len() as u64, "task"),
            texts.join(", ")
        )]);
    }
    if !problems.is_empty() {
        out.warn(&[&format!(
            "[{id}] ⚠️  Not carried into {into}: {}; branch {branch} keeps them",
            problems.join("; ")
        )]);
    }
}

/// The events of a run of several loops (`--parallel`, `--worker`, `--worktree`), as the
/// terminal tells them.
pub(crate) fn fleet_event(out: &Voice, event: &LoopEvent) {
    match event {
        LoopEvent::TaskStarted {
            task,
            description,
            branch,
        } => task_started(out, task, description, branch),
        LoopEvent::TaskMerged { task, into, commit } => task_merged(out, task, into, commit),
        LoopEvent::WorktreeMerged { name, into, commit } => out.say(&[&format!(
            "[{name}] 🔀 Merged into {into} ({commit}); its worktree and branch are removed"
        )]),
        LoopEvent::MergeConflicted { task, files } => merge_conflicted(out, task, files),
        LoopEvent::MergeRefused {
            task,
            base,
            command,
            tries,
            most,
            sent_back: true,
            ..
        } => merge_refused(out, (task, command, base), (*tries, *most)),
        // The task's failure follows, with why.
        LoopEvent::MergeRefused { .. } => {}
        LoopEvent::NotesCarried {
            task,
            into,
            branch,
            tasks,
            problems,
            ..
        } => notes_carried(out, task, into, branch, tasks, problems),
        LoopEvent::TaskFailed { task, reason } => task_given_up(out, task, reason),
        LoopEvent::ParallelEnded(end) => parallel_ended(out, end),
        LoopEvent::WorkerStarted {
            worker,
            remote,
            base,
            job,
        } => remote_worker_started(out, worker, (remote, base), job.as_deref()),
        LoopEvent::TaskClaimed {
            task,
            description,
            taken_over_from,
            earlier_attempt,
        } => {
            let from = taken_over_from.as_deref();
            task_claimed(
                out,
                task,
                description,
                from.map(|from| (from, *earlier_attempt)),
            );
        }
        LoopEvent::ClaimLost { task } => claim_lost(out, task),
        LoopEvent::WorkerEnded { reason, exit_code } => {
            remote_worker_ended(out, reason, *exit_code);
        }
        _ => {}
    }
}

/// The notices of a run of several loops, as the terminal tells them.
pub(crate) fn fleet_notice(out: &Voice, notice: &Notice<'_>) {
    match notice {
        Notice::ParallelStarted { at_once, base } => parallel_started(out, *at_once, base),
        Notice::WorktreeLoop { name, branch } => worktree_loop(out, name, branch),
        Notice::WorktreeLeft { name, branch, base } => worktree_left(out, name, branch, base),
        Notice::UnfinishedMergeUndone => unfinished_merge_undone(out),
        Notice::WaitingForPlan { by } => out.say(&[&format!(
            "⏳ Worker {by} is planning the spec into the task list; this worker waits for its plan."
        )]),
        Notice::TakenOverElsewhere { task, by } => taken_over_elsewhere(out, task, by),
        Notice::LandingFinished { task } => landing_finished(out, task),
        Notice::SubmodulesMissing { task, why } => submodules_missing(out, task, why),
        Notice::MergeWaits { task, files } => merge_waits(out, task, files),
        Notice::WorkSetAside {
            task,
            made_for,
            branch,
        } => work_set_aside(out, task, made_for, branch),
        Notice::Swept { removed, kept } => swept(out, removed, kept),
        Notice::TaskNotRecorded { task, status, why } => {
            task_not_recorded(out, task, status, why);
        }
        Notice::WorktreeKept { task, paths } => worktree_kept(out, task, paths),
        Notice::ClaimRaceLost { task } => claim_race_lost(out, task),
        Notice::ClaimLostNoPush => claim_lost_no_push(out),
        Notice::PushedWorkSetAside {
            task,
            remote,
            branch,
        } => pushed_work_set_aside(out, task, remote, branch),
        Notice::BaseMoved { task, base } => base_moved(out, task, base),
        Notice::WorkerWaiting { held } => worker_waiting(out, *held),
        Notice::MergedAlong { task, along, base } => merged_along(out, task, along, base),
        _ => {}
    }
}
