//! The worker's choice of task: pure, so every rule is checked without a remote.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::pick::{overlapping_claim, pick, pick_spread, place_among};
use super::{Pick, SeenClaim};
use crate::git::Claim;
use crate::storage::tasks::TaskList;

const TTL: Duration = Duration::from_secs(900);

fn at(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
}

fn claim(id: &str, heartbeat: i64) -> SeenClaim {
    SeenClaim {
        id: id.to_owned(),
        sha: format!("sha-{id}"),
        claim: Some(Claim {
            fingerprint: None,
            released: false,
            token: 1,
            job: None,
            ready: None,
            task: id.to_owned(),
            worker: "other-1".to_owned(),
            host: "other".to_owned(),
            pid: 1,
            started_at: at(0),
            heartbeat_at: at(heartbeat),
        }),
    }
}

fn list(text: &str) -> TaskList {
    TaskList::parse(text)
}

fn taken(pick: &Pick) -> Option<(&str, bool)> {
    match pick {
        Pick::Take { id, over, .. } => Some((id.as_str(), over.is_some())),
        _ => None,
    }
}

const CHAIN: &str =
    "# Tasks\n\n- [ ] first\n  - id: a\n- [ ] second\n  - id: b\n  - blocked_by: a\n";

#[test]
fn the_first_ready_unclaimed_task_is_taken() {
    let picked = pick(&list(CHAIN), &[], (at(10), TTL, None), &BTreeSet::new());
    assert_eq!(taken(&picked), Some(("a", false)));
}

#[test]
fn a_worker_that_lost_a_claim_race_spreads_over_the_free_tasks_only() {
    let text = "- [ ] one\n  - id: a\n- [ ] two\n  - id: b\n- [ ] three\n  - id: c\n  - blocked_by: a\n- [ ] four\n  - id: d\n";
    let when = (at(10), TTL, None);
    let none = BTreeSet::new();
    // `c` waits for `a`, and `b` is held: the spread goes over `a` and `d` only.
    let held = [claim("b", 5)];
    let picks: Vec<_> = (0..4)
        .map(|spread| pick_spread(&list(text), &held, when, &none, spread))
        .map(|picked| taken(&picked).map(|(id, _)| id.to_owned()))
        .collect();
    let picks: Vec<_> = picks.iter().map(|id| id.as_deref()).collect();
    assert_eq!(picks, [Some("a"), Some("d"), Some("a"), Some("d")]);
    // Nothing free: the same as a first pick.
    let all = [claim("a", 5), claim("b", 5), claim("d", 5)];
    assert!(matches!(
        pick_spread(&list(text), &all, when, &none, 3),
        Pick::Wait { .. }
    ));
}

#[test]
fn workers_that_waited_for_one_train_pick_a_task_each_after_it() {
    let text = "- [ ] one\n  - id: a\n- [ ] two\n  - id: b\n- [ ] three\n  - id: c\n";
    let (when, none) = ((at(10), TTL, None), BTreeSet::new());
    let fleet = ["vm-30", "vm-112", "vm-7"];
    let picks: BTreeSet<String> = (fleet.iter())
        .map(|me| {
            let peers: Vec<String> = (fleet.iter())
                .filter(|peer| *peer != me)
                .map(|peer| (*peer).to_owned())
                .collect();
            let spread = place_among(me, &peers);
            let picked = pick_spread(&list(text), &[], when, &none, spread);
            taken(&picked).unwrap().0.to_owned()
        })
        .collect();
    assert_eq!(picks.len(), 3, "{picks:?}");
    // A worker that saw no other takes the list's first.
    assert_eq!(place_among("vm-7", &[]), 0);
}

#[test]
fn a_claimed_task_is_skipped_and_its_dependents_wait() {
    let picked = pick(
        &list(CHAIN),
        &[claim("a", 5)],
        (at(10), TTL, None),
        &BTreeSet::new(),
    );
    assert!(
        matches!(picked, Pick::Wait { ref held } if held.len() == 1),
        "{picked:?}"
    );
}

#[test]
fn the_next_free_task_is_taken_while_another_is_held() {
    let text = "- [ ] one\n  - id: a\n- [ ] two\n  - id: b\n";
    let picked = pick(
        &list(text),
        &[claim("a", 5)],
        (at(10), TTL, None),
        &BTreeSet::new(),
    );
    assert_eq!(taken(&picked), Some(("b", false)));
}

