//! What the work tree looks like: one `git status` per scan, fingerprints in-process, and the
//! last scan kept for the next iteration, brought up to date with only the paths a watch saw
//! touched.
//!
//! A whole-tree scan costs one git process, `git status --porcelain=v2 -z --branch
//! --untracked-files=all` (with `--ignored=matching`, to leave the ignored folders out of the
//! watch), which names HEAD and every path that differs from it. Only those paths are
//! fingerprinted, in-process (length and a keyed 128-bit hash of the content, plus the executable
//! bit): never a process per file, never a read of a clean file. ralph's own committed files
//! (progress log, task file, `.gitignore`) are always fingerprinted, dirty or not, so that ralph's
//! own edits of them between iterations are never taken for the agent's.
//!
//! After a whole-tree scan a watch ([`super::watch`]) starts on the work tree. A later scan asks
//! the watch what was touched since: nothing touched is no process at all; otherwise one `git
//! status` limited to those paths, its answer put in place of what the kept scan said of them.
//! The scan is whole again when the watch cannot say (an overflow, a folder moved, a `.gitignore`
//! changed, no watch), when HEAD or the index changed (the agent committed or staged), when a
//! submodule differs, and at least every [`WHOLE_SCAN_EVERY`] looks as a safety net (a file
//! written through a memory map is not reported). The watch starts just after the whole scan's
//! `git status`: a change made in that moment by someone other than the agent (which is not
//! running then) waits for the next whole scan.
//!
//! Without a watch, the scan after the agent is the next iteration's starting point. It is
//! scanned again only when something says the tree changed in between: a different HEAD or a
//! different index file (modification time, size or inode), both read from files without a
//! process. Commands ralph ran itself (verification, hooks) or a retry's wait make the runner
//! forget the scan. ralph's own commit updates the kept scan to what it committed.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::fs::MetadataExt as _;

use crate::storage::{OWN_FILES, RALPH_DIR};

use super::Repo;
use super::fingerprint::Kept;
use super::watch::{self, Touched, Watcher};

/// A whole-tree scan at least this often (in looks at the tree, two an iteration), whatever the
/// watch says.
const WHOLE_SCAN_EVERY: u32 = 100;

/// Beyond this many touched paths (after folding them into their folders) one whole scan costs
/// less than naming them all.
const MAX_TOUCHED: usize = 2_000;

/// Content fingerprints of the paths that differ from HEAD, and HEAD itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(super) head: Option<String>,
    /// The paths that differ from HEAD (ralph's runtime files left out), fingerprinted.
    dirty: HashMap<String, String>,
    /// ralph's own committed files, fingerprinted whether they differ from HEAD or not.
    own: HashMap<String, String>,
    /// What `git status` said of each path: what a commit has to stage.
    pub(super) entries: Vec<Entry>,
    /// A submodule differs: a commit cannot be sure to leave the tree clean.
    pub(super) submodules: bool,
}

impl Snapshot {
    /// HEAD's commit when the snapshot was taken (none before the first commit).
    pub(crate) fn head(&self) -> Option<&str> {
        self.head.as_deref()
    }
}

/// One path `git status` named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) path: OsString,
    /// The index differs from HEAD.
    pub(super) staged: bool,
    /// The work tree differs from the index (untracked and unmerged paths included).
    pub(super) unstaged: bool,
    /// Not in the index (and not ignored).
    pub(super) untracked: bool,
}

/// What `git status --porcelain=v2 --branch` reports.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Status {
    pub(super) head: Option<String>,
    /// Every path named (for renames and copies, both names), as git spelled it.
    pub(super) paths: Vec<OsString>,
    pub(super) entries: Vec<Entry>,
    pub(super) submodules: bool,
    /// Folders an ignore pattern matches (asked with `--ignored=matching`), without the `/`.
    pub(super) ignored_folders: HashSet<OsString>,
}

/// The last scan, kept until something says the tree changed.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    seen: Option<(Snapshot, Stamp)>,
    /// ralph's last commit, and its own files' fingerprints as committed.
    committed: Option<(String, HashMap<String, String>)>,
    /// The last scan's file fingerprints, kept to spare reading unchanged files again.
    kept: Kept,
    /// The watch started after the last whole-tree scan.
    watcher: Option<Watcher>,
    /// No watch could be set up: every scan is whole.
    unwatchable: bool,
    /// Looks at the tree since the last whole scan.
    since_whole: u32,
    /// The first whole scan, which may write the index, was made.
    index_written: bool,
    /// Whole-tree scans so far.
    #[cfg(test)]
    whole_scans: u32,
    /// `git status` runs limited to touched paths so far.
    #[cfg(test)]
    limited_scans: u32,
}

