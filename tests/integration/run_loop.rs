//! The loop: completion, limits, min iterations, prompt delivery, promise detection, output.

use std::fs;

use crate::support::TestEnv;

#[test]
fn promise_on_iteration_3_ends_the_loop_after_3_runs_with_3_commits() {
    let env = TestEnv::new();
    let edit = env.work().join("notes.txt");
    let run = env.run_loop_with(&["Build a REST API"], |c| {
        c.env("FAKE_AGENT_COMPLETE_AT", "3")
            .env("FAKE_AGENT_EDIT", &edit);
    });
    run.assert_code(0);
    assert_eq!(env.agent_calls(), 3);
    assert_eq!(env.commit_count(), 1 + 3);
    assert!(!env.ralph_file("ralph-loop.state.json").exists());
    let history = env.history();
    assert_eq!(history["iterations"].as_array().unwrap().len(), 3);
    assert_eq!(history["iterations"][2]["completion_detected"], true);
    let stdout = run.stdout();
    assert!(
        stdout.contains("✅ Completion promise detected: <promise>COMPLETE</promise>"),
        "{stdout}"
    );
    assert!(stdout.contains("Task completed in 3 iterations"));
    assert!(
        stdout.contains("Loop ended: completed in 3 iterations"),
        "{stdout}"
    );
    assert_eq!(
        env.git(&["log", "-1", "--format=%s"]).trim(),
        "Ralph iteration 3: work in progress"
    );
}

