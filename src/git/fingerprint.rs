//! Fingerprints of the paths a scan names: for a regular file its length, two keyed 128-bit
//! hashes of its content and its executable bit; a marker for anything else.
//!
//! A file's content is read again only when it may have changed since it was last hashed: the
//! loop keeps, per path, the file's status (size, times, inode, mode) and its fingerprint. The
//! kept fingerprint stands while the status is the same and the file's last change (ctime) was
//! well before the hash was taken — a write after that moment would have moved the ctime past
//! it, whatever the clock's granularity. A file changed just before it was hashed is read every
//! time until it settles.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::ffi::{OsStr, OsString};
use std::hash::{BuildHasher as _, Hasher as _};
use std::io::Read as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::Repo;

/// How long before a hash a file's last change must lie for its kept fingerprint to stand:
/// more than any file system's time granularity (FAT: 2 s).
const SETTLED: Duration = Duration::from_secs(3);

/// Fingerprints kept from the last scan, by path.
#[derive(Debug, Default)]
pub(crate) struct Kept(HashMap<OsString, KeptFile>);

#[derive(Debug)]
struct KeptFile {
    status: FileStatus,
    fingerprint: String,
    /// The file had not changed for [`SETTLED`] when it was hashed.
    settled: bool,
}

/// What the file system says of a file without reading it.
#[derive(Debug, PartialEq, Eq)]
struct FileStatus {
    size: u64,
    modified: (i64, i64),
    changed: (i64, i64),
    inode: (u64, u64),
    mode: u32,
}

impl FileStatus {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            size: meta.size(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
            inode: (meta.dev(), meta.ino()),
            mode: meta.mode(),
        }
    }

    /// Whether the file's last change lies [`SETTLED`] or more before `moment`.
    fn settled_at(&self, moment: SystemTime) -> bool {
        let Ok(moment) = moment.duration_since(SystemTime::UNIX_EPOCH) else {
            return false;
        };
        let (seconds, nanos) = self.changed;
        let Ok(seconds) = u64::try_from(seconds) else {
            return false;
        };
        let changed = Duration::new(seconds, u32::try_from(nanos).unwrap_or(0));
        changed + SETTLED <= moment
    }
}

/// New fingerprint keys, random per process (snapshots are compared only within one process).
pub(super) fn keys() -> [RandomState; 2] {
    [RandomState::new(), RandomState::new()]
}

impl Repo {
    /// A fingerprint per path: a content hash for files, a marker for the rest. `kept` holds the
    /// last scan's file fingerprints and is left with this scan's.
    pub(super) fn fingerprints(
        &self,
        paths: Vec<OsString>,
        kept: &mut Kept,
    ) -> HashMap<String, String> {
        let mut files = HashMap::with_capacity(paths.len());
        let mut buffer = Vec::new();
        let mut last = std::mem::take(&mut kept.0);
        for raw in paths {
            let path = OsStr::from_bytes(raw.as_bytes())
                .to_string_lossy()
                .into_owned();
            if self.is_runtime_file(&path) {
                continue;
            }
            let full = self.root.join(&raw);
            let fingerprint = match std::fs::symlink_metadata(&full) {
                Ok(meta) if meta.is_file() => {
                    let status = FileStatus::of(&meta);
                    let known = last
                        .remove(&raw)
                        .filter(|file| file.settled && file.status == status);
                    let file = match known {
                        Some(file) => file,
                        None => self.hashed(&full, &meta, status, &mut buffer),
                    };
                    let fingerprint = file.fingerprint.clone();
                    kept.0.insert(raw, file);
                    fingerprint
                }
                Ok(meta) => self.marker(&full, &meta),
                Err(_) => "deleted".to_owned(),
            };
            files.insert(path, fingerprint);
        }
        files
    }

    /// A path's fingerprint, its content read; `None` when it does not exist.
    pub(super) fn fingerprint(&self, full: &Path, buffer: &mut Vec<u8>) -> Option<String> {
        let meta = std::fs::symlink_metadata(full).ok()?;
        Some(if meta.is_file() {
            let status = FileStatus::of(&meta);
            self.hashed(full, &meta, status, buffer).fingerprint
        } else {
            self.marker(full, &meta)
        })
    }

    /// A regular file's fingerprint, read now.
    fn hashed(
        &self,
        full: &Path,
        meta: &std::fs::Metadata,
        status: FileStatus,
        buffer: &mut Vec<u8>,
    ) -> KeptFile {
        let moment = SystemTime::now();
        let executable = if meta.permissions().mode() & 0o111 != 0 {
            "x"
        } else {
            "-"
        };
        let fingerprint = match self.content_hash(full, buffer) {
            Some(hash) => format!("file:{executable}:{hash}"),
            // Unreadable (or vanished meanwhile): the path still counts as touched.
            None => "unreadable".to_owned(),
        };
        KeptFile {
            settled: status.settled_at(moment) && fingerprint != "unreadable",
            status,
            fingerprint,
        }
    }

    /// What stands for a path that is not a regular file.
    fn marker(&self, full: &Path, meta: &std::fs::Metadata) -> String {
        if meta.is_dir() {
            "directory".to_owned()
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(full).unwrap_or_default();
            format!("link:{}", target.display())
        } else {
            // A FIFO or socket: never opened (a FIFO would block).
            "special".to_owned()
        }
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
}

#[cfg(test)]
mod tests {
    use super::super::tests::repo;
    use super::*;

    #[test]
    fn a_file_counts_as_settled_only_well_after_its_last_change() {
        let status = |seconds: i64| FileStatus {
            size: 1,
            modified: (seconds, 0),
            changed: (seconds, 0),
            inode: (1, 1),
            mode: 0o644,
        };
        let at = |seconds: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
        assert!(status(100).settled_at(at(103)));
        assert!(!status(100).settled_at(at(102)));
        assert!(!status(-5).settled_at(at(103)));
    }

    #[test]
    fn a_kept_fingerprint_stands_only_while_the_file_is_settled_and_unchanged() {
        let Some((dir, repo)) = repo() else { return };
        std::fs::write(dir.path().join("a.txt"), "changed\n").unwrap();
        let paths = || vec![OsString::from("a.txt")];
        let mut kept = Kept::default();
        let real = repo.fingerprints(paths(), &mut kept)["a.txt"].clone();
        // Just written: not settled, so read again next time.
        assert!(!kept.0[OsStr::new("a.txt")].settled);
        let forged = |kept: &mut Kept, settled: bool| {
            let file = kept.0.get_mut(OsStr::new("a.txt")).unwrap();
            file.fingerprint = "forged".to_owned();
            file.settled = settled;
        };
        forged(&mut kept, false);
        assert_eq!(repo.fingerprints(paths(), &mut kept)["a.txt"], real);
        // Settled and unchanged: the kept fingerprint stands, the file is not read.
        forged(&mut kept, true);
        assert_eq!(repo.fingerprints(paths(), &mut kept)["a.txt"], "forged");
        // Any change of its status (here its size) reads it again.
        std::fs::write(dir.path().join("a.txt"), "changed again\n").unwrap();
        let again = repo.fingerprints(paths(), &mut kept)["a.txt"].clone();
        assert_ne!(again, "forged");
        assert_ne!(again, real);
        // Only the paths of the last scan are kept.
        assert_eq!(repo.fingerprints(Vec::new(), &mut kept).len(), 0);
        assert!(kept.0.is_empty());
    }
}
