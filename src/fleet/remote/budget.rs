//! `--fleet-budget`: one budget for every worker sharing a remote. The ledger is a commit on the
//! remote (`refs/ralph/fleet/budget`, its message the ledger's JSON), changed only by
//! compare-and-swap pushes, as claims are. Each worker keeps its account there: what it spent in
//! all, and what it reserved for the iteration it runs. A reservation lives as long as the claim
//! of its task by its worker: a worker that dies leaves it to expire with its claim.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::pick::is_stale;
use crate::config::RunConfig;
use crate::git::{LEDGER, Repo, SeenClaim};
use crate::output::format::cost_text;
use crate::output::{FleetAccount, FleetBudget};
use crate::run::decision::{self, Amount, Rules, Spent, Stop};
use crate::run::{Here, Ledger, Shared, start};

/// Writes tried before a ledger that keeps moving is given up on.
const TRIES: u32 = 30;

/// The fleet's ledger, as it is on the remote.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Book {
    /// When the first worker reserved: since when the fleet spends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) started_at: Option<DateTime<Utc>>,
    /// Each worker's account, by the worker's name (as its claims give it).
    #[serde(default)]
    pub(crate) workers: BTreeMap<String, Account>,
}

/// One worker's account.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Account {
    /// What it spent in all: cost in USD, tokens.
    pub(crate) cost: f64,
    pub(crate) tokens: u64,
    /// What it reserved for the iteration it runs now, if one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reserved: Option<Reserved>,
    /// Its `--max-cost` (what `ralph --status --remote` counts what is left against).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_cost: Option<f64>,
    /// The iterations its spending is of (absent in an older ralph's ledger).
    #[serde(default)]
    pub(crate) iterations: u32,
    pub(crate) updated_at: DateTime<Utc>,
}

/// A reservation: its amount and the task whose claim keeps it alive.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Reserved {
    pub(crate) cost: f64,
    pub(crate) tokens: u64,
    pub(crate) task: String,
    /// Made knowing nothing of what an iteration costs (no `--reserve`, no iteration ended in
    /// the fleet): it holds nothing, and counts as the fleet's average iteration once one ends.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) blind: bool,
}

/// Where the ledger's reservations are judged alive: the claims as fetched, now, the TTL.
pub(crate) struct Liveness<'a> {
    pub(crate) claims: &'a [SeenClaim],
    pub(crate) now: DateTime<Utc>,
    pub(crate) ttl: Duration,
}

impl Book {
    /// Reads a ledger's text; `None` when it is not one.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }

    /// Whether `name`'s reservation is alive: its task's claim is its, not given back, not stale.
    fn alive(name: &str, reserved: &Reserved, live: &Liveness<'_>) -> bool {
        live.claims.iter().any(|seen| {
            seen.id == reserved.task
                && seen
                    .claim
                    .as_ref()
                    .is_some_and(|claim| claim.worker == name)
                && !is_stale(seen, live.now, live.ttl)
        })
    }

    /// What an iteration of the fleet's has cost on average, from the accounts that say over
    /// how many iterations they spent (`None`: none has ended yet).
    fn average(&self) -> Option<Amount> {
        let (spent, iterations) = (self.workers.values())
            .filter(|account| account.iterations > 0)
            .fold((Amount::default(), 0u64), |(sum, n), account| {
                let spent = Amount {
                    cost: account.cost,
                    tokens: account.tokens,
                };
                (sum.plus(spent), n + u64::from(account.iterations))
            });
        #[expect(clippy::cast_precision_loss, reason = "a count of iterations")]
        (iterations > 0).then(|| Amount {
            cost: spent.cost / iterations as f64,
            tokens: spent.tokens / iterations,
        })
    }

    /// What the fleet has committed besides `me`'s reservation: every account's spending (`me`'s
    /// as `here`) and the live reservations of the others, a blind one (it reserved nothing,
    /// knowing nothing) counted as the fleet's average iteration.
    pub(crate) fn committed(&self, me: &str, here: Amount, live: &Liveness<'_>) -> Spent {
        let average = self.average().unwrap_or_default();
        let mut spent = here;
        let mut reserved = Amount::default();
        for (name, account) in &self.workers {
            if name == me {
                continue;
            }
            spent = spent.plus(Amount {
                cost: account.cost,
                tokens: account.tokens,
            });
            if let Some(r) = account
                .reserved
                .as_ref()
                .filter(|r| Self::alive(name, r, live))
            {
                reserved = reserved.plus(if r.blind {
                    average
                } else {
                    Amount {
                        cost: r.cost,
                        tokens: r.tokens,
                    }
                });
            }
        }
        // `--max-runtime` stays each worker's own (checked on its own clock): engine jobs use it
        // to stop before their time limit, and the ledger outlives a round of jobs.
        Spent {
            runtime: Duration::ZERO,
            cost: (spent.cost > 0.0).then_some(spent.cost),
            tokens: spent.tokens,
            reserved,
        }
    }