#[test]
fn a_stale_claim_is_taken_over() {
    let stale_at = at(900 + 5);
    let picked = pick(
        &list(CHAIN),
        &[claim("a", 5)],
        (stale_at, TTL, None),
        &BTreeSet::new(),
    );
    assert_eq!(taken(&picked), Some(("a", true)));
    let fresh = pick(
        &list(CHAIN),
        &[claim("a", 5)],
        (at(904), TTL, None),
        &BTreeSet::new(),
    );
    assert!(matches!(fresh, Pick::Wait { .. }));
}

#[test]
fn an_unreadable_claim_counts_as_stale() {
    let mut unreadable = claim("a", 5);
    unreadable.claim = None;
    let picked = pick(
        &list(CHAIN),
        &[unreadable],
        (at(10), TTL, None),
        &BTreeSet::new(),
    );
    assert_eq!(taken(&picked), Some(("a", true)));
}

#[test]
fn done_tasks_unblock_their_dependents() {
    let text = "- [x] first\n  - id: a\n- [ ] second\n  - id: b\n  - blocked_by: a\n";
    let picked = pick(&list(text), &[], (at(10), TTL, None), &BTreeSet::new());
    assert_eq!(taken(&picked), Some(("b", false)));
}

#[test]
fn nothing_left_but_failed_or_blocked_by_failed_finishes() {
    let text = "- [!] first\n  - id: a\n- [ ] second\n  - id: b\n  - blocked_by: a\n";
    let picked = pick(&list(text), &[], (at(10), TTL, None), &BTreeSet::new());
    assert!(matches!(picked, Pick::Finished), "{picked:?}");
    let all_done = "- [x] first\n- [x] second\n";
    assert!(matches!(
        pick(&list(all_done), &[], (at(10), TTL, None), &BTreeSet::new()),
        Pick::Finished
    ));
}

#[test]
fn a_task_this_worker_let_go_is_not_taken_again() {
    let skip: BTreeSet<String> = ["a".to_owned()].into();
    let text = "- [ ] one\n  - id: a\n- [ ] two\n  - id: b\n";
    let picked = pick(&list(text), &[], (at(10), TTL, None), &skip);
    assert_eq!(taken(&picked), Some(("b", false)));
}

#[test]
fn a_task_this_worker_let_go_is_held_by_the_worker_that_took_it_over() {
    // The worker ends (or waits) for it as for any held task, rather than finding nothing left.
    let skip: BTreeSet<String> = ["a".to_owned()].into();
    let text = "- [ ] one\n  - id: a\n";
    let picked = pick(&list(text), &[claim("a", 5)], (at(10), TTL, None), &skip);
    assert!(
        matches!(&picked, Pick::Wait { held } if held == &["a".to_owned()]),
        "{picked:?}"
    );
}

#[test]
fn an_in_progress_task_without_a_claim_is_free() {
    let text = "- [/] one\n  - id: a\n";
    let picked = pick(&list(text), &[], (at(10), TTL, None), &BTreeSet::new());
    assert_eq!(taken(&picked), Some(("a", false)));
}

#[test]
fn every_take_over_of_a_claim_raises_its_fencing_token() {
    assert_eq!(Claim::token_after(None), 1, "a task's first claim");
    let held = claim("a", 0);
    assert_eq!(Claim::token_after(Some(&held)), 2);
    let unreadable = SeenClaim {
        claim: None,
        ..held.clone()
    };
    assert_eq!(Claim::token_after(Some(&unreadable)), 1);
    // A claim written by an older ralph has no token: it reads as 0.
    let old: Claim = serde_json::from_str(
        r#"{"task":"a","worker":"h-1","host":"h","pid":1,"started_at":"2026-01-01T00:00:00Z","heartbeat_at":"2026-01-01T00:00:00Z"}"#,
    )
    .unwrap();
    assert_eq!(old.token, 0);
    let refreshed = Claim {
        heartbeat_at: at(60),
        ..held.claim.clone().unwrap()
    };
    let json = serde_json::to_value(&refreshed).unwrap();
    assert_eq!(json["token"], 1, "a refresh keeps the token: {json}");
}

