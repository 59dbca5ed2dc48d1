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

use super::super::remote::{CLAIMS, FLEET, fleet_seen, seen_prefix};
use super::super::{Repo, check, fed, refs};
use super::{FETCH_PLAIN, copy_reachable, ref_in, transaction_line};

/// A ref change in this clone: its name, new value (empty: deleted) and old value (empty: it
/// does not exist).
type Change = (String, String, String);

impl Repo {
    /// Fetches `specs`, every claim and the fleet's records; what is gone from the remote is
    /// forgotten.
    pub(in crate::git) fn fetch_specs(&self, remote: &str, specs: &[String]) -> Result<(), String> {
        let claims_spec = format!("+{CLAIMS}/*:{}", seen_prefix(remote));
        let fleet_spec = format!("+{FLEET}/*:{}/*", fleet_seen(remote));
        let all = [specs, &[claims_spec, fleet_spec]].concat();
        if self.fetch_nearby(remote, &all) {
            return Ok(()); // Read from a bare remote on this machine.
        }
        // A worker fetches often, each fetch a handful of objects: git's housekeeping is left
        // to the user's own commands rather than run after each one.
        let mut args = vec![
            "-c",
            "maintenance.auto=false",
            "-c",
            "gc.auto=0",
            "fetch",
            "-q",
            "--prune",
            "--no-tags",
            remote,
        ];
        args.extend(all.iter().map(String::as_str));
        // A ref of this clone changed under the fetch (by a git of a worker killed a moment
        // ago, or another thread's fetch): fetched again, from what it is now.
        let fetch = || check(self.remote_run(&args), &format!("git fetch {remote}")).map(drop);
        (0..2).fold(fetch(), |done, _| match done {
            Err(why) if why.contains("cannot lock ref") => fetch(),
            done => done,
        })
    }

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
        let (known, here): (Vec<&str>, _) = (
            known.iter().map(String::as_str).collect(),
            self.common_dir(),
        );
        if !wanted.is_empty() && !copy_reachable(self.root(), (&dir, &here), &wanted, &known) {
            return false;
        }
        let command: String = (changes.iter())
            .map(|(name, new, old)| transaction_line(name, new, old))
            .collect();
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
