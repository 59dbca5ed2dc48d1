//! `ralph-history.json`: one record per iteration plus the struggle indicators.
//!
//! Written in the gem's snake_case keys; ralph.ts' camelCase keys are accepted when reading, so
//! `--status` shows either program's history. Fields added by later ralph versions are optional,
//! so older files still load.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Loaded, read_json};

pub(crate) mod summary;
use crate::model::{Failure, Usage, Verification};

/// An iteration shorter than this counts as "very short" for struggle detection.
pub(crate) const SHORT_ITERATION_MS: u64 = 30_000;

/// The whole history document.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct History {
    #[serde(default)]
    pub(crate) iterations: Vec<IterationRecord>,
    #[serde(default, alias = "totalDurationMs")]
    pub(crate) total_duration_ms: u64,
    #[serde(default, alias = "struggleIndicators")]
    pub(crate) struggle_indicators: StruggleIndicators,
    /// Tokens over all iterations that reported them.
    #[serde(default, skip_serializing_if = "no_tokens")]
    pub(crate) total_tokens: Usage,
    /// Model turns over all iterations that reported them.
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub(crate) total_turns: u32,
    /// Cost in USD over all iterations that reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) total_cost_usd: Option<f64>,
    /// What each agent did (agent id → its share), for runs with several agents.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) agents: BTreeMap<String, AgentShare>,
    /// The checks of a `--parallel` run's merge gate: its `--verify` commands run on each
    /// task's work merged with the base.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) gates: Vec<GateCheck>,
    /// Calls of an agent that are not iterations: planning a spec (`kind: "plan"`). Their cost
    /// and tokens count in the totals (and so toward `--max-cost` and `--max-tokens`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) calls: Vec<AgentCall>,
}

/// A call of an agent that is not an iteration of a loop.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct AgentCall {
    /// `plan`.
    pub(crate) kind: String,
    pub(crate) agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
    pub(crate) started_at: chrono::DateTime<chrono::Utc>,
    pub(crate) duration_ms: u64,
    pub(crate) exit_code: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tokens: Option<crate::agents::Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cost_usd: Option<f64>,
    /// Its log (what the agent printed), relative to `.ralph/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) log: Option<String>,
}

/// One check of the merge gate: whose merge it judged, when, and its result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct GateCheck {
    pub(crate) task: String,
    pub(crate) at: chrono::DateTime<chrono::Utc>,
    #[serde(flatten)]
    pub(crate) check: crate::model::Verification,
}

/// One agent's part of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct AgentShare {
    /// Iterations it ran (a retry of the same iteration counts once).
    pub(crate) iterations: u32,
    /// The last iteration it ran, to count the next one.
    pub(crate) last_iteration: u32,
    #[serde(default, skip_serializing_if = "no_tokens")]
    pub(crate) tokens: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cost_usd: Option<f64>,
}

impl AgentShare {
    /// Adds a record; `repeat`: it is a retry of an iteration this agent already ran.
    fn add(&mut self, record: &IterationRecord, repeat: bool) {
        if !repeat {
            self.iterations = self.iterations.saturating_add(1);
        }
        self.last_iteration = record.iteration;
        if let Some(tokens) = record.tokens {
            self.tokens.add(tokens);
        }
        if let Some(cost) = record.cost_usd {
            *self.cost_usd.get_or_insert(0.0) += cost;
        }
    }
}

/// The shares of the agents of `records`.
fn shares(records: &[IterationRecord]) -> BTreeMap<String, AgentShare> {
    let mut agents: BTreeMap<String, AgentShare> = BTreeMap::new();
    for (at, record) in records.iter().enumerate() {
        let agent = record.agent.clone().unwrap_or_default();
        let repeat = repeats(&records[..at], record);
        agents.entry(agent).or_default().add(record, repeat);
    }
    agents
}

/// Whether `record` retries an iteration its loop's agent already ran: the last earlier record of
/// the same loop (the same task's, in a run of several loops) and agent has its number.
fn repeats(earlier: &[IterationRecord], record: &IterationRecord) -> bool {
    (earlier.iter().rev())
        .find(|other| other.task_id == record.task_id && other.agent == record.agent)
        .is_some_and(|other| other.iteration == record.iteration)
}

