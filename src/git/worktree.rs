//! Worktrees, branches and merges for parallel tasks: each task works in its own worktree on its
//! own branch, and finished branches are merged into the base one at a time.

use std::path::{Path, PathBuf};

use super::{Repo, check, refs};

/// A file at a revision, as [`Repo::files_at`] read it.
pub(crate) type FileAt = Result<Option<Vec<u8>>, String>;

/// How merging a task's branch into the base went.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Merge {
    /// Merged and committed: the merge commit's short hash.
    Done(String),
    /// Real conflicts (files other than ralph's own): the merge was undone; the files named.
    Conflict(Vec<String>),
}

impl Repo {
    /// The branch checked out in this work tree (`None` on a detached HEAD).
    pub(crate) fn current_branch(&self) -> Option<String> {
        if let Some(read) = self.head_branch() {
            return read;
        }
        let output = self
            .run(&["symbolic-ref", "--quiet", "--short", "HEAD"])
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
            .filter(|name| !name.is_empty())
    }

    /// The paths with uncommitted changes (tracked or not, ignored files aside) outside `except`.
    pub(crate) fn dirty_paths(&self, except: &[&str]) -> Result<Vec<String>, String> {
        let output = check(
            self.run(&["status", "--porcelain", "-z", "--untracked-files=all"]),
            "git status",
        )?;
        Ok(output
            .stdout
            .split(|&b| b == 0)
            .filter(|entry| entry.len() > 3)
            .map(|entry| String::from_utf8_lossy(&entry[3..]).into_owned())
            .filter(|path| {
                !except
                    .iter()
                    .any(|own| path == own || path.starts_with(own))
            })
            .collect())
    }

    /// Undoes a merge that was cut off (ralph killed while it merged) of a branch named
    /// `prefix…` (any merge with an empty prefix); a merge of anything else is the user's and is
    /// left alone. `true` when undone.
    pub(crate) fn abort_unfinished_merge(&self, prefix: &str) -> bool {
        if !self.merging() {
            return false;
        }
        let ours = prefix.is_empty() || self.merging_branch(prefix);
        if ours {
            let _ = self.run_unpiped(&["merge", "--abort"]);
        }
        ours
    }

    /// Puts `paths` (repository-relative) back as HEAD has them; a path HEAD does not have is
    /// left alone.
    pub(crate) fn restore_from_head(&self, paths: &[&str]) {
        for path in paths {
            let _ = self.run(&["checkout", "-q", "HEAD", "--", path]);
        }
    }

    /// The files a merge left in conflict here: unmerged in the index, whether `MERGE_HEAD` is
    /// there or not (a merge killed before it wrote it leaves them too); empty otherwise.
    pub(crate) fn unfinished_merge_conflicts(&self) -> Vec<String> {
        self.unmerged_paths().unwrap_or_default()
    }

    /// Creates (or, when its branch exists, reuses) the worktree of a task at `path` on
    /// `branch`, starting from `base`. Returns the worktree's top directory.
    pub(crate) fn add_worktree(
        &self,
        path: &Path,
        branch: &str,
        base: &str,
    ) -> Result<PathBuf, String> {
        let shown = path.to_string_lossy().into_owned();
        if path.join(".git").exists() {
            return Ok(path.to_owned());
        }
        let args: Vec<&str> = if self.has_branch(branch) {
            vec!["worktree", "add", "-q", &shown, branch]
        } else {
            vec!["worktree", "add", "-q", "-b", branch, &shown, base]
        };
        self.add_worktree_pruned(&args)?;
        Ok(path.to_owned())
    }

