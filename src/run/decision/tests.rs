//! Every rule of `specs/iteration.md`, without spawning anything.

use std::time::Duration;

use super::*;
use crate::model::{Failure, FailureKind, Verification};
use crate::storage::tasks::TaskList;

fn rules() -> Rules {
    Rules::new(&LoopOptions::default(), Duration::from_secs(2), true)
}

fn facts(iteration: u32) -> Facts {
    Facts {
        iteration,
        files_changed: true,
        ..Facts::default()
    }
}

fn failure(kind: FailureKind) -> Failure {
    Failure {
        kind,
        status: None,
        message: "boom".to_owned(),
        retry_at: None,
    }
}

fn verification(command: &str, passed: bool) -> Verification {
    Verification {
        command: command.to_owned(),
        passed,
        exit_code: Some(i32::from(!passed)),
        timed_out: false,
        output_tail: String::new(),
    }
}

fn next(rules: &Rules, facts: &Facts) -> Next {
    decide(rules, facts, Counters::default()).next
}

fn stop(rules: &Rules, facts: &Facts) -> Stop {
    match next(rules, facts) {
        Next::Stop(stop) => stop,
        other => panic!("expected a stop, got {other:?}"),
    }
}

// ── Completion ──────────────────────────────────────────────────────────────────────────────────

#[test]
fn no_promise_continues_after_the_pause() {
    let decision = decide(&rules(), &facts(1), Counters::default());
    assert_eq!(
        decision.next,
        Next::Continue {
            pause: Duration::from_secs(1)
        }
    );
    assert_eq!(decision.outcome, "continued");
    assert!(decision.record && decision.commit && decision.consume_context);
}

#[test]
fn the_promise_completes_the_loop() {
    let facts = Facts {
        completion: true,
        ..facts(1)
    };
    let decision = decide(&rules(), &facts, Counters::default());
    assert_eq!(decision.next, Next::Stop(Stop::Completed { iteration: 1 }));
    assert_eq!(decision.outcome, "completed");
    assert!(
        decision.commit,
        "the completing iteration's work is committed"
    );
    assert!(
        !decision.consume_context,
        "completion removes the context file"
    );
}

#[test]
fn completion_before_min_iterations_is_deferred() {
    let rules = Rules {
        min_iterations: 3,
        ..rules()
    };
    let facts = Facts {
        completion: true,
        ..facts(2)
    };
    let decision = decide(&rules, &facts, Counters::default());
    assert!(matches!(decision.next, Next::Continue { .. }));
    assert_eq!(
        decision.outcome,
        "completion deferred (minimum 3 iterations)"
    );
    assert_eq!(decision.refusal, None);
}

#[test]
fn completion_at_min_iterations_is_accepted() {
    let rules = Rules {
        min_iterations: 3,
        ..rules()
    };
    let facts = Facts {
        completion: true,
        ..facts(3)
    };
    assert_eq!(stop(&rules, &facts), Stop::Completed { iteration: 3 });
}

#[test]
fn open_tasks_refuse_completion() {
    let rules = Rules {
        tasks: true,
        ..rules()
    };
    let facts = Facts {
        completion: true,
        open_tasks: vec!["2. Write docs".to_owned()],
        ..facts(1)
    };
    let decision = decide(&rules, &facts, Counters::default());
    assert!(matches!(decision.next, Next::Continue { .. }));
    assert_eq!(
        decision.refusal,
        Some(Refusal::OpenTasks(vec!["2. Write docs".to_owned()]))
    );
    assert_eq!(decision.outcome, "completion refused: 1 task still open");
}

#[test]
fn an_unreadable_task_file_refuses_completion() {
    let rules = Rules {
        tasks: true,
        ..rules()
    };
    let facts = Facts {
        completion: true,
        tasks_unreadable: Some("Is a directory".to_owned()),
        ..facts(1)
    };
    let claim = claim(&rules, &facts);
    assert!(matches!(claim, Claim::OpenTasks(open) if open[0].contains("cannot be read")));
}

#[test]
fn open_tasks_do_not_matter_outside_tasks_mode() {
    let facts = Facts {
        completion: true,
        open_tasks: vec!["1. x".to_owned()],
        ..facts(1)
    };
    assert_eq!(stop(&rules(), &facts), Stop::Completed { iteration: 1 });
}

