//! ralph's commits: an iteration's work (exactly the paths the last scan named), ralph's own
//! files alone, and the fallback when no scan can say what changed.
//!
//! An auto-commit stages exactly the paths the last scan named (with `--pathspec-from-file`,
//! never a scan of its own) and commits: two processes, plus a `git reset` only when a tracked
//! runtime file was staged. The user's changes from before the loop (`left_out`) are not staged;
//! when one of them is staged already, the commit names its paths (`git commit
//! --pathspec-from-file`) instead of taking the whole index, which leaves that change staged:
//! still two processes.

use std::collections::{BTreeSet, HashSet};
use std::os::unix::ffi::OsStrExt as _;

use crate::storage::{RALPH_DIR, RUNTIME_FILES};

use super::scan::{self, Entry, Tree};
use super::{Repo, SHORT_HASH, check};

impl Repo {
    /// Commits the work: exactly the paths the tree's scan names (ralph's runtime files and the
    /// paths `left_out` left out) and ralph's own files; `tree` then holds the tree as committed.
    /// A path of `left_out` that is no longer changed (committed or put back since) leaves the
    /// set: a later change of it is the agent's.
    ///
    /// `Ok(None)` when there was nothing to commit; `Err` carries git's explanation.
    pub(crate) fn commit_all(
        &self,
        message: &str,
        tree: &mut Tree,
        left_out: &mut BTreeSet<String>,
    ) -> Result<Option<String>, String> {
        let Some((snapshot, fresh)) = self.current_or_fresh(tree) else {
            return self.commit_everything(message, left_out);
        };
        if fresh && snapshot.entries.is_empty() && self.own_files_committed(tree) {
            // A look of just now found nothing changed, and ralph's own files are as its last
            // commit left them: the tree stays as it is.
            return Ok(None);
        }
        tree.forget();
        if !left_out.is_empty() {
            let named: HashSet<_> = (snapshot.entries.iter())
                .map(|entry| entry.path.to_string_lossy())
                .collect();
            left_out.retain(|path| named.contains(path.as_str()));
        }
        let runtime = |entry: &Entry| self.is_runtime_file(&entry.path.to_string_lossy());
        let kept_out = |entry: &Entry| {
            !left_out.is_empty() && left_out.contains(entry.path.to_string_lossy().as_ref())
        };
        let own = self.own_paths();
        let own = self.existing(&own.iter().map(String::as_str).collect::<Vec<_>>());
        // The paths to stage, or (`all`) every path to commit, staged or not.
        let paths = |all: bool| {
            let mut paths = Vec::new();
            for entry in (snapshot.entries.iter())
                .filter(|e| (all || e.unstaged) && !runtime(e) && !kept_out(e))
            {
                push_nul(&mut paths, entry.path.as_bytes());
            }
            for path in &own {
                push_nul(&mut paths, path.as_bytes());
            }
            paths
        };
        let staged = paths(false);
        let add = [
            "--literal-pathspecs",
            "add",
            "-A",
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
        ];
        if !staged.is_empty() && check(self.run_with_input(&add, &staged), "git add").is_err() {
            // A path that vanished since the scan: stage whatever is there.
            return self.commit_everything(message, left_out);
        }
        let committed =
            if snapshot.entries.iter().any(|e| e.staged && kept_out(e)) && !self.merging() {
                // A change left out is staged: commit the other paths alone, leaving it staged.
                self.commit_only(message, &paths(true))?
            } else {
                let staged_runtime: Vec<&scan::Entry> = (snapshot.entries.iter())
                    .filter(|entry| entry.staged && runtime(entry))
                    .collect();
                self.commit_index(message, &staged_runtime)?
            };
        if committed.is_some() {
            self.keep_committed(tree, snapshot, left_out);
        }
        Ok(committed)
    }

