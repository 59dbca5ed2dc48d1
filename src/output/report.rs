//! The stable JSON of `--status --json` and `--list-tasks --json` (schema in specs/output.md).
//!
//! Field names are part of the interface: add fields, never rename or remove them, and bump
//! `schema` if a meaning changes.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::agents::Usage;
use crate::storage::history::History;
use crate::storage::state::LoopState;
use crate::storage::tasks::{TaskList, TaskStatus};

/// The version of this JSON layout.
pub(crate) const SCHEMA: u32 = 1;

/// `--status --json`.
#[derive(Debug, Serialize)]
pub(crate) struct StatusReport {
    pub(crate) schema: u32,
    #[serde(rename = "loop")]
    pub(crate) loop_state: Option<LoopReport>,
    pub(crate) pending_context: Option<String>,
    /// Each section of the pending context, the task it is for and the task loops whose prompt
    /// held it already (a run of several loops); absent when nothing is pending.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) pending_context_sections: Vec<crate::storage::context::Where>,
    pub(crate) tasks: Option<TasksReport>,
    pub(crate) history: HistoryReport,
    /// The loops in `.ralph/worktrees/` (parallel tasks, `--worktree` loops); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) workers: Vec<WorkerReport>,
    /// The agents' questions waiting for a person's answer (`ralph_ask`); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) questions: Vec<crate::storage::questions::Question>,
}

/// A loop in its own worktree: a parallel task's worker, or a `--worktree` loop.
#[derive(Debug, Serialize)]
pub(crate) struct WorkerReport {
    /// The task id (or the `--worktree` name): the worktree's directory name.
    pub(crate) task: String,
    pub(crate) branch: String,
    /// `running`, `crashed`, `stopped`, or `done` (its loop completed; merged or waiting to be);
    /// a task whose worktree is gone: `done` (merged), `failed` or `stopped`.
    pub(crate) state: &'static str,
    pub(crate) iteration: Option<u32>,
    /// The iteration its row names ([`LoopReport::shown_iteration`]; not in the JSON).
    #[serde(skip)]
    pub(crate) shown_iteration: Option<u32>,
    pub(crate) max_iterations: Option<u32>,
    pub(crate) elapsed_ms: Option<u64>,
    /// When its history last changed.
    pub(crate) last_activity: Option<DateTime<Utc>>,
    pub(crate) tokens: u64,
    pub(crate) cost_usd: Option<f64>,
    pub(crate) stop_reason: Option<String>,
    /// Iterations its loop ran (retries of one iteration count once each run).
    pub(crate) iterations: u32,
    /// The agent of its running or last iteration.
    pub(crate) agent: Option<String>,
}

/// The loop in `.ralph/`.
#[derive(Debug, Serialize)]
pub(crate) struct LoopReport {
    /// `running`, `crashed` (active but nothing holds its lock), `stopped` (interrupted or a limit).
    pub(crate) state: &'static str,
    pub(crate) iteration: u32,
    /// The iteration the dashboards name: [`LoopState::shown_iteration`]. Not in the JSON, whose
    /// `iteration` is the state's (between iterations, the next one).
    #[serde(skip)]
    pub(crate) shown_iteration: u32,
    pub(crate) min_iterations: u32,
    pub(crate) max_iterations: u32,
    pub(crate) started_at: DateTime<Utc>,
    pub(crate) elapsed_ms: u64,
    pub(crate) agent: String,
    pub(crate) model: Option<String>,
    pub(crate) completion_promise: String,
    pub(crate) tasks_mode: bool,
    pub(crate) task_promise: String,
    pub(crate) prompt: String,
    pub(crate) stop_reason: Option<String>,
    pub(crate) pid: Option<u32>,
    /// With `--parallel N`: N, the tasks run at once (each task loop is in `workers`); absent
    /// for a single loop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) parallel: Option<u32>,
    /// `--parallel auto`: the ready tasks held back for room on the machine, and why, by task
    /// id; absent when none waits.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(crate) waiting: std::collections::BTreeMap<String, String>,
}