#[test]
fn all_tasks_done_allows_completion() {
    let rules = Rules {
        tasks: true,
        ..rules()
    };
    let facts = Facts {
        completion: true,
        ..facts(4)
    };
    assert_eq!(stop(&rules, &facts), Stop::Completed { iteration: 4 });
}

#[test]
fn failed_verification_refuses_completion() {
    let facts = Facts {
        completion: true,
        verification: Some(vec![verification("cargo test", false)]),
        ..facts(1)
    };
    let decision = decide(&rules(), &facts, Counters::default());
    assert!(matches!(decision.next, Next::Continue { .. }));
    assert_eq!(
        decision.outcome,
        "completion refused: verification failed: `cargo test` (exit code 1)"
    );
    assert!(matches!(decision.refusal, Some(Refusal::Verification(ref f)) if f.len() == 1));
}

#[test]
fn passing_verification_completes() {
    let facts = Facts {
        completion: true,
        verification: Some(vec![verification("true", true)]),
        ..facts(1)
    };
    assert_eq!(stop(&rules(), &facts), Stop::Completed { iteration: 1 });
}

#[test]
fn verification_is_asked_for_only_when_the_claim_is_otherwise_acceptable() {
    let min = Rules {
        min_iterations: 2,
        ..rules()
    };
    let claimed = Facts {
        completion: true,
        ..facts(1)
    };
    assert_eq!(claim(&min, &claimed), Claim::Deferred);
    assert_eq!(claim(&rules(), &claimed), Claim::Acceptable);
    assert_eq!(claim(&rules(), &facts(1)), Claim::None);
}

#[test]
fn completion_wins_over_the_abort_promise() {
    let facts = Facts {
        completion: true,
        abort: true,
        ..facts(1)
    };
    assert_eq!(stop(&rules(), &facts), Stop::Completed { iteration: 1 });
}

#[test]
fn completion_is_accepted_whatever_the_exit_code() {
    let facts = Facts {
        completion: true,
        exit_code: 1,
        ..facts(1)
    };
    assert_eq!(stop(&rules(), &facts), Stop::Completed { iteration: 1 });
}

// ── Tasks ───────────────────────────────────────────────────────────────────────────────────────

#[test]
fn a_task_promise_moves_on() {
    let facts = Facts {
        task_done: true,
        task: Some("Write the parser".to_owned()),
        ..facts(1)
    };
    let decision = decide(&rules(), &facts, Counters::default());
    assert!(matches!(decision.next, Next::Continue { .. }));
    assert_eq!(decision.outcome, "task done: Write the parser");
}

#[test]
fn a_failed_task_verification_refuses_the_task() {
    let facts = Facts {
        task_done: true,
        task: Some("parser".to_owned()),
        task_verification: Some(vec![verification("make parser", false)]),
        ..facts(1)
    };
    let decision = decide(&rules(), &facts, Counters::default());
    assert_eq!(decision.outcome, "task not accepted: `make parser` failed");
    assert!(matches!(
        decision.refusal,
        Some(Refusal::TaskVerification { ref task, .. }) if task == "parser"
    ));
}

#[test]
fn a_passing_task_verification_accepts_the_task() {
    let facts = Facts {
        task_done: true,
        task: Some("parser".to_owned()),
        task_verification: Some(vec![verification("true", true)]),
        ..facts(1)
    };
    let decision = decide(&rules(), &facts, Counters::default());
    assert_eq!(decision.refusal, None);
    assert_eq!(decision.outcome, "task done: parser");
}

#[test]
fn the_completion_promise_wins_over_the_task_promise() {
    let facts = Facts {
        completion: true,
        task_done: true,
        ..facts(1)
    };
    assert_eq!(stop(&rules(), &facts), Stop::Completed { iteration: 1 });
}

// ── Abort ───────────────────────────────────────────────────────────────────────────────────────

#[test]
fn the_abort_promise_stops_with_the_agents_message() {
    let facts = Facts {
        abort: true,
        final_text: "I cannot reach the database.".to_owned(),
        ..facts(2)
    };
    let decision = decide(&rules(), &facts, Counters::default());
    assert_eq!(
        decision.next,
        Next::Stop(Stop::Aborted {
            message: "I cannot reach the database.".to_owned()
        })
    );
    assert_eq!(decision.outcome, "the agent gave up (abort promise)");
    assert!(decision.commit);
    assert_eq!(
        Stop::Aborted {
            message: String::new()
        }
        .status(),
        crate::exit::ExitStatus::Stopped
    );
}

