//! Timeouts, budgets, stop reasons, retries after provider failures, resume after a crash.

use std::fs;
use std::time::{Duration, Instant};

use crate::support::{TestEnv, is_alive};

const HANG_WITH_GRANDCHILD: &str = "sleep 600 & echo $! > \"$FAKE_AGENT_DIR/grandchild.pid\"; echo $$ > \"$FAKE_AGENT_DIR/agent.pid\"; echo working; wait";

/// The agent and the grandchild of [`HANG_WITH_GRANDCHILD`] (or a script like it) are gone.
fn assert_agent_and_grandchild_gone(env: &TestEnv) {
    let grandchild: i32 = env.agent_file("grandchild.pid").trim().parse().unwrap();
    let agent: i32 = env.agent_file("agent.pid").trim().parse().unwrap();
    assert!(!is_alive(grandchild) && !is_alive(agent));
}

fn record(env: &TestEnv, index: usize) -> serde_json::Value {
    env.history()["iterations"][index].clone()
}

#[test]
fn iteration_timeout_ends_the_agent_and_its_grandchild_and_the_loop_goes_on() {
    let env = TestEnv::new();
    env.agent_script(Some(1), HANG_WITH_GRANDCHILD);
    let started = Instant::now();
    let run = env.run_loop_with(
        &["task", "--iteration-timeout", "1s", "--max-iterations", "3"],
        |c| {
            c.env("FAKE_AGENT_COMPLETE_AT", "2");
        },
    );
    run.assert_code(0);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(env.agent_calls(), 2, "the next iteration ran");
    assert_agent_and_grandchild_gone(&env);
    assert_eq!(record(&env, 0)["failure"]["kind"], "timeout");
    assert!(
        run.stderr()
            .contains("Iteration 1 timed out (ran longer than 1s)"),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_stopped_agent_hears_sigterm_first_and_can_end_cleanly() {
    let env = TestEnv::new();
    env.agent_script(
        Some(1),
        "trap 'echo cleaned up > \"$FAKE_AGENT_DIR/term\"; exit 0' TERM; echo working; sleep 600 & wait",
    );
    // A SIGKILL (after this grace) would leave no file behind.
    let run = env.run_loop(&[
        "task",
        "--iteration-timeout",
        "2s",
        "--kill-grace",
        "30s",
        "--max-iterations",
        "1",
    ]);
    run.assert_code(2);
    assert_eq!(env.agent_file("term").trim(), "cleaned up");
    let record = record(&env, 0);
    assert_eq!(record["stop_signal"], "SIGTERM");
    // The iteration ended at the SIGTERM, not at the end of the 30 s grace.
    let took = record["duration_ms"].as_u64().unwrap();
    assert!((2_000..3_000).contains(&took), "{record}");
}

#[test]
fn an_agent_that_ignores_sigterm_is_killed_with_its_children_after_the_kill_grace() {
    let env = TestEnv::new();
    env.agent_script(
        Some(1),
        "trap '' TERM; sleep 600 & echo $! > \"$FAKE_AGENT_DIR/child\"; wait; wait",
    );
    let run = env.run_loop(&[
        "task",
        "--iteration-timeout",
        "500ms",
        "--kill-grace",
        "300ms",
        "--max-iterations",
        "1",
    ]);
    run.assert_code(2);
    let record = record(&env, 0);
    assert_eq!(record["stop_signal"], "SIGKILL", "{record}");
    assert_eq!(record["failure"]["kind"], "timeout");
    let child: i32 = env.agent_file("child").trim().parse().unwrap();
    assert!(!is_alive(child), "the agent's child outlived it");
}

#[test]
fn idle_timeout_ends_a_silent_agent() {
    let env = TestEnv::new();
    env.agent_script(Some(1), "echo once; sleep 600");
    let run = env.run_loop_with(
        &["task", "--idle-timeout", "1s", "--max-iterations", "3"],
        |c| {
            c.env("FAKE_AGENT_COMPLETE_AT", "2");
        },
    );
    run.assert_code(0);
    assert_eq!(record(&env, 0)["failure"]["kind"], "timeout");
    assert!(
        run.stderr().contains("no output for 1s"),
        "{}",
        run.stderr()
    );
}

#[test]
fn an_agent_that_said_its_promise_and_runs_on_is_ended_after_the_completion_grace() {
    let env = TestEnv::new();
    env.agent_script(
        Some(1),
        &HANG_WITH_GRANDCHILD.replace("echo working", "echo '<promise>COMPLETE</promise>'"),
    );
    let started = Instant::now();
    let run = env.run_loop(&["task", "--completion-grace", "1s", "--max-iterations", "3"]);
    run.assert_code(0);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(env.agent_calls(), 1, "the iteration counted as completed");
    assert_agent_and_grandchild_gone(&env);
    assert_eq!(record(&env, 0)["completion_detected"], true);
    assert_eq!(record(&env, 0)["exit_code"], 0);
    assert!(record(&env, 0)["failure"].is_null());
    assert!(
        run.stderr()
            .contains("said its promise but was still running 1s later"),
        "{}",
        run.stderr()
    );
}

fn claude_result(status: u16, text: &str) -> String {
    format!(
        "cat <<EVENTS\n{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":true,\"api_error_status\":{status},\"result\":\"{text}\",\"num_turns\":1,\"total_cost_usd\":0,\"usage\":{{\"input_tokens\":0,\"output_tokens\":0}}}}\nEVENTS\nexit 1\n"
    )
}

#[test]
fn a_usage_limit_waits_for_its_reset_time_and_retries_the_same_iteration() {
    let env = TestEnv::new();
    let resets_at = chrono::Utc::now().timestamp() + 1;
    let reset = format!("Claude AI usage limit reached|{resets_at}");
    env.agent_script(Some(1), &claude_result(429, &reset));
    let run = env.run_loop_with(
        &["task", "--agent", "claude-code", "--max-iterations", "1"],
        |c| {
            c.env("FAKE_AGENT_COMPLETE_AT", "2");
        },
    );
    run.assert_code(0);
    assert_eq!(env.agent_calls(), 2);
    let retried_at = record(&env, 1)["started_at"].as_str().unwrap().to_owned();
    let retried_at = chrono::DateTime::parse_from_rfc3339(&retried_at).unwrap();
    assert!(
        retried_at.timestamp() >= resets_at,
        "retried at {retried_at}, before the limit reset at {resets_at}"
    );
    assert_eq!(record(&env, 0)["iteration"], 1);
    assert_eq!(record(&env, 0)["failure"]["kind"], "rate limit");
    assert_eq!(
        record(&env, 1)["iteration"],
        1,
        "the retry is the same iteration"
    );
    assert!(
        run.stdout()
            .contains("rate limit (HTTP 429): retrying iteration 1 in"),
        "{}",
        run.stdout()
    );
    assert!(run.stdout().contains("until the limit resets"));
}

#[test]
fn server_errors_back_off_and_give_up_after_max_retries() {
    let env = TestEnv::new();
    env.agent_script(None, &claude_result(500, "API Error: 500 boom"));
    let run = env.run_loop_with(
        &["task", "--agent", "claude-code", "--max-retries", "2"],
        |c| {
            c.env("RALPH_RETRY_BASE_MS", "50");
        },
    );
    run.assert_code(1);
    assert_eq!(env.agent_calls(), 3, "one try and two retries");
    assert!(
        run.stdout()
            .contains("Loop ended: the agent kept failing (api error) after 2 retries"),
        "{}",
        run.stdout()
    );
    let state: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(env.ralph_file("ralph-loop.state.json")).unwrap())
            .unwrap();
    assert_eq!(state["iteration"], 1, "resumable at the failed iteration");
}

#[test]
fn an_auth_failure_stops_at_once() {
    let env = TestEnv::new();
    env.agent_script(None, &claude_result(401, "Invalid API key"));
    let run = env.run_loop(&["task", "--agent", "claude-code"]);
    run.assert_code(1);
    assert_eq!(env.agent_calls(), 1);
    assert!(
        run.stderr().contains("auth (HTTP 401): Invalid API key"),
        "{}",
        run.stderr()
    );
    assert!(run.stderr().contains("credentials"), "{}", run.stderr());
    assert_eq!(
        run.stderr().matches("auth (HTTP 401)").count(),
        1,
        "shown once: {}",
        run.stderr()
    );
}

#[test]
fn prose_about_rate_limits_does_not_trigger_a_wait() {
    let env = TestEnv::new();
    env.agent_script(
        None,
        "echo 'Implemented the rate limit middleware: returns HTTP 429 Too Many Requests, usage limit reached|1767225600'",
    );
    let started = Instant::now();
    let run = env.run_loop(&["task", "--max-iterations", "2"]);
    run.assert_code(2);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!run.stdout().contains("retrying"));
    assert!(record(&env, 0).get("failure").is_none());
}