/// `--status --remote NAME --json`: the claims on the remote and the task list on its base.
#[derive(Serialize)]
pub(crate) struct RemoteReport<'a> {
    pub(crate) schema: u32,
    pub(crate) remote: &'a str,
    pub(crate) base: &'a str,
    pub(crate) claims: &'a [super::ClaimLine],
    /// The fleet's budget ledger (`--fleet-budget`), when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) budget: Option<&'a super::FleetBudget>,
    pub(crate) tasks: TasksReport,
    /// Open tasks none of whose blockers (at any depth) failed: what more workers could still
    /// do. 0 means the list is finished, or what is left waits on a failed task.
    pub(crate) left_to_run: usize,
    /// The questions the workers' agents wait on (`ralph --answer ID TEXT --remote NAME`).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub(crate) questions: &'a [crate::storage::questions::Question],
}

/// The task file.
#[derive(Debug, Serialize)]
pub(crate) struct TasksReport {
    /// `found`, `missing` or `unreadable`.
    pub(crate) file: &'static str,
    pub(crate) total: usize,
    pub(crate) complete: usize,
    pub(crate) in_progress: usize,
    pub(crate) failed: usize,
    pub(crate) tasks: Vec<TaskReport>,
}

/// One top-level task.
#[derive(Debug, Serialize)]
pub(crate) struct TaskReport {
    pub(crate) number: usize,
    /// `todo`, `in_progress`, `complete`, `failed`.
    pub(crate) status: &'static str,
    pub(crate) text: String,
    pub(crate) id: Option<String>,
    /// The id ralph knows the task by: its `id`, or one made from its text (its worktree,
    /// branch, logs and `--task` use it).
    pub(crate) key: String,
    pub(crate) blocked_by: Vec<String>,
    /// Blockers not done yet (empty when the task can start).
    pub(crate) waiting_for: Vec<String>,
    pub(crate) subtasks: Vec<SubtaskReport>,
    /// Every `- key: value` line under the task, in file order (`id` and `blocked_by` too).
    pub(crate) properties: Vec<PropertyReport>,
}

/// One property line of a task.
#[derive(Debug, Serialize)]
pub(crate) struct PropertyReport {
    pub(crate) key: String,
    pub(crate) value: String,
}

/// One subtask.
#[derive(Debug, Serialize)]
pub(crate) struct SubtaskReport {
    pub(crate) status: &'static str,
    pub(crate) text: String,
}

/// The history totals and the last iterations.
#[derive(Debug, Serialize)]
pub(crate) struct HistoryReport {
    pub(crate) iterations: usize,
    pub(crate) total_duration_ms: u64,
    pub(crate) total_tokens: Usage,
    pub(crate) total_cost_usd: Option<f64>,
    /// Each agent's iterations, tokens and cost (agent id → share).
    pub(crate) agents: std::collections::BTreeMap<String, crate::storage::history::AgentShare>,
    pub(crate) struggle: StruggleReport,
    /// The last five iterations, oldest first.
    pub(crate) recent: Vec<IterationReport>,
}

/// Struggle indicators.
#[derive(Debug, Serialize)]
pub(crate) struct StruggleReport {
    pub(crate) no_progress_iterations: u32,
    pub(crate) short_iterations: u32,
    pub(crate) repeated_errors: BTreeMap<String, u32>,
}

/// One recent iteration.
#[derive(Debug, Serialize)]
pub(crate) struct IterationReport {
    pub(crate) iteration: u32,
    pub(crate) started_at: DateTime<Utc>,
    pub(crate) duration_ms: u64,
    pub(crate) exit_code: i32,
    pub(crate) completion_detected: bool,
    pub(crate) tools_used: BTreeMap<String, u64>,
    pub(crate) files_modified: usize,
    pub(crate) tokens: Option<Usage>,
    pub(crate) cost_usd: Option<f64>,
    pub(crate) failure: Option<&'static str>,
    pub(crate) agent: Option<String>,
}

fn status_name(status: TaskStatus) -> &'static str {
    status.name()
}