// ── Failures and retries ────────────────────────────────────────────────────────────────────────

#[test]
fn a_provider_failure_retries_the_same_iteration() {
    for kind in [
        FailureKind::RateLimit,
        FailureKind::Overloaded,
        FailureKind::ApiError,
        FailureKind::Connection,
    ] {
        let facts = Facts {
            failure: Some(failure(kind)),
            files_changed: false,
            ..facts(1)
        };
        let decision = decide(&rules(), &facts, Counters::default());
        assert_eq!(decision.next, Next::Retry(failure(kind)), "{kind:?}");
        assert_eq!(decision.counters.retries, 1);
        assert!(!decision.agent_side, "not the agent's struggle");
        assert!(!decision.consume_context, "the context stays for the retry");
        assert_eq!(decision.outcome, format!("failed: {}: boom", kind.label()));
    }
}

#[test]
fn retries_stop_after_max_retries() {
    let rules = Rules {
        max_retries: 2,
        ..rules()
    };
    let facts = Facts {
        failure: Some(failure(FailureKind::RateLimit)),
        ..facts(1)
    };
    let counters = Counters {
        retries: 2,
        ..Counters::default()
    };
    let decision = decide(&rules, &facts, counters);
    assert_eq!(
        decision.next,
        Next::Stop(Stop::AgentFailed {
            failure: failure(FailureKind::RateLimit),
            retries: 2
        })
    );
}

#[test]
fn zero_max_retries_stops_at_the_first_failure() {
    let rules = Rules {
        max_retries: 0,
        ..rules()
    };
    let facts = Facts {
        failure: Some(failure(FailureKind::Overloaded)),
        ..facts(1)
    };
    assert!(matches!(
        stop(&rules, &facts),
        Stop::AgentFailed { retries: 0, .. }
    ));
}

#[test]
fn fatal_failures_stop_at_once() {
    for kind in [FailureKind::Auth, FailureKind::ModelNotFound] {
        let facts = Facts {
            failure: Some(failure(kind)),
            ..facts(1)
        };
        let stop = stop(&rules(), &facts);
        assert_eq!(
            stop,
            Stop::AgentFailed {
                failure: failure(kind),
                retries: 0
            }
        );
        assert_eq!(stop.status(), crate::exit::ExitStatus::Error);
    }
}

#[test]
fn a_provider_failure_keeps_the_work_it_did() {
    let facts = Facts {
        failure: Some(failure(FailureKind::ApiError)),
        files_changed: true,
        ..facts(1)
    };
    assert!(decide(&rules(), &facts, Counters::default()).commit);
}

#[test]
fn a_timeout_is_the_agents_failure_and_the_loop_goes_on() {
    let facts = Facts {
        failure: Some(failure(FailureKind::Timeout)),
        exit_code: 143,
        files_changed: false,
        ..facts(1)
    };
    let decision = decide(&rules(), &facts, Counters::default());
    assert!(matches!(decision.next, Next::Continue { .. }));
    assert!(
        decision.agent_side,
        "a timeout counts for struggle detection"
    );
    assert_eq!(decision.counters.failed_runs, 0, "a classified failure");
}

#[test]
fn an_agent_error_goes_on() {
    let facts = Facts {
        failure: Some(failure(FailureKind::AgentError)),
        ..facts(1)
    };
    assert!(matches!(next(&rules(), &facts), Next::Continue { .. }));
}

#[test]
fn ordinary_work_resets_the_retry_count() {
    let counters = Counters {
        retries: 2,
        ..Counters::default()
    };
    let decision = decide(&rules(), &facts(1), counters);
    assert_eq!(decision.counters.retries, 0);
}

// ── An agent that keeps failing ─────────────────────────────────────────────────────────────────

#[test]
fn a_failing_run_that_changes_nothing_is_counted() {
    let facts = Facts {
        exit_code: 1,
        files_changed: false,
        ..facts(1)
    };
    let decision = decide(&rules(), &facts, Counters::default());
    assert_eq!(decision.counters.failed_runs, 1);
    assert_eq!(
        decision.next,
        Next::Continue {
            pause: Duration::from_secs(2)
        },
        "a failed iteration pauses at least the error pause"
    );
}

