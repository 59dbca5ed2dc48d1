//! A `--worker`'s agent asks (`ralph_ask`): the question waits on the remote, and a person
//! answers it from another clone.

use std::fs;
use std::time::Duration;

use crate::fleet::{finish, machine, machines, remote, start_worker};
use crate::support::wait_until;

const FAKE_MCP_AGENT: &str = include_str!("../fixtures/fake-mcp-agent.sh");

#[test]
fn a_workers_question_is_answered_from_another_clone() {
    let env = machines("- [ ] Pick the store\n  - id: store\n", &["m1", "m2"]);
    env.write_executable("claude", FAKE_MCP_AGENT);
    let ask = serde_json::json!({"name": "ralph_ask", "arguments": {"question": "Which store?", "options": ["SQLite", "Postgres"]}});
    fs::write(env.agent_dir().join("call"), ask.to_string()).unwrap();
    fs::write(env.agent_dir().join("promise"), "READY_FOR_NEXT_TASK").unwrap();
    let args = ["--agent", "claude-code", "--output-format", "text"];
    let worker = start_worker(&env, "m1", &args);
    // The question waits on the remote: m2 sees it.
    let bare = remote(&env);
    let mut id = String::new();
    wait_until(
        Duration::from_secs(30),
        "the question on the remote",
        || {
            let refs = env.git(&[
                "-C",
                &bare,
                "for-each-ref",
                "--format=%(refname)",
                "refs/ralph/fleet/questions/",
            ]);
            id = refs
                .trim()
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            !id.is_empty()
        },
    );
    let board = env
        .ralph()
        .current_dir(machine(&env, "m2"))
        .args(["--status", "--remote"])
        .output()
        .unwrap();
    let board = String::from_utf8_lossy(&board.stdout).into_owned();
    assert!(
        board.contains(&format!("❓ Question {id}")) && board.contains("Which store?"),
        "{board}"
    );
    assert!(
        board.contains(&format!("ralph --answer {id} \"…\" --remote origin")),
        "{board}"
    );
    let answered = env
        .ralph()
        .current_dir(machine(&env, "m2"))
        .args(["--answer", &id, "2", "--remote", "origin"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&answered.stdout);
    assert_eq!(
        answered.status.code(),
        Some(0),
        "{said}\n{}",
        String::from_utf8_lossy(&answered.stderr)
    );
    assert!(said.contains("\"Postgres\""), "{said}");
    let (code, stdout, stderr) = finish(worker);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let result = env.agent_file("mcp-out.1");
    assert!(result.contains("A person answered: Postgres"), "{result}");
    assert!(stdout.contains("answered from another clone"), "{stdout}");
    // Once answered, the question leaves the remote.
    let left = env.git(&["-C", &bare, "for-each-ref", "refs/ralph/fleet/questions/"]);
    assert_eq!(left.trim(), "", "{left}");
    // A second answer is refused, saying why.
    let again = env
        .ralph()
        .current_dir(machine(&env, "m2"))
        .args(["--answer", &id, "1", "--remote", "origin"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
}