impl Tree {
    /// Forgets the last scan: the next look at the tree scans it.
    pub(crate) fn forget(&mut self) {
        self.seen = None;
    }
}

/// What changes whenever git's view of the tree changes: HEAD's commit and the index file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    head: String,
    index: Option<(i64, i64, u64, u64)>,
}

impl Repo {
    /// Takes a snapshot of the work tree; `None` if `git status` fails (then nothing can be
    /// said about what changed).
    #[cfg(test)]
    pub(crate) fn snapshot(&self) -> Option<Snapshot> {
        let status = self.status(&[], false)?;
        Some(self.snapshot_of(status, &mut Kept::default()))
    }

    /// `git status` of the whole tree with `extra` arguments (`--ignored=matching`, or `--` and
    /// the paths to look at); `None` when it fails. With `write_index`, git may write back the
    /// file stamps it refreshed, when nobody else holds the index's lock (see [`Tree`]).
    fn status(&self, extra: &[&str], write_index: bool) -> Option<Status> {
        let mut args = vec![
            "--literal-pathspecs",
            "status",
            "--porcelain=v2",
            "-z",
            "--branch",
            "--no-ahead-behind",
            "--untracked-files=all",
        ];
        if extra.first() == Some(&"--") {
            // Asked of a few paths, git's threads that stat every entry in advance cost more
            // than they save.
            args.splice(0..0, ["-c", "core.preloadIndex=false"]);
        }
        args.extend_from_slice(extra);
        let mut command = self.command(&args);
        if write_index {
            command.env_remove("GIT_OPTIONAL_LOCKS");
        }
        let output = (command.output().ok()).filter(|output| output.status.success())?;
        Some(parse_status(&output.stdout))
    }

    fn snapshot_of(&self, status: Status, kept: &mut Kept) -> Snapshot {
        Snapshot {
            head: status.head,
            dirty: self.fingerprints(status.paths, kept),
            own: self.own_fingerprints(),
            entries: status.entries,
            submodules: status.submodules,
        }
    }

    /// The git tree object of the work tree as it is now (tracked and untracked files; ignored
    /// ones, ralph's runtime files among them, left out), written through a temporary index so
    /// that neither the user's index nor the agent's is touched: what a verify command ran on.
    pub(crate) fn work_tree_hash(&self) -> Option<String> {
        let scratch = tempfile::tempdir().ok()?;
        let index = scratch.path().join("index");
        let run = |args: &[&str]| {
            self.command(args)
                .env("GIT_INDEX_FILE", &index)
                .output()
                .ok()
                .filter(|output| output.status.success())
        };
        // A copy of the real index keeps its stat cache: only changed files are hashed.
        let copied = std::fs::copy(self.git_dir.join("index"), &index).is_ok();
        if !copied && self.head_oid().is_some() {
            run(&["read-tree", "HEAD"])?;
        }
        run(&["add", "-A", "--", ":/"])?;
        let written = run(&["write-tree"])?;
        let tree = String::from_utf8_lossy(&written.stdout).trim().to_owned();
        (!tree.is_empty()).then_some(tree)
    }

    /// Scans the tree (only what the watch saw touched, when it can say) and keeps the scan in
    /// `tree`.
    pub(crate) fn scan(&self, tree: &mut Tree) -> Option<Snapshot> {
        if let Some(snapshot) = self.scan_touched(tree) {
            self.keep(tree, Some(snapshot.clone()));
            return Some(snapshot);
        }
        self.scan_whole(tree)
    }

    /// A scan of the whole tree, then a new watch on it.
    fn scan_whole(&self, tree: &mut Tree) -> Option<Snapshot> {
        tree.watcher = None;
        tree.since_whole = 0;
        #[cfg(test)]
        {
            tree.whole_scans += 1;
        }
        let extra: &[&str] = if tree.unwatchable {
            &[]
        } else {
            &["--ignored=matching"]
        };
        // The loop's first scan lets git write back the index's refreshed stamps: in a
        // repository whose files were touched since (copied, rebuilt) every scan would hash
        // every file again. Later scans take no optional lock: the agent may need the index.
        let mut status = self.status(extra, !std::mem::replace(&mut tree.index_written, true));
        if let Some(status) = &mut status
            && !tree.unwatchable
        {
            // Ignored folders (builds) and ralph's own (its logs) are not watched.
            let mut left_out = std::mem::take(&mut status.ignored_folders);
            left_out.extend(self.own_folders().map(OsString::from));
            tree.watcher = Watcher::start(&self.root, left_out);
            tree.unwatchable = tree.watcher.is_none();
        }
        let snapshot = status.map(|status| self.snapshot_of(status, &mut tree.kept));
        self.keep(tree, snapshot.clone());
        snapshot
    }

