//! `--serve`: the state, the event stream and the steering POSTs, through a real HTTP client (a
//! socket, spoken to by hand), inside a `--parallel` run and beside one.

use std::fs;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::fleet::setup;
use crate::support::wait_output;
use crate::support::{TestEnv, http, served_at, wait_for_file};

/// Stops a server as Ctrl+C does; it ends with exit 0.
pub(crate) fn stop_server(server: &mut Child) {
    crate::support::interrupt(server);
    let output = wait_output(server, Duration::from_secs(10));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

fn get_json(port: u16, path: &str) -> serde_json::Value {
    let (status, body) = http(port, "GET", path, &[], "");
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|err| panic!("{path}: {err}: {body}"))
}

/// Reads Server-Sent Events from `/api/v1/events` (after `last`, when given) until `enough`
/// holds of those read or 60 s pass; each as (id, data).
pub(crate) fn events_until(
    port: u16,
    last: Option<u64>,
    mut enough: impl FnMut(&[(u64, serde_json::Value)]) -> bool,
) -> Vec<(u64, serde_json::Value)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let resume = last.map_or_else(String::new, |id| format!("Last-Event-ID: {id}\r\n"));
    write!(
        stream,
        "GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{resume}\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut events = Vec::new();
    let mut id = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut line = String::new();
    while Instant::now() < deadline && !enough(&events) {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            continue;
        }
        if let Some(number) = line.strip_prefix("id: ") {
            id = number.trim().parse().ok();
        } else if let Some(data) = line.strip_prefix("data: ") {
            let value = serde_json::from_str(data.trim()).unwrap();
            events.push((id.take().expect("every event has an id"), value));
        }
    }
    events
}

fn has(events: &[(u64, serde_json::Value)], name: &str, task: &str) -> bool {
    events
        .iter()
        .any(|(_, event)| event["event"] == name && event["task"] == task)
}

fn spawn(env: &TestEnv, args: &[&str]) -> Child {
    env.ralph()
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Each task's agent waits for the test's `go`.
const HOLD: &str = r#"touch "$dir/started-$id"
i=0; while [ ! -f "$dir/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
"#;

/// The server at `port` serves a finished parallel run's logs (a task's, an iteration's by
/// number, as the terminal showed them) and its report.
fn assert_logs_and_report_served(port: u16) {
    // A task's log, its iteration by number, and the report.
    for which in ["alpha", "alpha/1", "beta"] {
        let (status, log) = http(port, "GET", &format!("/api/v1/log/{which}"), &[], "");
        assert_eq!(status, 200, "{which}: {log}");
        let first: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
        assert!(first["start"].is_object(), "{which}: {log}");
    }
    assert_eq!(http(port, "GET", "/api/v1/log/alpha/9", &[], "").0, 404);
    // As the terminal shows it (the page's Output), never the agent's raw events.
    let (status, shown) = http(port, "GET", "/api/v1/log/alpha?view=shown", &[], "");
    assert_eq!(status, 200, "{shown}");
    assert!(
        shown.contains("READY_FOR_NEXT_TASK") && !shown.contains("\"start\""),
        "{shown}"
    );
    let (status, report) = http(port, "GET", "/api/v1/report", &[], "");
    assert_eq!(status, 200);
    assert!(
        report.starts_with("<!doctype html") || report.starts_with("<!DOCTYPE html"),
        "{report}"
    );
}

#[test]
fn a_parallel_run_is_seen_live_from_its_own_server_and_from_one_beside_it() {
    let env = setup("- [ ] Alpha\n  - id: alpha\n- [ ] Beta\n  - id: beta\n");
    fs::write(env.agent_dir().join("script"), HOLD).unwrap();
    let mut beside = spawn(&env, &["--serve", "127.0.0.1:0"]);
    let (outside, _) = served_at(&mut beside);
    let mut run = spawn(
        &env,
        &[
            "--parallel",
            "2",
            "--pause",
            "0",
            "--serve",
            "127.0.0.1:0",
            "Do the tasks",
        ],
    );
    let (inside, _) = served_at(&mut run);
    // The agent names its marker after the task's text.
    for task in ["Alpha", "Beta"] {
        wait_for_file(
            &env.agent_dir().join(format!("started-{task}")),
            Duration::from_secs(30),
        );
    }
    // Both servers show both tasks running.
    for port in [inside, outside] {
        let state = get_json(port, "/api/v1/state");
        let running: Vec<&str> = (state["workers"].as_array().unwrap().iter())
            .filter(|worker| worker["state"] == "running")
            .map(|worker| worker["task"].as_str().unwrap())
            .collect();
        assert_eq!(running, ["alpha", "beta"], "{state}");
        assert_eq!(state["schema"], 1);
        let tasks = get_json(port, "/api/v1/tasks");
        assert_eq!(tasks["total"], 2, "{tasks}");
    }
    fs::write(env.agent_dir().join("go"), "").unwrap();
    // The stream delivers both tasks' iterations as they happen.
    let live = events_until(outside, None, |events| {
        ["alpha", "beta"]
            .iter()
            .all(|task| has(events, "iteration_finished", task))
            && events
                .iter()
                .any(|(_, event)| event["event"] == "parallel_ended")
    });
    for task in ["alpha", "beta"] {
        assert!(has(&live, "iteration_started", task), "{live:?}");
        assert!(has(&live, "iteration_finished", task), "{live:?}");
    }
    let output = wait_output(&mut run, Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(0));
    // Ids are the journal's line numbers: nothing lost, nothing repeated.
    let journal = fs::read_to_string(env.ralph_file("events.jsonl")).unwrap();
    let lines: Vec<&str> = journal.lines().collect();
    let ids: Vec<u64> = live.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    for (id, event) in &live {
        let line: serde_json::Value = serde_json::from_str(lines[*id as usize - 1]).unwrap();
        assert_eq!(&line, event);
    }
    // A client that reconnects says the last id it got, and gets every line after it.
    let after = ids[ids.len() / 2];
    let again = events_until(outside, Some(after), |events| {
        events
            .last()
            .is_some_and(|(id, _)| *id == lines.len() as u64)
    });
    let resumed: Vec<u64> = again.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        resumed,
        (after + 1..=lines.len() as u64).collect::<Vec<_>>()
    );
    // Afterwards both tasks are done, as the server beside the run says.
    let state = get_json(outside, "/api/v1/state");
    let done: Vec<&str> = (state["tasks"]["tasks"].as_array().unwrap().iter())
        .map(|task| task["status"].as_str().unwrap())
        .collect();
    assert_eq!(done, ["complete", "complete"], "{state}");
    assert_logs_and_report_served(outside);
    stop_server(&mut beside);
}

/// A body announced as a terabyte is refused unread, and the server goes on.
fn a_huge_body_is_refused_unread(port: u16) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "POST /api/v1/context HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 1099511627776\r\n\r\nx"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}