    /// Checks out, in the worktree at `path`, the submodules the base has checked out, at the
    /// commits the worktree's tree names: cloned from the base's own checkouts, so no network is
    /// needed. `Ok(n)`: how many; `Err`: why they could not be (the worktree then lacks them).
    pub(crate) fn init_submodules(&self, path: &Path) -> Result<usize, String> {
        if !self.root.join(".gitmodules").exists() {
            return Ok(0);
        }
        let status = check(self.run(&["submodule", "status"]), "git submodule status")?;
        // ` sha path (…)` or `+sha path …`: checked out here; `-sha path`: not initialised.
        let paths: Vec<String> = String::from_utf8_lossy(&status.stdout)
            .lines()
            .filter(|line| !line.starts_with('-'))
            .filter_map(|line| line.get(1..)?.split_whitespace().nth(1).map(str::to_owned))
            .collect();
        let worktree = Repo::linked_worktree(path)
            .ok_or_else(|| format!("{} is no git worktree", path.display()))?;
        for sub in &paths {
            // Worktrees share the repository's config: the URL is only overridden for this call.
            let url = format!("submodule.{sub}.url={}", self.root.join(sub).display());
            check(
                worktree.run(&[
                    "-c",
                    "protocol.file.allow=always",
                    "-c",
                    &url,
                    "submodule",
                    "update",
                    "--init",
                    "-q",
                    "--recursive",
                    "--",
                    sub,
                ]),
                "git submodule update",
            )?;
        }
        Ok(paths.len())
    }

    /// The submodules a task changed in its worktree at `path`: with changes or new commits
    /// there, or given another commit on `branch` since it left `base`.
    pub(crate) fn changed_submodules(&self, path: &Path, base: &str, branch: &str) -> Vec<String> {
        if !self.root.join(".gitmodules").exists() {
            return Vec::new();
        }
        let mut changed: Vec<String> = Repo::linked_worktree(path)
            .and_then(|worktree| {
                worktree
                    .run(&["status", "--porcelain=v2", "--ignore-submodules=none"])
                    .ok()
            })
            .map(|output| {
                String::from_utf8_lossy(&output.stdout)
                    .lines()
                    .filter_map(|line| {
                        // `1 XY S<c><m><u> … path`: a submodule whose commit, tracked or
                        // untracked content changed.
                        let fields: Vec<&str> = line.splitn(9, ' ').collect();
                        let sub = fields.get(2)?;
                        (fields[0] == "1" && sub.starts_with('S') && *sub != "S...")
                            .then(|| fields.get(8).map(|p| (*p).to_owned()))?
                    })
                    .collect()
            })
            .unwrap_or_default();
        let subs = self.submodule_paths();
        for path in self.changed_since(base, branch) {
            if subs.contains(&path) && !changed.contains(&path) {
                changed.push(path);
            }
        }
        changed
    }

    /// Whether the repository declares submodules (a `.gitmodules` file at its top).
    pub(crate) fn has_submodules(&self) -> bool {
        self.root.join(".gitmodules").is_file()
    }

    /// The paths of the repository's submodules (from `.gitmodules`).
    fn submodule_paths(&self) -> Vec<String> {
        self.run(&[
            "config",
            "-f",
            ".gitmodules",
            "--get-regexp",
            r"^submodule\..*\.path$",
        ])
        .ok()
        .map(|output| {
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter_map(|line| line.split_once(' ').map(|(_, path)| path.to_owned()))
                .collect()
        })
        .unwrap_or_default()
    }

    /// Runs `git worktree add ARGS`; when it fails, once more after pruning the records of
    /// worktrees whose folders are gone (one of them may hold the path or the branch).
    pub(super) fn add_worktree_pruned(&self, args: &[&str]) -> Result<(), String> {
        if check(self.run(args), "git worktree add").is_ok() {
            return Ok(());
        }
        self.prune_worktrees();
        check(self.run(args), "git worktree add").map(drop)
    }

