//! `--worker`s' agents ask (`ralph_ask`): each question waits on the remote, and a person
//! answers it from another clone; a worker stopped while its agent asks takes its question off
//! the remote, and started again asks anew.

use std::fs;
use std::time::Duration;

use crate::fleet::{finish, machine, machines, remote, start_worker};
use crate::support::{TestEnv, wait_until};

const FAKE_MCP_AGENT: &str = include_str!("../fixtures/fake-mcp-agent.sh");

/// Every machine's agent (Claude Code, faked) calls `ralph_ask` with `arguments`.
fn agents_ask(env: &TestEnv, arguments: &serde_json::Value) {
    env.write_executable("claude", FAKE_MCP_AGENT);
    let ask = serde_json::json!({"name": "ralph_ask", "arguments": arguments});
    fs::write(env.agent_dir().join("call"), ask.to_string()).unwrap();
}

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

/// The ids of the questions on the remote `bare` now.
fn question_ids(env: &TestEnv, bare: &str) -> Vec<String> {
    let refs = env.git(&[
        "-C",
        bare,
        "for-each-ref",
        "--format=%(refname)",
        "refs/ralph/fleet/questions/",
    ]);
    (refs.lines())
        .filter_map(|line| line.rsplit('/').next())
        .map(str::to_owned)
        .collect()
}

/// The ids of the `count` questions waiting on the remote `bare`, waited for.
fn questions_on(env: &TestEnv, bare: &str, count: usize) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    wait_until(
        Duration::from_secs(30),
        "the questions on the remote",
        || {
            ids = question_ids(env, bare);
            ids.len() == count
        },
    );
    ids
}

/// A `--json` worker's output tells its question asked and answered from another clone.
fn told_in_json(stdout: &str) {
    let events: Vec<serde_json::Value> = (stdout.lines())
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let answered = (events.iter())
        .find(|event| event["event"] == "question_answered")
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(answered["by"], "remote", "{answered}");
    assert_eq!(answered["answer"], "the second", "{answered}");
    assert!(
        events
            .iter()
            .any(|event| event["event"] == "question_asked"),
        "{stdout}"
    );
}

#[test]
fn each_workers_question_is_answered_from_the_other_workers_clone() {
    let env = machines(
        "- [ ] Pick the store\n  - id: store\n- [ ] Pick the queue\n  - id: queue\n",
        &["m1", "m2"],
    );
    agents_ask(
        &env,
        &serde_json::json!({"question": "Which one?", "options": ["the first", "the second"]}),
    );
    fs::write(env.agent_dir().join("promise"), "READY_FOR_NEXT_TASK").unwrap();
    let args = ["--agent", "claude-code", "--output-format", "text"];
    // The first worker's agent runs in the sandbox (where bwrap can run); the second speaks JSON.
    let sandbox = crate::support::sandboxed_agents(&env);
    let mut sandboxed = args.to_vec();
    if crate::support::bwrap_can_sandbox() {
        sandboxed.extend(sandbox.iter().map(String::as_str));
    }
    let mut json = args.to_vec();
    json.push("--json");
    let workers = [
        start_worker(&env, "m1", &sandboxed),
        start_worker(&env, "m2", &json),
    ];
    // Both questions wait on the remote.
    let bare = remote(&env);
    let ids = questions_on(&env, &bare, 2);
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
    let [first, second] = workers;
    let (code, stdout, stderr) = finish(first);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("answered from another clone"), "{stdout}");
    let (code, stdout, stderr) = finish(second);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    told_in_json(&stdout);
    // Every agent's call got its answer (one more run in the sandbox checks the agent first).
    let answers = (1..=env.agent_calls())
        .map(|n| fs::read_to_string(env.agent_dir().join(format!("mcp-out.{n}"))))
        .filter_map(Result::ok)
        .filter(|result| result.contains("A person answered: the second"))
        .count();
    assert_eq!(answers, 2);
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

