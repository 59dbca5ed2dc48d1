//! The loop's rules, decided in one place with no I/O: the facts of an iteration go in, the next
//! action comes out. Everything that spawns, reads or writes lives around this module; every rule
//! of `specs/iteration.md` is a unit test here.

use std::time::Duration;

use crate::model::{Failure, FailureKind, StopKind, Verification};
use crate::options::LoopOptions;
use crate::output::format::plural;
use crate::storage::tasks::{TaskList, TaskStatus};

mod budget;
mod refusal;

pub(crate) use budget::{Amount, EXPECTED_OVER, Spent, admit, before_iteration, expected};
pub(crate) use refusal::Refusal;

/// Iterations in a row in which ralph itself fails before the loop gives up.
pub(crate) const MAX_OWN_FAILURES: u32 = 3;

/// The options the rules read, and what ralph knows about its surroundings.
#[derive(Clone, Debug)]
pub(crate) struct Rules {
    pub(crate) min_iterations: u32,
    pub(crate) max_iterations: u32,
    pub(crate) tasks: bool,
    pub(crate) max_retries: u32,
    pub(crate) max_stalled: Option<u32>,
    pub(crate) max_failed_runs: u32,
    pub(crate) max_runtime: Option<Duration>,
    pub(crate) max_cost: Option<f64>,
    pub(crate) max_tokens: Option<u64>,
    /// `--reserve`: what an iteration of a run's task reserves of `--max-cost`.
    pub(crate) reserve: Option<f64>,
    pub(crate) pause: Duration,
    /// The least pause after an iteration that failed.
    pub(crate) error_pause: Duration,
    /// Whether file changes are tracked (a git repository).
    pub(crate) files_tracked: bool,
    /// A task loop of a run: its one task's promise (or the completion promise) completes its
    /// loop; the rest of the task list is others' work.
    pub(crate) task_loop: bool,
    /// `--protect-mode fail`: a change to a protected path ends the loop.
    pub(crate) protect_fails: bool,
}

impl Rules {
    pub(crate) fn new(options: &LoopOptions, error_pause: Duration, files_tracked: bool) -> Self {
        Self {
            min_iterations: options.min_iterations,
            max_iterations: options.max_iterations,
            tasks: options.tasks,
            max_retries: options.max_retries,
            max_stalled: options.max_stalled,
            max_failed_runs: options.max_failed_runs,
            max_runtime: options.max_runtime,
            max_cost: options.max_cost,
            max_tokens: options.max_tokens,
            reserve: options.reserve,
            pause: options.pause,
            error_pause,
            files_tracked,
            task_loop: false,
            protect_fails: options.protect_mode == "fail",
        }
    }
}

/// What happened in one iteration.
#[derive(Clone, Debug, Default)]
pub(crate) struct Facts {
    pub(crate) iteration: u32,
    pub(crate) exit_code: i32,
    /// The user stopped the agent (Ctrl-C).
    pub(crate) interrupted: bool,
    /// Promises on the decisive line: completion, task, abort.
    pub(crate) completion: bool,
    pub(crate) task_done: bool,
    pub(crate) abort: bool,
    /// The agent's (or ralph's timeout) failure.
    pub(crate) failure: Option<Failure>,
    /// `--fallback` hands this failed iteration to another agent at once.
    pub(crate) switch_agent: bool,
    /// OpenCode ran the legacy placeholder plugin.
    pub(crate) legacy_plugin: bool,
    pub(crate) files_changed: bool,
    /// Tasks mode: the top-level tasks not `[x]` after the agent ran.
    pub(crate) open_tasks: Vec<String>,
    /// Tasks mode: why the task file cannot be read, if it cannot.
    pub(crate) tasks_unreadable: Option<String>,
    /// The task worked on, if any.
    pub(crate) task: Option<String>,
    /// The agent's final message (shown when it gives up).
    pub(crate) final_text: String,
    /// The `--verify` results, when they ran.
    pub(crate) verification: Option<Vec<Verification>>,
    /// The task's own `verify` results, when they ran.
    pub(crate) task_verification: Option<Vec<Verification>>,
    /// Protected paths the agent changed (put back before anything was judged or committed).
    pub(crate) protected_changes: Vec<String>,
    /// The `--holdout` results, when they ran (a claim whose `--verify` passed).
    pub(crate) holdout: Option<Vec<Verification>>,
}

