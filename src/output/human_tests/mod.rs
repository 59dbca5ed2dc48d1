//! The terminal's rendering of every event and every notice, snapshot-tested: in the plain voice
//! of a run's own loop, and in the voice of a task loop (its lines prefixed, the run's own
//! notices left out).

mod examples;
mod questions;

use std::collections::BTreeSet;

use chrono::{DateTime, TimeZone as _, Utc};

use super::{Human, Voice};
use crate::event::{Ending, LoopEvent, Notice, Reporter as _, Stamped};
use examples::{Data, every_event, every_notice, iteration_summary, summary};

/// `$name(value)` is the name of a value's variant, with one arm per variant and no wildcard, so
/// a variant added to the enum does not compile until it is named here; `$all` lists the names,
/// so a test fails until the variant is in the examples too.
macro_rules! variants {
    ($name:ident, $all:ident, $enum:ident, $ty:ty, [$($variant:ident),+ $(,)?]) => {
        const $all: &[&str] = &[$(stringify!($variant)),+];

        fn $name(value: &$ty) -> &'static str {
            match value {
                $($enum::$variant { .. } => stringify!($variant)),+
            }
        }
    };
}

variants!(
    event_variant,
    EVENTS,
    LoopEvent,
    LoopEvent,
    [
        RunStarted,
        IterationStarted,
        Tools,
        IterationFinished,
        Verified,
        RetryWait,
        Fallback,
        Completed,
        RunEnded,
        PlanCreated,
        TaskStarted,
        TaskMerged,
        WorktreeMerged,
        NotesCarried,
        MergeConflicted,
        MergeRefused,
        TaskFailed,
        ParallelEnded,
        WorkerStarted,
        TaskClaimed,
        ClaimLost,
        WorkerEnded,
        IterationTimedOut,
        CompletionGraceOver,
        SandboxBlocked,
        OutOfMemory,
        StopRequested,
        Struggling,
        CompletionDeferred,
        CompletionRefused,
        Committed,
        CommitFailed,
        PushFailed,
        MergeWaits,
        WorkSetAside,
        TaskNotRecorded,
        TaskWaits,
        TaskWaitsForRoom,
        WorkerWaiting,
        QuestionAsked,
        QuestionAnswered,
        WaitingForPlan,
        WorktreeLeft,
        LeftoverAgentStopped,
        CorruptFile,
        ProtectedChangeRestored,
        HoldoutFailed,
    ]
);

variants!(
    notice_variant,
    NOTICES,
    Notice,
    Notice<'_>,
    [
        Banner,
        ConfigSummary,
        ResumeOverrides,
        TasksFileCreated,
        TaskFileProblems,
        TasksFileUnreadable,
        LeftoverAgentStopped,
        CorruptFile,
        CodexBwrapShipped,
        NoPluginsIgnored,
        MaxCostUnavailable,
        MaxStalledUnavailable,
        DetachedHead,
        DirtyAtStart,
        LogUnavailable,
        IterationHeader,
        IterationSummary,
        IterationError,
        IterationTimedOut,
        SandboxBlocked,
        OutOfMemory,
        Unsandboxed,
        ProtectedRestored,
        ProtectMatchesNothing,
        TouchesWait,
        RoomWait,
        HoldoutNotSecret,
        ProtectWithoutGit,
        CompletionGraceOver,
        Stopping,
        Struggle,
        NonzeroExit,
        TaskCompleted,
        CompletionDeferred,
        CompletionRefusedOpenTasks,
        CompletionRefusedByChecks,
        TaskVerificationFailed,
        TaskFailed,
        ContextConsumed,
        Committed,
        InterruptedWorkCommitted,
        CommitFailed,
        ConflictsNotCommitted,
        ProgressCommitted,
        PushFailed,
        FallbackAllLimited,
        RetryWaitOver,
        Ended,
        ResumeHint,
        ParallelStarted,
        WorktreeLoop,
        WorktreeLeft,
        UnfinishedMergeUndone,
        WaitingForPlan,
        TakenOverElsewhere,
        LandingFinished,
        SubmodulesMissing,
        MergeWaits,
        WorkSetAside,
        Swept,
        TaskNotRecorded,
        WorktreeKept,
        ClaimRaceLost,
        ClaimLostNoPush,
        PushedWorkSetAside,
        ContextGiven,
        ContextNotGiven,
        BaseMoved,
        WorkerWaiting,
        MergedAlong,
    ]
);

variants!(
    ending_variant,
    ENDINGS,
    Ending,
    Ending<'_>,
    [
        Completed,
        MaxIterations,
        Aborted,
        AgentFailed,
        LegacyPlugin,
        Blocked,
        Other,
    ]
);

/// A fixed time, so nothing rendered depends on the clock.
pub(super) fn at(hour: u32, minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 14, hour, minute, 0).unwrap()
}

pub(super) fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

/// A terminal reporter in a capturing voice (`task`: a task loop's), and what it wrote.
fn human(task: Option<&str>) -> (Human, super::voice::Captured) {
    let (voice, captured) = Voice::capturing(false, task.map(str::to_owned), false);
    (Human::new(voice), captured)
}

