//! Workers' merge train: a worker whose task is done marks its claim ready with its branch's
//! pushed commit; the worker merging next lands every ready branch along with its own, in one
//! push that deletes each of their claims with a lease. A worker whose claim went that way finds
//! its task marked `[x]` on the base: merged, with nothing left to push.

use std::time::{Duration, Instant};

use crate::event::{LoopEvent, Notice};
use crate::git::{Repo, SeenClaim, Update, claim_ref};
use crate::storage::RalphDir;
use crate::storage::carry::Carried;
use crate::storage::identity::fingerprint;
use crate::storage::tasks::{TaskList, TaskStatus};

use super::super::base;
use super::pick;
use super::{Holder, Session, TaskEnd, planning};

/// The most branches of other workers one merge lands along with its own.
pub(super) const RIDERS_MAX: usize = 16;

/// How long a ready task waits for the merge of a worker that was ready before it (which lands
/// it too) before merging itself, and how often it looks.
const TRAIN_WAIT: Duration = Duration::from_secs(3);
const TRAIN_POLL: Duration = Duration::from_millis(100);
/// How often it looks at a remote on this machine, whose refs are read from its files.
const TRAIN_POLL_LOCAL: Duration = Duration::from_millis(40);

/// A ready task's place in the merge train, as last fetched.
struct TrainView {
    /// It is the first ready: its worker merges next.
    leads: bool,
    /// The claims of other workers' tasks that still run.
    running: Vec<String>,
    /// How many tasks are ready.
    waiting: usize,
    /// The refs whose moves change this: the base, its claim, and the first ready task's.
    watched: Vec<String>,
    /// The other workers of the live claims, by name.
    peers: Vec<String>,
}

impl TrainView {
    /// Whether the remote's refs moved, from `at` (as last fetched) to `now`, in a way that
    /// changes this view: the base, the worker's claim or the first ready one moved; or, for
    /// the first ready worker, lingering for the tasks still running, each of those moved
    /// (marked ready, or gone), so that it fetches once for all of them rather than once each.
    fn moved(&self, at: &[(String, String)], now: &[(String, String)]) -> bool {
        let find = |refs: &[(String, String)], name: &str| {
            (refs.iter())
                .find(|(each, _)| each == name)
                .map(|(_, sha)| sha.clone())
        };
        let changed = |name: &String| find(at, name) != find(now, name);
        (self.watched.iter()).any(changed)
            || (self.leads && !self.running.is_empty() && self.running.iter().all(changed))
    }
}

/// How a ready task's wait for the merge train ended.
pub(super) enum Waited {
    /// Its claim went: another worker's train landed it, or it was taken over.
    Gone,
    /// This worker merges it; `fetched`: the base, the claims and the task branches were
    /// fetched (or seen unchanged since) a moment ago, so the merge need not fetch them again.
    Merge { fetched: bool },
}

/// Another worker's finished task, ready to merge.
pub(super) struct Rider {
    pub(super) id: String,
    /// Its claim's commit on the remote: the push deletes the claim only while it is this.
    pub(super) claim: String,
    /// The branch's commit its claim marked ready.
    pub(super) commit: String,
    pub(super) text: String,
    /// Its notes and tasks carried into the base; its branch goes only when all were.
    pub(super) carried: Carried,
}

