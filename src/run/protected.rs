//! After each iteration, before anything is judged or committed: what the agent changed of the
//! protected paths (`--protect`, its task's `protect:`, but for its `may_change:`) is put back
//! as the iteration found it, left out of the commit, recorded, told to the user and, in the
//! next prompt, to the agent. With `--protect-mode fail` the loop then ends (`decision.rs`).
//! Checks that run afterwards (`--verify`, a task's verify) judge the protected files as they
//! were, not the agent's copy.

use std::collections::BTreeMap;

use crate::error::fail;
use crate::event::Notice;
use crate::prompt::{self, Feedback};
use crate::protect::{self, Protection};
use crate::storage::RalphDir;
use crate::storage::tasks::TaskList;

use super::Runner;
use super::plan::Focus;
use super::record::AgentRun;

/// What each task of the list protects (`protect:`) and may change (`may_change:`), by its key,
/// as the list said when the loop started: the agent edits the list as it works (it marks its
/// task done), and must not grant itself what its task may change. A task added since has no
/// `may_change:`.
#[derive(Debug, Default)]
pub(super) struct Sealed(BTreeMap<String, (Vec<String>, Vec<String>)>);

impl Sealed {
    /// The task list in `dir`, as it is now.
    pub(super) fn read(dir: &RalphDir) -> Self {
        let content = crate::storage::read_text(&dir.tasks())
            .ok()
            .flatten()
            .unwrap_or_default();
        let list = TaskList::parse(&content);
        Self(
            (list.tasks.iter())
                .map(|task| (task.key().to_owned(), protect::of_task(task)))
                .collect(),
        )
    }

    /// What the task `key` protects besides the run's, and what it may change.
    fn of(&self, key: &str) -> (&[String], &[String]) {
        self.0.get(key).map_or((&[], &[]), |(protect, may)| {
            (protect.as_slice(), may.as_slice())
        })
    }
}

/// Puts back what `run` changed of the protected paths (as HEAD had them when the iteration
/// started); the paths put back leave `run.files` for `run.protected`. A task loop's go back to
/// where its branch forked from the base.
pub(super) fn put_back(
    runner: &mut Runner<'_>,
    run: &mut AgentRun,
    focus: Option<&Focus>,
) -> anyhow::Result<()> {
    let (Some(_), Some(head)) = (&runner.env.repo, run.head.clone()) else {
        return Ok(());
    };
    let head = head.as_str();
    let options = &runner.env.config.options;
    let mut protect = options.protect.clone();
    let mut may_change = Vec::new();
    if let Some(focus) = focus {
        // What the list says now can only add to what it protects.
        let (sealed, may) = runner.sealed.of(&focus.key);
        protect.extend(sealed.iter().chain(&focus.protect).cloned());
        may_change = may.to_vec();
    }
    let Some(protection) = Protection::new(&protect, &may_change).map_err(fail)? else {
        return Ok(());
    };
    // A path the user had changed before the loop is never committed by it, and putting it
    // back would lose the user's change.
    let dirty = &runner.state.dirty_at_start;
    let changed: Vec<String> = (run.files.iter())
        .filter(|path| protection.guards(path) && !dirty.contains(*path))
        .cloned()
        .collect();
    if changed.is_empty() {
        return Ok(());
    }
    restore(runner, head, &changed)?;
    run.files.retain(|path| !changed.contains(path));
    run.protected = changed;
    Ok(())
}

/// When a loop starts again after ralph was killed (`--resume`, a task loop in a worktree a
/// killed run left): what the protected paths hold of the iteration that was cut short, which
/// ralph could not put back, is put back now, before anything of it is committed.
pub(super) fn put_back_left(runner: &mut Runner<'_>) -> anyhow::Result<()> {
    let Some(repo) = &runner.env.repo else {
        return Ok(());
    };
    let Some(protection) =
        Protection::new(&runner.env.config.options.protect, &[]).map_err(fail)?
    else {
        return Ok(());
    };
    let Some(snapshot) = repo.scan(&mut runner.tree) else {
        return Ok(());
    };
    let Some(head) = snapshot.head().map(str::to_owned) else {
        return Ok(());
    };
    let dirty = &runner.state.dirty_at_start;
    let left: Vec<String> = (repo.uncommitted(&snapshot).into_iter())
        .filter(|path| protection.guards(path) && !dirty.contains(path))
        .collect();
    if left.is_empty() {
        return Ok(());
    }
    restore(runner, &head, &left)
}

/// Puts `changed` back as the task found them — a task loop's, as its branch forked from the
/// base (work its branch brought that the landing refused included); a loop's own, as `head`
/// has them — and says so, to the user and in the next prompt.
fn restore(runner: &mut Runner<'_>, head: &str, changed: &[String]) -> anyhow::Result<()> {
    let Some(repo) = &runner.env.repo else {
        return Ok(());
    };
    let start = (runner.env.shape.task_loop())
        .and_then(|task| repo.merge_base(head, &task.base))
        .unwrap_or_else(|| head.to_owned());
    repo.restore(&start, changed).map_err(fail)?;
    // The commit and the next iteration look at the tree again.
    runner.tree.forget();
    runner.env.sink.notice(Notice::ProtectedRestored {
        iteration: runner.state.iteration,
        files: changed,
        fails: runner.env.rules.protect_fails,
    });
    (runner.feedback).push(prompt::feedback(Feedback::ProtectedRestored {
        files: changed,
    }));
    Ok(())
}

/// At a loop's start: `--holdout` without a sandbox is not secret, and a `--protect` pattern that
/// matches no file of the repository (a typo protects nothing) is said.
pub(super) fn tell_at_start(runner: &Runner<'_>) {
    if !runner.env.config.options.holdout.is_empty() && runner.env.sandbox.is_none() {
        runner.env.sink.notice(Notice::HoldoutNotSecret);
    }
    tell_unmatched(runner);
}

fn tell_unmatched(runner: &Runner<'_>) {
    let patterns = &runner.env.config.options.protect;
    if patterns.is_empty() {
        return;
    }
    let Some(repo) = &runner.env.repo else {
        runner.env.sink.notice(Notice::ProtectWithoutGit);
        return;
    };
    let files = repo.files();
    for pattern in patterns {
        let Ok(Some(one)) = Protection::new(std::slice::from_ref(pattern), &[]) else {
            continue;
        };
        if !files.iter().any(|file| one.guards(file)) {
            runner
                .env
                .sink
                .notice(Notice::ProtectMatchesNothing(pattern));
        }
    }
}

/// Stamps `results` (checks that just ran) with the hash of the protected files as they found
/// them (`--protect`), when there are any.
pub(super) fn seal(runner: &Runner<'_>, results: &mut [crate::model::Verification]) {
    let (Some(repo), false) = (&runner.env.repo, results.is_empty()) else {
        return;
    };
    let Ok(Some(protection)) = Protection::new(&runner.env.config.options.protect, &[]) else {
        return;
    };
    let files: Vec<String> = (repo.files().into_iter())
        .filter(|file| protection.guards(file))
        .collect();
    let hash = repo.files_hash(&files);
    for result in results {
        result.protected_tree.clone_from(&hash);
    }
}