#[test]
fn five_failing_runs_in_a_row_stop_the_loop() {
    let facts = Facts {
        exit_code: 127,
        files_changed: false,
        ..facts(5)
    };
    let counters = Counters {
        failed_runs: 4,
        ..Counters::default()
    };
    let decision = decide(&rules(), &facts, counters);
    assert_eq!(
        decision.next,
        Next::Stop(Stop::AgentKeptFailing {
            exit_code: 127,
            runs: 5
        })
    );
    assert_eq!(
        Stop::AgentKeptFailing {
            exit_code: 127,
            runs: 5
        }
        .reason(5),
        "the agent exited with code 127 and changed nothing in 5 iterations in a row"
    );
}

#[test]
fn max_failed_runs_sets_the_limit() {
    let rules = Rules {
        max_failed_runs: 2,
        ..rules()
    };
    let facts = Facts {
        exit_code: 1,
        files_changed: false,
        ..facts(2)
    };
    let counters = Counters {
        failed_runs: 1,
        ..Counters::default()
    };
    assert!(matches!(
        decide(&rules, &facts, counters).next,
        Next::Stop(Stop::AgentKeptFailing { runs: 2, .. })
    ));
}

#[test]
fn a_failing_run_that_changes_files_resets_the_count() {
    let facts = Facts {
        exit_code: 1,
        files_changed: true,
        ..facts(1)
    };
    let counters = Counters {
        failed_runs: 4,
        ..Counters::default()
    };
    assert_eq!(decide(&rules(), &facts, counters).counters.failed_runs, 0);
}

#[test]
fn a_longer_pause_is_kept_after_a_failure() {
    let rules = Rules {
        pause: Duration::from_secs(5),
        ..rules()
    };
    let facts = Facts {
        exit_code: 1,
        ..facts(1)
    };
    assert_eq!(
        next(&rules, &facts),
        Next::Continue {
            pause: Duration::from_secs(5)
        }
    );
}

// ── Stalls ──────────────────────────────────────────────────────────────────────────────────────

#[test]
fn iterations_without_changes_are_counted() {
    let facts = Facts {
        files_changed: false,
        ..facts(1)
    };
    let decision = decide(&rules(), &facts, Counters::default());
    assert_eq!(decision.counters.stalled, 1);
    assert!(!decision.commit, "nothing to commit");
}

#[test]
fn max_stalled_stops_the_loop() {
    let rules = Rules {
        max_stalled: Some(2),
        ..rules()
    };
    let facts = Facts {
        files_changed: false,
        ..facts(3)
    };
    let counters = Counters {
        stalled: 1,
        ..Counters::default()
    };
    let stop = match decide(&rules, &facts, counters).next {
        Next::Stop(stop) => stop,
        other => panic!("{other:?}"),
    };
    assert_eq!(stop, Stop::Stalled(2));
    assert_eq!(stop.status(), crate::exit::ExitStatus::Stopped);
    assert_eq!(stop.reason(3), "no file changes in 2 iterations in a row");
}

#[test]
fn a_change_resets_the_stall_count() {
    let counters = Counters {
        stalled: 3,
        ..Counters::default()
    };
    assert_eq!(decide(&rules(), &facts(1), counters).counters.stalled, 0);
}

#[test]
fn stalls_are_not_counted_outside_git() {
    let rules = Rules {
        files_tracked: false,
        max_stalled: Some(1),
        ..rules()
    };
    let facts = Facts {
        files_changed: false,
        ..facts(1)
    };
    let decision = decide(&rules, &facts, Counters::default());
    assert_eq!(decision.counters.stalled, 0);
    assert!(matches!(decision.next, Next::Continue { .. }));
}

// ── Interruption and the legacy plugin ──────────────────────────────────────────────────────────

#[test]
fn an_interrupt_stops_without_recording() {
    let facts = Facts {
        interrupted: true,
        completion: true,
        ..facts(2)
    };
    let decision = decide(&rules(), &facts, Counters::default());
    assert_eq!(decision.next, Next::Stop(Stop::Interrupted));
    assert!(!decision.record && !decision.commit);
    assert_eq!(Stop::Interrupted.reason(2), "interrupted at iteration 2");
    assert_eq!(
        Stop::Interrupted.status(),
        crate::exit::ExitStatus::Interrupted
    );
}