impl Session<'_> {
    /// Which of the free tasks the next pick takes: the first, unless this worker just lost the
    /// race for one; then one of them by the worker's name, so that workers spread apart.
    pub(super) fn spread(&self) -> usize {
        if self.lost_races == 0 {
            return self.place_among_peers();
        }
        let seed = (self.me.bytes()).fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3)
        });
        usize::try_from(seed >> 33).unwrap_or(0) + self.lost_races
    }

    /// This worker's place among the peers it saw waiting for a merge train (by name, which
    /// every one of them sees alike): right after a train lands they all pick at once, each
    /// the free task at its own place rather than every one the first. 0 with no peers.
    fn place_among_peers(&self) -> usize {
        pick::place_among(&self.me, &self.peers)
    }

    /// Marks the claim ready with the task branch's commit, so that another worker's merge can
    /// land it; the branch's commits the remote lacks (the task's last, which its loop left to
    /// this push) go in the same push. A claim that could not be marked stays as it was (this
    /// worker merges its task itself).
    pub(super) fn mark_ready(&self, holder: &mut Holder) {
        let id = &holder.claim.task;
        let branch = base::branch(id);
        let Some(local) = self.site.repo.resolve(&format!("refs/heads/{branch}")) else {
            return;
        };
        let pushed = Some(&local) == self.site.repo.resolve(&self.site.task_branch(id)).as_ref();
        self.push_ready(holder, Some(local), (!pushed).then_some(branch.as_str()));
    }

    /// The task goes back to its agent: its claim is no longer ready (`false` when the claim is
    /// no longer this worker's).
    pub(super) fn unmark_ready(&self, holder: &mut Holder) -> bool {
        holder.claim.ready.is_none() || self.push_ready(holder, None, None)
    }

    /// Pushes the claim with `ready` (refreshed), with local branch `branch` in the same push
    /// when given: `false` when the claim is no longer ours.
    fn push_ready(&self, holder: &mut Holder, ready: Option<String>, branch: Option<&str>) -> bool {
        let mut claim = holder.claim.clone();
        claim.ready = ready;
        claim.heartbeat_at = crate::model::now();
        let (repo, remote) = (&self.site.repo, &self.site.remote);
        let pushed = match branch {
            Some(branch) => repo.push_claim_and_branch(remote, (&claim, &holder.sha), branch),
            None => repo.push_claim(remote, &claim, &holder.sha),
        };
        match pushed {
            Ok(Some(sha)) => {
                holder.claim = claim;
                holder.sha = sha;
                true
            }
            Ok(None) => false,
            // Out of reach: the claim stays as the remote has it.
            Err(_) => true,
        }
    }

    /// Waits while a worker whose task was ready before this one's merges (its merge lands this
    /// task too), for [`TRAIN_WAIT`] at most, so that one worker merges at a time, and, when
    /// first, a while longer (`train_linger`) while other workers' tasks still run, so that tasks
    /// finishing together land in one merge: [`Waited::Gone`] when the claim went meanwhile
    /// (the task was merged, or taken over). With it, the other workers seen waiting too.
    pub(super) fn wait_for_train(
        &self,
        id: &str,
        claim: &str,
    ) -> anyhow::Result<(Waited, Vec<String>)> {
        // A ready claim is not refreshed while it waits: the wait ends well before it would go
        // stale (`--claim-ttl`), so that no other worker takes the finished task over.
        let ttl = self.config.options.claim_ttl;
        let (started, linger) = (Instant::now(), self.knobs.train_linger.min(ttl / 4));
        let deadline = started + (TRAIN_WAIT + linger).min(ttl / 2);
        let (repo, remote) = (&self.site.repo, &self.site.remote);
        let unreachable = |why: String| super::site::unreachable_remote(remote, &why);
        let mut looked: Option<(Vec<(String, String)>, TrainView)> = None;
        // The last fetch took the task branches too: what the merge needs of the riders.
        let mut fetched_work = false;
        loop {
            // A look that fetches nothing, then a fetch only when what this worker waits on
            // moved: many waiting workers fetching at each claim marked ready would fill the
            // machine.
            let now = self.site.refs_now().map_err(unreachable)?;
            if looked
                .as_ref()
                .is_none_or(|(at, view)| view.moved(at, &now))
            {
                // The first ready worker, lingering, fetches what its merge will need; the
                // others only what tells them their task landed, and at a remote on this
                // machine read its claims there until their own is gone.
                fetched_work = looked.as_ref().is_some_and(|(_, view)| view.leads);
                let read_there = (!fetched_work).then(|| self.site.claims_now()).flatten();
                if fetched_work {
                    self.site.fetch()?;
                } else if read_there.is_none() {
                    (repo.fetch_base_fleet(remote, &self.site.base)).map_err(unreachable)?;
                }
                let unfetched = read_there.is_some();
                let claims = read_there.unwrap_or_else(|| repo.seen_claims(remote));
                if !held(&claims, id, claim) {
                    if unfetched {
                        // The base as fetched tells whether the task landed.
                        (repo.fetch_base_fleet(remote, &self.site.base)).map_err(unreachable)?;
                    }
                    let peers = looked.map(|(_, view)| view.peers).unwrap_or_default();
                    return Ok((Waited::Gone, peers));
                }
                looked = Some((now, self.train_view(id, &claims)));
            }
            let Some((_, view)) = &looked else {
                continue;
            };
            let lingers = !view.running.is_empty() && started.elapsed() < linger;
            if (view.leads && !lingers) || Instant::now() >= deadline || self.stop.is_stopping() {
                let merge = Waited::Merge {
                    fetched: fetched_work,
                };
                return Ok((merge, view.peers.clone()));
            }
            // The more workers wait, the less often each looks: their looks share the machine
            // with the merge they wait for. A look at a remote on this machine reads its files.
            let every = view.waiting.div_ceil(8).clamp(1, 5);
            let every = if self.site.reads_refs() {
                TRAIN_POLL_LOCAL
            } else {
                TRAIN_POLL * u32::try_from(every).unwrap_or(5)
            };
            crate::run::wait::pause(self.stop, every);
        }
    }

    /// Where task `id`'s ready claim stands among the live claims, as last fetched.
    fn train_view(&self, id: &str, claims: &[SeenClaim]) -> TrainView {
        let (now, ttl) = (crate::model::now(), self.config.options.claim_ttl);
        let live: Vec<_> = (claims.iter())
            .filter(|seen| !pick::is_stale(seen, now, ttl) && seen.id != planning::PLAN_CLAIM)
            .filter_map(|seen| Some((seen.claim.as_ref()?, seen)))
            .collect();
        let ready = || live.iter().filter(|(claim, _)| claim.ready.is_some());
        let first = ready().min_by_key(|(claim, seen)| (claim.heartbeat_at, seen.id.as_str()));
        let leads = first.is_none_or(|(_, seen)| seen.id == id);
        let mut peers: Vec<String> = (live.iter())
            .map(|(claim, _)| claim.worker.clone())
            .filter(|worker| *worker != self.me)
            .collect();
        peers.sort();
        peers.dedup();
        let mut watched = vec![format!("refs/heads/{}", self.site.base), claim_ref(id)];
        watched.extend(first.map(|(_, seen)| claim_ref(&seen.id)));
        TrainView {
            leads,
            running: (live.iter())
                .filter(|(claim, _)| claim.ready.is_none())
                .map(|(_, seen)| claim_ref(&seen.id))
                .collect(),
            waiting: ready().count(),
            watched,
            peers,
        }
    }

    /// The claim is no longer this worker's: another worker's merge train landed the task, or
    /// it was taken over.
    pub(super) fn claim_gone(&mut self, id: &str) -> anyhow::Result<TaskEnd> {
        // The base as last fetched (a moment ago, while the worker waited) may have it done
        // already; the next pick is made on that fetch too.
        self.fresh = true;
        if self.landed_elsewhere(id) {
            return Ok(TaskEnd::Merged);
        }
        self.site.fetch()?;
        Ok(if self.landed_elsewhere(id) {
            TaskEnd::Merged
        } else {
            self.let_go(id)
        })
    }

    /// Whether the claim `claim` of task `id` is still on the remote, as last fetched.
    pub(super) fn holds(&self, id: &str, claim: &str) -> bool {
        held(&self.site.repo.seen_claims(&self.site.remote), id, claim)
    }

    /// The claim of task `id` is gone: merged by another worker's train when the base as last
    /// fetched has it done (told as this worker's merge), else let go.
    pub(super) fn landed_elsewhere(&self, id: &str) -> bool {
        let done = (self.site.list().ok())
            .and_then(|list| base::find(&list, id))
            .is_some_and(|task| task.status == TaskStatus::Complete);
        if !done {
            return false;
        }
        let commit = (self.site.repo.resolve(&self.site.base_ref())).unwrap_or_default();
        self.sink.emit(LoopEvent::TaskMerged {
            task: id.to_owned(),
            into: self.site.base_name(),
            commit,
        });
        // Its branch went with the merge on the remote; here too.
        self.remove_task_worktree(id, true);
        true
    }

    /// Other workers' tasks ready to merge, as last fetched: live claims marked ready at the
    /// commit their branch has on the remote, for the task's text as the base has it, still
    /// open there.
    pub(super) fn riders(&self, id: &str, list: &TaskList) -> Vec<Rider> {
        let (now, ttl) = (crate::model::now(), self.config.options.claim_ttl);
        let claims = self.site.repo.seen_claims(&self.site.remote);
        let ready = claims.into_iter().filter(|seen| seen.id != id);
        let ready = ready.filter(|seen| !pick::is_stale(seen, now, ttl));
        ready
            .filter_map(|seen| {
                let claim = seen.claim?;
                let commit = claim.ready?;
                let task = base::find(list, &seen.id)?;
                let open = task.status.is_to_do();
                let same_text = claim.fingerprint == Some(fingerprint(&task.text));
                let pushed = self.site.repo.resolve(&self.site.task_branch(&seen.id));
                (open && same_text && pushed.as_deref() == Some(commit.as_str())).then(|| Rider {
                    id: seen.id,
                    claim: seen.sha,
                    commit,
                    text: task.text,
                    carried: Carried::default(),
                })
            })
            .take(RIDERS_MAX)
            .collect()
    }

    /// Merges each rider in turn on top of `tree`'s HEAD (this worker's own merge), one merge
    /// commit each, ralph's own files (`own`) kept as HEAD has them; then one commit carries
    /// their notes and tasks and marks them done. A rider that conflicts or fails its merge's
    /// own checks is left to its worker. The riders merged.
    pub(super) fn merge_riders(
        &self,
        (tree, tree_dir): (&Repo, &RalphDir),
        riders: Vec<Rider>,
        own: &[&str],
    ) -> Vec<Rider> {
        let Some(start) = tree.resolve("HEAD") else {
            return Vec::new();
        };
        let scratch = self.dir.integration_scratch("attributes");
        let mut merged = Vec::new();
        for rider in riders {
            let before = tree.resolve("HEAD").unwrap_or_default();
            let message = format!("Ralph: merge task {} — {}", rider.id, rider.text);
            if !tree.merge_keeping_own(&rider.commit, &message, own, &scratch) {
                continue;
            }
            if self.gate().merge_check(&rider.id, tree).is_some() {
                // Its own worker meets the refusal and tells its agent.
                if !self.back_to(&before) {
                    return Vec::new();
                }
                continue;
            }
            merged.push((rider, before));
        }
        let _ = std::fs::remove_file(&scratch);
        let on: Vec<(&str, &str, bool)> = (merged.iter())
            .map(|(rider, before)| (rider.commit.as_str(), before.as_str(), true))
            .collect();
        let mut bases = super::super::carry::merge_bases(tree, &start, &on).into_iter();
        let mut riders = Vec::new();
        for (mut rider, before) in merged {
            let on = (
                rider.commit.as_str(),
                before.as_str(),
                bases.next().flatten(),
            );
            let read = &mut |wanted: &[(&str, &str)]| tree.files_at(wanted);
            let carried =
                super::super::carry::into_base_after((tree, read), tree_dir, on, &rider.id);
            rider.carried = carried;
            if base::mark(tree_dir, &rider.id, TaskStatus::Complete, None).is_err() {
                return self.given_up(&start);
            }
            riders.push(rider);
        }
        if riders.is_empty() {
            return riders;
        }
        let ids: Vec<&str> = riders.iter().map(|rider| rider.id.as_str()).collect();
        let message = format!("Ralph: tasks {} merged", ids.join(", "));
        match tree.commit_paths(own, &message) {
            Ok(Some(_)) => riders,
            _ => self.given_up(&start),
        }
    }

    /// The integration worktree put back at `commit`: `false` when it could not be.
    fn back_to(&self, commit: &str) -> bool {
        let path = self.dir.integration_worktree();
        self.site.repo.detached_worktree(&path, commit).is_ok()
    }

    /// The riders could not be recorded: the integration worktree goes back to `start` (this
    /// worker's own merge), and no rider goes with it.
    fn given_up(&self, start: &str) -> Vec<Rider> {
        self.back_to(start);
        Vec::new()
    }

    /// The push's updates for the riders: each claim deleted while it is still the one marked
    /// ready, and each branch deleted while it is still at that commit (kept when notes or
    /// tasks of it could not be carried).
    pub(super) fn rider_updates(riders: &[Rider]) -> Vec<Update<'_>> {
        let mut updates = Vec::new();
        for rider in riders {
            updates.push(Update {
                dst: claim_ref(&rider.id),
                new: None,
                expect: Some(&rider.claim),
            });
            if rider.carried.problems.is_empty() {
                updates.push(Update {
                    dst: format!("refs/heads/{}", base::branch(&rider.id)),
                    new: None,
                    expect: Some(&rider.commit),
                });
            }
        }
        updates
    }

    /// Says which riders this worker's merge landed.
    pub(super) fn tell_riders(&self, id: &str, riders: &[Rider]) {
        if riders.is_empty() {
            return;
        }
        let ids: Vec<&str> = riders.iter().map(|rider| rider.id.as_str()).collect();
        self.sink.notice(Notice::MergedAlong {
            task: id,
            along: &ids,
            base: &self.site.base_name(),
        });
    }
}

