//! What a run tells the world: every happening of every loop of a run, as one typed value.
//!
//! A [`LoopEvent`] is what leaves ralph as a `--json` line, as a hook's stdin and as a
//! notification's fields; its serialisation is that public schema (the `event` field names the
//! kind, the other fields are the variant's). A [`Reporter`] hears the events of a run; the
//! run's sink (`run/sink.rs`) stamps each with its time and its task and hands it to every
//! reporter it built: the terminal, JSON lines, hooks, notifications, the live report.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::agents::Usage;
use crate::model::Verification;
use crate::storage::carry::Carried;
use crate::storage::history::{AgentShare, IterationRecord};

/// A task of a plan, as `plan_created` tells it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PlannedTask {
    pub(crate) id: String,
    pub(crate) content: String,
    #[serde(rename = "blockedBy")]
    pub(crate) blocked_by: Vec<String>,
}

/// Every happening of a run that leaves ralph. Names and fields are the public schema:
/// `specs/output.md` (a loop), `specs/parallel.md` (a `--parallel` run), `specs/workers.md`
/// (a `--worker`) and `specs/planning.md` (a plan) name every one; new fields may be added, none
/// renamed.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum LoopEvent {
    /// A loop starts (or resumes).
    RunStarted {
        agent: String,
        model: Option<String>,
        rotation: Vec<String>,
        fallback: Vec<String>,
        min_iterations: u32,
        max_iterations: u32,
        tasks: bool,
        iteration: u32,
        resumed: bool,
    },
    /// The agent is about to run.
    IterationStarted {
        iteration: u32,
        agent: String,
        model: Option<String>,
    },
    /// The tools the agent used so far in this iteration.
    Tools { tools: BTreeMap<String, u64> },
    /// An iteration ended: its history record.
    IterationFinished(Box<IterationRecord>),
    /// A verification command finished.
    Verified(Verification),
    /// The loop waits before retrying an iteration the provider failed.
    RetryWait {
        iteration: u32,
        retry: u32,
        max_retries: u32,
        kind: String,
        status: Option<u16>,
        seconds_left: u64,
        /// Waiting for the provider's limit to reset (not backing off).
        until_reset: bool,
    },
    /// A fallback agent takes the iteration over.
    Fallback {
        from: String,
        to: String,
        reason: String,
    },
    /// The agent's completion promise was accepted.
    Completed { iteration: u32 },
    /// The loop ended.
    RunEnded(RunEnd),
    /// A spec was planned into a task graph, written to the task file before any task runs.
    PlanCreated { tasks: Vec<PlannedTask> },
    /// `--parallel`: a task's loop starts in its worktree.
    TaskStarted {
        task: String,
        description: String,
        branch: String,
    },
    /// `--parallel`: a done task was merged into the base.
    TaskMerged {
        task: String,
        into: String,
        commit: String,
    },
    /// `--worktree NAME --merge`: the completed loop's branch was merged into the base.
    WorktreeMerged {
        name: String,
        into: String,
        commit: String,
    },
    /// `--parallel` and `--worker`: at a task's merge, what its agent added to ralph's own files
    /// joined the base (`notes`: progress notes; `tasks`: tasks it added), or could not
    /// (`problems`; its branch keeps them).
    NotesCarried {
        task: String,
        into: String,
        branch: String,
        notes: bool,
        tasks: Vec<String>,
        problems: Vec<String>,
    },
    /// `--parallel`: a done task's merge conflicted; its loop resolves it.
    MergeConflicted { task: String, files: Vec<String> },
    /// `--parallel` and `--worker`: the run's `--verify` (`command`) failed on a done task's
    /// work merged with the base (`base`), so it was not merged: sent back to its agent with the
    /// output (the `tries`-th time of `most`), or, past them, failed (`sent_back` false).
    MergeRefused {
        task: String,
        base: String,
        command: String,
        /// `None`: the command timed out.
        exit_code: Option<i32>,
        output_tail: String,
        tries: u32,
        most: u32,
        sent_back: bool,
    },
    /// `--parallel` and `--worker`: a task failed and is marked `[!]`.
    TaskFailed { task: String, reason: String },
    /// `--parallel`: the run ended.
    ParallelEnded(ParallelEnd),
    /// `--worker`: the worker starts.
    WorkerStarted {
        worker: String,
        remote: String,
        base: String,
        /// The engine job it runs in (GitHub Actions, Slurm, Kubernetes), as claims show it.
        #[serde(skip_serializing_if = "Option::is_none")]
        job: Option<String>,
    },
    /// `--worker`: the worker claimed a task.
    TaskClaimed {
        task: String,
        description: String,
        taken_over_from: Option<String>,
        /// The claim taken over was made by an earlier attempt of this worker's engine job.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        earlier_attempt: bool,
    },
    /// `--worker`: the worker's claim was taken over by another worker.
    ClaimLost { task: String },
    /// `--worker`: the worker stopped.
    WorkerEnded { reason: String, exit_code: u8 },
}