#[test]
fn a_retried_engine_job_takes_back_its_earlier_attempts_live_claim_at_once() {
    let job = |slot: &str| crate::git::Job {
        engine: "slurm".to_owned(),
        slot: Some(slot.to_owned()),
        label: format!("Slurm job {slot}"),
        url: None,
    };
    let mut held = claim("a", 5);
    if let Some(claim) = held.claim.as_mut() {
        claim.job = Some(job("slurm::41_2"));
    }
    let now = (at(10), TTL);
    let again = pick(
        &list(CHAIN),
        &[held.clone()],
        (now.0, now.1, Some("slurm::41_2")),
        &BTreeSet::new(),
    );
    assert_eq!(taken(&again), Some(("a", true)), "{again:?}");
    // Another slot of the same array, or a worker in no job, waits for the claim to go stale.
    let other = pick(
        &list(CHAIN),
        &[held.clone()],
        (now.0, now.1, Some("slurm::41_1")),
        &BTreeSet::new(),
    );
    assert!(
        matches!(other, Pick::Wait { ref held } if held.len() == 1),
        "{other:?}"
    );
    let by_hand = pick(
        &list(CHAIN),
        &[held.clone()],
        (now.0, now.1, None),
        &BTreeSet::new(),
    );
    assert!(
        matches!(by_hand, Pick::Wait { ref held } if held.len() == 1),
        "{by_hand:?}"
    );
    // A claim made in a job with no slot is nobody's earlier attempt.
    if let Some(claim) = held.claim.as_mut() {
        claim.job = Some(crate::git::Job {
            slot: None,
            ..job("x")
        });
    }
    let unslotted = pick(
        &list(CHAIN),
        &[held],
        (now.0, now.1, None),
        &BTreeSet::new(),
    );
    assert!(
        matches!(unslotted, Pick::Wait { ref held } if held.len() == 1),
        "{unslotted:?}"
    );
}

#[test]
fn a_task_that_touches_what_a_held_one_touches_waits_and_a_third_is_taken() {
    let tasks = list(
        "- [ ] api\n  - id: api\n  - touches: src/api/**\n- [ ] users\n  - id: users\n  - touches: src/api/users.rs\n- [ ] docs\n  - id: docs\n  - touches: docs/\n",
    );
    let held = [claim("api", 5)];
    let picked = pick(&tasks, &held, (at(10), TTL, None), &BTreeSet::new());
    assert_eq!(taken(&picked), Some(("docs", false)));
    // With the third held too, the second waits rather than finishes.
    let both = [claim("api", 5), claim("docs", 5)];
    let picked = pick(&tasks, &both, (at(10), TTL, None), &BTreeSet::new());
    assert!(matches!(picked, Pick::Wait { .. }), "{picked:?}");
    // Once the claim is stale, the overlap no longer holds it back.
    let stale = [claim("api", 5)];
    let later = at(10 + 2 * 900);
    let picked = pick(&tasks, &stale, (later, TTL, None), &BTreeSet::new());
    assert_eq!(taken(&picked), Some(("api", true)));
}

#[test]
fn a_claim_that_took_gives_way_to_a_live_one_on_a_task_touching_the_same_files() {
    let tasks = list(
        "- [ ] api\n  - id: api\n  - touches: src/api/**\n- [ ] users\n  - id: users\n  - touches: src/api/users.rs\n- [ ] docs\n  - id: docs\n  - touches: docs/\n- [ ] free\n  - id: free\n",
    );
    let find = |id: &str| super::super::base::find(&tasks, id).unwrap();
    let now = (at(10), TTL);
    // Both claims took: the one on `users` sees the one on `api`, and the other way round.
    let both = [claim("api", 5), claim("users", 5)];
    let users = find("users");
    assert_eq!(
        overlapping_claim(&tasks, &both, ("users", &users), now).as_deref(),
        Some("api")
    );
    let api = find("api");
    assert_eq!(
        overlapping_claim(&tasks, &both, ("api", &api), now).as_deref(),
        Some("users")
    );
    // What touches nothing of theirs, or nothing declared, never gives way; nor to a stale claim.
    let docs = find("docs");
    assert_eq!(overlapping_claim(&tasks, &both, ("docs", &docs), now), None);
    let free = find("free");
    assert_eq!(overlapping_claim(&tasks, &both, ("free", &free), now), None);
    let later = (at(10 + 2 * 900), TTL);
    assert_eq!(
        overlapping_claim(&tasks, &both, ("users", &users), later),
        None
    );
}
