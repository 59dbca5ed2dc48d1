//! `ralph-loop.state.json`: the running (or interrupted) loop, in ralph.ts' camelCase format.
//!
//! Written when a loop starts and after every iteration. `active` is true while a loop owns the
//! directory; an interrupted loop keeps its file with `active: false` so it can be resumed. The
//! `pid` and `host` fields tell a crashed loop (active, but its lock is free) from a running one.

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Loaded, read_json, write_json};

/// The loop's saved state. Unknown keys written by other ralph versions are ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LoopState {
    pub(crate) active: bool,
    /// The iteration running now, or the next to run between iterations.
    pub(crate) iteration: u32,
    #[serde(default = "one")]
    pub(crate) min_iterations: u32,
    #[serde(default)]
    pub(crate) max_iterations: u32,
    #[serde(default = "default_completion_promise")]
    pub(crate) completion_promise: String,
    #[serde(default)]
    pub(crate) tasks_mode: bool,
    #[serde(default = "default_task_promise")]
    pub(crate) task_promise: String,
    /// The user's prompt (not the built iteration prompt).
    #[serde(default)]
    pub(crate) prompt: String,
    pub(crate) started_at: DateTime<Utc>,
    #[serde(default)]
    pub(crate) model: String,
    #[serde(default = "default_agent")]
    pub(crate) agent: String,
    /// Process id of the ralph that owns the loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pid: Option<u32>,
    /// Host name of the machine that runs the loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) host: Option<String>,
    /// When the loop stopped without finishing (interrupt); absent while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stopped_at: Option<DateTime<Utc>>,
    /// Wall-clock time the loop has run so far, over all sessions (for `--max-runtime`).
    #[serde(default)]
    pub(crate) runtime_ms: u64,
    /// A parallel run: the cost and tokens every worker spent together so far (for the global
    /// budgets over `--resume`; a single loop keeps its totals in the history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) spent_cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub(crate) spent_tokens: u64,
    /// Iterations in a row that changed no files (for `--max-stalled`, kept over `--resume`).
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub(crate) stalled: u32,
    /// The process group of the agent while one runs, so a resumed loop can stop an agent that
    /// outlived a killed ralph.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) agent_group: Option<i32>,
    /// A task loop started again (its task sent back by the merge gate): the iterations its task
    /// had before, which its numbering goes on from and its limits are shifted by.
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub(crate) iterations_before: u32,
    /// Iterations spent on each task (by its id, else its text), for `max_attempts`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(crate) task_attempts: std::collections::BTreeMap<String, u32>,
    /// Why the loop stopped before completing (max iterations, a budget, an interrupt…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stop_reason: Option<String>,
    /// The stop's kind (a state written before kinds were kept has only the reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stop_kind: Option<crate::model::StopKind>,
    /// The prompt file the prompt was read from, if any (for messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) prompt_file: Option<String>,
    /// Every loop option, by config key, as a config file writes it (`"pause": "1s"`), so
    /// `--resume` continues with the same settings: one more settings layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) options: Option<std::collections::BTreeMap<String, serde_json::Value>>,
    /// Paths (repository-relative) that had uncommitted changes when the loop started, outside
    /// `.ralph/`: the user's, never committed by ralph (unless `--commit-dirty`). A path leaves
    /// the list once it is no longer changed.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub(crate) dirty_at_start: std::collections::BTreeSet<String>,
    /// A `--worker`'s state (in its clone, while it runs): its name and where it takes tasks
    /// from (`host-pid on origin/main`). It is not resumed: the worker is started again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) worker: Option<String>,
    /// `--parallel auto`: the ready tasks held back for room on the machine, and why (`waiting
    /// for memory: 1.2G free, 2G needed`), by task id.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(crate) waiting: std::collections::BTreeMap<String, String>,
}

impl LoopState {
    /// The loop (or run) was interrupted (Ctrl-C, a stop request) and can be resumed.
    pub(crate) fn interrupted(&self) -> bool {
        !self.active && self.stopped() == Some(true)
    }

