//! A worker's merge of a finished task: its branch merged into a fresh copy of the base in the
//! integration worktree, pushed with the claim's deletion in one atomic push, again while another
//! worker's merge got there first.

use crate::error::fail;
use crate::event::{LoopEvent, Notice};
use crate::git::{Merge, Pushed, Repo, Update, claim_ref};
use crate::model::Verification;
use crate::run::{sandboxed, wait};
use crate::storage::RalphDir;
use crate::storage::carry::Carried;
use crate::storage::tasks::{Task, TaskStatus};

use super::super::base;
use super::super::parallel::gate::Gate;
use super::super::parallel::gate::{GATE_TRIES, feedback, given_up};
use super::site::unreachable_remote;
use super::train::Rider;
use super::{Holder, Integrated, PUSH_TRIES, Session, TaskEnd};
use crate::run::decision::Stop;

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

    /// Merges the task's branch into a fresh copy of the base, with the branches other workers
    /// marked ready (a merge train), and pushes it with the claims' deletion, all or nothing;
    /// again while another worker's merge got there first, unless that merge landed this task.
    /// `fetched`: the base and the claims were fetched (or seen unchanged) a moment ago.
    pub(super) fn integrate(
        &self,
        id: &str,
        task: &Task,
        claim: &str,
        mut fetched: bool,
    ) -> anyhow::Result<Integrated> {
        let branch = base::branch(id);
        let message = format!("Ralph: merge task {id} — {}", task.text);
        // `fetched`: a retry follows the fetch that found the claim still ours (the base is
        // fresh); `alone`: the riders' branches broke the gate, this task is merged on its own.
        let mut alone = false;
        for attempt in 0..PUSH_TRIES {
            if attempt > 0 {
                self.sink.notice(Notice::BaseMoved {
                    task: id,
                    base: &self.site.base_name(),
                });
            }
            let Some(base_sha) = self.fresh_base(id, claim, fetched)? else {
                return Ok(self.gone(id));
            };
            if !self.holds(id, claim) {
                return Ok(self.gone(id));
            }
            let made = if self.plumbs() {
                self.plumbed_train(id, &base_sha, &message, alone)?
            } else {
                self.train_in_worktree(id, &base_sha, &message, alone)?
            };
            let train = match made {
                Ok(train) => train,
                Err(end) => return Ok(end),
            };
            // The run's --verify is the merge's gate, once for the whole train: the base moves
            // only when it passes.
            if let Some(failed) = self.run_gate(id, &train)? {
                if train.riders.is_empty() {
                    return Ok(Integrated::GateFailed(failed));
                }
                (alone, fetched) = (true, true);
                continue;
            }
            // The task's branch goes with the merge (on the remote when it was ever pushed),
            // unless it keeps notes or tasks that could not be carried.
            let delete = train.carried.problems.is_empty();
            let published = delete && self.site.repo.resolve(&self.site.task_branch(id)).is_some();
            let claims = (id, claim, &train.riders[..]);
            if self.push_base(&train.head, &base_sha, claims, published)? == Pushed::Done {
                self.merged(id, (train.hash, train.carried), &train.riders);
                return Ok(Integrated::Merged);
            }
            // Another worker's merge got there first, perhaps with this task on board.
            if !self.site.still_ours(id, claim)? {
                return Ok(self.gone(id));
            }
            // Workers that lost the race wait apart, so their next tries do not all meet again.
            wait::pause(self.stop, backoff(attempt));
            fetched = false;
        }
        Err(fail(format!(
            "{} kept moving while task {id} was merged ({PUSH_TRIES} tries); its branch {branch} is kept, start the worker again",
            self.site.base_name()
        ))
        .into())
    }

    /// [`Session::plumbed_train`] made in the integration worktree, for a repository whose
    /// hooks a merge commit runs (in the run's sandbox), or a git that cannot merge otherwise.
    fn train_in_worktree(
        &self,
        id: &str,
        base_sha: &str,
        message: &str,
        alone: bool,
    ) -> anyhow::Result<Result<Train, Integrated>> {
        let (tree, tree_dir) = self.integration_tree(base_sha)?;
        // The merge commit runs the repository's hooks: inside the run's sandbox.
        let (tree, _sandbox) = sandboxed::merging_in(self.config, tree, self.dir)?;
        let own = self.own_files(&self.site.repo);
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        let (hash, carried) = match self.merge_own((&tree, &tree_dir), id, message, &own)? {
            Ok(merged) => merged,
            Err(end) => return Ok(Err(end)),
        };
        let riders = if alone {
            Vec::new()
        } else {
            let riders = self.riders(id, &self.site.list()?);
            self.merge_riders((&tree, &tree_dir), riders, &own)
        };
        let head = (tree.resolve("HEAD")).ok_or_else(|| fail("the merge commit is missing"))?;
        Ok(Ok(Train {
            head,
            hash,
            carried,
            riders,
        }))
    }

    /// The integration worktree, at `commit`, and ralph's folder in it.
    fn integration_tree(&self, commit: &str) -> anyhow::Result<(Repo, RalphDir)> {
        let path = self.dir.integration_worktree();
        let tree = (self.site.repo.detached_worktree(&path, commit)).map_err(fail)?;
        Ok((tree, RalphDir::new(&path.join(self.site.repo.prefix()))))
    }

    /// The run's checks (`--verify`, `--holdout`) on the train's last commit, checked out in
    /// the integration worktree: the check that failed, if one did.
    fn run_gate(&self, id: &str, train: &Train) -> anyhow::Result<Option<Verification>> {
        let gate = self.gate();
        if !gate.has_checks() {
            return Ok(None);
        }
        let (tree, _) = self.integration_tree(&train.head)?;
        let label = train_label(id, &train.riders);
        Ok(gate.run_checks(&label, &tree, self.stop))
    }

    /// Merges task `id`'s branch into `tree` (its notes and tasks carried, the task marked done)
    /// and checks the merge: its commit and what was carried, or how the merge ended.
    fn merge_own(
        &self,
        (tree, tree_dir): (&Repo, &RalphDir),
        id: &str,
        message: &str,
        own: &[&str],
    ) -> anyhow::Result<Result<(String, Carried), Integrated>> {
        let branch = base::branch(id);
        // What the agent added to the progress log and the task list joins the base's.
        let mut carried = Carried::default();
        let mut finish = || {
            carried = super::super::carry::into_base(tree, tree_dir, (&branch, "HEAD"), id);
            base::mark(tree_dir, id, TaskStatus::Complete, None)
        };
        let hash = match tree.merge_branch(&branch, message, (own, &[]), &mut finish) {
            Ok(Merge::Done(hash)) => hash,
            Ok(Merge::Conflict(files)) => return Ok(Err(Integrated::Conflict(files))),
            Err(why) => return Err(fail(format!("merging task {id} failed: {why}")).into()),
        };
        if let Some(failed) = self.gate().merge_check(id, tree) {
            return Ok(Err(Integrated::GateFailed(failed)));
        }
        Ok(Ok((hash, carried)))
    }

    /// Tells that task `id` was merged (as `commit`, with its notes `carried`), with `riders`,
    /// and removes its worktree (and its branch, when its notes and tasks were all carried).
    fn merged(&self, id: &str, (commit, carried): (String, Carried), riders: &[Rider]) {
        let (into, branch) = (self.site.base_name(), base::branch(id));
        let delete = carried.problems.is_empty();
        self.sink.emit(LoopEvent::TaskMerged {
            task: id.to_owned(),
            into: into.clone(),
            commit,
        });
        if let Some(event) = LoopEvent::notes_carried(id, &into, &branch, carried) {
            self.sink.emit(event);
        }
        self.tell_riders(id, riders);
        self.remove_task_worktree(id, delete);
    }

    /// Marks the task `[!]` on the base (with why) and drops the claim; its branch is kept.
    pub(super) fn give_up(&self, id: &str, why: &str, claim: &str) -> anyhow::Result<TaskEnd> {
        for _ in 0..PUSH_TRIES {
            let Some(base_sha) = self.fresh_base(id, claim, false)? else {
                return Ok(if self.landed_elsewhere(id) {
                    TaskEnd::Merged
                } else {
                    TaskEnd::LetGo
                });
            };
            let (tree, tree_dir) = self.integration_tree(&base_sha)?;
            base::mark(&tree_dir, id, TaskStatus::Failed, Some(why)).map_err(fail)?;
            let own = self.own_files(&self.site.repo);
            let message = format!("Ralph: task {id} failed");
            tree.commit_paths(&[own[0].as_str()], &message)
                .map_err(fail)?;
            let head = (tree.resolve("HEAD")).ok_or_else(|| fail("the commit is missing"))?;
            if self.push_base(&head, &base_sha, (id, claim, &[]), false)? == Pushed::Done {
                self.sink.emit(LoopEvent::TaskFailed {
                    task: id.to_owned(),
                    reason: why.to_owned(),
                });
                self.site
                    .repo
                    .remove_worktree(&self.dir.worktree(id), &base::branch(id), false);
                return Ok(TaskEnd::Failed);
            }
            if !self.site.still_ours(id, claim)? {
                return Ok(TaskEnd::LetGo);
            }
        }
        Err(fail(format!(
            "{} kept moving while task {id} was marked failed; start the worker again",
            self.site.base_name()
        ))
        .into())
    }

    /// The task's claim is gone: merged by another worker's merge train, or let go.
    fn gone(&self, id: &str) -> Integrated {
        if self.landed_elsewhere(id) {
            Integrated::Merged
        } else {
            Integrated::LetGo
        }
    }

    /// The task's merge failed the gate with `check`: its agent is told (a context section for
    /// the task in this clone) and goes on after the base is merged into its branch, or, the
    /// [`GATE_TRIES`]-th time, the task is failed; a check that cannot run ends the worker.
    pub(super) fn gate_failed(
        &self,
        id: &str,
        check: &crate::model::Verification,
        holder: &Holder,
        tries: &mut u32,
    ) -> anyhow::Result<Option<TaskEnd>> {
        if check.could_not_run() {
            self.release(&holder.claim, &holder.sha);
            return Ok(Some(TaskEnd::Ended(Stop::Unverified(check.clone()))));
        }
        *tries += 1;
        let base = self.site.base_name();
        self.gate().refused(id, &base, check, *tries);
        if *tries > GATE_TRIES {
            let why = given_up(&base, check, id);
            return self.give_up(id, &why, &holder.sha).map(Some);
        }
        let text = feedback(&base, check);
        crate::storage::context::append(self.dir, &text, Some(id), crate::model::now())?;
        Ok(None)
    }

    /// The base's commit, freshly fetched (fetched now unless `fetched`): `None` when the task
    /// left the list or is done there already (its claim is dropped: work on the base is never
    /// merged twice).
    pub(super) fn fresh_base(
        &self,
        id: &str,
        claim: &str,
        fetched: bool,
    ) -> anyhow::Result<Option<String>> {
        if !fetched {
            self.site.fetch()?;
        }
        let base_sha = self
            .site
            .repo
            .resolve(&self.site.base_ref())
            .ok_or_else(|| fail(format!("{} is gone", self.site.base_name())))?;
        if !self.still_to_do(id) {
            self.drop_claim(id, claim);
            return Ok(None);
        }
        Ok(Some(base_sha))
    }

    /// Pushes commit `head` as the base (if the base is still `base_sha`) and deletes task
    /// `id`'s claim (if it is still `claim`) and the riders', together; with `delete_branch`,
    /// the task's branch too.
    pub(super) fn push_base(
        &self,
        head: &str,
        base_sha: &str,
        (id, claim, riders): (&str, &str, &[Rider]),
        delete_branch: bool,
    ) -> anyhow::Result<Pushed> {
        let mut updates = vec![
            Update {
                dst: format!("refs/heads/{}", self.site.base),
                new: Some(head),
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
        updates.extend(Self::rider_updates(riders));
        self.site
            .repo
            .push(&self.site.remote, &updates)
            .map_err(|why| unreachable_remote(&self.site.remote, &why).into())
    }
}

/// A task's merge, with its train, made and ready to push.
pub(super) struct Train {
    /// The last commit: what the base becomes.
    pub(super) head: String,
    /// The task's own merge commit, short.
    pub(super) hash: String,
    /// Its notes and tasks carried into the base.
    pub(super) carried: Carried,
    /// The other workers' tasks merged after it.
    pub(super) riders: Vec<Rider>,
}

/// What a merge's gate checks are recorded for: the task, or the tasks of its train.
fn train_label(id: &str, riders: &[Rider]) -> String {
    std::iter::once(id)
        .chain(riders.iter().map(|rider| rider.id.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The wait before a worker's `attempt`-th try to merge again after another merge got there
/// first: growing, and spread by the process id so that workers on one base drift apart.
pub(super) fn backoff(attempt: u32) -> std::time::Duration {
    let spread = u64::from(std::process::id() % 97) * 3;
    std::time::Duration::from_millis((u64::from(attempt.min(8)) + 1) * 50 + spread)
}
