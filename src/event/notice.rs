//! What only a person reads ([`Notice`]), and which of it is also an event every listener hears
//! ([`Notice::event`]): what happened to a run (a timeout, a failure to commit or push, a wait, a
//! sandbox block) reaches the journal, `--json`, hooks and the page as well as the terminal.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{LoopEvent, WaitReason};
use crate::agents::Usage;

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
    /// The agent changed protected paths (`--protect`): put back, not committed (`fails`:
    /// `--protect-mode fail` ends the loop).
    ProtectedRestored {
        iteration: u32,
        files: &'a [String],
        fails: bool,
    },
    /// A task waits: what it touches (`touches:`) overlaps what the running task `behind`
    /// touches.
    TouchesWait {
        task: &'a str,
        behind: &'a str,
        reason: WaitReason,
    },
    /// `--parallel auto` (or a `--worker` that counts room): a ready task waits for room on the
    /// machine (memory, load); `why` says which, `need_from` what set its memory need.
    RoomWait {
        task: &'a str,
        why: &'a str,
        need_from: &'a str,
    },
    /// A `--protect` pattern matches no file (yet).
    ProtectMatchesNothing(&'a str),
    /// `--protect` outside a git repository: nothing tells what the agent changed.
    ProtectWithoutGit,
    /// `--holdout` without a sandbox: the agent can read the checks' files and results.
    HoldoutNotSecret,
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
    /// A `--worker`'s merge of `task` also landed `along`: other workers' finished tasks,
    /// ready to merge (a merge train).
    MergedAlong {
        task: &'a str,
        along: &'a [&'a str],
        base: &'a str,
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

impl Notice<'_> {
    /// The event this notice is for every other listener too (the journal, `--json`, hooks,
    /// notifications, the page), when it tells what happened to a run rather than advice.
    pub(crate) fn event(&self) -> Option<LoopEvent> {
        self.loop_event()
            .or_else(|| self.git_event())
            .or_else(|| self.fleet_event())
    }

    /// What happened to a loop's agent, its claims and its files.
    fn loop_event(&self) -> Option<LoopEvent> {
        Some(match self {
            Self::IterationTimedOut { iteration, why } => LoopEvent::IterationTimedOut {
                iteration: *iteration,
                why: text(why),
            },
            Self::CompletionGraceOver { iteration, grace } => LoopEvent::CompletionGraceOver {
                iteration: *iteration,
                grace_ms: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            },
            Self::SandboxBlocked { hosts } => LoopEvent::SandboxBlocked {
                hosts: (*hosts).clone(),
            },
            Self::OutOfMemory { iteration, limit } => LoopEvent::OutOfMemory {
                iteration: *iteration,
                limit: text(limit),
            },
            Self::Stopping => LoopEvent::StopRequested,
            Self::ProtectedRestored {
                iteration, files, ..
            } => LoopEvent::ProtectedChangeRestored {
                iteration: *iteration,
                files: files.to_vec(),
            },
            Self::Struggle { no_progress, short } => LoopEvent::Struggling {
                no_progress: *no_progress,
                short: *short,
            },
            Self::CompletionDeferred {
                min,
                next_iteration,
            } => LoopEvent::CompletionDeferred {
                min_iterations: *min,
                next_iteration: *next_iteration,
            },
            Self::TaskFailed { task, attempts } => LoopEvent::TaskFailed {
                task: text(task),
                reason: format!("failed after {attempts} attempts"),
            },
            Self::LeftoverAgentStopped(group) => LoopEvent::LeftoverAgentStopped {
                process_group: *group,
            },
            Self::CorruptFile { path, reason, copy } => LoopEvent::CorruptFile {
                path: path.display().to_string(),
                reason: text(reason),
                copy: copy.map(|copy| copy.display().to_string()),
            },
            _ => return None,
        })
    }

    /// What came of a loop's commits and pushes.
    fn git_event(&self) -> Option<LoopEvent> {
        Some(match self {
            Self::Committed { iteration, hash } => LoopEvent::Committed {
                iteration: *iteration,
                commit: text(hash),
            },
            Self::CommitFailed(reason) => LoopEvent::CommitFailed {
                reason: text(reason),
                files: Vec::new(),
            },
            Self::ConflictsNotCommitted(files) => LoopEvent::CommitFailed {
                reason: "the merge the loop was handed still has conflict markers".to_owned(),
                files: files.to_vec(),
            },
            Self::PushFailed(reason) => LoopEvent::PushFailed {
                reason: text(reason),
            },
            Self::ClaimLostNoPush => LoopEvent::PushFailed {
                reason: "another worker took the claim on the task over".to_owned(),
            },
            _ => return None,
        })
    }

    /// What happened to the tasks of a run of several loops, and to its workers.
    fn fleet_event(&self) -> Option<LoopEvent> {
        Some(match self {
            Self::MergeWaits { task, files } => LoopEvent::MergeWaits {
                task: text(task),
                files: files.to_vec(),
            },
            Self::WorkSetAside {
                task,
                made_for,
                branch,
            } => LoopEvent::WorkSetAside {
                task: text(task),
                branch: text(branch),
                made_for: Some(text(made_for)),
                remote: None,
            },
            Self::PushedWorkSetAside {
                task,
                remote,
                branch,
            } => LoopEvent::WorkSetAside {
                task: text(task),
                branch: text(branch),
                made_for: None,
                remote: Some(text(remote)),
            },
            Self::TaskNotRecorded { task, status, why } => LoopEvent::TaskNotRecorded {
                task: text(task),
                status: text(status),
                why: text(why),
            },
            Self::WorkerWaiting { held } => LoopEvent::WorkerWaiting { held: *held },
            Self::TouchesWait {
                task,
                behind,
                reason,
            } => LoopEvent::TaskWaits {
                task: text(task),
                behind: text(behind),
                reason: *reason,
            },
            Self::RoomWait { task, why, .. } => LoopEvent::TaskWaitsForRoom {
                task: text(task),
                why: text(why),
            },
            Self::WaitingForPlan { by } => LoopEvent::WaitingForPlan { by: text(by) },
            Self::WorktreeLeft { name, branch, base } => LoopEvent::WorktreeLeft {
                name: text(name),
                branch: text(branch),
                base: text(base),
            },
            _ => return None,
        })
    }
}

fn text(text: &str) -> String {
    text.to_owned()
}
