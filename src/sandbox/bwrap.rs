//! What a sandbox mounts, planned once per loop, and the bwrap argv that mounts it. The order
//! matters: a later mount covers an earlier one, and bwrap cannot make a mount point inside a
//! read-only mount, so the read-only system comes first, the private folders next, then what the
//! agent may write, then what must stay read-only inside that.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::mounts::{self, Mode};
use super::{Net, Place, Settings};

/// The agent's own state folders and files under `$HOME` (credentials, sessions): writable, so a
/// refreshed login survives.
const AGENT_STATE: &[&str] = &[
    ".claude",
    ".claude.json",
    ".codex",
    ".config/opencode",
    ".local/share/opencode",
    ".local/state/opencode",
    ".gemini",
    ".qwen",
    ".pi",
    ".copilot",
    ".factory",
];

/// Toolchains under `$HOME`: readable, never writable.
const TOOLCHAINS: &[&str] = &[
    ".cargo/bin",
    ".rustup",
    ".nvm",
    ".pyenv",
    ".local/bin",
    ".bun",
    ".deno",
];

/// Secrets readable by root even without capabilities: masked under root.
const ROOT_MASKS: &[&str] = &["/etc/shadow", "/etc/gshadow"];

/// ralph's files the agent may change in its tree's `.ralph/`.
const AGENT_WRITES: &[&str] = &["progress.md", "ralph-tasks.md"];

/// One mount, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Mount {
    /// `--ro-bind` (or `--bind` when writable) of a host path at the same place.
    Bind { path: PathBuf, writable: bool },
    /// `--ro-bind /dev/null PATH`: the path is there, empty.
    Mask(PathBuf),
    /// A private, empty, writable folder.
    Tmpfs(PathBuf),
    /// A folder of ralph's (a private cache) mounted at another place.
    BindAt { from: PathBuf, to: PathBuf },
}

/// Everything a loop's sandboxes mount, in order, and where the agent starts.
#[derive(Clone, Debug)]
pub(crate) struct Mounts {
    pub(super) list: Vec<Mount>,
    pub(super) work: PathBuf,
    pub(super) home: PathBuf,
}

impl Mounts {
    /// The mounts for `place`. Creates what must exist to be mounted (ralph's two files, the
    /// private cache, an empty hooks folder).
    pub(super) fn plan(options: &Settings, place: &Place<'_>, root: bool) -> Result<Self, String> {
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
        let mut list = home_mounts(place, &home, root)?;
        // ralph itself (the bridge runs it inside), wherever it is installed.
        if let Ok(exe) = std::env::current_exe() {
            list.push(bind(exe, false));
        }
        list.push(bind(place.work.to_owned(), true));
        if let Some(git_dir) = &place.git_dir {
            if !git_dir.starts_with(place.work) {
                list.push(bind(git_dir.clone(), true));
            }
            // What the host's git runs later stays as the user left it: an empty hooks folder
            // is made so that none can be added.
            let hooks = git_dir.join("hooks");
            let _ = std::fs::create_dir_all(&hooks);
            for path in [git_dir.join("config"), hooks, git_dir.join("info")] {
                if path.exists() {
                    list.push(bind(path, false));
                }
            }
        }
        if let Some(hooks) = place.hooks_path.as_ref().filter(|p| p.exists()) {
            list.push(bind(hooks.clone(), false));
        }
        list.extend(ralph_mounts(&place.ralph, place.agent)?);
        if place.agent {
            // The agent's tool server writes its questions where `ralph --answer` finds them,
            // and an agent given a home of ralph's writes its own files there.
            for name in [
                crate::storage::questions::QUESTIONS_DIR,
                crate::storage::agent_home::AGENT_HOMES_DIR,
            ] {
                let folder = place.home.join(name);
                created(&folder, std::fs::create_dir_all(&folder))?;
                list.push(bind(folder, true));
            }
        }
        // What the agent may read but not change: read-only within its writable tree.
        if let Ok(Some(protection)) = crate::protect::Protection::new(&options.protect, &[]) {
            list.extend(
                protection
                    .roots(place.work)
                    .into_iter()
                    .map(|root| bind(root, false)),
            );
        }
        for (path, mode) in mounts::parse_all(&options.mount)? {
            list.push(bind(path, mode == Mode::Rw));
        }
        if place.agent && !options.holdout.is_empty() {
            list.extend(holdout_masks(&options.holdout, place, &home));
        } else {
            // The checks' own sandbox has their files, wherever they are.
            let named = holdout_paths(&options.holdout, &home);
            list.extend(named.into_iter().map(|path| bind(path, false)));
        }
        Ok(Self {
            list,
            work: place.work.to_owned(),
            home,
        })
    }

