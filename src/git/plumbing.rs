//! Merges made by git's plumbing, with no work tree: `merge-tree --write-tree` merges two commits
//! into a tree, a throwaway index changes a few files of a tree, and `commit-tree` makes the
//! commit. Nothing is checked out, so a merge costs a handful of processes and no file of any
//! work tree is written; what it makes is only objects, harmless when a kill cuts it off.

use std::path::Path;

use super::{Repo, check};

/// Two commits merged by [`Repo::merge_trees`].
#[derive(Debug)]
pub(crate) struct TreeMerge {
    /// The merged tree (conflicted files hold conflict blocks).
    pub(crate) tree: String,
    /// The files left in conflict, repository-relative.
    pub(crate) conflicts: Vec<String>,
}

/// How `git merge-tree` says that it does not know `--write-tree` (git before 2.38).
const USAGE: i32 = 129;

impl Repo {
    /// Merges commits `ours` and `theirs` into a tree (`git merge-tree --write-tree`), the
    /// conflicted files named: `None` when this git is too old to.
    pub(crate) fn merge_trees(
        &self,
        ours: &str,
        theirs: &str,
    ) -> Result<Option<TreeMerge>, String> {
        let args = [
            "merge-tree",
            "--write-tree",
            "--no-messages",
            "--name-only",
            "-z",
            ours,
            theirs,
        ];
        let output = self
            .run(&args)
            .map_err(|err| format!("git merge-tree could not run: {err}"))?;
        match output.status.code() {
            Some(0 | 1) => {}
            Some(USAGE) => return Ok(None),
            _ => return check(Ok(output), "git merge-tree").map(|_| None),
        }
        // `TREE NUL`, then each conflicted file `PATH NUL`.
        let mut fields = (output.stdout.split(|&b| b == 0))
            .filter(|field| !field.is_empty())
            .map(|field| String::from_utf8_lossy(field).into_owned());
        let tree = fields.next().ok_or("git merge-tree wrote no tree")?;
        let mut conflicts: Vec<String> = fields.collect();
        conflicts.dedup();
        Ok(Some(TreeMerge { tree, conflicts }))
    }

    /// The repository-relative paths `branch` changed since it left `base` (`git diff
    /// base...branch`); empty when git cannot say.
    pub(crate) fn changed_since(&self, base: &str, branch: &str) -> Vec<String> {
        self.diff_names(&[&format!("{base}...{branch}")])
    }

