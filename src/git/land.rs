//! Landing a merge on the checked-out branch. The merge commit is made elsewhere (in a
//! temporary worktree), so the user's work tree never holds a merge half done; landing then moves
//! the branch to it with one compare-and-swap ref update and brings the files that differ into
//! the index and the work tree. Recorded first (by the caller, in a journal), a landing cut off by
//! a kill at any moment is finished by running it again: both steps can be repeated.

use serde::{Deserialize, Serialize};

use super::{Repo, check};

/// A merge commit to land on the checked-out branch: the branch moves from `from` to `to`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Landing {
    /// The task whose merge it is (the tasks of a merge train, `a, b`).
    pub(crate) task: String,
    pub(crate) from: String,
    pub(crate) to: String,
}

/// How a landing ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Landed {
    /// The branch is at `to`, and the index and work tree have its files.
    Done,
    /// The branch is neither at `from` nor at `to` (someone else moved it): nothing was done.
    Moved,
}

/// Paths per git process, well under any limit on a command line's length.
const PATHS_PER_CALL: usize = 500;

impl Repo {
    /// Merges `commit` into the checked-out HEAD with a merge commit (`message`), ralph's own
    /// files (`own`) keeping HEAD's version (they never conflict): `false`, with nothing
    /// changed, when the merge did not go cleanly. `scratch`: a file this may write.
    pub(crate) fn merge_keeping_own(
        &self,
        commit: &str,
        message: &str,
        own: &[&str],
        scratch: &std::path::Path,
    ) -> bool {
        let rules: String = (own.iter())
            .map(|path| format!("/{path} merge=ralph-own\n"))
            .collect();
        if std::fs::write(scratch, rules).is_err() {
            return false;
        }
        let attributes = format!("core.attributesFile={}", scratch.display());
        let merged = self.run_unpiped(&[
            "-c",
            &attributes,
            "-c",
            "merge.ralph-own.driver=true",
            "merge",
            "--no-ff",
            "-q",
            "-m",
            message,
            commit,
        ]);
        let clean = merged.is_ok_and(|output| output.status.success());
        if !clean {
            let _ = self.run_unpiped(&["merge", "--abort"]);
        }
        clean
    }

    /// Lands `landing` (see the module's doc). Safe to run again after a kill cut it off.
    pub(crate) fn land(&self, landing: &Landing) -> Result<Landed, String> {
        let head = self.head_oid();
        if head.as_deref() == Some(landing.from.as_str()) {
            let why = format!("ralph: merge task {}", landing.task);
            check(
                self.run(&["update-ref", "-m", &why, "HEAD", &landing.to, &landing.from]),
                "git update-ref",
            )?;
        } else if head.as_deref() != Some(landing.to.as_str()) {
            return Ok(Landed::Moved);
        }
        self.bring_files(&landing.from, &landing.to)?;
        Ok(Landed::Done)
    }

