//! Thin wrappers over the `git` CLI: what the agent changed (`scan.rs`), ralph's commits
//! (`commit.rs`), an operation under way (`operation.rs`), worktrees and merges
//! (`worktree.rs`), remotes (`remote.rs`). Outside a git repository (or without git) snapshots
//! are empty and nothing fails.

use std::collections::hash_map::RandomState;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::storage::{OWN_DIRS_IGNORE, OWN_FILES, RALPH_DIR, RUNTIME_FILES};

mod commit;
mod discover;
mod fingerprint;
mod index;
mod land;
mod nearby;
mod operation;
mod plumbing;
mod records;
mod refs;
mod remote;
mod restore;
mod scan;
mod trees;
mod watch;
mod worktree;

pub(crate) use land::{Landed, Landing};
pub(crate) use plumbing::TreeMerge;
pub(crate) use remote::{
    CLAIMS, Claim, Job, LEDGER, Pushed, RemoteHeads, SeenClaim, Update, claim_ref, question_ref,
};
pub(crate) use scan::{Snapshot, Tree};
pub(crate) use trees::Trees;
pub(crate) use worktree::{FileAt, Merge};

/// The tree every claim commit points to (git knows the empty tree without storing it).
pub(super) const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// The refs under `prefix` of the repository whose shared git directory is `dir`, with their
/// commits, read from its files (`None` when they cannot tell).
pub(crate) fn refs_under(dir: &Path, prefix: &str) -> Option<Vec<(String, String)>> {
    refs::listed(dir, &[], prefix)
}

/// Hex digits of a commit's hash shown for it (git's shortest abbreviation).
pub(crate) const SHORT_HASH: usize = 7;

/// The repository that contains ralph's working directory.
#[derive(Clone, Debug)]
pub(crate) struct Repo {
    /// The top of the work tree.
    root: PathBuf,
    /// The working directory relative to `root`, with a trailing `/` (or empty).
    prefix: String,
    /// The work tree's git directory (`.git`, or `.git/worktrees/NAME` in a worktree).
    git_dir: PathBuf,
    /// Keys of the content fingerprints; random per process, fixed for the repository's life
    /// (snapshots are compared only within one process).
    keys: [RandomState; 2],
    /// The hooks ralph's own git commands run instead of the repository's (the same hooks, run
    /// inside the loop's sandbox), when there is a sandbox.
    hooks: Option<PathBuf>,
}

impl Repo {
    /// The linked worktree whose top is `path`, read from its `.git` file without asking git;
    /// `None` when there is none there.
    pub(crate) fn linked_worktree(path: &Path) -> Option<Self> {
        let link = std::fs::read_to_string(path.join(".git")).ok()?;
        // git writes an absolute path; a relative one is relative to the worktree.
        let git_dir = path.join(link.strip_prefix("gitdir:")?.trim());
        git_dir.join("HEAD").is_file().then(|| Self {
            root: path.to_owned(),
            prefix: String::new(),
            git_dir,
            keys: fingerprint::keys(),
            hooks: None,
        })
    }

    /// The same work tree seen from `cwd`, a folder in it (the prefix follows); `None` when
    /// `cwd` is outside it or its name is not UTF-8.
    pub(crate) fn seen_from(mut self, cwd: &Path) -> Option<Self> {
        let inside = cwd.strip_prefix(&self.root).ok()?.to_str()?;
        self.prefix = if inside.is_empty() {
            String::new()
        } else {
            format!("{}/", inside.trim_end_matches('/'))
        };
        Some(self)
    }

    /// The repository around `cwd`, or `None` outside one (or when git is missing).
    pub(crate) fn discover(cwd: &Path) -> Option<Self> {
        if let Some(found) = discover::from_files(cwd) {
            return Some(Self {
                root: found.root,
                prefix: found.prefix,
                git_dir: found.git_dir,
                keys: fingerprint::keys(),
                hooks: None,
            });
        }
        let output = git(
            cwd,
            &[
                "rev-parse",
                "--show-toplevel",
                "--show-prefix",
                "--absolute-git-dir",
            ],
        )
        .ok()?;
        if !output.status.success() {
            return None;
        }
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let mut lines = text.lines();
        let root = PathBuf::from(lines.next()?);
        let prefix = lines.next().unwrap_or("").to_owned();
        let git_dir = lines
            .next()
            .map_or_else(|| root.join(".git"), PathBuf::from);
        Some(Self {
            root,
            prefix,
            git_dir,
            keys: fingerprint::keys(),
            hooks: None,
        })
    }

    /// The git directory every work tree of the repository shares (objects, refs).
    pub(crate) fn git_common_dir(&self) -> PathBuf {
        self.common_dir()
    }

    /// The `core.hooksPath` folder, when one is set (relative to the top).
    pub(crate) fn hooks_path(&self) -> Option<PathBuf> {
        let output = self.run(&["config", "--get", "core.hooksPath"]).ok()?;
        let text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        (output.status.success() && !text.is_empty()).then(|| self.root.join(text))
    }

