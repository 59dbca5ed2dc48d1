//! Fetches from a bare remote on this machine made by reading it: its refs read from its files,
//! the objects this clone lacks copied in as the loose object files they are (named by their
//! content, so a copy is all a fetch does with one), then this clone's refs changed in one
//! `update-ref --stdin` transaction. Two git processes, where `git fetch` starts four and
//! negotiates between them: every worker of a fleet on one machine fetches at the same moment,
//! right after each landing. Anything this cannot do as a fetch would (an object the remote
//! keeps in a pack, a ref format of another kind, a clone that is shallow, partial or checks
//! what it receives) is left to `git fetch`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::super::{Repo, fed, git_command, refs};
use super::{FETCH_PLAIN, copy_object, ref_in};

/// A ref change in this clone: its name, new value (empty: deleted) and old value (empty: it
/// does not exist).
type Change = (String, String, String);

impl Repo {
    /// Fetches the forced refspecs `specs` (`+SRC:DST`, both ending in `*` or neither) from
    /// `remote` with `--prune`, as `git fetch` would, by reading the remote when it is a bare
    /// repository on this machine: `false` when it cannot be done so (and nothing was changed
    /// but objects copied in).
    pub(in crate::git) fn fetch_nearby(&self, remote: &str, specs: &[String]) -> bool {
        let Some(dir) = self.fetchable_remote(remote) else {
            return false;
        };
        let Some((changes, known)) = changes_from(&dir, &self.common_dir(), specs) else {
            return false;
        };
        if changes.is_empty() {
            return true;
        }
        let wanted: Vec<&str> = (changes.iter())
            .map(|(_, new, _)| new.as_str())
            .filter(|new| !new.is_empty())
            .collect();
        if !wanted.is_empty() && !self.copy_objects_from(&dir, &wanted, &known) {
            return false;
        }
        let mut command = String::new();
        for (name, new, old) in &changes {
            command.push_str(&match (new.is_empty(), old.is_empty()) {
                (true, _) => format!("delete {name} {old}\n"),
                (false, true) => format!("create {name} {new}\n"),
                (false, false) => format!("update {name} {new} {old}\n"),
            });
        }
        let updated = fed(self.command(&["update-ref", "--stdin"]), command.as_bytes());
        updated.is_ok_and(|output| output.status.success())
    }

    /// The git directory of `remote` when it can be fetched from by reading it: one that
    /// can be written so (bare, SHA-1, no hook or setting of what it receives or sends), and
    /// this clone neither shallow nor partial, checking nothing of what it fetches, and with no
    /// extension of its repository format (as `Repo::local_remote` found).
    fn fetchable_remote(&self, remote: &str) -> Option<PathBuf> {
        let dir = self.copyable_remote(remote)?;
        let key = (self.common_dir(), remote.to_owned());
        let plain = (FETCH_PLAIN.lock().ok()?.iter())
            .find(|(each, _)| *each == key)
            .and_then(|(_, dir)| dir.clone());
        plain.filter(|plain| *plain == dir)
    }

    /// Copies into this clone every object reachable from the remote's commits `wanted` that
    /// the commits `known` (this clone's values of the refs fetched) do not reach, listed by
    /// the remote (`dir`): `false` when one is not a loose object there or cannot be copied.
    fn copy_objects_from(&self, dir: &Path, wanted: &[&str], known: &[String]) -> bool {
        let mut input = String::new();
        for sha in wanted {
            input.push_str(sha);
            input.push('\n');
        }
        for sha in known {
            input.push('^');
            input.push_str(sha);
            input.push('\n');
        }
        let at = format!("--git-dir={}", dir.display());
        let args = [
            at.as_str(),
            "rev-list",
            "--objects",
            "--no-object-names",
            "--ignore-missing",
            "--stdin",
        ];
        let listed = fed(git_command(self.root(), &args), input.as_bytes());
        let Some(listed) = listed
            .ok()
            .filter(|output| output.status.success())
            .map(|output| output.stdout)
        else {
            return false;
        };
        let (from, to) = (dir.join("objects"), self.common_dir().join("objects"));
        String::from_utf8_lossy(&listed)
            .lines()
            .all(|oid| copy_object(&from, &to, oid.trim()).is_ok())
    }
}

/// What fetching `specs` from the remote whose git directory is `there` changes in the clone
/// whose shared git directory is `here`, and the clone's values of those refs now (what it
/// has already); `None` when the files cannot tell, a spec is not one of the forms fetched
/// so, or a ref named whole is not on the remote (`git fetch` says so).
fn changes_from(there: &Path, here: &Path, specs: &[String]) -> Option<(Vec<Change>, Vec<String>)> {
    let mut changes = Vec::new();
    let mut known = Vec::new();
    let mut made = BTreeSet::new();
    let mut pruned = Vec::new();
    for spec in specs {
        let (src, dst) = spec.strip_prefix('+')?.split_once(':')?;
        let (theirs, ours) = match (src.strip_suffix('*'), dst.strip_suffix('*')) {
            (Some(src), Some(dst)) => {
                let theirs = refs::listed(there, &[], src)?;
                let theirs: Vec<(String, String)> = (theirs.into_iter())
                    .map(|(name, sha)| (format!("{dst}{}", &name[src.len()..]), sha))
                    .collect();
                let ours = refs::listed(here, &[], dst)?;
                pruned.extend(ours.iter().map(|(name, old)| (name.clone(), old.clone())));
                (theirs, ours)
            }
            (None, None) => {
                let sha = ref_in(there, src).filter(|sha| !sha.is_empty())?;
                let old = ref_in(here, dst)?;
                let ours = if old.is_empty() {
                    Vec::new()
                } else {
                    vec![(dst.to_owned(), old)]
                };
                (vec![(dst.to_owned(), sha)], ours)
            }
            _ => return None,
        };
        for (name, sha) in theirs {
            let old = (ours.iter().find(|(each, _)| *each == name))
                .map_or(String::new(), |(_, old)| old.clone());
            if old != sha {
                changes.push((name.clone(), sha, old));
            }
            made.insert(name);
        }
        known.extend(ours.into_iter().map(|(_, sha)| sha));
    }
    // `--prune`: a ref of this clone's under a spec's folder that the remote no longer has.
    for (name, old) in pruned {
        if !made.contains(&name) {
            changes.push((name, String::new(), old));
        }
    }
    known.sort();
    known.dedup();
    Some((changes, known))
}
