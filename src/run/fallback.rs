//! `--fallback`: which agent takes an iteration when another is out of quota. Pure: the times
//! come in as arguments, so every rule is a unit test.
//!
//! The chain of an iteration is its own agent (the one `--agent`, `--rotation` or the task
//! names) followed by the `--fallback` agents. An agent that reports a usage or rate limit whose
//! reset is further away than `--fallback-after`, or gives no reset time, is *limited* until
//! then (or for `--fallback-after` when it gave none); the iteration is retried at once with the
//! first agent of the chain that is not limited. When every agent is limited the loop waits for
//! the earliest reset an agent gave; when the earliest limit is one ralph guessed (its agent gave
//! no reset time), the retry waits the ordinary backoff, capped by `--retry-max-wait`. An agent of the fallback list whose credentials fail is skipped for the
//! rest of the run. Each iteration starts again from the front of its chain, so the run returns
//! to its own agent as soon as that agent's reset time has passed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::{Failure, FailureKind};

/// What the loop knows about the agents' limits (not saved: a resumed run starts afresh).
#[derive(Debug, Default)]
pub(crate) struct Limits {
    /// Agent key → until when it is limited.
    limited: BTreeMap<String, DateTime<Utc>>,
    /// Limited agents that gave no reset time: their limit is `--fallback-after`, a guess.
    guessed: BTreeSet<String>,
    /// Fallback agents whose credentials failed.
    skipped: BTreeSet<String>,
}

/// What a failure does to the chain.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AfterFailure {
    /// Nothing to do with fallback: the usual retry rules apply.
    Usual,
    /// Retry the iteration at once with the agent at this index of the chain.
    Switch { to: usize, reason: Switched },
    /// Every agent is limited: wait until the earliest reset, then retry (`None`: the earliest
    /// limit is a guess, as its agent gave no reset time: the ordinary backoff applies).
    WaitUntil(Option<DateTime<Utc>>),
}

/// Why an agent was left.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Switched {
    /// Out of quota until this time (or for `--fallback-after`, when it gave none).
    Limited(Option<DateTime<Utc>>),
    /// Its credentials failed; it is skipped from now on.
    AuthFailed,
}

impl Limits {
    /// The index in `chain` (agent keys, the iteration's own agent first) of the agent that
    /// runs now: the first that is neither limited nor skipped; when all are, the one whose
    /// limit ends first.
    pub(crate) fn pick(&self, chain: &[String], now: DateTime<Utc>) -> usize {
        chain
            .iter()
            .position(|key| self.is_free(key, now))
            .unwrap_or_else(|| {
                (0..chain.len())
                    .filter(|index| !self.skipped.contains(&chain[*index]))
                    .min_by_key(|index| self.limited.get(&chain[*index]))
                    .unwrap_or(0)
            })
    }

    /// Whether the agent `key` may run at `now`: not skipped, and its limit (if any) is over.
    fn is_free(&self, key: &str, now: DateTime<Utc>) -> bool {
        !self.skipped.contains(key) && self.limited.get(key).is_none_or(|until| *until <= now)
    }

    /// Learns from the failure of the agent at `ran` in `chain` and says what follows.
    pub(crate) fn after_failure(
        &mut self,
        chain: &[String],
        ran: usize,
        failure: &Failure,
        (now, after): (DateTime<Utc>, Duration),
    ) -> AfterFailure {
        if chain.len() < 2 {
            return AfterFailure::Usual;
        }
        let key = &chain[ran];
        let reason = match failure.kind {
            FailureKind::RateLimit => {
                let far = failure
                    .retry_at
                    .is_none_or(|at| (at - now).to_std().unwrap_or_default() > after);
                if !far {
                    return AfterFailure::Usual;
                }
                let until = failure
                    .retry_at
                    .unwrap_or_else(|| now + chrono::Duration::from_std(after).unwrap_or_default());
                self.limited.insert(key.clone(), until);
                if failure.retry_at.is_some() {
                    self.guessed.remove(key);
                } else {
                    self.guessed.insert(key.clone());
                }
                Switched::Limited(failure.retry_at)
            }
            // The run's own agent failing its credentials stops the run as before.
            FailureKind::Auth if ran > 0 => {
                self.skipped.insert(key.clone());
                Switched::AuthFailed
            }
            _ => return AfterFailure::Usual,
        };
        let next = self.pick(chain, now);
        if self.is_free(&chain[next], now) {
            return AfterFailure::Switch { to: next, reason };
        }
        match self.limited.get(&chain[next]) {
            Some(until) => {
                AfterFailure::WaitUntil((!self.guessed.contains(&chain[next])).then_some(*until))
            }
            // Every fallback agent is skipped and the run's own agent is not limited.
            None => AfterFailure::Usual,
        }
    }
}

