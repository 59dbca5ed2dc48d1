//! What the tests of the agents' tools share: a fake agent CLI that calls them
//! (`tests/fixtures/fake-mcp-agent.sh`), a loop started with it, the question it asks, the
//! journal. Included by the targets that test them.

use std::fs;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::{TestEnv, wait_output, wait_until};

pub(crate) const FAKE_MCP_AGENT: &str = include_str!("../fixtures/fake-mcp-agent.sh");

/// An environment whose `claude` calls the tool `name` with `arguments` through ralph's tools.
pub(crate) fn asking_env(name: &str, arguments: &Value) -> TestEnv {
    let env = TestEnv::new();
    env.write_executable("claude", FAKE_MCP_AGENT);
    let call = serde_json::json!({"name": name, "arguments": arguments});
    fs::write(env.agent_dir().join("call"), call.to_string()).unwrap();
    env
}

pub(crate) const LOOP: [&str; 8] = [
    "Build the API",
    "--agent",
    "claude-code",
    "--output-format",
    "text",
    "--max-iterations",
    "1",
    "--no-stream",
];

/// `ralph ARGS` in the background, its output piped.
pub(crate) fn spawn_loop(env: &TestEnv, args: &[&str]) -> std::process::Child {
    env.ralph()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `run` and checks it exited 0: its stdout.
pub(crate) fn finished_well(run: &mut std::process::Child) -> String {
    let output = wait_output(run, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    stdout
}

/// The id of the first question waiting in `.ralph/questions/`, waited for.
pub(crate) fn waiting_question(ralph_dir: &Path) -> String {
    waiting_questions(ralph_dir, 1).remove(0)
}

/// The ids of (at least) `count` questions in `.ralph/questions/` under `ralph_dir`, waited for.
pub(crate) fn waiting_questions(ralph_dir: &Path, count: usize) -> Vec<String> {
    let folder = ralph_dir.join("questions");
    let mut ids = Vec::new();
    wait_until(Duration::from_secs(30), "the questions wait", || {
        ids = fs::read_dir(&folder).map_or_else(
            |_| Vec::new(),
            |entries| {
                (entries.filter_map(Result::ok))
                    .filter_map(|entry| {
                        let name = entry.file_name().to_string_lossy().into_owned();
                        name.strip_suffix(".json").map(str::to_owned)
                    })
                    .collect()
            },
        );
        ids.len() >= count
    });
    ids
}

/// `POST /api/v1/answers` to the server at `port`, with its `token`: the status and body.
pub(crate) fn answer_on_page(port: u16, token: &str, body: &str) -> (u16, String) {
    let bearer = format!("Bearer {token}");
    let own = format!("http://127.0.0.1:{port}");
    let allowed = [("Authorization", bearer.as_str()), ("Origin", own.as_str())];
    crate::support::http(port, "POST", "/api/v1/answers", &allowed, body)
}

/// The journal's events named `name`.
pub(crate) fn journal(env: &TestEnv, name: &str) -> Vec<Value> {
    let text = fs::read_to_string(env.ralph_file("events.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["event"] == name)
        .collect()
}
