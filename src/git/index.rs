//! What the index holds, read from the index file: whether any entry is unmerged (every loop
//! asks before it starts, and the answer is almost always no), which paths are, and whether a
//! path is plainly tracked. Only the entries' fixed fields and names are walked (index versions
//! 2 to 4); anything this reader does not know sends the question to git.

use super::Repo;

/// An entry's flags: its merge stage (bits 12–13) and whether an extended flags field follows.
const STAGE_BITS: u16 = 0x3000;
const EXTENDED: u16 = 0x4000;
/// ctime, mtime, dev, ino, mode, uid, gid, size: ten 32-bit fields before the object id.
const STAT_FIELDS: usize = 40;

/// One index entry, as far as ralph needs it.
struct Entry<'a> {
    name: &'a [u8],
    /// The merge stage: 0 for a merged path, 1 to 3 for a conflict's sides.
    stage: u16,
    /// Extended flags are set (intent-to-add, skip-worktree).
    extended: bool,
}

impl Repo {
    /// `Some(true)` when the index has an entry at a merge stage other than 0 (a conflict not
    /// resolved), `Some(false)` when none has; `None` when the file cannot tell.
    pub(super) fn index_has_unmerged(&self) -> Option<bool> {
        let mut unmerged = false;
        self.walk_index(|entry| {
            unmerged |= entry.stage != 0;
            !unmerged
        })?;
        Some(unmerged)
    }

    /// The paths the index holds unmerged (each once, in the index's order); `None` when the
    /// file cannot tell.
    pub(super) fn index_unmerged_paths(&self) -> Option<Vec<String>> {
        let mut paths: Vec<String> = Vec::new();
        self.walk_index(|entry| {
            let name = String::from_utf8_lossy(entry.name);
            if entry.stage != 0 && paths.last().is_none_or(|last| *last != name) {
                paths.push(name.into_owned());
            }
            true
        })?;
        Some(paths)
    }

    /// Whether every one of `paths` (repository-relative) is in the index as a plain merged
    /// entry, so that `git commit -- PATHS` can take it without a `git add` first. `false` when
    /// the file cannot tell.
    pub(super) fn all_tracked(&self, paths: &[&str]) -> bool {
        let mut missing: Vec<&[u8]> = paths.iter().map(|path| path.as_bytes()).collect();
        let walked = self.walk_index(|entry| {
            if entry.stage == 0 && !entry.extended {
                missing.retain(|path| *path != entry.name);
            }
            !missing.is_empty()
        });
        walked.is_some() && missing.is_empty()
    }

    /// Calls `visit` with each entry of the index file until it returns `false`: `None` when
    /// the file cannot be read or walked (no index is an empty one).
    fn walk_index(&self, visit: impl FnMut(&Entry<'_>) -> bool) -> Option<()> {
        let bytes = match std::fs::read(self.git_dir.join("index")) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Some(()),
            Err(_) => return None,
        };
        let oid_len = self.object_id_len()?;
        walk(&bytes, oid_len, visit)
    }

    /// The length of the repository's object ids: 32 bytes with SHA-256, else 20.
    fn object_id_len(&self) -> Option<usize> {
        let config = std::fs::read_to_string(self.common_dir().join("config")).ok()?;
        let sha256 = config.lines().any(|line| {
            let line: String = line.chars().filter(|c| !c.is_whitespace()).collect();
            line.eq_ignore_ascii_case("objectformat=sha256")
        });
        Some(if sha256 { 32 } else { 20 })
    }
}