    /// The kept scan brought up to date with a `git status` of only the paths the watch saw
    /// touched (no process when it saw none); `None` when a whole scan is needed.
    fn scan_touched(&self, tree: &mut Tree) -> Option<Snapshot> {
        let (kept, stamp) = tree.seen.as_ref()?;
        if kept.submodules
            || tree.since_whole >= WHOLE_SCAN_EVERY
            || self.stamp().as_ref() != Some(stamp)
        {
            return None;
        }
        let Touched::Paths(touched) = tree.watcher.as_mut()?.take() else {
            return None;
        };
        tree.since_whole += 1;
        // A name that is not UTF-8 cannot be passed on: a whole scan.
        let touched: Vec<String> = (watch::outermost(touched).into_iter())
            .map(|path| path.into_string().ok())
            .collect::<Option<Vec<_>>>()?;
        // ralph's own files are fingerprinted at every look, and always staged by a commit.
        let touched: Vec<&str> = (touched.iter())
            .map(String::as_str)
            .filter(|path| !self.is_ralphs(path))
            .collect();
        if (touched.iter()).any(|path| path.rsplit('/').next() == Some(".gitignore")) {
            // The folders to leave out of the watch may have changed with it.
            return None;
        }
        let mut snapshot = kept.clone();
        snapshot.own = self.own_fingerprints();
        if touched.is_empty() {
            return Some(snapshot);
        }
        // An untracked file the kept scan named, touched again, is untracked still (the ignore
        // rules are as they were: a touched `.gitignore` scans the whole tree): git need not be
        // asked about it unless it is a folder now; one that is gone is named no more.
        let untracked: HashSet<&OsStr> = (kept.entries.iter())
            .filter(|entry| entry.untracked)
            .map(|entry| entry.path.as_os_str())
            .collect();
        let mut gone = HashSet::new();
        let touched: Vec<&str> = (touched.into_iter())
            .filter(|&path| {
                let name = OsStr::new(path);
                if !untracked.contains(name) {
                    return true;
                }
                let meta = std::fs::symlink_metadata(self.root.join(name));
                if meta.is_err() {
                    gone.insert(name);
                }
                meta.is_ok_and(|meta| meta.is_dir())
            })
            .collect();
        if touched.len() > MAX_TOUCHED {
            return None;
        }
        if !touched.is_empty() {
            #[cfg(test)]
            {
                tree.limited_scans += 1;
            }
            let mut extra = vec!["--"];
            extra.extend_from_slice(&touched);
            let status = self.status(&extra, false)?;
            snapshot.entries.retain(|entry| {
                let path = entry.path.as_bytes();
                !touched.iter().any(|t| watch::is_under(path, t.as_bytes()))
            });
            snapshot.entries.extend(status.entries);
            snapshot.submodules |= status.submodules;
            snapshot.head = status.head;
        }
        snapshot
            .entries
            .retain(|entry| !(entry.untracked && gone.contains(entry.path.as_os_str())));
        let paths = snapshot.entries.iter().map(|e| e.path.clone()).collect();
        snapshot.dirty = self.fingerprints(paths, &mut tree.kept);
        Some(snapshot)
    }

    /// The tree as it is now: the kept scan while HEAD and the index are as they were then
    /// (ralph's own files fingerprinted again), brought up to date by the watch when there is
    /// one; else a new scan.
    pub(crate) fn current(&self, tree: &mut Tree) -> Option<Snapshot> {
        self.current_or_fresh(tree).map(|(snapshot, _)| snapshot)
    }

    /// [`Repo::current`], and whether it is a new look (`true`) rather than the kept scan taken
    /// as it is.
    pub(super) fn current_or_fresh(&self, tree: &mut Tree) -> Option<(Snapshot, bool)> {
        if tree.watcher.is_none()
            && let Some((snapshot, stamp)) = &mut tree.seen
            && self.stamp().as_ref() == Some(stamp)
        {
            snapshot.own = self.own_fingerprints();
            return Some((snapshot.clone(), false));
        }
        self.scan(tree).map(|snapshot| (snapshot, true))
    }

