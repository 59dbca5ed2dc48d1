//! Seeing what happened: iteration logs, `--log`, hooks.

use std::fs;
use std::time::Duration;

use crate::signals::wait_output;
use crate::support::{TestEnv, http_server, wait_for_text};

#[test]
fn a_killed_iteration_keeps_every_line_printed_before_the_kill() {
    let env = TestEnv::new();
    env.agent_script(
        Some(1),
        "echo 'line one'; echo 'a warning' >&2; echo 'line two'; echo ready > \"$FAKE_AGENT_DIR/ready\"; sleep 600",
    );
    let mut ralph = env.spawn_quiet(&["--pause", "0", "--output-format", "text", "task"]);
    env.wait_for_agent();
    let log = env.ralph_file("logs/0001.jsonl");
    // stdout and stderr are two pipes, read side by side: each line is in the log once ralph
    // has read it (then a kill cannot take it back), in whichever order the two arrived.
    wait_for_text(&log, "line two");
    wait_for_text(&log, "a warning");
    ralph.kill().unwrap();
    ralph.wait().unwrap();
    let records: Vec<serde_json::Value> = fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(records[0]["start"]["iteration"], 1);
    assert_eq!(records[0]["start"]["agent"], "opencode");
    let lines: Vec<(String, String)> = records
        .iter()
        .filter_map(|r| {
            Some((
                r["stream"].as_str()?.to_owned(),
                r["line"].as_str()?.to_owned(),
            ))
        })
        .collect();
    for expected in [
        ("stdout", "fake agent call 1"),
        ("stdout", "line one"),
        ("stderr", "a warning"),
        ("stdout", "line two"),
    ] {
        assert!(
            lines.contains(&(expected.0.to_owned(), expected.1.to_owned())),
            "{expected:?} in {lines:?}"
        );
    }
    let status = env.git(&["status", "--porcelain", "--untracked-files=all"]);
    assert!(
        !status.contains("logs/"),
        "logs are never committed: {status}"
    );
}

#[test]
fn log_shows_an_iteration_raw_as_records_or_as_it_was_shown() {
    let env = TestEnv::new();
    env.agent_script(None, "echo 'hello from the agent'; echo 'to stderr' >&2");
    env.run_loop(&["task", "--max-iterations", "2", "--output-format", "text"])
        .assert_code(2);
    let history = env.history();
    assert_eq!(history["iterations"][0]["log"], "logs/0001.jsonl");

    let last = env.run(&["--log"]);
    last.assert_code(0);
    assert!(
        last.stdout().contains("fake agent call 2"),
        "{}",
        last.stdout()
    );
    assert!(!last.stdout().contains("fake agent call 1"));

    let raw = env.run(&["--log", "1", "--raw"]);
    raw.assert_code(0);
    assert_eq!(
        raw.stdout().lines().collect::<Vec<_>>(),
        ["fake agent call 1", "hello from the agent"]
    );
    assert!(raw.stderr().contains("to stderr"));

    let json = env.run(&["--log", "1", "--json"]);
    json.assert_code(0);
    let records: Vec<serde_json::Value> = json
        .stdout()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(records.first().unwrap()["start"]["iteration"], 1);
    assert_eq!(records.last().unwrap()["end"]["exit_code"], 0);
    assert!(
        records
            .iter()
            .any(|r| r["stream"] == "stderr" && r["line"] == "to stderr")
    );

    let missing = env.run(&["--log", "9"]);
    missing.assert_code(1);
    assert!(
        missing
            .stderr()
            .contains("there is no iteration 9: the loop here ran"),
        "{}",
        missing.stderr()
    );
    env.run(&["--log", "x"]).assert_code(1);
}