/// Whether `claims` hold the claim `claim` of task `id`.
fn held(claims: &[SeenClaim], id: &str, claim: &str) -> bool {
    (claims.iter()).any(|seen| seen.id == id && seen.sha == claim)
}

#[cfg(test)]
mod tests {
    use super::TrainView;

    fn refs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        (list.iter())
            .map(|(name, sha)| ((*name).to_owned(), (*sha).to_owned()))
            .collect()
    }

    #[test]
    fn a_waiting_worker_looks_again_only_when_what_it_waits_on_moved() {
        let base = "refs/heads/main";
        let (own, first, other) = (
            "refs/ralph/claims/b",
            "refs/ralph/claims/a",
            "refs/ralph/claims/c",
        );
        let view = TrainView {
            leads: false,
            running: vec![other.to_owned()],
            waiting: 2,
            watched: vec![base.to_owned(), own.to_owned(), first.to_owned()],
            peers: Vec::new(),
        };
        let at = refs(&[(base, "1"), (first, "2"), (own, "3"), (other, "4")]);
        // Another claim marked ready, or a new one: nothing this worker waits on.
        let now = refs(&[(base, "1"), (first, "2"), (own, "3"), (other, "5")]);
        assert!(!view.moved(&at, &now));
        let now = refs(&[(base, "1"), (first, "2"), (own, "3")]);
        assert!(!view.moved(&at, &now));
        // The base moved, its own claim went, the first one's went or changed.
        let now = refs(&[(base, "9"), (first, "2"), (own, "3"), (other, "4")]);
        assert!(view.moved(&at, &now));
        let now = refs(&[(base, "1"), (first, "2"), (other, "4")]);
        assert!(view.moved(&at, &now));
        let now = refs(&[(base, "1"), (own, "3"), (other, "4")]);
        assert!(view.moved(&at, &now));
        // The first ready worker, lingering for the tasks still running, looks again once each
        // of them moved (marked ready, or gone), not at each one, nor at a new claim.
        let (second, new) = ("refs/ralph/claims/d", "refs/ralph/claims/e");
        let leader = TrainView {
            leads: true,
            running: vec![other.to_owned(), second.to_owned()],
            watched: vec![base.to_owned(), own.to_owned(), own.to_owned()],
            ..view
        };
        let at = refs(&[(base, "1"), (own, "3"), (other, "4"), (second, "6")]);
        let now = refs(&[(base, "1"), (own, "3"), (other, "5"), (second, "6")]);
        assert!(!leader.moved(&at, &now));
        let now = refs(&[
            (base, "1"),
            (own, "3"),
            (other, "4"),
            (second, "6"),
            (new, "7"),
        ]);
        assert!(!leader.moved(&at, &now));
        let now = refs(&[(base, "1"), (own, "3"), (other, "5")]);
        assert!(leader.moved(&at, &now));
        let now = refs(&[(base, "2"), (own, "3"), (other, "4"), (second, "6")]);
        assert!(leader.moved(&at, &now));
        assert!(!leader.moved(&at, &at));
    }
}