    /// The loop stopped for a reason other than an interrupt (a limit, a failure, the agent
    /// giving up): after an iteration had ended, not in one.
    pub(crate) fn stopped_after_iteration(&self) -> bool {
        !self.active && self.stopped() == Some(false)
    }

    /// Whether the loop's stop was an interrupt (`None`: it has not stopped). A state written
    /// before stops had kinds says so by its reason only.
    fn stopped(&self) -> Option<bool> {
        match (self.stop_kind, self.stop_reason.as_deref()) {
            (Some(kind), _) => Some(kind == crate::model::StopKind::Interrupted),
            (None, Some(reason)) => Some(reason.starts_with("interrupted")),
            (None, None) => None,
        }
    }

    /// With `--parallel N`, the state is the run's (its coordinator's): up to N task loops, each
    /// with its own iterations. 0 for a single loop.
    pub(crate) fn parallel(&self) -> u32 {
        let value = (self.options.as_ref()).and_then(|options| options.get("parallel"));
        match value {
            // `--parallel auto`, saved as `auto:MAX`: up to its most.
            Some(serde_json::Value::String(text)) => (text.strip_prefix("auto:"))
                .and_then(|max| max.parse().ok())
                .unwrap_or(0),
            value => value
                .and_then(serde_json::Value::as_u64)
                .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        }
    }

    /// The iteration `--status`, `--watch` and `--doctor` name for this loop: the one it runs,
    /// crashed or was interrupted in. Between iterations the state holds the next one, so a
    /// loop that stopped after an iteration, or that is past its maximum, names the last one
    /// that ran instead (`last_recorded`, from the history; else the one before): after
    /// `--max-iterations 3` it is at 3 / 3, never 4 / 3.
    pub(crate) fn shown_iteration(&self, last_recorded: Option<u32>) -> u32 {
        let past_limit = self.max_iterations > 0 && self.iteration > self.max_iterations;
        if past_limit || self.stopped_after_iteration() {
            last_recorded.unwrap_or_else(|| self.iteration.saturating_sub(1))
        } else {
            self.iteration
        }
    }
}

fn is_zero_u64(count: &u64) -> bool {
    *count == 0
}

fn one() -> u32 {
    1
}

fn default_completion_promise() -> String {
    "COMPLETE".to_owned()
}

fn default_task_promise() -> String {
    "READY_FOR_NEXT_TASK".to_owned()
}

fn default_agent() -> String {
    "opencode".to_owned()
}

/// Reads the state file.
pub(crate) fn load(path: &Path) -> Loaded<LoopState> {
    read_json(path)
}

/// Writes the state file atomically.
pub(crate) fn save(path: &Path, state: &LoopState) -> anyhow::Result<()> {
    write_json(path, state)
}

