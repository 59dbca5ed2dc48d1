//! Everything ralph keeps under `.ralph/`: file names, atomic writes, and tolerant reads.
//!
//! Every file ralph rewrites goes through [`write_atomic`] (temporary file in the same directory,
//! fsync, rename), so a reader — another terminal running `ralph --status`, or ralph after a crash —
//! sees either the old or the new file, never half of one. The one exception is the progress log,
//! which is only ever appended to, with one `O_APPEND` write per section, so the agent's own notes
//! in it are never overwritten (at a task's merge the base's log is written whole, with the
//! branch's notes after what it had: see [`carry`]). Reads never fail on a missing, empty or
//! corrupt file: they report what they found and let the caller decide (warn, keep a copy aside,
//! or treat the file as absent). Nothing here prints.

pub(crate) mod agent_home;
pub(crate) mod carry;
pub(crate) mod context;
pub(crate) mod history;
pub(crate) mod identity;
pub(crate) mod import;
pub(crate) mod lock;
pub(crate) mod logs;
pub(crate) mod progress;
pub(crate) mod questions;
pub(crate) mod state;
pub(crate) mod tasks;

use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The directory, relative to the working directory, that holds ralph's files.
pub(crate) const RALPH_DIR: &str = ".ralph";
/// Loop state: which iteration runs, with which options (camelCase JSON).
pub(crate) const STATE_FILE: &str = "ralph-loop.state.json";
/// Per-iteration history and struggle indicators (snake_case JSON).
pub(crate) const HISTORY_FILE: &str = "ralph-history.json";
/// Context waiting to be injected into the next iteration's prompt (markdown).
pub(crate) const CONTEXT_FILE: &str = "ralph-context.md";
/// The task list for tasks mode (markdown, committed with the work).
pub(crate) const TASKS_FILE: &str = "ralph-tasks.md";
/// OpenCode configuration generated for `--allow-all` / `--no-plugins`.
pub(crate) const OPENCODE_CONFIG_FILE: &str = "ralph-opencode.config.json";
/// Cline's MCP settings with ralph's tools, written for each of its iterations.
pub(crate) const CLINE_MCP_FILE: &str = "ralph-cline.mcp.json";
/// Held with an OS lock by the running loop, so two loops cannot share a directory.
pub(crate) const LOCK_FILE: &str = "ralph.lock";
/// Serialises edits of the context file between the loop and `--add-context`.
pub(crate) const CONTEXT_LOCK_FILE: &str = "ralph-context.lock";
/// Serialises every edit of the task file: `--add-task`, `--remove-task` and the loop's marks.
pub(crate) const TASKS_LOCK_FILE: &str = "ralph-tasks.lock";
/// Keeps ralph's runtime files out of git (`git status`, `git add -A`, auto-commits).
pub(crate) const GITIGNORE_FILE: &str = ".gitignore";
/// The event journal (`src/journal.rs`), and the journal before its last rotation.
pub(crate) const JOURNAL_FILE: &str = "events.jsonl";
pub(crate) const OLD_JOURNAL_FILE: &str = "events.1.jsonl";
/// Held while the journal is rotated.
pub(crate) const JOURNAL_LOCK_FILE: &str = "events.lock";
/// `--serve`'s token.
pub(crate) const SERVE_TOKEN_FILE: &str = "serve.token";
/// The prompt a plan was made from (and `--refine`'s choice), under `.ralph/`: a `--parallel` or
/// `--tasks` run given no prompt runs with it.
pub(crate) const PLANNED_PROMPT_FILE: &str = "prompt.md";

/// What a run `ralph --mcp` started printed, and its prompt.
pub(crate) const MCP_RUN_LOG: &str = "mcp-run.log";
pub(crate) const MCP_PROMPT_FILE: &str = "mcp-prompt.md";