/// Counts the rules keep from one iteration to the next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    /// Iterations in a row that changed no files.
    pub(crate) stalled: u32,
    /// Retries in a row of the current iteration.
    pub(crate) retries: u32,
    /// Iterations in a row in which the agent exited with an error and changed nothing.
    pub(crate) failed_runs: u32,
    /// Iterations in a row in which ralph itself failed.
    pub(crate) own_failures: u32,
}

/// What the agent's completion claim is worth before any verification runs.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Claim {
    /// No completion promise.
    None,
    /// Before `--min-iterations`.
    Deferred,
    /// Tasks mode with tasks still open (or an unreadable task file).
    OpenTasks(Vec<String>),
    /// Acceptable once `--verify` passes (when there is any).
    Acceptable,
}

/// Judges a completion claim: the first rule that holds it back, else acceptable.
pub(crate) fn claim(rules: &Rules, facts: &Facts) -> Claim {
    let claimed = facts.completion || (rules.task_loop && facts.task_done);
    if !claimed {
        return Claim::None;
    }
    if facts.iteration < rules.min_iterations {
        return Claim::Deferred;
    }
    if rules.tasks && !rules.task_loop {
        if let Some(why) = &facts.tasks_unreadable {
            return Claim::OpenTasks(vec![format!("(the task file cannot be read: {why})")]);
        }
        if !facts.open_tasks.is_empty() {
            return Claim::OpenTasks(facts.open_tasks.clone());
        }
    }
    Claim::Acceptable
}

/// Why a loop ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Stop {
    Completed {
        iteration: u32,
    },
    MaxIterations(u32),
    MaxRuntime(Duration),
    MaxCost(f64),
    MaxTokens(u64),
    /// The agent printed the abort promise; its final message.
    Aborted {
        message: String,
    },
    Stalled(u32),
    AgentFailed {
        failure: Failure,
        retries: u32,
    },
    LegacyPlugin,
    /// ralph itself failed several iterations in a row (the agent cannot start, the disk is full).
    RalphFailed(String),
    /// The agent exited with an error and changed nothing, several iterations in a row.
    AgentKeptFailing {
        exit_code: i32,
        runs: u32,
    },
    /// In tasks mode, no open task can be started.
    Blocked(Vec<String>),
    /// A verify command could not run at all (not found, not executable): the claim cannot be
    /// checked, and asking the agent again would not change that.
    Unverified(Verification),
    /// `--protect-mode fail`: the agent changed these protected paths (put back).
    Tampered(Vec<String>),
    Interrupted,
}

/// What the loop does next.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Next {
    /// The next iteration, after a pause.
    Continue {
        pause: Duration,
    },
    /// The same iteration again, after a wait: the provider failed.
    Retry(Failure),
    /// The same iteration again at once, with another agent (`--fallback`).
    Switch,
    Stop(Stop),
}

/// The decision after an iteration.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Decision {
    pub(crate) next: Next,
    /// The iteration goes into the history and the progress log.
    pub(crate) record: bool,
    /// What the progress log says happened.
    pub(crate) outcome: String,
    /// A claim that was refused, and why.
    pub(crate) refusal: Option<Refusal>,
    /// The iteration counts for the struggle indicators (not a provider failure).
    pub(crate) agent_side: bool,
    /// The context injected into this iteration's prompt is used up.
    pub(crate) consume_context: bool,
    /// The agent's work is committed.
    pub(crate) commit: bool,
    pub(crate) counters: Counters,
}

