//! The examples the rendering tests draw: one of every event and every notice, with realistic
//! fields (several where the rendering differs), and fixed times so nothing depends on the clock.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::agents::{Failure, FailureKind, Usage};
use crate::event::{Ending, IterationSummary, LoopEvent, Notice, RunEnd, Summary, WaitReason};
use crate::model::Verification;
use crate::storage::history::AgentShare;

use super::{at, strings};

mod fleet;

use fleet::{parallel_events, plan_created, worker_events};

/// One of every event.
pub(super) fn every_event() -> Vec<LoopEvent> {
    [
        iteration_events(),
        end_events(),
        vec![plan_created()],
        parallel_events(),
        worker_events(),
        told_events(),
        super::questions::question_events(),
    ]
    .concat()
}

/// The events notices tell as well (one of each name), and a claim's refusal.
fn told_events() -> Vec<LoopEvent> {
    let data = Data::new();
    let summary = summary();
    let iteration = iteration_summary(&data);
    let mut events = vec![
        LoopEvent::CompletionRefused {
            iteration: 3,
            open_tasks: strings(&["2. Add the login page"]),
            failed_checks: vec![],
            task_text: None,
        },
        LoopEvent::HoldoutFailed {
            iteration: 4,
            failed: 1,
            total: 3,
        },
    ];
    let mut names = std::collections::BTreeSet::from(["task_failed"]);
    for event in every_notice(&data, &summary, &iteration)
        .iter()
        .filter_map(Notice::event)
    {
        if names.insert(event.name()) {
            events.push(event);
        }
    }
    events
}

/// A loop's start and what its iterations tell.
fn iteration_events() -> Vec<LoopEvent> {
    vec![
        LoopEvent::RunStarted {
            agent: "claude-code".to_owned(),
            model: Some("sonnet".to_owned()),
            rotation: vec![],
            fallback: strings(&["codex"]),
            min_iterations: 1,
            max_iterations: 10,
            tasks: true,
            iteration: 1,
            resumed: false,
        },
        LoopEvent::IterationStarted {
            iteration: 2,
            agent: "claude-code".to_owned(),
            model: Some("sonnet".to_owned()),
        },
        LoopEvent::Tools {
            tools: BTreeMap::from([
                ("Bash".to_owned(), 4),
                ("Edit".to_owned(), 2),
                ("Read".to_owned(), 7),
            ]),
        },
        LoopEvent::IterationFinished(Box::default()),
        LoopEvent::Verified(Verification {
            command: "cargo test".to_owned(),
            passed: true,
            exit_code: Some(0),
            timed_out: false,
            output_tail: "test result: ok. 42 passed".to_owned(),
            ..Verification::default()
        }),
        LoopEvent::Verified(Verification {
            command: "cargo clippy -- -D warnings".to_owned(),
            passed: false,
            exit_code: Some(101),
            timed_out: false,
            output_tail: "error: unused variable `x`".to_owned(),
            ..Verification::default()
        }),
        LoopEvent::Verified(Verification {
            command: "npm test".to_owned(),
            passed: false,
            exit_code: None,
            timed_out: true,
            output_tail: String::new(),
            ..Verification::default()
        }),
        LoopEvent::RetryWait {
            iteration: 3,
            retry: 1,
            max_retries: 5,
            kind: "overloaded".to_owned(),
            status: Some(529),
            seconds_left: 30,
            until_reset: false,
        },
        LoopEvent::RetryWait {
            iteration: 3,
            retry: 2,
            max_retries: 5,
            kind: "rate limit".to_owned(),
            status: None,
            seconds_left: 754,
            until_reset: true,
        },
        LoopEvent::Fallback {
            from: "claude-code".to_owned(),
            to: "Codex".to_owned(),
            reason: "Claude Code is out of quota until 14:30 UTC (in 12:34)".to_owned(),
        },
    ]
}

/// How a loop ends.
fn end_events() -> Vec<LoopEvent> {
    let usage = |input, output, cache_read| Usage {
        input,
        output,
        cache_read,
        cache_write: 0,
    };
    vec![
        LoopEvent::Completed { iteration: 4 },
        LoopEvent::RunEnded(RunEnd {
            reason: "completed in 4 iterations".to_owned(),
            stop: crate::model::StopKind::Completed,
            exit_code: 0,
            iterations: 4,
            total_duration_ms: 754_000,
            tokens: Some(usage(120_000, 8_500, 300_000)),
            cost_usd: Some(1.2345),
            agents: BTreeMap::from([
                (
                    "claude-code".to_owned(),
                    AgentShare {
                        iterations: 3,
                        last_iteration: 3,
                        tokens: usage(100_000, 7_000, 250_000),
                        cost_usd: Some(1.0),
                    },
                ),
                (
                    "codex".to_owned(),
                    AgentShare {
                        iterations: 1,
                        last_iteration: 4,
                        tokens: usage(20_000, 1_500, 50_000),
                        cost_usd: None,
                    },
                ),
            ]),
        }),
        LoopEvent::RunEnded(RunEnd {
            reason: "max iterations (1) reached".to_owned(),
            stop: crate::model::StopKind::MaxIterations,
            exit_code: 2,
            iterations: 1,
            total_duration_ms: 45_000,
            tokens: None,
            cost_usd: None,
            agents: BTreeMap::new(),
        }),
    ]
}

