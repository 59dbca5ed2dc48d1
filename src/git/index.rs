//! Whether the index holds unmerged entries, read from the index file: every loop asks before
//! it starts, and the answer is almost always no. Only the entries' fixed fields and names are
//! walked (index versions 2 to 4); anything this reader does not know sends the question to git.

use super::Repo;

/// An entry's flags: its merge stage (bits 12–13) and whether an extended flags field follows.
const STAGE_BITS: u16 = 0x3000;
const EXTENDED: u16 = 0x4000;
/// ctime, mtime, dev, ino, mode, uid, gid, size: ten 32-bit fields before the object id.
const STAT_FIELDS: usize = 40;

impl Repo {
    /// `Some(true)` when the index has an entry at a merge stage other than 0 (a conflict not
    /// resolved), `Some(false)` when none has; `None` when the file cannot tell.
    pub(super) fn index_has_unmerged(&self) -> Option<bool> {
        let bytes = match std::fs::read(self.git_dir.join("index")) {
            Ok(bytes) => bytes,
            // No index yet: nothing is unmerged.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Some(false),
            Err(_) => return None,
        };
        let oid_len = self.object_id_len()?;
        unmerged_in(&bytes, oid_len)
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

/// Walks the index `bytes` (object ids `oid_len` long) for an unmerged entry.
fn unmerged_in(bytes: &[u8], oid_len: usize) -> Option<bool> {
    if bytes.get(..4)? != b"DIRC" {
        return None;
    }
    let version = be32(bytes, 4)?;
    let count = be32(bytes, 8)?;
    let mut at = 12;
    for _ in 0..count {
        let flags_at = at + STAT_FIELDS + oid_len;
        let flags = u16::from_be_bytes(bytes.get(flags_at..flags_at + 2)?.try_into().ok()?);
        if flags & STAGE_BITS != 0 {
            return Some(true);
        }
        let mut name_at = flags_at + 2;
        if flags & EXTENDED != 0 {
            name_at += 2;
        }
        at = match version {
            // The name, then 1 to 8 NULs padding the entry to a multiple of eight bytes.
            2 | 3 => {
                let name_len = bytes.get(name_at..)?.iter().position(|&b| b == 0)?;
                at + ((name_at - at + name_len + 8) & !7)
            }
            // A variable-length count of bytes to drop from the previous name, then the rest
            // of the name and one NUL.
            4 => {
                let mut i = name_at;
                while bytes.get(i)? & 0x80 != 0 {
                    i += 1;
                }
                let rest = bytes.get(i + 1..)?.iter().position(|&b| b == 0)?;
                i + 1 + rest + 1
            }
            _ => return None,
        };
    }
    // A split index keeps entries in a shared file too: git is asked.
    let extension = bytes.get(at..at + 4)?;
    (extension != b"link").then_some(false)
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
            assert!(git(&["merge", "--abort"]));
        }
        // An intent-to-add entry sets the extended flags (version 3).
        std::fs::write(dir.path().join("new.txt"), "new\n").unwrap();
        assert!(git(&["add", "-N", "new.txt"]));
        assert_eq!(repo.index_has_unmerged(), Some(false));
    }

    #[test]
    fn an_index_this_reader_does_not_know_is_left_to_git() {
        assert_eq!(unmerged_in(b"", 20), None);
        assert_eq!(unmerged_in(b"DIRC\0\0\0\x09\0\0\0\0", 20), None);
        // One entry announced, none there.
        assert_eq!(unmerged_in(b"DIRC\0\0\0\x02\0\0\0\x01", 20), None);
        let empty = b"DIRC\0\0\0\x02\0\0\0\0TREE";
        assert_eq!(unmerged_in(empty, 20), Some(false));
        assert_eq!(unmerged_in(b"DIRC\0\0\0\x02\0\0\0\0link", 20), None);
    }
}
