//! What a loop checks of its repository before it starts, and what it leaves alone there.
//!
//! - An operation of the user's under way (a merge, a rebase, a cherry-pick, a revert, a
//!   bisect, or unmerged paths) refuses the start, in every mode, before anything is committed:
//!   ralph's commits would land in the middle of it.
//! - A detached HEAD is warned about: ralph's commits would be on no branch.
//! - The changes the user had not committed when a loop starts (outside `.ralph/`) are listed
//!   once and left out of every commit of the loop, saved in the state for `--resume`;
//!   `--commit-dirty` commits them as the agent's.

use std::collections::BTreeSet;

use crate::error::fail;
use crate::event::Notice;
use crate::git::Repo;

use super::Runner;

/// The branches ralph creates for tasks and worktrees (`ralph/<name>`).
const OWN_BRANCHES: &str = "ralph/";

/// What to do with a merge of one of ralph's own branches that a killed ralph left half done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OwnMerge {
    /// Refused like any other: a loop here would commit into it.
    Refused,
    /// Let through: the caller undoes it (a `--parallel` run) or it is ralph's to go on with.
    LeftToCaller,
}

/// Refuses (exit 1) to start in a work tree with an operation under way or unmerged paths, with
/// the one line that says how to end it.
pub(crate) fn refuse_operation_underway(repo: &Repo, own_merge: OwnMerge) -> anyhow::Result<()> {
    // A git merge or commit that a killed ralph started may still be finishing: it is waited for
    // (30 s at most), or it would look like an operation of the user's.
    repo.wait_for_index(std::time::Duration::from_secs(30));
    let Some(underway) = repo.underway() else {
        return Ok(());
    };
    if own_merge == OwnMerge::LeftToCaller
        && underway.is_merge()
        && repo.merging_branch(OWN_BRANCHES)
    {
        return Ok(());
    }
    Err(fail(format!("{underway}, then run ralph again")).into())
}

impl Runner<'_> {
    /// At a loop's start, with auto-commit on: warns of a detached HEAD, and records and lists
    /// the changes that are not the agent's, so that the loop's commits leave them out. A
    /// resumed loop keeps the list it saved: what changed since it stopped is, as a rule, the
    /// work of its interrupted iteration.
    pub(super) fn look_at_repository(&mut self) {
        let options = &self.env.config.options;
        let Some(repo) = &self.env.repo else { return };
        if !options.commit || self.env.shape.task_loop().is_some() {
            return;
        }
        if let Some(head) = repo.detached_head() {
            self.env.sink.notice(Notice::DetachedHead(&head));
        }
        if options.commit_dirty {
            return;
        }
        if !self.resumed
            && let Some(snapshot) = repo.scan(&mut self.tree)
        {
            self.state.dirty_at_start = repo.uncommitted(&snapshot);
        }
        if !self.state.dirty_at_start.is_empty() {
            let paths: Vec<String> = self.state.dirty_at_start.iter().cloned().collect();
            self.env.sink.notice(Notice::DirtyAtStart(&paths));
        }
    }

    /// Commits the iteration's work with `message`, leaving out the user's changes from before
    /// the loop (none with `--commit-dirty`).
    pub(super) fn commit_work(&mut self, message: &str) -> Option<Result<Option<String>, String>> {
        let repo = self.env.repo.as_ref()?;
        let mut none = BTreeSet::new();
        let left_out = if self.env.config.options.commit_dirty {
            &mut none
        } else {
            &mut self.state.dirty_at_start
        };
        Some(repo.commit_all(message, &mut self.tree, left_out))
    }
}

/// ralph's files `names` under `.ralph/`, repository-relative.
pub(crate) fn own_files(repo: &Repo, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|name| format!("{}{}/{name}", repo.prefix(), crate::storage::RALPH_DIR))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::git;

    #[test]
    fn a_merge_of_a_ralph_branch_is_left_to_the_caller_and_any_other_refused() {
        let dir = crate::testing::tempdir().unwrap();
        let path = dir.path();
        if !git(path, &["init", "-q", "-b", "main"]) {
            return;
        }
        std::fs::write(path.join("f"), "base\n").unwrap();
        assert!(git(path, &["add", "f"]) && git(path, &["commit", "-qm", "base"]));
        assert!(git(path, &["checkout", "-qb", "ralph/task"]));
        std::fs::write(path.join("f"), "task\n").unwrap();
        assert!(git(path, &["commit", "-qam", "task"]));
        assert!(git(path, &["checkout", "-q", "main"]));
        std::fs::write(path.join("f"), "mine\n").unwrap();
        assert!(git(path, &["commit", "-qam", "mine"]));
        assert!(!git(path, &["merge", "-q", "ralph/task"]), "conflicts");
        let repo = Repo::discover(path).unwrap();
        assert!(refuse_operation_underway(&repo, OwnMerge::LeftToCaller).is_ok());
        let refused = refuse_operation_underway(&repo, OwnMerge::Refused).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "the repository is in the middle of a merge (.git/MERGE_HEAD); finish it (resolve, then git commit) or abort it (git merge --abort), then run ralph again"
        );
    }
}
