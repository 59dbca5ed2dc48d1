//! The base a run of task loops merges into: its repository and checked-out branch, ralph's own
//! files there, each task's branch, and the boxes of its task list.

use crate::error::fail;
use crate::storage::identity::{self, Owner};
use crate::storage::tasks::{self, Task, TaskList, TaskStatus};
use crate::storage::{self, Loaded, RalphDir};

use crate::git::{Landed, Landing, Repo};

use crate::run::decision::Stop;
use crate::run::preflight::{OwnMerge, refuse_operation_underway};

/// The repository found around the working directory and its checked-out branch, the base of
/// worktrees; `.ralph/worktrees/` is kept out of git.
pub(super) fn base_branch(
    found: Option<Repo>,
    dir: &RalphDir,
    flag: &str,
) -> anyhow::Result<(Repo, String)> {
    let repo = found.ok_or_else(|| {
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

/// Refuses, before anything is planned or committed, a base that cannot host task loops: no git
/// repository, a detached HEAD, no commit yet, or changes of the user's not committed (a merge a
/// killed ralph left half done in it is `parallel::prepare`'s to undo).
pub(super) fn check_base(found: Option<Repo>, dir: &RalphDir, flag: &str) -> anyhow::Result<()> {
    let (repo, _) = base_branch(found, dir, flag)?;
    if repo.resolve("HEAD").is_none() {
        return Err(fail(format!(
            "{flag} starts from the last commit and merges into it, and this repository has no commit yet; commit your files first (git add -A && git commit -m \"First commit\"), then run again"
        ))
        .into());
    }
    if repo.merging() {
        return Ok(());
    }
    let own = own_files(
        &repo,
        &[
            storage::TASKS_FILE,
            storage::GITIGNORE_FILE,
            storage::progress::PROGRESS_FILE,
        ],
    );
    refuse_dirty(
        &repo,
        &own.iter().map(String::as_str).collect::<Vec<_>>(),
        flag,
    )
}

/// Refuses (exit 1) a work tree with changes other than ralph's `own` files.
pub(super) fn refuse_dirty(repo: &Repo, own: &[&str], flag: &str) -> anyhow::Result<()> {
    let dirty = repo.dirty_paths(own).map_err(fail)?;
    if dirty.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = dirty.iter().take(3).map(String::as_str).collect();
    Err(fail(format!(
        "the work tree has uncommitted changes ({}{}); commit or stash them first: {flag} starts from the last commit and merges into it",
        shown.join(", "),
        if dirty.len() > 3 { ", …" } else { "" }
    ))
    .into())
}

pub(super) use crate::run::preflight::own_files;

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

/// What [`sweep`] did: the tasks whose worktree and branch it removed, and those it kept, with
/// why.
#[derive(Debug, Default)]
pub(crate) struct Swept {
    pub(crate) removed: Vec<String>,
    pub(crate) kept: Vec<(String, String)>,
}

/// Removes the worktree and branch of every task that is `[x]` in `dir`'s task list and whose
/// branch's work is all in HEAD (a kill after its merge commit left them); a worktree with
/// uncommitted changes is kept, and so is a branch with work the base does not have.
pub(crate) fn sweep(repo: &Repo, dir: &RalphDir) -> Swept {
    let list = storage::read_text(&dir.tasks())
        .ok()
        .flatten()
        .map(|content| TaskList::parse(&content))
        .unwrap_or_default();
    let done: Vec<String> = (list.tasks.iter())
        .zip(tasks::task_ids(&list))
        .filter(|(task, _)| task.status == TaskStatus::Complete)
        .map(|(_, id)| id)
        .collect();
    let mut swept = Swept::default();
    for (id, merged) in repo.task_branches() {
        if !done.contains(&id) {
            continue;
        }
        if !merged {
            let why = format!("its branch {} has work the base does not have", branch(&id));
            swept.kept.push((id, why));
            continue;
        }
        swept.remove(repo, dir, &id, true);
    }
    swept
}

/// `--reset`: removes every task worktree and branch whose work is all in HEAD; one with work
/// the base does not have (commits, or uncommitted changes) is set aside, kept on a
/// `ralph-kept/<id>-reset-<time>` branch (uncommitted changes committed there), so a new run starts the
/// task afresh instead of taking that work up.
pub(crate) fn clear(repo: &Repo, dir: &RalphDir) -> Swept {
    let mut swept = Swept::default();
    // A merge a killed run was landing goes first: the base may already point at it.
    let _ = finish_landing(repo, dir);
    super::pool::clear(repo, dir);
    let stamp = crate::model::now().format("%Y%m%d%H%M%S").to_string();
    for (id, merged) in repo.task_branches() {
        let path = dir.worktree(&id);
        if merged && Swept::dirty(&path).is_empty() {
            swept.remove(repo, dir, &id, true);
            continue;
        }
        let keep = format!("ralph-kept/{id}-reset-{stamp}");
        swept.set_aside(repo, dir, &id, &keep);
    }
    swept
}

impl Swept {
    /// Sets task `id`'s work (its branch's commits, its worktree's uncommitted changes
    /// committed) aside on branch `keep` (`keep-2`, `-3`… when that exists: work set aside
    /// within the same second), never merged, and says where it went.
    pub(crate) fn set_aside(&mut self, repo: &Repo, dir: &RalphDir, id: &str, keep: &str) {
        let keep = (1..)
            .map(|n| match n {
                1 => keep.to_owned(),
                _ => format!("{keep}-{n}"),
            })
            .find(|name| !repo.has_branch(name))
            .unwrap_or_else(|| keep.to_owned());
        let kept = (repo.set_aside(&dir.worktree(id), &branch(id), &keep))
            .map(|()| format!("its work is kept on branch {keep}"));
        let why = kept.unwrap_or_else(|why| {
            format!(
                "its work could not be set aside ({why}); it stays on {}",
                branch(id)
            )
        });
        self.kept.push((id.to_owned(), why));
    }

    /// The uncommitted changes of the worktree at `path` (ralph's own files aside); none when it
    /// is gone.
    pub(crate) fn dirty(path: &std::path::Path) -> Vec<String> {
        let Some(worktree) = Repo::linked_worktree(path) else {
            return Vec::new();
        };
        let own = own_files(
            &worktree,
            &[storage::TASKS_FILE, storage::progress::PROGRESS_FILE],
        );
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        worktree.dirty_paths(&own).unwrap_or_default()
    }

    /// Removes task `id`'s worktree unless it has uncommitted changes, and its branch with
    /// `with_branch`.
    pub(crate) fn remove(&mut self, repo: &Repo, dir: &RalphDir, id: &str, with_branch: bool) {
        let path = dir.worktree(id);
        let dirty = Self::dirty(&path);
        if !dirty.is_empty() {
            let why = format!(
                ".ralph/worktrees/{id} has uncommitted changes ({})",
                dirty.join(", ")
            );
            self.kept.push((id.to_owned(), why));
            return;
        }
        repo.remove_worktree(&path, &branch(id), with_branch);
        if with_branch {
            self.removed.push(id.to_owned());
        }
    }
}

/// Finishes the landing of a merge a killed ralph had begun (see `Repo::land`, recorded in
/// `.ralph/worktrees/.landing.json`): `Some(task)` when it did. A base moved since by someone else
/// is left alone; the merge is dropped and its task, not done in the base, merged again.
pub(crate) fn finish_landing(repo: &Repo, dir: &RalphDir) -> Result<Option<String>, String> {
    let journal = dir.landing();
    let Loaded::Found(landing) = storage::read_json::<Landing>(&journal) else {
        let _ = std::fs::remove_file(&journal);
        return Ok(None);
    };
    let landed = repo.land(&landing).map_err(|why| {
        format!(
            "the merge of task {} that a stopped ralph was landing on the base could not be finished ({why}); check `git status`, then run again",
            landing.task
        )
    })?;
    let _ = std::fs::remove_file(&journal);
    Ok((landed == Landed::Done).then_some(landing.task))
}

/// Work set aside: the text it was made for, and the branch that keeps it.
pub(crate) struct SetAside {
    pub(crate) made_for: String,
    pub(crate) branch: String,
}

/// Work saved for task `id` but made for another task (the list changed since an interrupt:
/// the task was reworded, or its id now names another one) is set aside on a branch of its own
/// (`ralph-kept/<id>-<fingerprint>`, uncommitted changes committed there), never merged; the task
/// then starts afresh. The work's owner is read from its worktree (`ralph-task.json`) or, for a
/// branch without one, from the repository's config; a branch whose owner is unknown is set
/// aside too. `None` when the work is this task's, or there is none.
pub(crate) fn set_aside_if_stale(
    repo: &Repo,
    dir: &RalphDir,
    id: &str,
    task: &Task,
) -> anyhow::Result<Option<SetAside>> {
    let path = dir.worktree(id);
    let (made_for, was) = if path.join(".git").exists() {
        let saved = path.join(repo.prefix()).join(storage::RALPH_DIR);
        let Some(owner) = Owner::recorded(&saved) else {
            return Ok(None);
        };
        if owner.is_for(id, &task.text) {
            return Ok(None);
        }
        (owner.text, owner.fingerprint)
    } else if repo.has_branch(&branch(id)) {
        let recorded = repo.branch_owner(&branch(id)).unwrap_or_default();
        if recorded == identity::fingerprint(&task.text) {
            return Ok(None);
        }
        ("another text of the task".to_owned(), recorded)
    } else {
        return Ok(None);
    };
    let mark: String = (was.chars().filter(char::is_ascii_hexdigit).take(8)).collect();
    let keep = format!(
        "ralph-kept/{id}-{}",
        if mark.is_empty() { "unknown" } else { &mark }
    );
    repo.set_aside(&path, &branch(id), &keep).map_err(fail)?;
    Ok(Some(SetAside {
        made_for,
        branch: keep,
    }))
}

/// Records which task the work of `id`'s worktree (at `cwd`, its directory in the repository)
/// and branch is for.
pub(crate) fn bind(
    repo: &Repo,
    id: &str,
    task: &Task,
    cwd: &std::path::Path,
) -> anyhow::Result<()> {
    let own_dir = cwd.join(storage::RALPH_DIR);
    std::fs::create_dir_all(&own_dir)?;
    let owner = Owner::of(id, &task.text);
    owner.record(&own_dir)?;
    repo.set_branch_owner(&branch(id), &owner.fingerprint)
        .map_err(fail)?;
    Ok(())
}

/// How a task loop ended.
pub(super) enum Outcome {
    /// The task is done in its branch: merge it.
    Done,
    /// The task could not be done (its iterations ran out, its agent kept failing).
    Failed(String),
    /// A global limit or a stop request: the whole run ends.
    Ended(Stop),
}

/// How a task's loop ended, for the run that started it.
pub(super) fn outcome(result: anyhow::Result<Stop>) -> Outcome {
    match result {
        Ok(Stop::Completed { .. }) => Outcome::Done,
        Ok(
            stop
            @ (Stop::Interrupted | Stop::MaxCost(_) | Stop::MaxTokens(_) | Stop::MaxRuntime(_)),
        ) => Outcome::Ended(stop),
        Ok(Stop::Aborted { .. }) => Outcome::Failed("its agent gave up (abort promise)".to_owned()),
        Ok(stop) => Outcome::Failed(stop.reason(0)),
        Err(err) => Outcome::Failed(format!("ralph failed: {err:#}")),
    }
}