    /// Keeps `snapshot` as the tree as it is now (nothing kept when HEAD cannot be read).
    pub(super) fn keep(&self, tree: &mut Tree, snapshot: Option<Snapshot>) {
        tree.seen = snapshot.zip(self.stamp());
    }

    /// After ralph's commit of everything `snapshot` named but the paths `left_out`: HEAD is
    /// the new commit, and only those paths and ralph's runtime files can still differ from it.
    pub(super) fn keep_committed(
        &self,
        tree: &mut Tree,
        mut snapshot: Snapshot,
        left_out: &BTreeSet<String>,
    ) {
        tree.committed = self.head_oid().map(|head| (head, snapshot.own.clone()));
        if snapshot.submodules {
            // A submodule's own changes stay after a commit: scan again.
            tree.forget();
            return;
        }
        snapshot.head = self.head_oid();
        snapshot.dirty.retain(|path, _| left_out.contains(path));
        snapshot.entries.retain_mut(|entry| {
            let path = entry.path.to_string_lossy();
            if left_out.contains(path.as_ref()) {
                // As it was: a change of the user's that stays staged is still staged.
                return true;
            }
            // A runtime file that was staged has been unstaged.
            entry.staged = false;
            self.is_runtime_file(&path)
        });
        self.keep(tree, Some(snapshot));
    }

    /// The paths `snapshot` names outside ralph's own directory: the changes that are not
    /// ralph's (modified, staged, deleted, untracked; ignored files are never named).
    pub(crate) fn uncommitted(&self, snapshot: &Snapshot) -> BTreeSet<String> {
        let own_dir = format!("{}{RALPH_DIR}/", self.prefix);
        (snapshot.entries.iter())
            .map(|entry| entry.path.to_string_lossy().into_owned())
            .filter(|path| !path.starts_with(&own_dir))
            .collect()
    }

    /// Whether ralph's own files are as its last commit left them, and HEAD is still that commit:
    /// then they need no commit of their own (no process asked).
    pub(crate) fn own_files_committed(&self, tree: &Tree) -> bool {
        tree.committed.as_ref().is_some_and(|(head, own)| {
            self.head_oid().as_ref() == Some(head) && *own == self.own_fingerprints()
        })
    }

    /// Paths changed between two snapshots, sorted.
    pub(crate) fn changed_files(&self, before: &Snapshot, after: &Snapshot) -> Vec<String> {
        let mut changed = BTreeSet::new();
        let own = |path: &String| self.own_name(path).is_some();
        for (old, new) in [(&before.dirty, &after.dirty), (&before.own, &after.own)] {
            for (path, fingerprint) in new {
                if old.get(path) != Some(fingerprint) {
                    changed.insert(path.clone());
                }
            }
            changed.extend(old.keys().filter(|path| !new.contains_key(*path)).cloned());
        }
        // ralph edits its own files between scans: only their fingerprints in `own` tell.
        changed.retain(|path| !own(path) || before.own.get(path) != after.own.get(path));
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

    /// The repository-relative paths of ralph's own committed files.
    pub(super) fn own_paths(&self) -> Vec<String> {
        OWN_FILES
            .iter()
            .map(|name| format!("{}{RALPH_DIR}/{name}", self.prefix))
            .collect()
    }

    fn own_name<'a>(&self, path: &'a str) -> Option<&'a str> {
        self.runtime_name(path)
            .filter(|name| OWN_FILES.contains(name))
    }

    fn own_fingerprints(&self) -> HashMap<String, String> {
        let mut buffer = Vec::new();
        self.own_paths()
            .into_iter()
            .filter_map(|path| {
                let fingerprint = self.fingerprint(&self.root.join(&path), &mut buffer)?;
                Some((path, fingerprint))
            })
            .collect()
    }

    /// HEAD and the index as they are now, read from files; `None` when HEAD cannot be read
    /// that way (no commit yet, a ref format other than files).
    fn stamp(&self) -> Option<Stamp> {
        let index = std::fs::metadata(self.git_dir.join("index"))
            .ok()
            .map(|meta| (meta.mtime(), meta.mtime_nsec(), meta.size(), meta.ino()));
        Some(Stamp {
            head: self.head_oid()?,
            index,
        })
    }
}