/// Files ralph rewrites while it runs; never committed, never counted as the agent's changes.
pub(crate) const RUNTIME_FILES: [&str; 17] = [
    STATE_FILE,
    HISTORY_FILE,
    history::summary::SUMMARY_FILE,
    CONTEXT_FILE,
    context::GIVEN_FILE,
    OPENCODE_CONFIG_FILE,
    CLINE_MCP_FILE,
    LOCK_FILE,
    CONTEXT_LOCK_FILE,
    TASKS_LOCK_FILE,
    identity::TASK_FILE,
    JOURNAL_FILE,
    OLD_JOURNAL_FILE,
    JOURNAL_LOCK_FILE,
    SERVE_TOKEN_FILE,
    MCP_RUN_LOG,
    MCP_PROMPT_FILE,
];

/// ralph's files that are committed with the work: the progress log, the task file and the
/// `.gitignore` that keeps the runtime files out.
pub(crate) const OWN_FILES: [&str; 3] = [progress::PROGRESS_FILE, TASKS_FILE, GITIGNORE_FILE];

/// Paths of everything under `.ralph/` for one working directory.
#[derive(Clone, Debug)]
pub(crate) struct RalphDir {
    root: PathBuf,
}

impl RalphDir {
    /// The `.ralph/` directory below `cwd` (not created until something is written).
    pub(crate) fn new(cwd: &Path) -> Self {
        Self {
            root: cwd.join(RALPH_DIR),
        }
    }

    /// The `.ralph/` directory that is `root` itself.
    pub(crate) fn at(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
        }
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    pub(crate) fn state(&self) -> PathBuf {
        self.file(STATE_FILE)
    }

    pub(crate) fn history(&self) -> PathBuf {
        self.file(HISTORY_FILE)
    }

    pub(crate) fn context(&self) -> PathBuf {
        self.file(CONTEXT_FILE)
    }

    pub(crate) fn tasks(&self) -> PathBuf {
        self.file(TASKS_FILE)
    }

    pub(crate) fn lock(&self) -> PathBuf {
        self.file(LOCK_FILE)
    }

    /// The worktree of parallel task `id`: `.ralph/worktrees/<id>`.
    pub(crate) fn worktree(&self, id: &str) -> PathBuf {
        self.root.join(WORKTREES_DIR).join(id)
    }

    /// The temporary worktree where merges into the base are made:
    /// `.ralph/worktrees/.integrate`.
    pub(crate) fn integration_worktree(&self) -> PathBuf {
        self.worktree(".integrate")
    }

    /// A scratch file or folder beside the integration worktree
    /// (`.ralph/worktrees/.integrate.<what>`), removed with it when a run ends.
    pub(crate) fn integration_scratch(&self, what: &str) -> PathBuf {
        self.worktree(&format!(".integrate.{what}"))
    }

    /// The scratch paths (`integration_scratch`) a run killed mid-merge may have left.
    pub(crate) fn integration_scratches(&self) -> Vec<PathBuf> {
        (std::fs::read_dir(self.root.join(WORKTREES_DIR)).into_iter())
            .flatten()
            .flatten()
            .filter(|entry| {
                entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(".integrate.")
            })
            .map(|entry| entry.path())
            .collect()
    }

    /// The record of a merge being landed on the base (`.ralph/worktrees/.landing.json`), so a
    /// landing a kill cut off is finished at the next start.
    pub(crate) fn landing(&self) -> PathBuf {
        self.worktree(".landing.json")
    }

    /// The iteration logs: `.ralph/logs/`.
    pub(crate) fn logs(&self) -> PathBuf {
        self.root.join(logs::LOGS_DIR)
    }