impl LoopEvent {
    /// The event's name, as its `event` field says it.
    #[cfg(test)]
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::RunStarted { .. } => "run_started",
            Self::IterationStarted { .. } => "iteration_started",
            Self::Tools { .. } => "tools",
            Self::IterationFinished(_) => "iteration_finished",
            Self::Verified(_) => "verified",
            Self::RetryWait { .. } => "retry_wait",
            Self::Fallback { .. } => "fallback",
            Self::Completed { .. } => "completed",
            Self::RunEnded(_) => "run_ended",
            Self::PlanCreated { .. } => "plan_created",
            Self::TaskStarted { .. } => "task_started",
            Self::TaskMerged { .. } => "task_merged",
            Self::WorktreeMerged { .. } => "worktree_merged",
            Self::NotesCarried { .. } => "notes_carried",
            Self::MergeConflicted { .. } => "merge_conflicted",
            Self::MergeRefused { .. } => "merge_refused",
            Self::TaskFailed { .. } => "task_failed",
            Self::ParallelEnded(_) => "parallel_ended",
            Self::WorkerStarted { .. } => "worker_started",
            Self::TaskClaimed { .. } => "task_claimed",
            Self::ClaimLost { .. } => "claim_lost",
            Self::WorkerEnded { .. } => "worker_ended",
        }
    }
}

impl LoopEvent {
    /// `notes_carried` for task `task` merged into `into` from `branch`, unless nothing was
    /// carried and nothing failed to be.
    pub(crate) fn notes_carried(
        task: &str,
        into: &str,
        branch: &str,
        carried: Carried,
    ) -> Option<Self> {
        (carried != Carried::default()).then(|| Self::NotesCarried {
            task: task.to_owned(),
            into: into.to_owned(),
            branch: branch.to_owned(),
            notes: carried.notes,
            tasks: carried.tasks,
            problems: carried.problems,
        })
    }
}

/// How a loop ended, and what it took.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct RunEnd {
    pub(crate) reason: String,
    /// Why, as a kind, for ralph's own readers (the `--json` line keeps its pinned fields:
    /// `reason` and `exit_code` say it there).
    #[serde(skip)]
    pub(crate) stop: crate::model::StopKind,
    pub(crate) exit_code: u8,
    pub(crate) iterations: u32,
    /// Wall time over all sessions: agent runs, verification, waits and pauses.
    pub(crate) total_duration_ms: u64,
    pub(crate) tokens: Option<Usage>,
    pub(crate) cost_usd: Option<f64>,
    /// Each agent's share.
    pub(crate) agents: BTreeMap<String, AgentShare>,
}

