//! The agents' JSON event streams, through fake agents that print recorded event lines.

use crate::support::{TestEnv, claude_events};

#[test]
fn claude_tools_tokens_and_cost_come_from_the_events() {
    let env = TestEnv::new();
    env.agent_script(Some(1), &claude_events("Wrote it."));
    env.agent_script(
        Some(2),
        &claude_events("Done.\n<promise>COMPLETE</promise>"),
    );
    let run = env.run_loop(&["task", "--agent", "claude-code", "--max-iterations", "3"]);
    run.assert_code(0);
    assert_eq!(
        env.agent_calls(),
        2,
        "a promise in a tool result does not complete"
    );
    let stdout = run.stdout();
    assert!(stdout.contains("| Tools    Write 1"), "{stdout}");
    assert!(stdout.contains("I'll write the file."));
    assert!(
        !stdout.contains("\"type\""),
        "raw JSON is never shown: {stdout}"
    );
    assert!(
        stdout.contains("Tokens:    200 in · 40 out · 12 cache"),
        "{stdout}"
    );
    assert!(stdout.contains("Cost:      $0.0020"), "{stdout}");

    let history = env.history();
    let record = &history["iterations"][0];
    assert_eq!(record["tools_used"]["Write"], 1);
    assert_eq!(record["tokens"]["input"], 200);
    assert_eq!(record["tokens"]["output"], 40);
    assert_eq!(record["cost_usd"], 0.002);
    assert_eq!(record["turns"], 2);
    assert_eq!(history["total_tokens"]["input"], 400);
    assert_eq!(history["total_cost_usd"], 0.004);

    let status = env.run(&["--status"]).stdout();
    assert!(
        status.contains("   Tokens:       400 in · 80 out · 24 cache"),
        "{status}"
    );
    assert!(status.contains("   Cost:         $0.0040"), "{status}");
    assert!(status.contains("| Write:1 | $0.0020"), "{status}");
}

#[test]
fn verbose_tools_show_each_call_with_its_target() {
    let env = TestEnv::new();
    env.agent_script(None, &claude_events("Done.\n<promise>COMPLETE</promise>"));
    let run = env.run_loop(&[
        "task",
        "--agent",
        "claude-code",
        "--verbose-tools",
        "--max-iterations",
        "1",
    ]);
    run.assert_code(0);
    assert!(
        run.stdout().contains("| Write /w/hello.txt"),
        "{}",
        run.stdout()
    );
}

#[test]
fn malformed_and_unknown_lines_are_shown_as_text_and_the_run_completes() {
    let env = TestEnv::new();
    env.agent_script(
        None,
        r#"printf '%s\n' '{"type":"step_start","part":{}}' '{not json' '{"type":"brand_new_event","x":1}' 'plain words'
printf '%s\n' '{"type":"text","part":{"type":"text","text":"All done.\n<promise>COMPLETE</promise>"}}'
printf '%s\n' '{"type":"step_finish","part":{"tokens":{"input":10,"output":2,"cache":{"read":1,"write":0}},"cost":0.25}}'"#,
    );
    let run = env.run_loop(&["task", "--max-iterations", "2"]);
    run.assert_code(0);
    let stdout = run.stdout();
    assert!(stdout.contains("{not json"), "{stdout}");
    assert!(
        stdout.contains(r#"{"type":"brand_new_event","x":1}"#),
        "{stdout}"
    );
    assert!(stdout.contains("plain words"));
    assert!(!stdout.contains("step_start"));
    assert_eq!(env.history()["iterations"][0]["cost_usd"], 0.25);
}

#[test]
fn codex_failures_are_recorded_with_their_kind() {
    let env = TestEnv::new();
    env.agent_script(
        None,
        r#"printf '%s\n' '{"type":"thread.started","thread_id":"t"}' '{"type":"turn.started"}'
printf '%s\n' '{"type":"error","message":"Reconnecting... 1/1 (high demand)"}'
printf '%s\n' '{"type":"turn.failed","error":{"message":"We are currently experiencing high demand."}}'
exit 1"#,
    );
    let run = env.run_loop(&[
        "task",
        "--agent",
        "codex",
        "--max-iterations",
        "1",
        "--max-retries",
        "0",
    ]);
    run.assert_code(1);
    assert!(
        run.stderr()
            .contains("❌ Codex failed: api error: We are currently experiencing high demand."),
        "{}",
        run.stderr()
    );
    assert!(
        run.stderr().contains("↻ Codex: Reconnecting... 1/1"),
        "{}",
        run.stderr()
    );
    let record = &env.history()["iterations"][0];
    assert_eq!(record["failure"]["kind"], "api error");
    assert_eq!(record["exit_code"], 1);
    assert!(record.get("cost_usd").is_none(), "Codex reports no cost");
}

/// `--json` lines of a single loop, byte for byte with times and durations masked: the public
/// schema that scripts, hooks and notifications read.
#[test]
fn a_loops_json_lines_are_pinned_byte_for_byte() {
    let env = TestEnv::new();
    env.agent_script(None, &claude_events("Done.\n<promise>COMPLETE</promise>"));
    let run = env.run_loop(&["task", "--agent", "claude-code", "--json"]);
    run.assert_code(0);
    let mask = regex::Regex::new(
        r#""(time|started_at|ended_at)":"[^"]*"|"(duration_ms|total_duration_ms)":\d+"#,
    )
    .unwrap();
    let stdout = run.stdout();
    let masked = mask.replace_all(&stdout, |found: &regex::Captures<'_>| {
        let key = found.get(1).or_else(|| found.get(2)).unwrap().as_str();
        format!("\"{key}\":_")
    });
    let expected = [
        r#"{"agent":"claude-code","event":"run_started","fallback":[],"iteration":1,"max_iterations":0,"min_iterations":1,"model":null,"resumed":false,"rotation":["claude-code"],"tasks":false,"time":_}"#,
        r#"{"agent":"claude-code","event":"iteration_started","iteration":1,"model":null,"time":_}"#,
        r#"{"event":"tools","time":_,"tools":{"Write":1}}"#,
        r#"{"event":"tools","time":_,"tools":{"Write":1}}"#,
        r#"{"agent":"claude-code","completion_detected":true,"cost_usd":0.002,"duration_ms":_,"ended_at":_,"errors":[],"event":"iteration_finished","exit_code":0,"files_modified":[],"iteration":1,"log":"logs/0001.jsonl","session_id":"s","started_at":_,"time":_,"tokens":{"cache_read":7,"cache_write":5,"input":200,"output":40},"tools_used":{"Write":1},"turns":2}"#,
        r#"{"event":"completed","iteration":1,"time":_}"#,
        r#"{"agents":{"claude-code":{"cost_usd":0.002,"iterations":1,"last_iteration":1,"tokens":{"cache_read":7,"cache_write":5,"input":200,"output":40}}},"cost_usd":0.002,"event":"run_ended","exit_code":0,"iterations":1,"reason":"completed in 1 iteration","time":_,"tokens":{"cache_read":7,"cache_write":5,"input":200,"output":40},"total_duration_ms":_}"#,
    ];
    let expected: String = expected.iter().map(|line| format!("{line}\n")).collect();
    assert_eq!(masked, expected);
}
