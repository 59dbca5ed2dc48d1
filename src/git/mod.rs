//! Thin wrappers over the `git` CLI: what the agent changed, and the auto-commit.
//!
//! A snapshot costs one git process, `git status --porcelain=v2 -z --branch
//! --untracked-files=all`, which names HEAD and every path that differs from it. Only those paths
//! are fingerprinted, in-process (length and a keyed 128-bit hash of the content, plus the
//! executable bit): never a process per file, never a read of a clean file. Comparing two
//! snapshots finds every path whose content or mode changed, or that appeared or disappeared, plus
//! whatever the agent committed itself in between. An auto-commit costs `git add -A`,
//! `git diff --cached --name-only`, `git commit` and `git rev-parse --short HEAD` (and a
//! `git reset` only when a tracked runtime file got staged). Outside a git repository (or without
//! git) snapshots are empty and nothing fails.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::hash::{BuildHasher as _, Hasher as _};
use std::io::Read as _;
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::storage::{RALPH_DIR, RUNTIME_FILES};

mod remote;
mod worktree;

pub(crate) use remote::{Claim, Pushed, SeenClaim, Update, claim_ref};
pub(crate) use worktree::Merge;

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
}

/// Content fingerprints of the paths that differ from HEAD, and HEAD itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    head: Option<String>,
    files: HashMap<String, String>,
}

/// What `git status --porcelain=v2 --branch` reports.
#[derive(Debug, Default, PartialEq, Eq)]
struct Status {
    head: Option<String>,
    /// Every path named (for renames and copies, both names), as git spelled it.
    paths: Vec<OsString>,
}

