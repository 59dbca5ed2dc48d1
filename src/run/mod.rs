//! The loop: run the agent, judge what it did, record it, commit, repeat. One loop, whatever
//! runs it: a run of its own, or one task's loop in a run of several (the fleet, `src/fleet/`), which it
//! knows only as a [`TaskLoop`] it is given.
//!
//! - `mod.rs`: the entry points and the loop itself (the [`Runner`] keeps only the loop's state).
//! - `decision.rs`: every rule, as pure functions (what follows an iteration, limits, retries).
//! - `iteration.rs`: one iteration as a straight pipeline: plan → prompt → command → stream →
//!   transcript → outcome → decision → record → commit.
//! - `plan.rs`: what an iteration works on: the task, the agent, the prompt, the command.
//! - `record.rs`: the history, the progress log and the events.
//! - `start.rs`: the lock, the saved state, resume, reset, and the end of the loop.
//! - `wait.rs`: the pause between iterations and the wait before a retry.
//! - `preflight.rs`: what a loop checks of its repository before it starts (an operation under
//!   way, a detached HEAD), and the user's changes its commits leave out.

mod asking;
mod checks;
pub(crate) mod claim;
pub(crate) mod decision;
mod fallback;
mod iteration;
mod open;
pub(crate) mod plan;
pub(crate) mod planner;
pub(crate) mod preflight;
mod protected;
mod record;
mod resume;
pub(crate) mod sandboxed;
mod shared;
pub(crate) mod sink;
pub(crate) mod start;
#[cfg(test)]
mod tests;
pub(crate) mod wait;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::config::{RunConfig, millis};
use crate::exit::ExitStatus;
use crate::git::{Repo, Tree};
use crate::promise::Promise;
use crate::signal::StopFlag;
use crate::storage::RalphDir;
use crate::storage::history::{self, History, IterationRecord};
use crate::storage::state::{self, LoopState};

pub(crate) use claim::{GoOn, Start, refuse_fresh, stop_leftover_agent, take_lock};
pub(crate) use open::{Opened, open};
pub(crate) use plan::{agent_plan, iteration_prompt, opencode_config_for, users_own};
pub(crate) use planner::{plan_only, preview as planning_preview};
pub(crate) use resume::resume;
pub(crate) use shared::{Here, Ledger, Shared};
pub(crate) use start::run;

use decision::{Counters, Next, Rules, Spent};

/// At a run's start: a Codex step that runs with the `bwrap` Codex ships, said once.
pub(crate) fn tell_codex_bwrap<'s>(
    steps: impl IntoIterator<Item = &'s plan::Step>,
    sink: &sink::Sink,
) {
    let shipped = steps.into_iter().find_map(|step| match &step.codex_bwrap {
        Some(crate::agents::CodexBwrap::Shipped {
            system,
            version,
            folder,
        }) => Some((system, version, folder)),
        _ => None,
    });
    if let Some((system, version, folder)) = shipped {
        sink.notice(crate::event::Notice::CodexBwrapShipped {
            system,
            version,
            folder,
        });
    }
}

/// At a run's start: the lines of its task file ralph reads otherwise than they are written,
/// one warning naming each (a task silently skipped would be a task silently not run).
pub(crate) fn tell_task_file_problems(dir: &RalphDir, sink: &sink::Sink) {
    let Ok(Some(content)) = crate::storage::read_text(&dir.tasks()) else {
        return;
    };
    let problems = crate::storage::tasks::problems(&content);
    if !problems.is_empty() {
        sink.notice(crate::event::Notice::TaskFileProblems {
            path: &dir.tasks(),
            problems: &problems,
        });
    }
}

/// Test and tuning knobs read from the environment: every timing ralph waits for.
#[derive(Clone, Debug)]
pub(crate) struct Knobs {
    pub(crate) heartbeat: Duration,
    pub(crate) tool_summary: Duration,
    pub(crate) leak_timeout: Duration,
    /// First backoff wait before retrying a provider failure.
    pub(crate) retry_base: Duration,
    /// The least pause after an iteration that failed.
    pub(crate) error_pause: Duration,
    /// How long an agent left running by a killed ralph gets to exit after SIGTERM.
    pub(crate) leftover_grace: Duration,
    /// How long a starting loop waits for a command's instant hold on the loop lock.
    pub(crate) lock_wait: Duration,
    /// How often a `--worker` with nothing to do looks at the remote again.
    pub(crate) worker_poll: Duration,
    /// How long the first `--worker` whose task is ready waits for other workers' running tasks
    /// to join its merge train.
    pub(crate) train_linger: Duration,
}