/// What a notice borrows, owned here.
pub(super) struct Data {
    summary_tools: BTreeMap<String, u64>,
    failure: Failure,
    strings: Vec<String>,
    overrides: Vec<String>,
    checks: Vec<String>,
    blocked: Vec<String>,
    two: Vec<String>,
    one: Vec<String>,
    paths: Vec<String>,
    kept: Vec<(String, String)>,
    /// More uncommitted paths than a start notice lists, and one alone.
    dirty: Vec<String>,
    secret: Vec<String>,
    task_problems: Vec<String>,
    io_error: std::io::Error,
    refused_hosts: BTreeMap<String, u32>,
}

impl Data {
    pub(super) fn new() -> Self {
        Self {
            summary_tools: BTreeMap::from([("Bash".to_owned(), 3), ("Edit".to_owned(), 1)]),
            failure: Failure {
                kind: FailureKind::RateLimit,
                status: Some(429),
                message: "You have hit your usage limit".to_owned(),
                retry_at: Some(at(14, 30)),
            },
            strings: strings(&[
                "Add the /users endpoint",
                "Write the migration",
                "Add rate limiting",
                "Document the API",
                "Add an index on users.email",
                "Update the changelog",
                "Tag a release",
            ]),
            overrides: strings(&["--max-iterations: 10 → 20", "--agent: codex → claude-code"]),
            checks: strings(&["`cargo test`", "`npm run lint`"]),
            blocked: strings(&[
                "2. ❌ Add the /users endpoint — failed",
                "3. ⏸️ Document the API — waits for 2",
            ]),
            two: strings(&["api", "db"]),
            one: strings(&["api"]),
            paths: strings(&["src/a.rs", "src/b.rs", "src/c.rs", "src/d.rs"]),
            kept: vec![(
                "ui".to_owned(),
                ".ralph/worktrees/ui has uncommitted changes (src/ui.rs)".to_owned(),
            )],
            dirty: (1..=12).map(|n| format!("notes/draft-{n:02}.md")).collect(),
            secret: strings(&["secrets.env"]),
            task_problems: crate::storage::tasks::problems(
                "-[ ] nospace\n- [ ] a\n  - id: a\n- [ ] b\n  - id: a\n",
            ),
            io_error: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
            refused_hosts: BTreeMap::from([
                ("crates.io:443".to_owned(), 3),
                ("static.crates.io:443".to_owned(), 1),
            ]),
        }
    }
}

/// One of every notice and of every ending.
pub(super) fn every_notice<'a>(
    data: &'a Data,
    summary: &'a Summary<'a>,
    iteration: &'a IterationSummary<'a>,
) -> Vec<Notice<'a>> {
    let mut notices = start_notices(data, summary);
    notices.extend(iteration_notices(iteration));
    notices.extend(claim_notices(data));
    notices.extend(end_notices(data));
    notices.extend(run_notices(data));
    notices
}

