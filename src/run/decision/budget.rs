//! The budgets before an iteration: what was spent, what iterations running elsewhere reserved
//! (the other task loops of a `--parallel` run, the other workers of a fleet), and what the next
//! iteration asks for. An iteration starts only when the budgets can pay for what it asks.

use std::time::Duration;

use super::{Rules, Stop};

/// An amount of the budgets: a cost in USD and tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Amount {
    pub(crate) cost: f64,
    pub(crate) tokens: u64,
}

impl Amount {
    pub(crate) fn plus(self, other: Self) -> Self {
        Self {
            cost: self.cost + other.cost,
            tokens: self.tokens.saturating_add(other.tokens),
        }
    }
}

/// What the loop (or the run, or the fleet) has used so far, checked before each iteration.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Spent {
    pub(crate) runtime: Duration,
    pub(crate) cost: Option<f64>,
    pub(crate) tokens: u64,
    /// What iterations running elsewhere reserved and have not settled yet.
    pub(crate) reserved: Amount,
}

/// The stop due before iteration `iteration` starts, if any: a stop request, the iteration
/// limit, a budget used up.
pub(crate) fn before_iteration(
    rules: &Rules,
    iteration: u32,
    spent: Spent,
    stop_requested: bool,
) -> Option<Stop> {
    if stop_requested {
        return Some(Stop::Interrupted);
    }
    if rules.max_iterations > 0 && iteration > rules.max_iterations {
        return Some(Stop::MaxIterations(rules.max_iterations));
    }
    admit(rules, spent, Amount::default())
}

/// The stop due when the budgets cannot pay for an iteration that asks `ask`: the runtime is
/// over, or what is committed (spent, and reserved by iterations running elsewhere) has reached a
/// limit, or would pass it with `ask` reserved too. An iteration that asks nothing (no estimate
/// yet) starts while anything is left. A cost limit is never reached when no agent reports a
/// cost and nothing was reserved.
pub(crate) fn admit(rules: &Rules, spent: Spent, ask: Amount) -> Option<Stop> {
    if let Some(limit) = rules.max_runtime
        && spent.runtime >= limit
    {
        return Some(Stop::MaxRuntime(limit));
    }
    if let Some(limit) = rules.max_cost {
        let known = spent.cost.is_some() || spent.reserved.cost > 0.0 || ask.cost > 0.0;
        let committed = spent.cost.unwrap_or(0.0) + spent.reserved.cost;
        // Sums of cents in floating point: 0.02 five times is a hair over 0.10.
        let (reached, passed) = (
            committed >= limit - CENT_DUST,
            committed + ask.cost > limit + CENT_DUST,
        );
        if known && (reached || (ask.cost > 0.0 && passed)) {
            return Some(Stop::MaxCost(limit));
        }
    }
    if let Some(limit) = rules.max_tokens {
        let committed = spent.tokens.saturating_add(spent.reserved.tokens);
        if committed >= limit || (ask.tokens > 0 && committed.saturating_add(ask.tokens) > limit) {
            return Some(Stop::MaxTokens(limit));
        }
    }
    None
}

/// What sums of costs may be off by in floating point.
const CENT_DUST: f64 = 1e-9;

/// Iterations the expected amount of the next one is the average of.
pub(crate) const EXPECTED_OVER: usize = 3;

/// What the next iteration is expected to spend: `--reserve` when given (its cost; the tokens
/// still from the last iterations), else the average of the last [`EXPECTED_OVER`] iterations
/// of its agent (`recent`, oldest first); nothing before the first.
pub(crate) fn expected(recent: &[Amount], reserve: Option<f64>) -> Amount {
    let last = &recent[recent.len().saturating_sub(EXPECTED_OVER)..];
    let average = if last.is_empty() {
        Amount::default()
    } else {
        let sum = last
            .iter()
            .fold(Amount::default(), |sum, one| sum.plus(*one));
        #[expect(clippy::cast_precision_loss, reason = "a handful of iterations")]
        let n = last.len() as f64;
        Amount {
            cost: sum.cost / n,
            tokens: sum.tokens / last.len() as u64,
        }
    };
    Amount {
        cost: reserve.unwrap_or(average.cost),
        ..average
    }
}