/// Walks the index `bytes` (object ids `oid_len` long), calling `visit` with each entry until
/// it returns `false`; `None` when the bytes are not an index this reader knows.
fn walk(bytes: &[u8], oid_len: usize, mut visit: impl FnMut(&Entry<'_>) -> bool) -> Option<()> {
    if bytes.get(..4)? != b"DIRC" {
        return None;
    }
    let version = be32(bytes, 4)?;
    let count = be32(bytes, 8)?;
    let mut at = 12;
    // Version 4 names each entry by what it keeps of the previous name.
    let mut name: Vec<u8> = Vec::new();
    for _ in 0..count {
        let flags_at = at + STAT_FIELDS + oid_len;
        let flags = u16::from_be_bytes(bytes.get(flags_at..flags_at + 2)?.try_into().ok()?);
        let mut name_at = flags_at + 2;
        if flags & EXTENDED != 0 {
            name_at += 2;
        }
        at = match version {
            // The name, then 1 to 8 NULs padding the entry to a multiple of eight bytes.
            2 | 3 => {
                let name_len = bytes.get(name_at..)?.iter().position(|&b| b == 0)?;
                name.clear();
                name.extend_from_slice(&bytes[name_at..name_at + name_len]);
                at + ((name_at - at + name_len + 8) & !7)
            }
            // A variable-length count of bytes to drop from the previous name, then the rest
            // of the name and one NUL.
            4 => {
                let (drop, rest_at) = varint(bytes, name_at)?;
                let rest = bytes.get(rest_at..)?.iter().position(|&b| b == 0)?;
                name.truncate(name.len().checked_sub(drop)?);
                name.extend_from_slice(&bytes[rest_at..rest_at + rest]);
                rest_at + rest + 1
            }
            _ => return None,
        };
        let entry = Entry {
            name: &name,
            stage: (flags & STAGE_BITS) >> 12,
            extended: flags & EXTENDED != 0,
        };
        if !visit(&entry) {
            return Some(());
        }
    }
    // A split index keeps entries in a shared file too: git is asked.
    let extension = bytes.get(at..at + 4)?;
    (extension != b"link").then_some(())
}

/// Git's offset varint (index version 4) at `at`: its value and where what follows starts.
fn varint(bytes: &[u8], mut at: usize) -> Option<(usize, usize)> {
    let mut byte = *bytes.get(at)?;
    let mut value = usize::from(byte & 0x7f);
    while byte & 0x80 != 0 {
        at += 1;
        byte = *bytes.get(at)?;
        value = value.checked_add(1)?.checked_shl(7)? | usize::from(byte & 0x7f);
    }
    Some((value, at + 1))
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::super::tests::repo;
    use super::*;

    #[test]
    fn the_index_file_says_what_git_says_of_unmerged_entries_in_every_version() {
        let Some((dir, repo)) = repo() else { return };
        let git = |args: &[&str]| repo.run(args).is_ok_and(|out| out.status.success());
        for (name, body) in [("deep/er/name-that-is-long.txt", "x\n"), ("z", "z\n")] {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, body).unwrap();
        }
        assert!(git(&["add", "-A"]) && git(&["commit", "-q", "-m", "more"]));
        assert!(git(&["checkout", "-q", "-b", "other"]));
        std::fs::write(dir.path().join("b.txt"), "other\n").unwrap();
        assert!(git(&["commit", "-q", "-am", "other"]));
        assert!(git(&["checkout", "-q", "-"]));
        std::fs::write(dir.path().join("b.txt"), "mine\n").unwrap();
        assert!(git(&["commit", "-q", "-am", "mine"]));
        for version in ["2", "3", "4"] {
            assert!(git(&["update-index", "--index-version", version]));
            assert_eq!(repo.index_has_unmerged(), Some(false), "version {version}");
            assert!(!git(&["merge", "-q", "other"]), "the merge conflicts");
            assert_eq!(repo.index_has_unmerged(), Some(true), "version {version}");
            assert_eq!(
                repo.index_unmerged_paths(),
                Some(vec!["b.txt".to_owned()]),
                "version {version}"
            );
            assert!(repo.all_tracked(&["deep/er/name-that-is-long.txt", "z"]));
            assert!(
                !repo.all_tracked(&["b.txt"]),
                "an unmerged path is not plainly tracked"
            );
            assert!(git(&["merge", "--abort"]));
        }
        // An intent-to-add entry sets the extended flags (version 3).
        std::fs::write(dir.path().join("new.txt"), "new\n").unwrap();
        assert!(git(&["add", "-N", "new.txt"]));
        assert_eq!(repo.index_has_unmerged(), Some(false));
        assert!(
            !repo.all_tracked(&["new.txt"]),
            "an intent to add is not tracked yet"
        );
        assert!(!repo.all_tracked(&["deep/er", "none.txt"]));
    }

    #[test]
    fn an_index_this_reader_does_not_know_is_left_to_git() {
        let walks = |bytes: &[u8]| walk(bytes, 20, |_| true);
        assert_eq!(walks(b""), None);
        assert_eq!(walks(b"DIRC\0\0\0\x09\0\0\0\0"), None);
        // One entry announced, none there.
        assert_eq!(walks(b"DIRC\0\0\0\x02\0\0\0\x01"), None);
        assert_eq!(walks(b"DIRC\0\0\0\x02\0\0\0\0TREE"), Some(()));
        assert_eq!(walks(b"DIRC\0\0\0\x02\0\0\0\0link"), None);
    }
}