/// A task added through the server is in the list, as `--add-task` would have it; a duplicate
/// id is refused; a blocker the list does not have is added and said.
fn tasks_are_added_as_the_command_line_adds_them(port: u16, allowed: &[(&str, &str)]) {
    let task = r#"{"text": "Write the docs", "id": "docs"}"#;
    let (status, body) = http(port, "POST", "/api/v1/tasks", allowed, task);
    assert_eq!(status, 201, "{body}");
    let tasks = get_json(port, "/api/v1/tasks");
    assert_eq!(tasks["tasks"][0]["id"], "docs", "{tasks}");
    let again = http(port, "POST", "/api/v1/tasks", allowed, task);
    assert_eq!(again.0, 400, "a duplicate id: {}", again.1);
    assert!(again.1.contains("already exists"), "{}", again.1);
    // A blocker the list does not have is added, as the command line does, and said.
    let waits = r#"{"text": "Ship it", "id": "ship", "blocked_by": "nosuch"}"#;
    let (status, body) = http(port, "POST", "/api/v1/tasks", allowed, waits);
    assert_eq!(status, 201, "{body}");
    assert!(
        body.contains("\"warning\"") && body.contains("nosuch"),
        "{body}"
    );
}

#[test]
fn changes_need_the_token_and_the_servers_own_origin_and_a_stop_is_resumable() {
    let env = TestEnv::new();
    let mut server = spawn(&env, &["--serve", "127.0.0.1:0"]);
    let (port, token) = served_at(&mut server);
    let token_file = env.ralph_file("serve.token");
    let mode = fs::metadata(&token_file).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    assert_eq!(fs::read_to_string(&token_file).unwrap().trim(), token);
    let bearer = format!("Bearer {token}");
    let own = format!("http://127.0.0.1:{port}");
    let hint = r#"{"text": "Use the blue palette"}"#;
    let (status, body) = http(port, "POST", "/api/v1/context", &[], hint);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("Authorization: Bearer"), "{body}");
    let foreign = [
        ("Authorization", bearer.as_str()),
        ("Origin", "http://evil.example"),
    ];
    assert_eq!(http(port, "POST", "/api/v1/context", &foreign, hint).0, 403);
    let rebound = [("Host", "evil.example")];
    assert_eq!(http(port, "GET", "/api/v1/state", &rebound, "").0, 403);
    let huge = format!(r#"{{"text": "{}"}}"#, "x".repeat(70 << 10));
    let allowed = [("Authorization", bearer.as_str()), ("Origin", own.as_str())];
    assert_eq!(
        http(port, "POST", "/api/v1/context", &allowed, &huge).0,
        413
    );
    a_huge_body_is_refused_unread(port);
    assert_eq!(http(port, "GET", "/api/v1/state", &[], "").0, 200);
    assert_eq!(
        http(port, "GET", "/api/v1/log/..%2F..%2Fetc", &[], "").0,
        400
    );
    let (status, body) = http(port, "POST", "/api/v1/context", &allowed, hint);
    assert_eq!(status, 200, "{body}");
    tasks_are_added_as_the_command_line_adds_them(port, &allowed);
    // A path that is not the server's is not found; a known one with another method is not
    // allowed.
    assert_eq!(http(port, "GET", "/api/v1/nothing", &[], "").0, 404);
    assert_eq!(http(port, "GET", "/api/v1/stop", &[], "").0, 405);
    // The page is the server's own, with nothing from elsewhere.
    let (status, page) = http(port, "GET", "/", &[], "");
    assert_eq!(status, 200);
    assert!(page.contains("new EventSource(\"/api/v1/events\""));
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "no other host"
    );

    // The hint reaches the next prompt; a stop from the server ends the run as Ctrl+C does.
    env.agent_script(Some(1), "touch \"$dir/ready\"; sleep 30\n");
    env.agent_script(Some(2), "echo '<promise>COMPLETE</promise>'\n");
    let mut run = spawn(&env, &["--pause", "0", "Paint the site"]);
    wait_for_file(&env.agent_dir().join("ready"), Duration::from_secs(30));
    assert!(env.agent_prompt(1).contains("Use the blue palette"));
    let (status, body) = http(port, "POST", "/api/v1/stop", &allowed, "");
    assert_eq!(status, 202, "{body}");
    let output = wait_output(&mut run, Duration::from_secs(30));
    assert_eq!(output.status.code(), Some(130));
    let (status, body) = http(port, "POST", "/api/v1/stop", &allowed, "");
    assert_eq!(status, 409, "nothing runs now: {body}");
    let resumed = env.run(&["--resume"]);
    resumed.assert_code(0);
    stop_server(&mut server);
    assert!(!token_file.exists(), "the token goes with its server");
}

