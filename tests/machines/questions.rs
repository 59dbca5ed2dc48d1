//! `--worker`s' agents ask (`ralph_ask`): each question waits on the remote, and a person
//! answers it from another clone.

use std::fs;
use std::time::Duration;

use crate::fleet::{finish, machine, machines, remote, start_worker};
use crate::support::{TestEnv, wait_until};

const FAKE_MCP_AGENT: &str = include_str!("../fixtures/fake-mcp-agent.sh");

/// `ralph ARGS` run in clone `name`: its exit code and stdout.
fn ralph_in(env: &TestEnv, name: &str, args: &[&str]) -> (Option<i32>, String) {
    let output = env
        .ralph()
        .current_dir(machine(env, name))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    (output.status.code(), format!("{stdout}{stderr}"))
}

#[test]
fn each_workers_question_is_answered_from_the_other_workers_clone() {
    let env = machines(
        "- [ ] Pick the store\n  - id: store\n- [ ] Pick the queue\n  - id: queue\n",
        &["m1", "m2"],
    );
    env.write_executable("claude", FAKE_MCP_AGENT);
    let ask = serde_json::json!({"name": "ralph_ask", "arguments": {"question": "Which one?", "options": ["the first", "the second"]}});
    fs::write(env.agent_dir().join("call"), ask.to_string()).unwrap();
    fs::write(env.agent_dir().join("promise"), "READY_FOR_NEXT_TASK").unwrap();
    let args = ["--agent", "claude-code", "--output-format", "text"];
    let workers = [
        start_worker(&env, "m1", &args),
        start_worker(&env, "m2", &args),
    ];
    // Both questions wait on the remote.
    let bare = remote(&env);
    let mut ids: Vec<String> = Vec::new();
    wait_until(
        Duration::from_secs(30),
        "two questions on the remote",
        || {
            let refs = env.git(&[
                "-C",
                &bare,
                "for-each-ref",
                "--format=%(refname)",
                "refs/ralph/fleet/questions/",
            ]);
            ids = refs
                .lines()
                .filter_map(|line| line.rsplit('/').next())
                .map(str::to_owned)
                .collect();
            ids.len() == 2
        },
    );
    let (code, board) = ralph_in(&env, "m1", &["--status", "--remote"]);
    assert_eq!(code, Some(0), "{board}");
    for id in &ids {
        assert!(board.contains(&format!("❓ Question {id}")), "{board}");
        assert!(
            board.contains(&format!("ralph --answer {id} \"…\" --remote origin")),
            "{board}"
        );
    }
    // Each question is answered from the clone of the worker that did not ask it.
    for id in &ids {
        let asked_in_m1 = machine(&env, "m1")
            .join(format!(".ralph/questions/{id}.json"))
            .exists();
        let other = if asked_in_m1 { "m2" } else { "m1" };
        let (code, said) = ralph_in(&env, other, &["--answer", id, "2", "--remote", "origin"]);
        assert_eq!(code, Some(0), "{said}");
        assert!(said.contains("\"the second\""), "{said}");
    }
    for worker in workers {
        let (code, stdout, stderr) = finish(worker);
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        assert!(stdout.contains("answered from another clone"), "{stdout}");
    }
    for n in 1..=env.agent_calls() {
        let result = env.agent_file(&format!("mcp-out.{n}"));
        assert!(result.contains("A person answered: the second"), "{result}");
    }
    let list = env.git(&["-C", &bare, "show", "main:.ralph/ralph-tasks.md"]);
    assert_eq!(list.matches("- [x]").count(), 2, "{list}");
    // Answering fetched into refs of its own, and left none behind.
    for name in ["m1", "m2"] {
        let clone = machine(&env, name).display().to_string();
        let left = env.git(&["-C", &clone, "for-each-ref", "refs/ralph/"]);
        assert!(!left.contains("answering-"), "{left}");
    }
    // Once answered, the questions leave the remote; a second answer is refused, saying why.
    let left = env.git(&["-C", &bare, "for-each-ref", "refs/ralph/fleet/questions/"]);
    assert_eq!(left.trim(), "", "{left}");
    let (code, said) = ralph_in(
        &env,
        "m1",
        &["--answer", &ids[0], "1", "--remote", "origin"],
    );
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("no question has that id"), "{said}");
}