/// How a `--parallel` run ended, with its totals.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ParallelEnd {
    pub(crate) reason: String,
    /// Why, as a kind (`completed`: every task done and merged; `blocked`: tasks failed, or
    /// wait for failed ones), for ralph's own readers, like [`RunEnd::stop`].
    #[serde(skip)]
    pub(crate) stop: Option<crate::model::StopKind>,
    pub(crate) exit_code: u8,
    /// Tasks merged, failed, and never started in this run.
    pub(crate) tasks_done: u32,
    pub(crate) tasks_failed: u32,
    pub(crate) tasks_not_started: u32,
    /// Tasks started in this run and left unfinished by its stop (Ctrl-C, a budget): `--resume`
    /// goes on with them.
    pub(crate) tasks_interrupted: u32,
    /// Iterations of every task loop of this run.
    pub(crate) iterations: u32,
    pub(crate) total_duration_ms: u64,
    pub(crate) tokens: u64,
    pub(crate) cost_usd: Option<f64>,
    /// Each task that never ran, and why.
    pub(crate) not_started: Vec<NotStarted>,
    /// Merged tasks whose notes or added tasks could not be carried into the base (their
    /// branches keep them).
    pub(crate) not_carried: Vec<String>,
}

/// A task a run never started, and why.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct NotStarted {
    pub(crate) task: String,
    pub(crate) why: String,
}

/// What the loop is about to do.
#[derive(Debug)]
pub(crate) struct Summary<'a> {
    pub(crate) prompt: &'a str,
    pub(crate) prompt_file: Option<&'a Path>,
    pub(crate) completion_promise: &'a str,
    pub(crate) task_promise: Option<&'a str>,
    pub(crate) min_iterations: u32,
    pub(crate) max_iterations: u32,
    pub(crate) agent: &'a str,
    pub(crate) model: Option<&'a str>,
    /// `--fallback`'s agents, as `Name` or `Name (model)`.
    pub(crate) fallback: Vec<String>,
    pub(crate) opencode_plugins_disabled: bool,
    pub(crate) allow_all: bool,
    pub(crate) commit: bool,
    /// Whether the working directory is in a git repository (changes tracked, commits made).
    pub(crate) git: bool,
    pub(crate) resumed_at: Option<u32>,
}

/// What the iteration summary shows.
#[derive(Debug)]
pub(crate) struct IterationSummary<'a> {
    pub(crate) iteration: u32,
    pub(crate) elapsed: Duration,
    pub(crate) tools: &'a BTreeMap<String, u64>,
    pub(crate) exit_code: i32,
    pub(crate) completion_detected: bool,
    pub(crate) usage: Option<Usage>,
    pub(crate) cost: Option<f64>,
    pub(crate) failure: Option<&'a crate::model::Failure>,
}