/// What a loop tells as it starts.
fn start_notices<'a>(data: &'a Data, summary: &'a Summary<'a>) -> Vec<Notice<'a>> {
    let mut notices = vec![
        Notice::Banner {
            agent: "Claude Code",
        },
        Notice::ConfigSummary(summary),
        Notice::ResumeOverrides(&data.overrides),
        Notice::TasksFileCreated(Path::new(".ralph/ralph-tasks.md")),
        Notice::TaskFileProblems {
            path: Path::new(".ralph/ralph-tasks.md"),
            problems: &data.task_problems,
        },
        Notice::TasksFileUnreadable {
            path: Path::new(".ralph/ralph-tasks.md"),
            reason: "stream did not contain valid UTF-8",
        },
        Notice::LeftoverAgentStopped(4242),
        Notice::CorruptFile {
            path: Path::new(".ralph/ralph-history.json"),
            reason: "expected value at line 1 column 1",
            copy: Some(Path::new(".ralph/ralph-history.json.corrupt")),
        },
        Notice::CorruptFile {
            path: Path::new(".ralph/ralph-loop.state.json"),
            reason: "missing field `iteration`",
            copy: None,
        },
        Notice::CodexBwrapShipped {
            system: Path::new("/usr/bin/bwrap"),
            version: "0.8.0",
            folder: Path::new(
                "/home/me/.npm/lib/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/codex-resources",
            ),
        },
        Notice::NoPluginsIgnored {
            agent: "Claude Code",
        },
        Notice::MaxCostUnavailable { agent: "Codex" },
        Notice::MaxStalledUnavailable,
        Notice::DetachedHead("1d4cc74"),
        Notice::DirtyAtStart(&data.dirty),
        Notice::DirtyAtStart(&data.secret),
        Notice::LogUnavailable {
            dir: Path::new(".ralph/logs"),
            error: &data.io_error,
        },
        Notice::SandboxBlocked {
            hosts: &data.refused_hosts,
        },
        Notice::OutOfMemory {
            iteration: 2,
            limit: "64M",
        },
        Notice::Unsandboxed,
        Notice::ProtectedRestored {
            iteration: 3,
            files: &data.two,
            fails: false,
        },
        Notice::ProtectedRestored {
            iteration: 4,
            files: &data.one,
            fails: true,
        },
        Notice::ProtectMatchesNothing("tests/**"),
    ];
    notices.extend(wait_notices());
    notices.extend([Notice::HoldoutNotSecret, Notice::ProtectWithoutGit]);
    notices
}

/// What a task that waits to start tells.
fn wait_notices() -> Vec<Notice<'static>> {
    vec![
        Notice::TouchesWait {
            task: "ui",
            behind: "api",
            reason: WaitReason::Touches,
        },
        Notice::TouchesWait {
            task: "web",
            behind: "api",
            reason: WaitReason::Conflicted,
        },
        Notice::RoomWait {
            task: "db",
            why: "waiting for memory: 1.2G free, 2G needed",
            need_from: "--agent-memory",
        },
        Notice::RoomWait {
            task: "db",
            why: "waiting for load: load average 3.1 with 2 cores",
            need_from: "--sandbox-memory",
        },
    ]
}

/// What a loop tells as its iterations go.
fn iteration_notices<'a>(iteration: &'a IterationSummary<'a>) -> Vec<Notice<'a>> {
    vec![
        Notice::IterationHeader {
            iteration: 2,
            min: 3,
            max: 10,
        },
        Notice::IterationHeader {
            iteration: 4,
            min: 1,
            max: 0,
        },
        Notice::IterationSummary(iteration),
        Notice::IterationError {
            iteration: 2,
            error: "cannot write .ralph/ralph-loop.state.json: No space left on device (os error 28)",
        },
        Notice::IterationTimedOut {
            iteration: 2,
            why: "no output for 10m",
        },
        Notice::CompletionGraceOver {
            iteration: 3,
            grace: Duration::from_secs(30),
        },
        Notice::Stopping,
        Notice::Struggle {
            no_progress: 3,
            short: 4,
        },
        Notice::Struggle {
            no_progress: 5,
            short: 0,
        },
        Notice::NonzeroExit {
            agent: "Claude Code",
            code: 1,
            goes_on: true,
        },
        Notice::NonzeroExit {
            agent: "OpenCode",
            code: 1,
            goes_on: false,
        },
    ]
}

/// What an iteration's claims, commits and waits come to.
fn claim_notices(data: &Data) -> Vec<Notice<'_>> {
    vec![
        Notice::TaskCompleted {
            tag: "<promise>READY_FOR_NEXT_TASK</promise>",
            next_iteration: 3,
        },
        Notice::CompletionDeferred {
            min: 5,
            next_iteration: 3,
        },
        Notice::CompletionRefusedOpenTasks(&data.strings[..1]),
        Notice::CompletionRefusedOpenTasks(&data.strings),
        Notice::CompletionRefusedByChecks {
            iteration: 3,
            failed: &data.checks,
        },
        Notice::TaskVerificationFailed {
            task: "Add the /users endpoint",
        },
        Notice::TaskFailed {
            task: "Add the /users endpoint",
            attempts: 3,
        },
        Notice::ContextConsumed {
            newer_kept: false,
            edited: false,
        },
        Notice::ContextConsumed {
            newer_kept: true,
            edited: false,
        },
        Notice::ContextConsumed {
            newer_kept: false,
            edited: true,
        },
        Notice::InterruptedWorkCommitted("7f48457"),
        Notice::Committed {
            iteration: 2,
            hash: "1a2b3c4",
        },
        Notice::CommitFailed("git commit failed (error: gpg failed to sign the data)"),
        Notice::ConflictsNotCommitted(&data.paths[..2]),
        Notice::ProgressCommitted("5d6e7f8"),
        Notice::PushFailed(
            "git push origin ralph/api failed (fatal: could not read from remote repository.)",
        ),
        Notice::FallbackAllLimited(Some(at(14, 30))),
        Notice::FallbackAllLimited(None),
        Notice::RetryWaitOver,
    ]
}