    /// Makes sure `.ralph/.gitignore` keeps the worktrees and the logs out of git (a file
    /// written by an older ralph lacks the lines).
    pub(crate) fn ignore_own_dirs(&self) -> anyhow::Result<()> {
        self.ensure()?;
        let path = self.file(GITIGNORE_FILE);
        let mut content = read_raw(&path)?.unwrap_or_default();
        // Files a newer ralph writes are added to an older `.gitignore`.
        let missing: Vec<&str> = (RUNTIME_FILES.into_iter())
            .chain(OWN_DIRS_IGNORE)
            .filter(|line| {
                !content
                    .split(|&b| b == b'\n')
                    .any(|have| have == line.as_bytes())
            })
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if !content.is_empty() && !content.ends_with(b"\n") {
            content.push(b'\n');
        }
        for line in missing {
            content.extend_from_slice(line.as_bytes());
            content.push(b'\n');
        }
        write_atomic_shared(&path, &content)
    }

    /// Creates `.ralph/` (mode 0700) and its `.gitignore` for the runtime files, if missing.
    pub(crate) fn ensure(&self) -> anyhow::Result<()> {
        if !self.root.is_dir() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.root)
                .with_context(|| format!("failed to create `{}`", self.root.display()))?;
        }
        let ignore = self.file(GITIGNORE_FILE);
        if !ignore.exists() {
            write_atomic_shared(&ignore, gitignore_contents().as_bytes())?;
        }
        Ok(())
    }
}

fn gitignore_contents() -> String {
    let mut text = String::from(
        "# Written by ralph: its runtime files change every iteration and are never committed.\n",
    );
    for name in RUNTIME_FILES {
        text.push_str(name);
        text.push('\n');
    }
    text.push_str("*.corrupt\n.tmp*\n");
    for line in OWN_DIRS_IGNORE {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// The worktrees of parallel tasks, under `.ralph/` (never committed).
pub(crate) const WORKTREES_DIR: &str = "worktrees";
/// What ralph keeps under `.ralph/` and never commits: worktrees, iteration logs, the report, a
/// plan an agent is writing, a plan that was refused, the agents' questions and the homes ralph
/// gives agents.
pub(crate) const OWN_DIRS_IGNORE: [&str; 9] = [
    "/worktrees/",
    "/questions/",
    "/agent-homes/",
    "/sandbox/",
    "/logs/",
    "/report.html",
    "/plan.json",
    "/plan-rejected.json",
    "/prompt.md",
];

/// For `skip_serializing_if`: a count that is zero is left out of the file.
pub(crate) fn is_zero(count: &u32) -> bool {
    *count == 0
}

/// Replaces `path` with `contents` atomically; a new file gets mode 0600 (ralph's runtime files
/// are private), an existing one keeps its mode. A write-protected file (no owner write
/// permission) is refused, not replaced.
pub(crate) fn write_atomic(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    write_atomic_new_mode(path, contents, 0o600)
}

/// [`write_atomic`] for a file committed with the work (the task list, `.ralph/.gitignore`): a
/// new one gets mode 0644, as any file of the project.
pub(crate) fn write_atomic_shared(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    write_atomic_new_mode(path, contents, 0o644)
}

/// [`write_atomic`] without the fsync, for a file ralph can do without (the history's summary:
/// readers check it against the history and read the history when it does not match). Every
/// iteration then costs one synced write less.
pub(crate) fn write_atomic_unsynced(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    write_atomic_with(path, contents, 0o600, false)
}

fn write_atomic_new_mode(path: &Path, contents: &[u8], new_mode: u32) -> anyhow::Result<()> {
    write_atomic_with(path, contents, new_mode, true)
}

fn write_atomic_with(
    path: &Path,
    contents: &[u8],
    new_mode: u32,
    sync: bool,
) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .with_context(|| format!("`{}` has no parent directory", path.display()))?;
    // A file that exists keeps its mode (the task file is the user's).
    let mode = fs::metadata(path).map_or(new_mode, |meta| meta.permissions().mode() & 0o777);
    if mode & 0o200 == 0 {
        anyhow::bail!(
            "`{}` is write-protected, so ralph leaves it as it is; make it writable (chmod u+w) to let ralph change it",
            path.display()
        );
    }
    // What a merge is made of is turned into git objects and its folder removed at once: after
    // a power loss the merge simply was not made.
    let sync = sync && !in_merge_scratch(dir);
    let mut temp = tempfile::Builder::new()
        .prefix(".tmp")
        .permissions(fs::Permissions::from_mode(mode))
        .tempfile_in(dir)
        .map_err(os_reason)
        .with_context(|| format!("failed to create a temporary file in `{}`", dir.display()))?;
    temp.write_all(contents)
        .and_then(|()| {
            if sync {
                temp.as_file().sync_all()
            } else {
                Ok(())
            }
        })
        .with_context(|| format!("failed to write `{}`", path.display()))?;
    temp.persist(path)
        .map_err(|err| err.error)
        .with_context(|| format!("failed to replace `{}`", path.display()))?;
    Ok(())
}

/// Whether `dir` is in the folder a merge is made in (`.ralph/worktrees/.integrate`, or its
/// scratch `.integrate.<what>`).
fn in_merge_scratch(dir: &Path) -> bool {
    let parts: Vec<&std::ffi::OsStr> = dir.ancestors().filter_map(Path::file_name).collect();
    (parts.windows(3)).any(|window| {
        let (name, worktrees, ralph) = (window[0].to_string_lossy(), window[1], window[2]);
        (name == ".integrate" || name.starts_with(".integrate."))
            && worktrees == WORKTREES_DIR
            && ralph == RALPH_DIR
    })
}

/// The OS's reason for an error of the `tempfile` crate, without the path it adds (the
/// temporary file's, which means nothing to anyone).
fn os_reason(err: io::Error) -> io::Error {
    let text = err.to_string();
    match text.split_once(" at path ") {
        Some((reason, _)) => io::Error::new(err.kind(), reason.to_owned()),
        None => err,
    }
}

/// Writes `value` as pretty JSON (2-space indent) with a trailing newline.
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    write_atomic(path, &pretty_json(value)?)
}

