//! What every task loop of a run spends, counted together for the run's budgets, and the
//! reservations that let an iteration start only when the budgets can pay for it: before it
//! starts, a task loop reserves what its agent's last iterations spent (or `--reserve`); after,
//! it settles. A `--fleet-budget` worker keeps its reservations in the fleet's [`Ledger`] on its
//! remote, where every worker sharing it sees them.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::decision::{self, Amount, EXPECTED_OVER, Rules, Spent, Stop};
use crate::storage::history::{self, History};
use crate::storage::state::LoopState;
use crate::storage::{Loaded, RalphDir};

/// The budgets of every worker sharing a remote (`--fleet-budget`): what each spent and what
/// each reserved for the iteration it runs.
pub(crate) trait Ledger: Send + Sync + std::fmt::Debug {
    /// Reserves `ask` for the next iteration of task `task` when the fleet's budgets (`rules`)
    /// can pay for it, with `here` what this worker has spent in all; the stop due otherwise.
    /// An ask marked blind (`true`: nothing known of the agent yet, no `--reserve`) is for the
    /// ledger to make.
    fn reserve(
        &self,
        rules: &Rules,
        ask: (Amount, bool),
        here: Here,
        task: &str,
    ) -> anyhow::Result<Option<Stop>>;

    /// Settles this worker's reservation: `here` is what it has spent in all.
    fn settle(&self, here: Here);
}

/// What a worker has spent in all, and in how many iterations.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Here {
    pub(crate) spent: Amount,
    pub(crate) iterations: u32,
}

/// What every task loop of a parallel run (or a worker's task loops, one after another) spends,
/// counted together for the global budgets.
#[derive(Debug)]
pub(crate) struct Shared {
    started: Instant,
    /// Cost in billionths of a USD; `cost_seen` says whether any agent reported one.
    cost_nanos: AtomicU64,
    cost_seen: AtomicBool,
    tokens: AtomicU64,
    /// Iterations of this session's task loops.
    iterations: AtomicU32,
    /// Held while a task loop writes the base's history.
    history: Mutex<()>,
    /// The reservations of the iterations running now, and what each agent's last iterations
    /// spent.
    book: Mutex<Book>,
    /// The fleet's ledger (a `--fleet-budget` worker's).
    ledger: Option<Box<dyn Ledger>>,
}

#[derive(Debug, Default)]
struct Book {
    next: u64,
    live: BTreeMap<u64, Live>,
    /// By agent, oldest first, the last [`EXPECTED_OVER`] iterations.
    recent: BTreeMap<String, Vec<Amount>>,
}

/// An iteration running now: its agent and what it reserved.
#[derive(Debug)]
struct Live {
    agent: String,
    ask: Amount,
    /// Started before anything was known of its agent (and without `--reserve`): it reserved
    /// nothing, and counts as what its agent's iterations have cost since.
    blind: bool,
}

impl Book {
    /// What the running iterations hold: each its reservation, a blind one what its agent's
    /// last iterations cost (nothing while none ended).
    fn reserved(&self) -> Amount {
        (self.live.values()).fold(Amount::default(), |sum, live| {
            let held = if live.blind {
                // Blind only without `--reserve`.
                let recent = self.recent.get(&live.agent).map_or(&[][..], Vec::as_slice);
                decision::expected(recent, None)
            } else {
                live.ask
            };
            sum.plus(held)
        })
    }
}

/// What one iteration reserved; given back by [`Shared::settle`] when it ends.
#[derive(Debug)]
pub(crate) struct Reservation {
    id: u64,
}

impl Shared {
    /// The totals of a run so far (a resumed run's saved ones, or nothing).
    pub(crate) fn resumed(state: &LoopState) -> Self {
        Self::after(
            Duration::from_millis(state.runtime_ms),
            state.spent_cost_usd,
            state.spent_tokens,
        )
    }