#[test]
fn max_iterations_stops_with_exit_2_and_keeps_history() {
    let env = TestEnv::new();
    let run = env.run_loop(&["task", "--max-iterations", "2"]);
    run.assert_code(2);
    assert_eq!(env.agent_calls(), 2);
    assert_eq!(env.history()["iterations"].as_array().unwrap().len(), 2);
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(env.ralph_file("ralph-loop.state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        state["active"], false,
        "kept for --resume with a higher limit"
    );
    assert_eq!(state["stopReason"], "max iterations (2) reached");
    assert!(
        run.stdout()
            .contains("Max iterations (2) reached. Loop stopped.")
    );
    assert!(
        run.stdout()
            .contains("Loop ended: max iterations (2) reached"),
        "{}",
        run.stdout()
    );
}

#[test]
fn min_iterations_defers_an_early_promise() {
    let env = TestEnv::new();
    let run = env.run_loop_with(&["task", "--min-iterations", "3"], |c| {
        c.env("FAKE_AGENT_COMPLETE_AT", "1");
    });
    run.assert_code(0);
    assert_eq!(env.agent_calls(), 3);
    let deferred = run
        .stdout()
        .matches("minimum iterations (3) not yet reached")
        .count();
    assert_eq!(deferred, 2, "{}", run.stdout());
}

#[test]
fn completion_is_accepted_whatever_the_exit_code() {
    let env = TestEnv::new();
    let run = env.run_loop_with(&["task"], |c| {
        c.env("FAKE_AGENT_COMPLETE_AT", "1")
            .env("FAKE_AGENT_EXIT", "1");
    });
    run.assert_code(0);
    assert!(
        run.stderr().contains("OpenCode exited with code 1"),
        "{}",
        run.stderr()
    );
}

#[test]
fn opencode_argv_and_generated_config() {
    let env = TestEnv::new();
    env.run_loop(&[
        "do it",
        "--max-iterations",
        "1",
        "--model",
        "prov/model",
        "--no-plugins",
    ])
    .assert_code(2);
    let argv = env.agent_argv(1);
    assert_eq!(argv[..5], ["run", "--format", "json", "-m", "prov/model"]);
    assert_eq!(argv.len(), 6);
    assert!(argv[5].starts_with("# Ralph Wiggum Loop - Iteration 1"));
    assert!(argv[5].contains("## Your Task\n\ndo it"));
    let env_record = env.agent_file("env.1");
    let (path, content) = env_record.split_once('\n').unwrap();
    assert_eq!(
        path,
        env.ralph_file("ralph-opencode.config.json")
            .display()
            .to_string()
    );
    let config: serde_json::Value = serde_json::from_str(content).unwrap();
    assert_eq!(config["$schema"], "https://opencode.ai/config.json");
    assert_eq!(config["plugin"], serde_json::json!([]));
    assert_eq!(config["permission"]["bash"], "allow");
    assert_eq!(config["permission"].as_object().unwrap().len(), 15);
    // ralph's tools: a local MCP server, its command one list.
    let server = &config["mcp"]["ralph"];
    assert_eq!(server["type"], "local", "{config}");
    assert_eq!(server["enabled"], true);
    assert_eq!(server["command"][1], "__agent-tools", "{config}");
}

#[test]
fn opencode_without_allow_all_or_plugins_or_tools_gets_no_config() {
    let env = TestEnv::new();
    env.run_loop(&[
        "do it",
        "--max-iterations",
        "1",
        "--no-allow-all",
        "--no-agent-tools",
        "--output-format",
        "text",
    ])
    .assert_code(2);
    assert_eq!(env.agent_argv(1)[0], "run");
    assert_eq!(env.agent_argv(1).len(), 2);
    assert!(!env.agent_dir().join("env.1").exists());
}

#[test]
fn claude_code_argv() {
    let env = TestEnv::new();
    let run = env.run_loop(&[
        "do it",
        "--agent",
        "claude-code",
        "--max-iterations",
        "1",
        "--model",
        "sonnet",
        "--no-plugins",
    ]);
    run.assert_code(2);
    let argv = env.agent_argv(1);
    assert_eq!(argv[0], "-p");
    assert!(argv[1].starts_with("# Ralph Wiggum Loop"));
    assert_eq!(
        argv[2..8],
        [
            "--output-format",
            "stream-json",
            "--verbose",
            "--model",
            "sonnet",
            "--dangerously-skip-permissions"
        ]
    );
    // ralph's tools come last (both take several values): its MCP server, this iteration's.
    assert_eq!(argv[8], "--mcp-config");
    let config: serde_json::Value = serde_json::from_str(&argv[9]).unwrap();
    let server = &config["mcpServers"]["ralph"];
    assert_eq!(server["type"], "stdio");
    assert_eq!(server["args"][0], "__agent-tools", "{config}");
    assert!(
        server["args"].to_string().contains("\"--iteration\",\"1\""),
        "{config}"
    );
    assert_eq!(argv.len(), 10, "{argv:?}");
    assert!(!env.agent_dir().join("env.1").exists());
    assert_eq!(
        run.stderr()
            .matches("--no-plugins only applies to OpenCode")
            .count(),
        1
    );
}

#[test]
fn codex_argv_has_no_full_auto() {
    let env = TestEnv::new();
    env.run_loop(&[
        "do it",
        "--agent",
        "codex",
        "--max-iterations",
        "1",
        "--",
        "--extra",
        "x",
    ])
    .assert_code(2);
    let argv = env.agent_argv(1);
    assert_eq!(
        argv[..7],
        [
            "exec",
            "--json",
            "--sandbox",
            "workspace-write",
            "--skip-git-repo-check",
            "--extra",
            "x"
        ]
    );
    // ralph's tools, as configuration overrides (TOML values), then the prompt.
    assert_eq!(argv[7], "-c");
    assert!(
        argv[8].starts_with("mcp_servers.ralph.command=\""),
        "{}",
        argv[8]
    );
    assert_eq!(argv[9], "-c");
    assert!(
        argv[10].starts_with("mcp_servers.ralph.args=[\"__agent-tools\","),
        "{}",
        argv[10]
    );
    assert_eq!(argv[11], "-c");
    assert_eq!(
        argv[12],
        "mcp_servers.ralph.default_tools_approval_mode=\"approve\""
    );
    assert!(argv[13].starts_with("# Ralph Wiggum Loop"));
    env.run_loop(&[
        "do it",
        "--agent",
        "codex",
        "--max-iterations",
        "1",
        "--no-allow-all",
        "--output-format",
        "text",
    ])
    .assert_code(2);
    assert_eq!(env.agent_argv(2)[0], "exec");
    assert_eq!(env.agent_argv(2).len(), 8);
}

#[test]
fn piped_stdin_and_prompt_files_deliver_the_prompt() {
    let env = TestEnv::new();
    fs::write(env.work().join("prompt.md"), "Prompt from a file\n").unwrap();
    let input = fs::read(env.work().join("prompt.md")).unwrap();
    env.run_piped(
        &["--pause", "0", "--max-iterations", "1", "and words"],
        &input,
        |_| {},
    )
    .assert_code(2);
    assert!(
        env.agent_prompt(1)
            .contains("## Your Task\n\nPrompt from a file\nand words"),
        "{}",
        env.agent_prompt(1)
    );

    let mut child = env
        .ralph()
        .args(["--pause", "0", "--max-iterations", "1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"Piped prompt").unwrap();
    let output = crate::signals::wait_output(&mut child, std::time::Duration::from_secs(30));
    assert_eq!(output.status.code(), Some(2));
    assert!(
        env.agent_prompt(2)
            .contains("## Your Task\n\nPiped prompt\n")
    );

    env.run_loop(&["--max-iterations", "1", "--prompt-file", "prompt.md"])
        .assert_code(2);
    assert!(
        env.agent_prompt(3)
            .contains("## Your Task\n\nPrompt from a file\n")
    );
    let run = env.run_loop(&["--max-iterations", "1", "prompt.md"]);
    assert!(
        env.agent_prompt(4)
            .contains("## Your Task\n\nPrompt from a file\n")
    );
    assert!(
        run.stdout()
            .contains("Task: prompt.md\nPreview: Prompt from a file"),
        "{}",
        run.stdout()
    );
}

#[test]
fn a_300_kb_prompt_reaches_every_agent_intact() {
    let env = TestEnv::new();
    let body: String = (0..6000)
        .map(|i| format!("line {i} of a very long prompt.\n"))
        .collect();
    assert!(body.len() > 150_000);
    fs::write(env.work().join("big.md"), body.repeat(2)).unwrap();
    for (n, agent) in ["opencode", "claude-code", "codex"].into_iter().enumerate() {
        let n = u32::try_from(n).unwrap() + 1;
        env.run_loop(&["--max-iterations", "1", "--agent", agent, "-f", "big.md"])
            .assert_code(2);
        assert_eq!(
            env.agent_file(&format!("prompt-source.{n}")).trim(),
            "stdin",
            "{agent}"
        );
        assert!(
            env.agent_prompt(n)
                .contains(&body.repeat(2).trim_end().to_owned()),
            "{agent}"
        );
    }
    assert_eq!(
        env.agent_argv(3).last().unwrap(),
        "-",
        "codex reads the prompt from stdin"
    );
}

#[test]
fn an_echoed_prompt_does_not_complete_but_a_final_promise_line_does() {
    let env = TestEnv::new();
    env.agent_script(Some(1), "echo 'Echo: when done print <promise>COMPLETE</promise> on its own line'; echo 'still working'")
        .agent_script(Some(2), "echo 'I will not print <promise>COMPLETE</promise> yet.'")
        .agent_script(Some(3), "printf 'Finished.\\n\\033[1mDone. <promise>COMPLETE</promise>\\033[0m\\n\\n'");
    let run = env.run_loop(&["task", "--max-iterations", "5"]);
    run.assert_code(0);
    assert_eq!(env.agent_calls(), 3);
}

#[test]
fn promise_anywhere_restores_the_old_rule() {
    let env = TestEnv::new();
    env.agent_script(
        None,
        "echo 'I will not print <promise>COMPLETE</promise> yet.'; echo more",
    );
    env.run_loop(&["task", "--max-iterations", "3", "--promise-anywhere"])
        .assert_code(0);
    assert_eq!(env.agent_calls(), 1);
}

#[test]
fn odd_output_does_not_break_the_loop() {
    let env = TestEnv::new();
    env.agent_script(
        None,
        "printf 'bad bytes \\377\\376 here\\nlone\\rcarriage\\n'; head -c 50000000 /dev/zero | tr '\\0' 'a'; echo; echo '<promise>COMPLETE</promise>'",
    );
    let run = env.run_loop(&["task", "--max-iterations", "2"]);
    run.assert_code(0);
    assert!(run.output.stdout.len() > 50_000_000);
}

#[test]
fn verbose_tools_and_compact_summary() {
    let env = TestEnv::new();
    env.agent_script(
        None,
        "echo '|  Bash ls'; echo '|  Bash pwd'; echo '|  Read a.rs'; echo 'text'",
    );
    let compact = env.run_loop(&["task", "--max-iterations", "1", "--output-format", "text"]);
    assert!(
        compact.stdout().contains("| Tools    Bash 2 • Read 1"),
        "{}",
        compact.stdout()
    );
    assert!(!compact.stdout().contains("|  Bash ls"));
    assert!(compact.stdout().contains("Tools:     Bash 2 • Read 1"));
    let verbose = env.run_loop(&[
        "task",
        "--max-iterations",
        "1",
        "--verbose-tools",
        "--output-format",
        "text",
    ]);
    assert!(
        verbose
            .stdout()
            .contains("|  Bash ls\n|  Bash pwd\n|  Read a.rs"),
        "{}",
        verbose.stdout()
    );
    let history = env.history();
    assert_eq!(history["iterations"][0]["tools_used"]["Bash"], 2);
}

#[test]
fn no_stream_prints_the_output_after_the_agent_exits() {
    let env = TestEnv::new();
    env.agent_script(None, "echo 'to stdout'; echo 'to stderr' >&2");
    let run = env.run_loop(&["task", "--max-iterations", "1", "--no-stream"]);
    run.assert_code(2);
    assert!(run.stdout().contains("to stdout"));
    assert!(run.stderr().contains("to stderr"));
}

#[test]
fn the_heartbeat_appears_after_a_silence() {
    let env = TestEnv::new();
    env.agent_script(None, "sleep 1");
    let run = env.run_loop_with(&["task", "--max-iterations", "1"], |c| {
        c.env("RALPH_HEARTBEAT_MS", "300");
    });
    assert!(
        run.stdout()
            .contains("⏳ working... elapsed 0:00 · last activity 0:0"),
        "{}",
        run.stdout()
    );
}

#[test]
fn struggle_warning_after_three_idle_short_iterations() {
    let env = TestEnv::new();
    let run = env.run_loop(&["task", "--max-iterations", "3"]);
    let stdout = run.stdout();
    assert_eq!(
        stdout.matches("⚠️  Potential struggle detected:").count(),
        1,
        "{stdout}"
    );
    assert!(stdout.contains("   - No file changes in 3 iterations"));
    assert!(stdout.contains("   - 3 very short iterations"));
}