/// [`write_json`] without the fsync: for a record that only matters while the machine stays up
/// (after a power loss, the agent whose process group it names is gone anyway).
pub(crate) fn write_json_unsynced<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    write_atomic_unsynced(path, &pretty_json(value)?)
}

/// [`write_json`], unless the file already holds exactly that (a file written every iteration
/// with the same contents, like the agent's generated configuration).
pub(crate) fn write_json_if_changed<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let bytes = pretty_json(value)?;
    if fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    write_atomic(path, &bytes)
}

fn pretty_json<T: Serialize>(value: &T) -> anyhow::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// What reading a ralph file found.
#[derive(Debug)]
pub(crate) enum Loaded<T> {
    /// The file does not exist (or is empty).
    Missing,
    /// The file parsed.
    Found(T),
    /// The file exists but could not be read or parsed; the reason is for the user.
    Corrupt(String),
}

impl<T> Loaded<T> {
    /// The value, treating a corrupt file as absent.
    pub(crate) fn ok(self) -> Option<T> {
        match self {
            Self::Found(value) => Some(value),
            Self::Missing | Self::Corrupt(_) => None,
        }
    }
}

/// Reads and parses a JSON file without ever failing.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Loaded<T> {
    match read_bytes(path) {
        Loaded::Found(bytes) => parse_json(&bytes),
        Loaded::Missing => Loaded::Missing,
        Loaded::Corrupt(reason) => Loaded::Corrupt(reason),
    }
}

/// A file's bytes; a missing or blank file is `Missing`, an unreadable one `Corrupt`.
pub(crate) fn read_bytes(path: &Path) -> Loaded<Vec<u8>> {
    match fs::read(path) {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Loaded::Missing,
        Ok(bytes) => Loaded::Found(bytes),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Loaded::Missing,
        Err(err) => Loaded::Corrupt(format!("cannot read it: {err}")),
    }
}

