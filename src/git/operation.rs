//! What state the repository is in before a loop starts: an operation under way (a merge, a
//! rebase, a cherry-pick…) that a commit must not land in the middle of, and a detached HEAD.
//!
//! Operations are read from the marker files git leaves in the work tree's git directory (no
//! process); only when there is none, and the index file has an unmerged entry, is git asked for
//! the unmerged paths (`git ls-files -u`), which a `git stash pop` or `git checkout -m` can leave
//! without any operation.

use std::fmt;
use std::path::{Path, PathBuf};

use super::{Repo, SHORT_HASH, check, refs};

/// An operation git has under way in a work tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    Merge,
    Rebase,
    /// `git am` (its state lives in `rebase-apply/` too).
    Am,
    CherryPick,
    Revert,
    Bisect,
}

impl Operation {
    /// How a person names it: "a merge", "a rebase"…
    fn named(self) -> &'static str {
        match self {
            Self::Merge => "a merge",
            Self::Rebase => "a rebase",
            Self::Am => "a `git am`",
            Self::CherryPick => "a cherry-pick",
            Self::Revert => "a revert",
            Self::Bisect => "a bisect",
        }
    }

    /// The commands that end it, one way (finish) or the other (abort).
    fn way_out(self) -> &'static str {
        match self {
            Self::Merge => "finish it (resolve, then git commit) or abort it (git merge --abort)",
            Self::Rebase => "finish it (git rebase --continue) or abort it (git rebase --abort)",
            Self::Am => "finish it (git am --continue) or abort it (git am --abort)",
            Self::CherryPick => {
                "finish it (git cherry-pick --continue) or abort it (git cherry-pick --abort)"
            }
            Self::Revert => "finish it (git revert --continue) or abort it (git revert --abort)",
            Self::Bisect => "end it (git bisect reset)",
        }
    }
}

/// What stops ralph from committing in a work tree: an operation under way (and the marker that
/// tells it), or paths left unmerged without one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Underway {
    Operation {
        operation: Operation,
        /// The marker git left, as shown (`.git/rebase-merge`).
        marker: String,
    },
    /// Paths in conflict (unmerged index entries), repository-relative, sorted.
    Unmerged(Vec<String>),
}

impl Underway {
    /// Whether this is a merge.
    pub(crate) fn is_merge(&self) -> bool {
        matches!(
            self,
            Self::Operation {
                operation: Operation::Merge,
                ..
            }
        )
    }
}

impl fmt::Display for Underway {
    /// What is under way and the way out: "the repository is in the middle of a rebase
    /// (.git/rebase-merge); finish it (git rebase --continue) or abort it (git rebase --abort)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Operation { operation, marker } => write!(
                f,
                "the repository is in the middle of {} ({marker}); {}",
                operation.named(),
                operation.way_out()
            ),
            Self::Unmerged(paths) => {
                const SHOWN: usize = 3;
                let mut shown = paths.iter().take(SHOWN).cloned().collect::<Vec<_>>();
                if paths.len() > SHOWN {
                    shown.push("…".to_owned());
                }
                write!(
                    f,
                    "the repository has unmerged paths ({}); resolve them and mark them resolved (git add <path>), or put back the committed version (git checkout HEAD -- <path>)",
                    shown.join(", ")
                )
            }
        }
    }
}

/// The markers of each operation in a work tree's git directory, in the order they are looked
/// for (`rebase-apply/applying` is `git am`'s, the rest of `rebase-apply/` a rebase's).
const MARKERS: &[(&str, Operation)] = &[
    ("rebase-merge", Operation::Rebase),
    ("rebase-apply/applying", Operation::Am),
    ("rebase-apply", Operation::Rebase),
    ("MERGE_HEAD", Operation::Merge),
    ("CHERRY_PICK_HEAD", Operation::CherryPick),
    ("REVERT_HEAD", Operation::Revert),
    ("BISECT_LOG", Operation::Bisect),
];

impl Repo {
    /// The operation under way in this work tree, or the unmerged paths left without one;
    /// `None` when a commit can be made safely.
    pub(crate) fn underway(&self) -> Option<Underway> {
        if let Some((marker, operation)) = self.operation_marker() {
            return Some(Underway::Operation {
                operation,
                marker: self.shown(&marker),
            });
        }
        let unmerged = self.unmerged_entries();
        (!unmerged.is_empty()).then_some(Underway::Unmerged(unmerged))
    }

    /// The marker of an operation under way and the operation, read from files.
    fn operation_marker(&self) -> Option<(PathBuf, Operation)> {
        if let Some(found) = MARKERS.iter().find_map(|(name, operation)| {
            let path = self.git_dir.join(name);
            path.exists().then_some((path, *operation))
        }) {
            return Some(found);
        }
        // A cherry-pick or revert of several commits that stopped between two of them.
        let todo = self.git_dir.join("sequencer").join("todo");
        let text = std::fs::read_to_string(&todo).ok()?;
        sequencer_operation(&text).map(|operation| (todo, operation))
    }

    /// The paths with unmerged index entries (`git ls-files -u`), sorted, each once.
    fn unmerged_entries(&self) -> Vec<String> {
        if self.index_has_unmerged() == Some(false) {
            return Vec::new();
        }
        let Ok(output) = check(self.run(&["ls-files", "-u", "-z"]), "git ls-files") else {
            return Vec::new();
        };
        let mut paths: Vec<String> = (output.stdout.split(|&b| b == 0))
            .filter_map(|entry| {
                let tab = entry.iter().position(|&b| b == b'\t')?;
                Some(String::from_utf8_lossy(&entry[tab + 1..]).into_owned())
            })
            .collect();
        paths.sort();
        paths.dedup();
        paths
    }