/// What only a person reads: the banner, the summaries, commit lines, warnings, advice. The
/// terminal reporter renders each (a task loop's voice leaves out what belongs to the run: the
/// banner, boxes, summaries and `--resume` advice); nothing else hears them.
#[derive(Debug)]
pub(crate) enum Notice<'a> {
    Banner {
        agent: &'a str,
    },
    ConfigSummary(&'a Summary<'a>),
    /// `--resume` with options given now over the saved ones (`--flag: old → new`).
    ResumeOverrides(&'a [String]),
    TasksFileCreated(&'a Path),
    /// Lines of the task file ralph reads otherwise than they are written (`line N: …`).
    TaskFileProblems {
        path: &'a Path,
        problems: &'a [String],
    },
    TasksFileUnreadable {
        path: &'a Path,
        reason: &'a str,
    },
    /// An agent a killed ralph left running was stopped (its process group).
    LeftoverAgentStopped(i32),
    CorruptFile {
        path: &'a Path,
        reason: &'a str,
        copy: Option<&'a Path>,
    },
    /// Codex's own sandbox cannot use the `bwrap` on `PATH` (`system`, `version`): Codex runs
    /// with the one it ships (in `folder`) first on its `PATH`.
    CodexBwrapShipped {
        system: &'a Path,
        version: &'a str,
        folder: &'a Path,
    },
    NoPluginsIgnored {
        agent: &'a str,
    },
    MaxCostUnavailable {
        agent: &'a str,
    },
    MaxStalledUnavailable,
    /// The loop starts on a detached HEAD (its abbreviated commit): commits go on no branch.
    DetachedHead(&'a str),
    /// Paths that had uncommitted changes when the loop started: left out of its commits.
    DirtyAtStart(&'a [String]),
    LogUnavailable {
        dir: &'a Path,
        error: &'a std::io::Error,
    },
    IterationHeader {
        iteration: u32,
        min: u32,
        max: u32,
    },
    IterationSummary(&'a IterationSummary<'a>),
    IterationError {
        iteration: u32,
        error: &'a str,
    },
    IterationTimedOut {
        iteration: u32,
        why: &'a str,
    },
    /// The sandbox's proxy refused these hosts (`host:port` → how often) in the iteration.
    SandboxBlocked {
        hosts: &'a std::collections::BTreeMap<String, u32>,
    },
    /// The agent was killed by the sandbox's memory limit (`--sandbox-memory`, as given).
    OutOfMemory {
        iteration: u32,
        limit: &'a str,
    },
    /// A `--parallel` run or a `--worker` lets its agents use every tool, unattended, with no
    /// sandbox.
    Unsandboxed,
    /// The agent said its promise but was still running after `--completion-grace`: ralph ended
    /// it, and the iteration counts as completed.
    CompletionGraceOver {
        iteration: u32,
        grace: Duration,
    },
    /// The first stop request arrived.
    Stopping,
    Struggle {
        no_progress: u32,
        short: u32,
    },
    /// The agent exited with a non-zero code (`goes_on`: the loop continues).
    NonzeroExit {
        agent: &'a str,
        code: i32,
        goes_on: bool,
    },
    TaskCompleted {
        tag: &'a str,
        next_iteration: u32,
    },
    CompletionDeferred {
        min: u32,
        next_iteration: u32,
    },
    CompletionRefusedOpenTasks(&'a [String]),
    /// The completion claim was refused by these failed checks.
    CompletionRefusedByChecks {
        iteration: u32,
        failed: &'a [String],
    },
    TaskVerificationFailed {
        task: &'a str,
    },
    TaskFailed {
        task: &'a str,
        attempts: u32,
    },
    ContextConsumed {
        newer_kept: bool,
        edited: bool,
    },
    Committed {
        iteration: u32,
        hash: &'a str,
    },
    /// The work an interrupted iteration left in a task's worktree, committed as its loop
    /// starts again (`Ralph: work of an interrupted iteration`).
    InterruptedWorkCommitted(&'a str),
    CommitFailed(&'a str),
    /// A task loop's work is not committed: the merge of the base it was handed still has
    /// conflict markers in these files.
    ConflictsNotCommitted(&'a [String]),
    ProgressCommitted(&'a str),
    PushFailed(&'a str),
    /// Every agent of the fallback chain is out of quota: the retry waits for the first reset
    /// an agent gave (`None`: the first limit to end is a guess, the ordinary backoff applies).
    FallbackAllLimited(Option<DateTime<Utc>>),
    /// A wait before a retry ended (an in-place countdown line is closed).
    RetryWaitOver,
    Ended(Ending<'a>),
    /// How to go on with a loop that stopped before completing.
    ResumeHint {
        iteration: u32,
        limit_reached: bool,
    },
    ParallelStarted {
        at_once: u32,
        base: &'a str,
    },
    WorktreeLoop {
        name: &'a str,
        branch: &'a str,
    },
    WorktreeLeft {
        name: &'a str,
        branch: &'a str,
        base: &'a str,
    },
    UnfinishedMergeUndone,
    /// A worker started again found its task held by another worker (`by`), which took it
    /// over: its stale worktree of the task was removed.
    TakenOverElsewhere {
        task: &'a str,
        by: &'a str,
    },
    /// A merge a stopped ralph had begun to land on the base was finished.
    LandingFinished {
        task: &'a str,
    },
    /// A task's worktree could not get the base's submodules (why).
    SubmodulesMissing {
        task: &'a str,
        why: &'a str,
    },
    /// A done task's merge waits: the user has uncommitted changes in the base to `files`, which
    /// the task changed too.
    MergeWaits {
        task: &'a str,
        files: &'a [String],
    },
    /// Work saved for a task was made for another text (`made_for`): it is kept on `branch`,
    /// never merged, and the task starts afresh.
    WorkSetAside {
        task: &'a str,
        made_for: &'a str,
        branch: &'a str,
    },
    /// Worktrees and branches of merged tasks were removed (`removed`), or kept (`kept`: task
    /// and why).
    Swept {
        removed: &'a [String],
        kept: &'a [(String, String)],
    },
    TaskNotRecorded {
        task: &'a str,
        status: &'a str,
        why: &'a str,
    },
    WorktreeKept {
        task: &'a str,
        paths: &'a [String],
    },
    /// A `--worker` found the task's branch on the remote pushed for another text of the task:
    /// it is kept on `branch` there, never merged.
    PushedWorkSetAside {
        task: &'a str,
        remote: &'a str,
        branch: &'a str,
    },
    /// A `--worker`'s claim is no longer its own: the task's branch is not pushed.
    ClaimLostNoPush,
    ClaimRaceLost {
        task: &'a str,
    },
    /// A task loop's prompt holds this many hints of the run's pending context.
    ContextGiven {
        hints: usize,
    },
    /// The run's pending context could not be read or recorded for a task loop: why.
    ContextNotGiven(&'a str),
    BaseMoved {
        task: &'a str,
        base: &'a str,
    },
    WorkerWaiting {
        held: usize,
    },
    /// A `--worker` given a spec waits for the plan another worker (`by`) is making.
    WaitingForPlan {
        by: &'a str,
    },
}

/// How a loop ended, as a person is told (the `run_ended` event follows).
#[derive(Debug)]
pub(crate) enum Ending<'a> {
    /// The promise was kept: `tag` in `iterations` (a task loop's task is done, to be merged).
    Completed {
        tag: &'a str,
        iterations: u32,
        total_ms: u64,
    },
    MaxIterations {
        max: u32,
        total_ms: u64,
    },
    Aborted {
        message: &'a str,
    },
    AgentFailed(&'a crate::model::Failure),
    LegacyPlugin,
    Blocked(&'a [String]),
    /// Any other stop (an interrupt was told as it came): the end line says it.
    Other,
}

/// An event as it leaves the loop: when, and for which task of a run (`None` for the run itself).
pub(crate) struct Stamped<'a> {
    pub(crate) time: DateTime<Utc>,
    pub(crate) task: Option<&'a str>,
    pub(crate) event: &'a LoopEvent,
}

impl Stamped<'_> {
    /// The event's public object: its fields, `event`, `time`, and `task` in a task's loop.
    pub(crate) fn to_value(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self.event).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            if let Some(task) = self.task {
                map.insert("task".to_owned(), task.into());
            }
            map.insert(
                "time".to_owned(),
                self.time
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                    .into(),
            );
        }
        value
    }
}

/// What hears a run's events.
pub(crate) trait Reporter: Send {
    fn event(&mut self, event: &Stamped<'_>);

    /// What only a person reads; only the terminal renders it.
    fn notice(&mut self, _notice: &Notice<'_>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of every event, with its fields filled.
    fn every_event() -> Vec<LoopEvent> {
        let mut events = loop_events();
        events.extend(fleet_events());
        events
    }

    /// One of every event of a loop.
    fn loop_events() -> Vec<LoopEvent> {
        let text = || "x".to_owned();
        vec![
            LoopEvent::PlanCreated {
                tasks: vec![PlannedTask {
                    id: text(),
                    content: text(),
                    blocked_by: vec![],
                }],
            },
            LoopEvent::RunStarted {
                agent: text(),
                model: None,
                rotation: vec![],
                fallback: vec![],
                min_iterations: 1,
                max_iterations: 0,
                tasks: false,
                iteration: 1,
                resumed: false,
            },
            LoopEvent::IterationStarted {
                iteration: 1,
                agent: text(),
                model: None,
            },
            LoopEvent::Tools {
                tools: BTreeMap::new(),
            },
            LoopEvent::IterationFinished(Box::default()),
            LoopEvent::Verified(Verification {
                command: text(),
                passed: true,
                exit_code: Some(0),
                timed_out: false,
                output_tail: String::new(),
                ..Verification::default()
            }),
            LoopEvent::RetryWait {
                iteration: 1,
                retry: 1,
                max_retries: 3,
                kind: text(),
                status: None,
                seconds_left: 5,
                until_reset: false,
            },
            LoopEvent::Fallback {
                from: text(),
                to: text(),
                reason: text(),
            },
            LoopEvent::Completed { iteration: 1 },
            LoopEvent::RunEnded(RunEnd {
                reason: text(),
                stop: crate::model::StopKind::Completed,
                exit_code: 0,
                iterations: 1,
                total_duration_ms: 1,
                tokens: None,
                cost_usd: None,
                agents: BTreeMap::new(),
            }),
        ]
    }

    /// One of every event of a run of several loops (`--parallel`, a worker).
    fn fleet_events() -> Vec<LoopEvent> {
        let text = || "x".to_owned();
        vec![
            LoopEvent::TaskStarted {
                task: text(),
                description: text(),
                branch: text(),
            },
            LoopEvent::TaskMerged {
                task: text(),
                into: text(),
                commit: text(),
            },
            LoopEvent::MergeConflicted {
                task: text(),
                files: vec![],
            },
            LoopEvent::NotesCarried {
                task: text(),
                into: text(),
                branch: text(),
                notes: true,
                tasks: vec![],
                problems: vec![],
            },
            LoopEvent::TaskFailed {
                task: text(),
                reason: text(),
            },
            LoopEvent::ParallelEnded(ParallelEnd::default()),
            LoopEvent::WorkerStarted {
                worker: text(),
                remote: text(),
                base: text(),
                job: Some(text()),
            },
            LoopEvent::TaskClaimed {
                task: text(),
                description: text(),
                taken_over_from: None,
                earlier_attempt: true,
            },
            LoopEvent::ClaimLost { task: text() },
            LoopEvent::WorkerEnded {
                reason: text(),
                exit_code: 0,
            },
        ]
    }

    #[test]
    fn every_event_serialises_with_its_name() {
        for event in every_event() {
            let stamped = Stamped {
                time: crate::model::now(),
                task: Some("t1"),
                event: &event,
            };
            let value = stamped.to_value();
            assert_eq!(value["event"], event.name(), "{value}");
            assert_eq!(value["task"], "t1");
            assert!(value["time"].is_string());
        }
    }

    #[test]
    fn every_event_is_named_in_the_specs() {
        let specs: String = ["output.md", "parallel.md", "workers.md", "planning.md"]
            .iter()
            .map(|name| {
                let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("specs")
                    .join(name);
                std::fs::read_to_string(path).unwrap()
            })
            .collect();
        for event in every_event() {
            let name = format!("`{}`", event.name());
            assert!(specs.contains(&name), "no spec names the event {name}");
        }
    }

    #[test]
    fn a_loop_event_has_no_task_field_of_its_own() {
        let event = LoopEvent::Completed { iteration: 3 };
        let stamped = Stamped {
            time: crate::model::now(),
            task: None,
            event: &event,
        };
        let value = stamped.to_value();
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["event", "iteration", "time"]);
    }
}