fn no_tokens(usage: &Usage) -> bool {
    usage.total() == 0
}

/// What happened in one iteration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct IterationRecord {
    pub(crate) iteration: u32,
    #[serde(alias = "startedAt")]
    pub(crate) started_at: DateTime<Utc>,
    #[serde(alias = "endedAt")]
    pub(crate) ended_at: DateTime<Utc>,
    #[serde(default, alias = "durationMs")]
    pub(crate) duration_ms: u64,
    #[serde(default, alias = "toolsUsed")]
    pub(crate) tools_used: BTreeMap<String, u64>,
    #[serde(default, alias = "filesModified")]
    pub(crate) files_modified: Vec<String>,
    /// The agent's exit code; -1 when ralph itself failed during the iteration.
    #[serde(default, alias = "exitCode")]
    pub(crate) exit_code: i32,
    #[serde(default, alias = "completionDetected")]
    pub(crate) completion_detected: bool,
    #[serde(default)]
    pub(crate) errors: Vec<String>,
    /// Tokens the agent reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tokens: Option<Usage>,
    /// Cost in USD the agent reported (Codex reports none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cost_usd: Option<f64>,
    /// Model turns in the iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) turns: Option<u32>,
    /// The agent's session id, when it reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) session_id: Option<String>,
    /// Why the agent ended its turn, when it says (an ACP agent: `end_turn`, `max_tokens`,
    /// `refusal`, `cancelled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stop_reason: Option<String>,
    /// The signal that ended the agent when ralph stopped it (a timeout, a stop): `SIGTERM`
    /// (`SIGINT` after Ctrl-C), or `SIGKILL` when it did not exit within `--kill-grace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stop_signal: Option<String>,
    /// The questions the agent asked a person (`ralph_ask`): each with its answer, who gave it
    /// and when (or how it stopped waiting).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) questions: Vec<super::questions::Question>,
    /// Why the iteration failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) failure: Option<Failure>,
    /// The agent that ran (its id), and the model asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
    /// The task the iteration worked on (tasks mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) task: Option<String>,
    /// In a run of several loops (`--parallel`, `--worker`): the id of the task whose loop ran
    /// the iteration, and that loop's branch (its worktree is `.ralph/worktrees/<task_id>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) branch: Option<String>,
    /// Verification commands run after the agent's claim.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) verification: Vec<Verification>,
    /// Why the agent's completion claim was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) completion_refused: Option<String>,
    /// The iteration's log (what the agent printed), relative to `.ralph/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) log: Option<String>,
    /// The hosts the sandbox refused the agent (`host:port` → how often).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) sandbox_blocked: BTreeMap<String, u32>,
    /// The agent was killed by the sandbox's memory limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) out_of_memory: bool,
    /// The run's merge gate refused the task's work of this iteration, merged with the base: why
    /// (the check, where, how it ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) merge_refused: Option<String>,
    /// Protected paths (`--protect`) the agent changed in this iteration: put back, never
    /// committed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) protected_changes: Vec<String>,
    /// The `--holdout` checks run on this iteration's claim, with their output (for the user).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) holdout: Vec<Verification>,
    /// The iteration was cut short (Ctrl-C, a stop, ralph killed): its number is used, and a
    /// resumed loop goes on with the next.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) interrupted: bool,
}

/// Signs that the agent is going round in circles.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct StruggleIndicators {
    #[serde(default, alias = "repeatedErrors")]
    pub(crate) repeated_errors: BTreeMap<String, u32>,
    #[serde(default, alias = "noProgressIterations")]
    pub(crate) no_progress_iterations: u32,
    #[serde(default, alias = "shortIterations")]
    pub(crate) short_iterations: u32,
}

impl StruggleIndicators {
    /// Updates the indicators with a finished iteration (reference section 6).
    /// Without `files_tracked` (outside a git repository) nothing is known about file changes,
    /// so the no-progress count stays at zero.
    pub(crate) fn update(&mut self, record: &IterationRecord, files_tracked: bool) {
        if files_tracked && record.files_modified.is_empty() {
            self.no_progress_iterations += 1;
        } else {
            self.no_progress_iterations = 0;
        }
        if record.duration_ms < SHORT_ITERATION_MS {
            self.short_iterations += 1;
        } else {
            self.short_iterations = 0;
        }
        if record.errors.is_empty() {
            self.repeated_errors.clear();
        } else {
            for error in &record.errors {
                let key: String = error.chars().take(100).collect();
                *self.repeated_errors.entry(key).or_default() += 1;
            }
        }
    }

