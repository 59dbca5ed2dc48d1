//! The worktrees of a `--parallel` run, reused from task to task.
//!
//! A task's worktree that is done with (merged, or given up with its branch kept) and clean is
//! parked in `.ralph/worktrees/.pool/<n>` instead of being removed: its HEAD detached, moved there
//! (two processes, no file written). The next task to start takes a parked one: moved to its own
//! path, ralph's folder in it cleared, its branch checked out over the last task's (only the files
//! that differ are written) and the untracked files removed — the ignored ones (build outputs)
//! too, unless `--keep-build-cache`. So a run never has more worktrees than tasks at once, and in
//! a large repository pays a full checkout only for those. The run's end removes the parked ones;
//! a killed run's are taken by the next run (or removed by it, or by `--reset`). A repository
//! with submodules gets a new worktree per task, as before: a reused one would keep the last
//! task's submodule checkouts.

use std::path::{Path, PathBuf};

use crate::git::Repo;
use crate::storage::RalphDir;

/// The parked worktrees of a run.
#[derive(Debug)]
pub(super) struct Pool {
    folder: PathBuf,
    /// Worktrees are parked and reused at all (no submodules).
    enabled: bool,
    /// `--keep-build-cache`: a reused worktree keeps its ignored files.
    keep_ignored: bool,
}

impl Pool {
    pub(super) fn new(repo: &Repo, dir: &RalphDir, keep_ignored: bool) -> Self {
        Self {
            folder: folder(dir),
            enabled: !repo.has_submodules(),
            keep_ignored,
        }
    }

    /// The parked worktrees, in their folder's order.
    fn parked(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.folder) else {
            return Vec::new();
        };
        let mut parked: Vec<PathBuf> = entries
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.join(".git").is_file())
            .collect();
        parked.sort();
        parked
    }

    /// How many worktrees are parked.
    pub(super) fn parked_count(&self) -> usize {
        if self.enabled { self.parked().len() } else { 0 }
    }

    /// Parks `count` new worktrees detached at `base`, checked out side by side (a thread
    /// each): tasks that start together then take them over instead of checking the base out
    /// one after the other.
    pub(super) fn add(&self, repo: &Repo, count: usize, base: &str) {
        if !self.enabled || std::fs::create_dir_all(&self.folder).is_err() {
            return;
        }
        let slots: Vec<PathBuf> = (1..)
            .map(|n| self.folder.join(n.to_string()))
            .filter(|slot| !slot.exists())
            .take(count)
            .collect();
        std::thread::scope(|scope| {
            for slot in &slots {
                // One that fails is not taken (see `parked`), and is removed at the run's end.
                scope.spawn(|| repo.detached_worktree(slot, base));
            }
        });
    }

    /// Puts a parked worktree at `path` for `branch` (made at `base` when new); `false` when
    /// none is parked.
    pub(super) fn take(&self, repo: &Repo, path: &Path, (branch, base): (&str, &str)) -> bool {
        let checkout: Vec<&str> = if repo.has_branch(branch) {
            vec![branch]
        } else {
            vec!["-b", branch, base]
        };
        self.take_for(repo, path, &checkout)
    }

    /// Puts a parked worktree at `path`, detached at `commit` (the worktree merges are made
    /// in); `None` when none is parked.
    pub(super) fn take_detached(&self, repo: &Repo, path: &Path, commit: &str) -> Option<Repo> {
        self.take_for(repo, path, &["--detach", commit])
            .then(|| Repo::linked_worktree(path))
            .flatten()
    }

    /// Puts a parked worktree at `path`, `checkout` checked out in it; one that cannot be
    /// reused is removed, and the next one tried.
    fn take_for(&self, repo: &Repo, path: &Path, checkout: &[&str]) -> bool {
        if !self.enabled {
            return false;
        }
        for parked in self.parked() {
            if repo
                .reuse_worktree(&parked, path, checkout, self.keep_ignored)
                .is_ok()
            {
                return true;
            }
            // Wherever the move left it.
            for gone in [parked.as_path(), path] {
                if gone.exists() {
                    repo.remove_worktree(gone, "", false);
                }
            }
        }
        false
    }

    /// Parks the clean worktree at `path`, or removes it when it cannot be parked; its branch
    /// deleted with `delete_branch`.
    pub(super) fn release(&self, repo: &Repo, path: &Path, branch: &str, delete_branch: bool) {
        if !self.park(repo, path) {
            repo.remove_worktree(path, branch, false);
        }
        if delete_branch {
            repo.delete_branch(branch);
        }
    }

    /// Parks the clean worktree at `path`; `false` when it cannot be.
    pub(super) fn park(&self, repo: &Repo, path: &Path) -> bool {
        if !self.enabled || std::fs::create_dir_all(&self.folder).is_err() {
            return false;
        }
        let slot = (1..)
            .map(|n| self.folder.join(n.to_string()))
            .find(|slot| !slot.exists());
        slot.is_some_and(|slot| repo.park_worktree(path, &slot).is_ok())
    }
}

/// Removes every parked worktree of `dir`'s runs and the one merges are made in
/// (`.ralph/worktrees/.integrate`, and its scratch beside it), side by side (a thread each): a
/// run's end, `--reset`.
pub(crate) fn clear(repo: &Repo, dir: &RalphDir) {
    let folder = folder(dir);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&folder)
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default();
    let integration = dir.integration_worktree();
    if integration.join(".git").exists() {
        paths.push(integration);
    }
    // The scope waits for every removal, also those `all` stopped short of.
    let removed = std::thread::scope(|scope| {
        let removals: Vec<_> = (paths.iter())
            .map(|path| {
                scope.spawn(move || {
                    let removed = repo.remove_worktree(path, "", false);
                    let _ = std::fs::remove_dir_all(path);
                    removed
                })
            })
            .collect();
        (removals.into_iter()).all(|removal| removal.join().unwrap_or(false))
    });
    if !removed {
        // A removal git refused (another one under way beside it) pruned before its folder was
        // deleted: what git still lists of it goes now.
        repo.prune_worktrees();
    }
    let _ = std::fs::remove_dir(&folder);
    // Scratch a kill cut off in the middle of a merge.
    for scratch in dir.integration_scratches() {
        let _ = std::fs::remove_dir_all(&scratch).or_else(|_| std::fs::remove_file(&scratch));
    }
}

/// `.ralph/worktrees/.pool`.
fn folder(dir: &RalphDir) -> PathBuf {
    dir.worktree(".pool")
}