/// Decides what follows an iteration, from its facts and the counts so far.
pub(crate) fn decide(rules: &Rules, facts: &Facts, counters: Counters) -> Decision {
    let mut decision = Decision {
        next: Next::Continue { pause: rules.pause },
        record: true,
        outcome: "continued".to_owned(),
        refusal: None,
        agent_side: facts
            .failure
            .as_ref()
            .is_none_or(|f| !f.kind.is_transient()),
        consume_context: false,
        commit: facts.files_changed,
        counters,
    };
    if facts.interrupted {
        // Recorded, so its number (and its log) is never used again; not the agent's doing.
        decision.next = Next::Stop(Stop::Interrupted);
        decision.outcome = "interrupted".to_owned();
        decision.agent_side = false;
        decision.commit = false;
        return decision;
    }
    if rules.protect_fails && !facts.protected_changes.is_empty() {
        // Its changes to them are undone; what else it did is committed, and the loop ends.
        decision.outcome = format!(
            "changed protected paths: {}",
            facts.protected_changes.join(", ")
        );
        decision.next = Next::Stop(Stop::Tampered(facts.protected_changes.clone()));
        return decision;
    }
    let completed = judge_claims(rules, facts, &mut decision);
    if let Some(unrunnable) = unrunnable(facts) {
        // Not the agent's failed attempt: the check itself is broken.
        decision.refusal = None;
        decision.outcome = format!("unverified: `{}` could not run", unrunnable.command);
        decision.next = Next::Stop(Stop::Unverified(unrunnable));
    } else if facts.legacy_plugin {
        decision.next = Next::Stop(Stop::LegacyPlugin);
        decision.commit = false;
    } else if completed {
        decision.next = Next::Stop(Stop::Completed {
            iteration: facts.iteration,
        });
    } else if facts.abort {
        decision.next = Next::Stop(Stop::Aborted {
            message: facts.final_text.clone(),
        });
    } else if let Some(failure) = facts.failure.clone().filter(|f| is_retried(f.kind)) {
        decision.next = if facts.switch_agent {
            Next::Switch
        } else {
            retry_or_stop(rules, failure, &mut decision.counters)
        };
    } else {
        decision.consume_context = true;
        decision.next = after_work(rules, facts, &mut decision);
    }
    decision
}

/// The claims' outcome: sets the outcome text and refusal; true when the loop is complete.
fn judge_claims(rules: &Rules, facts: &Facts, decision: &mut Decision) -> bool {
    let mut completed = false;
    match claim(rules, facts) {
        Claim::None if facts.task_done => {
            let task = facts.task.as_deref().unwrap_or("the current task");
            decision.outcome = format!("task done: {task}");
            let failed = failures(facts.task_verification.as_deref());
            if !failed.is_empty() {
                let refusal = Refusal::TaskVerification {
                    task: task.to_owned(),
                    failed,
                };
                decision.outcome = format!("task not accepted: {}", refusal.reason());
                decision.refusal = Some(refusal);
            }
        }
        Claim::None => {}
        Claim::Deferred => {
            decision.outcome = format!(
                "completion deferred (minimum {} iterations)",
                rules.min_iterations
            );
        }
        Claim::OpenTasks(open) => refuse(decision, Refusal::OpenTasks(open)),
        Claim::Acceptable => {
            let failed = failures(facts.verification.as_deref());
            let hidden = failures(facts.holdout.as_deref());
            if !failed.is_empty() {
                refuse(decision, Refusal::Verification(failed));
            } else if !hidden.is_empty() {
                let total = facts.holdout.as_ref().map_or(0, Vec::len);
                refuse(
                    decision,
                    Refusal::Holdout {
                        failed: hidden,
                        total,
                    },
                );
            } else {
                completed = true;
                decision.outcome = "completed".to_owned();
            }
        }
    }
    if facts.abort && !completed {
        decision.outcome = "the agent gave up (abort promise)".to_owned();
    }
    if let Some(failure) = &facts.failure {
        decision.outcome = format!("failed: {}: {}", failure.kind.label(), failure.message);
    }
    completed
}

/// The first verify command (the run's or the task's) that could not run at all: the shell's
/// 127 (not found) or 126 (not executable).
fn unrunnable(facts: &Facts) -> Option<Verification> {
    let ran = facts.verification.iter().chain(&facts.task_verification);
    ran.flatten().find(|result| result.could_not_run()).cloned()
}

fn refuse(decision: &mut Decision, refusal: Refusal) {
    decision.outcome = format!("completion refused: {}", refusal.reason());
    decision.refusal = Some(refusal);
}

fn failures(results: Option<&[Verification]>) -> Vec<Verification> {
    results
        .unwrap_or_default()
        .iter()
        .filter(|result| !result.passed)
        .cloned()
        .collect()
}