    /// Whether the live struggle warning is due after `iteration`.
    pub(crate) fn should_warn(&self, iteration: u32) -> bool {
        iteration > 2 && (self.no_progress_iterations >= 3 || self.short_iterations >= 3)
    }

    /// Whether `--status` shows the indicators.
    pub(crate) fn is_notable(&self) -> bool {
        self.no_progress_iterations >= 3
            || self.short_iterations >= 3
            || self.repeated_errors.values().any(|&count| count >= 2)
    }
}

/// Whether an iteration counts for the struggle indicators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Struggle {
    /// ralph itself failed, or the provider did: the iteration says nothing about the agent.
    Skip,
    /// It counts; `files_tracked` is false outside a git repository.
    Update { files_tracked: bool },
}

impl History {
    /// The number of the last iteration recorded: from the records built, or from the agents'
    /// shares when none are (a history loaded for its totals only).
    pub(crate) fn last_iteration(&self) -> Option<u32> {
        let shares = self.agents.values().map(|share| share.last_iteration);
        self.iterations
            .last()
            .map(|r| r.iteration)
            .into_iter()
            .chain(shares)
            .max()
    }

    /// The highest iteration recorded for the task `task_id`.
    pub(crate) fn last_iteration_of(&self, task_id: &str) -> Option<u32> {
        (self.iterations.iter())
            .filter(|record| record.task_id.as_deref() == Some(task_id))
            .map(|record| record.iteration)
            .max()
    }

    /// A loop's records that join this history under `name` (a merged `--worktree` loop): its
    /// iterations named as `name`'s, their logs under `logs/<name>/`, and its calls.
    pub(crate) fn absorb(&mut self, other: History, name: &str) {
        for mut record in other.iterations {
            record.task_id.get_or_insert_with(|| name.to_owned());
            if let Some(log) = record.log.as_mut()
                && let Some(file) = log.strip_prefix("logs/")
            {
                *log = format!("logs/{name}/{file}");
            }
            self.record(record, Struggle::Skip);
        }
        for mut call in other.calls {
            if let Some(log) = call.log.as_mut()
                && let Some(file) = log.strip_prefix("logs/")
            {
                *log = format!("logs/{name}/{file}");
            }
            self.add_call(call);
        }
    }

    /// How many iterations ran: retries share their iteration's number, so numbers are
    /// counted, not records (each task loop's own, in a run of several loops).
    pub(crate) fn iteration_count(&self) -> usize {
        let numbers: std::collections::BTreeSet<(Option<&str>, u32)> = (self.iterations.iter())
            .map(|r| (r.task_id.as_deref(), r.iteration))
            .collect();
        numbers.len()
    }

    /// Appends a call that is not an iteration, its cost and tokens to the totals.
    pub(crate) fn add_call(&mut self, call: AgentCall) {
        self.total_duration_ms = self.total_duration_ms.saturating_add(call.duration_ms);
        if let Some(tokens) = call.tokens {
            self.total_tokens.add(tokens);
        }
        if let Some(cost) = call.cost_usd {
            *self.total_cost_usd.get_or_insert(0.0) += cost;
        }
        self.calls.push(call);
    }

    /// Appends a record, updating the struggle indicators as `struggle` says.
    pub(crate) fn record(&mut self, record: IterationRecord, struggle: Struggle) {
        self.total_duration_ms = self.total_duration_ms.saturating_add(record.duration_ms);
        if let Some(tokens) = record.tokens {
            self.total_tokens.add(tokens);
        }
        if let Some(turns) = record.turns {
            self.total_turns = self.total_turns.saturating_add(turns);
        }
        if let Some(cost) = record.cost_usd {
            *self.total_cost_usd.get_or_insert(0.0) += cost;
        }
        if let Struggle::Update { files_tracked } = struggle {
            self.struggle_indicators.update(&record, files_tracked);
        }
        let agent = record.agent.clone().unwrap_or_default();
        let repeat = repeats(&self.iterations, &record);
        self.agents.entry(agent).or_default().add(&record, repeat);
        self.iterations.push(record);
    }
}