/// Writes the state atomically, but not synced to disk: for what matters only while the machine
/// stays up, or what the history (synced) already holds. A `--resume` after a kill finds the
/// file in the page cache. After a power loss the running agent's process group
/// (`agent_group`) is gone anyway, a task's attempt may be one short, and the next iteration's
/// number may be the one before, which `--resume` then runs again: nothing is lost. Between
/// iterations this is what keeps the fixed cost of one to a single synced write (the history's).
pub(crate) fn save_unsynced(path: &Path, state: &LoopState) -> anyhow::Result<()> {
    super::write_json_unsynced(path, state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_minimal_ralph_ts_shape() {
        let json = r#"{"active":true,"iteration":3,"minIterations":1,"maxIterations":0,
            "completionPromise":"DONE","tasksMode":false,"taskPromise":"READY_FOR_NEXT_TASK",
            "prompt":"x","startedAt":"2026-01-24T12:34:56.789Z","model":"","agent":"codex"}"#;
        let state: LoopState = serde_json::from_str(json).unwrap();
        assert_eq!(state.iteration, 3);
        assert_eq!(state.agent, "codex");
        assert_eq!(state.pid, None);
    }

    #[test]
    fn a_loop_names_the_last_iteration_that_ran_once_it_stopped_after_it() {
        let mut state = state(4, 3);
        assert_eq!(state.shown_iteration(Some(3)), 3, "running, past the limit");
        state.active = false;
        state.stop_reason = Some("max iterations (3) reached".into());
        assert_eq!(state.shown_iteration(Some(3)), 3);
        assert_eq!(state.shown_iteration(None), 3, "without a history");
        // A stop decided after the iteration ran: the state still holds that iteration.
        let mut stalled = self::state(3, 10);
        stalled.active = false;
        stalled.stop_reason = Some("no file changes in 3 iterations in a row".into());
        assert_eq!(stalled.shown_iteration(Some(3)), 3);
        // Nothing ran.
        let mut budget = self::state(1, 10);
        budget.active = false;
        budget.stop_reason = Some("max cost ($0.00) reached".into());
        assert_eq!(budget.shown_iteration(None), 0);
    }

    #[test]
    fn a_running_or_interrupted_loop_names_its_iteration() {
        let mut state = state(2, 3);
        assert_eq!(state.shown_iteration(Some(1)), 2);
        state.active = false;
        state.stop_reason = Some("interrupted at iteration 2".into());
        assert_eq!(state.shown_iteration(Some(1)), 2);
        let unlimited = self::state(7, 0);
        assert_eq!(unlimited.shown_iteration(Some(6)), 7);
    }

    #[test]
    fn a_stop_is_read_by_its_kind_and_an_old_state_by_its_reason() {
        use crate::model::StopKind;
        let mut state = state(2, 3);
        assert!(!state.interrupted() && !state.stopped_after_iteration());
        state.active = false;
        // The kind decides, whatever the prose says.
        state.stop_reason = Some("interrupted by a stop request".into());
        state.stop_kind = Some(StopKind::MaxCost);
        assert!(!state.interrupted() && state.stopped_after_iteration());
        state.stop_kind = Some(StopKind::Interrupted);
        assert!(state.interrupted() && !state.stopped_after_iteration());
        // A state written before kinds were kept.
        state.stop_kind = None;
        assert!(state.interrupted());
        state.stop_reason = Some("max cost ($1.00) reached".into());
        assert!(state.stopped_after_iteration());
        // A running loop has not stopped, whatever it holds.
        state.active = true;
        assert!(!state.interrupted() && !state.stopped_after_iteration());
    }

    fn state(iteration: u32, max_iterations: u32) -> LoopState {
        LoopState {
            iteration,
            max_iterations,
            ..example()
        }
    }

    #[test]
    fn writes_camel_case_keys() {
        let state = example();
        let text = serde_json::to_string(&state).unwrap();
        assert!(text.contains("\"maxIterations\":5"));
        assert!(text.contains("\"startedAt\":\"2026-01-24T12:34:56Z\""));
        assert!(!text.contains("host"));
    }

    fn example() -> LoopState {
        LoopState {
            active: true,
            iteration: 1,
            min_iterations: 1,
            max_iterations: 5,
            completion_promise: "COMPLETE".into(),
            tasks_mode: false,
            task_promise: "READY_FOR_NEXT_TASK".into(),
            prompt: "p".into(),
            started_at: "2026-01-24T12:34:56Z".parse().unwrap(),
            model: String::new(),
            agent: "opencode".into(),
            pid: Some(7),
            host: None,
            stopped_at: None,
            runtime_ms: 0,
            spent_cost_usd: None,
            spent_tokens: 0,
            stalled: 0,
            iterations_before: 0,
            agent_group: None,
            task_attempts: std::collections::BTreeMap::new(),
            stop_reason: None,
            stop_kind: None,
            prompt_file: None,
            options: None,
            dirty_at_start: std::collections::BTreeSet::new(),
            worker: None,
            waiting: std::collections::BTreeMap::new(),
        }
    }
}