#[test]
fn budgets_stop_with_exit_2_and_say_why() {
    let env = TestEnv::new();
    let events = "cat <<'EVENTS'\n{\"type\":\"step_finish\",\"part\":{\"tokens\":{\"input\":600,\"output\":100,\"cache\":{\"read\":0,\"write\":0}},\"cost\":0.6}}\nEVENTS\n";
    env.agent_script(None, events);
    let run = env.run_loop(&["task", "--max-cost", "1"]);
    run.assert_code(2);
    assert_eq!(env.agent_calls(), 2);
    assert!(
        run.stdout()
            .contains("Loop ended: max cost ($1.00) reached"),
        "{}",
        run.stdout()
    );
    assert!(
        run.stdout().contains("1.4k tokens · $1.20"),
        "{}",
        run.stdout()
    );

    let run = env.run_loop(&["task", "--max-tokens", "1500"]);
    run.assert_code(2);
    assert!(
        run.stdout()
            .contains("Loop ended: max tokens (1.5k) reached"),
        "{}",
        run.stdout()
    );

    env.agent_script(None, "sleep 0.3");
    let run = env.run_loop(&["task", "--max-runtime", "500ms"]);
    run.assert_code(2);
    assert!(
        run.stdout()
            .contains("Loop ended: max runtime (0s) reached"),
        "{}",
        run.stdout()
    );
}

