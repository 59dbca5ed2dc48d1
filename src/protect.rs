//! Paths the agent may read but not change: `--protect GLOB` (config `protect`, a task's own
//! `protect:`), less what its task may change (`may_change:`). Patterns are globs relative to
//! the repository's top: `*` stays within a folder, `**` crosses folders, and a pattern naming a
//! folder (`tests`, `tests/`) covers everything in it.

use std::path::{Path, PathBuf};

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

/// The protected paths of a loop (or of one task in it).
#[derive(Clone, Debug)]
pub(crate) struct Protection {
    guarded: GlobSet,
    allowed: GlobSet,
    /// The patterns as given, for mounts and messages.
    patterns: Vec<String>,
}

impl Protection {
    /// The protection `protect` asks for, but for `may_change`; none when nothing is protected.
    pub(crate) fn new(protect: &[String], may_change: &[String]) -> Result<Option<Self>, String> {
        let patterns: Vec<String> = protect
            .iter()
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .collect();
        if patterns.is_empty() {
            return Ok(None);
        }
        Ok(Some(Self {
            guarded: set(&patterns)?,
            allowed: set(may_change)?,
            patterns,
        }))
    }

    /// Whether `path` (repository-relative) is protected and not one its task may change.
    pub(crate) fn guards(&self, path: &str) -> bool {
        self.guarded.is_match(path) && !self.allowed.is_match(path)
    }

    /// The existing paths under `top` a sandbox mounts read-only: for each pattern, the longest
    /// folder (or file) it names before its first wildcard. A pattern that begins with a
    /// wildcard (`*.lock`) has none: the check after each iteration covers it.
    pub(crate) fn roots(&self, top: &Path) -> Vec<PathBuf> {
        let mut roots: Vec<PathBuf> = self
            .patterns
            .iter()
            .filter_map(|pattern| literal_root(pattern))
            .map(|root| top.join(root))
            .filter(|path| path.exists())
            .collect();
        roots.sort();
        roots.dedup();
        roots
    }
}

/// Refuses a pattern that is not a glob, naming it.
pub(crate) fn check(patterns: &[String], flag: &str) -> Result<(), String> {
    for pattern in patterns {
        glob(pattern.trim())
            .map_err(|why| format!("{flag} '{pattern}' is not a glob ({why}); e.g. 'tests/**'"))?;
    }
    Ok(())
}

/// What a task protects besides the run's (`protect:`) and what its work may change
/// (`may_change:`), as patterns.
pub(crate) fn of_task(task: &crate::storage::tasks::Task) -> (Vec<String>, Vec<String>) {
    use crate::storage::tasks::{MAY_CHANGE, PROTECT};
    (
        list(task.property(PROTECT)),
        list(task.property(MAY_CHANGE)),
    )
}

/// A task's list property (`may_change: tests/api/**, docs/`), as patterns.
pub(crate) fn list(property: Option<&str>) -> Vec<String> {
    property
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The patterns as one set; a folder's pattern covers what is in it.
fn set(patterns: &[String]) -> Result<GlobSet, String> {
    let mut builder = GlobSetBuilder::new();
    for pattern in patterns {
        let pattern = pattern.trim().trim_start_matches("./");
        if pattern.is_empty() {
            continue;
        }
        let bare = pattern.trim_end_matches('/');
        builder.add(glob(bare)?);
        builder.add(glob(&format!("{bare}/**"))?);
    }
    builder.build().map_err(|err| err.to_string())
}

fn glob(pattern: &str) -> Result<Glob, String> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|err| err.kind().to_string())
}

/// Whether two lists of path globs (`touches:`) may name a path in common: a pattern that
/// starts with a wildcard may name anything; otherwise the folders (or files) the two name
/// before their wildcards overlap when one is the other or holds it. Erring toward "they do".
pub(crate) fn overlap(a: &[String], b: &[String]) -> bool {
    a.iter().any(|one| {
        b.iter()
            .any(|other| match (literal_root(one), literal_root(other)) {
                (Some(one), Some(other)) => within(&one, &other) || within(&other, &one),
                _ => true,
            })
    })
}