impl Repo {
    /// The repository around `cwd`, or `None` outside one (or when git is missing).
    pub(crate) fn discover(cwd: &Path) -> Option<Self> {
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
            keys: [RandomState::new(), RandomState::new()],
        })
    }

    /// The top of the work tree.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The working directory relative to the top, with a trailing `/` (or empty).
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Takes a snapshot of the work tree; `None` if `git status` fails (then nothing can be
    /// said about what changed).
    pub(crate) fn snapshot(&self) -> Option<Snapshot> {
        let output = self
            .run(&[
                "status",
                "--porcelain=v2",
                "-z",
                "--branch",
                "--no-ahead-behind",
                "--untracked-files=all",
            ])
            .ok()
            .filter(|output| output.status.success())?;
        let status = parse_status(&output.stdout);
        Some(Snapshot {
            head: status.head,
            files: self.fingerprints(status.paths),
        })
    }

    /// Paths changed between two snapshots, sorted.
    pub(crate) fn changed_files(&self, before: &Snapshot, after: &Snapshot) -> Vec<String> {
        let mut changed = BTreeSet::new();
        for (path, fingerprint) in &after.files {
            if before.files.get(path) != Some(fingerprint) {
                changed.insert(path.clone());
            }
        }
        for path in before.files.keys() {
            if !after.files.contains_key(path) {
                changed.insert(path.clone());
            }
        }
        if let (Some(old), Some(new)) = (&before.head, &after.head)
            && old != new
            && let Ok(output) = self.run(&["diff", "--name-only", "-z", old, new])
        {
            for path in output.stdout.split(|&b| b == 0).filter(|p| !p.is_empty()) {
                let path = String::from_utf8_lossy(path).into_owned();
                if !self.is_runtime_file(&path) {
                    changed.insert(path);
                }
            }
        }
        changed.into_iter().collect()
    }

    /// Stages everything except ralph's runtime files and commits it.
    ///
    /// `Ok(None)` when there was nothing to commit; `Err` carries git's explanation.
    pub(crate) fn commit_all(&self, message: &str) -> Result<Option<String>, String> {
        check(self.run(&["add", "-A", "--", ":/"]), "git add")?;
        let staged = check(
            self.run(&["diff", "--cached", "--name-only", "-z", "--no-renames"]),
            "git diff --cached",
        )?;
        let mut to_commit = 0;
        let mut staged_runtime = Vec::new();
        for path in staged.stdout.split(|&b| b == 0).filter(|p| !p.is_empty()) {
            match self.runtime_name(&String::from_utf8_lossy(path)) {
                Some(name) if RUNTIME_FILES.contains(&name) => staged_runtime.push(name.to_owned()),
                _ => to_commit += 1,
            }
        }
        if !staged_runtime.is_empty() {
            // The runtime files are git-ignored, but a user may have committed them once, and
            // then `add -A` stages them: unstage exactly those.
            let paths = self.runtime_pathspecs(&staged_runtime);
            let mut reset = vec!["reset", "-q", "--"];
            reset.extend(paths.iter().map(String::as_str));
            check(self.run(&reset), "git reset")?;
        }
        if to_commit == 0 {
            return Ok(None);
        }
        self.commit(&["-m", message]).map(Some)
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
        let specs: Vec<String> = self
            .existing(paths)
            .into_iter()
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
        check(self.run_owned(&with(&["add", "-A", "--"])), "git add")?;
        let mut args = vec!["-m", message, "--"];
        args.extend(specs.iter().map(String::as_str));
        // Usually there is something to commit: git is asked whether there was only when the
        // commit fails (one process fewer in the common case).
        match self.commit(&args) {
            Ok(hash) => Ok(Some(hash)),
            Err(why) => {
                let unchanged = self
                    .run_owned(&with(&["diff", "--cached", "--quiet", "--"]))
                    .is_ok_and(|diff| diff.status.success());
                if unchanged { Ok(None) } else { Err(why) }
            }
        }
    }

    /// Whether a merge is under way (`MERGE_HEAD` exists).
    pub(crate) fn merging(&self) -> bool {
        self.git_dir.join("MERGE_HEAD").exists()
    }

    /// Runs `git commit ARGS` and returns the new commit's abbreviated hash, read from the
    /// summary line git prints (`[main 1a2b3c4] subject`; asked of git only if it is not there).
    /// One process instead of two per commit.
    fn commit(&self, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["commit"];
        all.extend_from_slice(args);
        let output = check(self.run(&all), "git commit")?;
        let summary = String::from_utf8_lossy(&output.stdout);
        let hash = summary_hash(&summary);
        match hash {
            Some(hash) => Ok(hash.to_owned()),
            None => self.short_head(),
        }
    }

    /// The abbreviated hash of HEAD.
    fn short_head(&self) -> Result<String, String> {
        let hash = check(self.run(&["rev-parse", "--short", "HEAD"]), "git rev-parse")?;
        Ok(String::from_utf8_lossy(&hash.stdout).trim().to_owned())
    }

    /// The subject line of HEAD's commit (`None` before the first commit).
    pub(crate) fn head_subject(&self) -> Option<String> {
        let output = self.run(&["log", "-1", "--format=%s"]).ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
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

    /// Literal, top-anchored pathspecs of ralph's files named `names`.
    fn runtime_pathspecs(&self, names: &[String]) -> Vec<String> {
        names
            .iter()
            .map(|name| format!(":(top,literal){}{RALPH_DIR}/{name}", self.prefix))
            .collect()
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

    /// A fingerprint per path: a content hash for files, a marker for the rest.
    fn fingerprints(&self, paths: Vec<OsString>) -> HashMap<String, String> {
        let mut files = HashMap::with_capacity(paths.len());
        let mut buffer = Vec::new();
        for raw in paths {
            let path = OsStr::from_bytes(raw.as_bytes())
                .to_string_lossy()
                .into_owned();
            if self.is_runtime_file(&path) {
                continue;
            }
            let full = self.root.join(&raw);
            let fingerprint = match std::fs::symlink_metadata(&full) {
                Err(_) => "deleted".to_owned(),
                Ok(meta) if meta.is_dir() => "directory".to_owned(),
                Ok(meta) if meta.file_type().is_symlink() => {
                    let target = std::fs::read_link(&full).unwrap_or_default();
                    format!("link:{}", target.display())
                }
                Ok(meta) if meta.is_file() => {
                    let executable = if meta.permissions().mode() & 0o111 != 0 {
                        "x"
                    } else {
                        "-"
                    };
                    match self.content_hash(&full, &mut buffer) {
                        Some(hash) => format!("file:{executable}:{hash}"),
                        // Unreadable (or vanished meanwhile): the path still counts as touched.
                        None => "unreadable".to_owned(),
                    }
                }
                // A FIFO or socket: never opened (a FIFO would block).
                Ok(_) => "special".to_owned(),
            };
            files.insert(path, fingerprint);
        }
        files
    }

    /// Length and two independently keyed SipHash values of a file's content, read once.
    fn content_hash(&self, path: &Path, buffer: &mut Vec<u8>) -> Option<String> {
        const CHUNK: usize = 64 * 1024;
        let mut file = std::fs::File::open(path).ok()?;
        buffer.resize(CHUNK, 0);
        let mut first = self.keys[0].build_hasher();
        let mut second = self.keys[1].build_hasher();
        let mut length: u64 = 0;
        loop {
            match file.read(buffer) {
                Ok(0) => break,
                Ok(n) => {
                    first.write(&buffer[..n]);
                    second.write(&buffer[..n]);
                    length += n as u64;
                }
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        Some(format!(
            "{length}:{:016x}{:016x}",
            first.finish(),
            second.finish()
        ))
    }

    fn run(&self, args: &[&str]) -> std::io::Result<Output> {
        git(&self.root, args)
    }

    fn run_owned(&self, args: &[String]) -> std::io::Result<Output> {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.run(&args)
    }
}

/// Parses `git status --porcelain=v2 -z --branch`: HEAD (absent before the first commit) and the
/// paths of every entry (for renames and copies, both names).
fn parse_status(bytes: &[u8]) -> Status {
    let mut status = Status::default();
    let mut entries = bytes.split(|&b| b == 0).filter(|entry| !entry.is_empty());
    while let Some(entry) = entries.next() {
        // Fields before the path: `1 XY sub mH mI mW hH hI path`,
        // `2 XY sub mH mI mW hH hI Xscore path<NUL>origPath`,
        // `u XY sub m1 m2 m3 mW h1 h2 h3 path`, `? path`, `! path`.
        let fields = match entry.first() {
            Some(b'#') => {
                if let Some(oid) = entry.strip_prefix(b"# branch.oid ") {
                    let oid = String::from_utf8_lossy(oid);
                    status.head = (oid != "(initial)").then(|| oid.into_owned());
                }
                continue;
            }
            Some(b'1') => 8,
            Some(b'2') => 9,
            Some(b'u') => 10,
            Some(b'?' | b'!') => 1,
            _ => continue,
        };
        let Some(path) = entry.splitn(fields + 1, |&b| b == b' ').nth(fields) else {
            continue;
        };
        status.paths.push(OsString::from_vec(path.to_vec()));
        if entry[0] == b'2'
            && let Some(original) = entries.next()
        {
            status.paths.push(OsString::from_vec(original.to_vec()));
        }
    }
    status
}

/// The abbreviated hash in `git commit`'s summary line (`[main 1a2b3c4] subject`, `[main
/// (root-commit) 1a2b3c4] …`, `[detached HEAD 1a2b3c4] …`), which comes after anything a hook
/// printed and before the file statistics.
fn summary_hash(stdout: &str) -> Option<&str> {
    stdout
        .lines()
        .rfind(|line| line.starts_with('['))
        .and_then(|line| line.strip_prefix('['))
        .and_then(|line| line.split(']').next())
        .and_then(|inside| inside.split_whitespace().last())
        .filter(|hash| hash.len() >= 4 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commit_hash_is_read_from_the_summary_line() {
        let plain = "[main 1a2b3c4] Ralph iteration 1: work in progress\n 1 file changed\n";
        assert_eq!(summary_hash(plain), Some("1a2b3c4"));
        let root = "[main (root-commit) 9f8e7d6] first\n";
        assert_eq!(summary_hash(root), Some("9f8e7d6"));
        let hooked = "[lint] all good\n[detached HEAD 0abcdef1] Ralph: merge task a\n";
        assert_eq!(summary_hash(hooked), Some("0abcdef1"));
        assert_eq!(summary_hash("[lint] ok\n"), None);
        assert_eq!(summary_hash(""), None);
    }

    fn names(status: &Status) -> Vec<String> {
        status
            .paths
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn status_parsing_handles_renames_spaces_and_unicode() {
        let raw = b"# branch.oid 1d4cc74b11f5ca45a2f55986fe3914ea7d5a817a\0# branch.head main\0\
2 R. N... 100644 100644 100644 975fbec8 975fbec8 R100 new name.txt\0old \"name\".txt\0\
? dir/sub/\xc3\xa9t\xc3\xa9.md\0\
1 .M N... 100644 100644 100644 b6802534 b6802534 a b\0\
u UU N... 100644 100644 100644 100644 aa bb cc conflict.txt\0";
        let status = parse_status(raw);
        assert_eq!(
            status.head.as_deref(),
            Some("1d4cc74b11f5ca45a2f55986fe3914ea7d5a817a")
        );
        assert_eq!(
            names(&status),
            [
                "new name.txt",
                "old \"name\".txt",
                "dir/sub/été.md",
                "a b",
                "conflict.txt"
            ]
        );
    }

    #[test]
    fn status_parsing_knows_an_unborn_branch() {
        let status = parse_status(b"# branch.oid (initial)\0# branch.head main\0? x\0");
        assert_eq!(status.head, None);
        assert_eq!(names(&status), ["x"]);
    }

    /// A repository with one commit of `a.txt` and `b.txt`, or `None` without git.
    fn repo() -> Option<(tempfile::TempDir, Repo)> {
        let dir = tempfile::tempdir().unwrap();
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
    fn a_second_edit_of_a_modified_file_a_mode_change_and_a_new_file_are_changes() {
        let Some((dir, repo)) = repo() else { return };
        let path = |name: &str| dir.path().join(name);
        std::fs::write(path("a.txt"), "a2\n").unwrap();
        std::fs::write(path("b.txt"), "b2\n").unwrap();
        std::fs::write(path("new\nline.txt"), "n\n").unwrap();
        let before = repo.snapshot().unwrap();
        assert!(before.head.is_some());
        assert_eq!(
            repo.changed_files(&before, &repo.snapshot().unwrap()),
            Vec::<String>::new()
        );
        std::fs::write(path("a.txt"), "a3\n").unwrap();
        std::fs::set_permissions(path("b.txt"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(path("new\nline.txt"), "n2\n").unwrap();
        std::fs::create_dir_all(path("x/y")).unwrap();
        std::fs::write(path("x/y/z.txt"), "z\n").unwrap();
        let after = repo.snapshot().unwrap();
        assert_eq!(
            repo.changed_files(&before, &after),
            ["a.txt", "b.txt", "new\nline.txt", "x/y/z.txt"]
        );
        // Rewriting the same content is no change.
        std::fs::write(path("a.txt"), "a3\n").unwrap();
        assert_eq!(
            repo.changed_files(&after, &repo.snapshot().unwrap()),
            Vec::<String>::new()
        );
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
            repo.commit_all("one"),
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
        let hash = repo.commit_all("two").unwrap().unwrap();
        assert!(!hash.is_empty());
        assert_eq!(
            git(&["show", "--name-only", "--format=", "HEAD"]),
            "a.txt\n"
        );
        assert_eq!(repo.commit_all("three"), Ok(None));
    }
}