    /// The ledger as `ralph --status --remote` shows it: what every worker spent, what the live
    /// reservations hold, and what is left of the smallest `--max-cost` any worker gave.
    pub(crate) fn shown(&self, live: &Liveness<'_>) -> FleetBudget {
        let spent = self.committed("", Amount::default(), live);
        let limit = (self.workers.values())
            .filter_map(|account| account.max_cost)
            .reduce(f64::min);
        let spent_usd = spent.cost.unwrap_or(0.0);
        let workers = (self.workers.iter())
            .map(|(name, account)| FleetAccount {
                worker: name.clone(),
                spent_usd: account.cost,
                spent_tokens: account.tokens,
                reserved_usd: (account.reserved.as_ref())
                    .filter(|r| Self::alive(name, r, live))
                    .map_or(0.0, |r| r.cost),
            })
            .collect();
        FleetBudget {
            spent_usd,
            spent_tokens: spent.tokens,
            reserved_usd: spent.reserved.cost,
            max_cost_usd: limit,
            left_usd: limit.map(|limit| (limit - spent_usd - spent.reserved.cost).max(0.0)),
            workers,
        }
    }

    /// `me` reserves `ask` (marked blind when nothing is known of its agent) for an iteration of
    /// `task`, having spent `here`, when the fleet's budgets (`rules`) can pay for it; the stop
    /// due otherwise. Either way its spending is written, for the others to count.
    fn reserve(
        &mut self,
        me: &str,
        rules: &Rules,
        (ask, blind): (Amount, bool),
        (here, task): (Here, &str),
        live: &Liveness<'_>,
    ) -> Option<Stop> {
        // Knowing nothing of its agent, a worker expects what the fleet's iterations cost (its
        // own counted as they are now).
        self.set(me, here, None, rules.max_cost);
        let average = blind.then(|| self.average()).flatten();
        let (ask, blind) = (average.unwrap_or(ask), blind && average.is_none());
        let committed = self.committed(me, here.spent, live);
        let stop = decision::admit(rules, committed, ask);
        let reserved = stop.is_none().then(|| Reserved {
            cost: ask.cost,
            tokens: ask.tokens,
            task: task.to_owned(),
            blind,
        });
        self.set(me, here, reserved, rules.max_cost);
        stop
    }

    /// `me`'s account set to `here` spent, with `reserved` (or none) and its `--max-cost`.
    fn set(&mut self, me: &str, here: Here, reserved: Option<Reserved>, max_cost: Option<f64>) {
        let now = crate::model::now();
        self.started_at.get_or_insert(now);
        let account = self.workers.entry(me.to_owned()).or_default();
        account.cost = here.spent.cost;
        account.tokens = here.spent.tokens;
        account.iterations = here.iterations;
        account.reserved = reserved;
        account.max_cost = max_cost;
        account.updated_at = now;
    }
}

/// The fleet's ledger as last fetched from `remote` (`None`: there is none, or it cannot be
/// read), as `ralph --status --remote` shows it.
pub(crate) fn seen(repo: &Repo, remote: &str, ttl: Duration) -> Option<FleetBudget> {
    let (_, text) = repo.seen_ledger(remote)?;
    let claims = repo.seen_claims(remote);
    let live = Liveness {
        claims: &claims,
        now: crate::model::now(),
        ttl,
    };
    Book::parse(&text).map(|book| book.shown(&live))
}

/// What the task loops of a worker spend together: with `--fleet-budget`, kept in the fleet's
/// ledger on `remote` too.
pub(super) fn shared(config: &RunConfig, (repo, remote): (&Repo, &str), me: &str) -> Shared {
    let shared = Shared::resumed(&start::new_state(config, None));
    if !config.options.fleet_budget {
        return shared;
    }
    shared.with_ledger(Box::new(RemoteLedger {
        repo: repo.clone(),
        remote: remote.to_owned(),
        me: me.to_owned(),
        ttl: config.options.claim_ttl,
    }))
}