impl Knobs {
    /// Reads `RALPH_HEARTBEAT_MS`, `RALPH_TOOL_SUMMARY_MS`, `RALPH_LEAK_TIMEOUT_MS`, `RALPH_RETRY_BASE_MS`, `RALPH_ERROR_PAUSE_MS`,
    /// `RALPH_LEFTOVER_GRACE_MS`, `RALPH_LOCK_WAIT_MS`, `RALPH_WORKER_POLL_MS` and
    /// `RALPH_TRAIN_LINGER_MS`.
    pub(crate) fn from_env() -> Self {
        let ms = crate::model::env_millis;
        Self {
            heartbeat: ms("RALPH_HEARTBEAT_MS", 10_000),
            tool_summary: ms("RALPH_TOOL_SUMMARY_MS", 3_000),
            leak_timeout: ms("RALPH_LEAK_TIMEOUT_MS", 500),
            retry_base: ms("RALPH_RETRY_BASE_MS", 15_000),
            error_pause: ms("RALPH_ERROR_PAUSE_MS", 2_000),
            leftover_grace: ms("RALPH_LEFTOVER_GRACE_MS", 3_000),
            lock_wait: ms("RALPH_LOCK_WAIT_MS", 300),
            worker_poll: ms("RALPH_WORKER_POLL_MS", 10_000),
            train_linger: ms("RALPH_TRAIN_LINGER_MS", 1_500),
        }
    }
}

/// What does not change while the loop runs.
struct Env<'a> {
    config: &'a RunConfig,
    cwd: &'a Path,
    dir: &'a RalphDir,
    stop: &'a StopFlag,
    knobs: &'a Knobs,
    repo: Option<Repo>,
    steps: plan::Steps,
    rules: Rules,
    promises: Promises,
    /// Which loop of a run this is.
    shape: Shape,
    /// Where the loop's events go.
    sink: sink::Sink,
    /// The sandbox its agents run in (`--sandbox`), if any.
    sandbox: Option<crate::sandbox::Sandbox>,
}

/// The shapes a loop takes. A run is one loop of its own, or several task loops: those of a
/// `--parallel` run (its coordinator is `parallel::Coordinator`) or of a `--worker` (its session
/// is `remote::Session`). "Worker" names only `--worker`.
enum Shape {
    /// A loop of its own: `ralph "…"`, with or without `--tasks`, or in a `--worktree`.
    Single,
    /// One task's loop in a run of several.
    Task(TaskLoop),
}

impl Shape {
    /// The task loop, when this is one.
    fn task_loop(&self) -> Option<&TaskLoop> {
        match self {
            Self::Single => None,
            Self::Task(task) => Some(task),
        }
    }
}

/// One task's loop in a run of several (`--parallel`, `--worker`): its task, and what it shares
/// with the other task loops.
pub(crate) struct TaskLoop {
    /// The task's id (as `storage::tasks::task_ids` gives it).
    pub(crate) task_id: String,
    /// The budgets every task loop of the run spends together.
    pub(crate) shared: std::sync::Arc<Shared>,
    /// The branch the task merges into.
    pub(crate) base: String,
    /// Files left in conflict by merging the base into the task's branch, to resolve.
    pub(crate) conflicts: Vec<String>,
    /// A `--worker`'s remote: the task's branch is pushed there after every commit, so no work
    /// is lost if the machine dies, as long as the worker holds the task's claim.
    pub(crate) publish: Option<Publish>,
    /// The base's `.ralph/`: the task's iteration logs go to its `logs/<task-id>/`, and every
    /// iteration is recorded in its history too (with the task's id), so `--status`, `--report`,
    /// `--watch` and `--log` see the whole run.
    pub(crate) home: RalphDir,
    /// The other tasks whose loops ran when this one started (its prompt says so).
    pub(crate) alongside: Vec<String>,
    /// The task's worktree was just laid out clean at its branch (taken from the pool or new):
    /// no work of an interrupted iteration can be in it, so none is looked for.
    pub(crate) laid_clean: bool,
}

impl TaskLoop {
    /// Where the task's iteration logs go: `.ralph/logs/<task-id>/` of the base.
    pub(crate) fn logs(&self) -> std::path::PathBuf {
        self.home.logs().join(&self.task_id)
    }

    /// The task's branch.
    pub(crate) fn branch(&self) -> String {
        crate::storage::tasks::branch_of(&self.task_id)
    }

    /// Adds an iteration of this task's loop to the base's history (the run's record of every
    /// task), under the run's lock: the task loops of a run write it one at a time.
    fn record_in_base(&self, record: &IterationRecord) -> anyhow::Result<()> {
        self.shared.edit_history(&self.home, |history| {
            history.record(record.clone(), history::Struggle::Skip);
        })
    }
}

/// Where a `--worker`'s task loop pushes its branch, and the claim that lets it.
pub(crate) struct Publish {
    pub(crate) remote: String,
    pub(crate) fence: Fence,
}

/// A worker's claim on its task, as its heartbeat last saw it: the claim's commit on the remote,
/// or `None` once another worker took it over. A push of the task's branch is made only with
/// the claim unchanged on the remote (one atomic push), so a worker that lost its claim (it
/// stalled past `--claim-ttl`) never pushes to the task's branch again. The heartbeat's refresh
/// of the claim and a push of the branch each hold the fence while they push: were they to
/// cross, the branch's push would find the claim moved by its own heartbeat and be dropped.
#[derive(Clone, Debug)]
pub(crate) struct Fence(std::sync::Arc<std::sync::Mutex<Option<String>>>);

