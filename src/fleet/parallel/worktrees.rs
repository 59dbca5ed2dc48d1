//! A parallel run's task worktrees: laid (taken from the pool, or new), parked before a merge,
//! kept for the user when they hold work, released to the pool when done.

use std::path::{Path, PathBuf};

use crate::error::fail;
use crate::event::Notice;
use crate::git::Repo;
use crate::storage::tasks::Task;

use super::super::base::branch;
use super::Coordinator;

impl Coordinator<'_> {
    /// Removes a task's worktree (and, merged, its branch) — unless work in it is uncommitted.
    pub(super) fn remove(&self, id: &str, delete_branch: bool) {
        let path = self.dir.worktree(id);
        let Some(worktree) = Repo::linked_worktree(&path) else {
            // Parked before its merge, or gone: only the branch is left to see to.
            if delete_branch {
                self.repo.delete_branch(&branch(id));
            }
            if path.exists() {
                self.repo.remove_worktree(&path, &branch(id), false);
            }
            return;
        };
        if let Some(paths) = self.keeps(&worktree) {
            self.sink.notice(Notice::WorktreeKept {
                task: id,
                paths: &paths,
            });
            return;
        }
        self.pool
            .release(&self.repo, &path, &branch(id), delete_branch);
    }

    /// When more than one of the `ready` tasks about to start needs a new worktree, checks them
    /// out side by side into the pool, where each task's start takes one.
    pub(super) fn lay_ahead(&self, ready: &[(String, Task)]) {
        let free = (self.config.options.parallel.max as usize).saturating_sub(self.running.len());
        let without = (ready.iter().take(free))
            .filter(|(id, _)| !self.dir.worktree(id).join(".git").exists())
            .count();
        let idle = usize::from(self.integration_clean_at.is_some());
        let needed = without.saturating_sub(self.pool.parked_count() + idle);
        if needed > 1 {
            self.pool.add(&self.repo, needed, &self.base);
        }
    }

    /// Task `id`'s worktree, made when it has none: a parked one taken over, the integration
    /// worktree when none is parked and no merge needs it now, or a new one (its submodules
    /// checked out); an existing one as it is (a resumed task's, its work there). With whether
    /// it was laid out now, clean.
    pub(super) fn lay_worktree(&mut self, id: &str) -> anyhow::Result<(PathBuf, bool)> {
        let path = self.dir.worktree(id);
        let branch = branch(id);
        if path.join(".git").exists() {
            return self.on_its_branch(&path, &branch);
        }
        let checkout = (branch.as_str(), self.base.as_str());
        if (self.pool).take(&self.repo, &path, checkout) {
            return Ok((path, true));
        }
        // The last merge landed and left the integration worktree clean at the base: the next
        // merge takes a parked worktree (this task's, when it is done) instead.
        if self.integration_clean_at.take().is_some()
            && (self.pool).park(&self.repo, &self.dir.integration_worktree())
            && (self.pool).take(&self.repo, &path, checkout)
        {
            return Ok((path, true));
        }
        self.repo
            .add_worktree(&path, &branch, &self.base)
            .map_err(fail)?;
        if let Err(why) = self.repo.init_submodules(&path) {
            self.sink.notice(Notice::SubmodulesMissing {
                task: id,
                why: &why,
            });
        }
        Ok((path, true))
    }

    /// Task worktree `path`, found in place, on the task's `branch`. A kill can leave it
    /// detached: while it was parked (its HEAD detached at the branch's commit, not moved yet),
    /// or while a parked worktree was taken for the task (moved here, the branch not checked out
    /// yet, the last task's files in it). The first goes back on its branch as it is; the second
    /// is laid out for the task as a new one would be. Else it is as the task left it.
    fn on_its_branch(&self, path: &Path, branch: &str) -> anyhow::Result<(PathBuf, bool)> {
        let Some(tree) = Repo::linked_worktree(path) else {
            return Ok((path.to_owned(), false));
        };
        if tree.current_branch().as_deref() == Some(branch) {
            return Ok((path.to_owned(), false));
        }
        let tip = self.repo.resolve(&format!("refs/heads/{branch}"));
        if tip.is_some() && tip == tree.resolve("HEAD") {
            tree.check_out(branch).map_err(fail)?;
            return Ok((path.to_owned(), false));
        }
        let checkout: Vec<&str> = if tip.is_some() {
            vec![branch]
        } else {
            vec!["-b", branch, &self.base]
        };
        let keep = self.config.options.keep_build_cache;
        self.repo.lay_over(path, &checkout, keep).map_err(fail)?;
        Ok((path.to_owned(), true))
    }

    /// Parks a finished task's clean worktree before its merge is made, so that the merge can
    /// be made in it (see [`super::pool`]); a task sent back to its agent takes a worktree again.
    pub(super) fn park_before_merge(&self, id: &str) {
        let path = self.dir.worktree(id);
        if let Some(worktree) = Repo::linked_worktree(&path)
            && self.keeps(&worktree).is_none()
        {
            self.pool.park(&self.repo, &path);
        }
    }

    /// Why a task's worktree must be kept as it is, for the user: a merge of the base under way
    /// there (which may hold resolutions the agent did not commit), or uncommitted changes (not
    /// ralph's own files, which are not the agent's work).
    fn keeps(&self, worktree: &Repo) -> Option<Vec<String>> {
        if worktree.merging() {
            let mut paths = worktree.unfinished_merge_conflicts();
            paths.insert(0, "an unfinished merge of the base".to_owned());
            return Some(paths);
        }
        let own = self.own_files();
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        let dirty = worktree.dirty_paths(&own).unwrap_or_default();
        (!dirty.is_empty()).then_some(dirty)
    }
}
