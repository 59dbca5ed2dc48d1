//! What a run tells the world: every happening of every loop of a run, as one typed value.
//!
//! A [`LoopEvent`] is what leaves ralph as a `--json` line, as a hook's stdin and as a
//! notification's fields; its serialisation is that public schema (the `event` field names the
//! kind, the other fields are the variant's). A [`Reporter`] hears the events of a run; the
//! run's sink (`run/sink.rs`) stamps each with its time and its task and hands it to every
//! reporter it built: the terminal, JSON lines, hooks, notifications, the live report.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::agents::Usage;
use crate::model::Verification;
use crate::storage::carry::Carried;
use crate::storage::history::{AgentShare, IterationRecord};

mod notice;

pub(crate) use notice::{Ending, IterationSummary, Notice, Summary};

/// A task of a plan, as `plan_created` tells it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PlannedTask {
    pub(crate) id: String,
    pub(crate) content: String,
    #[serde(rename = "blockedBy")]
    pub(crate) blocked_by: Vec<String>,
}

/// Why a ready task waits for a running one (`task_waits`' `reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WaitReason {
    /// Their declared `touches:` overlap.
    Touches,
    /// Their changes conflicted earlier in the run: a merge conflict paired them, or made a
    /// conflicted file an implicit `touches` of one of them.
    Conflicted,
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
    /// An iteration reached a time limit (`why`: which one): the agent and everything it started
    /// were stopped.
    IterationTimedOut { iteration: u32, why: String },
    /// The agent printed its promise but was still running after `--completion-grace`: ralph
    /// ended it, and the iteration counts as completed.
    CompletionGraceOver { iteration: u32, grace_ms: u64 },
    /// The sandbox's proxy refused these hosts (`host:port` → how often) during an iteration.
    SandboxBlocked { hosts: BTreeMap<String, u32> },
    /// The sandbox's memory limit (`--sandbox-memory`, as given) ended the agent.
    OutOfMemory { iteration: u32, limit: String },
    /// The first stop request arrived (Ctrl+C, SIGTERM, `ralph --stop`, the page's Stop): the
    /// agent is being stopped.
    StopRequested,
    /// The agent seems stuck: iterations in a row without file changes, very short iterations.
    Struggling { no_progress: u32, short: u32 },
    /// The promise came before `--min-iterations`: the loop goes on.
    CompletionDeferred {
        min_iterations: u32,
        next_iteration: u32,
    },
    /// The agent's claim of completion was refused: tasks of the list are still open
    /// (`open_tasks`), or checks failed (`failed_checks`: `--verify` commands, or, with
    /// `task_text`, the verify command of that task of the list, which is reopened).
    CompletionRefused {
        iteration: u32,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        open_tasks: Vec<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        failed_checks: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        task_text: Option<String>,
    },
    /// The iteration's work was committed.
    Committed { iteration: u32, commit: String },
    /// The iteration's work could not be committed (`files`: the merge the loop was handed still
    /// has conflict markers in them); it stays uncommitted in the work tree.
    CommitFailed {
        reason: String,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        files: Vec<String>,
    },
    /// `--worker`: the task's branch could not be pushed (the next commit tries again), or was
    /// not, because another worker took the claim over.
    PushFailed { reason: String },
    /// `--parallel`: a done task's merge waits for the user's uncommitted changes to `files`.
    MergeWaits { task: String, files: Vec<String> },
    /// Work saved for a task (on `branch`; a `--worker`'s: on `remote`) was made for another text
    /// of it: kept there, never merged; the task starts afresh.
    WorkSetAside {
        task: String,
        branch: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        made_for: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        remote: Option<String>,
    },
    /// A task's new status (`done`, `failed`) could not be written to the task file.
    TaskNotRecorded {
        task: String,
        status: String,
        why: String,
    },
    /// A ready task waits for the running task `behind`: what the two touch (`touches:`)
    /// overlaps, or their changes conflicted earlier in the run (`reason`).
    TaskWaits {
        task: String,
        behind: String,
        reason: WaitReason,
    },
    /// `--parallel auto`: a ready task waits for room on the machine; `why`: `waiting for memory:
    /// 1.2G free, 2G needed` or `waiting for load: …`.
    TaskWaitsForRoom { task: String, why: String },
    /// `--worker --wait`: no task is free; `held` are held by other workers.
    WorkerWaiting { held: usize },
    /// The agent asked a person (`ralph_ask`) and waits for the answer, `timeout_ms` at most.
    QuestionAsked {
        id: String,
        iteration: u32,
        question: String,
        options: Vec<String>,
        urgency: Option<String>,
        timeout_ms: u64,
    },
    /// The question stopped waiting: `status` `answered` (with the `answer`, who gave it `by`:
    /// `terminal`, `page`, `cli`, `mcp` or `remote`), `timed_out` or `cancelled`; `waited_ms`:
    /// how long the agent waited.
    QuestionAnswered {
        id: String,
        iteration: u32,
        status: String,
        answer: Option<String>,
        by: Option<String>,
        waited_ms: u64,
    },
    /// `--worker` given a spec: another worker (`by`) is planning it; this one waits.
    WaitingForPlan { by: String },
    /// `--worktree NAME` without `--merge`: the loop's work is left on `branch`, to merge into
    /// `base` by hand.
    WorktreeLeft {
        name: String,
        branch: String,
        base: String,
    },
    /// An agent a killed ralph left running (its process group) was stopped.
    LeftoverAgentStopped { process_group: i32 },
    /// The agent changed protected paths (`--protect`): they were put back as the iteration found
    /// them, and are never committed.
    ProtectedChangeRestored { iteration: u32, files: Vec<String> },
    /// `--holdout` checks failed on a claim of completion: how many of how many (their commands
    /// and output are in the history, for the user).
    HoldoutFailed {
        iteration: u32,
        failed: usize,
        total: usize,
    },
    /// A file of ralph's could not be read (`reason`): set aside as `copy`, and started afresh.
    CorruptFile {
        path: String,
        reason: String,
        copy: Option<String>,
    },
}