#[test]
fn max_cost_with_codex_says_it_cannot_work() {
    let env = TestEnv::new();
    let run = env.run_loop(&[
        "task",
        "--agent",
        "codex",
        "--max-cost",
        "5",
        "--max-iterations",
        "1",
    ]);
    assert!(
        run.stderr()
            .contains("--max-cost has no effect: Codex does not report"),
        "{}",
        run.stderr()
    );
}

#[test]
fn the_abort_promise_stops_with_exit_3_and_shows_the_message() {
    let env = TestEnv::new();
    env.agent_script(Some(2), "echo 'The database password is missing; a person must add it.'; echo '<promise>BLOCKED</promise>'");
    let run = env.run_loop(&["task", "--abort-promise", "BLOCKED"]);
    run.assert_code(3);
    assert_eq!(env.agent_calls(), 2);
    assert!(
        run.stdout().contains("🛑 The agent says it cannot go on:"),
        "{}",
        run.stdout()
    );
    assert!(run.stdout().contains("The database password is missing"));
    assert!(
        run.stdout()
            .contains("Loop ended: the agent gave up at iteration 2")
    );
    assert!(
        env.agent_prompt(1).contains("<promise>BLOCKED</promise>"),
        "the prompt explains it"
    );
    // The resume hint names the iteration --resume goes on with, and it does.
    assert!(
        run.stdout()
            .contains("go on with `ralph --resume` (continues at iteration 3)"),
        "{}",
        run.stdout()
    );
    let resumed = env.run(&["--resume", "--pause", "0", "--max-iterations", "3"]);
    assert!(
        resumed.stdout().contains("Resuming at iteration 3"),
        "{}",
        resumed.stdout()
    );
}

#[test]
fn max_stalled_stops_after_iterations_without_changes() {
    let env = TestEnv::new();
    let edit = env.work().join("notes.txt");
    env.agent_script(Some(1), &format!("echo x >> '{}'", edit.display()));
    let run = env.run_loop(&["task", "--max-stalled", "2"]);
    run.assert_code(3);
    assert_eq!(env.agent_calls(), 3);
    assert!(
        run.stdout()
            .contains("Loop ended: no file changes in 2 iterations in a row"),
        "{}",
        run.stdout()
    );
}