#[test]
fn the_legacy_plugin_stops_after_recording() {
    let facts = Facts {
        legacy_plugin: true,
        completion: true,
        ..facts(1)
    };
    let decision = decide(&rules(), &facts, Counters::default());
    assert_eq!(decision.next, Next::Stop(Stop::LegacyPlugin));
    assert!(decision.record && !decision.commit);
}

// ── Before an iteration: limits and budgets ─────────────────────────────────────────────────────

#[test]
fn max_iterations_stops_before_the_next_iteration() {
    let rules = Rules {
        max_iterations: 2,
        ..rules()
    };
    assert_eq!(before_iteration(&rules, 2, Spent::default(), false), None);
    let stop = before_iteration(&rules, 3, Spent::default(), false).unwrap();
    assert_eq!(stop, Stop::MaxIterations(2));
    assert_eq!(stop.status(), crate::exit::ExitStatus::LimitReached);
    assert_eq!(stop.reason(3), "max iterations (2) reached");
}

#[test]
fn zero_max_iterations_means_no_limit() {
    assert_eq!(
        before_iteration(&rules(), 1_000_000, Spent::default(), false),
        None
    );
}

#[test]
fn a_stop_request_comes_first() {
    let rules = Rules {
        max_iterations: 1,
        ..rules()
    };
    assert_eq!(
        before_iteration(&rules, 5, Spent::default(), true),
        Some(Stop::Interrupted)
    );
}

#[test]
fn max_runtime_stops_between_iterations() {
    let rules = Rules {
        max_runtime: Some(Duration::from_secs(60)),
        ..rules()
    };
    let spent = Spent {
        runtime: Duration::from_secs(61),
        ..Spent::default()
    };
    let stop = before_iteration(&rules, 2, spent, false).unwrap();
    assert_eq!(stop, Stop::MaxRuntime(Duration::from_secs(60)));
    assert_eq!(stop.reason(2), "max runtime (1m 0s) reached");
}

#[test]
fn max_cost_stops_once_reached() {
    let rules = Rules {
        max_cost: Some(1.0),
        ..rules()
    };
    let under = Spent {
        cost: Some(0.99),
        ..Spent::default()
    };
    assert_eq!(before_iteration(&rules, 2, under, false), None);
    let reached = Spent {
        cost: Some(1.0),
        ..Spent::default()
    };
    assert_eq!(
        before_iteration(&rules, 2, reached, false),
        Some(Stop::MaxCost(1.0))
    );
    assert_eq!(
        before_iteration(&rules, 2, Spent::default(), false),
        None,
        "an agent that reports no cost never trips it"
    );
}

#[test]
fn max_tokens_stops_once_reached() {
    let rules = Rules {
        max_tokens: Some(1000),
        ..rules()
    };
    let spent = Spent {
        tokens: 1000,
        ..Spent::default()
    };
    let stop = before_iteration(&rules, 2, spent, false).unwrap();
    assert_eq!(stop, Stop::MaxTokens(1000));
    assert_eq!(stop.status(), crate::exit::ExitStatus::LimitReached);
}

// ── ralph's own failures ────────────────────────────────────────────────────────────────────────

#[test]
fn three_own_failures_in_a_row_stop_the_loop() {
    let mut counters = Counters::default();
    assert_eq!(after_own_failure(&mut counters, "disk full"), None);
    assert_eq!(after_own_failure(&mut counters, "disk full"), None);
    let stop = after_own_failure(&mut counters, "disk full").unwrap();
    assert_eq!(stop, Stop::RalphFailed("disk full".to_owned()));
    assert_eq!(
        stop.reason(3),
        "ralph failed 3 iterations in a row (disk full)"
    );
}

// ── Waiting before a retry ──────────────────────────────────────────────────────────────────────

#[test]
fn a_reset_time_is_waited_for_with_a_second_of_slack() {
    let wait = retry_wait(
        &rules(),
        Some(Duration::from_secs(3)),
        1,
        (Duration::from_secs(15), Duration::from_secs(600), 1.0),
        Duration::ZERO,
    );
    assert_eq!(wait, Ok(Duration::from_secs(4)));
}

