//! Refs read from the files git keeps them in (`HEAD`, loose refs, `packed-refs`), without a
//! git process: ralph reads HEAD and its task branches after every step, and a process costs
//! far more than a file. A repository whose refs live elsewhere (the reftable format) is asked
//! through git.

use std::path::{Path, PathBuf};

use super::Repo;

/// What the ref files say of a ref.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Read {
    /// The commit (or object) it points to.
    Found(String),
    /// It does not exist.
    Absent,
    /// The files cannot tell (another ref format, a symbolic ref, an unreadable file): ask git.
    Unknown,
}

impl Repo {
    /// HEAD's commit, read from `HEAD`, the loose ref or `packed-refs`.
    pub(super) fn head_oid(&self) -> Option<String> {
        let head = std::fs::read_to_string(self.git_dir.join("HEAD")).ok()?;
        let head = head.trim_end();
        let Some(name) = head.strip_prefix("ref: ") else {
            return is_oid(head).then(|| head.to_owned());
        };
        match self.read_ref(name) {
            Read::Found(oid) => Some(oid),
            Read::Absent | Read::Unknown => None,
        }
    }

    /// The branch HEAD names, read from the `HEAD` file: `Some(None)` on a detached HEAD;
    /// `None` when the file cannot tell (another ref format): git is asked.
    pub(super) fn head_branch(&self) -> Option<Option<String>> {
        if self.common_dir().join("reftable").exists() {
            return None;
        }
        let head = std::fs::read_to_string(self.git_dir.join("HEAD")).ok()?;
        let head = head.trim_end();
        match head.strip_prefix("ref: ") {
            Some(name) => {
                Some(name.strip_prefix("refs/heads/").map(str::to_owned)).filter(Option::is_some)
            }
            None => is_oid(head).then_some(None),
        }
    }

    /// The ref `name` (`refs/heads/…`), as its files say.
    pub(super) fn read_ref(&self, name: &str) -> Read {
        read_in(&[&self.git_dir], &self.common_dir(), name)
    }

    /// Whether any ref starts with `prefix` (`refs/heads/ralph/`), as the loose ref files and
    /// `packed-refs` say; `None` when the files cannot tell (another ref format).
    pub(super) fn has_refs_under(&self, prefix: &str) -> Option<bool> {
        let common = self.common_dir();
        if common.join("reftable").exists() {
            return None;
        }
        if has_file_below(&common.join(prefix))? {
            return Some(true);
        }
        match std::fs::read_to_string(common.join("packed-refs")) {
            Ok(text) => Some(text.lines().any(|line| {
                line.split_once(' ')
                    .is_some_and(|(_, name)| name.starts_with(prefix))
            })),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Some(false),
            Err(_) => None,
        }
    }

    /// The directory shared by every work tree of the repository (refs, objects).
    pub(super) fn common_dir(&self) -> PathBuf {
        match std::fs::read_to_string(self.git_dir.join("commondir")) {
            Ok(text) => self.git_dir.join(text.trim_end()),
            Err(_) => self.git_dir.clone(),
        }
    }
}

/// The ref `name` as the files of a repository say: looked for in the git directories `own`
/// (a worktree's), then in its shared one, `common`, and its `packed-refs`.
pub(super) fn read_in(own: &[&Path], common: &Path, name: &str) -> Read {
    if common.join("reftable").exists() {
        return Read::Unknown;
    }
    for dir in own.iter().copied().chain([common]) {
        match std::fs::read_to_string(dir.join(name)) {
            Ok(text) => {
                let oid = text.trim_end();
                return if is_oid(oid) {
                    Read::Found(oid.to_owned())
                } else {
                    Read::Unknown
                };
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            // A folder where the ref would be (`refs/heads/a` when `a/b` exists), or a file
            // that cannot be read.
            Err(_) => return Read::Unknown,
        }
    }
    let packed = match std::fs::read_to_string(common.join("packed-refs")) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Read::Absent,
        Err(_) => return Read::Unknown,
    };
    packed
        .lines()
        .find_map(|line| {
            let (oid, reference) = line.split_once(' ')?;
            (reference == name && is_oid(oid)).then(|| Read::Found(oid.to_owned()))
        })
        .unwrap_or(Read::Absent)
}

/// The refs named `names` and those under `prefix` (`refs/ralph/claims/`) of the repository
/// whose shared git directory is `common`, as `(name, commit)` in name order (as `git
/// ls-remote` lists them), read from its files; `None` when the files cannot tell (another ref
/// format, a symbolic ref, an unreadable file). Loose refs are read before `packed-refs`: git
/// writes `packed-refs` before it removes the loose refs it packed, so no ref is missed.
pub(super) fn listed(common: &Path, names: &[&str], prefix: &str) -> Option<Vec<(String, String)>> {
    if common.join("reftable").exists() {
        return None;
    }
    let mut found = std::collections::BTreeMap::new();
    for name in names {
        match std::fs::read_to_string(common.join(name)) {
            Ok(text) => {
                found.insert((*name).to_owned(), oid_in(&text)?);
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return None,
        }
    }
    loose_below(common, prefix.trim_end_matches('/'), &mut found)?;
    let packed = match std::fs::read_to_string(common.join("packed-refs")) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(_) => return None,
    };
    for line in packed.lines() {
        let Some((oid, name)) = line.split_once(' ') else {
            continue;
        };
        let wanted = names.contains(&name) || name.starts_with(prefix);
        if wanted && is_oid(oid) && !found.contains_key(name) {
            found.insert(name.to_owned(), oid.to_owned());
        }
    }
    Some(found.into_iter().collect())
}