    /// Commits the index but for the runtime files `staged_runtime` (unstaged first).
    /// `Ok(None)` when there was nothing to commit.
    fn commit_index(
        &self,
        message: &str,
        staged_runtime: &[&Entry],
    ) -> Result<Option<String>, String> {
        if !staged_runtime.is_empty() {
            let mut reset = vec!["--literal-pathspecs", "reset", "-q", "--"];
            let names: Vec<String> = (staged_runtime.iter())
                .map(|entry| entry.path.to_string_lossy().into_owned())
                .collect();
            reset.extend(names.iter().map(String::as_str));
            check(self.run(&reset), "git reset")?;
        }
        match self.commit(&["-m", message]) {
            Ok(hash) => Ok(Some(hash)),
            Err(why) => {
                let unchanged = self
                    .run(&["diff", "--cached", "--quiet"])
                    .is_ok_and(|diff| diff.status.success());
                if unchanged { Ok(None) } else { Err(why) }
            }
        }
    }

    /// Stages everything except ralph's runtime files and the paths `left_out` (`git add -A`)
    /// and commits it: the way when no scan can say what changed.
    ///
    /// `Ok(None)` when there was nothing to commit; `Err` carries git's explanation.
    fn commit_everything(
        &self,
        message: &str,
        left_out: &BTreeSet<String>,
    ) -> Result<Option<String>, String> {
        if left_out.is_empty() {
            check(self.run(&["add", "-A", "--", ":/"]), "git add")?;
        } else {
            let mut specs = b":/\0".to_vec();
            for path in left_out {
                push_nul(
                    &mut specs,
                    format!(":(top,literal,exclude){path}").as_bytes(),
                );
            }
            let add = ["add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul"];
            check(self.run_with_input(&add, &specs), "git add")?;
        }
        let staged = check(
            self.run(&["diff", "--cached", "--name-only", "-z", "--no-renames"]),
            "git diff --cached",
        )?;
        let mut to_commit = Vec::new();
        let mut staged_left_out = false;
        let mut staged_runtime = Vec::new();
        for path in staged.stdout.split(|&b| b == 0).filter(|p| !p.is_empty()) {
            let text = String::from_utf8_lossy(path);
            match self.runtime_name(&text) {
                Some(name) if RUNTIME_FILES.contains(&name) => staged_runtime.push(name.to_owned()),
                _ if left_out.contains(text.as_ref()) => staged_left_out = true,
                _ => push_nul(&mut to_commit, path),
            }
        }
        if to_commit.is_empty() {
            return Ok(None);
        }
        if staged_left_out {
            // Staged by the user before the loop: commit the other paths alone.
            return self.commit_only(message, &to_commit);
        }
        if !staged_runtime.is_empty() {
            // The runtime files are git-ignored, but a user may have committed them once, and
            // then `add -A` stages them: unstage exactly those.
            let paths = self.runtime_pathspecs(&staged_runtime);
            let mut reset = vec!["reset", "-q", "--"];
            reset.extend(paths.iter().map(String::as_str));
            check(self.run(&reset), "git reset")?;
        }
        self.commit(&["-m", message]).map(Some)
    }

    /// Commits the NUL-separated repository-relative `paths` alone, as they are in the work
    /// tree, leaving whatever else is staged staged (`git commit -- <paths>`, the paths read from
    /// stdin). `Ok(None)` when none of them changed.
    fn commit_only(&self, message: &str, paths: &[u8]) -> Result<Option<String>, String> {
        if paths.is_empty() {
            // No path would commit the whole index.
            return Ok(None);
        }
        let mut args = self.commit_settings();
        args.extend([
            "--literal-pathspecs",
            "commit",
            "-q",
            "-m",
            message,
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
        ]);
        match check(self.run_with_input(&args, paths), "git commit") {
            Ok(_) => self.new_head().map(Some),
            Err(why) => {
                let mut diff = vec!["--literal-pathspecs", "diff", "--cached", "--quiet", "--"];
                let named: Vec<String> = (paths.split(|&b| b == 0))
                    .filter(|path| !path.is_empty())
                    .map(|path| String::from_utf8_lossy(path).into_owned())
                    .collect();
                diff.extend(named.iter().map(String::as_str));
                let unchanged = self.run(&diff).is_ok_and(|diff| diff.status.success());
                if unchanged { Ok(None) } else { Err(why) }
            }
        }
    }