#[test]
fn backoff_doubles_and_is_capped() {
    let base = Duration::from_secs(10);
    let cap = Duration::from_secs(60);
    assert_eq!(backoff(base, 1, cap, 1.0), Duration::from_secs(10));
    assert_eq!(backoff(base, 2, cap, 1.0), Duration::from_secs(20));
    assert_eq!(backoff(base, 3, cap, 1.2), Duration::from_secs(48));
    assert_eq!(backoff(base, 10, cap, 1.2), cap);
    assert_eq!(backoff(base, u32::MAX, cap, 1.0), cap, "no overflow");
}

#[test]
fn a_wait_past_max_runtime_stops_the_loop() {
    let rules = Rules {
        max_runtime: Some(Duration::from_secs(30)),
        ..rules()
    };
    let wait = retry_wait(
        &rules,
        None,
        1,
        (Duration::from_secs(15), Duration::from_secs(600), 1.0),
        Duration::from_secs(20),
    );
    assert_eq!(wait, Err(Stop::MaxRuntime(Duration::from_secs(30))));
}

// ── Reasons ─────────────────────────────────────────────────────────────────────────────────────

#[test]
fn stop_reasons_read_well() {
    assert_eq!(
        Stop::Completed { iteration: 1 }.reason(1),
        "completed in 1 iteration"
    );
    assert_eq!(
        Stop::AgentFailed {
            failure: failure(FailureKind::RateLimit),
            retries: 3
        }
        .reason(1),
        "the agent kept failing (rate limit) after 3 retries"
    );
    assert_eq!(
        Stop::AgentFailed {
            failure: failure(FailureKind::Auth),
            retries: 0
        }
        .reason(1),
        "the agent failed (auth)"
    );
    assert_eq!(
        Stop::Blocked(vec!["a".to_owned(), "b".to_owned()]).reason(1),
        "no task can be started (2 tasks failed or blocked)"
    );
    assert_eq!(
        Stop::Aborted {
            message: String::new()
        }
        .reason(4),
        "the agent gave up at iteration 4"
    );
}

// ── Tasks that cannot start ─────────────────────────────────────────────────────────────────────

#[test]
fn a_list_whose_open_tasks_all_failed_is_blocked() {
    let list = TaskList::parse("- [x] a\n- [!] b\n");
    let stop = tasks_blocked(&list).unwrap();
    assert_eq!(stop, Stop::Blocked(vec!["2. ❌ b — failed".to_owned()]));
    assert_eq!(stop.status(), crate::exit::ExitStatus::Stopped);
}

#[test]
fn a_dependency_cycle_is_blocked() {
    let list = TaskList::parse(
        "- [ ] a\n  - id: a\n  - blocked_by: b\n- [ ] b\n  - id: b\n  - blocked_by: a\n",
    );
    assert!(matches!(
        tasks_blocked(&list),
        Some(Stop::Blocked(tasks)) if tasks[0].contains("waits for b")
    ));
}

#[test]
fn a_startable_task_or_an_empty_list_is_not_blocked() {
    assert_eq!(tasks_blocked(&TaskList::parse("- [!] a\n- [ ] b\n")), None);
    assert_eq!(tasks_blocked(&TaskList::parse("no tasks\n")), None);
    assert_eq!(tasks_blocked(&TaskList::parse("- [x] done\n")), None);
}

// ── Parallel workers ────────────────────────────────────────────────────────────────────────────

#[test]
fn a_workers_task_promise_completes_its_loop() {
    let rules = Rules {
        tasks: true,
        worker: true,
        ..rules()
    };
    let facts = Facts {
        task_done: true,
        open_tasks: vec!["2. someone else's".to_owned()],
        ..facts(1)
    };
    assert_eq!(claim(&rules, &facts), Claim::Acceptable);
    assert_eq!(stop(&rules, &facts), Stop::Completed { iteration: 1 });
}

#[test]
fn a_workers_task_is_refused_when_its_verify_fails() {
    let rules = Rules {
        tasks: true,
        worker: true,
        ..rules()
    };
    let facts = Facts {
        completion: true,
        verification: Some(vec![verification("make check", false)]),
        ..facts(2)
    };
    let decision = decide(&rules, &facts, Counters::default());
    assert!(matches!(decision.next, Next::Continue { .. }));
    assert!(matches!(decision.refusal, Some(Refusal::Verification(_))));
}
