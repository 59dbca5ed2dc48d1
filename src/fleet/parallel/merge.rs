//! A parallel run's merges: a done task's branch into the base (its notes and added tasks
//! carried, the task marked done in the same commit), conflicts sent back to its loop, merges
//! that wait for the user's own edits, and work saved for another task set aside.

use crate::error::fail;
use crate::event::{LoopEvent, Notice};
use crate::git::{Landed, Landing, Merge, Repo};
use crate::model::Verification;
use crate::run::sandboxed;
use crate::storage::carry::Carried;
use crate::storage::progress::PROGRESS_FILE;
use crate::storage::tasks::{Task, TaskStatus};
use crate::storage::{self, RalphDir};

use super::super::base::{self, branch, find, mark};
use super::{Coordinator, MERGE_TRIES, Spawner};

/// How a task's merge, made in the integration worktree, ended.
enum Integrated {
    /// Landed on the base: the merge commit, and what was carried of what the agent added to the
    /// progress log and the task list.
    Landed(String, Carried),
    /// Files in conflict: nothing was merged.
    Conflict(Vec<String>),
    /// A check of the run's `--verify` failed on the merged result: the base did not move.
    GateFailed(Verification),
    /// The base moved meanwhile (the user committed), or a stop came: merged again later.
    Later,
}

impl<'a> Coordinator<'a> {
    /// Work saved in task `id`'s worktree for another task is set aside (see
    /// [`base::set_aside_if_stale`]) and said; `true` when it was.
    pub(super) fn set_aside_if_stale(&self, id: &str, task: &Task) -> anyhow::Result<bool> {
        let Some(aside) = base::set_aside_if_stale(&self.repo, self.dir, id, task)? else {
            return Ok(false);
        };
        self.sink.notice(Notice::WorkSetAside {
            task: id,
            made_for: &aside.made_for,
            branch: &aside.branch,
        });
        Ok(true)
    }

    /// Merges a finished task into the base; on a conflict, its loop resolves it (twice at
    /// most), then the task is given up with its branch kept.
    pub(super) fn merge<'s>(&mut self, id: &str, spawner: &Spawner<'s, '_>) -> anyhow::Result<()>
    where
        'a: 's,
    {
        let Some((task, message)) = self.ready_to_merge(id)? else {
            return Ok(());
        };
        self.merge_ready(id, &task, &message, spawner)
    }