    /// Commits ralph's own files named `names` under `.ralph/` (the progress log, the task file),
    /// and nothing else, whatever else is staged. `Ok(None)` when none of them changed.
    pub(crate) fn commit_own_files(
        &self,
        names: &[&str],
        message: &str,
    ) -> Result<Option<String>, String> {
        let paths: Vec<String> = names
            .iter()
            .map(|name| format!("{}{RALPH_DIR}/{name}", self.prefix))
            .collect();
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        self.commit_paths(&paths, message)
    }

    /// Commits the repository-relative `paths` alone (whatever else is staged), if they exist and
    /// changed: the short hash of the commit, or `None`. During a merge nothing is committed
    /// (git allows no commit of some paths only then): they go with the merge commit.
    pub(crate) fn commit_paths(
        &self,
        paths: &[&str],
        message: &str,
    ) -> Result<Option<String>, String> {
        let present = self.existing(paths);
        let specs: Vec<String> = (present.iter())
            .map(|path| format!(":(top,literal){path}"))
            .collect();
        if specs.is_empty() || self.merging() {
            return Ok(None);
        }
        let with = |head: &[&str]| -> Vec<String> {
            let mut args: Vec<String> = head.iter().map(|arg| (*arg).to_owned()).collect();
            args.extend(specs.iter().cloned());
            args
        };
        // `git commit -- PATHS` takes tracked paths as they are in the work tree: they need no
        // `git add` first (one process fewer for the progress log, tracked after its first
        // commit).
        let added = !self.all_tracked(&present);
        if added {
            check(self.run_owned(&with(&["add", "-A", "--"])), "git add")?;
        }
        let mut args = vec!["-m", message, "--"];
        args.extend(specs.iter().map(String::as_str));
        // Usually there is something to commit: git is asked whether there was only when the
        // commit fails (one process fewer in the common case).
        match self.commit(&args) {
            Ok(hash) => Ok(Some(hash)),
            Err(why) => {
                if !added {
                    check(self.run_owned(&with(&["add", "-A", "--"])), "git add")?;
                }
                let unchanged = self
                    .run_owned(&with(&["diff", "--cached", "--quiet", "--"]))
                    .is_ok_and(|diff| diff.status.success());
                if unchanged { Ok(None) } else { Err(why) }
            }
        }
    }

    /// Runs `git commit -q ARGS` and returns the new commit's abbreviated hash, read from the
    /// refs (asked of git only when they cannot be read). Quiet, since the summary git prints
    /// otherwise costs a diff of the whole commit; one process instead of two per commit.
    pub(super) fn commit(&self, args: &[&str]) -> Result<String, String> {
        let mut all = self.commit_settings();
        all.extend(["commit", "-q"]);
        all.extend_from_slice(args);
        // Output to files: a kill of ralph must not kill git (or a hook) half way with SIGPIPE.
        check(self.run_unpiped(&all), "git commit")?;
        self.new_head()
    }

    /// The settings of ralph's `git commit`s: in a task's worktree (a linked worktree of the
    /// clone), git's housekeeping after each commit (`maintenance run --auto`) is left to the
    /// clone's own commands, as after a worker's fetches: the tasks of a fleet commit at the
    /// same moment, and each commit would start it once more.
    pub(super) fn commit_settings(&self) -> Vec<&'static str> {
        if self.git_dir == self.common_dir() {
            Vec::new()
        } else {
            vec!["-c", "maintenance.auto=false"]
        }
    }

    /// The abbreviated hash of the commit just made, read from the refs (asked of git only
    /// when they cannot be read).
    fn new_head(&self) -> Result<String, String> {
        match self.head_oid() {
            Some(oid) => Ok(oid[..SHORT_HASH].to_owned()),
            None => self.short_head(),
        }
    }

    /// The abbreviated hash of HEAD.
    fn short_head(&self) -> Result<String, String> {
        let hash = check(self.run(&["rev-parse", "--short", "HEAD"]), "git rev-parse")?;
        Ok(String::from_utf8_lossy(&hash.stdout).trim().to_owned())
    }

    /// Literal, top-anchored pathspecs of ralph's files named `names`.
    fn runtime_pathspecs(&self, names: &[String]) -> Vec<String> {
        names
            .iter()
            .map(|name| format!(":(top,literal){}{RALPH_DIR}/{name}", self.prefix))
            .collect()
    }
}

