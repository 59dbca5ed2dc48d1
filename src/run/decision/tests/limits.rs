//! The rules that stop or pace the loop: failing agents, stalls, interruption, limits, budgets,
//! ralph's own failures, retry waits, blocked tasks and parallel workers.

use super::*;

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
fn an_interrupt_stops_recorded_as_interrupted_without_a_commit() {
    let facts = Facts {
        interrupted: true,
        completion: true,
        ..facts(2)
    };
    let decision = decide(&rules(), &facts, Counters::default());
    assert_eq!(decision.next, Next::Stop(Stop::Interrupted));
    // Recorded (its number and log are used), not the agent's doing, nothing committed.
    assert!(decision.record && !decision.commit && !decision.agent_side);
    assert_eq!(decision.outcome, "interrupted");
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

// ── Task loops of a run ────────────────────────────────────────────────────────────────────────────

#[test]
fn a_task_loops_task_promise_completes_it() {
    let rules = Rules {
        tasks: true,
        task_loop: true,
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
fn a_task_loops_task_is_refused_when_its_verify_fails() {
    let rules = Rules {
        tasks: true,
        task_loop: true,
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

// ── Reservations: an iteration starts only when the budget can pay for it ───────────────────────

#[test]
fn an_iteration_starts_only_when_spent_reserved_and_asked_fit_the_budget() {
    let cost = Rules {
        max_cost: Some(0.10),
        ..rules()
    };
    let spent = |cost: f64, reserved: f64| Spent {
        cost: Some(cost),
        reserved: Amount {
            cost: reserved,
            tokens: 0,
        },
        ..Spent::default()
    };
    let ask = |cost: f64| Amount { cost, tokens: 0 };
    // 0.06 spent, 0.02 reserved elsewhere: one more of 0.02 fits exactly (sums of cents in
    // floating point are a hair off), a second would pass the budget.
    assert_eq!(admit(&cost, spent(0.06, 0.02), ask(0.02)), None);
    assert_eq!(
        admit(&cost, spent(0.06, 0.04), ask(0.02)),
        Some(Stop::MaxCost(0.10))
    );
    assert_eq!(
        admit(&cost, spent(0.02 * 5.0, 0.0), ask(0.0)),
        Some(Stop::MaxCost(0.10)),
        "nothing left"
    );
    // What is reserved elsewhere counts even before anything is spent.
    assert_eq!(
        admit(
            &cost,
            Spent {
                reserved: ask(0.10),
                ..Spent::default()
            },
            ask(0.0)
        ),
        Some(Stop::MaxCost(0.10))
    );
    // With nothing to expect yet, an iteration starts while anything is left.
    assert_eq!(admit(&cost, spent(0.09, 0.0), ask(0.0)), None);
    let tokens = Rules {
        max_tokens: Some(1000),
        ..rules()
    };
    let used = Spent {
        tokens: 600,
        reserved: Amount {
            cost: 0.0,
            tokens: 300,
        },
        ..Spent::default()
    };
    let asks = |tokens: u64| Amount { cost: 0.0, tokens };
    assert_eq!(admit(&tokens, used, asks(100)), None);
    assert_eq!(admit(&tokens, used, asks(101)), Some(Stop::MaxTokens(1000)));
}

#[test]
fn an_iteration_expects_what_its_agents_last_three_spent_or_the_reserve() {
    let amount = |cost: f64, tokens: u64| Amount { cost, tokens };
    assert_eq!(expected(&[], None), Amount::default());
    let recent = [
        amount(9.0, 900),
        amount(0.1, 10),
        amount(0.2, 20),
        amount(0.3, 30),
    ];
    let expect = expected(&recent, None);
    assert!((expect.cost - 0.2).abs() < 1e-12, "{expect:?}");
    assert_eq!(expect.tokens, 20);
    assert_eq!(expected(&recent, Some(0.5)), amount(0.5, 20));
    assert_eq!(expected(&[], Some(0.5)), amount(0.5, 0));
}
