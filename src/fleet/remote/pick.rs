//! The worker's choice of task: the first ready one nobody holds (or whose claim went stale).
//! Pure, so every rule is checked without a remote (`tests.rs`).

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::git::SeenClaim;
use crate::storage::tasks::{self, Task, TaskList};

/// What the worker does next.
#[derive(Debug)]
pub(super) enum Pick {
    /// Claim this task (`over`: the stale claim to take over).
    Take {
        id: String,
        task: Box<Task>,
        over: Option<Box<SeenClaim>>,
    },
    /// Nothing is free, but tasks held by other workers (their ids) may finish (or go stale).
    Wait { held: Vec<String> },
    /// Nothing is left that this worker could ever take.
    Finished,
}

/// The first ready task (open, blockers done in the base) that nobody holds, whose claim is
/// stale, or whose claim an earlier attempt of this worker's engine job made (`slot`: the job's
/// slot), and whose `touches` overlap no held task's; else whether to wait for held tasks.
/// `skip`: tasks this worker let go of.
#[cfg(test)]
pub(super) fn pick(
    list: &TaskList,
    claims: &[SeenClaim],
    when: (DateTime<Utc>, Duration, Option<&str>),
    skip: &BTreeSet<String>,
) -> Pick {
    pick_spread(list, claims, when, skip, 0)
}

/// Worker `me`'s place among `peers` (other workers' names), by name: workers that saw one
/// another each get a place of their own, the same whichever of them counts.
pub(super) fn place_among(me: &str, peers: &[String]) -> usize {
    (peers.iter()).filter(|peer| peer.as_str() < me).count()
}

/// [`pick`], but the `spread`-th (modulo) of the tasks that could be taken rather than the
/// first: a worker that lost the race for the first spreads its next tries, so that workers
/// started together claim their tasks in a round or two rather than one by one.
pub(super) fn pick_spread(
    list: &TaskList,
    claims: &[SeenClaim],
    (now, ttl, slot): (DateTime<Utc>, Duration, Option<&str>),
    skip: &BTreeSet<String>,
    spread: usize,
) -> Pick {
    let live = |id: &str| {
        let claim = claims.iter().find(|seen| seen.id == id);
        claim.is_some_and(|seen| !is_stale(seen, now, ttl) && !earlier_attempt(seen, slot))
    };
    let ids = tasks::task_ids(list);
    // What the tasks other workers hold touch: a task that touches the same waits.
    let held_touches: Vec<Vec<String>> = (list.tasks.iter().zip(&ids))
        .filter(|(task, id)| task.status.is_to_do() && live(id))
        .map(|(task, _)| crate::protect::list(task.property(tasks::TOUCHES)))
        .collect();
    let mut held = Vec::new();
    let mut free = Vec::new();
    for (task, id) in list.tasks.iter().zip(ids) {
        if !task.status.is_to_do() {
            continue;
        }
        // A task this worker let go of is another worker's now: held, never taken back.
        let claim = claims.iter().find(|seen| seen.id == id);
        if live(&id) {
            held.push(id);
            continue;
        }
        if skip.contains(&id) {
            continue;
        }
        let touches = crate::protect::list(task.property(tasks::TOUCHES));
        if held_touches
            .iter()
            .any(|held| crate::protect::overlap(&touches, held))
        {
            continue;
        }
        if list.blockers(task).is_empty() {
            free.push(Pick::Take {
                id,
                task: Box::new(task.clone()),
                over: claim.cloned().map(Box::new),
            });
            if spread == 0 {
                break;
            }
        }
    }
    if !free.is_empty() {
        let at = spread % free.len();
        return free.swap_remove(at);
    }
    if held.is_empty() {
        Pick::Finished
    } else {
        Pick::Wait { held }
    }
}

/// Another live claim among `claims` (other than task `id`'s) on a task of `list` whose
/// `touches` overlap `task`'s: that task. Two workers claiming such tasks at the same moment
/// both succeed (claims are per task); each checks this once its claim took, on a fresh look at
/// the remote's claims, and gives way when it finds one: of two claims pushed one after the
/// other, the later's look sees the earlier, so the two never both run.
pub(super) fn overlapping_claim(
    list: &TaskList,
    claims: &[SeenClaim],
    (id, task): (&str, &Task),
    (now, ttl): (DateTime<Utc>, Duration),
) -> Option<String> {
    let live = (claims.iter())
        .filter(|seen| !is_stale(seen, now, ttl))
        .map(|seen| seen.id.as_str());
    overlapping_task(list, live, (id, task))
}

/// The first of the tasks `held` (by their ids; task `id` itself aside) still to do in `list`
/// whose `touches` overlap `task`'s.
pub(super) fn overlapping_task<'a>(
    list: &TaskList,
    held: impl IntoIterator<Item = &'a str>,
    (id, task): (&str, &Task),
) -> Option<String> {
    let mine = crate::protect::list(task.property(tasks::TOUCHES));
    if mine.is_empty() {
        return None;
    }
    (held.into_iter())
        .filter(|other| *other != id)
        .find(|other| {
            super::super::base::find(list, other).is_some_and(|theirs| {
                let touches = crate::protect::list(theirs.property(tasks::TOUCHES));
                theirs.status.is_to_do() && crate::protect::overlap(&mine, &touches)
            })
        })
        .map(str::to_owned)
}

/// Whether a claim's holder has not refreshed it for `ttl` (or it cannot be read, or its holder
/// gave it back).
pub(super) fn is_stale(seen: &SeenClaim, now: DateTime<Utc>, ttl: Duration) -> bool {
    seen.claim.as_ref().is_none_or(|claim| {
        claim.released
            || (now - claim.heartbeat_at)
                .to_std()
                .is_ok_and(|age| age >= ttl)
    })
}

/// Whether a claim was made by an earlier attempt of the engine job in `slot` (a re-run, a
/// requeue, a retried pod): that attempt is over, so its claim is this worker's to take back.
pub(super) fn earlier_attempt(seen: &SeenClaim, slot: Option<&str>) -> bool {
    let made_in = (seen.claim.as_ref())
        .and_then(|claim| claim.job.as_ref())
        .and_then(|job| job.slot.as_deref());
    slot.is_some() && made_in == slot
}
