//! A worker's merge of a finished task: its branch merged into a fresh copy of the base in the
//! integration worktree, pushed with the claim's deletion in one atomic push, again while another
//! worker's merge got there first.

use crate::error::fail;
use crate::event::{LoopEvent, Notice};
use crate::git::{Merge, Pushed, Repo, Update, claim_ref};
use crate::run::{sandboxed, wait};
use crate::storage::RalphDir;
use crate::storage::tasks::{Task, TaskStatus};

use super::super::base;
use super::super::parallel::gate::Gate;
use super::site::unreachable_remote;
use super::{Integrated, PUSH_TRIES, Session};

impl Session<'_> {
    /// The run's merge gate, for this worker.
    pub(super) fn gate(&self) -> Gate<'_> {
        Gate {
            config: self.config,
            home: self.dir,
            shared: &self.shared,
            sink: &self.sink,
        }
    }

    /// Merges the task's branch into a fresh copy of the base and pushes it, with the claim's
    /// deletion, all or nothing; again while another worker's merge got there first.
    pub(super) fn integrate(
        &self,
        id: &str,
        task: &Task,
        claim: &str,
    ) -> anyhow::Result<Integrated> {
        let branch = base::branch(id);
        let message = format!("Ralph: merge task {id} — {}", task.text);
        // A retry follows the fetch that found the claim still ours: the base is fresh.
        let mut fetched = false;
        for attempt in 0..PUSH_TRIES {
            if attempt > 0 {
                self.sink.notice(Notice::BaseMoved {
                    task: id,
                    base: &self.site.base_name(),
                });
            }
            let Some((tree, tree_dir, base_sha)) = self.fresh_base(id, claim, fetched)? else {
                return Ok(Integrated::LetGo);
            };
            // The merge commit runs the repository's hooks: inside the run's sandbox.
            let (tree, _sandbox) = sandboxed::merging_in(self.config, tree, self.dir)?;
            let own = self.own_files(&tree);
            let own: Vec<&str> = own.iter().map(String::as_str).collect();
            // What the agent added to the progress log and the task list joins the base's.
            let mut carried = crate::storage::carry::Carried::default();
            let mut finish = || {
                carried = super::super::carry::into_base(&tree, &tree_dir, &branch, id);
                base::mark(&tree_dir, id, TaskStatus::Complete, None)
            };
            let hash = match tree.merge_branch(&branch, &message, (&own, &[]), &mut finish) {
                Ok(Merge::Done(hash)) => hash,
                Ok(Merge::Conflict(files)) => return Ok(Integrated::Conflict(files)),
                Err(why) => return Err(fail(format!("merging task {id} failed: {why}")).into()),
            };
            // The run's --verify is the merge's gate: the base moves only when it passes.
            if let Some(failed) = self.gate().check(id, &tree, self.stop) {
                return Ok(Integrated::GateFailed(failed));
            }
            // The task's branch goes with the merge (on the remote when it was ever pushed),
            // unless it keeps notes or tasks that could not be carried.
            let delete = carried.problems.is_empty();
            let published = delete && self.site.repo.resolve(&self.site.task_branch(id)).is_some();
            if self.push_base(&tree, &base_sha, id, claim, published)? == Pushed::Done {
                self.sink.emit(LoopEvent::TaskMerged {
                    task: id.to_owned(),
                    into: self.site.base_name(),
                    commit: hash,
                });
                let into = self.site.base_name();
                if let Some(event) = LoopEvent::notes_carried(id, &into, &branch, carried) {
                    self.sink.emit(event);
                }
                self.site
                    .repo
                    .remove_worktree(&self.dir.worktree(id), &branch, delete);
                return Ok(Integrated::Merged);
            }
            // Another worker's merge got there first: workers that lost the race wait apart,
            // so their next tries do not all meet again.
            wait::pause(self.stop, backoff(attempt));
            if !self.site.still_ours(id, claim)? {
                return Ok(Integrated::LetGo);
            }
            fetched = true;
        }
        Err(fail(format!(
            "{} kept moving while task {id} was merged ({PUSH_TRIES} tries); its branch {branch} is kept, start the worker again",
            self.site.base_name()
        ))
        .into())
    }

    /// The integration worktree at the freshly fetched base (fetched now unless `fetched`):
    /// `None` when the task left the list meanwhile (its claim is released).
    pub(super) fn fresh_base(
        &self,
        id: &str,
        claim: &str,
        fetched: bool,
    ) -> anyhow::Result<Option<(Repo, RalphDir, String)>> {
        if !fetched {
            self.site.fetch()?;
        }
        let base_sha = self
            .site
            .repo
            .resolve(&self.site.base_ref())
            .ok_or_else(|| fail(format!("{} is gone", self.site.base_name())))?;
        let path = self.dir.integration_worktree();
        let tree = self
            .site
            .repo
            .detached_worktree(&path, &base_sha)
            .map_err(fail)?;
        let tree_dir = RalphDir::new(&path.join(self.site.repo.prefix()));
        let list = self.site.list()?;
        if base::find(&list, id).is_none() {
            // The task left the list: its claim goes.
            let update = Update {
                dst: claim_ref(id),
                new: None,
                expect: Some(claim),
            };
            let _ = self.site.repo.push(&self.site.remote, &[update]);
            return Ok(None);
        }
        Ok(Some((tree, tree_dir, base_sha)))
    }

    /// Pushes the integration tree's HEAD as the base (if the base is still `base_sha`) and
    /// deletes the claim (if it is still ours), together; with `delete_branch`, the task's
    /// branch too.
    pub(super) fn push_base(
        &self,
        tree: &Repo,
        base_sha: &str,
        id: &str,
        claim: &str,
        delete_branch: bool,
    ) -> anyhow::Result<Pushed> {
        let head = tree
            .resolve("HEAD")
            .ok_or_else(|| fail("the merge commit is missing"))?;
        let mut updates = vec![
            Update {
                dst: format!("refs/heads/{}", self.site.base),
                new: Some(&head),
                expect: Some(base_sha),
            },
            Update {
                dst: claim_ref(id),
                new: None,
                expect: Some(claim),
            },
        ];
        if delete_branch {
            updates.push(Update {
                dst: format!("refs/heads/{}", base::branch(id)),
                new: None,
                expect: None,
            });
        }
        self.site
            .repo
            .push(&self.site.remote, &updates)
            .map_err(|why| unreachable_remote(&self.site.remote, &why).into())
    }
}

/// The wait before a worker's `attempt`-th try to merge again after another merge got there
/// first: growing, and spread by the process id so that workers on one base drift apart.
fn backoff(attempt: u32) -> std::time::Duration {
    let spread = u64::from(std::process::id() % 97) * 3;
    std::time::Duration::from_millis((u64::from(attempt.min(8)) + 1) * 50 + spread)
}
