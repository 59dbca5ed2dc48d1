//! Finding the repository around the working directory from its files, as git would: every
//! ralph process does it first, and reading a few files costs far less than a git process. Only
//! the plain layouts are read (a `.git` folder, or a `.git` file naming the git directory of a
//! linked worktree); anything git decides by more than these files — the environment, a mount
//! point, a bare repository, a work tree set in the configuration, an owner other than the
//! user — is left to `git rev-parse`.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// Environment variables that change where git looks for the repository.
const STEERING: [&str; 5] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
];

/// What the files say of the repository around a folder.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Found {
    /// The top of the work tree (symbolic links resolved, as git gives it).
    pub(super) root: PathBuf,
    /// The folder relative to `root`, with a trailing `/` (or empty).
    pub(super) prefix: String,
    pub(super) git_dir: PathBuf,
}

/// The repository around `cwd` as its files say; `None` when they cannot tell (then git is
/// asked, outside a repository too).
pub(super) fn from_files(cwd: &Path) -> Option<Found> {
    if STEERING.iter().any(|name| std::env::var_os(name).is_some()) || config_steers() {
        return None;
    }
    let cwd = std::fs::canonicalize(cwd).ok()?;
    let euid = nix::unistd::geteuid().as_raw();
    let mut dir = cwd.as_path();
    loop {
        let here = std::fs::metadata(dir).ok()?;
        if is_git_dir(dir) {
            // A bare repository, or a folder inside a git directory.
            return None;
        }
        if let Some(git_dir) = git_dir_at(dir)? {
            let owned = here.uid() == euid && std::fs::metadata(&git_dir).ok()?.uid() == euid;
            if !owned || cwd.starts_with(&git_dir) || sets_work_tree(&git_dir)? {
                return None;
            }
            let inside = cwd.strip_prefix(dir).ok()?.to_str()?;
            let prefix = if inside.is_empty() {
                String::new()
            } else {
                format!("{inside}/")
            };
            return Some(Found {
                root: dir.to_owned(),
                prefix,
                git_dir,
            });
        }
        let parent = dir.parent()?;
        // git stops at a mount point unless told otherwise.
        if std::fs::metadata(parent).ok()?.dev() != here.dev() {
            return None;
        }
        dir = parent;
    }
}

/// The git directory `dir/.git` names: `Some(None)` when there is no `.git`, `None` when it is
/// something these files cannot settle.
fn git_dir_at(dir: &Path) -> Option<Option<PathBuf>> {
    let dot_git = dir.join(".git");
    let meta = match std::fs::symlink_metadata(&dot_git) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Some(None),
        Err(_) => return None,
    };
    let git_dir = if meta.is_dir() {
        dot_git
    } else if meta.is_file() {
        let link = std::fs::read_to_string(&dot_git).ok()?;
        let named = link.strip_prefix("gitdir:")?.trim();
        std::fs::canonicalize(dir.join(named)).ok()?
    } else {
        return None;
    };
    let head = git_dir.join("HEAD").is_file();
    let common = git_dir.join("commondir").is_file() || is_git_dir(&git_dir);
    (head && common).then_some(Some(git_dir))
}

/// Whether `dir` itself looks like a git directory (a bare repository, or `.git`).
fn is_git_dir(dir: &Path) -> bool {
    dir.join("HEAD").is_file() && dir.join("objects").is_dir() && dir.join("refs").is_dir()
}

/// Whether the repository's configuration may place the work tree elsewhere or make it bare
/// (`core.worktree`, `core.bare = true`), or includes other files that might: `None` when it
/// cannot be read.
fn sets_work_tree(git_dir: &Path) -> Option<bool> {
    let common = match std::fs::read_to_string(git_dir.join("commondir")) {
        Ok(text) => git_dir.join(text.trim_end()),
        Err(_) => git_dir.to_owned(),
    };
    let mut steers = false;
    for file in [common.join("config"), git_dir.join("config.worktree")] {
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return None,
        };
        steers |= text.lines().any(|line| {
            let line: String = (line.chars())
                .filter(|c| !c.is_whitespace())
                .flat_map(char::to_lowercase)
                .collect();
            line.starts_with("worktree") || line == "bare=true" || line.starts_with("[include")
        });
    }
    Some(steers)
}

/// Whether configuration given in the environment could set where the work tree is.
fn config_steers() -> bool {
    std::env::vars_os().any(|(name, value)| {
        let name = name.to_string_lossy();
        let value = value.to_string_lossy().to_lowercase();
        (name == "GIT_CONFIG_PARAMETERS" || name.starts_with("GIT_CONFIG_KEY_"))
            && (value.contains("core.worktree") || value.contains("core.bare"))
    })
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// What `git rev-parse` says of `cwd`: (top, prefix, git dir), or `None` outside a work tree.
    fn git_says(cwd: &Path) -> Option<Found> {
        let output = Command::new("git")
            .args([
                "rev-parse",
                "--show-toplevel",
                "--show-prefix",
                "--absolute-git-dir",
            ])
            .current_dir(cwd)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .ok()?;
        let text = String::from_utf8(output.stdout).ok()?;
        let lines: Vec<&str> = text.lines().collect();
        (output.status.success() && lines.len() == 3).then(|| Found {
            root: PathBuf::from(lines[0]),
            prefix: lines[1].to_owned(),
            git_dir: PathBuf::from(lines[2]),
        })
    }

    fn git(cwd: &Path, args: &[&str]) {
        assert!(crate::testing::git(cwd, args), "git {args:?}");
    }

    #[test]
    fn the_files_say_what_git_says_or_leave_it_to_git() {
        if Command::new("git").arg("--version").output().is_err() {
            return;
        }
        let tmp = crate::testing::tempdir().unwrap();
        let top = tmp.path().join("repo");
        let deep = top.join("a b/ç");
        std::fs::create_dir_all(&deep).unwrap();
        git(&top, &["init", "-q", "-b", "main"]);
        git(&top, &["commit", "-q", "--allow-empty", "-m", "first"]);
        git(&top, &["worktree", "add", "-q", "../linked"]);
        let linked = tmp.path().join("linked");
        std::os::unix::fs::symlink(&deep, tmp.path().join("link")).unwrap();
        for cwd in [&top, &deep, &linked, &tmp.path().join("link")] {
            let found = from_files(cwd);
            assert!(found.is_some(), "{} is read from files", cwd.display());
            assert_eq!(found, git_says(cwd), "{}", cwd.display());
        }
        // Inside the git directory, in a bare repository, with the work tree set in the
        // configuration: git decides.
        assert_eq!(from_files(&top.join(".git/refs")), None);
        git(tmp.path(), &["init", "-q", "--bare", "bare.git"]);
        assert_eq!(from_files(&tmp.path().join("bare.git")), None);
        git(&top, &["config", "core.worktree", "a b"]);
        assert_eq!(from_files(&deep), None);
    }
}