#[test]
fn kill_9_then_resume_continues_at_the_right_iteration() {
    let env = TestEnv::new();
    env.agent_script(Some(3), "echo $$ > \"$FAKE_AGENT_DIR/agent.pid\"; echo ready > \"$FAKE_AGENT_DIR/ready\"; sleep 600");
    let mut child = env.spawn_quiet(&["--pause", "0", "Build it", "--max-iterations", "5"]);
    env.wait_for_agent();
    child.kill().unwrap();
    child.wait().unwrap();
    // The agent of iteration 3 does not outlive the killed ralph (its guard ends it).
    let agent: i32 = env.agent_file("agent.pid").trim().parse().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while is_alive(agent) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!is_alive(agent), "the agent outlived ralph");

    let plain = env.run_loop(&["something else"]);
    plain.assert_code(1);
    assert!(
        plain
            .stderr()
            .contains("stopped unexpectedly at iteration 3"),
        "{}",
        plain.stderr()
    );

    let cut = fs::read_to_string(env.ralph_file("logs/0003.jsonl")).unwrap();
    let resumed = env.run(&["--resume", "--pause", "0"]);
    resumed.assert_code(2);
    // The killed iteration 3 is recorded as interrupted; its number and log are not used again.
    assert!(
        resumed.stdout().contains("Resuming at iteration 4"),
        "{}",
        resumed.stdout()
    );
    let history = env.history();
    let iterations: Vec<(u64, bool)> = history["iterations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["iteration"].as_u64().unwrap(), r["interrupted"] == true))
        .collect();
    assert_eq!(
        iterations,
        [(1, false), (2, false), (3, true), (4, false), (5, false)]
    );
    assert_eq!(history["iterations"][2]["log"], "logs/0003.jsonl");
    assert_eq!(
        fs::read_to_string(env.ralph_file("logs/0003.jsonl")).unwrap(),
        cut,
        "the killed iteration's log is kept as it was"
    );
    assert!(env.agent_prompt(4).contains("Build it"));
}

#[test]
fn resume_flags_override_the_saved_options_and_say_so() {
    let env = TestEnv::new();
    env.run_loop(&["task", "--max-iterations", "1"])
        .assert_code(2);
    let run = env.run(&["--resume", "--pause", "0", "--max-iterations", "2"]);
    run.assert_code(2);
    assert!(
        run.stdout()
            .contains("Overriding the saved option --max-iterations: 1 → 2"),
        "{}",
        run.stdout()
    );
    assert_eq!(env.agent_calls(), 2);
}

#[test]
fn a_2_mb_prompt_reaches_every_agent_intact() {
    let env = TestEnv::new();
    let body: String = (0..40_000)
        .map(|i| format!("line {i}: lorem ipsum dolor sit amet.\n"))
        .collect();
    assert!(body.len() > 1_500_000);
    fs::write(env.work().join("big.md"), &body).unwrap();
    for (n, agent) in ["opencode", "claude-code", "codex"].into_iter().enumerate() {
        let n = u32::try_from(n).unwrap() + 1;
        env.run_loop(&["--max-iterations", "1", "--agent", agent, "-f", "big.md"])
            .assert_code(2);
        assert_eq!(
            env.agent_file(&format!("prompt-source.{n}")).trim(),
            "stdin",
            "{agent}"
        );
        assert!(env.agent_prompt(n).contains(body.trim_end()), "{agent}");
    }
}

#[test]
fn provider_retries_do_not_count_as_task_attempts() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [ ] first\n  - max_attempts: 2\n",
    )
    .unwrap();
    env.agent_script(Some(1), &claude_result(500, "API Error: 500 boom"));
    env.agent_script(Some(2), &claude_result(500, "API Error: 500 boom"));
    let run = env.run_loop_with(
        &[
            "goal",
            "--tasks",
            "--agent",
            "claude-code",
            "--max-iterations",
            "1",
        ],
        |c| {
            c.env("RALPH_RETRY_BASE_MS", "10");
        },
    );
    run.assert_code(2);
    assert_eq!(env.agent_calls(), 3, "two retries, then the real attempt");
    let tasks = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert!(
        tasks.starts_with("- [ ] first"),
        "not failed by retries: {tasks}"
    );
    assert!(
        run.stdout()
            .contains("Loop ended: max iterations (1) reached · total time"),
        "{}",
        run.stdout()
    );
}