#[test]
fn serving_beyond_loopback_needs_its_own_flag() {
    let env = TestEnv::new();
    let run = env.run(&["--serve", "0.0.0.0:0"]);
    run.assert_code(1);
    let stderr = run.stderr();
    assert!(stderr.contains("--serve-allow-remote"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!env.ralph_file("serve.token").exists());
    let bad = env.run(&["--serve", "not-an-address"]);
    bad.assert_code(1);
    assert!(bad.stderr().contains("give HOST:PORT"), "{}", bad.stderr());
}

#[test]
fn serve_with_remote_shows_the_workers_of_other_clones_and_their_claims() {
    use crate::fleet::{machine, release_workers, two_workers_holding_their_tasks};
    let (env, workers) = two_workers_holding_their_tasks([&[], &[]]);
    let mut server = env
        .ralph()
        .current_dir(machine(&env, "m3"))
        .args(["--serve", "127.0.0.1:0", "--remote"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (port, _) = served_at(&mut server);
    let state = get_json(port, "/api/v1/state");
    let remote = &state["remote"];
    assert_eq!(remote["remote"], "origin", "{state}");
    let claims = remote["claims"].as_array().unwrap();
    let mut held: Vec<&str> = claims.iter().map(|c| c["task"].as_str().unwrap()).collect();
    held.sort_unstable();
    assert_eq!(held, ["duo", "solo"], "{state}");
    assert!(
        claims
            .iter()
            .all(|c| c["worker"].is_string() && c["stale"] == false)
    );
    assert_eq!(remote["left_to_run"], 2);
    release_workers(&env, workers);
    stop_server(&mut server);
}

#[test]
fn a_run_whose_server_cannot_listen_goes_on_without_it() {
    let env = TestEnv::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let run = env.run_loop_with(&["Say hello", "--serve", &addr], |command| {
        command.env("FAKE_AGENT_COMPLETE_AT", "1");
    });
    run.assert_code(0);
    let stderr = run.stderr();
    assert!(
        stderr.contains(&format!("--serve: cannot listen on {addr}"))
            && stderr.contains("the run goes on without a server"),
        "{stderr}"
    );
}

#[test]
fn a_new_stream_starts_with_the_journals_last_2000_events() {
    let env = TestEnv::new();
    fs::create_dir_all(env.ralph_file("")).unwrap();
    let lines: String = (1..=2100)
        .map(|n| format!("{{\"event\":\"e{n}\",\"time\":\"2026-01-01T00:00:00Z\"}}\n"))
        .collect();
    fs::write(env.ralph_file("events.jsonl"), lines).unwrap();
    let mut server = spawn(&env, &["--serve", "127.0.0.1:0"]);
    let (port, _) = served_at(&mut server);
    let events = events_until(port, None, |events| events.len() >= 2000);
    let ids: Vec<u64> = events.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (101..=2100).collect::<Vec<_>>());
    assert_eq!(events[0].1["event"], "e101");
    stop_server(&mut server);
}