#[test]
fn a_killed_workers_question_stops_waiting_once_its_claim_is_stale() {
    let env = machines("- [ ] Pick the store\n  - id: store\n", &["m1", "m2"]);
    agents_ask(&env, &serde_json::json!({"question": "Which one?"}));
    let ttl = ["--claim-ttl", "2s", "--claim-heartbeat", "500ms"];
    let mut args = vec!["--agent", "claude-code", "--output-format", "text"];
    args.extend(ttl);
    let mut worker = start_worker(&env, "m1", &args);
    let bare = remote(&env);
    let id = questions_on(&env, &bare, 1).remove(0);
    let status =
        |env: &TestEnv| ralph_in(env, "m2", &[&["--status", "--remote"][..], &ttl].concat());
    let (_, board) = status(&env);
    assert!(board.contains(&format!("❓ Question {id}")), "{board}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(worker.id()).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = worker.wait();
    // Nobody is asked what no worker waits for: once the claim is stale, the question is gone.
    wait_until(
        Duration::from_secs(20),
        "the question stops waiting",
        || {
            let (code, board) = status(&env);
            assert_eq!(code, Some(0), "{board}");
            !board.contains(&format!("❓ Question {id}"))
        },
    );
    // An answer to it is refused, saying why.
    let answer = [&["--answer", &id, "yes", "--remote", "origin"][..], &ttl].concat();
    let (code, said) = ralph_in(&env, "m2", &answer);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("its run stopped"), "{said}");
}

/// A worker stopped with Ctrl-C while its agent asks: the question stops waiting (not listed,
/// an answer refused) and the claim is given back; a worker started again takes the task, its
/// agent asks anew, and the answer from another clone reaches it.
#[test]
fn a_worker_stopped_while_its_agent_asks_is_started_again_and_asks_anew() {
    let env = machines("- [ ] Pick the store\n  - id: store\n", &["m1", "m2"]);
    agents_ask(
        &env,
        &serde_json::json!({"question": "Which one?", "options": ["the first", "the second"]}),
    );
    fs::write(env.agent_dir().join("promise"), "READY_FOR_NEXT_TASK").unwrap();
    let args = ["--agent", "claude-code", "--output-format", "text"];
    let worker = start_worker(&env, "m1", &args);
    let bare = remote(&env);
    let first = questions_on(&env, &bare, 1).remove(0);
    crate::support::interrupt(&worker);
    let (code, stdout, stderr) = finish(worker);
    assert_eq!(code, Some(130), "{stdout}\n{stderr}");
    let (code, board) = ralph_in(&env, "m2", &["--status", "--remote"]);
    assert_eq!(code, Some(0), "{board}");
    assert!(!board.contains(&format!("❓ Question {first}")), "{board}");
    let answer = ["--answer", first.as_str(), "1", "--remote", "origin"];
    let (code, said) = ralph_in(&env, "m2", &answer);
    assert_eq!(code, Some(1), "{said}");
    // The stopped worker took its question off the remote.
    assert!(said.contains("no question has that id"), "{said}");
    let left = env.git(&["-C", &bare, "for-each-ref", "refs/ralph/fleet/questions/"]);
    assert_eq!(left.trim(), "", "{left}");
    // Started again, the worker takes the task back and its agent asks anew.
    let worker = start_worker(&env, "m1", &args);
    let mut again = String::new();
    wait_until(Duration::from_secs(30), "the new question", || {
        let ids = question_ids(&env, &bare);
        again = ids.into_iter().find(|id| *id != first).unwrap_or_default();
        !again.is_empty()
    });
    let (code, said) = ralph_in(&env, "m2", &["--answer", &again, "2", "--remote", "origin"]);
    assert_eq!(code, Some(0), "{said}");
    let (code, stdout, stderr) = finish(worker);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let result = env.agent_file(&format!("mcp-out.{}", env.agent_calls()));
    assert!(result.contains("A person answered: the second"), "{result}");
    let list = env.git(&["-C", &bare, "show", "main:.ralph/ralph-tasks.md"]);
    assert!(list.contains("- [x] Pick the store"), "{list}");
}
