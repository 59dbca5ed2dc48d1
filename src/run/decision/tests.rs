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
        ..Verification::default()
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
fn a_verify_command_that_cannot_run_stops_unverified_without_counting_an_attempt() {
    for (code, why) in [(127, "command not found"), (126, "not executable")] {
        for task in [false, true] {
            let broken = Verification {
                exit_code: Some(code),
                ..verification("./check.sh", false)
            };
            let facts = if task {
                Facts {
                    task_done: true,
                    task: Some("parser".to_owned()),
                    task_verification: Some(vec![broken.clone()]),
                    ..facts(1)
                }
            } else {
                Facts {
                    completion: true,
                    verification: Some(vec![broken.clone()]),
                    ..facts(1)
                }
            };
            let rules = Rules {
                tasks: true,
                ..rules()
            };
            let decision = decide(&rules, &facts, Counters::default());
            assert_eq!(decision.next, Next::Stop(Stop::Unverified(broken.clone())));
            assert_eq!(decision.refusal, None, "not a failed attempt");
            let stop = Stop::Unverified(broken);
            assert_eq!(stop.status(), crate::exit::ExitStatus::Error);
            assert!(stop.reason(1).contains(why), "{}", stop.reason(1));
        }
    }
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

mod limits;

#[test]
fn changed_protected_paths_end_the_loop_only_with_protect_mode_fail() {
    let facts = Facts {
        completion: true,
        protected_changes: vec!["tests/a.rs".to_owned()],
        ..facts(2)
    };
    // Put back before anything was judged: the claim is judged as any other.
    let decision = decide(&rules(), &facts, Counters::default());
    assert_eq!(decision.next, Next::Stop(Stop::Completed { iteration: 2 }));
    let fails = Rules {
        protect_fails: true,
        ..rules()
    };
    let decision = decide(&fails, &facts, Counters::default());
    let tampered = Stop::Tampered(vec!["tests/a.rs".to_owned()]);
    assert_eq!(decision.next, Next::Stop(tampered.clone()));
    assert!(decision.commit, "what else the agent did is committed");
    assert_eq!(tampered.status(), crate::exit::ExitStatus::Error);
    assert_eq!(tampered.kind(), StopKind::Tampered);
    assert!(
        tampered.reason(2).contains("tests/a.rs"),
        "{}",
        tampered.reason(2)
    );
    // An interrupt is still an interrupt.
    let interrupted = Facts {
        interrupted: true,
        ..facts.clone()
    };
    assert_eq!(
        decide(&fails, &interrupted, Counters::default()).next,
        Next::Stop(Stop::Interrupted)
    );
}

#[test]
fn holdout_checks_judge_a_claim_after_the_visible_ones_and_say_only_how_many_failed() {
    let claim = Facts {
        completion: true,
        verification: Some(vec![verification("cargo test", true)]),
        holdout: Some(vec![
            verification("sh ~/hidden/a.sh", false),
            verification("sh ~/hidden/b.sh", true),
        ]),
        ..facts(3)
    };
    let decision = decide(&rules(), &claim, Counters::default());
    assert_eq!(
        decision.next,
        Next::Continue {
            pause: rules().pause
        }
    );
    let Some(refusal) = &decision.refusal else {
        panic!("refused");
    };
    assert_eq!(refusal.reason(), "1 of 2 holdout checks failed");
    assert!(!decision.outcome.contains("hidden"), "{}", decision.outcome);
    let event = serde_json::to_value(refusal.event(3)).unwrap();
    assert_eq!(
        event,
        serde_json::json!({"event": "holdout_failed", "iteration": 3, "failed": 1, "total": 2})
    );
    // A visible check that fails is told first; all passing completes.
    let visible = Facts {
        verification: Some(vec![verification("cargo test", false)]),
        ..claim.clone()
    };
    let decision = decide(&rules(), &visible, Counters::default());
    assert!(matches!(decision.refusal, Some(Refusal::Verification(_))));
    let passing = Facts {
        holdout: Some(vec![verification("sh ~/hidden/a.sh", true)]),
        ..claim
    };
    assert_eq!(
        decide(&rules(), &passing, Counters::default()).next,
        Next::Stop(Stop::Completed { iteration: 3 })
    );
}