    /// Gives the index and the work tree `to`'s version of every path that differs between
    /// `from` and `to` (a path `to` lacks is removed); every other path is left as it is.
    fn bring_files(&self, from: &str, to: &str) -> Result<(), String> {
        let diff = check(
            self.run(&["diff", "--name-status", "--no-renames", "-z", from, to]),
            "git diff",
        )?;
        let mut fields = diff.stdout.split(|&b| b == 0).filter(|f| !f.is_empty());
        let (mut present, mut gone) = (Vec::new(), Vec::new());
        while let (Some(status), Some(path)) = (fields.next(), fields.next()) {
            let path = String::from_utf8_lossy(path).into_owned();
            if status == b"D" {
                gone.push(path);
            } else {
                present.push(path);
            }
        }
        // The git children write to files, not pipes: a kill of ralph does not cut them off.
        for chunk in present.chunks(PATHS_PER_CALL) {
            let mut args = vec!["--literal-pathspecs", "checkout", "-q", to, "--"];
            args.extend(chunk.iter().map(String::as_str));
            check(self.run_unpiped(&args), "git checkout")?;
        }
        for chunk in gone.chunks(PATHS_PER_CALL) {
            let mut args = vec![
                "--literal-pathspecs",
                "rm",
                "-q",
                "--cached",
                "--ignore-unmatch",
                "--",
            ];
            args.extend(chunk.iter().map(String::as_str));
            check(self.run_unpiped(&args), "git rm")?;
            for path in chunk {
                match std::fs::remove_file(self.root.join(path)) {
                    Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                        return Err(format!("removing {path} failed: {err}"));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::repo;
    use super::*;

    /// A merge commit of the repository's HEAD with a change to `a.txt`, a new `new.txt` and
    /// `b.txt` removed, made in a worktree of its own: (its folder, from, to).
    fn merge_elsewhere(repo: &Repo) -> (tempfile::TempDir, String, String) {
        let from = repo.head_oid().unwrap();
        let run = |args: &[&str]| {
            let out = repo.run(args).unwrap();
            assert!(out.status.success(), "{args:?}: {out:?}");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        let dir = crate::testing::tempdir().unwrap();
        let path = dir.path().join("elsewhere");
        run(&["worktree", "add", "-q", "--detach", &path.to_string_lossy()]);
        let elsewhere = Repo::linked_worktree(&path).unwrap();
        std::fs::write(elsewhere.root.join("a.txt"), "merged\n").unwrap();
        std::fs::write(elsewhere.root.join("new.txt"), "new\n").unwrap();
        std::fs::remove_file(elsewhere.root.join("b.txt")).unwrap();
        let out = elsewhere.run(&["add", "-A"]).unwrap();
        assert!(out.status.success());
        let out = elsewhere.run(&["commit", "-q", "-m", "Ralph: merge task t"]);
        assert!(out.unwrap().status.success());
        (dir, from, elsewhere.head_oid().unwrap())
    }

    fn status(repo: &Repo) -> String {
        let out = repo.run(&["status", "--porcelain"]).unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn a_landing_moves_the_branch_and_brings_only_the_files_that_differ() {
        let Some((_dir, repo)) = repo() else { return };
        let (_elsewhere, from, to) = merge_elsewhere(&repo);
        // The user's own edit elsewhere stays as it is.
        std::fs::write(repo.root.join("mine.txt"), "mine\n").unwrap();
        let landing = Landing {
            task: "t".to_owned(),
            from,
            to: to.clone(),
        };
        assert_eq!(repo.land(&landing), Ok(Landed::Done));
        assert_eq!(repo.head_oid().as_deref(), Some(to.as_str()));
        let read = |name: &str| std::fs::read_to_string(repo.root.join(name)).ok();
        assert_eq!(read("a.txt").as_deref(), Some("merged\n"));
        assert_eq!(read("new.txt").as_deref(), Some("new\n"));
        assert_eq!(read("b.txt"), None);
        assert_eq!(
            status(&repo),
            "?? mine.txt\n",
            "only the user's file differs"
        );
        // Landed already: running it again changes nothing.
        assert_eq!(repo.land(&landing), Ok(Landed::Done));
        assert_eq!(status(&repo), "?? mine.txt\n");
    }

    #[test]
    fn a_landing_cut_off_after_the_ref_moved_is_finished_and_one_under_another_commit_is_not_made()
    {
        let Some((_dir, repo)) = repo() else { return };
        let (_elsewhere, from, to) = merge_elsewhere(&repo);
        let landing = Landing {
            task: "t".to_owned(),
            from: from.clone(),
            to: to.clone(),
        };
        // A kill just after the ref update: the files are still the old ones.
        assert!(repo.run(&["update-ref", "HEAD", &to, &from]).is_ok());
        assert!(!status(&repo).is_empty());
        assert_eq!(repo.land(&landing), Ok(Landed::Done));
        assert_eq!(status(&repo), "");
        // The branch moved on since: nothing is landed over it.
        let moved = Landing {
            task: "t".to_owned(),
            from: to.clone(),
            to: from,
        };
        assert!(
            repo.run(&["commit", "-q", "--allow-empty", "-m", "user"])
                .is_ok()
        );
        assert_eq!(repo.land(&moved), Ok(Landed::Moved));
        assert_ne!(repo.head_oid().as_deref(), Some(to.as_str()));
    }
}
