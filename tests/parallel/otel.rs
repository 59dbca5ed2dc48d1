//! `--otel ENDPOINT`: the run reaches an OTLP/HTTP receiver as traces (run → task → iteration →
//! agent call, merge) and metrics (cost).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// An OTLP/HTTP receiver on 127.0.0.1: every POST's path and JSON body, answered 200.
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Receiver {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        listener.set_nonblocking(true).unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&got);
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                let Ok((stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                stream.set_nonblocking(false).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    continue;
                }
                let path = line.split(' ').nth(1).unwrap_or_default().to_owned();
                let mut length = 0;
                loop {
                    let mut header = String::new();
                    reader.read_line(&mut header).unwrap();
                    if header.trim().is_empty() {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                kept.lock().unwrap().push((path, body));
                let _ = writer.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{}",
                );
            }
        });
        Self { url, got }
    }

    /// Every span received.
    fn spans(&self) -> Vec<Value> {
        (self.got.lock().unwrap().iter())
            .filter(|(path, _)| path == "/v1/traces")
            .flat_map(|(_, body)| {
                body["resourceSpans"][0]["scopeSpans"][0]["spans"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .collect()
    }

    /// The last value of metric `name`.
    fn metric(&self, name: &str) -> Option<Value> {
        (self.got.lock().unwrap().iter().rev())
            .filter(|(path, _)| path == "/v1/metrics")
            .flat_map(|(_, body)| {
                body["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .find(|metric| metric["name"] == name)
    }
}

/// `spans` are one trace: the run's span with no parent, each of `tasks` under it, its merge
/// and its first iteration under the task, the agent's call under the iteration.
fn assert_tasks_traced(spans: &[Value], tasks: &[&str]) {
    let named = |name: &str| {
        (spans.iter())
            .find(|span| span["name"] == name)
            .unwrap_or_else(|| panic!("no span {name}: {spans:#?}"))
            .clone()
    };
    let run_span = named("ralph run");
    assert!(run_span.get("parentSpanId").is_none(), "{run_span}");
    for task in tasks {
        let task_span = named(&format!("task {task}"));
        assert_eq!(task_span["parentSpanId"], run_span["spanId"], "{task_span}");
        let merge = named(&format!("merge {task}"));
        assert_eq!(merge["parentSpanId"], task_span["spanId"], "{merge}");
        let iteration = (spans.iter())
            .find(|span| {
                span["name"] == "iteration 1" && span["parentSpanId"] == task_span["spanId"]
            })
            .unwrap_or_else(|| panic!("no iteration of {task}: {spans:#?}"));
        let agent = (spans.iter())
            .find(|span| span["parentSpanId"] == iteration["spanId"])
            .unwrap();
        assert_eq!(agent["name"], "agent claude-code");
    }
    assert!(
        spans
            .iter()
            .all(|span| span["traceId"] == run_span["traceId"]),
        "one trace: {spans:#?}"
    );
}

#[test]
fn a_parallel_run_reaches_an_otlp_receiver_as_one_trace_and_its_cost() {
    let receiver = Receiver::start();
    let env = crate::fleet::setup("- [ ] Alpha\n  - id: alpha\n- [ ] Beta\n  - id: beta\n");
    // Claude's result: 0.25 USD, the task's promise.
    env.write_executable(
        "claude",
        "#!/bin/sh\necho made > \"${PWD##*/}.txt\"\necho '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"num_turns\":1,\"result\":\"done <promise>READY_FOR_NEXT_TASK</promise>\",\"total_cost_usd\":0.25,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}'\n",
    );
    let run = env.run_loop(&[
        "Build",
        "--parallel",
        "2",
        "--agent",
        "claude-code",
        "--otel",
        &receiver.url,
    ]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let spans = receiver.spans();
    assert_tasks_traced(&spans, &["alpha", "beta"]);
    let cost = receiver.metric("ralph.cost").unwrap();
    assert_eq!(cost["sum"]["dataPoints"][0]["asDouble"], 0.5, "{cost}");
    assert_eq!(
        receiver.metric("ralph.iterations").unwrap()["sum"]["dataPoints"][0]["asInt"],
        "2"
    );
}

/// Claude Code answering with the promise `promise`, at 0.25 USD.
fn claude_keeping(promise: &str) -> String {
    format!(
        "#!/bin/sh\necho made > \"made-$$.txt\"\necho '{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"num_turns\":1,\"result\":\"done <promise>{promise}</promise>\",\"total_cost_usd\":0.25,\"usage\":{{\"input_tokens\":10,\"output_tokens\":1}}}}'\n"
    )
}

#[test]
fn a_single_run_reaches_an_otlp_receiver_as_its_iteration_under_the_run() {
    single_loop_reaches_a_receiver(&[]);
}

/// The same for a loop in its own worktree, merged when done.
#[test]
fn a_worktree_run_reaches_an_otlp_receiver_as_its_iteration_under_the_run() {
    single_loop_reaches_a_receiver(&["--worktree", "side", "--merge"]);
}

/// A loop (with `shape`'s arguments) of one iteration at 0.25 USD, against a receiver: run →
/// iteration → agent, one trace, the cost.
fn single_loop_reaches_a_receiver(shape: &[&str]) {
    let receiver = Receiver::start();
    let env = crate::support::TestEnv::new();
    env.write_executable("claude", &claude_keeping("COMPLETE"));
    let args = [
        &["Build", "--agent", "claude-code", "--otel", &receiver.url],
        shape,
    ]
    .concat();
    let run = env.run_loop(&args);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let spans = receiver.spans();
    let run_span = (spans.iter())
        .find(|span| span["name"] == "ralph run")
        .unwrap_or_else(|| panic!("no run span: {spans:#?}"));
    assert!(run_span.get("parentSpanId").is_none(), "{run_span}");
    let iteration = (spans.iter())
        .find(|span| span["name"] == "iteration 1")
        .unwrap_or_else(|| panic!("no iteration: {spans:#?}"));
    assert_eq!(iteration["parentSpanId"], run_span["spanId"], "{iteration}");
    let agent = (spans.iter())
        .find(|span| span["parentSpanId"] == iteration["spanId"])
        .unwrap_or_else(|| panic!("no agent call: {spans:#?}"));
    assert_eq!(agent["name"], "agent claude-code");
    assert!(
        spans
            .iter()
            .all(|span| span["traceId"] == run_span["traceId"])
    );
    let cost = receiver.metric("ralph.cost").unwrap();
    assert_eq!(cost["sum"]["dataPoints"][0]["asDouble"], 0.25, "{cost}");
}

#[test]
fn a_worker_reaches_an_otlp_receiver_with_each_claimed_task_and_its_merge() {
    let receiver = Receiver::start();
    let env = crate::fleet::machines("- [ ] A\n  - id: a\n- [ ] B\n  - id: b\n", &["m1"]);
    env.write_executable("claude", &claude_keeping("READY_FOR_NEXT_TASK"));
    let worker = crate::fleet::start_worker(
        &env,
        "m1",
        &["--agent", "claude-code", "--otel", &receiver.url],
    );
    let (code, stdout, stderr) = crate::fleet::finish(worker);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let spans = receiver.spans();
    assert_tasks_traced(&spans, &["a", "b"]);
    let cost = receiver.metric("ralph.cost").unwrap();
    assert_eq!(cost["sum"]["dataPoints"][0]["asDouble"], 0.5, "{cost}");
}