    /// The task branches (`ralph/<id>`), each with whether HEAD has all of its work (it is
    /// merged, or has none of its own).
    pub(crate) fn task_branches(&self) -> Vec<(String, bool)> {
        if self.has_refs_under("refs/heads/ralph/") == Some(false) {
            return Vec::new();
        }
        let names = |args: &[&str]| -> Vec<String> {
            self.run(args)
                .ok()
                .filter(|output| output.status.success())
                .map(|output| {
                    String::from_utf8_lossy(&output.stdout)
                        .lines()
                        .filter_map(|line| line.trim().strip_prefix("ralph/").map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let all = names(&[
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/ralph/",
        ]);
        let merged = names(&[
            "for-each-ref",
            "--merged=HEAD",
            "--format=%(refname:short)",
            "refs/heads/ralph/",
        ]);
        all.into_iter()
            .map(|id| {
                let done = merged.contains(&id);
                (id, done)
            })
            .collect()
    }

    /// Sets a task's work aside on branch `keep`: in its worktree at `path` (when there is one)
    /// its uncommitted changes are committed there and the worktree removed; `branch` goes, so
    /// `branch` and `path` are free for a fresh start and nothing is lost.
    pub(crate) fn set_aside(&self, path: &Path, branch: &str, keep: &str) -> Result<(), String> {
        if !path.join(".git").exists() {
            return self.rename_branch(branch, keep);
        }
        let worktree = Repo::linked_worktree(path)
            .ok_or_else(|| format!("{} is no git worktree", path.display()))?;
        check(worktree.run(&["switch", "-q", "-c", keep]), "git switch")?;
        check(worktree.run(&["add", "-A"]), "git add")?;
        if !worktree
            .run(&["diff", "--cached", "--quiet"])
            .is_ok_and(|o| o.status.success())
        {
            let message = "Ralph: uncommitted work of a task, set aside";
            check(
                worktree.run(&["commit", "-q", "--no-verify", "-m", message]),
                "git commit",
            )?;
        }
        let shown = path.to_string_lossy();
        check(
            self.run(&["worktree", "remove", "--force", "--force", &shown]),
            "git worktree remove",
        )?;
        check(self.run(&["branch", "-q", "-D", branch]), "git branch -D").map(drop)
    }

    /// Records in the repository's config (`branch.<branch>.ralphTask`) the fingerprint of the
    /// task `branch` is made for; git drops it with the branch.
    pub(crate) fn set_branch_owner(&self, branch: &str, fingerprint: &str) -> Result<(), String> {
        let key = format!("branch.{branch}.ralphTask");
        check(self.run(&["config", &key, fingerprint]), "git config").map(drop)
    }

    /// The fingerprint `set_branch_owner` recorded for `branch`, if any.
    pub(crate) fn branch_owner(&self, branch: &str) -> Option<String> {
        let key = format!("branch.{branch}.ralphTask");
        let output = self.run(&["config", "--get", &key]).ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// Whether `rev` has every commit of the local branch `branch`.
    pub(crate) fn contains(&self, rev: &str, branch: &str) -> bool {
        self.is_ancestor(&format!("refs/heads/{branch}"), rev)
    }

    /// Whether commit `old` is `new` or one of its ancestors.
    pub(super) fn is_ancestor(&self, old: &str, new: &str) -> bool {
        (self.run(&["merge-base", "--is-ancestor", old, new]))
            .is_ok_and(|output| output.status.success())
    }

    /// Whether the local branch `branch` exists.
    pub(crate) fn has_branch(&self, branch: &str) -> bool {
        let name = format!("refs/heads/{branch}");
        match self.read_ref(&name) {
            refs::Read::Found(_) => return true,
            refs::Read::Absent => return false,
            refs::Read::Unknown => {}
        }
        self.run(&[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ])
        .is_ok_and(|output| output.status.success())
    }

    /// Renames branch `from` to `to` (`git branch -m`).
    pub(crate) fn rename_branch(&self, from: &str, to: &str) -> Result<(), String> {
        check(self.run(&["branch", "-q", "-m", from, to]), "git branch -m").map(drop)
    }

    /// Parks the clean worktree at `path` at `parked`, for another task to reuse: its HEAD
    /// detached (so that its branch can be merged, deleted or checked out elsewhere), then moved.
    /// Two processes, no file of the work tree touched.
    pub(crate) fn park_worktree(&self, path: &Path, parked: &Path) -> Result<(), String> {
        let head = Self::linked_worktree(path)
            .and_then(|worktree| worktree.head_oid())
            .ok_or_else(|| format!("{} has no readable HEAD", path.display()))?;
        let shown = path.to_string_lossy().into_owned();
        check(
            self.run(&["-C", &shown, "update-ref", "--no-deref", "HEAD", &head]),
            "git update-ref",
        )?;
        let to = parked.to_string_lossy().into_owned();
        check(
            self.run(&["worktree", "move", &shown, &to]),
            "git worktree move",
        )
        .map(drop)
    }

    /// Takes the parked worktree at `parked` for new work: moved to `path`, ralph's folder in it
    /// (the last task's runtime files) removed, `git checkout -q -f CHECKOUT…` over whatever the
    /// last task left (a branch, `-b BRANCH BASE`, `--detach COMMIT`), and every untracked file
    /// removed — but the ignored ones (build outputs) with `keep_ignored`. Only the files that
    /// differ between the two commits are written: far less than a new worktree's checkout.
    pub(crate) fn reuse_worktree(
        &self,
        parked: &Path,
        path: &Path,
        checkout: &[&str],
        keep_ignored: bool,
    ) -> Result<(), String> {
        let from = parked.to_string_lossy().into_owned();
        let shown = path.to_string_lossy().into_owned();
        check(
            self.run(&["worktree", "move", &from, &shown]),
            "git worktree move",
        )?;
        self.lay_over(path, checkout, keep_ignored)
    }

    /// Checks out `branch` in this work tree (`git checkout -q BRANCH`), keeping what it holds.
    pub(crate) fn check_out(&self, branch: &str) -> Result<(), String> {
        check(self.run(&["checkout", "-q", branch]), "git checkout").map(drop)
    }

    /// Lays the worktree at `path` out for new work, whatever it held: ralph's folder in it
    /// removed, `git checkout -q -f CHECKOUT…`, and every untracked file removed — but the
    /// ignored ones with `keep_ignored`.
    pub(crate) fn lay_over(
        &self,
        path: &Path,
        checkout: &[&str],
        keep_ignored: bool,
    ) -> Result<(), String> {
        let shown = path.to_string_lossy().into_owned();
        let own = path.join(&self.prefix).join(crate::storage::RALPH_DIR);
        std::fs::remove_dir_all(&own)
            .or_else(|err| match err.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(err),
            })
            .map_err(|err| format!("could not clear {}: {err}", own.display()))?;
        let mut args = vec!["-C", &shown, "checkout", "-q", "-f"];
        args.extend_from_slice(checkout);
        check(self.run(&args), "git checkout")?;
        let clean: &[&str] = if keep_ignored {
            &["-C", &shown, "clean", "-q", "-f", "-f", "-d"]
        } else {
            &["-C", &shown, "clean", "-q", "-f", "-f", "-d", "-x"]
        };
        check(self.run(clean), "git clean").map(drop)
    }

    /// Removes a task's worktree and, with `delete_branch`, its branch; `false` when git could
    /// not remove the worktree (then whatever git knows of worktrees whose folders are gone is
    /// pruned).
    pub(crate) fn remove_worktree(&self, path: &Path, branch: &str, delete_branch: bool) -> bool {
        let shown = path.to_string_lossy().into_owned();
        let removed = (self.run(&["worktree", "remove", "--force", "--force", &shown]))
            .is_ok_and(|output| output.status.success());
        if !removed {
            self.prune_worktrees();
        }
        if delete_branch {
            self.delete_branch(branch);
        }
        removed
    }

    /// Forgets the worktrees whose folders are gone (`git worktree prune`).
    pub(crate) fn prune_worktrees(&self) {
        let _ = self.run(&["worktree", "prune"]);
    }

    /// Deletes `branch` (`git branch -D`), whatever it holds.
    pub(crate) fn delete_branch(&self, branch: &str) {
        let _ = self.run(&["branch", "-q", "-D", branch]);
    }

    /// Merges `branch` into the checked-out base with a merge commit whose message is `message`.
    /// ralph's own files (`own`: the task list, the progress log) never conflict: the base's
    /// version is kept, and `finish` may change them (mark the task done) before the commit.
    /// `written`: those of them `finish` writes whole itself (their base version is not put back
    /// first).
    pub(crate) fn merge_branch(
        &self,
        branch: &str,
        message: &str,
        (own, written): (&[&str], &[&str]),
        finish: &mut dyn FnMut() -> Result<(), String>,
    ) -> Result<Merge, String> {
        let merged = self.run_unpiped(&["merge", "--no-ff", "--no-commit", "-q", branch]);
        let merged = merged.map_err(|err| format!("git merge could not run: {err}"))?;
        // A clean merge leaves nothing unmerged: git is asked only when it stopped.
        let conflicted = if merged.status.success() {
            Vec::new()
        } else {
            self.unmerged_paths()?
        };
        let real: Vec<String> = conflicted
            .iter()
            .filter(|path| !own.contains(&path.as_str()))
            .cloned()
            .collect();
        if !real.is_empty() || (!merged.status.success() && conflicted.is_empty()) {
            let _ = self.run_unpiped(&["merge", "--abort"]);
            if real.is_empty() {
                return Err(check(Ok(merged), "git merge").err().unwrap_or_default());
            }
            return Ok(Merge::Conflict(real));
        }
        let restored: Vec<&str> = (own.iter().copied())
            .filter(|path| !written.contains(path))
            .collect();
        if !restored.is_empty() {
            self.keep_base_versions(&restored);
        }
        if let Err(why) = finish() {
            let _ = self.run_unpiped(&["merge", "--abort"]);
            return Err(why);
        }
        let present = self.existing(own);
        let committed = (|| {
            if !present.is_empty() {
                let mut add = vec!["add", "-A", "--"];
                add.extend(&present);
                check(self.run(&add), "git add")?;
            }
            self.commit(&["--no-edit", "-m", message])
        })();
        match committed {
            Ok(hash) => Ok(Merge::Done(hash)),
            Err(why) => {
                let _ = self.run_unpiped(&["merge", "--abort"]);
                Err(why)
            }
        }
    }

    /// Merges the base into a task's branch (run in the task's worktree): `Ok(files)` with the
    /// conflicted files left for the agent to resolve; nothing when it merged cleanly. ralph's
    /// own files (`own`) keep the branch's version.
    pub(crate) fn merge_base_into_branch(
        &self,
        base: &str,
        own: &[&str],
    ) -> Result<Vec<String>, String> {
        let merged = self.run_unpiped(&["merge", "--no-edit", "-q", base]);
        let merged = merged.map_err(|err| format!("git merge could not run: {err}"))?;
        if merged.status.success() {
            return Ok(Vec::new());
        }
        let conflicted = self.unmerged_paths()?;
        if conflicted.is_empty() {
            return Err(check(Ok(merged), "git merge").err().unwrap_or_default());
        }
        let (mine, real): (Vec<String>, Vec<String>) = conflicted
            .into_iter()
            .partition(|path| own.contains(&path.as_str()));
        for path in &mine {
            let _ = self.run(&["checkout", "-q", "--ours", "--", path]);
            let _ = self.run(&["add", "--", path]);
        }
        if real.is_empty() {
            check(self.run(&["commit", "-q", "--no-edit"]), "git commit")?;
        }
        Ok(real)
    }

    /// The best common ancestor of commits `a` and `b` (`None` when they have none).
    pub(crate) fn merge_base(&self, a: &str, b: &str) -> Option<String> {
        let output = self.run(&["merge-base", a, b]).ok()?;
        let sha = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        (output.status.success() && !sha.is_empty()).then_some(sha)
    }

    /// The contents of files at revisions (`(rev, repository-relative path)`), read by one git
    /// process: `None` for a file (or revision) that does not exist, an error for a path that
    /// names something other than a file (a folder); git failing fails them all.
    pub(crate) fn files_at(&self, wanted: &[(&str, &str)]) -> Result<Vec<FileAt>, String> {
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let mut input = Vec::new();
        for (rev, path) in wanted {
            input.extend_from_slice(format!("{rev}:{path}\n").as_bytes());
        }
        let output = check(
            self.run_with_input(&["cat-file", "--batch"], &input),
            "git cat-file",
        )?;
        let mut rest = output.stdout.as_slice();
        let mut files = Vec::with_capacity(wanted.len());
        for (rev, _) in wanted {
            let end = memchr::memchr(b'\n', rest).ok_or("git cat-file stopped short")?;
            let header = String::from_utf8_lossy(&rest[..end]).into_owned();
            rest = &rest[end + 1..];
            // A found object is `<name> <type> <size>`; anything else (`… missing`) is not.
            let mut fields = header.rsplitn(3, ' ');
            let (size, kind) = (fields.next(), fields.next());
            let found = fields
                .next()
                .is_some_and(|name| name.bytes().all(|b| b.is_ascii_hexdigit()));
            let Some(size) = size
                .and_then(|size| size.parse::<usize>().ok())
                .filter(|_| found)
            else {
                files.push(Ok(None));
                continue;
            };
            if rest.len() < size + 1 {
                return Err("git cat-file stopped short".to_owned());
            }
            files.push(if kind == Some("blob") {
                Ok(Some(rest[..size].to_vec()))
            } else {
                Err(format!("not a file at {rev}"))
            });
            rest = &rest[size + 1..];
        }
        Ok(files)
    }

    /// The repository-relative `paths` that exist in the work tree.
    pub(super) fn existing<'p>(&self, paths: &[&'p str]) -> Vec<&'p str> {
        paths
            .iter()
            .copied()
            .filter(|path| self.root.join(path).exists())
            .collect()
    }

    fn unmerged_paths(&self) -> Result<Vec<String>, String> {
        if let Some(paths) = self.index_unmerged_paths() {
            return Ok(paths);
        }
        let output = check(
            self.run(&["diff", "--name-only", "--diff-filter=U", "-z"]),
            "git diff",
        )?;
        Ok(output
            .stdout
            .split(|&b| b == 0)
            .filter(|path| !path.is_empty())
            .map(|path| String::from_utf8_lossy(path).into_owned())
            .collect())
    }

    /// Puts back the base's version of ralph's own files during a merge (or the task
    /// branch's, for a file the base has none of).
    fn keep_base_versions(&self, paths: &[&str]) {
        let mut listing = vec!["ls-tree", "-z", "--name-only", "HEAD", "--"];
        listing.extend(paths);
        let Ok(listed) = self.run(&listing) else {
            return;
        };
        let in_base: Vec<String> = (listed.stdout.split(|&b| b == 0))
            .filter(|name| !name.is_empty())
            .map(|name| String::from_utf8_lossy(name).into_owned())
            .collect();
        let (base, theirs): (Vec<&str>, Vec<&str>) =
            (paths.iter()).partition(|path| in_base.iter().any(|name| name == *path));
        for (source, group) in [("HEAD", base), ("--theirs", theirs)] {
            if !group.is_empty() {
                let mut args = vec!["checkout", "-q", source, "--"];
                args.extend(group);
                let _ = self.run(&args);
            }
        }
    }
}