impl Fence {
    pub(crate) fn holding(sha: &str) -> Self {
        Self(std::sync::Arc::new(std::sync::Mutex::new(Some(
            sha.to_owned(),
        ))))
    }

    /// The claim's commit held (`None`: lost), locked until the guard goes: a push made while
    /// it is held cannot cross another.
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The promises the agent can make, with their matchers built once.
struct Promises {
    completion: Promise,
    task: Promise,
    abort: Option<Promise>,
}

/// The loop's state: what it saved, what it learnt, what it counts.
struct Runner<'a> {
    env: Env<'a>,
    state: LoopState,
    history: History,
    /// Sections for the next prompt: why a claim was refused.
    feedback: Vec<String>,
    counters: Counters,
    announced_stop: bool,
    resumed: bool,
    /// When this session started, and the runtime of earlier sessions of a resumed loop.
    session_started: Instant,
    earlier_runtime_ms: u64,
    /// The work tree as last scanned: the next iteration starts from it.
    tree: Tree,
    /// Which agents are out of quota, for `--fallback`.
    limits: fallback::Limits,
    /// What each task may change and must leave alone, as its list said when the loop started.
    sealed: protected::Sealed,
}

impl Runner<'_> {
    fn runtime(&self) -> Duration {
        Duration::from_millis(self.earlier_runtime_ms) + self.session_started.elapsed()
    }

    fn save_state(&mut self) -> anyhow::Result<()> {
        self.state.runtime_ms = millis(self.runtime());
        state::save(&self.env.dir.state(), &self.state)
    }

    /// [`Self::save_state`] not synced to disk: within an iteration and between two, where the
    /// iteration's history record is the synced write (see [`state::save_unsynced`]).
    fn save_state_unsynced(&mut self) -> anyhow::Result<()> {
        self.state.runtime_ms = millis(self.runtime());
        state::save_unsynced(&self.env.dir.state(), &self.state)
    }

    /// The loop, then its end.
    fn run(&mut self) -> anyhow::Result<ExitStatus> {
        let stop = self.run_loop()?;
        self.finish(&stop)
    }

    /// Iterations until a stop.
    fn run_loop(&mut self) -> anyhow::Result<decision::Stop> {
        self.start()?;
        if self.env.shape.task_loop().is_none() {
            protected::tell_at_start(self);
        }
        let stop = loop {
            let iteration = self.state.iteration;
            let spent = match self.env.shape.task_loop() {
                Some(task) => task.shared.spent(),
                None => Spent {
                    runtime: self.runtime(),
                    cost: self.history.total_cost_usd,
                    tokens: self.history.total_tokens.billable(),
                    reserved: decision::Amount::default(),
                },
            };
            let due = decision::before_iteration(
                &self.env.rules,
                iteration,
                spent,
                self.env.stop.is_stopping(),
            );
            if let Some(stop) = due {
                break stop;
            }
            // A run's task reserves what its iteration is expected to spend, beside the others.
            let reserved = match self.env.shape.task_loop() {
                Some(task) => {
                    let step = plan::step_for(&self.env.steps.rotation, iteration);
                    match task
                        .shared
                        .reserve(&self.env.rules, step.spec.id(), &task.task_id)
                    {
                        Ok(reservation) => Some((std::sync::Arc::clone(&task.shared), reservation)),
                        Err(stop) => break stop,
                    }
                }
                None => None,
            };
            let next = iteration::run(self, iteration);
            if let Some((shared, reservation)) = reserved {
                shared.settle(reservation);
            }
            let next = match next {
                Ok(next) => {
                    self.counters.own_failures = 0;
                    next
                }
                Err(err) => self.own_failure(iteration, &err)?,
            };
            match next {
                Next::Stop(stop) => break stop,
                Next::Continue { pause } => {
                    self.state.iteration = iteration.saturating_add(1);
                    self.save_state_unsynced()?;
                    wait::pause(self.env.stop, pause);
                }
                Next::Switch => {
                    // Another agent takes the same iteration at once.
                    self.tree.forget();
                    self.save_state()?;
                }
                Next::Retry(failure) => {
                    // A retry can wait for hours, in which anyone may edit the tree.
                    self.tree.forget();
                    self.save_state()?;
                    if let Some(stop) = wait::before_retry(self, iteration, &failure) {
                        break stop;
                    }
                }
            }
        };
        Ok(stop)
    }

    /// An iteration in which ralph itself failed: recorded, and the loop goes on, unless it
    /// keeps happening.
    fn own_failure(&mut self, iteration: u32, err: &anyhow::Error) -> anyhow::Result<Next> {
        let message = format!("{err:#}");
        self.env.sink.notice(crate::event::Notice::IterationError {
            iteration,
            error: &message,
        });
        if let Some(stop) = decision::after_own_failure(&mut self.counters, &message) {
            return Ok(Next::Stop(stop));
        }
        record::own_failure(self, iteration, &message)?;
        Ok(Next::Continue {
            pause: self.env.knobs.error_pause.max(self.env.rules.pause),
        })
    }

    fn announce_stop(&mut self) {
        if !self.announced_stop {
            self.announced_stop = true;
            self.env.sink.notice(crate::event::Notice::Stopping);
        }
    }
}
