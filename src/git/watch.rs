//! What changed in the work tree since the last look, told by the kernel: an inotify watch on
//! every folder of the work tree, so that a scan after the agent asks git only about the paths
//! the agent touched instead of the whole tree.
//!
//! Folders never watched: `.git`, a folder holding a `.git` (a submodule or a nested repository,
//! which git does not look into either), ralph's own folder (its logs are written all the time),
//! and the folders git ignores (build outputs), asked of git once when the watch starts. A folder
//! created or moved in is watched as it is seen, and named whole: what was written in it before its
//! watch began is still covered, since git is asked about the folder.
//!
//! The answer is "unknown" (the caller then scans the whole tree, and starts a new watch) when the
//! kernel's queue overflowed, a folder was moved (its watched subfolders would report under their
//! old names), or the watch could not be set up (no inotify, too many folders, the watch limit
//! reached). A touched `.gitignore` is named like any path: the caller decides whether the
//! folders to leave out changed with it.

use std::collections::BTreeSet;
use std::ffi::OsString;

/// What the watch saw since the last look.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Touched {
    /// The paths (files and folders, from the top of the work tree) that may have changed.
    Paths(BTreeSet<OsString>),
    /// The watch cannot say: scan everything.
    Unknown,
}

/// Folders beyond which a watch is not worth setting up: the whole-tree scan is used instead.
const MAX_FOLDERS: usize = 100_000;

#[cfg(target_os = "linux")]
pub(super) use linux::Watcher;

#[cfg(not(target_os = "linux"))]
pub(super) use elsewhere::Watcher;

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::{BTreeSet, HashMap, HashSet};
    use std::ffi::{OsStr, OsString};
    use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
    use std::path::{Path, PathBuf};

    use nix::errno::Errno;
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

    use super::{MAX_FOLDERS, Touched};

    /// A watch on every folder of a work tree but the ones left out.
    #[derive(Debug)]
    pub(in crate::git) struct Watcher {
        inotify: Inotify,
        root: PathBuf,
        /// Each watched folder's path from the top ("" for the top itself).
        folders: HashMap<WatchDescriptor, OsString>,
        /// Folders (from the top) never watched: ralph's own and the ignored ones.
        left_out: HashSet<OsString>,
        touched: BTreeSet<OsString>,
        /// Something happened that the watch cannot account for.
        lost: bool,
    }

    /// Changes of a folder's entries, and of the folder itself. A file closed after it was open
    /// for writing counts too: a write through a memory map makes no `IN_MODIFY`, and may come
    /// after the close (the path is then named, and the look after the agent ended sees it).
    fn mask() -> AddWatchFlags {
        AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_ATTRIB
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF
            | AddWatchFlags::IN_ONLYDIR
            | AddWatchFlags::IN_DONT_FOLLOW
    }

    impl Watcher {
        /// Watches every folder under `root` but `left_out` ones (paths from the top); `None`
        /// when the kernel cannot (no inotify, the watch limit) or the tree is too large.
        pub(in crate::git) fn start(root: &Path, left_out: HashSet<OsString>) -> Option<Self> {
            let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
            let mut watcher = Self {
                inotify,
                root: root.to_owned(),
                folders: HashMap::new(),
                left_out,
                touched: BTreeSet::new(),
                lost: false,
            };
            watcher.watch_below(OsString::new()).then_some(watcher)
        }

        /// Watches `top` (a path from the top) and every folder below it; `false` when one
        /// could not be watched.
        fn watch_below(&mut self, top: OsString) -> bool {
            let mut pending = vec![top];
            while let Some(folder) = pending.pop() {
                if self.folders.len() >= MAX_FOLDERS {
                    return false;
                }
                let full = self.root.join(&folder);
                let Ok(entries) = std::fs::read_dir(&full) else {
                    // Gone already: its parent's event names it.
                    continue;
                };
                let mut below = Vec::new();
                for entry in entries.flatten() {
                    let name = entry.file_name();
                    if name == ".git" {
                        if !folder.is_empty() {
                            // A submodule or a nested repository: git does not look inside.
                            below.clear();
                            break;
                        }
                        continue;
                    }
                    if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                        let path = join(&folder, &name);
                        if !self.left_out.contains(&path) {
                            below.push(path);
                        }
                    }
                }
                match self.inotify.add_watch(&full, mask()) {
                    Ok(descriptor) => {
                        self.folders.insert(descriptor, folder);
                    }
                    Err(Errno::ENOENT | Errno::ENOTDIR) => continue,
                    Err(_) => return false,
                }
                pending.extend(below);
            }
            true
        }

        /// What was touched since the last call.
        pub(in crate::git) fn take(&mut self) -> Touched {
            loop {
                match self.inotify.read_events() {
                    Ok(events) => {
                        for event in events {
                            self.note(event.wd, event.mask, event.name);
                        }
                    }
                    Err(Errno::EAGAIN) => break,
                    Err(Errno::EINTR) => {}
                    Err(_) => {
                        self.lost = true;
                        break;
                    }
                }
            }
            let touched = std::mem::take(&mut self.touched);
            if std::mem::take(&mut self.lost) {
                Touched::Unknown
            } else {
                Touched::Paths(touched)
            }
        }

        fn note(
            &mut self,
            descriptor: WatchDescriptor,
            mask: AddWatchFlags,
            name: Option<OsString>,
        ) {
            let top = self.folders.get(&descriptor).is_some_and(|f| f.is_empty());
            if mask.intersects(AddWatchFlags::IN_Q_OVERFLOW | AddWatchFlags::IN_MOVE_SELF)
                || (top && mask.contains(AddWatchFlags::IN_DELETE_SELF))
            {
                // Events were dropped, or a watched folder moved (its subfolders' watches name
                // old paths), or the work tree itself went away.
                self.lost = true;
                return;
            }
            if mask.contains(AddWatchFlags::IN_IGNORED) {
                self.folders.remove(&descriptor);
                return;
            }
            let (Some(folder), Some(name)) = (self.folders.get(&descriptor), name) else {
                return;
            };
            let path = join(folder, &name);
            let folder_event = mask.contains(AddWatchFlags::IN_ISDIR);
            if folder_event && mask.contains(AddWatchFlags::IN_MOVED_FROM) {
                self.lost = true;
                return;
            }
            if folder_event
                && mask.intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)
                && !self.left_out.contains(&path)
                && !self.watch_below(path.clone())
            {
                self.lost = true;
            }
            self.touched.insert(path);
        }
    }

    /// `folder/name`, or `name` at the top.
    fn join(folder: &OsStr, name: &OsStr) -> OsString {
        if folder.is_empty() {
            return name.to_owned();
        }
        let mut path = folder.as_bytes().to_vec();
        path.push(b'/');
        path.extend_from_slice(name.as_bytes());
        OsString::from_vec(path)
    }
}

