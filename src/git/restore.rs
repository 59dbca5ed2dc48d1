//! Putting paths back as a commit has them: what the agent changed of the protected paths
//! (`--protect`) leaves the work tree and the index before anything is committed.

use super::{Repo, check};

impl Repo {
    /// Puts `paths` (repository-relative) back as `commit` has them, in the index and the work
    /// tree: checked out from it, or removed when it has no such path (the agent made it).
    pub(crate) fn restore(&self, commit: &str, paths: &[String]) -> Result<(), String> {
        if paths.is_empty() {
            return Ok(());
        }
        let mut list = vec!["--literal-pathspecs", "ls-tree", "-r", "-z", "--name-only"];
        list.extend([commit, "--"]);
        list.extend(paths.iter().map(String::as_str));
        let listed = check(self.run(&list), "git ls-tree")?;
        let known: std::collections::HashSet<&[u8]> = listed
            .stdout
            .split(|&b| b == 0)
            .filter(|name| !name.is_empty())
            .collect();
        let (back, made): (Vec<&String>, Vec<&String>) = paths
            .iter()
            .partition(|path| known.contains(path.as_bytes()));
        if !back.is_empty() {
            let mut checkout = vec!["--literal-pathspecs", "checkout", commit, "--"];
            checkout.extend(back.iter().map(|path| path.as_str()));
            check(self.run(&checkout), "git checkout")?;
        }
        for path in made {
            let forget = [
                "--literal-pathspecs",
                "rm",
                "--cached",
                "-q",
                "--ignore-unmatch",
                "--",
            ];
            let mut forget = forget.to_vec();
            forget.push(path);
            check(self.run(&forget), "git rm --cached")?;
            match std::fs::remove_file(self.root().join(path)) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                    return Err(format!("could not remove {path}: {err}"));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// One hash of `files` (repository-relative) as the work tree has them: each one's blob id
    /// and path, a line each, hashed as one object; none when git cannot say.
    pub(crate) fn files_hash(&self, files: &[String]) -> Option<String> {
        let mut paths = Vec::new();
        for file in files {
            paths.extend_from_slice(file.as_bytes());
            paths.push(b'\n');
        }
        let blobs = self
            .run_with_input(&["hash-object", "--stdin-paths"], &paths)
            .ok()
            .filter(|output| output.status.success())?;
        let blobs = String::from_utf8_lossy(&blobs.stdout);
        let listing: String = (blobs.lines().zip(files))
            .map(|(blob, file)| format!("{blob} {file}\n"))
            .collect();
        let hashed = self
            .run_with_input(&["hash-object", "--stdin"], listing.as_bytes())
            .ok()
            .filter(|output| output.status.success())?;
        Some(String::from_utf8_lossy(&hashed.stdout).trim().to_owned())
    }

    /// Every file of the work tree git knows or would add: tracked, and untracked but not
    /// ignored (repository-relative).
    pub(crate) fn files(&self) -> Vec<String> {
        let list = [
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ];
        let Ok(output) = check(self.run(&list), "git ls-files") else {
            return Vec::new();
        };
        (output.stdout.split(|&b| b == 0))
            .filter(|name| !name.is_empty())
            .map(|name| String::from_utf8_lossy(name).into_owned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::git;

    #[test]
    fn changed_deleted_and_new_paths_are_put_back_as_the_commit_has_them() {
        let dir = crate::testing::tempdir().unwrap();
        let path = dir.path();
        if !git(path, &["init", "-q", "-b", "main"]) {
            return;
        }
        std::fs::create_dir_all(path.join("tests")).unwrap();
        std::fs::write(path.join("tests/a.txt"), "expected 1\n").unwrap();
        std::fs::write(path.join("tests/b.txt"), "b\n").unwrap();
        assert!(git(path, &["add", "-A"]));
        assert!(git(path, &["commit", "-q", "-m", "tests"]));
        let repo = crate::git::Repo::discover(path).unwrap();
        let head = repo.head_oid().unwrap();
        std::fs::write(path.join("tests/a.txt"), "expected 2\n").unwrap();
        std::fs::remove_file(path.join("tests/b.txt")).unwrap();
        std::fs::write(path.join("tests/new.txt"), "mine\n").unwrap();
        assert!(git(path, &["add", "tests/new.txt", "tests/a.txt"]));
        let paths = ["tests/a.txt", "tests/b.txt", "tests/new.txt"].map(str::to_owned);
        repo.restore(&head, &paths).unwrap();
        assert_eq!(
            std::fs::read_to_string(path.join("tests/a.txt")).unwrap(),
            "expected 1\n"
        );
        assert_eq!(
            std::fs::read_to_string(path.join("tests/b.txt")).unwrap(),
            "b\n"
        );
        assert!(!path.join("tests/new.txt").exists());
        // Nothing is left staged or changed.
        let status = std::process::Command::new("git")
            .args(["status", "--porcelain"])
            .current_dir(path)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&status.stdout), "");
    }
}
