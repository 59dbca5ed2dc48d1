//! What the work tree looks like: one `git status` per scan, fingerprints in-process, and the
//! last scan kept for the next iteration while nothing says the tree changed.
//!
//! A scan costs one git process, `git status --porcelain=v2 -z --branch --untracked-files=all`,
//! which names HEAD and every path that differs from it. Only those paths are fingerprinted,
//! in-process (length and a keyed 128-bit hash of the content, plus the executable bit): never a
//! process per file, never a read of a clean file. ralph's own committed files (progress log,
//! task file, `.gitignore`) are always fingerprinted, dirty or not, so that ralph's own edits of
//! them between iterations are never taken for the agent's.
//!
//! The scan after the agent is the next iteration's starting point. It is scanned again only
//! when something says the tree changed in between: a different HEAD or a different index file
//! (modification time, size or inode), both read from files without a process; commands ralph
//! ran itself (verification, hooks) or a retry's wait make the runner forget the scan. ralph's own
//! commit updates the kept scan to what it committed.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt as _;
use std::os::unix::fs::MetadataExt as _;

use crate::storage::{OWN_FILES, RALPH_DIR};

use super::Repo;
use super::fingerprint::Kept;

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

/// One path `git status` named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) path: OsString,
    /// The index differs from HEAD.
    pub(super) staged: bool,
    /// The work tree differs from the index (untracked and unmerged paths included).
    pub(super) unstaged: bool,
}

/// What `git status --porcelain=v2 --branch` reports.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Status {
    pub(super) head: Option<String>,
    /// Every path named (for renames and copies, both names), as git spelled it.
    pub(super) paths: Vec<OsString>,
    pub(super) entries: Vec<Entry>,
    pub(super) submodules: bool,
}

/// The last scan, kept until something says the tree changed.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    seen: Option<(Snapshot, Stamp)>,
    /// ralph's last commit, and its own files' fingerprints as committed.
    committed: Option<(String, HashMap<String, String>)>,
    /// The last scan's file fingerprints, kept to spare reading unchanged files again.
    kept: Kept,
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
        self.snapshot_keeping(&mut Kept::default())
    }

    /// [`Self::snapshot`], reusing (and updating) the fingerprints `kept` from the last scan.
    fn snapshot_keeping(&self, kept: &mut Kept) -> Option<Snapshot> {
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
            dirty: self.fingerprints(status.paths, kept),
            own: self.own_fingerprints(),
            entries: status.entries,
            submodules: status.submodules,
        })
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

    /// Scans the tree and keeps the scan in `tree`.
    pub(crate) fn scan(&self, tree: &mut Tree) -> Option<Snapshot> {
        let snapshot = self.snapshot_keeping(&mut tree.kept);
        self.keep(tree, snapshot.clone());
        snapshot
    }

    /// The tree as it is now: the kept scan while HEAD and the index are as they were then
    /// (ralph's own files fingerprinted again), else a new scan.
    pub(crate) fn current(&self, tree: &mut Tree) -> Option<Snapshot> {
        self.current_or_fresh(tree).map(|(snapshot, _)| snapshot)
    }

    /// [`Repo::current`], and whether it is a new scan (`true`) rather than the kept one.
    pub(super) fn current_or_fresh(&self, tree: &mut Tree) -> Option<(Snapshot, bool)> {
        if let Some((snapshot, stamp)) = &mut tree.seen
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
            Some(b'?' | b'!') => 1,
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
    fn the_kept_scan_is_used_until_head_or_the_index_changes() {
        let Some((dir, repo)) = repo() else { return };
        let mut tree = Tree::default();
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