#[cfg(not(target_os = "linux"))]
mod elsewhere {
    use std::collections::HashSet;
    use std::ffi::OsString;
    use std::path::Path;

    use super::Touched;

    /// No watch here: every scan is a whole-tree scan.
    #[derive(Debug)]
    pub(in crate::git) struct Watcher;

    impl Watcher {
        pub(in crate::git) fn start(_root: &Path, _left_out: HashSet<OsString>) -> Option<Self> {
            None
        }

        pub(in crate::git) fn take(&mut self) -> Touched {
            Touched::Unknown
        }
    }
}

/// Whether `path` is `under` or inside it (paths from the top, `/`-separated).
pub(super) fn is_under(path: &[u8], under: &[u8]) -> bool {
    path.strip_prefix(under)
        .is_some_and(|rest| rest.is_empty() || rest.first() == Some(&b'/'))
}

/// The paths of `touched` that no other one holds (a file in a new folder goes with the folder).
pub(super) fn outermost(touched: BTreeSet<OsString>) -> Vec<OsString> {
    use std::os::unix::ffi::OsStrExt as _;
    let holds = |path: &OsString| {
        let bytes = path.as_bytes();
        (0..bytes.len()).any(|at| {
            bytes[at] == b'/' && touched.contains(std::ffi::OsStr::from_bytes(&bytes[..at]))
        })
    };
    touched
        .iter()
        .filter(|path| !holds(path))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_under_itself_and_its_folders_only() {
        assert!(is_under(b"a/b.txt", b"a"));
        assert!(is_under(b"a", b"a"));
        assert!(!is_under(b"ab/c", b"a"));
        assert!(!is_under(b"a", b"a/b"));
    }

    #[test]
    fn a_path_inside_another_touched_one_goes_with_it() {
        let touched = ["new", "new/a/b.txt", "new-x", "new.y/z", "other/c"];
        let touched = touched.iter().map(OsString::from).collect();
        assert_eq!(outermost(touched), ["new", "new-x", "new.y/z", "other/c"]);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn edits_new_folders_and_moves_are_seen_and_left_out_folders_are_not() {
        use std::collections::HashSet;
        let dir = crate::testing::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        std::fs::create_dir_all(path("src/deep")).unwrap();
        std::fs::create_dir_all(path("target")).unwrap();
        std::fs::create_dir_all(path(".git")).unwrap();
        std::fs::write(path("src/deep/a.rs"), "a").unwrap();
        let left_out = HashSet::from([OsString::from("target")]);
        let Some(mut watcher) = Watcher::start(dir.path(), left_out) else {
            return;
        };
        assert_eq!(watcher.take(), Touched::Paths(BTreeSet::new()));
        std::fs::write(path("src/deep/a.rs"), "b").unwrap();
        std::fs::write(path("target/out"), "x").unwrap();
        std::fs::write(path(".git/index"), "x").unwrap();
        std::fs::create_dir_all(path("new/inner")).unwrap();
        std::fs::write(path("new/inner/n.txt"), "n").unwrap();
        let paths = |names: &[&str]| {
            Touched::Paths(names.iter().map(OsString::from).collect::<BTreeSet<_>>())
        };
        assert_eq!(watcher.take(), paths(&["new", "src/deep/a.rs"]));
        // The new folder is watched from now on.
        std::fs::write(path("new/inner/n.txt"), "m").unwrap();
        std::fs::remove_file(path("src/deep/a.rs")).unwrap();
        assert_eq!(watcher.take(), paths(&["new/inner/n.txt", "src/deep/a.rs"]));
        // A folder deleted is named; a folder moved leaves the watch unable to say.
        std::fs::create_dir_all(path("gone/sub")).unwrap();
        assert_eq!(watcher.take(), paths(&["gone"]));
        std::fs::remove_dir_all(path("gone")).unwrap();
        assert_eq!(watcher.take(), paths(&["gone", "gone/sub"]));
        std::fs::rename(path("new"), path("renamed")).unwrap();
        assert_eq!(watcher.take(), Touched::Unknown);
        assert_eq!(watcher.take(), Touched::Paths(BTreeSet::new()));
        std::fs::write(path(".gitignore"), "x\n").unwrap();
        assert_eq!(watcher.take(), paths(&[".gitignore"]));
    }
}
