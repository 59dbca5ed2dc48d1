//! A claim that took is checked on a fresh look at the remote before its task runs: a fetch
//! reads the remote's refs one by one, so the view the task was picked from may predate a merge
//! that landed it, or another worker's claim on a task touching the same files.

use crate::event::{Notice, WaitReason};
use crate::git::{CLAIMS, Update, claim_ref};
use crate::run::wait;
use crate::storage::tasks::Task;

use super::super::base;
use super::pick::{is_stale, overlapping_claim, overlapping_task};
use super::{Session, integrate};

impl Session<'_> {
    /// Whether the task just claimed (its claim: `sha`, taking `over` another's or not) is
    /// still this worker's to run: not done on the base meanwhile, and no other live claim on a
    /// task touching the same files. If not, the claim is dropped.
    pub(super) fn runs_what_it_claimed(
        &mut self,
        id: &str,
        task: &Task,
        (sha, over): (&str, bool),
    ) -> anyhow::Result<bool> {
        // A fetch reads the remote's refs one by one: the base may have been read before a
        // merge that landed the task and deleted its claim, the claims after. Now that the claim
        // is this worker's, that merge is over: one `ls-remote` shows whether the base moved
        // since, and every claim made before this one. A claim taken over, or a moved base, is
        // fetched again (the branch pushed under a stale claim may have grown meanwhile).
        let other = match (!over).then(|| self.claims_on_unmoved_base()).flatten() {
            Some(held) => {
                let list = self.site.list()?;
                overlapping_task(&list, held.iter().map(String::as_str), (id, task))
            }
            None => {
                self.site.fetch()?;
                if !self.still_to_do(id) {
                    self.drop_claim(id, sha);
                    self.sink.notice(Notice::ClaimRaceLost { task: id });
                    return Ok(false);
                }
                let (list, claims) = (
                    self.site.list()?,
                    self.site.repo.seen_claims(&self.site.remote),
                );
                let now = (crate::model::now(), self.config.options.claim_ttl);
                overlapping_claim(&list, &claims, (id, task), now)
            }
        };
        if let Some(other) = other {
            self.drop_claim(id, sha);
            self.sink.notice(Notice::TouchesWait {
                task: id,
                behind: &other,
                reason: WaitReason::Touches,
            });
            self.lost_races += 1;
            // Apart from the other worker, which may have given way too.
            wait::pause(
                self.stop,
                integrate::backoff(u32::try_from(self.lost_races).unwrap_or(8)),
            );
            return Ok(false);
        }
        Ok(true)
    }

    /// The tasks of the live claims on the remote now, by one `git ls-remote`, when its base
    /// is still the one last fetched: a claim made or changed since the fetch counts as live,
    /// one the fetch saw as it is as that fetch saw it. `None` when the base moved (or the look
    /// failed): then only a fetch tells.
    fn claims_on_unmoved_base(&self) -> Option<Vec<String>> {
        let (repo, remote) = (&self.site.repo, &self.site.remote);
        let now = self.site.refs_now().ok()?;
        let fetched = repo.resolve(&self.site.base_ref())?;
        let base = format!("refs/heads/{}", self.site.base);
        if !(now.iter()).any(|(name, sha)| *name == base && *sha == fetched) {
            return None;
        }
        let seen = repo.seen_claims(remote);
        let (at, ttl) = (crate::model::now(), self.config.options.claim_ttl);
        let prefix = format!("{CLAIMS}/");
        let live = (now.iter()).filter_map(|(name, sha)| {
            let id = name.strip_prefix(&prefix)?;
            let as_fetched = seen.iter().find(|s| s.id == id && s.sha == *sha);
            as_fetched
                .is_none_or(|seen| !is_stale(seen, at, ttl))
                .then(|| id.to_owned())
        });
        Some(live.collect())
    }

    /// After a lost claim race: the claims made on the remote since the last fetch, by one
    /// `git ls-remote` that fetches nothing, count as held, so that the next pick, made without
    /// fetching, does not race for them too; when the base moved, the next pick fetches.
    pub(super) fn held_meanwhile(&mut self) {
        let repo = &self.site.repo;
        let Ok(now) = self.site.refs_now() else {
            return;
        };
        let base = format!("refs/heads/{}", self.site.base);
        let fetched = repo.resolve(&self.site.base_ref());
        let moved = (now.iter()).any(|(name, sha)| *name == base && Some(sha) != fetched.as_ref());
        if moved {
            self.just_lost.clear();
            return;
        }
        let new = (self.claims_since_fetch(&now).into_iter())
            .filter(|(_, seen)| !seen)
            .map(|(id, _)| id.to_owned());
        self.just_lost.extend(new);
    }

    /// The claims on the remote `now` (as `git ls-remote` lists them) that the last fetch did
    /// not see as they are: each one's task, and whether the fetch saw a claim of it at all.
    pub(super) fn claims_since_fetch<'n>(
        &self,
        now: &'n [(String, String)],
    ) -> Vec<(&'n str, bool)> {
        let seen = self.site.repo.seen_claims(&self.site.remote);
        let prefix = format!("{CLAIMS}/");
        (now.iter())
            .filter_map(|(name, sha)| Some((name.strip_prefix(&prefix)?, sha)))
            .filter(|(id, sha)| !(seen.iter()).any(|s| s.id == *id && s.sha == **sha))
            .map(|(id, _)| (id, seen.iter().any(|s| s.id == id)))
            .collect()
    }

    /// Whether task `id` is still open in the base as last fetched.
    pub(super) fn still_to_do(&self, id: &str) -> bool {
        (self.site.list().ok())
            .and_then(|list| base::find(&list, id))
            .is_some_and(|task| task.status.is_to_do())
    }

    /// Deletes this worker's claim `claim` of task `id` on the remote, while it is still that.
    pub(super) fn drop_claim(&self, id: &str, claim: &str) {
        let update = Update {
            dst: claim_ref(id),
            new: None,
            expect: Some(claim),
        };
        let _ = self.site.repo.push(&self.site.remote, &[update]);
    }
}
