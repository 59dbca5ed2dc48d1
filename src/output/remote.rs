//! Messages of a `--worker` and of `--status --remote`.

use super::format::{cost_text, display_width, long_duration, pad};
use super::{Voice, say};
use chrono::{DateTime, Utc};

/// `--serve` listens: the page's address (with its token) and where the token is kept. On
/// stderr, so a run's `--json` lines stay JSON; `alone`: nothing else runs in this process.
pub(crate) fn serving(url: &str, token: &std::path::Path, alone: bool) {
    let until = if alone {
        "; Ctrl+C stops the server"
    } else {
        "; it stops with the run"
    };
    super::warn(&[
        &format!("🌐 Serving this repository's runs at {url}"),
        &format!(
            "   The token in the address lets the page add context and stop the run (also in {}){until}.",
            token.display()
        ),
    ]);
}

/// A run's server could not start: the run goes on without it.
pub(crate) fn serve_failed(why: &str) {
    super::warn(&[&format!(
        "⚠️  {why}; the run goes on without a server (ralph --serve in another terminal serves it too)"
    )]);
}

/// `ralph --serve` ended.
pub(crate) fn serve_stopped() {
    super::warn(&["🌐 Server stopped."]);
}

/// A worker starts (`job`: the engine job it runs in).
pub(crate) fn remote_worker_started(
    out: &Voice,
    worker: &str,
    (remote, base): (&str, &str),
    job: Option<&str>,
) {
    let inside = job.map_or_else(String::new, |job| format!(" in {job}"));
    out.say(&[&format!(
        "🛰️  Worker {worker}{inside}: taking tasks from {remote}/{base}; each is merged there when done."
    )]);
}

/// The worker claimed a task (`from`: the worker whose claim it took over, and whether that
/// was an earlier attempt of this worker's engine job).
pub(crate) fn task_claimed(out: &Voice, id: &str, text: &str, from: Option<(&str, bool)>) {
    let over = from.map_or_else(String::new, |(from, earlier_attempt)| {
        if earlier_attempt {
            format!(" (taken back from {from}, an earlier attempt of this job)")
        } else {
            format!(" (taken over from {from}, whose claim went stale or was given back)")
        }
    });
    out.say(&[&format!("[{id}] 📌 Claimed \"{text}\"{over}")]);
}

/// Another worker claimed the same task first.
pub(crate) fn claim_race_lost(out: &Voice, id: &str) {
    out.say(&[&format!(
        "[{id}] Another worker claimed it first; picking again"
    )]);
}

/// The worker's claim was taken over (it was stale): the task is left to the new owner.
pub(crate) fn claim_lost(out: &Voice, id: &str) {
    out.warn(&[&format!(
        "[{id}] ⚠️  This worker's claim was taken over by another worker (it went stale); leaving the task to it, nothing pushed to the base"
    )]);
}

/// The task's branch could not be pushed after a commit; the next commit tries again.
pub(crate) fn push_failed(out: &Voice, reason: &str) {
    out.warn(&[&format!(
        "⚠️  Could not push the task's branch ({reason}); the next commit tries again"
    )]);
}

/// The task's branch on the remote was pushed for another text of the task: kept aside.
pub(crate) fn pushed_work_set_aside(out: &Voice, task: &str, remote: &str, branch: &str) {
    out.warn(&[&format!(
        "[{task}] ⚠️  The work pushed for this task was made for another text of it (the task list changed since); it is kept on {remote}/{branch} and not merged. The task starts afresh."
    )]);
}

/// The worker's claim moved on the remote: the task's branch is not pushed.
pub(crate) fn claim_lost_no_push(out: &Voice) {
    out.warn(&[
        "⚠️  Not pushing the task's branch: another worker took this worker's claim on the task over on the remote; this worker stops the task, and its unpushed commits stay on the branch in this clone",
    ]);
}

/// The base moved while the worker merged: it fetches and merges again.
pub(crate) fn base_moved(out: &Voice, id: &str, base: &str) {
    out.say(&[&format!(
        "[{id}] {base} moved meanwhile (another worker merged first); merging again"
    )]);
}

/// The worker's merge landed other workers' finished tasks too.
pub(crate) fn merged_along(out: &Voice, id: &str, along: &[&str], base: &str) {
    let (one, tasks) = if along.len() == 1 {
        ("its worker finds it", "task")
    } else {
        ("their workers find them", "tasks")
    };
    out.say(&[&format!(
        "[{id}] 🚂 Also merged into {base}: {tasks} {} (done by other workers and ready; {one} merged)",
        along.join(", ")
    )]);
}

/// The worker waits for tasks other workers hold.
pub(crate) fn worker_waiting(out: &Voice, held: usize) {
    out.say(&[&format!(
        "⏳ No task is free now; {held} held by other workers. Waiting for one to finish or go stale."
    )]);
}