    /// Merges task `id` (`task`, with a merge commit of `message`), which can be merged now.
    pub(super) fn merge_ready<'s>(
        &mut self,
        id: &str,
        task: &Task,
        message: &str,
        spawner: &Spawner<'s, '_>,
    ) -> anyhow::Result<()>
    where
        'a: 's,
    {
        let own = self.own_files();
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        match self.merge_elsewhere(id, message, &own, spawner)? {
            Ok(Integrated::Landed(hash, carried)) => self.landed(id, &hash, carried),
            Ok(Integrated::Conflict(files)) => self.conflicted(id, task, files, spawner)?,
            Ok(Integrated::GateFailed(check)) => self.send_back(id, task, &check, spawner)?,
            Ok(Integrated::Later) => {}
            Err(why) => self.give_up(id, &format!("its merge failed: {why}")),
        }
        Ok(())
    }

    /// Task `id`'s task and its merge's message when it can be merged now; `None` when it was
    /// seen to otherwise: gone from the list (its branch kept), a submodule changed (failed), or
    /// the user's edits to wait for.
    pub(super) fn ready_to_merge(&mut self, id: &str) -> anyhow::Result<Option<(Task, String)>> {
        // A merge that waited is tried afresh: it waits again only if it still must.
        let waited = self.blocked.remove(id);
        let list = self.base_list()?;
        let Some(task) = find(&list, id) else {
            // The task was removed from the list meanwhile: keep its branch, merge nothing.
            self.remove(id, false);
            return Ok(None);
        };
        if self.changed_a_submodule(id) {
            return Ok(None);
        }
        let own = self.own_files();
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        if self.waits_for_the_user(id, &own, waited) {
            return Ok(None);
        }
        self.park_before_merge(id);
        let message = format!("Ralph: merge task {id} — {}", task.text);
        Ok(Some((task, message)))
    }

    /// Task `id` landed on the base with merge commit `hash`: said, its notes' carrying said, its
    /// worktree and branch removed (the branch kept when not all was carried).
    pub(super) fn landed(&mut self, id: &str, hash: &str, carried: Carried) {
        let changed = (self.repo).changed_since(&format!("{hash}^1"), hash);
        self.learned.landed(id, changed);
        self.sink.emit(LoopEvent::TaskMerged {
            task: id.to_owned(),
            into: self.base.clone(),
            commit: hash.to_owned(),
        });
        let kept = !carried.problems.is_empty();
        if kept {
            self.not_carried.push(id.to_owned());
        }
        if let Some(event) = LoopEvent::notes_carried(id, &self.base, &branch(id), carried) {
            self.sink.emit(event);
        }
        self.merged.push(id.to_owned());
        self.remove(id, !kept);
    }

    /// Task `id`'s merge conflicted in `files`: its loop resolves them (twice at most), then the
    /// task is given up with its branch kept.
    pub(super) fn conflicted<'s>(
        &mut self,
        id: &str,
        task: &Task,
        files: Vec<String>,
        spawner: &Spawner<'s, '_>,
    ) -> anyhow::Result<()>
    where
        'a: 's,
    {
        let tries = self.merge_tries.entry(id.to_owned()).or_default();
        *tries += 1;
        if *tries > MERGE_TRIES {
            let why = format!(
                "its merge into {} conflicted {MERGE_TRIES} times in {}; branch {} is kept",
                self.base,
                files.join(", "),
                branch(id)
            );
            self.give_up(id, &why);
            return Ok(());
        }
        self.learned.conflicted(id, &files);
        self.sink.emit(LoopEvent::MergeConflicted {
            task: id.to_owned(),
            files,
        });
        self.resolve(id, task, spawner)
    }

    /// Makes task `id`'s merge in a worktree of its own at the base's commit, runs the run's
    /// `--verify` gate there, and lands it: the base moves to the merge only once it is whole and
    /// passes, so a kill never leaves the user's work tree half merged and the base never holds
    /// a state that fails the gate.
    fn merge_elsewhere<'s>(
        &mut self,
        id: &str,
        message: &str,
        own: &[&str],
        spawner: &Spawner<'s, '_>,
    ) -> anyhow::Result<Result<Integrated, String>>
    where
        'a: 's,
    {
        let from = (self.repo.resolve("HEAD")).ok_or_else(|| fail("the base has no commit"))?;
        let tree = self.integration_tree(&from)?;
        // The merge commit runs the repository's hooks: inside the run's sandbox.
        let (tree, _sandbox) = sandboxed::merging_in(self.config, tree, self.dir)?;
        let (hash, carried) = match self.merge_one(&tree, id, message, own, true) {
            Ok((Merge::Done(hash), carried)) => (hash, carried),
            Ok((Merge::Conflict(files), _)) => return Ok(Ok(Integrated::Conflict(files))),
            Err(why) => return Ok(Err(why)),
        };
        if let Some(failed) = self.gate(id, &tree, spawner) {
            return Ok(Ok(if spawner.stop.is_stopping() {
                Integrated::Later
            } else {
                Integrated::GateFailed(failed)
            }));
        }
        Ok(match self.land(&[id], from, &tree) {
            Ok(true) => Ok(Integrated::Landed(hash, carried)),
            Ok(false) => Ok(Integrated::Later),
            Err(why) => Err(why),
        })
    }

    /// The integration worktree, at the base's commit `from`: the one the last merge left there,
    /// else a parked worktree (the task's own, parked for this: no checkout of the whole base),
    /// else a new one.
    pub(super) fn integration_tree(&mut self, from: &str) -> anyhow::Result<Repo> {
        let path = self.dir.integration_worktree();
        let reused = (self.integration_clean_at.take())
            .filter(|at| at == from)
            .and_then(|_| Repo::linked_worktree(&path))
            .filter(|tree| tree.resolve("HEAD").as_deref() == Some(from));
        let taken = || {
            (!path.exists())
                .then(|| self.pool.take_detached(&self.repo, &path, from))
                .flatten()
        };
        match reused.or_else(taken) {
            Some(tree) => Ok(tree),
            None => Ok(self.repo.detached_worktree(&path, from).map_err(fail)?),
        }
    }

    /// Merges task `id`'s branch into `tree` with a commit of `message`, its notes and added
    /// tasks carried and the task marked done in the same commit. `first`: the first merge made
    /// on the base's commit, which takes ralph's own files as the base has them now (tasks in
    /// progress, tasks added since its last commit); a later one of a train builds on the merge
    /// before it.
    pub(super) fn merge_one(
        &self,
        tree: &Repo,
        id: &str,
        message: &str,
        own: &[&str],
        first: bool,
    ) -> Result<(Merge, Carried), String> {
        let tree_dir = RalphDir::new(&tree.root().join(self.repo.prefix()));
        let mut carried = Carried::default();
        let base_dir = self.dir;
        let mut finish = || {
            if first {
                for (from, to) in [
                    (base_dir.tasks(), tree_dir.tasks()),
                    (base_dir.file(PROGRESS_FILE), tree_dir.file(PROGRESS_FILE)),
                ] {
                    if from.exists() {
                        std::fs::copy(&from, &to).map_err(|err| {
                            format!("copying {} into the merge failed: {err}", from.display())
                        })?;
                    }
                }
            }
            carried = super::super::carry::into_base(tree, &tree_dir, (&branch(id), "HEAD"), id);
            mark(&tree_dir, id, TaskStatus::Complete, None)
        };
        // The files `finish` copies from the base's `.ralph/` need not be put back first.
        let written: Vec<&str> = (own.iter().copied())
            .filter(|path| {
                let name = path.rsplit('/').next().unwrap_or(path);
                first && base_dir.file(name).exists()
            })
            .collect();
        let merged = tree.merge_branch(&branch(id), message, (own, &written), &mut finish)?;
        Ok((merged, carried))
    }

    /// Lands the merge of tasks `ids` (one, or a train's; the HEAD of `tree`) on the base,
    /// recorded first in `.ralph/worktrees/` so a kill cannot leave it half done (the next start
    /// finishes it). `false` when the base moved meanwhile: the merges are tried again in a
    /// moment.
    pub(super) fn land(&mut self, ids: &[&str], from: String, tree: &Repo) -> Result<bool, String> {
        let to = tree.resolve("HEAD").ok_or("the merge commit is missing")?;
        let landing = Landing {
            task: ids.join(", "),
            from,
            to,
        };
        let journal = self.dir.landing();
        storage::write_json(&journal, &landing).map_err(|err| format!("{err:#}"))?;
        let landed = self.repo.land(&landing)?;
        let _ = std::fs::remove_file(&journal);
        if landed == Landed::Done && self.config.options.verify.is_empty() {
            self.integration_clean_at = Some(landing.to);
        }
        if landed == Landed::Moved {
            self.blocked.extend(ids.iter().map(|id| (*id).to_owned()));
        }
        Ok(landed == Landed::Done)
    }

    /// Whether task `id`'s agent changed a submodule. A submodule is a repository of its own: what
    /// the agent changed there (its commits live in this worktree's copy of it) cannot be carried
    /// into the base, so the task is failed, not merged, and its worktree kept, with the fix.
    fn changed_a_submodule(&mut self, id: &str) -> bool {
        let submodules =
            (self.repo).changed_submodules(&self.dir.worktree(id), &self.base, &branch(id));
        if submodules.is_empty() {
            return false;
        }
        let why = format!(
            "its agent changed the submodule {}, which ralph cannot carry into {}; the changes are kept in .ralph/worktrees/{id}: commit and push them in the submodule yourself, then merge {}",
            submodules.join(", "),
            self.base,
            branch(id)
        );
        self.record_failure(id, &why);
        true
    }

    /// Whether task `id`'s merge must wait: the user has uncommitted edits in the base to files
    /// the task changed (the merge would overwrite them). Said once per task (`waited`: it
    /// waited already).
    fn waits_for_the_user(&mut self, id: &str, own: &[&str], waited: bool) -> bool {
        let mine = self.repo.dirty_paths(own).unwrap_or_default();
        // What the task changed is asked only when the user has edits in the base.
        let touched = if mine.is_empty() {
            Vec::new()
        } else {
            self.repo.changed_since(&self.base, &branch(id))
        };
        let blocking: Vec<String> = mine
            .into_iter()
            .filter(|path| touched.contains(path))
            .collect();
        if blocking.is_empty() {
            return false;
        }
        self.blocked.insert(id.to_owned());
        if !waited {
            self.sink.notice(Notice::MergeWaits {
                task: id,
                files: &blocking,
            });
        }
        true
    }

    /// Tries the merges that waited for the user again.
    pub(super) fn retry_blocked<'s>(&mut self, spawner: &Spawner<'s, '_>)
    where
        'a: 's,
    {
        for id in self.blocked.clone() {
            if let Err(err) = self.merge(&id, spawner) {
                self.blocked.remove(&id);
                self.give_up(&id, &format!("{err:#}"));
            }
        }
    }

    /// Merges the base into the task's branch in its worktree and restarts its loop on the
    /// conflicts.
    fn resolve<'s>(
        &mut self,
        id: &str,
        task: &Task,
        spawner: &Spawner<'s, '_>,
    ) -> anyhow::Result<()>
    where
        'a: 's,
    {
        let conflicts = self.merge_base_into_task(id)?;
        if conflicts.is_empty() {
            // The base merged in cleanly: try the merge again.
            return self.merge(id, spawner);
        }
        self.start(spawner, (id, task), conflicts)
    }

    /// Merges the base into task `id`'s branch in its worktree: the files left in conflict for
    /// its agent (none when it merged cleanly).
    pub(super) fn merge_base_into_task(&mut self, id: &str) -> anyhow::Result<Vec<String>> {
        // Parked before the merge: taken back (or another one, or a new one).
        let (path, _) = self.lay_worktree(id)?;
        let worktree =
            Repo::linked_worktree(&path).ok_or_else(|| fail("the task's worktree is gone"))?;
        let own = self.own_files();
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        Ok(worktree
            .merge_base_into_branch(&self.base, &own)
            .map_err(fail)?)
    }
}