    /// The totals of a run that ran for `runtime` and spent `cost` and `tokens`.
    fn after(runtime: Duration, cost: Option<f64>, tokens: u64) -> Self {
        let now = Instant::now();
        let shared = Self {
            started: now.checked_sub(runtime).unwrap_or(now),
            cost_nanos: 0.into(),
            cost_seen: false.into(),
            tokens: 0.into(),
            iterations: 0.into(),
            history: Mutex::new(()),
            book: Mutex::default(),
            ledger: None,
        };
        shared.add(cost, tokens);
        shared
    }

    /// The same, its reservations kept in the fleet's `ledger`.
    pub(crate) fn with_ledger(self, ledger: Box<dyn Ledger>) -> Self {
        Self {
            ledger: Some(ledger),
            ..self
        }
    }

    /// Writes the totals into the run's state, for `--resume`.
    pub(crate) fn save_into(&self, state: &mut LoopState) {
        let spent = self.spent();
        state.runtime_ms = crate::config::millis(spent.runtime);
        state.spent_cost_usd = spent.cost;
        state.spent_tokens = spent.tokens;
    }

    /// Counts one iteration of a task loop by `agent`, and what it spent.
    pub(super) fn add_iteration(&self, agent: &str, cost: Option<f64>, tokens: u64) {
        self.iterations.fetch_add(1, Ordering::SeqCst);
        self.add(cost, tokens);
        let mut book = self.book();
        let recent = book.recent.entry(agent.to_owned()).or_default();
        recent.push(Amount {
            cost: cost.filter(|c| c.is_finite() && *c > 0.0).unwrap_or(0.0),
            tokens,
        });
        let over = recent.len().saturating_sub(EXPECTED_OVER);
        recent.drain(..over);
    }