/// The tasks report of a parsed file (`file`: found, missing or unreadable).
pub(crate) fn tasks_report(file: &'static str, list: &TaskList) -> TasksReport {
    TasksReport {
        file,
        total: list.tasks.len(),
        complete: list.count(TaskStatus::Complete),
        in_progress: list.count(TaskStatus::InProgress),
        failed: list.count(TaskStatus::Failed),
        tasks: (list.tasks.iter())
            .zip(crate::storage::tasks::task_ids(list))
            .map(|(task, key)| TaskReport {
                number: task.number,
                status: status_name(task.status),
                // The id has its own field: a roadmap's `**id**:` prefix is not repeated here.
                text: task.description().to_owned(),
                id: task.id().map(str::to_owned),
                key,
                blocked_by: task.blocked_by().into_iter().map(str::to_owned).collect(),
                waiting_for: list.blockers(task),
                subtasks: task
                    .subtasks
                    .iter()
                    .map(|subtask| SubtaskReport {
                        status: status_name(subtask.status),
                        text: subtask.text.clone(),
                    })
                    .collect(),
                properties: (task.properties.iter())
                    .map(|(key, value)| PropertyReport {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The loop report of a saved state (`last_recorded`: the last iteration its history records).
pub(crate) fn loop_report(
    state: &LoopState,
    running: bool,
    last_recorded: Option<u32>,
    now: DateTime<Utc>,
) -> LoopReport {
    let until = if state.active {
        now
    } else {
        state.stopped_at.unwrap_or(now)
    };
    LoopReport {
        state: match (state.active, running) {
            (true, true) => "running",
            (true, false) => "crashed",
            (false, _) => "stopped",
        },
        iteration: state.iteration,
        shown_iteration: state.shown_iteration(last_recorded),
        min_iterations: state.min_iterations,
        max_iterations: state.max_iterations,
        started_at: state.started_at,
        elapsed_ms: u64::try_from((until - state.started_at).num_milliseconds().max(0))
            .unwrap_or(0),
        agent: state.agent.clone(),
        model: Some(state.model.clone()).filter(|m| !m.is_empty()),
        completion_promise: state.completion_promise.clone(),
        tasks_mode: state.tasks_mode,
        task_promise: state.task_promise.clone(),
        prompt: state.prompt.clone(),
        stop_reason: state.stop_reason.clone(),
        pid: state.pid,
        parallel: Some(state.parallel()).filter(|n| *n > 0),
        waiting: if state.active {
            state.waiting.clone()
        } else {
            std::collections::BTreeMap::new()
        },
    }
}

/// The history report (`count`: all records; `history` may hold only the last ones).
pub(crate) fn history_report(history: Option<&History>, count: usize) -> HistoryReport {
    let empty = History::default();
    let history = history.unwrap_or(&empty);
    let start = history.iterations.len().saturating_sub(5);
    let struggle = &history.struggle_indicators;
    HistoryReport {
        iterations: count,
        total_duration_ms: history.total_duration_ms,
        total_tokens: history.total_tokens,
        total_cost_usd: history.total_cost_usd,
        agents: history.agents.clone(),
        struggle: StruggleReport {
            no_progress_iterations: struggle.no_progress_iterations,
            short_iterations: struggle.short_iterations,
            repeated_errors: struggle.repeated_errors.clone(),
        },
        recent: history.iterations[start..]
            .iter()
            .map(|record| IterationReport {
                iteration: record.iteration,
                started_at: record.started_at,
                duration_ms: record.duration_ms,
                exit_code: record.exit_code,
                completion_detected: record.completion_detected,
                tools_used: record.tools_used.clone(),
                files_modified: record.files_modified.len(),
                tokens: record.tokens,
                cost_usd: record.cost_usd,
                failure: record.failure.as_ref().map(|f| f.kind.label()),
                agent: record.agent.clone(),
            })
            .collect(),
    }
}

/// Prints a report as pretty JSON.
pub(crate) fn print<T: Serialize>(report: &T) {
    let text = serde_json::to_string_pretty(report)
        .unwrap_or_else(|err| serde_json::json!({ "error": err.to_string() }).to_string());
    let mut out = super::stdout();
    let _ = std::io::Write::write_all(&mut *out, text.as_bytes());
    let _ = std::io::Write::write_all(&mut *out, b"\n");
    let _ = std::io::Write::flush(&mut *out);
}
