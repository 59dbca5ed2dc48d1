//! Agents that speak ACP (`--agent acp --acp-command …`, the presets, `protocol = "acp"` in a
//! config), driven against a fake ACP agent (`tests/fixtures/fake-acp-agent.sh`).

use std::fs;
use std::time::Duration;

use serde_json::Value;

use crate::support::{TestEnv, interrupt, is_alive, wait_for_file, wait_output};

const FAKE_ACP_AGENT: &str = include_str!("../fixtures/fake-acp-agent.sh");

/// An environment whose `fake-acp` (and each of `names`) is the fake ACP agent.
fn acp_env(names: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_executable("fake-acp", FAKE_ACP_AGENT);
    for name in names {
        env.write_executable(name, FAKE_ACP_AGENT);
    }
    env
}

const ACP: [&str; 4] = ["--agent", "acp", "--acp-command", "fake-acp --stdio"];

/// The lines ralph sent call `n`, parsed.
fn received(env: &TestEnv, n: u32) -> Vec<Value> {
    env.agent_file(&format!("received.{n}"))
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn methods(messages: &[Value]) -> Vec<&str> {
    messages
        .iter()
        .filter_map(|message| message["method"].as_str())
        .collect()
}

#[test]
fn a_loop_on_an_acp_agent_opens_a_session_per_iteration_and_ends_on_the_promise() {
    let env = acp_env(&[]);
    let mut args = ACP.to_vec();
    args.push("Write hello.txt");
    let run = env.run_loop_with(&args, |command| {
        command.env("FAKE_AGENT_COMPLETE_AT", "2");
    });
    run.assert_code(0);
    assert_eq!(env.agent_calls(), 2, "{}", run.stderr());
    assert_eq!(env.agent_argv(1), ["--stdio"]);
    for n in [1, 2] {
        let sent = received(&env, n);
        assert_eq!(
            methods(&sent),
            ["initialize", "session/new", "session/prompt"],
            "call {n}: one session, one prompt"
        );
        assert_eq!(sent[0]["params"]["protocolVersion"], 1);
        let offered = &sent[0]["params"]["clientCapabilities"];
        assert_eq!(offered["terminal"], false);
        assert_eq!(offered["fs"]["readTextFile"], false);
        assert_eq!(offered["fs"]["writeTextFile"], false);
        // ralph's tools are the one MCP server, bound to this iteration.
        let servers = sent[1]["params"]["mcpServers"].as_array().unwrap();
        assert_eq!(servers.len(), 1, "{servers:?}");
        assert_eq!(servers[0]["name"], "ralph");
        assert_eq!(servers[0]["args"][0], "__agent-tools");
        assert_eq!(servers[0]["env"], serde_json::json!([]));
        let iteration = servers[0]["args"].to_string();
        assert!(
            iteration.contains(&format!("\"--iteration\",\"{n}\"")),
            "{iteration}"
        );
        let cwd = sent[1]["params"]["cwd"].as_str().unwrap();
        assert_eq!(
            fs::canonicalize(cwd).unwrap(),
            fs::canonicalize(env.work()).unwrap()
        );
        let text = sent[2]["params"]["prompt"][0]["text"].as_str().unwrap();
        assert!(text.contains("Write hello.txt"), "{text}");
        assert_eq!(sent[2]["params"]["sessionId"], format!("s{n}"));
    }
    let stdout = run.stdout();
    assert!(stdout.contains("working"), "{stdout}");
    let history = env.history();
    let iterations = history["iterations"].as_array().unwrap();
    assert_eq!(iterations.len(), 2);
    let last = &iterations[1];
    assert_eq!(last["completion_detected"], true, "{last}");
    assert_eq!(last["tokens"]["input"], 100, "{last}");
    assert_eq!(last["tokens"]["output"], 20);
    assert_eq!(last["stop_reason"], "end_turn");
    assert_eq!(last["session_id"], "s2");
    assert_eq!(last["tools_used"]["edit"], 1, "{last}");
    assert_eq!(last["agent"], "acp");
}

#[test]
fn permissions_are_allowed_once_or_rejected_and_unknown_requests_refused() {
    let env = acp_env(&[]);
    env.agent_script(None, "ask\nunknown\n");
    let mut args = ACP.to_vec();
    args.extend(["Write hello.txt", "--max-iterations", "1"]);
    let complete = |command: &mut std::process::Command| {
        command.env("FAKE_AGENT_COMPLETE_AT", "1");
    };
    env.run_loop_with(&args, complete).assert_code(0);
    let permission = env.agent_file("permission.1");
    assert!(
        permission.contains(r#""optionId":"once""#) && permission.contains(r#""id":70"#),
        "{permission}"
    );
    let unknown: Value = serde_json::from_str(env.agent_file("unknown.1").trim()).unwrap();
    assert_eq!(unknown["id"], 71);
    assert_eq!(unknown["error"]["code"], -32601);
    // The turn went on after both.
    assert_eq!(env.history()["iterations"][0]["stop_reason"], "end_turn");
    args.push("--no-allow-all");
    env.run_loop_with(&args, complete).assert_code(0);
    let permission = env.agent_file("permission.2");
    assert!(permission.contains(r#""optionId":"no""#), "{permission}");
}

#[test]
fn an_agent_that_dies_mid_turn_fails_the_iteration_naming_it() {
    let env = acp_env(&[]);
    env.agent_script(None, "say \"half an answer\"\nexit 3\n");
    let mut args = ACP.to_vec();
    args.extend(["Write hello.txt", "--max-iterations", "1"]);
    let run = env.run_loop(&args);
    let stderr = run.stderr();
    let line = stderr
        .lines()
        .find(|line| line.contains("exited before answering the prompt"))
        .unwrap_or_else(|| panic!("no failure line: {stderr}\n{}", run.stdout()));
    assert!(line.contains("acp"), "{line}");
    let record = &env.history()["iterations"][0];
    assert_eq!(record["failure"]["kind"], "agent error", "{record}");
}

/// The turn hangs until ralph cancels it; the agent leaves a child behind that must not outlive
/// the iteration.
const HANG: &str = "answered=1\nsleep 300 &\necho $! > \"$dir/child.$n\"\ntouch \"$dir/ready\"\n";

#[test]
fn a_timeout_cancels_the_turn_then_ends_the_agent_and_its_children() {
    let env = acp_env(&[]);
    env.agent_script(None, HANG);
    let mut args = ACP.to_vec();
    args.extend([
        "Write hello.txt",
        "--max-iterations",
        "1",
        "--iteration-timeout",
        "1s",
    ]);
    let run = env.run_loop(&args);
    assert!(
        env.agent_dir().join("cancelled.1").exists(),
        "{}",
        run.stderr()
    );
    let child: i32 = env.agent_file("child.1").trim().parse().unwrap();
    assert!(!is_alive(child), "the agent's child outlived the iteration");
    let record = &env.history()["iterations"][0];
    assert_eq!(record["failure"]["kind"], "timeout", "{record}");
    assert_eq!(record["stop_reason"], "cancelled");
}

#[test]
fn ctrl_c_cancels_the_turn_and_leaves_no_agent() {
    let env = acp_env(&[]);
    env.agent_script(None, HANG);
    let mut args = ACP.to_vec();
    args.extend(["Write hello.txt", "--pause", "0"]);
    let mut run = env
        .ralph()
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&env.agent_dir().join("ready"), Duration::from_secs(30));
    interrupt(&run);
    let output = wait_output(&mut run, Duration::from_secs(30));
    assert_eq!(output.status.code(), Some(130));
    assert!(env.agent_dir().join("cancelled.1").exists());
    let child: i32 = env.agent_file("child.1").trim().parse().unwrap();
    assert!(!is_alive(child));
}

#[test]
fn a_600_kb_notification_is_read_without_trouble() {
    let env = acp_env(&[]);
    env.agent_script(
        None,
        r#"big=$(head -c 614400 /dev/zero | tr '\0' d)
printf '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"x","description":"%s"}]}}}\n' "$big"
"#,
    );
    let mut args = ACP.to_vec();
    args.push("Write hello.txt");
    let run = env.run_loop_with(&args, |command| {
        command.env("FAKE_AGENT_COMPLETE_AT", "1");
    });
    run.assert_code(0);
    let stdout = run.stdout();
    assert!(!stdout.contains("dddddddddd"), "never shown as text");
    assert!(!stdout.contains("skipped an agent event"), "{stdout}");
    assert_eq!(env.history()["iterations"][0]["completion_detected"], true);
}

#[test]
fn a_config_agent_with_protocol_acp_and_the_presets_start_their_commands() {
    let env = acp_env(&["gemini", "opencode"]);
    fs::create_dir_all(env.ralph_file("")).unwrap();
    fs::write(
        env.ralph_file("config.toml"),
        "[agents.mine]\nprotocol = \"acp\"\ncommand = [\"fake-acp\", \"--from-config\"]\nmodel_args = [\"--model\", \"{model}\"]\n",
    )
    .unwrap();
    let run = |agent: &str| {
        env.run_loop_with(
            &[
                "--agent",
                agent,
                "--model",
                "m1",
                "Write hello.txt",
                "--max-iterations",
                "1",
            ],
            |command| {
                command.env("FAKE_AGENT_COMPLETE_AT", "1");
            },
        )
    };
    run("mine").assert_code(0);
    assert_eq!(env.agent_argv(1), ["--from-config", "--model", "m1"]);
    run("gemini-acp").assert_code(0);
    assert_eq!(env.agent_argv(2), ["--acp", "--skip-trust", "-m", "m1"]);
    run("opencode-acp").assert_code(0);
    assert_eq!(env.agent_argv(3), ["acp"]);
    for n in 1..=3 {
        assert_eq!(
            methods(&received(&env, n)),
            ["initialize", "session/new", "session/prompt"]
        );
    }
}

#[test]
fn acp_mistakes_are_one_line_usage_errors() {
    let env = acp_env(&[]);
    let without = env.run(&["--agent", "acp", "x"]);
    without.assert_code(1);
    assert!(
        without.stderr().contains("--acp-command"),
        "{}",
        without.stderr()
    );
    let unclosed = env.run(&["--agent", "acp", "--acp-command", "fake-acp 'x", "x"]);
    unclosed.assert_code(1);
    assert!(
        unclosed.stderr().contains("quote is never closed"),
        "{}",
        unclosed.stderr()
    );
    fs::create_dir_all(env.ralph_file("")).unwrap();
    fs::write(
        env.ralph_file("config.toml"),
        "[agents.gemini-acp]\ncommand = \"x\"\n",
    )
    .unwrap();
    let taken = env.run(&["x"]);
    taken.assert_code(1);
    assert!(
        taken.stderr().contains("is a built-in agent"),
        "{}",
        taken.stderr()
    );
}

#[test]
fn an_agent_that_lingers_after_its_turn_is_ended_and_the_iteration_counts() {
    let env = acp_env(&[]);
    // It answers, then keeps running (and holds its output open) instead of exiting.
    env.agent_script(
        None,
        "say \"All done. <promise>COMPLETE</promise>\"\nend_turn\nanswered=1\nsleep 300 &\necho $! > \"$dir/child.$n\"\nsleep 300\n",
    );
    let mut args = ACP.to_vec();
    args.push("Write hello.txt");
    let started = std::time::Instant::now();
    let run = env.run_loop(&args);
    run.assert_code(0);
    assert!(started.elapsed() < Duration::from_secs(30));
    let child: i32 = env.agent_file("child.1").trim().parse().unwrap();
    assert!(!is_alive(child), "the agent's child outlived the iteration");
    let record = &env.history()["iterations"][0];
    assert_eq!(record["exit_code"], 0, "{record}");
    assert_eq!(record["completion_detected"], true);
    assert!(record.get("failure").is_none(), "{record}");
}

#[test]
fn parallel_tasks_in_a_sandbox_each_talk_to_their_own_acp_agent_in_their_worktree() {
    if !crate::sandbox::bwrap_works() {
        return;
    }
    let env = acp_env(&[]);
    env.agent_script(None, "pwd >> \"$dir/cwds\"\necho done > \"acp-$$.txt\"\n");
    fs::create_dir_all(env.ralph_file("")).unwrap();
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [ ] Alpha\n  - id: alpha\n- [ ] Bravo\n  - id: bravo\n",
    )
    .unwrap();
    let bin = env.bin().to_string_lossy().into_owned();
    let agent = format!("{}:rw", env.agent_dir().display());
    let mut args = ACP.to_vec();
    args.extend([
        "Build",
        "--parallel",
        "2",
        "--sandbox",
        "bwrap",
        "--sandbox-mount",
        &bin,
        "--sandbox-mount",
        &agent,
        "--sandbox-env",
        "FAKE_AGENT_DIR",
        "--sandbox-env",
        "FAKE_AGENT_COMPLETE_AT",
        "--sandbox-env",
        "FAKE_AGENT_PROMISE",
    ]);
    let run = env.run_loop_with(&args, |command| {
        command
            .env("FAKE_AGENT_COMPLETE_AT", "1")
            .env("FAKE_AGENT_PROMISE", "READY_FOR_NEXT_TASK");
    });
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let mut cwds: Vec<String> = env
        .agent_file("cwds")
        .lines()
        .map(|line| line.rsplit('/').next().unwrap().to_owned())
        .collect();
    cwds.sort();
    assert_eq!(cwds, ["alpha", "bravo"], "each in its task's worktree");
    // Each session was opened in its task's worktree.
    let mut sessions: Vec<String> = fs::read_dir(env.agent_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().contains("received."))
        .flat_map(|path| {
            fs::read_to_string(path)
                .unwrap()
                .lines()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .filter(|message| message["method"] == "session/new")
                .map(|message| message["params"]["cwd"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    sessions.sort();
    let worktrees = env.work().join(".ralph/worktrees");
    let expected: Vec<String> = ["alpha", "bravo"]
        .iter()
        .map(|id| worktrees.join(id).to_string_lossy().into_owned())
        .collect();
    assert_eq!(sessions, expected);
    let merged = env.git(&["log", "--name-only", "--format="]);
    assert_eq!(
        merged
            .lines()
            .filter(|line| line.starts_with("acp-"))
            .count(),
        2,
        "{merged}"
    );
}

#[test]
fn an_agent_that_stops_reading_a_large_prompt_still_times_out() {
    let env = acp_env(&[]);
    // Once its session is open the agent reads nothing more: the 300 KB prompt fills the pipe.
    fs::write(
        env.agent_dir().join("on-new"),
        "touch \"$dir/ready\"\nsleep 300 &\necho $! > \"$dir/child.$n\"\nwait\n",
    )
    .unwrap();
    let prompt = env.path().join("prompt.md");
    fs::write(&prompt, "Write hello.txt. ".repeat(20_000)).unwrap();
    let prompt = prompt.to_string_lossy().into_owned();
    let mut args = ACP.to_vec();
    args.extend([
        "--prompt-file",
        &prompt,
        "--max-iterations",
        "1",
        "--iteration-timeout",
        "500ms",
        "--kill-grace",
        "200ms",
    ]);
    let run = env.run_loop(&args);
    run.assert_code(2);
    let record = &env.history()["iterations"][0];
    assert_eq!(record["failure"]["kind"], "timeout", "{record}");
    let child: i32 = env.agent_file("child.1").trim().parse().unwrap();
    assert!(!is_alive(child), "the agent's child outlived the iteration");
}