    /// The paths `git diff --name-only` names for `revs`.
    fn diff_names(&self, revs: &[&str]) -> Vec<String> {
        let mut args = vec!["diff", "--name-only", "--no-renames"];
        args.extend(revs);
        self.run(&args)
            .ok()
            .filter(|output| output.status.success())
            .map(|output| {
                String::from_utf8_lossy(&output.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether this git merges by plumbing ([`Repo::merge_trees`]): 2.38 or newer.
    pub(crate) fn merges_trees(&self) -> bool {
        let empty = super::EMPTY_TREE;
        // Two trees are no commits: a git that knows `--write-tree` refuses them, not the option.
        (self.run(&["merge-tree", "--write-tree", empty, empty]))
            .is_ok_and(|output| output.status.code() != Some(USAGE))
    }

    /// Writes `files` (on disk) as blobs, as they are (no filter): their ids, in order.
    pub(crate) fn write_blobs(&self, files: &[&Path]) -> Result<Vec<String>, String> {
        if files.is_empty() {
            return Ok(Vec::new());
        }
        let mut input = String::new();
        for file in files {
            input.push_str(&file.to_string_lossy());
            input.push('\n');
        }
        let args = ["hash-object", "-w", "--no-filters", "--stdin-paths"];
        let output = check(
            self.run_with_input(&args, input.as_bytes()),
            "git hash-object",
        )?;
        let ids: Vec<String> = (String::from_utf8_lossy(&output.stdout).lines())
            .map(str::to_owned)
            .collect();
        if ids.len() != files.len() {
            return Err("git hash-object stopped short".to_owned());
        }
        Ok(ids)
    }

    /// A commit of `tree` with `parents` and `message` (`git commit-tree`), as the user's
    /// identity and signing settings make it: its id.
    pub(crate) fn commit_tree(
        &self,
        tree: &str,
        parents: &[&str],
        message: &str,
    ) -> Result<String, String> {
        let mut args = vec!["commit-tree", tree];
        for parent in parents {
            args.extend(["-p", parent]);
        }
        args.extend(["-m", message]);
        let output = check(self.run(&args), "git commit-tree")?;
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// For each of `tips`, its merge base with `start` joined by the other tips (so, in a merge
    /// train whose tips land one after another on `start`, its merge base with the train before
    /// it), read from one `git rev-list` when it can be: when the tip's own commits (those
    /// `start` lacks) leave that history through one commit only and share none with another
    /// tip's, that commit is the merge base. `None` where it cannot be told so (ask
    /// [`Repo::merge_base`]); all `None` when git fails.
    pub(crate) fn fork_points(&self, start: &str, tips: &[&str]) -> Vec<Option<String>> {
        if tips.is_empty() {
            return Vec::new();
        }
        let not_start = format!("^{start}");
        let mut args = vec!["rev-list", "--parents", "--boundary", not_start.as_str()];
        args.extend(tips.iter().copied());
        match check(self.run(&args), "git rev-list") {
            Ok(output) => fork_points_in(&String::from_utf8_lossy(&output.stdout), tips),
            Err(_) => vec![None; tips.len()],
        }
    }

    /// Whether the repository has hooks a commit would run (any runnable file in its hooks
    /// folder but git's samples).
    pub(crate) fn has_hooks(&self) -> bool {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = (self.hooks_path()).unwrap_or_else(|| self.git_common_dir().join("hooks"));
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries.flatten().any(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let runnable = (entry.metadata())
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0);
            runnable && !name.ends_with(".sample") && !name.starts_with('.')
        })
    }
}

/// [`Repo::fork_points`] from the listing of `git rev-list --parents --boundary`: each line a
/// commit and its parents, a boundary commit (one of the excluded history) led by `-`.
fn fork_points_in(listing: &str, tips: &[&str]) -> Vec<Option<String>> {
    use std::collections::{HashMap, HashSet};
    let mut parents: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut boundary: HashSet<&str> = HashSet::new();
    for line in listing.lines() {
        let (edge, line) = line
            .strip_prefix('-')
            .map_or((false, line), |rest| (true, rest));
        let mut words = line.split_whitespace();
        let Some(commit) = words.next() else {
            continue;
        };
        if edge {
            boundary.insert(commit);
        } else {
            parents.insert(commit, words.collect());
        }
    }
    // Each tip's own commits and the boundary commits they reach; `None`: a tip not listed
    // (`start` has it), or a parent the listing lacks.
    let walks: Vec<(HashSet<&str>, Option<HashSet<&str>>)> = (tips.iter())
        .map(|tip| {
            let (mut own, mut edges) = (HashSet::new(), Some(HashSet::new()));
            if !parents.contains_key(tip) {
                return (own, None);
            }
            let mut todo = vec![*tip];
            while let Some(commit) = todo.pop() {
                if boundary.contains(commit) {
                    edges.as_mut().map(|edges| edges.insert(commit));
                } else if let Some(up) = parents.get(commit) {
                    if own.insert(commit) {
                        todo.extend(up.iter().copied());
                    }
                } else {
                    edges = None;
                }
            }
            (own, edges)
        })
        .collect();
    let mut owners: HashMap<&str, usize> = HashMap::new();
    for commit in walks.iter().flat_map(|(own, _)| own) {
        *owners.entry(commit).or_default() += 1;
    }
    (walks.iter())
        .map(|(own, edges)| {
            let edges = edges.as_ref()?;
            let alone = own.iter().all(|commit| owners[commit] == 1);
            let mut edges = edges.iter();
            match (edges.next(), edges.next()) {
                (Some(edge), None) if alone => Some((*edge).to_owned()),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::testing::git;

    /// A repository on `main` with `f` and `g`, a branch `b` changing both and `main` then
    /// changing `f`; `None` without git.
    fn forked() -> Option<(tempfile::TempDir, Repo)> {
        let dir = crate::testing::tempdir().unwrap();
        let root = dir.path();
        if !git(root, &["init", "-q", "-b", "main"]) {
            return None;
        }
        // `commit-tree` runs as this process: the repository names who commits.
        for (key, value) in [("user.name", "t"), ("user.email", "t@example.invalid")] {
            assert!(git(root, &["config", key, value]));
        }
        let commit = |message: &str| assert!(git(root, &["commit", "-qam", message]));
        fs::write(root.join("f"), "a\n").unwrap();
        fs::write(root.join("g"), "x\n").unwrap();
        assert!(git(root, &["add", "."]));
        commit("a");
        assert!(git(root, &["checkout", "-qb", "b"]));
        fs::write(root.join("f"), "b\n").unwrap();
        fs::write(root.join("g"), "y\n").unwrap();
        commit("b");
        assert!(git(root, &["checkout", "-q", "main"]));
        fs::write(root.join("f"), "c\n").unwrap();
        commit("c");
        let repo = Repo::discover(root)?;
        Some((dir, repo))
    }

    #[test]
    fn two_commits_merge_into_a_tree_naming_the_conflicts_and_a_file_set_over_them() {
        let Some((dir, repo)) = forked() else {
            return;
        };
        if !repo.merges_trees() {
            return;
        }
        let merged = repo.merge_trees("main", "b").unwrap().unwrap();
        assert_eq!(merged.conflicts, ["f"]);
        let kept = dir.path().join("kept");
        fs::write(&kept, "both\n").unwrap();
        let blobs = repo.write_blobs(&[&kept]).unwrap();
        let mut trees = crate::git::Trees::open(&repo).unwrap();
        let tree =
            (trees.with_files(&merged.tree, &[("f", Some(&blobs[0])), ("gone", None)])).unwrap();
        let commit = repo.commit_tree(&tree, &["main", "b"], "merged").unwrap();
        let files = repo
            .files_at(&[(commit.as_str(), "f"), (commit.as_str(), "g")])
            .unwrap();
        assert_eq!(files[0], Ok(Some(b"both\n".to_vec())));
        assert_eq!(files[1], Ok(Some(b"y\n".to_vec())));
        assert_eq!(
            repo.merge_base(&commit, "b").as_deref(),
            repo.resolve("b").as_deref()
        );
        // Nothing was checked out: the work tree is main's.
        assert_eq!(fs::read_to_string(dir.path().join("f")).unwrap(), "c\n");
        let clean = repo.merge_trees("main", "main~1").unwrap().unwrap();
        assert!(clean.conflicts.is_empty());
    }

    #[test]
    fn a_tip_leaving_by_one_commit_alone_has_it_for_merge_base() {
        let listing = "c2 c1\nc1 b\nd1 b2\nm1 b b2\ne1 c1\n-b\n-b2\n";
        let forks = |tips: &[&str]| fork_points_in(listing, tips);
        assert_eq!(
            forks(&["c2", "d1"]),
            [Some("b".to_owned()), Some("b2".to_owned())]
        );
        // Leaving by two commits (a merge of the history), or sharing a commit with another tip
        // (e1 is on c1): not told; nor a tip the listing lacks (the history has it).
        assert_eq!(forks(&["m1"]), [None]);
        assert_eq!(
            forks(&["c2", "e1", "d1"]),
            [None, None, Some("b2".to_owned())]
        );
        assert_eq!(forks(&["zz"]), [None]);
        // A parent the listing lacks (a shallow history's edge).
        assert_eq!(fork_points_in("c1 x\n-b\n", &["c1"]), [None]);
    }

    #[test]
    fn fork_points_are_the_merge_bases_of_a_train() {
        let Some((dir, repo)) = forked() else {
            return;
        };
        let root = dir.path();
        // r1 forks from main~1 (with b's history under it: b forks there too), r2 from main.
        assert!(git(root, &["checkout", "-qb", "r1", "main~1"]));
        fs::write(root.join("r1"), "1\n").unwrap();
        assert!(git(root, &["add", "r1"]));
        assert!(git(root, &["commit", "-qm", "r1"]));
        assert!(git(root, &["checkout", "-qb", "r2", "main"]));
        fs::write(root.join("r2"), "2\n").unwrap();
        assert!(git(root, &["add", "r2"]));
        assert!(git(root, &["commit", "-qm", "r2"]));
        let tips = [repo.resolve("r1").unwrap(), repo.resolve("r2").unwrap()];
        let tips: Vec<&str> = tips.iter().map(String::as_str).collect();
        let forks = repo.fork_points("main", &tips);
        assert_eq!(forks[0], repo.merge_base("main", "r1"));
        assert_eq!(forks[0], repo.resolve("main~1"));
        // r2 after r1 has landed on main: its merge base with that merge is still its fork.
        // (Any tree will do for the merge commit: main~1's.)
        let mut trees = crate::git::Trees::open(&repo).unwrap();
        let tree = trees.with_files("main~1", &[]).unwrap();
        let landed = repo
            .commit_tree(&tree, &["main", tips[0]], "r1 landed")
            .unwrap();
        assert_eq!(forks[1], repo.merge_base(&landed, "r2"));
        assert_eq!(forks[1], repo.resolve("main"));
        // A tip main has, and a git that fails: not told.
        assert_eq!(
            repo.fork_points("main", &[&repo.resolve("main~1").unwrap()]),
            [None]
        );
        assert_eq!(repo.fork_points("no-such-start", &tips), [None, None]);
    }

    #[test]
    fn hooks_are_found_but_not_git_samples() {
        let Some((dir, repo)) = forked() else {
            return;
        };
        let hooks = dir.path().join(".git/hooks");
        fs::create_dir_all(&hooks).unwrap();
        fs::write(hooks.join("pre-commit.sample"), "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        let runnable = fs::Permissions::from_mode(0o755);
        fs::set_permissions(hooks.join("pre-commit.sample"), runnable.clone()).unwrap();
        assert!(!repo.has_hooks());
        fs::write(hooks.join("commit-msg"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(hooks.join("commit-msg"), runnable).unwrap();
        assert!(repo.has_hooks());
    }
}