/// The history with only its last `keep` records built; the others are only counted (so
/// `--status` stays fast on a long history). Totals and indicators are complete. Read from the
/// summary beside the history when it matches the history file, so the cost does not grow with
/// the history.
pub(crate) fn load_recent(path: &Path, keep: usize) -> Loaded<(History, usize)> {
    /// The document with its records left as raw JSON.
    #[derive(Deserialize)]
    struct Outline<'a> {
        #[serde(default, borrow)]
        iterations: Vec<&'a serde_json::value::RawValue>,
        #[serde(default, alias = "totalDurationMs")]
        total_duration_ms: u64,
        #[serde(default, alias = "struggleIndicators")]
        struggle_indicators: StruggleIndicators,
        #[serde(default)]
        total_tokens: Usage,
        #[serde(default)]
        total_turns: u32,
        #[serde(default)]
        total_cost_usd: Option<f64>,
        #[serde(default)]
        agents: BTreeMap<String, AgentShare>,
    }
    if let Some(found) = summary::read(path, keep) {
        return Loaded::Found(found);
    }
    let bytes = match super::read_bytes(path) {
        Loaded::Found(bytes) => bytes,
        Loaded::Missing => return Loaded::Missing,
        Loaded::Corrupt(reason) => return Loaded::Corrupt(reason),
    };
    let outline: Outline<'_> = match super::parse_json(&bytes) {
        Loaded::Found(outline) => outline,
        Loaded::Missing => return Loaded::Missing,
        Loaded::Corrupt(reason) => return Loaded::Corrupt(reason),
    };
    let count = outline.iterations.len();
    let mut iterations = Vec::with_capacity(keep.min(count));
    for raw in &outline.iterations[count.saturating_sub(keep)..] {
        match super::parse_json(raw.get().as_bytes()) {
            Loaded::Found(record) => iterations.push(record),
            Loaded::Missing => {}
            Loaded::Corrupt(reason) => return Loaded::Corrupt(reason),
        }
    }
    Loaded::Found((
        History {
            iterations,
            total_duration_ms: outline.total_duration_ms,
            struggle_indicators: outline.struggle_indicators,
            total_tokens: outline.total_tokens,
            total_turns: outline.total_turns,
            total_cost_usd: outline.total_cost_usd,
            agents: outline.agents,
            // A recent view: the gate checks are read with the whole history only.
            gates: Vec::new(),
            calls: Vec::new(),
        },
        count,
    ))
}

/// Reads the history file.
pub(crate) fn load(path: &Path) -> Loaded<History> {
    let mut loaded = read_json::<History>(path);
    if let Loaded::Found(history) = &mut loaded
        && history.agents.is_empty()
    {
        // Written by another program, or before ralph kept the shares.
        history.agents = shares(&history.iterations);
    }
    loaded
}

