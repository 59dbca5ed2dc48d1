//! Examples of the events of runs of several loops: a plan, a `--parallel` coordinator, a
//! `--worker`.

use crate::event::{LoopEvent, NotStarted, ParallelEnd};

use super::super::strings;

/// A spec planned into a task graph.
pub(super) fn plan_created() -> LoopEvent {
    LoopEvent::PlanCreated {
        tasks: vec![
            crate::event::PlannedTask {
                id: "schema".to_owned(),
                content: "Create the database schema".to_owned(),
                blocked_by: vec![],
            },
            crate::event::PlannedTask {
                id: "api".to_owned(),
                content: "Build the REST endpoints".to_owned(),
                blocked_by: strings(&["schema"]),
            },
        ],
    }
}

/// A `--parallel` coordinator's events (its merges' troubles among them).
pub(super) fn parallel_events() -> Vec<LoopEvent> {
    let mut events = vec![
        LoopEvent::TaskStarted {
            task: "api".to_owned(),
            description: "Add the /users endpoint".to_owned(),
            branch: "ralph/api".to_owned(),
        },
        LoopEvent::TaskMerged {
            task: "api".to_owned(),
            into: "main".to_owned(),
            commit: "1a2b3c4".to_owned(),
        },
        LoopEvent::WorktreeMerged {
            name: "feat".to_owned(),
            into: "main".to_owned(),
            commit: "5d6e7f8".to_owned(),
        },
        LoopEvent::NotesCarried {
            task: "api".to_owned(),
            into: "main".to_owned(),
            branch: "ralph/api".to_owned(),
            notes: true,
            tasks: strings(&["Document the /users endpoint", "Add rate limiting"]),
            problems: strings(&[
                "the progress notes: .ralph/ralph-progress.md is not valid UTF-8",
                "1 added task: the task file could not be read",
            ]),
        },
        LoopEvent::NotesCarried {
            task: "db".to_owned(),
            into: "main".to_owned(),
            branch: "ralph/db".to_owned(),
            notes: true,
            tasks: strings(&["Add an index on users.email"]),
            problems: vec![],
        },
        LoopEvent::TaskFailed {
            task: "api".to_owned(),
            reason: "max iterations (5) reached".to_owned(),
        },
        LoopEvent::ParallelEnded(ParallelEnd {
            reason: "not every task is done".to_owned(),
            exit_code: 1,
            tasks_done: 3,
            tasks_failed: 1,
            tasks_not_started: 2,
            tasks_interrupted: 1,
            iterations: 17,
            total_duration_ms: 3_723_000,
            tokens: 1_250_000,
            cost_usd: Some(4.5),
            not_started: vec![
                NotStarted {
                    task: "ui".to_owned(),
                    why: "waits for api".to_owned(),
                },
                NotStarted {
                    task: "docs".to_owned(),
                    why: "the run stopped first (max cost ($5.00) reached)".to_owned(),
                },
            ],
            not_carried: strings(&["db"]),
        }),
        LoopEvent::ParallelEnded(ParallelEnd {
            reason: "every task is done and merged".to_owned(),
            tasks_done: 1,
            iterations: 1,
            total_duration_ms: 61_000,
            ..ParallelEnd::default()
        }),
    ];
    events.splice(5..5, merge_troubles());
    events
}

/// A merge that conflicted, and two the gate refused (sent back, then given up).
fn merge_troubles() -> Vec<LoopEvent> {
    vec![
        LoopEvent::MergeConflicted {
            task: "api".to_owned(),
            files: strings(&["src/routes.rs", "Cargo.toml"]),
        },
        LoopEvent::MergeRefused {
            task: "api".to_owned(),
            base: "main".to_owned(),
            command: "cargo test".to_owned(),
            exit_code: Some(101),
            output_tail: "test routes::list ... FAILED".to_owned(),
            tries: 1,
            most: 2,
            sent_back: true,
        },
        LoopEvent::MergeRefused {
            task: "api".to_owned(),
            base: "main".to_owned(),
            command: "cargo test".to_owned(),
            exit_code: None,
            output_tail: String::new(),
            tries: 3,
            most: 2,
            sent_back: false,
        },
    ]
}

/// A `--worker`'s own events.
pub(super) fn worker_events() -> Vec<LoopEvent> {
    vec![
        LoopEvent::WorkerStarted {
            worker: "laptop-1".to_owned(),
            remote: "origin".to_owned(),
            base: "main".to_owned(),
            job: Some("Slurm job 41_2 (job id 42) on node n7".to_owned()),
        },
        LoopEvent::TaskClaimed {
            task: "api".to_owned(),
            description: "Add the /users endpoint".to_owned(),
            taken_over_from: Some("ci-runner-7".to_owned()),
            earlier_attempt: false,
        },
        LoopEvent::TaskClaimed {
            task: "db".to_owned(),
            description: "Add an index on users.email".to_owned(),
            taken_over_from: None,
            earlier_attempt: false,
        },
        LoopEvent::TaskClaimed {
            task: "ui".to_owned(),
            description: "Show the users page".to_owned(),
            taken_over_from: Some("n7-311".to_owned()),
            earlier_attempt: true,
        },
        LoopEvent::ClaimLost {
            task: "api".to_owned(),
        },
        LoopEvent::WorkerEnded {
            reason: "every task on origin/main is done".to_owned(),
            exit_code: 0,
        },
    ]
}