    /// Whether a merge of a branch named `prefix…` is under way (`MERGE_HEAD` is that branch's
    /// tip): a merge ralph started on its own branch.
    pub(crate) fn merging_branch(&self, prefix: &str) -> bool {
        if !self.merging() {
            return false;
        }
        let pattern = format!("refs/heads/{prefix}");
        self.run(&[
            "for-each-ref",
            "--points-at",
            "MERGE_HEAD",
            "--format=%(refname)",
            &pattern,
        ])
        .is_ok_and(|output| output.status.success() && !output.stdout.is_empty())
    }

    /// HEAD's abbreviated commit when HEAD is detached (read from `HEAD`; no process).
    pub(crate) fn detached_head(&self) -> Option<String> {
        let head = std::fs::read_to_string(self.git_dir.join("HEAD")).ok()?;
        let head = head.trim_end();
        refs::is_oid(head).then(|| head[..SHORT_HASH].to_owned())
    }

    /// Whether git can write in this repository: a file is created and removed in the work
    /// tree's git directory and in the object store. `Err` names the directory and why not.
    pub(crate) fn writable(&self) -> Result<(), (PathBuf, std::io::Error)> {
        for dir in [self.git_dir.clone(), self.common_dir().join("objects")] {
            tempfile::Builder::new()
                .prefix("ralph-doctor")
                .tempfile_in(&dir)
                .map_err(|err| (dir, err))?;
        }
        Ok(())
    }

    /// A path under the git directory as shown to a person: relative to the work tree's top
    /// when it lies inside it (`.git/MERGE_HEAD`), else in full.
    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

/// Whether a sequencer's `todo` list is a cherry-pick's or a revert's (by its first command).
fn sequencer_operation(todo: &str) -> Option<Operation> {
    let command = todo
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with('#'))?
        .split_whitespace()
        .next()?;
    match command {
        "pick" | "p" => Some(Operation::CherryPick),
        "revert" => Some(Operation::Revert),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::super::tests::repo;
    use super::*;

    fn git_in(dir: &Path, args: &[&str]) -> bool {
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_EDITOR", "true")
            .output()
            .is_ok_and(|output| output.status.success())
    }

    #[test]
    fn each_operation_is_told_with_its_marker_and_way_out() {
        let rebase = Underway::Operation {
            operation: Operation::Rebase,
            marker: ".git/rebase-merge".to_owned(),
        };
        assert_eq!(
            rebase.to_string(),
            "the repository is in the middle of a rebase (.git/rebase-merge); finish it (git rebase --continue) or abort it (git rebase --abort)"
        );
        let bisect = Underway::Operation {
            operation: Operation::Bisect,
            marker: ".git/BISECT_LOG".to_owned(),
        };
        assert!(bisect.to_string().ends_with("end it (git bisect reset)"));
        let unmerged = Underway::Unmerged(
            ["a", "b", "c", "d"]
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        );
        assert!(
            unmerged
                .to_string()
                .starts_with("the repository has unmerged paths (a, b, c, …); resolve them"),
            "{unmerged}"
        );
    }

    #[test]
    fn a_sequencer_list_is_a_cherry_pick_or_a_revert() {
        assert_eq!(
            sequencer_operation("pick 1234567 one\npick 89abcde two\n"),
            Some(Operation::CherryPick)
        );
        assert_eq!(
            sequencer_operation("# comment\nrevert 1234567 one\n"),
            Some(Operation::Revert)
        );
        assert_eq!(sequencer_operation(""), None);
    }

    #[test]
    fn a_conflicted_merge_and_then_its_leftover_unmerged_paths_are_under_way() {
        let Some((dir, repo)) = repo() else { return };
        let git = |args: &[&str]| git_in(dir.path(), args);
        assert_eq!(repo.underway(), None);
        assert!(git(&["checkout", "-q", "-b", "other"]));
        std::fs::write(dir.path().join("a.txt"), "other\n").unwrap();
        assert!(git(&["commit", "-q", "-am", "other"]));
        assert!(git(&["checkout", "-q", "-"]));
        std::fs::write(dir.path().join("a.txt"), "mine\n").unwrap();
        assert!(git(&["commit", "-q", "-am", "mine"]));
        assert!(!git(&["merge", "-q", "other"]), "the merge conflicts");
        let underway = repo.underway().unwrap();
        assert!(underway.is_merge(), "{underway:?}");
        assert_eq!(
            underway,
            Underway::Operation {
                operation: Operation::Merge,
                marker: ".git/MERGE_HEAD".to_owned()
            }
        );
        assert!(!repo.merging_branch("ralph/"));
        // Without MERGE_HEAD, the conflicted path is still unmerged.
        std::fs::remove_file(dir.path().join(".git/MERGE_HEAD")).unwrap();
        assert_eq!(
            repo.underway(),
            Some(Underway::Unmerged(vec!["a.txt".to_owned()]))
        );
    }

    #[test]
    fn a_bisect_and_a_detached_head_are_seen() {
        let Some((dir, repo)) = repo() else { return };
        let git = |args: &[&str]| git_in(dir.path(), args);
        assert_eq!(repo.detached_head(), None);
        assert!(git(&["checkout", "-q", "--detach"]));
        let head = repo.head_oid().unwrap();
        assert_eq!(repo.detached_head(), Some(head[..SHORT_HASH].to_owned()));
        assert!(git(&["bisect", "start"]));
        assert!(
            matches!(
                repo.underway(),
                Some(Underway::Operation {
                    operation: Operation::Bisect,
                    ..
                })
            ),
            "{:?}",
            repo.underway()
        );
    }
}