/// What the fleet's ledger says was spent, and by whom, for a worker's last line: `: $0.1000
/// spent (w1 $0.0600, w2 $0.0400); see ralph --status --remote origin`.
pub(super) fn spent_by(repo: &Repo, remote: &str, ttl: Duration) -> String {
    let _ = repo.fetch_fleet(remote);
    let Some(budget) = seen(repo, remote, ttl) else {
        return String::new();
    };
    let by: Vec<String> = (budget.workers.iter())
        .map(|account| format!("{} {}", account.worker, cost_text(account.spent_usd)))
        .collect();
    format!(
        ": {} spent ({}); see ralph --status --remote {remote}",
        cost_text(budget.spent_usd),
        by.join(", ")
    )
}

/// A worker's handle on the fleet's ledger.
#[derive(Debug)]
pub(crate) struct RemoteLedger {
    pub(crate) repo: Repo,
    pub(crate) remote: String,
    /// The worker's name, as its claims give it.
    pub(crate) me: String,
    pub(crate) ttl: Duration,
}

impl RemoteLedger {
    /// Fetches the ledger and changes it with `change` (which says whether to write it, and
    /// what to return), until a write takes or nothing is to be written.
    fn update<T>(
        &self,
        mut change: impl FnMut(&mut Book, &Liveness<'_>) -> (bool, T),
    ) -> anyhow::Result<T> {
        for _ in 0..TRIES {
            self.repo
                .fetch_fleet(&self.remote)
                .map_err(anyhow::Error::msg)?;
            let (sha, mut book) = match self.repo.seen_ledger(&self.remote) {
                None => (String::new(), Book::default()),
                Some((sha, text)) => match Book::parse(&text) {
                    Some(book) => (sha, book),
                    None => {
                        anyhow::bail!("{LEDGER} on {} is not a ledger ralph can read", self.remote)
                    }
                },
            };
            let claims = self.repo.seen_claims(&self.remote);
            let live = Liveness {
                claims: &claims,
                now: crate::model::now(),
                ttl: self.ttl,
            };
            let (write, result) = change(&mut book, &live);
            if !write {
                return Ok(result);
            }
            let text = serde_json::to_string(&book)?;
            let pushed = self.repo.push_record(&self.remote, LEDGER, &text, &sha);
            if pushed.map_err(anyhow::Error::msg)?.is_some() {
                return Ok(result);
            }
        }
        anyhow::bail!("{LEDGER} on {} kept moving", self.remote)
    }
}

impl Ledger for RemoteLedger {
    fn reserve(
        &self,
        rules: &Rules,
        (ask, blind): (Amount, bool),
        here: Here,
        task: &str,
    ) -> anyhow::Result<Option<Stop>> {
        self.update(|book, live| {
            let stop = book.reserve(&self.me, rules, (ask, blind), (here, task), live);
            (true, stop)
        })
    }

