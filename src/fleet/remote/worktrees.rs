//! A worker's task worktrees in its clone: the one a task runs in (work saved there for another
//! text of the task set aside first), and those of tasks another worker finished or took over,
//! removed.

use std::path::PathBuf;

use crate::error::fail;
use crate::event::Notice;
use crate::git::{SeenClaim, Update};
use crate::storage::tasks::{self, Task, TaskList, TaskStatus};
use crate::storage::{self};

use super::super::base;
use super::Session;
use super::pick::is_stale;

impl Session<'_> {
    /// Removes task `id`'s worktree, with its branch when `with_branch`, on a thread of its
    /// own: the worker looks for its next task and claims it meanwhile (on a machine of many
    /// workers, every one of them removes its worktree at the same moment, right after a
    /// landing). Waited for ([`Session::settle_removal`]) before any other worktree of this
    /// clone is made or removed, before the clone's worktrees are swept, and before the worker
    /// ends.
    pub(super) fn remove_task_worktree(&self, id: &str, with_branch: bool) {
        self.settle_removal();
        let (repo, path, branch) = (
            self.site.repo.clone(),
            self.dir.worktree(id),
            base::branch(id),
        );
        let removing = std::thread::spawn(move || {
            repo.remove_worktree(&path, &branch, with_branch);
        });
        *self
            .removing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(removing);
    }

    /// Waits for the removal [`Session::remove_task_worktree`] started, if one still runs.
    pub(super) fn settle_removal(&self) {
        let removing = (self.removing.lock())
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(removing) = removing {
            let _ = removing.join();
        }
    }

    /// The task's branch on the remote holds work made for another text of the task (the stale
    /// claim it was pushed under says so): it is kept on `ralph-kept/<id>-<time>` there, never
    /// merged, and the task starts from the base.
    pub(super) fn set_pushed_work_aside(&self, id: &str) -> anyhow::Result<()> {
        self.settle_removal();
        let repo = &self.site.repo;
        let Some(sha) = repo.resolve(&self.site.task_branch(id)) else {
            return Ok(());
        };
        let stamp = crate::model::now().format("%Y%m%d%H%M%S");
        let kept = format!("ralph-kept/{id}-{stamp}");
        let updates = [
            Update {
                dst: format!("refs/heads/{kept}"),
                new: Some(&sha),
                expect: None,
            },
            Update {
                dst: format!("refs/heads/{}", base::branch(id)),
                new: None,
                expect: Some(&sha),
            },
        ];
        repo.push(&self.site.remote, &updates).map_err(fail)?;
        // The local copies of the branch go too, so the task starts from the base (a worktree
        // of this clone's for the old text is set aside when the task's worktree is made).
        let path = self.dir.worktree(id);
        if !path.join(".git").exists() {
            repo.remove_worktree(&path, &base::branch(id), true);
        }
        let _ = repo.delete_remote_tracking(&self.site.task_branch(id));
        self.sink.notice(Notice::PushedWorkSetAside {
            task: id,
            remote: &self.site.remote,
            branch: &kept,
        });
        Ok(())
    }

    /// The task's worktree on `ralph/<id>`, continuing the remote's branch when it has one
    /// (work pushed by a worker whose claim went stale), and whether it was laid now (nothing
    /// uncommitted in it is an agent's: pushed work is all committed).
    pub(super) fn task_worktree(&self, id: &str, task: &Task) -> anyhow::Result<(PathBuf, bool)> {
        self.settle_removal();
        let repo = &self.site.repo;
        // Work this clone saved for another text of the task is set aside, never merged.
        if let Some(aside) = base::set_aside_if_stale(repo, self.dir, id, task)? {
            self.sink.notice(Notice::WorkSetAside {
                task: id,
                made_for: &aside.made_for,
                branch: &aside.branch,
            });
            // The same work may be on the remote too: it is set aside there as well.
            self.set_pushed_work_aside(id)?;
        }
        let branch = base::branch(id);
        let pushed = self.site.task_branch(id);
        let start = match repo.resolve(&pushed) {
            Some(_) => pushed,
            None => self.site.base_ref(),
        };
        let path = self.dir.worktree(id);
        let laid_now = !path.join(".git").exists();
        repo.add_worktree(&path, &branch, &start).map_err(fail)?;
        let cwd = path.join(repo.prefix());
        base::bind(repo, id, task, &cwd)?;
        Ok((cwd, laid_now))
    }

    /// Removes the worktrees (and local branches) this clone kept for tasks that are done on the
    /// base or gone from its list, or that another worker holds now: that worker finished them
    /// or goes on with them. Work only this clone has (commits neither the base nor the remote
    /// has, uncommitted changes) is set aside on `ralph-kept/<id>-<time>`, and said.
    pub(super) fn sweep_finished(&self, list: &TaskList, claims: &[SeenClaim]) {
        // A removal still running would look like a worktree or branch left behind.
        self.settle_removal();
        let ids = tasks::task_ids(list);
        // A task another worker holds now (this one's claim went stale and was taken over):
        // that worker goes on from the pushed branch, so the work here is stale.
        let (now, ttl) = (crate::model::now(), self.config.options.claim_ttl);
        let holder = |id: &str| {
            (claims.iter())
                .find(|seen| seen.id == id && !is_stale(seen, now, ttl))
                .and_then(|seen| seen.claim.as_ref())
                .filter(|claim| claim.worker != self.me)
                .map(|claim| claim.worker.clone())
        };
        let finished = |id: &str| {
            ids.iter()
                .position(|each| each == id)
                .is_none_or(|at| list.tasks[at].status == TaskStatus::Complete)
        };
        // The worktrees here, and the task branches without one (a kill between the two's
        // removals leaves a branch alone).
        let mut candidates: std::collections::BTreeSet<String> =
            (std::fs::read_dir(self.dir.root().join(storage::WORKTREES_DIR)).into_iter())
                .flatten()
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect();
        candidates.extend(self.site.repo.task_branches().into_iter().map(|(id, _)| id));
        let mut swept = base::Swept::default();
        for id in candidates {
            let held_by = holder(&id);
            if id.starts_with('.') || !(finished(&id) || held_by.is_some()) {
                continue;
            }
            // Its branch goes only when the base or the remote has all of its commits.
            let local = base::branch(&id);
            let kept_elsewhere = [self.site.base_ref(), self.site.task_branch(&id)]
                .iter()
                .any(|there| self.site.repo.contains(there, &local));
            // Work only this clone has (commits, or what a killed agent left uncommitted) is
            // set aside on a branch of its own, never merged: the task is done or goes on
            // elsewhere.
            if !kept_elsewhere || !base::Swept::dirty(&self.dir.worktree(&id)).is_empty() {
                let stamp = crate::model::now().format("%Y%m%d%H%M%S");
                swept.set_aside(
                    &self.site.repo,
                    self.dir,
                    &id,
                    &format!("ralph-kept/{id}-{stamp}"),
                );
                continue;
            }
            let removed = swept.removed.len();
            swept.remove(&self.site.repo, self.dir, &id, true);
            if let Some(by) = held_by.filter(|_| swept.removed.len() > removed) {
                swept.removed.pop();
                self.sink
                    .notice(Notice::TakenOverElsewhere { task: &id, by: &by });
            }
        }
        if !swept.removed.is_empty() || !swept.kept.is_empty() {
            self.sink.notice(Notice::Swept {
                removed: &swept.removed,
                kept: &swept.kept,
            });
        }
    }
}