/// Writes the history file atomically, then its summary (see `summary.rs`).
pub(crate) fn save(path: &Path, history: &History) -> anyhow::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(history)?;
    bytes.push(b'\n');
    super::write_atomic(path, &bytes)?;
    // Without a summary (or with a stale one) readers read the history itself.
    let _ = summary::write(path, history, bytes.len() as u64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_answers_for_the_recent_records_until_the_history_changes_behind_it() {
        let dir = crate::testing::tempdir().unwrap();
        let path = dir.path().join("ralph-history.json");
        let mut history = History::default();
        for n in 1..=200 {
            let mut entry = record(&["a.txt"], 60_000, &[]);
            entry.iteration = n;
            history.record(
                entry,
                Struggle::Update {
                    files_tracked: true,
                },
            );
        }
        save(&path, &history).unwrap();
        let summary = super::summary::path_for(&path);
        assert!(summary.exists());
        let Loaded::Found((recent, count)) = load_recent(&path, 5) else {
            panic!("history not read")
        };
        assert_eq!(count, 200);
        assert_eq!(recent.iterations.len(), 5);
        assert_eq!(recent.iterations[0].iteration, 196);
        assert_eq!(recent.total_duration_ms, history.total_duration_ms);
        // The summary alone answers: a history file of the same length with other content is
        // taken for the one summarised.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            text.replace("\"iteration\": 200", "\"iteration\": 999"),
        )
        .unwrap();
        let Loaded::Found((recent, _)) = load_recent(&path, 1) else {
            panic!()
        };
        assert_eq!(recent.iterations[0].iteration, 200);
        // Another program's history (another length) is read whole, not the stale summary.
        let mut other = history.clone();
        other.iterations.truncate(10);
        std::fs::write(&path, serde_json::to_vec(&other).unwrap()).unwrap();
        let Loaded::Found((recent, count)) = load_recent(&path, 3) else {
            panic!()
        };
        assert_eq!((count, recent.iterations[2].iteration), (10, 10));
        // More records than the summary keeps: the history itself.
        let Loaded::Found((_, count)) = load_recent(&path, 500) else {
            panic!()
        };
        assert_eq!(count, 10);
    }

    fn record(files: &[&str], duration_ms: u64, errors: &[&str]) -> IterationRecord {
        IterationRecord {
            iteration: 1,
            duration_ms,
            files_modified: files.iter().map(|s| (*s).to_owned()).collect(),
            errors: errors.iter().map(|s| (*s).to_owned()).collect(),
            ..IterationRecord::default()
        }
    }

    #[test]
    fn reads_ralph_ts_camel_case_history() {
        let json = r#"{"iterations":[{"iteration":1,"startedAt":"2026-01-01T00:00:00.000Z",
            "endedAt":"2026-01-01T00:00:05.000Z","durationMs":5000,"toolsUsed":{"Bash":2},
            "filesModified":["a.rs"],"exitCode":0,"completionDetected":true,"errors":[]}],
            "totalDurationMs":5000,"struggleIndicators":{"repeatedErrors":{},
            "noProgressIterations":0,"shortIterations":1}}"#;
        let history: History = serde_json::from_str(json).unwrap();
        assert_eq!(history.total_duration_ms, 5000);
        assert_eq!(history.iterations[0].tools_used["Bash"], 2);
        assert!(history.iterations[0].completion_detected);
        assert_eq!(history.struggle_indicators.short_iterations, 1);
    }

    #[test]
    fn load_recent_builds_only_the_tail() {
        let dir = crate::testing::tempdir().unwrap();
        let path = dir.path().join("h.json");
        let mut history = History::default();
        for i in 1..=20 {
            history.record(
                IterationRecord {
                    iteration: i,
                    duration_ms: 1,
                    ..IterationRecord::default()
                },
                Struggle::Update {
                    files_tracked: true,
                },
            );
        }
        save(&path, &history).unwrap();
        let Loaded::Found((recent, count)) = load_recent(&path, 5) else {
            panic!()
        };
        assert_eq!(count, 20);
        assert_eq!(
            recent
                .iterations
                .iter()
                .map(|r| r.iteration)
                .collect::<Vec<_>>(),
            [16, 17, 18, 19, 20]
        );
        assert_eq!(recent.total_duration_ms, 20);
    }

    #[test]
    fn writes_snake_case_history() {
        let mut history = History::default();
        history.record(
            record(&["a"], 10, &[]),
            Struggle::Update {
                files_tracked: true,
            },
        );
        let text = serde_json::to_string(&history).unwrap();
        for key in [
            "total_duration_ms",
            "struggle_indicators",
            "files_modified",
            "exit_code",
        ] {
            assert!(text.contains(key), "{key} missing from {text}");
        }
    }

    #[test]
    fn struggle_indicators_follow_the_reference_rules() {
        let mut indicators = StruggleIndicators::default();
        for _ in 0..3 {
            indicators.update(&record(&[], 100, &["error: boom"]), true);
        }
        assert_eq!(indicators.no_progress_iterations, 3);
        assert_eq!(indicators.short_iterations, 3);
        assert_eq!(indicators.repeated_errors["error: boom"], 3);
        assert!(indicators.should_warn(3));
        assert!(!indicators.should_warn(2));
        indicators.update(&record(&["a"], 60_000, &[]), true);
        assert_eq!(indicators, StruggleIndicators::default());
    }
}