/// Parses JSON (possibly borrowing from `bytes`), with the reason a person reads when it fails.
pub(crate) fn parse_json<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Loaded<T> {
    match serde_json::from_slice(bytes) {
        Ok(value) => Loaded::Found(value),
        Err(err) => Loaded::Corrupt(format!("it is not valid: {err}")),
    }
}

/// Copies a corrupt file to `<file>.corrupt` before ralph replaces it, and returns the copy's path.
pub(crate) fn keep_corrupt_copy(path: &Path) -> anyhow::Result<PathBuf> {
    let mut name = path.as_os_str().to_owned();
    name.push(".corrupt");
    let copy = PathBuf::from(name);
    fs::copy(path, &copy).with_context(|| {
        format!(
            "failed to keep a copy of `{}` at `{}`",
            path.display(),
            copy.display()
        )
    })?;
    Ok(copy)
}

/// Reads a file's bytes; `Ok(None)` when it does not exist.
pub(crate) fn read_raw(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

/// Reads a text file (invalid UTF-8 shown as U+FFFD); `Ok(None)` when it does not exist.
pub(crate) fn read_text(path: &Path) -> io::Result<Option<String>> {
    Ok(read_raw(path)?.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
}

/// Removes a file; a file that is already gone is not an error.
pub(crate) fn remove_file(path: &Path) -> anyhow::Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err).with_context(|| format!("failed to remove `{}`", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_a_merge_is_made_of_is_written_without_a_sync() {
        let dir = RalphDir::new(Path::new("/repo"));
        for scratch in [dir.integration_scratch("own"), dir.integration_worktree()] {
            assert!(
                in_merge_scratch(&scratch.join(".ralph")),
                "{}",
                scratch.display()
            );
            assert!(in_merge_scratch(&scratch.join("sub/.ralph")));
        }
        for kept in [dir.root().to_path_buf(), dir.worktree("t1").join(".ralph")] {
            assert!(!in_merge_scratch(&kept), "{}", kept.display());
        }
        // A folder of the project named so is not ralph's.
        assert!(!in_merge_scratch(Path::new(
            "/repo/worktrees/.integrate.x/a"
        )));
    }

    #[test]
    fn an_atomic_write_that_cannot_start_names_no_temporary_file() {
        let dir = crate::testing::tempdir().unwrap();
        let error = write_atomic(&dir.path().join("nodir/x.html"), b"x").unwrap_err();
        let text = format!("{error:#}");
        assert!(text.contains("No such file or directory"), "{text}");
        assert!(!text.contains("at path"), "{text}");
    }

    #[test]
    fn atomic_write_creates_private_files_and_replaces_content() {
        let dir = crate::testing::tempdir().unwrap();
        let path = dir.path().join("x.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let leftovers: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary files are left behind");
    }

    #[test]
    fn read_json_tells_missing_empty_and_corrupt_apart() {
        let dir = crate::testing::tempdir().unwrap();
        let path = dir.path().join("x.json");
        assert!(matches!(
            read_json::<serde_json::Value>(&path),
            Loaded::Missing
        ));
        fs::write(&path, "  \n").unwrap();
        assert!(matches!(
            read_json::<serde_json::Value>(&path),
            Loaded::Missing
        ));
        fs::write(&path, "{not json").unwrap();
        assert!(matches!(
            read_json::<serde_json::Value>(&path),
            Loaded::Corrupt(_)
        ));
        fs::write(&path, "{\"a\": 1}").unwrap();
        assert!(matches!(
            read_json::<serde_json::Value>(&path),
            Loaded::Found(_)
        ));
    }

    #[test]
    fn ensure_creates_a_private_directory_with_a_gitignore() {
        let dir = crate::testing::tempdir().unwrap();
        let ralph = RalphDir::new(dir.path());
        ralph.ensure().unwrap();
        let mode = fs::metadata(ralph.root()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let ignore = fs::read_to_string(ralph.file(GITIGNORE_FILE)).unwrap();
        assert!(ignore.contains(STATE_FILE) && !ignore.contains(TASKS_FILE));
    }
}