/// A provider failure: the same iteration again, unless it cannot help or was tried enough.
fn retry_or_stop(rules: &Rules, failure: Failure, counters: &mut Counters) -> Next {
    counters.retries += 1;
    if counters.retries > rules.max_retries || failure.kind.is_fatal() {
        let retries = counters.retries - 1;
        return Next::Stop(Stop::AgentFailed { failure, retries });
    }
    Next::Retry(failure)
}

/// After an iteration of ordinary work: the failing-agent and stall rules, else the next one.
fn after_work(rules: &Rules, facts: &Facts, decision: &mut Decision) -> Next {
    let counters = &mut decision.counters;
    counters.retries = 0;
    let changed_nothing = !facts.files_changed;
    if facts.exit_code != 0 && changed_nothing && facts.failure.is_none() {
        counters.failed_runs += 1;
        if counters.failed_runs >= rules.max_failed_runs {
            return Next::Stop(Stop::AgentKeptFailing {
                exit_code: facts.exit_code,
                runs: counters.failed_runs,
            });
        }
    } else {
        counters.failed_runs = 0;
    }
    if decision.agent_side && rules.files_tracked {
        counters.stalled = if changed_nothing {
            counters.stalled + 1
        } else {
            0
        };
        if let Some(limit) = rules.max_stalled
            && counters.stalled >= limit
        {
            return Next::Stop(Stop::Stalled(counters.stalled));
        }
    }
    let pause = if facts.exit_code == 0 {
        rules.pause
    } else {
        rules.error_pause.max(rules.pause)
    };
    Next::Continue { pause }
}

/// In tasks mode, the stop when open tasks remain but none can be started (each failed, or
/// waiting for one that is not done).
pub(crate) fn tasks_blocked(list: &TaskList) -> Option<Stop> {
    if list.is_empty() || list.all_complete() || list.focus().is_some() {
        return None;
    }
    Some(Stop::Blocked(
        list.open()
            .map(|task| {
                let blockers = list.blockers(task);
                let why = if task.status == TaskStatus::Failed {
                    " — failed".to_owned()
                } else if blockers.is_empty() {
                    String::new()
                } else {
                    format!(" — waits for {}", blockers.join(", "))
                };
                format!("{}. {} {}{why}", task.number, task.status.icon(), task.text)
            })
            .collect(),
    ))
}

/// After an iteration in which ralph itself failed: stop after [`MAX_OWN_FAILURES`] in a row.
pub(crate) fn after_own_failure(counters: &mut Counters, error: &str) -> Option<Stop> {
    counters.own_failures += 1;
    (counters.own_failures >= MAX_OWN_FAILURES).then(|| Stop::RalphFailed(error.to_owned()))
}

/// How long to wait before retry number `retries` of a provider failure: until the reset time
/// the provider gave (plus a second of slack), else exponential backoff from `base` (times
/// `jitter`, 0.8 to 1.2) capped at `cap`. A wait that would pass `--max-runtime` stops the loop.
pub(crate) fn retry_wait(
    rules: &Rules,
    until_reset: Option<Duration>,
    retries: u32,
    (base, cap, jitter): (Duration, Duration, f64),
    runtime: Duration,
) -> Result<Duration, Stop> {
    let delay = match until_reset {
        Some(left) => left + Duration::from_secs(1),
        None => backoff(base, retries, cap, jitter),
    };
    match rules.max_runtime {
        Some(limit) if runtime + delay >= limit => Err(Stop::MaxRuntime(limit)),
        _ => Ok(delay),
    }
}

/// `1 iteration`, `3 iterations in a row`.
fn in_a_row(count: u32) -> String {
    match count {
        1 => "1 iteration".to_owned(),
        n => format!("{n} iterations in a row"),
    }
}

/// `base`, `2·base`, `4·base`… times `jitter`, capped at `cap`.
pub(crate) fn backoff(base: Duration, attempt: u32, cap: Duration, jitter: f64) -> Duration {
    let exponent = attempt.saturating_sub(1).min(20);
    let plain = base.saturating_mul(1 << exponent).min(cap);
    plain.mul_f64(jitter.clamp(0.0, 2.0)).min(cap)
}