impl Switched {
    /// Why another agent takes the iteration from `from`, as the `fallback` event says it.
    pub(super) fn reason(&self, from: &str) -> String {
        match self {
            Self::Limited(Some(until)) => {
                let left = (*until - crate::model::now()).to_std().unwrap_or_default();
                format!(
                    "{from} is out of quota until {} UTC (in {})",
                    until.format("%H:%M"),
                    crate::output::format::short_duration(left)
                )
            }
            Self::Limited(None) => format!("{from} is out of quota and gave no reset time"),
            Self::AuthFailed => format!(
                "{from}'s credentials failed; it is skipped as a fallback for the rest of this run"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain() -> Vec<String> {
        ["claude-code", "codex", "gemini"]
            .map(str::to_owned)
            .to_vec()
    }

    fn at(minutes: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap() + chrono::Duration::minutes(minutes)
    }

    fn limit(reset_in: Option<i64>) -> Failure {
        Failure {
            kind: FailureKind::RateLimit,
            status: Some(429),
            message: "usage limit".into(),
            retry_at: reset_in.map(at),
        }
    }

    const AFTER: Duration = Duration::from_secs(300);

    #[test]
    fn a_far_reset_switches_to_the_next_agent_now_and_back_after_the_reset() {
        let mut limits = Limits::default();
        let chain = chain();
        assert_eq!(limits.pick(&chain, at(0)), 0);
        let next = limits.after_failure(&chain, 0, &limit(Some(120)), (at(0), AFTER));
        assert_eq!(
            next,
            AfterFailure::Switch {
                to: 1,
                reason: Switched::Limited(Some(at(120)))
            }
        );
        assert_eq!(limits.pick(&chain, at(1)), 1);
        assert_eq!(limits.pick(&chain, at(119)), 1);
        assert_eq!(limits.pick(&chain, at(120)), 0, "back to the first agent");
    }

    #[test]
    fn a_near_reset_waits_with_the_same_agent() {
        let mut limits = Limits::default();
        let near = limit(Some(4));
        assert_eq!(
            limits.after_failure(&chain(), 0, &near, (at(0), AFTER)),
            AfterFailure::Usual
        );
        assert_eq!(limits.pick(&chain(), at(1)), 0);
    }

    #[test]
    fn no_reset_time_switches_for_the_fallback_after_period() {
        let mut limits = Limits::default();
        let next = limits.after_failure(&chain(), 0, &limit(None), (at(0), AFTER));
        assert_eq!(
            next,
            AfterFailure::Switch {
                to: 1,
                reason: Switched::Limited(None)
            }
        );
        assert_eq!(limits.pick(&chain(), at(4)), 1);
        assert_eq!(limits.pick(&chain(), at(5)), 0);
    }

    #[test]
    fn all_agents_limited_waits_for_the_earliest_reset() {
        let mut limits = Limits::default();
        let chain = chain();
        limits.after_failure(&chain, 0, &limit(Some(300)), (at(0), AFTER));
        limits.after_failure(&chain, 1, &limit(Some(60)), (at(0), AFTER));
        let last = limits.after_failure(&chain, 2, &limit(Some(200)), (at(0), AFTER));
        assert_eq!(last, AfterFailure::WaitUntil(Some(at(60))));
        assert_eq!(
            limits.pick(&chain, at(30)),
            1,
            "the earliest reset runs next"
        );
        assert_eq!(limits.pick(&chain, at(61)), 1);
        assert_eq!(limits.pick(&chain, at(301)), 0);
    }

    #[test]
    fn all_agents_limited_without_a_reset_time_wait_the_ordinary_backoff() {
        let mut limits = Limits::default();
        let chain = chain();
        limits.after_failure(&chain, 0, &limit(None), (at(0), AFTER));
        limits.after_failure(&chain, 1, &limit(Some(200)), (at(0), AFTER));
        let last = limits.after_failure(&chain, 2, &limit(None), (at(0), AFTER));
        assert_eq!(
            last,
            AfterFailure::WaitUntil(None),
            "the earliest limit, in 5 minutes, is a guess"
        );
        // A reset time an agent gave that comes before the guessed limits end is waited for.
        let two = &chain[..2];
        let mut limits = Limits::default();
        limits.after_failure(two, 0, &limit(Some(10)), (at(0), AFTER));
        let last = limits.after_failure(two, 1, &limit(None), (at(6), AFTER));
        assert_eq!(last, AfterFailure::WaitUntil(Some(at(10))));
    }

    #[test]
    fn a_fallback_agent_whose_credentials_fail_is_skipped() {
        let mut limits = Limits::default();
        let chain = chain();
        limits.after_failure(&chain, 0, &limit(None), (at(0), AFTER));
        let auth = Failure::classify(Some(401), "bad key", at(0));
        assert_eq!(
            limits.after_failure(&chain, 1, &auth, (at(0), AFTER)),
            AfterFailure::Switch {
                to: 2,
                reason: Switched::AuthFailed
            }
        );
        assert_eq!(limits.pick(&chain, at(10)), 0);
        limits.after_failure(&chain, 0, &limit(None), (at(10), AFTER));
        assert_eq!(limits.pick(&chain, at(11)), 2, "codex stays skipped");
        // The run's own agent failing its credentials is not fallback's business.
        assert_eq!(
            limits.after_failure(&chain, 0, &auth, (at(20), AFTER)),
            AfterFailure::Usual
        );
    }

    #[test]
    fn without_fallback_agents_nothing_changes() {
        let mut limits = Limits::default();
        let alone = vec!["codex".to_owned()];
        assert_eq!(
            limits.after_failure(&alone, 0, &limit(None), (at(0), AFTER)),
            AfterFailure::Usual
        );
        assert_eq!(limits.pick(&alone, at(0)), 0);
    }
}
