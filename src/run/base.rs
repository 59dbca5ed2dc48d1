//! The base a run of task loops merges into: its repository and checked-out branch, ralph's own
//! files there, each task's branch, and the boxes of its task list.

use std::path::Path;

use crate::error::fail;
use crate::storage::tasks::{self, Task, TaskList, TaskStatus};
use crate::storage::{self, RalphDir};

use crate::git::Repo;

use super::preflight::{OwnMerge, refuse_operation_underway};

/// The repository and its checked-out branch, the base of worktrees; `.ralph/worktrees/` is
/// kept out of git.
pub(super) fn base_branch(
    cwd: &Path,
    dir: &RalphDir,
    flag: &str,
) -> anyhow::Result<(Repo, String)> {
    let repo = Repo::discover(cwd).ok_or_else(|| {
        fail(format!("{flag} runs in a git worktree, and this is not a git repository; run `git init` and commit first"))
    })?;
    // A merge of ralph's own branch left half done is the caller's to undo or go on with.
    refuse_operation_underway(&repo, OwnMerge::LeftToCaller)?;
    let base = repo.current_branch().ok_or_else(|| {
        fail(format!("{flag} merges into the checked-out branch, and HEAD is detached; check out a branch first"))
    })?;
    dir.ignore_own_dirs()?;
    Ok((repo, base))
}

/// ralph's files `names` under `.ralph/`, repository-relative.
pub(super) fn own_files(repo: &Repo, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|name| format!("{}{}/{name}", repo.prefix(), storage::RALPH_DIR))
        .collect()
}

pub(super) use crate::storage::tasks::branch_of as branch;

pub(super) fn find(list: &TaskList, id: &str) -> Option<Task> {
    tasks::task_ids(list)
        .iter()
        .position(|each| each == id)
        .map(|index| list.tasks[index].clone())
}

/// Sets task `id`'s box in the base's task file (with a note), under the task file's lock.
pub(super) fn mark(
    dir: &RalphDir,
    id: &str,
    status: TaskStatus,
    note: Option<&str>,
) -> Result<(), String> {
    tasks::edit(dir, |current| {
        let updated = current.and_then(|content| {
            let list = TaskList::parse(&String::from_utf8_lossy(content));
            let number = tasks::task_ids(&list).iter().position(|each| each == id)? + 1;
            tasks::set_status(content, number, status, note)
        });
        (updated, ())
    })
    .map_err(|err| format!("{err:#}"))
}