    /// The top of the work tree.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The working directory relative to the top, with a trailing `/` (or empty).
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether a merge is under way (`MERGE_HEAD` exists).
    pub(crate) fn merging(&self) -> bool {
        self.git_dir.join("MERGE_HEAD").exists()
    }

    /// The subject line of HEAD's commit (`None` before the first commit).
    pub(crate) fn head_subject(&self) -> Option<String> {
        let output = self.run(&["log", "-1", "--format=%s"]).ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// ralph's commits on HEAD since `since` (subjects starting `Ralph`), newest first, at most
    /// `limit`: (short hash, date, subject).
    pub(crate) fn ralph_commits(
        &self,
        since: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> Vec<(String, String, String)> {
        let since = format!("--since={}", since.to_rfc3339());
        let count = format!("--max-count={limit}");
        let Ok(output) = self.run(&[
            "log",
            &since,
            &count,
            "--grep=^Ralph",
            "--format=%h%x00%cI%x00%s",
        ]) else {
            return Vec::new();
        };
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| {
                let mut parts = line.splitn(3, '\0');
                let hash = parts.next()?.to_owned();
                let date = parts.next()?.to_owned();
                let subject = parts.next()?.to_owned();
                Some((hash, date, subject))
            })
            .collect()
    }

    /// Waits (up to `limit`) while another git process holds the index lock — the commit of a
    /// ralph that was killed may still be running its hooks. True when the index is free.
    pub(crate) fn wait_for_index(&self, limit: std::time::Duration) -> bool {
        let lock = self.git_dir.join("index.lock");
        let deadline = std::time::Instant::now() + limit;
        while lock.exists() {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        true
    }

    /// The name inside ralph's `.ralph/` directory of a repository-relative path.
    fn runtime_name<'a>(&self, path: &'a str) -> Option<&'a str> {
        path.strip_prefix(self.prefix.as_str())
            .and_then(|rest| rest.strip_prefix(RALPH_DIR))
            .and_then(|rest| rest.strip_prefix('/'))
    }

    fn is_runtime_file(&self, path: &str) -> bool {
        self.runtime_name(path).is_some_and(|rest| {
            RUNTIME_FILES.contains(&rest) || rest.starts_with(".tmp") || rest.ends_with(".corrupt")
        })
    }

    /// Whether ralph writes `path` itself: a runtime file, one of its own committed files, or
    /// anything in the folders and files its `.gitignore` keeps out (logs, worktrees, the report).
    fn is_ralphs(&self, path: &str) -> bool {
        self.is_runtime_file(path)
            || self.runtime_name(path).is_some_and(|rest| {
                let rooted = format!("/{rest}");
                OWN_FILES.contains(&rest)
                    || (OWN_DIRS_IGNORE.iter()).any(|own| match own.strip_suffix('/') {
                        Some(folder) => rooted == folder || rooted.starts_with(own),
                        None => rooted == *own,
                    })
            })
    }

    /// ralph's folders under `.ralph/` that it alone writes (logs, worktrees, the sandbox's),
    /// repository-relative.
    fn own_folders(&self) -> impl Iterator<Item = String> + '_ {
        (OWN_DIRS_IGNORE.iter())
            .filter_map(|own| own.strip_suffix('/'))
            .map(|folder| format!("{}{RALPH_DIR}{folder}", self.prefix))
    }

    /// The same repository, its git commands running the hooks in `hooks` (a folder of the
    /// loop's sandbox that runs each of the repository's hooks inside it).
    pub(crate) fn with_hooks(mut self, hooks: Option<PathBuf>) -> Self {
        self.hooks = hooks;
        self
    }

    /// `git ARGS` in the top folder, with the sandbox's hooks when there are.
    fn command(&self, args: &[&str]) -> Command {
        let Some(hooks) = &self.hooks else {
            return git_command(&self.root, args);
        };
        let setting = format!("core.hooksPath={}", hooks.display());
        let mut all = vec!["-c", setting.as_str()];
        all.extend_from_slice(args);
        git_command(&self.root, &all)
    }

    fn run(&self, args: &[&str]) -> std::io::Result<Output> {
        self.command(args).output()
    }

    fn run_with_input(&self, args: &[&str], input: &[u8]) -> std::io::Result<Output> {
        fed(self.command(args), input)
    }

    /// Runs a git command that changes the work tree or the history (a merge, its abort, a
    /// commit) with its output in files, not pipes: if ralph is killed meanwhile, git writing its last line to a closed pipe
    /// would die of SIGPIPE half way; into a file, it finishes, and what it leaves (a merge
    /// under way, with `MERGE_HEAD`) is for the next start to undo.
    pub(super) fn run_unpiped(&self, args: &[&str]) -> std::io::Result<Output> {
        use std::io::{Read as _, Seek as _};
        let mut stdout = tempfile::tempfile()?;
        let mut stderr = tempfile::tempfile()?;
        let status = self
            .command(args)
            .stdout(stdout.try_clone()?)
            .stderr(stderr.try_clone()?)
            .status()?;
        let read = |file: &mut std::fs::File| -> std::io::Result<Vec<u8>> {
            let mut bytes = Vec::new();
            file.seek(std::io::SeekFrom::Start(0))?;
            file.read_to_end(&mut bytes)?;
            Ok(bytes)
        };
        Ok(Output {
            status,
            stdout: read(&mut stdout)?,
            stderr: read(&mut stderr)?,
        })
    }

    fn run_owned(&self, args: &[String]) -> std::io::Result<Output> {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.run(&args)
    }
}