/// Parses `git status --porcelain=v2 -z --branch`: HEAD (absent before the first commit) and the
/// paths of every entry (for renames and copies, both names).
pub(super) fn parse_status(bytes: &[u8]) -> Status {
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
            Some(b'?') => 1,
            Some(b'!') => {
                // Ignored (asked with `--ignored=matching`): only its folders are of use.
                if let Some(folder) = entry.strip_prefix(b"! ").and_then(|p| p.strip_suffix(b"/")) {
                    (status.ignored_folders).insert(OsString::from_vec(folder.to_vec()));
                }
                continue;
            }
            _ => continue,
        };
        let mut parts = entry.splitn(fields + 1, |&b| b == b' ');
        let (xy, sub): (&[u8], &[u8]) = if fields == 1 {
            (b"??", b"N...")
        } else {
            (
                parts.nth(1).unwrap_or_default(),
                parts.next().unwrap_or_default(),
            )
        };
        let skip = if fields == 1 { 1 } else { fields - 3 };
        let Some(path) = parts.nth(skip) else {
            continue;
        };
        let path = OsString::from_vec(path.to_vec());
        let changed = |at: usize| xy.get(at).is_some_and(|&c| c != b'.');
        status.submodules |= sub.first() == Some(&b'S');
        status.entries.push(Entry {
            path: path.clone(),
            staged: fields > 1 && changed(0),
            unstaged: fields == 1 || entry[0] == b'u' || changed(1),
            untracked: fields == 1,
        });
        status.paths.push(path);
        if entry[0] == b'2'
            && let Some(original) = entries.next()
        {
            let original = OsString::from_vec(original.to_vec());
            // A rename staged in the index has its old name's side there already (a commit of
            // some paths only must name it); one seen only in the work tree (`git add -N`,
            // then a move) still has the old name to remove from the index.
            status.entries.push(Entry {
                path: original.clone(),
                staged: changed(0),
                unstaged: !changed(0),
                untracked: false,
            });
            status.paths.push(original);
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;
    use std::path::Path;

    use super::super::tests::repo;
    use super::*;

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

    #[test]
    fn the_work_tree_hash_is_the_tree_a_commit_of_everything_would_have_and_the_index_is_untouched()
    {
        let Some((dir, repo)) = repo() else { return };
        let clean = repo.work_tree_hash().unwrap();
        let head_tree = repo.run(&["rev-parse", "HEAD^{tree}"]).unwrap();
        assert_eq!(clean, String::from_utf8_lossy(&head_tree.stdout).trim());
        std::fs::write(dir.path().join("a.txt"), "changed\n").unwrap();
        std::fs::write(dir.path().join("new.txt"), "new\n").unwrap();
        let changed = repo.work_tree_hash().unwrap();
        assert_ne!(changed, clean);
        let staged = repo.run(&["diff", "--cached", "--name-only"]).unwrap();
        assert!(staged.stdout.is_empty(), "the user's index is not touched");
        assert!(repo.run(&["add", "-A"]).unwrap().status.success());
        let written = repo.run(&["write-tree"]).unwrap();
        assert_eq!(changed, String::from_utf8_lossy(&written.stdout).trim());
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
        std::fs::set_permissions(
            path("b.txt"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
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

    fn git_ok(dir: &Path, args: &[&str]) {
        let output = super::super::git(dir, args).unwrap();
        assert!(output.status.success(), "{args:?}: {output:?}");
    }

    #[test]
    fn without_a_watch_the_kept_scan_is_used_until_head_or_the_index_changes() {
        let Some((dir, repo)) = repo() else { return };
        let mut tree = Tree {
            unwatchable: true,
            ..Tree::default()
        };
        let first = repo.scan(&mut tree).unwrap();
        // An edit that changes neither HEAD nor the index is seen at the next scan only.
        std::fs::write(dir.path().join("a.txt"), "edited\n").unwrap();
        assert_eq!(repo.current(&mut tree).unwrap(), first);
        git_ok(dir.path(), &["add", "a.txt"]);
        let staged = repo.current(&mut tree).unwrap();
        assert_eq!(repo.changed_files(&first, &staged), ["a.txt"]);
        git_ok(dir.path(), &["commit", "-q", "-m", "by hand"]);
        let committed = repo.current(&mut tree).unwrap();
        assert_ne!(committed.head, staged.head);
        assert_eq!(committed.head, repo.snapshot().unwrap().head);
        tree.forget();
        std::fs::write(dir.path().join("b.txt"), "edited\n").unwrap();
        assert_eq!(
            repo.changed_files(&committed, &repo.current(&mut tree).unwrap()),
            ["b.txt"]
        );
    }

    /// `snapshot` with its entries in one order, to compare with another scan's.
    fn canonical(mut snapshot: Snapshot) -> Snapshot {
        (snapshot.entries).sort_by_key(|e| (e.path.clone(), e.staged, e.unstaged));
        snapshot
    }

    /// Writes a byte into `file` through a shared memory map, after closing the file: no
    /// `IN_MODIFY` comes of it, and the close comes before the write. (Done by Python's `mmap`:
    /// ralph has no unsafe code; without `python3` the round does nothing.)
    fn write_through_a_map(file: &Path, round: u64) {
        let script = "import mmap, os, sys\nfd = os.open(sys.argv[1], os.O_RDWR)\nm = mmap.mmap(fd, 0)\nos.close(fd)\nm[0] = ord(sys.argv[2])\nm.close()\n";
        let letter = char::from(b'a' + u8::try_from(round % 26).unwrap_or(0));
        let _ = std::process::Command::new("python3")
            .args(["-c", script])
            .arg(file)
            .arg(letter.to_string())
            .status();
    }

    /// One random edit of the files under `root` (`existing`: its files, `next(n)`: a number
    /// below n); whether it is one the watch cannot see, so that a whole scan must follow.
    fn random_edit(
        root: &Path,
        round: u64,
        existing: &[String],
        next: &mut impl FnMut(u64) -> u64,
    ) -> bool {
        let path = |name: &str| root.join(name);
        let pick = |n: u64| existing.get(n as usize).cloned();
        let any = next(existing.len().max(1) as u64);
        let kind = next(16);
        if kind >= 8 {
            return tree_edit(root, round, kind, (existing, any), next);
        }
        match kind {
            0 | 1 => {
                let folder = format!("n{}/d{}", next(4), next(3));
                std::fs::create_dir_all(path(&folder)).unwrap();
                std::fs::write(path(&format!("{folder}/f{round}.txt")), "new\n").unwrap();
            }
            2 | 3 => {
                if let Some(file) = pick(any) {
                    let _ = std::fs::write(path(&file), format!("edit {round}\n"));
                }
            }
            4 => {
                if let Some(file) = pick(any) {
                    let _ = std::fs::remove_file(path(&file));
                }
            }
            5 => {
                if let Some(file) = pick(any) {
                    let mode = if next(2) == 0 { 0o755 } else { 0o644 };
                    let _ = std::fs::set_permissions(
                        path(&file),
                        std::fs::Permissions::from_mode(mode),
                    );
                }
            }
            6 => {
                // The same content written again.
                if let Some(file) = pick(any) {
                    let content = std::fs::read(path(&file)).unwrap_or_default();
                    let _ = std::fs::write(path(&file), content);
                }
            }
            7 => {
                let _ = std::fs::remove_dir_all(path(&format!("n{}", next(4))));
            }
            _ => {}
        }
        false
    }

    /// [`random_edit`]'s edits of the tree itself: ignored files, moves, commits by someone
    /// else, memory maps, symlinks, the ignore rules, folders moved.
    fn tree_edit(
        root: &Path,
        round: u64,
        kind: u64,
        (existing, any): (&[String], u64),
        next: &mut impl FnMut(u64) -> u64,
    ) -> bool {
        let path = |name: &str| root.join(name);
        let pick = |n: u64| existing.get(n as usize).cloned();
        let mut whole = false;
        match kind {
            8 => {
                std::fs::write(path(&format!("target/deep/x{round}.o")), "o").unwrap();
                std::fs::write(path(&format!("obj{round}.o")), "o").unwrap();
            }
            9 => {
                if let Some(file) = pick(any)
                    && path(&file).exists()
                {
                    let moved = format!("{file}.moved");
                    std::fs::rename(path(&file), path(&moved)).unwrap();
                }
            }
            10 => {
                // Staged or committed by someone else (or the agent): HEAD or the index
                // changes.
                git_ok(root, &["add", "-A"]);
                if next(2) == 0 {
                    git_ok(root, &["commit", "-q", "--allow-empty", "-m", "by hand"]);
                }
                whole = true;
            }
            11 => {
                // A write through a memory map, its file closed before the write.
                if let Some(file) = pick(any)
                    && path(&file).is_file()
                {
                    write_through_a_map(&path(&file), round);
                }
            }
            12 => {
                let link = path(&format!("link{round}"));
                let target = pick(any).unwrap_or_else(|| "nowhere".to_owned());
                let _ = std::os::unix::fs::symlink(target, link);
            }
            13 => {
                // The ignore rules change: what counts as untracked does too.
                let rules = if next(2) == 0 {
                    "target/\n*.o\nn1/\n"
                } else {
                    "target/\n*.o\n"
                };
                std::fs::write(path(".gitignore"), rules).unwrap();
                whole = true;
            }
            _ => {
                // A folder moved: the watch cannot follow.
                let from = format!("n{}", next(4));
                if path(&from).exists() {
                    std::fs::rename(path(&from), path(&format!("m{round}"))).unwrap();
                    whole = true;
                }
            }
        }
        whole
    }

    #[test]
    fn a_scan_of_what_the_watch_saw_touched_says_what_a_whole_scan_says() {
        let Some((dir, repo)) = repo() else { return };
        let root = dir.path();
        let path = |name: &str| root.join(name);
        let git = |args: &[&str]| git_ok(root, args);
        std::fs::write(path(".gitignore"), "target/\n*.o\n").unwrap();
        std::fs::create_dir_all(path("target/deep")).unwrap();
        git(&["add", "-A"]);
        git(&["commit", "-q", "-m", "ignore"]);
        let mut tree = Tree::default();
        repo.scan(&mut tree).unwrap();
        if tree.unwatchable {
            return;
        }
        // A small deterministic generator of edits.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |below: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % below
        };
        let files = |root: &Path| {
            let output =
                super::super::git(root, &["ls-files", "-z", "-co", "--exclude-standard"]).unwrap();
            (output.stdout.split(|&b| b == 0))
                .filter(|p| !p.is_empty() && *p != b".gitignore")
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect::<Vec<_>>()
        };
        let mut whole_expected = 1;
        // 64 rounds by default (every kind of edit several times); more with
        // RALPH_WATCH_FUZZ_ROUNDS.
        let rounds: u64 = (std::env::var("RALPH_WATCH_FUZZ_ROUNDS").ok())
            .and_then(|n| n.parse().ok())
            .unwrap_or(64);
        for round in 0..rounds {
            let existing = files(root);
            if random_edit(root, round, &existing, &mut next) {
                whole_expected += 1;
            }
            let seen = canonical(repo.scan(&mut tree).unwrap());
            let whole = canonical(repo.snapshot().unwrap());
            assert_eq!(seen, whole, "round {round}");
        }
        // Most looks asked git about the touched paths only.
        assert!(
            tree.whole_scans <= whole_expected + 2,
            "{} whole scans for {whole_expected} that had to be",
            tree.whole_scans
        );
    }

    #[test]
    fn an_untracked_file_touched_again_is_looked_at_without_git() {
        let Some((dir, repo)) = repo() else { return };
        let path = |name: &str| dir.path().join(name);
        let mut tree = Tree::default();
        let start = repo.scan(&mut tree).unwrap();
        if tree.unwatchable {
            return;
        }
        std::fs::write(path("log.txt"), "one\n").unwrap();
        let first = repo.scan(&mut tree).unwrap();
        assert_eq!(repo.changed_files(&start, &first), ["log.txt"]);
        assert_eq!(tree.limited_scans, 1, "a new file is asked of git");
        // Written again, then written again with the same content, then removed: no git.
        std::fs::write(path("log.txt"), "one\ntwo\n").unwrap();
        let second = repo.scan(&mut tree).unwrap();
        assert_eq!(repo.changed_files(&first, &second), ["log.txt"]);
        std::fs::write(path("log.txt"), "one\ntwo\n").unwrap();
        let third = repo.scan(&mut tree).unwrap();
        assert!(repo.changed_files(&second, &third).is_empty());
        std::fs::remove_file(path("log.txt")).unwrap();
        let gone = repo.scan(&mut tree).unwrap();
        assert_eq!(repo.changed_files(&third, &gone), ["log.txt"]);
        assert_eq!(canonical(gone), canonical(repo.snapshot().unwrap()));
        assert_eq!((tree.limited_scans, tree.whole_scans), (1, 1));
        // A folder where a known untracked file was is asked of git.
        std::fs::write(path("log.txt"), "again\n").unwrap();
        repo.scan(&mut tree).unwrap();
        std::fs::remove_file(path("log.txt")).unwrap();
        std::fs::create_dir_all(path("log.txt/inner")).unwrap();
        std::fs::write(path("log.txt/inner/x"), "x\n").unwrap();
        let folder = repo.scan(&mut tree).unwrap();
        assert_eq!(canonical(folder), canonical(repo.snapshot().unwrap()));
        assert_eq!((tree.limited_scans, tree.whole_scans), (3, 1));
    }

    #[test]
    fn a_commit_stages_exactly_what_changed_and_keeps_the_tree_as_committed() {
        let Some((dir, repo)) = repo() else { return };
        let path = |name: &str| dir.path().join(name);
        let git = |args: &[&str]| git_ok(dir.path(), args);
        std::fs::create_dir_all(path("gone/deep")).unwrap();
        std::fs::write(path("gone/deep/x.txt"), "x\n").unwrap();
        std::fs::write(path("*.txt"), "star\n").unwrap();
        git(&["add", "-A"]);
        git(&["commit", "-q", "-m", "more"]);
        let mut tree = Tree::default();
        let before = repo.current(&mut tree).unwrap();
        // The agent deletes a directory, renames with git, changes a mode, adds a new
        // directory, edits a file whose name is a glob.
        std::fs::remove_dir_all(path("gone")).unwrap();
        git(&["mv", "a.txt", "renamed a.txt"]);
        std::fs::set_permissions(path("b.txt"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir_all(path("new/dir")).unwrap();
        std::fs::write(path("new/dir/n.txt"), "n\n").unwrap();
        std::fs::write(path("*.txt"), "star 2\n").unwrap();
        let after = repo.scan(&mut tree).unwrap();
        assert_eq!(
            repo.changed_files(&before, &after),
            [
                "*.txt",
                "a.txt",
                "b.txt",
                "gone/deep/x.txt",
                "new/dir/n.txt",
                "renamed a.txt"
            ]
        );
        assert!(
            repo.commit_all("work", &mut tree, &mut BTreeSet::new())
                .unwrap()
                .is_some()
        );
        let status = super::super::git(dir.path(), &["status", "--porcelain"]).unwrap();
        assert_eq!(String::from_utf8_lossy(&status.stdout), "");
        let shown =
            super::super::git(dir.path(), &["show", "--name-status", "--format=", "HEAD"]).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&shown.stdout),
            "M\t*.txt\nM\tb.txt\nD\tgone/deep/x.txt\nA\tnew/dir/n.txt\nR100\ta.txt\trenamed a.txt\n"
        );
        // What is kept is what a new scan sees.
        let kept = repo.current(&mut tree).unwrap();
        let fresh = repo.snapshot().unwrap();
        assert_eq!(
            (kept.head.as_ref(), &kept.dirty),
            (fresh.head.as_ref(), &fresh.dirty)
        );
        assert!(
            repo.commit_all("nothing", &mut tree, &mut BTreeSet::new())
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_rename_seen_only_in_the_work_tree_is_committed_whole() {
        let Some((dir, repo)) = repo() else { return };
        std::fs::rename(dir.path().join("a.txt"), dir.path().join("moved.txt")).unwrap();
        git_ok(dir.path(), &["add", "-N", "moved.txt"]);
        let mut tree = Tree::default();
        let scanned = repo.scan(&mut tree).unwrap();
        assert!(
            scanned
                .entries
                .iter()
                .any(|e| e.path == "a.txt" && e.unstaged),
            "{scanned:?}"
        );
        assert!(
            repo.commit_all("move", &mut tree, &mut BTreeSet::new())
                .unwrap()
                .is_some()
        );
        let status = super::super::git(dir.path(), &["status", "--porcelain"]).unwrap();
        assert_eq!(String::from_utf8_lossy(&status.stdout), "");
    }

    #[test]
    fn own_files_need_no_commit_of_their_own_while_they_are_as_committed() {
        let Some((dir, repo)) = repo() else { return };
        let progress = dir.path().join(RALPH_DIR).join(OWN_FILES[0]);
        std::fs::create_dir_all(progress.parent().unwrap()).unwrap();
        std::fs::write(&progress, "# Progress\n").unwrap();
        std::fs::write(dir.path().join("a.txt"), "work\n").unwrap();
        let mut tree = Tree::default();
        assert!(
            !repo.own_files_committed(&tree),
            "nothing committed by ralph yet"
        );
        repo.scan(&mut tree);
        assert!(
            repo.commit_all("work", &mut tree, &mut BTreeSet::new())
                .unwrap()
                .is_some()
        );
        assert!(repo.own_files_committed(&tree));
        std::fs::write(&progress, "# Progress\nmore\n").unwrap();
        assert!(!repo.own_files_committed(&tree));
    }
}