#[test]
fn an_agent_that_keeps_failing_stops_the_loop() {
    let env = TestEnv::new();
    env.agent_script(None, "echo 'node: not found' >&2; exit 127");
    let run = env.run_loop(&["task"]);
    run.assert_code(1);
    assert_eq!(env.agent_calls(), 5);
    assert!(
        run.stdout().contains("Loop ended: the agent exited with code 127 and changed nothing in 5 iterations in a row"),
        "{}",
        run.stdout()
    );
}

#[test]
fn absurd_numbers_from_an_agent_do_not_crash_or_stall_the_loop() {
    let env = TestEnv::new();
    env.agent_script(
        Some(1),
        "cat <<'EVENTS'\n{\"type\":\"result\",\"is_error\":true,\"result\":\"Rate limit reached. Try again in 9999999999999 seconds\",\"usage\":{\"input_tokens\":18446744073709551615}}\nEVENTS\nexit 1\n",
    );
    env.agent_script(
        Some(2),
        "cat <<'EVENTS'\n{\"type\":\"result\",\"is_error\":false,\"result\":\"<promise>COMPLETE</promise>\",\"usage\":{\"input_tokens\":18446744073709551615,\"output_tokens\":5}}\nEVENTS\n",
    );
    let started = Instant::now();
    let run = env.run_loop_with(&["task", "--agent", "claude-code"], |c| {
        c.env("RALPH_RETRY_BASE_MS", "10");
    });
    run.assert_code(0);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(env.history()["total_tokens"]["input"], u64::MAX);
}

#[test]
fn resume_reports_every_option_it_changes() {
    let env = TestEnv::new();
    env.run_loop(&["task", "--max-iterations", "1"])
        .assert_code(2);
    let run = env.run(&[
        "--resume",
        "--pause",
        "0",
        "--max-iterations",
        "2",
        "--max-runtime",
        "1h",
        "--verify",
        "true",
    ]);
    let stdout = run.stdout();
    for change in [
        "--max-iterations: 1 → 2",
        "--max-runtime: none → 1h",
        "--verify: [] → [\"true\"]",
    ] {
        assert!(stdout.contains(change), "{change} missing: {stdout}");
    }
}

/// Codex's JSON for a failed turn with this message.
fn codex_failed(text: &str) -> String {
    format!(
        "cat <<EVENTS\n{{\"type\":\"turn.failed\",\"error\":{{\"message\":\"{text}\"}}}}\nEVENTS\nexit 1\n"
    )
}

/// `ralph task --agent claude-code --fallback codex ARGS`, the fake agents completing at call
/// `complete_at`.
fn claude_with_codex_fallback(
    env: &TestEnv,
    args: &[&str],
    complete_at: u32,
) -> crate::support::Run {
    let mut all = vec!["task", "--agent", "claude-code", "--fallback", "codex"];
    all.extend_from_slice(args);
    env.run_loop_with(&all, |c| {
        c.env("FAKE_AGENT_COMPLETE_AT", complete_at.to_string());
    })
}

/// The agent (`-p`: Claude Code, `exec`: Codex) of fake-agent call `n`.
fn agent_of_call(env: &TestEnv, n: u32) -> &'static str {
    match env.agent_file(&format!("argv.{n}")).split('\0').next() {
        Some("-p") => "claude",
        Some("exec") => "codex",
        other => panic!("call {n}: unexpected argv {other:?}"),
    }
}