/// Whether `path` is `folder` or inside it (whole components).
fn within(path: &str, folder: &str) -> bool {
    path == folder
        || path
            .strip_prefix(folder)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The part of `pattern` before its first wildcard, cut back to a whole path component.
fn literal_root(pattern: &str) -> Option<String> {
    let pattern = pattern
        .trim()
        .trim_start_matches("./")
        .trim_end_matches('/');
    let wild = pattern.find(['*', '?', '[', '{']);
    let literal = match wild {
        None => pattern,
        Some(at) => pattern[..at].rsplit_once('/').map_or("", |(dir, _)| dir),
    };
    (!literal.is_empty() && !literal.split('/').any(|part| part == ".."))
        .then(|| literal.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| (*item).to_owned()).collect()
    }

    #[test]
    fn globs_guard_their_paths_and_folders_everything_in_them() {
        let protection = Protection::new(&strings(&["tests/**", "scripts/verify.sh", "ci"]), &[])
            .unwrap()
            .unwrap();
        for path in [
            "tests/a.rs",
            "tests/deep/b.rs",
            "scripts/verify.sh",
            "ci/run",
        ] {
            assert!(protection.guards(path), "{path}");
        }
        for path in ["src/tests.rs", "scripts/other.sh", "tests.md", "cinema/x"] {
            assert!(!protection.guards(path), "{path}");
        }
        // `*` stays within a folder.
        let star = Protection::new(&strings(&["*.lock"]), &[])
            .unwrap()
            .unwrap();
        assert!(star.guards("Cargo.lock") && !star.guards("sub/Cargo.lock"));
    }

    #[test]
    fn what_a_task_may_change_is_left_to_it() {
        let protection = Protection::new(
            &strings(&["tests/**"]),
            &list(Some("tests/api/**, tests/fixtures/new.json")),
        )
        .unwrap()
        .unwrap();
        assert!(!protection.guards("tests/api/users.rs"));
        assert!(!protection.guards("tests/fixtures/new.json"));
        assert!(protection.guards("tests/web/login.rs"));
    }

    #[test]
    fn nothing_protected_is_no_protection_and_a_bad_glob_is_named() {
        assert!(Protection::new(&strings(&[" "]), &[]).unwrap().is_none());
        let error = check(&strings(&["tests/[a"]), "--protect").unwrap_err();
        assert!(
            error.starts_with("--protect 'tests/[a' is not a glob"),
            "{error}"
        );
    }

    #[test]
    fn globs_overlap_when_one_names_what_the_other_holds() {
        let of = |items: &[&str]| strings(items);
        assert!(overlap(&of(&["src/api/**"]), &of(&["src/api/users.rs"])));
        assert!(overlap(
            &of(&["migrations/"]),
            &of(&["docs", "migrations/001.sql"])
        ));
        assert!(
            overlap(&of(&["*.lock"]), &of(&["docs/**"])),
            "a leading wildcard names anything"
        );
        assert!(!overlap(&of(&["src/api/**"]), &of(&["src/web/**", "docs"])));
        assert!(!overlap(&of(&["src/api"]), &of(&["src/apiary/x"])));
        assert!(!overlap(&[], &of(&["src/**"])));
    }

    #[test]
    fn a_sandbox_mounts_the_folder_or_file_each_pattern_names() {
        assert_eq!(literal_root("tests/**").as_deref(), Some("tests"));
        assert_eq!(
            literal_root("./tests/unit/*.rs").as_deref(),
            Some("tests/unit")
        );
        assert_eq!(
            literal_root("scripts/verify.sh").as_deref(),
            Some("scripts/verify.sh")
        );
        assert_eq!(literal_root("docs/").as_deref(), Some("docs"));
        assert_eq!(literal_root("*.lock"), None);
        assert_eq!(literal_root("../outside/**"), None);
        let dir = crate::testing::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("tests")).unwrap();
        let protection = Protection::new(&strings(&["tests/**", "missing/**"]), &[])
            .unwrap()
            .unwrap();
        assert_eq!(protection.roots(dir.path()), [dir.path().join("tests")]);
    }
}