/// Every event's name, as its `event` field says it: what `--on-event` subscribes to.
pub(crate) const EVENT_NAMES: &[&str] = &[
    "run_started",
    "iteration_started",
    "tools",
    "iteration_finished",
    "verified",
    "retry_wait",
    "fallback",
    "completed",
    "run_ended",
    "plan_created",
    "task_started",
    "task_merged",
    "worktree_merged",
    "notes_carried",
    "merge_conflicted",
    "merge_refused",
    "task_failed",
    "parallel_ended",
    "worker_started",
    "task_claimed",
    "claim_lost",
    "worker_ended",
    "iteration_timed_out",
    "completion_grace_over",
    "sandbox_blocked",
    "out_of_memory",
    "stop_requested",
    "struggling",
    "completion_deferred",
    "completion_refused",
    "committed",
    "commit_failed",
    "push_failed",
    "merge_waits",
    "work_set_aside",
    "task_not_recorded",
    "task_waits",
    "task_waits_for_room",
    "worker_waiting",
    "waiting_for_plan",
    "worktree_left",
    "leftover_agent_stopped",
    "corrupt_file",
    "protected_change_restored",
    "holdout_failed",
];

impl LoopEvent {
    /// The event's name, as its `event` field says it.
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
            Self::IterationTimedOut { .. } => "iteration_timed_out",
            Self::CompletionGraceOver { .. } => "completion_grace_over",
            Self::SandboxBlocked { .. } => "sandbox_blocked",
            Self::OutOfMemory { .. } => "out_of_memory",
            Self::StopRequested => "stop_requested",
            Self::Struggling { .. } => "struggling",
            Self::CompletionDeferred { .. } => "completion_deferred",
            Self::CompletionRefused { .. } => "completion_refused",
            Self::Committed { .. } => "committed",
            Self::CommitFailed { .. } => "commit_failed",
            Self::PushFailed { .. } => "push_failed",
            Self::MergeWaits { .. } => "merge_waits",
            Self::WorkSetAside { .. } => "work_set_aside",
            Self::TaskNotRecorded { .. } => "task_not_recorded",
            Self::TaskWaits { .. } => "task_waits",
            Self::TaskWaitsForRoom { .. } => "task_waits_for_room",
            Self::WorkerWaiting { .. } => "worker_waiting",
            Self::QuestionAsked { .. } => "question_asked",
            Self::QuestionAnswered { .. } => "question_answered",
            Self::WaitingForPlan { .. } => "waiting_for_plan",
            Self::WorktreeLeft { .. } => "worktree_left",
            Self::LeftoverAgentStopped { .. } => "leftover_agent_stopped",
            Self::CorruptFile { .. } => "corrupt_file",
            Self::ProtectedChangeRestored { .. } => "protected_change_restored",
            Self::HoldoutFailed { .. } => "holdout_failed",
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