    /// bwrap's arguments, up to the `--` before the command: `vars` the environment inside,
    /// `sockets` (host path → path inside) bound in, `extra` further arguments (a usage file).
    pub(super) fn argv(
        &self,
        net: Net,
        vars: &BTreeMap<String, OsString>,
        sockets: &[(PathBuf, PathBuf)],
        extra: impl IntoIterator<Item = OsString>,
    ) -> Vec<OsString> {
        let mut argv: Vec<OsString> = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
            .into_iter()
            .map(OsString::from)
            .collect();
        let mut push =
            |words: &[&std::ffi::OsStr]| argv.extend(words.iter().map(|w| (*w).to_owned()));
        for mount in &self.list {
            match mount {
                Mount::Bind { path, writable } => {
                    let how = if *writable { "--bind" } else { "--ro-bind" };
                    push(&[how.as_ref(), path.as_os_str(), path.as_os_str()]);
                }
                // A file masked only when there (ralph's records are made as the loop goes).
                Mount::Mask(path) if path.exists() => {
                    push(&["--ro-bind".as_ref(), "/dev/null".as_ref(), path.as_os_str()]);
                }
                Mount::Mask(_) => {}
                Mount::Tmpfs(path) => push(&["--tmpfs".as_ref(), path.as_os_str()]),
                Mount::BindAt { from, to } => {
                    push(&["--bind".as_ref(), from.as_os_str(), to.as_os_str()])
                }
            }
        }
        for (host, inside) in sockets {
            push(&["--bind".as_ref(), host.as_os_str(), inside.as_os_str()]);
        }
        argv.extend(extra);
        argv.extend(
            [
                "--unshare-all",
                "--cap-drop",
                "ALL",
                "--die-with-parent",
                "--new-session",
                "--clearenv",
            ]
            .map(OsString::from),
        );
        if net == Net::Full {
            argv.push("--share-net".into());
        }
        for (name, value) in vars {
            argv.extend([
                OsString::from("--setenv"),
                OsString::from(name),
                value.clone(),
            ]);
        }
        argv.extend([
            OsString::from("--chdir"),
            self.work.clone().into_os_string(),
        ]);
        argv
    }
}

fn bind(path: PathBuf, writable: bool) -> Mount {
    Mount::Bind { path, writable }
}

fn created(path: &Path, made: std::io::Result<()>) -> Result<(), String> {
    made.map_err(|err| format!("creating {} failed: {err}", path.display()))
}

/// The private folders, the masks under root, the agent's state and the toolchains under
/// `$HOME`, and the private cache.
fn home_mounts(place: &Place<'_>, home: &Path, root: bool) -> Result<Vec<Mount>, String> {
    let mut list = vec![
        Mount::Tmpfs("/tmp".into()),
        Mount::Tmpfs("/run".into()),
        Mount::Tmpfs(home.to_owned()),
    ];
    if root {
        let masks = ROOT_MASKS.iter().filter(|p| Path::new(p).exists());
        list.extend(masks.map(|p| Mount::Mask(p.into())));
    }
    for (names, writable) in [(TOOLCHAINS, false), (AGENT_STATE, true)] {
        for name in names {
            let path = home.join(name);
            if path.exists() {
                list.push(bind(path, writable));
            }
        }
    }
    let cache = place.home.join("sandbox").join("cache");
    created(&cache, std::fs::create_dir_all(&cache))?;
    list.push(Mount::BindAt {
        from: cache,
        to: home.join(".cache"),
    });
    Ok(list)
}

/// What an agent must not read when there are holdout checks: the files and folders their
/// commands name (absolute, or under `~/`), and ralph's records of their results (the history,
/// its summary, the event journal) in the loop's `.ralph/` and the run's.
fn holdout_masks(commands: &[String], place: &Place<'_>, home: &Path) -> Vec<Mount> {
    let mut list = Vec::new();
    for dir in [place.ralph.as_path(), place.home] {
        for name in [
            crate::storage::HISTORY_FILE,
            crate::storage::history::summary::SUMMARY_FILE,
            crate::storage::JOURNAL_FILE,
            crate::storage::OLD_JOURNAL_FILE,
        ] {
            list.push(Mount::Mask(dir.join(name)));
        }
    }
    for path in holdout_paths(commands, home) {
        if path.is_dir() {
            list.push(Mount::Tmpfs(path));
        } else {
            list.push(Mount::Mask(path));
        }
    }
    list
}

/// The existing files and folders holdout commands name: absolute, or under `~/`.
fn holdout_paths(commands: &[String], home: &Path) -> Vec<PathBuf> {
    let words = commands
        .iter()
        .flat_map(|command| command.split_whitespace());
    words
        .map(|word| word.trim_matches(['\'', '"']))
        .map(|word| match word.strip_prefix("~/") {
            Some(rest) => home.join(rest),
            None => PathBuf::from(word),
        })
        .filter(|path| path.is_absolute() && path != Path::new("/") && path.exists())
        .collect()
}