    /// Adds what was spent.
    pub(crate) fn add(&self, cost: Option<f64>, tokens: u64) {
        if let Some(cost) = cost.filter(|c| c.is_finite() && *c > 0.0) {
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a positive cost, saturating"
            )]
            let nanos = (cost * 1e9).min(u64::MAX as f64) as u64;
            let _ = self
                .cost_nanos
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |old| {
                    Some(old.saturating_add(nanos))
                });
        }
        if cost.is_some() {
            self.cost_seen.store(true, Ordering::SeqCst);
        }
        let _ = self
            .tokens
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |old| {
                Some(old.saturating_add(tokens))
            });
    }

    /// Iterations run so far in this session, by every task loop.
    pub(crate) fn iterations(&self) -> u32 {
        self.iterations.load(Ordering::SeqCst)
    }

    /// Everything spent so far, by every task loop (nothing reserved counted).
    pub(crate) fn spent(&self) -> Spent {
        #[expect(clippy::cast_precision_loss, reason = "display and budget only")]
        let cost = self
            .cost_seen
            .load(Ordering::SeqCst)
            .then(|| self.cost_nanos.load(Ordering::SeqCst) as f64 / 1e9);
        Spent {
            runtime: self.started.elapsed(),
            cost,
            tokens: self.tokens.load(Ordering::SeqCst),
            reserved: Amount::default(),
        }
    }

    /// Reserves what the next iteration of `agent` in task `task` is expected to spend, when the
    /// budgets (the run's, or the fleet's with a ledger) can pay for it; the stop due otherwise.
    pub(super) fn reserve(
        &self,
        rules: &Rules,
        agent: &str,
        task: &str,
    ) -> Result<Reservation, Stop> {
        let mut book = self.book();
        let recent = book.recent.get(agent).map_or(&[][..], Vec::as_slice);
        let blind = recent.is_empty() && rules.reserve.is_none();
        let ask = decision::expected(recent, rules.reserve);
        if let Some(ledger) = &self.ledger {
            match ledger.reserve(rules, (ask, blind), self.here(), task) {
                Ok(None) => {}
                Ok(Some(stop)) => return Err(stop),
                Err(err) => {
                    return Err(Stop::RalphFailed(format!(
                        "the fleet's budget ledger could not be read or written ({err:#}); no iteration starts without it"
                    )));
                }
            }
        } else {
            let spent = Spent {
                reserved: book.reserved(),
                ..self.spent()
            };
            if let Some(stop) = decision::admit(rules, spent, ask) {
                return Err(stop);
            }
        }
        book.next += 1;
        let id = book.next;
        book.live.insert(
            id,
            Live {
                agent: agent.to_owned(),
                ask,
                blind,
            },
        );
        Ok(Reservation { id })
    }

    /// Gives back what an iteration reserved, once it ended (what it spent was added).
    pub(super) fn settle(&self, reservation: Reservation) {
        self.book().live.remove(&reservation.id);
        if let Some(ledger) = &self.ledger {
            ledger.settle(self.here());
        }
    }

    /// What this session spent in all, and in how many iterations, for the fleet's ledger.
    fn here(&self) -> Here {
        let spent = self.spent();
        Here {
            spent: Amount {
                cost: spent.cost.unwrap_or(0.0),
                tokens: spent.tokens,
            },
            iterations: self.iterations(),
        }
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Changes the run's history in the base's `.ralph/` (`home`), one writer at a time: the
    /// task loops and the coordinator of a run all record there.
    pub(crate) fn edit_history(
        &self,
        home: &RalphDir,
        change: impl FnOnce(&mut History),
    ) -> anyhow::Result<()> {
        let _turn = (self.history.lock()).unwrap_or_else(std::sync::PoisonError::into_inner);
        let path = home.history();
        let mut history = match history::load(&path) {
            Loaded::Found(history) => history,
            Loaded::Missing => History::default(),
            Loaded::Corrupt(_) => {
                crate::storage::keep_corrupt_copy(&path)?;
                History::default()
            }
        };
        change(&mut history);
        history::save(&path, &history)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(max_cost: f64) -> Rules {
        let options = crate::options::LoopOptions {
            max_cost: Some(max_cost),
            ..crate::options::LoopOptions::default()
        };
        Rules::new(&options, Duration::ZERO, true)
    }

    /// Three loops start blind; one ends at 0.02 and goes on: the two still running count as
    /// 0.02 each from then on, so the run stops where their real cost would reach the budget.
    #[test]
    fn iterations_started_blind_count_as_what_their_agent_costs_once_it_is_known() {
        let shared = Shared::after(Duration::ZERO, None, 0);
        let budget = rules(0.10);
        let first: Vec<_> = (0..3)
            .map(|_| shared.reserve(&budget, "claude-code", "t").unwrap())
            .collect();
        let mut first = first.into_iter();
        shared.add_iteration("claude-code", Some(0.02), 0);
        shared.settle(first.next().unwrap());
        // 0.02 spent, two running at 0.02, this one 0.02: 0.08.
        let second = shared.reserve(&budget, "claude-code", "t").unwrap();
        shared.add_iteration("claude-code", Some(0.02), 0);
        shared.settle(second);
        // 0.04 spent, two running at 0.02, this one: 0.10.
        let third = shared.reserve(&budget, "claude-code", "t").unwrap();
        shared.add_iteration("claude-code", Some(0.02), 0);
        shared.settle(third);
        assert!(
            shared.reserve(&budget, "claude-code", "t").is_err(),
            "0.06 spent and 0.04 running: no room for 0.02 more"
        );
        // The two blind ones end: 0.10 in all, never more.
        for running in first {
            shared.add_iteration("claude-code", Some(0.02), 0);
            shared.settle(running);
        }
        assert!((shared.spent().cost.unwrap() - 0.10).abs() < 1e-9);
    }

    /// Another agent's cost says nothing of a blind iteration's.
    #[test]
    fn a_blind_iteration_is_judged_by_its_own_agent() {
        let shared = Shared::after(Duration::ZERO, None, 0);
        let budget = rules(0.10);
        let _blind = shared.reserve(&budget, "codex", "a").unwrap();
        shared.add_iteration("claude-code", Some(0.05), 0);
        assert!(
            shared.reserve(&budget, "claude-code", "b").is_ok(),
            "0.05 + 0.05"
        );
    }
}