    fn settle(&self, here: Here) {
        // A failed write leaves the reservation to expire with the claim, and the next
        // reservation writes what was spent.
        let _ = self.update(|book, _| {
            let max_cost = (book.workers.get(&self.me)).and_then(|account| account.max_cost);
            book.set(&self.me, here, None, max_cost);
            (true, ())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::Claim;

    fn claim(task: &str, worker: &str, age_secs: i64, released: bool) -> SeenClaim {
        let at = crate::model::now() - chrono::Duration::seconds(age_secs);
        SeenClaim {
            id: task.to_owned(),
            sha: "0".repeat(40),
            claim: Some(Claim {
                task: task.to_owned(),
                worker: worker.to_owned(),
                host: "h".to_owned(),
                pid: 1,
                started_at: at,
                heartbeat_at: at,
                fingerprint: None,
                released,
                token: 1,
                job: None,
                ready: None,
            }),
        }
    }

    fn account(cost: f64, reserved: Option<(f64, &str)>) -> Account {
        Account {
            cost,
            tokens: 10,
            reserved: reserved.map(|(cost, task)| Reserved {
                cost,
                tokens: 5,
                task: task.to_owned(),
                blind: false,
            }),
            max_cost: Some(0.1),
            iterations: 2,
            updated_at: crate::model::now(),
        }
    }

    #[test]
    fn a_reservation_counts_while_its_workers_claim_on_its_task_lives() {
        let book = Book {
            started_at: None,
            workers: BTreeMap::from([
                ("w1".to_owned(), account(0.04, Some((0.02, "a")))),
                ("w2".to_owned(), account(0.02, Some((0.02, "b")))),
                ("w3".to_owned(), account(0.02, Some((0.02, "c")))),
                ("w4".to_owned(), account(0.02, Some((0.02, "d")))),
                ("me".to_owned(), account(0.5, Some((0.5, "e")))),
            ]),
        };
        let claims = [
            claim("a", "w1", 10, false),
            // Stale: its worker died.
            claim("b", "w2", 1000, false),
            // Given back.
            claim("c", "w3", 10, true),
            // Taken over by another worker.
            claim("d", "w9", 10, false),
        ];
        let live = Liveness {
            claims: &claims,
            now: crate::model::now(),
            ttl: Duration::from_secs(900),
        };
        let here = Amount {
            cost: 0.01,
            tokens: 1,
        };
        let spent = book.committed("me", here, &live);
        // Everyone's spending, this worker's as it says, and only w1's reservation.
        assert!((spent.cost.unwrap() - 0.11).abs() < 1e-9, "{spent:?}");
        assert_eq!(spent.tokens, 41);
        assert!((spent.reserved.cost - 0.02).abs() < 1e-9, "{spent:?}");
        assert_eq!(spent.reserved.tokens, 5);
        let shown = book.shown(&live);
        assert!((shown.spent_usd - 0.6).abs() < 1e-9);
        assert!((shown.reserved_usd - 0.02).abs() < 1e-9);
        assert_eq!(shown.max_cost_usd, Some(0.1));
        assert_eq!(shown.left_usd, Some(0.0));
        assert_eq!(shown.workers.len(), 5);
    }

    #[test]
    fn a_ledger_round_trips_and_a_foreign_text_is_not_one() {
        let book = Book {
            started_at: Some(crate::model::now()),
            workers: BTreeMap::from([("w1".to_owned(), account(0.04, Some((0.02, "a"))))]),
        };
        let text = serde_json::to_string(&book).unwrap();
        assert_eq!(Book::parse(&text), Some(book));
        assert_eq!(Book::parse("a claim?"), None);
    }

    /// Workers whose first iterations knew nothing: once one of the fleet's iterations has
    /// ended, a blind reservation counts as the fleet's average, and a blind ask is that average.
    #[test]
    fn a_blind_reservation_counts_as_the_fleets_average_once_one_is_known() {
        let claims = [claim("a", "w1", 10, false), claim("b", "w2", 10, false)];
        let live = Liveness {
            claims: &claims,
            now: crate::model::now(),
            ttl: Duration::from_secs(900),
        };
        let options = crate::options::LoopOptions {
            max_cost: Some(0.12),
            ..crate::options::LoopOptions::default()
        };
        let rules = Rules::new(&options, Duration::ZERO, true);
        let nothing = (Amount::default(), true);
        let mut book = Book::default();
        let here = |cost: f64, iterations: u32| Here {
            spent: Amount { cost, tokens: 0 },
            iterations,
        };
        // w1 and w2 start knowing nothing: both reserve nothing.
        assert_eq!(
            book.reserve("w1", &rules, nothing, (here(0.0, 0), "a"), &live),
            None
        );
        assert_eq!(
            book.reserve("w2", &rules, nothing, (here(0.0, 0), "b"), &live),
            None
        );
        assert!(book.workers["w2"].reserved.as_ref().unwrap().blind);
        // w1's iteration cost 0.04; it asks blind again (its agent's average is the loop's to
        // know, but the ledger's is the fleet's): 0.04 spent, w2's blind one at 0.04, 0.04 more.
        assert_eq!(
            book.reserve("w1", &rules, nothing, (here(0.04, 1), "a"), &live),
            None
        );
        let mine = book.workers["w1"].reserved.clone().unwrap();
        assert!(!mine.blind && (mine.cost - 0.04).abs() < 1e-9, "{mine:?}");
        let spent = book.committed("w3", Amount::default(), &live);
        assert!((spent.reserved.cost - 0.08).abs() < 1e-9, "{spent:?}");
        // 0.08 spent by w1, w2's blind one at 0.04: no room for 0.04 more (without counting
        // w2's, there would be).
        assert_eq!(
            book.reserve("w1", &rules, nothing, (here(0.08, 2), "a"), &live),
            Some(Stop::MaxCost(0.12))
        );
    }
}