/// The worker stops.
pub(crate) fn remote_worker_ended(out: &Voice, reason: &str, exit_code: u8) {
    out.say(&[&format!("Worker ended: {reason} (exit {exit_code})")]);
}

/// One claim, as `--status --remote` shows it (and its `--json` lists it).
#[derive(serde::Serialize)]
pub(crate) struct ClaimLine {
    pub(crate) task: String,
    pub(crate) worker: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) started_at: Option<DateTime<Utc>>,
    pub(crate) heartbeat_at: Option<DateTime<Utc>>,
    pub(crate) stale: bool,
    /// The engine job its worker runs in.
    pub(crate) job: Option<crate::git::Job>,
}

/// The fleet's budget ledger (`--fleet-budget`), as `--status --remote` shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct FleetBudget {
    pub(crate) spent_usd: f64,
    pub(crate) spent_tokens: u64,
    /// What the iterations running now reserved (their workers' claims alive).
    pub(crate) reserved_usd: f64,
    /// The smallest `--max-cost` any worker gave, and what is left of it.
    pub(crate) max_cost_usd: Option<f64>,
    pub(crate) left_usd: Option<f64>,
    pub(crate) workers: Vec<FleetAccount>,
}

/// One worker's account in the fleet's ledger.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct FleetAccount {
    pub(crate) worker: String,
    pub(crate) spent_usd: f64,
    pub(crate) spent_tokens: u64,
    pub(crate) reserved_usd: f64,
}

/// One task of the base's board, as `--status --remote` shows it.
pub(crate) struct BoardLine {
    pub(crate) icon: &'static str,
    pub(crate) id: String,
    pub(crate) text: String,
}

/// `--status --remote`: the claims on the remote, then the base's task board, the ids padded to
/// one column.
pub(crate) fn remote_status(
    remote: &str,
    base: &str,
    (claims, budget): (&[ClaimLine], Option<&FleetBudget>),
    now: DateTime<Utc>,
    board: &[BoardLine],
) {
    let ago = |at: Option<DateTime<Utc>>| {
        at.and_then(|at| (now - at).to_std().ok())
            .map_or_else(|| "?".to_owned(), long_duration)
    };
    let mut lines = vec![format!("🛰️  CLAIMS on {remote} ({})", claims.len())];
    if claims.is_empty() {
        lines.push("   none: no worker holds a task".to_owned());
    }
    let claimed = claims.iter().map(|claim| display_width(&claim.task));
    let column = claimed.max().unwrap_or(0);
    for claim in claims {
        lines.push(format!(
            "   {}  {} on {} · claimed {} ago · heartbeat {} ago{}",
            pad(&claim.task, column),
            claim.worker.as_deref().unwrap_or("?"),
            claim.host.as_deref().unwrap_or("?"),
            ago(claim.started_at),
            ago(claim.heartbeat_at),
            if claim.stale { " · STALE" } else { "" }
        ));
        if let Some(job) = &claim.job {
            let log = job
                .url
                .as_deref()
                .map_or_else(String::new, |url| format!(": {url}"));
            lines.push(format!("   {}  in {}{log}", pad("", column), job.label));
        }
    }
    if let Some(budget) = budget {
        lines.push(String::new());
        lines.extend(budget_lines(remote, budget));
    }
    lines.push(String::new());
    lines.push(format!("📋 TASKS on {remote}/{base}"));
    let column = board.iter().map(|line| display_width(&line.id)).max();
    lines.extend(board.iter().map(|line| {
        let id = pad(&line.id, column.unwrap_or(0));
        format!("   {} {id}  {}", line.icon, line.text)
    }));
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    say(&refs);
}

/// The fleet's ledger: its totals, then one line per worker.
fn budget_lines(remote: &str, budget: &FleetBudget) -> Vec<String> {
    let of = match (budget.max_cost_usd, budget.left_usd) {
        (Some(limit), Some(left)) => format!(" · {} left of {}", cost_text(left), cost_text(limit)),
        _ => String::new(),
    };
    let mut lines = vec![format!(
        "💰 FLEET BUDGET on {remote}: {} spent · {} reserved{of}",
        cost_text(budget.spent_usd),
        cost_text(budget.reserved_usd),
    )];
    let column = (budget.workers.iter())
        .map(|account| display_width(&account.worker))
        .max()
        .unwrap_or(0);
    lines.extend(budget.workers.iter().map(|account| {
        let reserved = if account.reserved_usd > 0.0 {
            format!(" · {} reserved", cost_text(account.reserved_usd))
        } else {
            String::new()
        };
        format!(
            "   {}  {} spent · {} tokens{reserved}",
            pad(&account.worker, column),
            cost_text(account.spent_usd),
            account.spent_tokens
        )
    }));
    lines
}