impl Stop {
    /// The stop's kind, as events and the state name it.
    pub(crate) fn kind(&self) -> StopKind {
        match self {
            Self::Completed { .. } => StopKind::Completed,
            Self::MaxIterations(_) => StopKind::MaxIterations,
            Self::MaxRuntime(_) => StopKind::MaxRuntime,
            Self::MaxCost(_) => StopKind::MaxCost,
            Self::MaxTokens(_) => StopKind::MaxTokens,
            Self::Aborted { .. } => StopKind::Aborted,
            Self::Stalled(_) => StopKind::Stalled,
            Self::AgentFailed { .. } => StopKind::AgentFailed,
            Self::LegacyPlugin => StopKind::LegacyPlugin,
            Self::RalphFailed(_) => StopKind::RalphFailed,
            Self::AgentKeptFailing { .. } => StopKind::AgentKeptFailing,
            Self::Blocked(_) => StopKind::Blocked,
            Self::Unverified(_) => StopKind::Unverified,
            Self::Tampered(_) => StopKind::Tampered,
            Self::Interrupted => StopKind::Interrupted,
        }
    }

    /// The exit status the loop ends with.
    pub(crate) fn status(&self) -> crate::exit::ExitStatus {
        use crate::exit::ExitStatus;
        match self {
            Self::Completed { .. } => ExitStatus::Success,
            Self::MaxIterations(_)
            | Self::MaxRuntime(_)
            | Self::MaxCost(_)
            | Self::MaxTokens(_) => ExitStatus::LimitReached,
            Self::Aborted { .. } | Self::Stalled(_) | Self::Blocked(_) => ExitStatus::Stopped,
            Self::AgentFailed { .. }
            | Self::AgentKeptFailing { .. }
            | Self::LegacyPlugin
            | Self::Unverified(_)
            | Self::Tampered(_)
            | Self::RalphFailed(_) => ExitStatus::Error,
            Self::Interrupted => ExitStatus::Interrupted,
        }
    }

    /// The reason the end line and the state give; `iteration` is the one the loop stopped at.
    pub(crate) fn reason(&self, iteration: u32) -> String {
        use crate::output::format;
        match self {
            Self::Completed { iteration } => {
                format!(
                    "completed in {}",
                    plural(u64::from(*iteration), "iteration")
                )
            }
            Self::MaxIterations(max) => format!("max iterations ({max}) reached"),
            Self::MaxRuntime(limit) => {
                format!("max runtime ({}) reached", format::long_duration(*limit))
            }
            Self::MaxCost(limit) => format!("max cost ({}) reached", format::cost_text(*limit)),
            Self::MaxTokens(limit) => {
                format!("max tokens ({}) reached", format::compact_number(*limit))
            }
            Self::Aborted { .. } => format!("the agent gave up at iteration {iteration}"),
            Self::Stalled(count) => format!("no file changes in {}", in_a_row(*count)),
            Self::AgentFailed { failure, retries } if *retries > 0 => format!(
                "the agent kept failing ({}) after {}",
                failure.kind.label(),
                plural(u64::from(*retries), "retry").replace("retrys", "retries")
            ),
            Self::AgentFailed { failure, .. } => {
                format!("the agent failed ({})", failure.kind.label())
            }
            Self::LegacyPlugin => "OpenCode loaded the legacy placeholder plugin".to_owned(),
            Self::AgentKeptFailing { exit_code, runs } => format!(
                "the agent exited with code {exit_code} and changed nothing in {}",
                in_a_row(*runs)
            ),
            Self::RalphFailed(error) => {
                format!("ralph failed {MAX_OWN_FAILURES} iterations in a row ({error})")
            }
            Self::Blocked(tasks) => format!(
                "no task can be started ({} failed or blocked)",
                plural(tasks.len() as u64, "task")
            ),
            Self::Unverified(result) => format!(
                "unverified: `{}` could not run ({}); fix the command and run ralph --resume",
                result.command,
                result.outcome()
            ),
            Self::Tampered(paths) => format!(
                "the agent changed protected paths ({}) at iteration {iteration}; they were put back (--protect-mode fail)",
                paths.join(", ")
            ),
            Self::Interrupted => format!("interrupted at iteration {iteration}"),
        }
    }
}

/// Whether a failure kind makes the loop run the same iteration again (or stop).
pub(crate) fn is_retried(kind: FailureKind) -> bool {
    kind.is_fatal() || kind.is_transient()
}

#[cfg(test)]
mod tests;
