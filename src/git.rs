//! Thin wrappers over the `git` CLI: what the agent changed, and the auto-commit.
//!
//! A snapshot costs one `git status --porcelain=v1 -z --untracked-files=all`, one batched
//! `git hash-object --stdin-paths` over the paths git reports as changed or untracked, and one
//! `git rev-parse HEAD` — never a process per file, and never a hash of clean files. Comparing two
//! snapshots finds every path whose content changed, appeared or disappeared, plus whatever the
//! agent committed itself in between. Outside a git repository (or without git) snapshots are
//! empty and nothing fails.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::storage::{RALPH_DIR, RUNTIME_FILES};

/// The repository that contains ralph's working directory.
#[derive(Clone, Debug)]
pub(crate) struct Repo {
    /// The top of the work tree.
    root: PathBuf,
    /// The working directory relative to `root`, with a trailing `/` (or empty).
    prefix: String,
}

/// Content fingerprints of the paths that differ from HEAD, and HEAD itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    head: Option<String>,
    files: HashMap<String, String>,
}

impl Repo {
    /// The repository around `cwd`, or `None` outside one (or when git is missing).
    pub(crate) fn discover(cwd: &Path) -> Option<Self> {
        let output = git(cwd, &["rev-parse", "--show-toplevel", "--show-prefix"]).ok()?;
        if !output.status.success() {
            return None;
        }
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let mut lines = text.lines();
        let root = PathBuf::from(lines.next()?);
        let prefix = lines.next().unwrap_or("").to_owned();
        Some(Self { root, prefix })
    }

    /// The top of the work tree.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Takes a snapshot of the work tree; `None` if `git status` fails (then nothing can be
    /// said about what changed).
    pub(crate) fn snapshot(&self) -> Option<Snapshot> {
        let head = self.head();
        let output = self
            .run(&["status", "--porcelain=v1", "-z", "--untracked-files=all"])
            .ok()
            .filter(|output| output.status.success())?;
        let paths: Vec<String> = parse_status(&output.stdout)
            .into_iter()
            .filter(|path| !self.is_runtime_file(path))
            .collect();
        Some(Snapshot {
            head,
            files: self.fingerprints(paths),
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
        // The runtime files are git-ignored, but a user may have committed them once: unstage
        // any that `add -A` picked up. (Without HEAD nothing can be tracked yet.)
        if self.head().is_some() {
            let mut reset: Vec<String> = vec!["reset".into(), "-q".into(), "--".into()];
            for name in RUNTIME_FILES {
                reset.push(format!(":(top){}{RALPH_DIR}/{name}", self.prefix));
            }
            let reset: Vec<&str> = reset.iter().map(String::as_str).collect();
            check(self.run(&reset), "git reset")?;
        }
        let staged = self
            .run(&["diff", "--cached", "--quiet"])
            .map_err(|err| err.to_string())?;
        if staged.status.success() {
            return Ok(None);
        }
        check(self.run(&["commit", "-q", "-m", message]), "git commit")?;
        let hash = check(self.run(&["rev-parse", "--short", "HEAD"]), "git rev-parse")?;
        Ok(Some(
            String::from_utf8_lossy(&hash.stdout).trim().to_owned(),
        ))
    }

    fn head(&self) -> Option<String> {
        let output = self.run(&["rev-parse", "-q", "--verify", "HEAD"]).ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    fn is_runtime_file(&self, path: &str) -> bool {
        let Some(rest) = path
            .strip_prefix(self.prefix.as_str())
            .and_then(|rest| rest.strip_prefix(RALPH_DIR))
            .and_then(|rest| rest.strip_prefix('/'))
        else {
            return false;
        };
        RUNTIME_FILES.contains(&rest) || rest.starts_with(".tmp") || rest.ends_with(".corrupt")
    }

    /// A fingerprint per path: the blob hash for files, a marker for the rest.
    fn fingerprints(&self, paths: Vec<String>) -> HashMap<String, String> {
        let mut files = HashMap::with_capacity(paths.len());
        let mut to_hash = Vec::new();
        for path in paths {
            let full = self.root.join(&path);
            match std::fs::symlink_metadata(&full) {
                Err(_) => {
                    files.insert(path, "deleted".to_owned());
                }
                Ok(meta) if meta.is_dir() => {
                    files.insert(path, "directory".to_owned());
                }
                Ok(meta) if meta.file_type().is_symlink() => {
                    let target = std::fs::read_link(&full).unwrap_or_default();
                    files.insert(path, format!("link:{}", target.display()));
                }
                Ok(meta) if path.contains('\n') => {
                    // `--stdin-paths` is line-based; fall back to size and mtime.
                    let mtime = meta
                        .modified()
                        .ok()
                        .map(|t| format!("{t:?}"))
                        .unwrap_or_default();
                    files.insert(path, format!("meta:{}:{mtime}", meta.len()));
                }
                Ok(_) => to_hash.push(path),
            }
        }
        if to_hash.is_empty() {
            return files;
        }
        let mut input = Vec::new();
        for path in &to_hash {
            input.extend_from_slice(path.as_bytes());
            input.push(b'\n');
        }
        let hashes = self
            .run_with_input(&["hash-object", "--no-filters", "--stdin-paths"], &input)
            .ok()
            .filter(|output| output.status.success())
            .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
            .unwrap_or_default();
        let mut lines = hashes.lines();
        for path in to_hash {
            // If git failed (a file vanished meanwhile), the path still counts as touched.
            let hash = lines.next().unwrap_or("unreadable").to_owned();
            files.insert(path, hash);
        }
        files
    }

    fn run(&self, args: &[&str]) -> std::io::Result<Output> {
        git(&self.root, args)
    }

    fn run_with_input(&self, args: &[&str], input: &[u8]) -> std::io::Result<Output> {
        let mut child = git_command(&self.root, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let input = input.to_vec();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let output = child.wait_with_output();
        let _ = writer.join();
        output
    }
}

/// Paths named by `git status --porcelain=v1 -z` (for renames and copies, both names).
fn parse_status(bytes: &[u8]) -> Vec<String> {
    let mut paths = Vec::new();
    let mut entries = bytes.split(|&b| b == 0).filter(|entry| !entry.is_empty());
    while let Some(entry) = entries.next() {
        if entry.len() < 4 {
            continue;
        }
        let status = &entry[..2];
        paths.push(path_string(&entry[3..]));
        if (status[0] == b'R' || status[0] == b'C')
            && let Some(original) = entries.next()
        {
            paths.push(path_string(original));
        }
    }
    paths
}

fn path_string(bytes: &[u8]) -> String {
    OsStr::from_bytes(bytes).to_string_lossy().into_owned()
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
    fn status_parsing_handles_renames_spaces_and_unicode() {
        let raw = b"R  new name.txt\0old \"name\".txt\0?? dir/sub/\xc3\xa9t\xc3\xa9.md\0 M a\0";
        assert_eq!(
            parse_status(raw),
            ["new name.txt", "old \"name\".txt", "dir/sub/été.md", "a"]
        );
    }
}