    /// An event a notice just told (see [`Notice::event`]): heard as any event, but by the
    /// terminal, which rendered the notice.
    fn told(&mut self, event: &Stamped<'_>) {
        self.event(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of every event, with its fields filled.
    fn every_event() -> Vec<LoopEvent> {
        let mut events = loop_events();
        events.extend(fleet_events());
        events.extend(told_events());
        events.extend(told_fleet_events());
        events
    }

    /// One of every event a notice of a run of several loops tells as well.
    fn told_fleet_events() -> Vec<LoopEvent> {
        let text = || "x".to_owned();
        vec![
            LoopEvent::MergeWaits {
                task: text(),
                files: vec![text()],
            },
            LoopEvent::WorkSetAside {
                task: text(),
                branch: text(),
                made_for: Some(text()),
                remote: None,
            },
            LoopEvent::TaskNotRecorded {
                task: text(),
                status: text(),
                why: text(),
            },
            LoopEvent::TaskWaits {
                task: text(),
                behind: text(),
                reason: WaitReason::Touches,
            },
            LoopEvent::TaskWaitsForRoom {
                task: text(),
                why: text(),
            },
            LoopEvent::WorkerWaiting { held: 1 },
            LoopEvent::WaitingForPlan { by: text() },
            LoopEvent::WorktreeLeft {
                name: text(),
                branch: text(),
                base: text(),
            },
        ]
    }

    /// One of every event a notice tells as well.
    fn told_events() -> Vec<LoopEvent> {
        let text = || "x".to_owned();
        vec![
            LoopEvent::IterationTimedOut {
                iteration: 1,
                why: text(),
            },
            LoopEvent::CompletionGraceOver {
                iteration: 1,
                grace_ms: 1,
            },
            LoopEvent::SandboxBlocked {
                hosts: BTreeMap::from([(text(), 1)]),
            },
            LoopEvent::OutOfMemory {
                iteration: 1,
                limit: text(),
            },
            LoopEvent::StopRequested,
            LoopEvent::Struggling {
                no_progress: 3,
                short: 0,
            },
            LoopEvent::CompletionDeferred {
                min_iterations: 2,
                next_iteration: 2,
            },
            LoopEvent::CompletionRefused {
                iteration: 1,
                open_tasks: vec![text()],
                failed_checks: vec![text()],
                task_text: Some(text()),
            },
            LoopEvent::Committed {
                iteration: 1,
                commit: text(),
            },
            LoopEvent::CommitFailed {
                reason: text(),
                files: vec![text()],
            },
            LoopEvent::PushFailed { reason: text() },
            LoopEvent::LeftoverAgentStopped { process_group: 7 },
            LoopEvent::ProtectedChangeRestored {
                iteration: 1,
                files: vec![text()],
            },
            LoopEvent::HoldoutFailed {
                iteration: 1,
                failed: 1,
                total: 2,
            },
            LoopEvent::CorruptFile {
                path: text(),
                reason: text(),
                copy: None,
            },
        ]
    }

    #[test]
    fn the_list_of_names_is_every_events_name_once() {
        let names: Vec<&str> = every_event().iter().map(LoopEvent::name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "one example of each event");
        let mut listed = EVENT_NAMES.to_vec();
        listed.sort_unstable();
        assert_eq!(listed, sorted);
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
            LoopEvent::MergeRefused {
                task: text(),
                base: text(),
                command: text(),
                exit_code: Some(1),
                output_tail: text(),
                tries: 1,
                most: 3,
                sent_back: true,
            },
            LoopEvent::WorktreeMerged {
                name: text(),
                into: text(),
                commit: text(),
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
