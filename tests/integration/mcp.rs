//! `ralph --mcp`, driven over stdio by a test client as another agent would.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::signals::wait_output;
use crate::support::{TestEnv, wait_for_file};

struct Client {
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    next: u64,
}

impl Client {
    /// Sends a request and waits (20 s at most) for its answer.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let message =
            json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        writeln!(self.stdin, "{message}").unwrap();
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(20))
            .expect("an answer");
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["id"], self.next, "{answer}");
        answer
    }

    /// Calls a tool; its result.
    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))["result"].clone()
    }
}

/// `ralph --mcp` in `env`, initialized as a client does it.
fn start(env: &TestEnv) -> (std::process::Child, Client) {
    let mut server = env
        .ralph()
        .arg("--mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = server.stdout.take().unwrap();
    let (send, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = send.send(line);
        }
    });
    let mut client = Client {
        stdin: server.stdin.take().unwrap(),
        lines,
        next: 0,
    };
    let init = client.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}),
    );
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    writeln!(
        client.stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    (server, client)
}

fn structured(result: &Value) -> &Value {
    &result["structuredContent"]
}

#[test]
fn another_agent_adds_a_task_starts_a_run_watches_it_and_stops_it() {
    let env = TestEnv::new();
    env.agent_script(Some(1), "touch \"$dir/ready\"; sleep 30\n");
    let (mut server, mut client) = start(&env);
    let tools = client.request("tools/list", json!({}));
    let tools = tools["result"]["tools"].as_array().unwrap().clone();
    assert_eq!(tools.len(), 10);
    let add = tools
        .iter()
        .find(|tool| tool["name"] == "ralph_add_task")
        .unwrap();
    assert_eq!(add["inputSchema"]["required"], json!(["text"]));

    let added = client.call(
        "ralph_add_task",
        json!({"text": "Write the docs", "id": "docs"}),
    );
    assert_eq!(added["isError"], false, "{added}");
    assert_eq!(structured(&added)["number"], 1);
    let listed = client.call("ralph_list_tasks", json!({}));
    assert_eq!(
        structured(&listed)["tasks"][0]["text"],
        "Write the docs",
        "{listed}"
    );
    assert_eq!(structured(&listed)["tasks"][0]["id"], "docs");

    let started = client.call(
        "ralph_start",
        json!({"prompt": "Write the docs", "args": ["--pause", "0"]}),
    );
    assert_eq!(started["isError"], false, "{started}");
    assert!(structured(&started)["pid"].is_number());
    wait_for_file(&env.agent_dir().join("ready"), Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = client.call("ralph_status", json!({}));
        if structured(&status)["loop"]["state"] == "running" {
            break;
        }
        assert!(Instant::now() < deadline, "never running: {status}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let again = client.call("ralph_start", json!({"prompt": "Something else"}));
    assert_eq!(again["isError"], true, "{again}");
    let stopped = client.call("ralph_stop", json!({}));
    assert_eq!(stopped["isError"], false, "{stopped}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = client.call("ralph_status", json!({}));
        if structured(&status)["loop"]["state"] == "stopped" {
            break;
        }
        assert!(Instant::now() < deadline, "never stopped: {status}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(env.ralph_file("mcp-run.log")).unwrap();
    assert!(log.contains("Iteration 1"), "{log}");
    // What the agent printed, and a hint for the next prompt.
    let printed = client.call("ralph_log", json!({"which": "last"}));
    assert_eq!(printed["isError"], false, "{printed}");
    assert!(
        printed["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("fake agent call 1"),
        "{printed}"
    );
    let hint = client.call("ralph_add_context", json!({"text": "Use the blue palette"}));
    assert_eq!(hint["isError"], false, "{hint}");
    let context = std::fs::read_to_string(env.ralph_file("ralph-context.md")).unwrap();
    assert!(context.contains("Use the blue palette"), "{context}");
    let unknown_task = client.call("ralph_add_context", json!({"text": "x", "task": "nope"}));
    assert_eq!(unknown_task["isError"], true, "{unknown_task}");
    // A tool that does not exist is the request's error; the server goes on.
    let unknown = client.request(
        "tools/call",
        json!({"name": "ralph_nothing", "arguments": {}}),
    );
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let status = client.call("ralph_status", json!({}));
    assert_eq!(status["isError"], false);
    drop(client);
    let output = wait_output(&mut server, Duration::from_secs(10));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

#[test]
fn another_agent_plans_a_spec_into_the_task_list() {
    let env = crate::planning::planning_env(&[crate::planning::PLAN]);
    let (mut server, mut client) = start(&env);
    let empty = client.call("ralph_plan", json!({}));
    assert_eq!(empty["isError"], true, "{empty}");
    let planned = client.call(
        "ralph_plan",
        json!({"spec": "Build a todo API: a schema, the endpoints, and their docs."}),
    );
    assert_eq!(planned["isError"], false, "{planned}");
    let said = planned["content"][0]["text"].as_str().unwrap();
    assert!(said.contains("Planned 3 tasks"), "{said}");
    let listed = client.call("ralph_list_tasks", json!({}));
    let tasks = structured(&listed)["tasks"].as_array().unwrap();
    let ids: Vec<&str> = tasks
        .iter()
        .map(|task| task["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["schema", "docs", "api"], "{listed}");
    // A list with tasks is not planned over.
    let again = client.call("ralph_plan", json!({"spec": "Something else"}));
    assert_eq!(again["isError"], true, "{again}");
    drop(client);
    let output = wait_output(&mut server, Duration::from_secs(10));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

/// Audit 8: every tool checks its arguments against its own schema before it does anything:
/// a list where a string is asked, an id ralph would know by another name, an option `ralph`
/// does not take — one clear line, `isError`, nothing written or started.
#[test]
fn tools_refuse_what_their_schema_does_not_take_and_write_nothing() {
    let env = TestEnv::new();
    let (mut server, mut client) = start(&env);
    // No task file yet: an empty list, not null.
    let empty = client.call("ralph_list_tasks", json!({}));
    assert_eq!(empty["isError"], false, "{empty}");
    assert_eq!(structured(&empty)["tasks"], json!([]), "{empty}");
    let refused = |client: &mut Client, tool: &str, arguments: Value, says: &str| {
        let answer = client.call(tool, arguments);
        assert_eq!(answer["isError"], true, "{answer}");
        let text = answer["content"][0]["text"].as_str().unwrap().to_owned();
        assert!(text.contains(says), "{text}");
        assert_eq!(text.lines().count(), 1, "{text}");
    };
    refused(
        &mut client,
        "ralph_add_task",
        json!({"text": "MCP task", "blocked_by": ["a", "b"]}),
        "\"blocked_by\" must be a string",
    );
    refused(
        &mut client,
        "ralph_add_task",
        json!({"text": "x", "id": "bad id!"}),
        "'bad id!' is not a task id",
    );
    refused(
        &mut client,
        "ralph_add_task",
        json!({"text": "x", "priority": 1}),
        "ralph_add_task has no argument \"priority\"",
    );
    refused(
        &mut client,
        "ralph_log",
        json!({"which": 3}),
        "\"which\" must be a string",
    );
    assert!(
        !env.ralph_file("ralph-tasks.md").exists(),
        "nothing was written"
    );
    refused(
        &mut client,
        "ralph_start",
        json!({"prompt": "bad", "args": ["--frobnicate"]}),
        "--frobnicate",
    );
    refused(
        &mut client,
        "ralph_start",
        json!({"prompt": "bad", "args": ["--max-iterations", "many"]}),
        "many",
    );
    assert!(
        !env.ralph_file("mcp-run.log").exists(),
        "nothing was started"
    );
    assert_eq!(env.agent_calls(), 0);
    drop(client);
    let output = wait_output(&mut server, Duration::from_secs(10));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    // The command line refuses such an id the same way.
    let cli = env.run(&["--add-task", "cli bad id", "--id", "other bad!"]);
    cli.assert_code(1);
    assert!(
        cli.stderr().contains("--id: 'other bad!' is not a task id"),
        "{}",
        cli.stderr()
    );
    let blockers = env.run(&["--add-task", "x", "--blocked-by", "a,,b c"]);
    blockers.assert_code(1);
    assert!(
        blockers.stderr().contains("'b c' is not a task id"),
        "{}",
        blockers.stderr()
    );
    assert!(!env.ralph_file("ralph-tasks.md").exists());
}

#[test]
fn another_agent_lists_the_questions_waiting_and_answers_one() {
    let ask = json!({"question": "Which store?", "options": ["SQLite", "Postgres"]});
    let env = crate::asking_fixture::asking_env("ralph_ask", &ask);
    let mut run = crate::asking_fixture::spawn_loop(&env, &crate::asking_fixture::LOOP);
    let id = crate::asking_fixture::waiting_question(&env.ralph_file(""));
    let (mut server, mut client) = start(&env);
    let listed = client.call("ralph_questions", json!({}));
    let questions = &structured(&listed)["questions"];
    assert_eq!(questions[0]["id"], id.as_str(), "{listed}");
    assert_eq!(questions[0]["status"], "pending", "{listed}");
    let unknown = client.call("ralph_answer", json!({"id": "q000000", "answer": "1"}));
    assert_eq!(unknown["isError"], true, "{unknown}");
    let answered = client.call("ralph_answer", json!({"id": id, "answer": "2"}));
    assert_eq!(
        structured(&answered)["answer"]["text"],
        "Postgres",
        "{answered}"
    );
    assert_eq!(structured(&answered)["answer"]["by"], "mcp", "{answered}");
    crate::asking_fixture::finished_well(&mut run);
    assert!(
        env.agent_file("mcp-out.1")
            .contains("A person answered: Postgres")
    );
    drop(client);
    let output = wait_output(&mut server, Duration::from_secs(10));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}