/// Appends `path` and a NUL to a pathspec list read with `--pathspec-file-nul`.
fn push_nul(list: &mut Vec<u8>, path: &[u8]) {
    list.extend_from_slice(path);
    list.push(0);
}

#[cfg(test)]
mod tests {
    use super::super::git;
    use super::super::tests::repo;
    use super::*;

    /// Runs git in `dir`, asserting success; its output.
    fn run(dir: &std::path::Path, args: &[&str]) -> String {
        let output = git(dir, args).unwrap();
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// For a test repository at `dir`: a path in it, and git run there (its stdout).
    fn helpers(
        dir: &std::path::Path,
    ) -> (
        impl Fn(&str) -> std::path::PathBuf + '_,
        impl Fn(&[&str]) -> String + '_,
    ) {
        (move |name| dir.join(name), move |args| run(dir, args))
    }

    #[test]
    fn commits_leave_out_tracked_runtime_files_even_when_staged() {
        let Some((dir, repo)) = repo() else { return };
        let ralph = dir.path().join(RALPH_DIR);
        std::fs::create_dir_all(&ralph).unwrap();
        let history = ralph.join(RUNTIME_FILES[1]);
        std::fs::write(&history, "{}\n").unwrap();
        let git = |args: &[&str]| {
            let output = git(dir.path(), args).unwrap();
            assert!(output.status.success(), "{args:?}: {output:?}");
            String::from_utf8_lossy(&output.stdout).into_owned()
        };
        git(&[
            "add",
            "-f",
            "--",
            &format!("{RALPH_DIR}/{}", RUNTIME_FILES[1]),
        ]);
        // Only a staged runtime file: nothing to commit, and it is unstaged.
        assert_eq!(
            repo.commit_all("one", &mut Tree::default(), &mut BTreeSet::new()),
            Ok(None),
            "{}",
            git(&["status", "--porcelain"])
        );
        assert!(git(&["diff", "--cached", "--name-only"]).is_empty());
        std::fs::write(dir.path().join("a.txt"), "changed\n").unwrap();
        git(&[
            "add",
            "-f",
            "--",
            &format!("{RALPH_DIR}/{}", RUNTIME_FILES[1]),
        ]);
        let mut tree = Tree::default();
        let hash = repo
            .commit_all("two", &mut tree, &mut BTreeSet::new())
            .unwrap()
            .unwrap();
        assert_eq!(hash, git(&["rev-parse", "--short=7", "HEAD"]).trim());
        assert_eq!(
            git(&["show", "--name-only", "--format=", "HEAD"]),
            "a.txt\n"
        );
        assert_eq!(
            repo.commit_all("three", &mut tree, &mut BTreeSet::new()),
            Ok(None)
        );
    }

    #[test]
    fn the_users_changes_from_before_the_loop_are_never_committed() {
        let Some((dir, repo)) = repo() else { return };
        let (path, git) = helpers(dir.path());
        std::fs::write(path("b.txt"), "the user's edit\n").unwrap();
        std::fs::write(path("secrets.env"), "KEY=1\n").unwrap();
        let mut tree = Tree::default();
        let mut left_out = repo.uncommitted(&repo.scan(&mut tree).unwrap());
        assert_eq!(Vec::from_iter(left_out.clone()), ["b.txt", "secrets.env"]);
        // The agent's work, and an edit of a file the user had changed.
        std::fs::write(path("a.txt"), "agent\n").unwrap();
        std::fs::create_dir_all(path("new")).unwrap();
        std::fs::write(path("new/work.txt"), "work\n").unwrap();
        std::fs::write(path("b.txt"), "the user's edit, and the agent's\n").unwrap();
        repo.scan(&mut tree);
        assert!(
            repo.commit_all("work", &mut tree, &mut left_out)
                .unwrap()
                .is_some()
        );
        assert_eq!(
            git(&["show", "--name-only", "--format=", "HEAD"]),
            "a.txt\nnew/work.txt\n"
        );
        assert_eq!(
            git(&["status", "--porcelain"]),
            " M b.txt\n?? secrets.env\n"
        );
        assert_eq!(left_out.len(), 2);
        // What is kept is what a new scan sees: the next iteration starts from it.
        let kept = repo.current(&mut tree).unwrap();
        assert_eq!(
            repo.changed_files(&kept, &repo.snapshot().unwrap()),
            Vec::<String>::new()
        );
        // Only a left-out file changed: nothing to commit.
        std::fs::write(path("secrets.env"), "KEY=2\n").unwrap();
        repo.scan(&mut tree);
        assert_eq!(
            repo.commit_all("nothing", &mut tree, &mut left_out),
            Ok(None)
        );
    }

    #[test]
    fn a_staged_change_left_out_stays_staged_and_out_of_the_commit() {
        let Some((dir, repo)) = repo() else { return };
        let (path, git) = helpers(dir.path());
        std::fs::write(path("b.txt"), "staged by the user\n").unwrap();
        git(&["add", "b.txt"]);
        let mut tree = Tree::default();
        let mut left_out = repo.uncommitted(&repo.scan(&mut tree).unwrap());
        std::fs::write(path("a.txt"), "agent\n").unwrap();
        std::fs::write(path("c.txt"), "agent\n").unwrap();
        git(&["add", "c.txt"]);
        repo.scan(&mut tree);
        assert!(
            repo.commit_all("work", &mut tree, &mut left_out)
                .unwrap()
                .is_some()
        );
        assert_eq!(
            git(&["show", "--name-only", "--format=", "HEAD"]),
            "a.txt\nc.txt\n"
        );
        assert_eq!(git(&["status", "--porcelain"]), "M  b.txt\n");
        assert_eq!(
            repo.commit_all("nothing", &mut tree, &mut left_out),
            Ok(None)
        );
        // Without a scan, the same holds.
        std::fs::write(path("a.txt"), "agent again\n").unwrap();
        assert!(
            repo.commit_everything("fallback", &left_out)
                .unwrap()
                .is_some()
        );
        assert_eq!(
            git(&["show", "--name-only", "--format=", "HEAD"]),
            "a.txt\n"
        );
        assert_eq!(git(&["status", "--porcelain"]), "M  b.txt\n");
    }

    #[test]
    fn without_a_scan_the_changes_left_out_are_not_staged() {
        let Some((dir, repo)) = repo() else { return };
        let (path, git) = helpers(dir.path());
        std::fs::write(path("b.txt"), "the user's\n").unwrap();
        std::fs::write(path("a.txt"), "agent\n").unwrap();
        let left_out = BTreeSet::from(["b.txt".to_owned()]);
        assert!(
            repo.commit_everything("fallback", &left_out)
                .unwrap()
                .is_some()
        );
        assert_eq!(
            git(&["show", "--name-only", "--format=", "HEAD"]),
            "a.txt\n"
        );
        assert_eq!(git(&["status", "--porcelain"]), " M b.txt\n");
        assert_eq!(repo.commit_everything("nothing", &left_out), Ok(None));
    }

    #[test]
    fn a_path_left_out_that_the_user_commits_is_the_agents_afterwards() {
        let Some((dir, repo)) = repo() else { return };
        let (path, git) = helpers(dir.path());
        std::fs::write(path("b.txt"), "the user's\n").unwrap();
        let mut tree = Tree::default();
        let mut left_out = repo.uncommitted(&repo.scan(&mut tree).unwrap());
        git(&["commit", "-q", "-am", "by the user"]);
        // At the next commit, b.txt is clean: it leaves the set.
        std::fs::write(path("a.txt"), "the agent's\n").unwrap();
        repo.scan(&mut tree);
        assert!(
            repo.commit_all("work", &mut tree, &mut left_out)
                .unwrap()
                .is_some()
        );
        assert!(left_out.is_empty());
        std::fs::write(path("b.txt"), "the agent's\n").unwrap();
        repo.scan(&mut tree);
        assert!(
            repo.commit_all("more", &mut tree, &mut left_out)
                .unwrap()
                .is_some()
        );
        assert_eq!(
            git(&["show", "--name-only", "--format=", "HEAD"]),
            "b.txt\n"
        );
    }
}