#[test]
fn a_far_usage_limit_hands_the_iteration_to_the_fallback_agent_at_once() {
    let env = TestEnv::new();
    let far = chrono::Utc::now().timestamp() + 3600;
    env.agent_script(
        Some(1),
        &claude_result(429, &format!("Claude AI usage limit reached|{far}")),
    );
    let run = claude_with_codex_fallback(&env, &["--max-iterations", "2"], 2);
    run.assert_code(0);
    assert_eq!(env.agent_calls(), 2);
    assert_eq!(
        (agent_of_call(&env, 1), agent_of_call(&env, 2)),
        ("claude", "codex")
    );
    assert!(
        run.stderr().contains("↪ Claude Code is out of quota until")
            && run.stderr().contains("Codex takes this iteration."),
        "{}",
        run.stderr()
    );
    assert!(
        !run.stdout().contains("retrying iteration"),
        "no wait: {}",
        run.stdout()
    );
    let (first, second) = (record(&env, 0), record(&env, 1));
    assert_eq!(
        (first["agent"].as_str(), first["iteration"].as_u64()),
        (Some("claude-code"), Some(1))
    );
    assert_eq!(first["failure"]["kind"], "rate limit");
    let message = first["failure"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Claude AI usage limit reached (resets ") && !message.contains('|'),
        "{message}"
    );
    assert_eq!(
        (second["agent"].as_str(), second["iteration"].as_u64()),
        (Some("codex"), Some(1))
    );
    assert_eq!(second["completion_detected"], true);
    // The split per agent, on the end line and in --status (the refused attempt's $0 for no
    // tokens is not shown).
    assert!(
        run.stdout()
            .contains("   Claude Code: 1 iteration\n   Codex: 1 iteration"),
        "{}",
        run.stdout()
    );
    let status = env.run(&["--status"]).stdout();
    assert!(
        status.contains("   By agent:\n     Claude Code: 1 iteration\n     Codex: 1 iteration"),
        "{status}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&env.run(&["--status", "--json"]).stdout()).unwrap();
    assert_eq!(
        json["history"]["agents"]["codex"]["iterations"], 1,
        "{json:#}"
    );
    assert_eq!(
        json["history"]["agents"]["claude-code"]["iterations"], 1,
        "{json:#}"
    );
}

#[test]
fn a_near_usage_limit_waits_for_the_same_agent() {
    let env = TestEnv::new();
    let near = chrono::Utc::now().timestamp() + 1;
    env.agent_script(
        Some(1),
        &claude_result(429, &format!("Claude AI usage limit reached|{near}")),
    );
    let run = claude_with_codex_fallback(&env, &["--max-iterations", "1"], 2);
    run.assert_code(0);
    assert_eq!(
        (agent_of_call(&env, 1), agent_of_call(&env, 2)),
        ("claude", "claude")
    );
    assert!(
        run.stdout().contains("until the limit resets"),
        "{}",
        run.stdout()
    );
    assert!(
        !run.stderr().contains("takes this iteration"),
        "{}",
        run.stderr()
    );
}

#[test]
fn every_agent_limited_waits_for_the_earliest_reset() {
    let env = TestEnv::new();
    let now = chrono::Utc::now().timestamp();
    env.agent_script(
        Some(1),
        &claude_result(429, &format!("usage limit reached|{}", now + 3600)),
    );
    env.agent_script(
        Some(2),
        &codex_failed(&format!("usage limit reached|{}", now + 2)),
    );
    let run = claude_with_codex_fallback(
        &env,
        &["--fallback-after", "500ms", "--max-iterations", "1"],
        3,
    );
    run.assert_code(0);
    let agents: Vec<&str> = (1..=3).map(|n| agent_of_call(&env, n)).collect();
    assert_eq!(
        agents,
        ["claude", "codex", "codex"],
        "the earliest reset runs next"
    );
    assert!(
        run.stderr()
            .contains("Every agent is out of quota; the iteration waits for the first reset"),
        "{}",
        run.stderr()
    );
    let retried_at = record(&env, 2)["started_at"].as_str().unwrap().to_owned();
    let retried_at = chrono::DateTime::parse_from_rfc3339(&retried_at).unwrap();
    assert!(
        retried_at.timestamp() >= now + 2,
        "retried before the reset: {retried_at}"
    );
}

#[test]
fn every_agent_limited_without_a_reset_time_waits_at_most_the_retry_max_wait() {
    let env = TestEnv::new();
    env.agent_script(Some(1), &claude_result(429, "rate limit exceeded"));
    env.agent_script(Some(2), &codex_failed("rate limit exceeded (429)"));
    let started = Instant::now();
    let run = claude_with_codex_fallback(
        &env,
        &["--retry-max-wait", "300ms", "--max-iterations", "1"],
        3,
    );
    run.assert_code(0);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "waited {:?}: {}",
        started.elapsed(),
        run.stdout()
    );
    assert_eq!(env.agent_calls(), 3);
    assert!(
        run.stderr()
            .contains("Every agent is out of quota, and the first limit to end gave no reset time"),
        "{}",
        run.stderr()
    );
    assert!(!run.stdout().contains("5:00"), "{}", run.stdout());
}