/// `## name`, then what was written for it (or `(nothing)`).
fn section(text: &mut String, name: &str, captured: &super::voice::Captured) {
    let lines = std::mem::take(&mut *captured.lock().unwrap());
    text.push_str(&format!("## {name}\n"));
    if lines.is_empty() {
        text.push_str("(nothing)\n");
    }
    for line in lines {
        text.push_str(&line);
        text.push('\n');
    }
}

/// Every event, as a loop in this voice renders it.
fn events_as(task: Option<&str>) -> String {
    let (mut human, captured) = human(task);
    let mut text = String::new();
    for event in every_event() {
        human.event(&Stamped {
            time: at(12, 0),
            task,
            event: &event,
        });
        section(&mut text, event.name(), &captured);
    }
    text
}

/// Every notice, as a loop in this voice renders it.
fn notices_as(task: Option<&str>) -> String {
    let data = Data::new();
    let summary = summary();
    let iteration = iteration_summary(&data);
    let (mut human, captured) = human(task);
    let mut text = String::new();
    for notice in every_notice(&data, &summary, &iteration) {
        human.notice(&notice);
        let name = match &notice {
            Notice::Ended(ending) => format!("Ended({})", ending_variant(ending)),
            _ => notice_variant(&notice).to_owned(),
        };
        section(&mut text, &name, &captured);
    }
    text
}

#[test]
fn every_variant_has_an_example() {
    let events: BTreeSet<&str> = every_event().iter().map(event_variant).collect();
    let data = Data::new();
    let summary = summary();
    let iteration = iteration_summary(&data);
    let notices = every_notice(&data, &summary, &iteration);
    let shown: BTreeSet<&str> = notices.iter().map(notice_variant).collect();
    let endings: BTreeSet<&str> = notices
        .iter()
        .filter_map(|notice| match notice {
            Notice::Ended(ending) => Some(ending_variant(ending)),
            _ => None,
        })
        .collect();
    let all = |names: &[&'static str]| names.iter().copied().collect::<BTreeSet<&str>>();
    assert_eq!(events, all(EVENTS), "every LoopEvent needs an example");
    assert_eq!(shown, all(NOTICES), "every Notice needs an example");
    assert_eq!(endings, all(ENDINGS), "every Ending needs an example");
    // The public names agree: one per variant.
    let names: BTreeSet<&str> = every_event().iter().map(LoopEvent::name).collect();
    assert_eq!(names.len(), EVENTS.len());
}

#[test]
fn every_event_as_a_loop_shows_it() {
    insta::assert_snapshot!("events_plain", events_as(None));
}

#[test]
fn every_event_as_a_task_loop_shows_it() {
    insta::assert_snapshot!("events_task_loop", events_as(Some("api")));
}

#[test]
fn every_notice_as_a_loop_shows_it() {
    insta::assert_snapshot!("notices_plain", notices_as(None));
}

#[test]
fn every_notice_as_a_task_loop_shows_it() {
    insta::assert_snapshot!("notices_task_loop", notices_as(Some("api")));
}

#[test]
fn a_task_loop_leaves_out_the_runs_own_notices() {
    let text = notices_as(Some("api"));
    for run_only in [
        "Banner",
        "ConfigSummary",
        "IterationSummary",
        "ResumeHint",
        "Ended(MaxIterations)",
    ] {
        let at = text.find(&format!("## {run_only}\n")).unwrap();
        assert!(
            text[at..].lines().nth(1) == Some("(nothing)"),
            "{run_only} is the run's to say"
        );
    }
    assert!(
        text.lines()
            .filter(|line| !line.starts_with("## ") && *line != "(nothing)")
            .all(|line| line.starts_with("out: [api] ") || line.starts_with("err: [api] ")),
        "every line of a task loop carries its task:\n{text}"
    );
}

#[test]
fn with_json_nothing_human_reaches_stdout() {
    let (voice, captured) = Voice::capturing(true, None, true);
    let mut human = Human::new(voice);
    for event in every_event() {
        human.event(&Stamped {
            time: at(12, 0),
            task: None,
            event: &event,
        });
    }
    let lines = captured.lock().unwrap();
    assert!(!lines.is_empty(), "warnings still go to stderr");
    assert!(
        lines.iter().all(|line| line.starts_with("err: ")),
        "{lines:?}"
    );
}

#[test]
fn a_tools_event_that_says_the_same_again_is_shown_once_per_iteration() {
    let (mut human, captured) = human(None);
    let tools = LoopEvent::Tools {
        tools: std::collections::BTreeMap::from([("Bash".to_owned(), 2)]),
    };
    let started = LoopEvent::IterationStarted {
        iteration: 2,
        agent: "opencode".to_owned(),
        model: None,
    };
    for event in [&tools, &tools, &started, &tools] {
        human.event(&Stamped {
            time: at(12, 0),
            task: None,
            event,
        });
    }
    let lines = captured.lock().unwrap().clone();
    let shown = lines.iter().filter(|line| line.contains("| Tools")).count();
    assert_eq!(shown, 2, "once in each iteration: {lines:?}");
}