/// The loose refs in folder `dir` of `common` and below it, into `found`; `None` when one
/// cannot be read or is not a commit's name. Lock files of refs being written are no refs.
fn loose_below(
    common: &Path,
    dir: &str,
    found: &mut std::collections::BTreeMap<String, String>,
) -> Option<()> {
    let entries = match std::fs::read_dir(common.join(dir)) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Some(()),
        Err(_) => return None,
    };
    for entry in entries {
        let entry = entry.ok()?;
        let name = format!("{dir}/{}", entry.file_name().to_str()?);
        if entry.file_type().ok()?.is_dir() {
            loose_below(common, &name, found)?;
        } else if !name.ends_with(".lock") {
            match std::fs::read_to_string(entry.path()) {
                Ok(text) => {
                    found.insert(name, oid_in(&text)?);
                }
                // Removed since the folder was read.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => return None,
            }
        }
    }
    Some(())
}

/// The commit a loose ref file names; `None` for a symbolic ref or anything else.
fn oid_in(text: &str) -> Option<String> {
    let oid = text.trim_end();
    is_oid(oid).then(|| oid.to_owned())
}

/// Whether the folder `dir` holds a file at any depth (`Some(false)` when it does not exist);
/// `None` when a folder cannot be read.
fn has_file_below(dir: &std::path::Path) -> Option<bool> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Some(false),
        Err(_) => return None,
    };
    for entry in entries {
        let entry = entry.ok()?;
        if !entry.file_type().ok()?.is_dir() || has_file_below(&entry.path())? {
            return Some(true);
        }
    }
    Some(false)
}

pub(super) fn is_oid(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_read_from_files_agree_with_git() {
        let Some((_dir, repo)) = super::super::tests::repo() else {
            return;
        };
        let head = repo.resolve("HEAD").unwrap();
        assert_eq!(repo.head_oid().as_deref(), Some(head.as_str()));
        assert!(repo.run(&["branch", "loose"]).is_ok());
        assert_eq!(repo.read_ref("refs/heads/loose"), Read::Found(head.clone()));
        assert!(repo.run(&["branch", "packed"]).is_ok());
        assert!(repo.run(&["pack-refs", "--all"]).is_ok());
        assert_eq!(repo.read_ref("refs/heads/packed"), Read::Found(head));
        assert_eq!(repo.read_ref("refs/heads/none"), Read::Absent);
        assert_eq!(repo.has_refs_under("refs/heads/ralph/"), Some(false));
        assert_eq!(repo.has_refs_under("refs/heads/pack"), Some(true), "packed");
        assert!(repo.has_branch("packed") && !repo.has_branch("none"));
        // `refs/heads/ralph` is a folder once `ralph/x` exists: git is asked.
        assert!(repo.run(&["branch", "ralph/x"]).is_ok());
        assert_eq!(repo.read_ref("refs/heads/ralph"), Read::Unknown);
        assert_eq!(
            repo.has_refs_under("refs/heads/ralph/"),
            Some(true),
            "loose"
        );
        assert!(!repo.has_branch("ralph"));
        let git_says = repo
            .run(&["symbolic-ref", "--short", "HEAD"])
            .unwrap()
            .stdout;
        let git_says = String::from_utf8_lossy(&git_says).trim().to_owned();
        assert_eq!(repo.head_branch(), Some(Some(git_says)));
        assert!(repo.run(&["checkout", "-q", "--detach"]).is_ok());
        assert_eq!(repo.head_branch(), Some(None));
        assert_eq!(repo.current_branch(), None);
    }

    #[test]
    fn refs_listed_from_files_are_those_git_lists() {
        let Some((_dir, repo)) = super::super::tests::repo() else {
            return;
        };
        let head = repo.resolve("HEAD").unwrap();
        let git_lists = |prefix: &str| {
            let output =
                (repo.run(&["for-each-ref", "--format=%(refname) %(objectname)", prefix])).unwrap();
            (String::from_utf8_lossy(&output.stdout).lines())
                .filter_map(|line| line.split_once(' '))
                .map(|(name, sha)| (name.to_owned(), sha.to_owned()))
                .collect::<Vec<_>>()
        };
        let common = repo.common_dir();
        let claims = "refs/ralph/claims/";
        assert_eq!(listed(&common, &[], claims), Some(Vec::new()));
        for name in ["b", "a", "deep/c", "packed"] {
            let name = format!("{claims}{name}");
            assert!(repo.run(&["update-ref", &name, &head]).is_ok());
        }
        assert!(repo.run(&["pack-refs", "--all"]).is_ok());
        // Loose again after packing, and one loose only; a lock file is no ref.
        let other = repo
            .run(&["commit-tree", "HEAD^{tree}", "-m", "x"])
            .unwrap()
            .stdout;
        let other = String::from_utf8_lossy(&other).trim().to_owned();
        assert!(
            repo.run(&["update-ref", "refs/ralph/claims/a", &other])
                .is_ok()
        );
        assert!(
            repo.run(&["update-ref", "refs/ralph/claims/e", &other])
                .is_ok()
        );
        std::fs::write(
            common.join("refs/ralph/claims/f.lock"),
            format!("{other}\n"),
        )
        .unwrap();
        let from_files = listed(&common, &["refs/heads/nothing"], claims).unwrap();
        assert_eq!(from_files, git_lists(claims));
        assert_eq!(from_files.len(), 5);
        // A name asked for by itself, beside the prefix.
        let branch = repo.current_branch().unwrap();
        let head_ref = format!("refs/heads/{branch}");
        let both = listed(&common, &[&head_ref], claims).unwrap();
        assert_eq!(both.first(), Some(&(head_ref, head)));
        // A symbolic ref is not read from the files.
        assert!(
            repo.run(&["symbolic-ref", "refs/ralph/claims/s", "refs/ralph/claims/a"])
                .is_ok()
        );
        assert_eq!(listed(&common, &[], claims), None);
    }
}