/// Runs `command` with `input` on its stdin, its output read.
fn fed(mut command: Command, input: &[u8]) -> std::io::Result<Output> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input)?;
    }
    child.wait_with_output()
}

fn git_command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("git");
    command
        .args(args)
        .current_dir(dir)
        // Read-only commands must not take the index lock the agent may need.
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null());
    command
}

fn git(dir: &Path, args: &[&str]) -> std::io::Result<Output> {
    git_command(dir, args).output()
}

fn check(result: std::io::Result<Output>, what: &str) -> Result<Output, String> {
    let output = result.map_err(|err| format!("{what} could not run: {err}"))?;
    if output.status.success() {
        return Ok(output);
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let detail = stderr
        .lines()
        .chain(stdout.lines())
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("no message")
        .to_owned();
    Err(format!("{what} failed ({detail})"))
}

/// The loops under `dir`'s `.ralph/worktrees/` (`--worktree NAME`, and parallel tasks), each by
/// name with its own home: the worktree's `.ralph/`, at the same folder of the worktree as `dir`'s
/// of the repository. `.integrate` (a `--worker`'s merges) and other dot folders are no loops.
pub(crate) fn worktree_homes(
    dir: &crate::storage::RalphDir,
) -> Vec<(String, crate::storage::RalphDir)> {
    let Ok(entries) = std::fs::read_dir(dir.root().join(crate::storage::WORKTREES_DIR)) else {
        return Vec::new();
    };
    let prefix = (dir.root().parent())
        .and_then(Repo::discover)
        .map(|repo| repo.prefix().to_owned())
        .unwrap_or_default();
    let mut homes: Vec<(String, crate::storage::RalphDir)> = (entries.flatten())
        .filter(|entry| {
            entry.path().is_dir() && !entry.file_name().to_string_lossy().starts_with('.')
        })
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let home = crate::storage::RalphDir::new(&entry.path().join(&prefix));
            (name, home)
        })
        .collect();
    homes.sort_by(|a, b| a.0.cmp(&b.0));
    homes
}

/// Where the questions asked in this repository wait: `dir` itself, then the home of each loop
/// under its worktrees ([`worktree_homes`]).
pub(crate) fn question_homes(dir: &crate::storage::RalphDir) -> Vec<crate::storage::RalphDir> {
    let mut homes = vec![dir.clone()];
    homes.extend(worktree_homes(dir).into_iter().map(|(_, home)| home));
    homes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository with one commit of `a.txt` and `b.txt`, or `None` without git.
    pub(super) fn repo() -> Option<(tempfile::TempDir, Repo)> {
        let dir = crate::testing::tempdir().unwrap();
        let run = |args: &[&str]| {
            Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output()
                .is_ok_and(|output| output.status.success())
        };
        if !run(&["init", "-q"]) {
            return None;
        }
        std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
        std::fs::write(dir.path().join("b.txt"), "b\n").unwrap();
        for (key, value) in [
            ("user.name", "t"),
            ("user.email", "t@example.invalid"),
            ("commit.gpgSign", "false"),
            ("core.hooksPath", "/dev/null"),
        ] {
            assert!(run(&["config", key, value]));
        }
        assert!(run(&["add", "-A"]) && run(&["commit", "-q", "-m", "init"]));
        let repo = Repo::discover(dir.path()).unwrap();
        Some((dir, repo))
    }

    #[test]
    fn a_linked_worktree_read_from_its_git_file_is_the_one_git_finds() {
        let Some((_dir, repo)) = repo() else { return };
        let path = repo.root.join("wt");
        assert!(
            repo.run(&["worktree", "add", "-q", "--detach", "wt"])
                .is_ok()
        );
        let read = Repo::linked_worktree(&path).unwrap();
        let found = Repo::discover(&path).unwrap();
        assert_eq!(
            (&read.root, &read.prefix, &read.git_dir),
            (&found.root, &found.prefix, &found.git_dir)
        );
        assert!(
            Repo::linked_worktree(&repo.root).is_none(),
            "not a linked worktree"
        );
        assert!(Repo::linked_worktree(&repo.root.join("gone")).is_none());
        std::fs::create_dir_all(path.join("sub/dir")).unwrap();
        let inside = read.clone().seen_from(&path.join("sub/dir")).unwrap();
        let found = Repo::discover(&path.join("sub/dir")).unwrap();
        assert_eq!((&inside.root, &inside.prefix), (&found.root, &found.prefix));
        assert!(read.seen_from(&repo.root).is_none(), "outside the worktree");
    }
}