#[test]
fn log_follow_prints_as_the_iteration_runs_and_ends_with_it() {
    let env = TestEnv::new();
    env.agent_script(
        Some(1),
        "echo 'before the wait'; while [ ! -f \"$FAKE_AGENT_DIR/go\" ]; do sleep 0.05; done; echo 'after the wait'",
    );
    let mut ralph = env.spawn_quiet(&[
        "--pause",
        "0",
        "--output-format",
        "text",
        "--max-iterations",
        "1",
        "task",
    ]);
    wait_for_text(&env.ralph_file("logs/0001.jsonl"), "before the wait");
    let mut follow = env
        .ralph()
        .args(["--log", "--follow", "--raw"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    fs::write(env.agent_dir().join("go"), "").unwrap();
    let output = wait_output(&mut follow, Duration::from_secs(30));
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("before the wait") && text.contains("after the wait"),
        "{text}"
    );
    assert_eq!(
        wait_output(&mut ralph, Duration::from_secs(30))
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn logs_are_cut_at_their_size_and_only_the_last_are_kept() {
    let env = TestEnv::new();
    env.agent_script(
        None,
        "i=0; while [ $i -lt 50 ]; do echo \"output line $i\"; i=$((i + 1)); done",
    );
    env.run_loop(&[
        "task",
        "--max-iterations",
        "4",
        "--output-format",
        "text",
        "--log-max-size",
        "1k",
        "--keep-logs",
        "2",
    ])
    .assert_code(2);
    let mut names: Vec<String> = fs::read_dir(env.ralph_file("logs"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["0003.jsonl", "0004.jsonl"]);
    let log = fs::read_to_string(env.ralph_file("logs/0004.jsonl")).unwrap();
    assert!(log.contains("log cut at 1000 bytes"), "{log}");
    assert!(!log.contains("output line 49"));
    assert!(log.len() < 1400, "{}", log.len());
}

#[test]
fn hooks_fire_once_per_event_with_the_events_json() {
    let env = TestEnv::new();
    let record = |name: &str| {
        format!(
            "{{ cat; echo; }} >> \"$FAKE_AGENT_DIR/{name}.json\"; echo \"$RALPH_EVENT|$RALPH_ITERATION|$RALPH_EXIT_CODE|$RALPH_STOP_REASON\" >> \"$FAKE_AGENT_DIR/{name}.env\""
        )
    };
    let run = env.run_loop(&[
        "task",
        "--max-iterations",
        "2",
        "--on-iteration",
        &record("iteration"),
        "--on-complete",
        &record("complete"),
        "--on-stop",
        &record("stop"),
    ]);
    run.assert_code(2);
    let events = |name: &str| -> Vec<serde_json::Value> {
        fs::read_to_string(env.agent_dir().join(format!("{name}.json")))
            .unwrap_or_default()
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    };
    let iterations = events("iteration");
    assert_eq!(iterations.len(), 2);
    assert_eq!(iterations[0]["event"], "iteration_finished");
    assert_eq!(iterations[1]["iteration"], 2);
    assert_eq!(iterations[1]["log"], "logs/0002.jsonl");
    let stops = events("stop");
    assert_eq!(stops.len(), 1);
    assert_eq!(stops[0]["event"], "run_ended");
    assert_eq!(stops[0]["exit_code"], 2);
    assert!(events("complete").is_empty());
    let env_lines = fs::read_to_string(env.agent_dir().join("stop.env")).unwrap();
    assert!(
        env_lines.starts_with("run_ended||2|max iterations"),
        "{env_lines}"
    );
    let iteration_env = fs::read_to_string(env.agent_dir().join("iteration.env")).unwrap();
    assert_eq!(
        iteration_env.lines().next(),
        Some("iteration_finished|1|0|")
    );

    let done = TestEnv::new();
    let run = done.run_loop_with(
        &[
            "task",
            "--on-complete",
            &record("complete"),
            "--on-stop",
            &record("stop"),
        ],
        |c| {
            c.env("FAKE_AGENT_COMPLETE_AT", "1");
        },
    );
    run.assert_code(0);
    let completes = fs::read_to_string(done.agent_dir().join("complete.json")).unwrap();
    assert_eq!(
        completes.lines().filter(|l| !l.trim().is_empty()).count(),
        1
    );
    assert!(!done.agent_dir().join("stop.json").exists());
}

#[test]
fn a_hanging_or_failing_hook_warns_and_the_loop_goes_on() {
    let env = TestEnv::new();
    let run = env.run_loop(&[
        "task",
        "--max-iterations",
        "2",
        "--on-iteration",
        "sleep 30",
        "--hook-timeout",
        "300ms",
        "--on-stop",
        "echo 'hook says hi'; exit 3",
    ]);
    run.assert_code(2);
    assert_eq!(env.agent_calls(), 2, "both iterations ran");
    let stderr = run.stderr();
    assert_eq!(
        stderr
            .matches("The on_iteration hook failed (stopped after")
            .count(),
        2,
        "{stderr}"
    );
    assert!(
        stderr.contains("The on_stop hook failed (exit code 3)"),
        "{stderr}"
    );
    assert!(
        run.stdout().contains("hook │ hook says hi"),
        "{}",
        run.stdout()
    );
}

#[test]
fn notify_posts_once_when_the_loop_ends_and_an_unreachable_url_only_warns() {
    let env = TestEnv::new();
    let (url, requests) = http_server();
    // A port nothing listens on: bound, then closed.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/nobody", listener.local_addr().unwrap())
    };
    let run = env.run_loop(&[
        "task",
        "--max-iterations",
        "2",
        "--notify",
        &url,
        "--notify",
        &closed,
    ]);
    run.assert_code(2);
    let request = requests.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(request.starts_with("POST /ralph-hook "), "{request}");
    assert!(
        request
            .to_ascii_lowercase()
            .contains("content-type: application/json")
    );
    let body: serde_json::Value =
        serde_json::from_str(request.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["event"], "run_ended");
    assert_eq!(body["exit_code"], 2);
    assert_eq!(body["iterations"], 2);
    assert_eq!(body["title"], "ralph stopped");
    assert_eq!(body["repository"], "work");
    assert_eq!(body["branch"], "main");
    assert!(body["reason"].as_str().unwrap().contains("max iterations"));
    assert!(
        body["text"].as_str().unwrap().ends_with("— work (main)"),
        "{body}"
    );
    assert!(body.get("total_duration_ms").is_some() && body.get("cost_usd").is_some());
    assert!(
        requests.recv_timeout(Duration::from_millis(300)).is_err(),
        "one POST only"
    );
    assert!(
        run.stderr().contains("Could not notify"),
        "{}",
        run.stderr()
    );
    assert!(run.stderr().contains("/nobody"));
}

#[test]
fn notify_each_posts_after_every_iteration_too() {
    let env = TestEnv::new();
    let (url, requests) = http_server();
    env.run_loop(&[
        "task",
        "--max-iterations",
        "2",
        "--notify",
        &url,
        "--notify-each",
    ])
    .assert_code(2);
    let bodies: Vec<serde_json::Value> = (0..3)
        .map(|_| {
            let request = requests.recv_timeout(Duration::from_secs(10)).unwrap();
            serde_json::from_str(request.split("\r\n\r\n").nth(1).unwrap()).unwrap()
        })
        .collect();
    let events: Vec<&str> = bodies
        .iter()
        .map(|b| b["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        events,
        ["iteration_finished", "iteration_finished", "run_ended"]
    );
    assert_eq!(bodies[1]["title"], "ralph iteration 2");
}