/// The loop's `.ralph/`, read-only but, for an `agent`, the two files it writes (made when
/// missing).
fn ralph_mounts(ralph: &Path, agent: bool) -> Result<Vec<Mount>, String> {
    let ralph = ralph.to_owned();
    if !agent {
        return Ok(if ralph.exists() {
            vec![bind(ralph, false)]
        } else {
            vec![]
        });
    }
    created(&ralph, std::fs::create_dir_all(&ralph))?;
    let mut list = vec![bind(ralph.clone(), false)];
    for name in AGENT_WRITES {
        let path = ralph.join(name);
        if !path.exists() {
            created(&path, std::fs::write(&path, b""))?;
        }
        list.push(bind(path, true));
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(root: bool) -> (tempfile::TempDir, Mounts) {
        let tmp = crate::testing::tempdir().unwrap();
        let work = tmp.path().join("work");
        let git_dir = work.join(".git");
        std::fs::create_dir_all(git_dir.join("hooks")).unwrap();
        std::fs::write(git_dir.join("config"), "").unwrap();
        let home = work.join(".ralph");
        let place = Place {
            work: &work,
            git_dir: Some(git_dir),
            hooks_path: None,
            home: &home,
            ralph: home.clone(),
            agent: true,
        };
        let mounts = Mounts::plan(&Settings::default(), &place, root).unwrap();
        (tmp, mounts)
    }

    #[test]
    fn a_sandbox_for_hooks_or_checks_adds_no_file_to_the_tree() {
        let tmp = crate::testing::tempdir().unwrap();
        let work = tmp.path().join("integrate");
        std::fs::create_dir_all(work.join(".ralph")).unwrap();
        let place = Place {
            work: &work,
            git_dir: None,
            hooks_path: None,
            home: tmp.path(),
            ralph: work.join(".ralph"),
            agent: false,
        };
        let mounts = Mounts::plan(&Settings::default(), &place, false).unwrap();
        let entries = std::fs::read_dir(work.join(".ralph")).unwrap().count();
        assert_eq!(
            entries, 0,
            "no progress.md or task list made: a merge would trip on them"
        );
        let ralph = bind(work.join(".ralph"), false);
        assert!(mounts.list.contains(&ralph), "{:?}", mounts.list);
        assert!(!mounts.list.iter().any(|m| matches!(m, Mount::Bind { writable: true, path } if path.starts_with(work.join(".ralph")))));
    }

    fn words(argv: &[OsString]) -> Vec<String> {
        argv.iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_system_is_read_only_and_the_work_tree_writable_with_ralphs_files_and_gits_locked() {
        let (tmp, mounts) = planned(false);
        let argv = words(&mounts.argv(Net::None, &BTreeMap::new(), &[], []));
        let at = |needle: &[&str]| {
            argv.windows(needle.len())
                .position(|w| w == needle)
                .unwrap_or_else(|| panic!("{needle:?} in {argv:?}"))
        };
        let work = tmp.path().join("work");
        let w = |rest: &str| {
            let path = if rest.is_empty() {
                work.clone()
            } else {
                work.join(rest)
            };
            path.to_string_lossy().into_owned()
        };
        let root = at(&["--ro-bind", "/", "/"]);
        let tmpfs = at(&["--tmpfs", "/tmp"]);
        let tree = at(&["--bind", &w(""), &w("")]);
        let config = at(&["--ro-bind", &w(".git/config"), &w(".git/config")]);
        let hooks = at(&["--ro-bind", &w(".git/hooks"), &w(".git/hooks")]);
        let ralph = at(&["--ro-bind", &w(".ralph"), &w(".ralph")]);
        let progress = at(&["--bind", &w(".ralph/progress.md"), &w(".ralph/progress.md")]);
        assert!(root < tmpfs && tmpfs < tree && tree < config && config < hooks);
        assert!(
            tree < ralph && ralph < progress,
            "ralph's two files are writable again after .ralph"
        );
        for flag in [
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
        ] {
            assert!(argv.contains(&flag.to_owned()), "{flag}");
        }
        at(&["--cap-drop", "ALL"]);
        assert!(!argv.contains(&"--share-net".to_owned()));
        assert!(
            !argv.contains(&"/etc/shadow".to_owned()),
            "no mask when not root"
        );
        assert_eq!(argv[argv.len() - 2..], ["--chdir".to_owned(), w("")]);
    }

    #[test]
    fn under_root_the_secrets_root_can_read_are_masked_after_the_system() {
        let (_tmp, mounts) = planned(true);
        let argv = words(&mounts.argv(Net::Full, &BTreeMap::new(), &[], []));
        if Path::new("/etc/shadow").exists() {
            let mask = argv
                .windows(3)
                .position(|w| w == ["--ro-bind", "/dev/null", "/etc/shadow"]);
            assert!(mask.is_some(), "{argv:?}");
        }
        assert!(argv.contains(&"--share-net".to_owned()));
    }
}