/// How a loop ends.
fn end_notices(data: &Data) -> Vec<Notice<'_>> {
    vec![
        Notice::Ended(Ending::Completed {
            tag: "<promise>COMPLETE</promise>",
            iterations: 4,
            total_ms: 754_000,
        }),
        Notice::Ended(Ending::MaxIterations {
            max: 10,
            total_ms: 3_723_000,
        }),
        Notice::Ended(Ending::Aborted {
            message: "The database schema file is missing.\nI need it to go on.",
        }),
        Notice::Ended(Ending::AgentFailed(&data.failure)),
        Notice::Ended(Ending::LegacyPlugin),
        Notice::Ended(Ending::Blocked(&data.blocked)),
        Notice::Ended(Ending::Other),
        Notice::ResumeHint {
            iteration: 5,
            limit_reached: false,
        },
        Notice::ResumeHint {
            iteration: 11,
            limit_reached: true,
        },
    ]
}

/// What a run of several loops tells: a `--parallel` coordinator and a `--worker`.
fn run_notices(data: &Data) -> Vec<Notice<'_>> {
    vec![
        Notice::ParallelStarted {
            at_once: 3,
            base: "main",
        },
        Notice::WorktreeLoop {
            name: "api",
            branch: "ralph/api",
        },
        Notice::WorktreeLeft {
            name: "api",
            branch: "ralph/api",
            base: "main",
        },
        Notice::UnfinishedMergeUndone,
        Notice::WaitingForPlan { by: "laptop-4242" },
        Notice::TakenOverElsewhere {
            task: "api",
            by: "laptop-4242",
        },
        Notice::LandingFinished { task: "api" },
        Notice::SubmodulesMissing {
            task: "build",
            why: "git submodule update failed (fatal: repository 'lib' does not exist)",
        },
        Notice::MergeWaits {
            task: "touch",
            files: &data.one,
        },
        Notice::WorkSetAside {
            task: "write-tests",
            made_for: "Write tests",
            branch: "ralph-kept/write-tests-1a2b3c4d",
        },
        Notice::Swept {
            removed: &data.two,
            kept: &data.kept,
        },
        Notice::TaskNotRecorded {
            task: "api",
            status: "failed [!]",
            why: "git commit failed (fatal: Unable to create '.git/index.lock': File exists.)",
        },
        Notice::WorktreeKept {
            task: "api",
            paths: &data.paths,
        },
        Notice::ClaimRaceLost { task: "api" },
        Notice::ClaimLostNoPush,
        Notice::PushedWorkSetAside {
            task: "api",
            remote: "origin",
            branch: "ralph-kept/api-20261125120000",
        },
        Notice::ContextGiven { hints: 1 },
        Notice::ContextGiven { hints: 2 },
        Notice::ContextNotGiven(
            "failed to read `.ralph/ralph-context.md`: permission denied (os error 13)",
        ),
        Notice::BaseMoved {
            task: "api",
            base: "main",
        },
        Notice::WorkerWaiting { held: 2 },
        Notice::MergedAlong {
            task: "api",
            along: &["db"],
            base: "origin/main",
        },
        Notice::MergedAlong {
            task: "api",
            along: &["db", "ui"],
            base: "origin/main",
        },
    ]
}

pub(super) fn summary() -> Summary<'static> {
    Summary {
        prompt: "Build a REST API for the todo app.\nUse axum and SQLite.",
        prompt_file: Some(Path::new("PROMPT.md")),
        completion_promise: "COMPLETE",
        task_promise: Some("READY_FOR_NEXT_TASK"),
        min_iterations: 1,
        max_iterations: 10,
        agent: "Claude Code",
        model: Some("sonnet"),
        fallback: strings(&["Codex", "Gemini CLI (gemini-2.5-pro)"]),
        opencode_plugins_disabled: false,
        allow_all: true,
        commit: true,
        git: true,
        resumed_at: Some(3),
    }
}

pub(super) fn iteration_summary(data: &Data) -> IterationSummary<'_> {
    IterationSummary {
        iteration: 2,
        elapsed: Duration::from_secs(125),
        tools: &data.summary_tools,
        exit_code: 1,
        completion_detected: false,
        usage: Some(Usage {
            input: 12_345,
            output: 678,
            cache_read: 90_000,
            cache_write: 1_000,
        }),
        cost: Some(0.0421),
        failure: Some(&data.failure),
    }
}
