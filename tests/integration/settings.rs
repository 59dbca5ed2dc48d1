//! Config files, environment variables, custom agents, rotation, machine-readable output, shell
//! completions, the doctor and dry runs.

use std::fs;
use std::process::Command;

use serde::Deserialize;

use crate::support::TestEnv;

fn write_config(env: &TestEnv, text: &str) {
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.ralph_file("config.toml"), text).unwrap();
}

#[test]
fn project_config_is_used_and_flags_and_environment_override_it() {
    let env = TestEnv::new();
    write_config(
        &env,
        "agent = \"codex\"\nmodel = \"gpt-9\"\nmax_iterations = 2\n",
    );
    env.run_loop(&["task"]).assert_code(2);
    assert_eq!(env.agent_calls(), 2);
    assert_eq!(
        env.agent_argv(1)[..4],
        ["exec", "--json", "--model", "gpt-9"]
    );

    env.run_loop(&["task", "--max-iterations", "1", "--model", "other"])
        .assert_code(2);
    assert_eq!(env.agent_calls(), 3, "the flag wins");
    assert_eq!(env.agent_argv(3)[3], "other");

    env.run_loop_with(&["task"], |c| {
        c.env("RALPH_MAX_ITERATIONS", "1");
    })
    .assert_code(2);
    assert_eq!(env.agent_calls(), 4, "the environment beats the file");

    let shown = env.run_with(&["--config"], |c| {
        c.env("RALPH_MODEL", "from-env");
    });
    shown.assert_code(0);
    let text = shown.stdout();
    assert!(text.contains("agent = \"codex\""), "{text}");
    assert!(text.contains(".ralph/config.toml:1"), "{text}");
    assert!(text.contains("model = \"from-env\""), "{text}");
    assert!(text.contains("# environment (RALPH_MODEL)"), "{text}");
    assert!(text.contains("pause = \"1s\""), "{text}");
    assert!(text.contains("# default"), "{text}");
    let flag = env.run(&["--config", "--max-iterations", "9"]).stdout();
    assert!(
        flag.contains("max_iterations = 9") && flag.contains("# command line"),
        "{flag}"
    );
}

#[test]
fn config_mistakes_name_the_file_line_and_key() {
    let env = TestEnv::new();
    write_config(&env, "model = \"m\"\n\nmax_iteration = 3\n");
    let run = env.run_loop(&["task"]);
    run.assert_code(1);
    assert!(
        run.stderr().contains(
            ".ralph/config.toml:3: unknown key `max_iteration` (did you mean `max_iterations`?)"
        ),
        "{}",
        run.stderr()
    );
    write_config(&env, "max_iterations = \"many\"\n");
    let run = env.run(&["--status"]);
    run.assert_code(1);
    assert!(
        run.stderr()
            .contains(".ralph/config.toml:1: `max_iterations`: must be a whole number"),
        "{}",
        run.stderr()
    );
    assert_eq!(env.agent_calls(), 0);
}

#[test]
fn user_config_is_read_below_the_project_one() {
    let env = TestEnv::new();
    let user = env.path().join("xdg/ralph");
    fs::create_dir_all(&user).unwrap();
    fs::write(
        user.join("config.toml"),
        "max_iterations = 1\nmodel = \"user-model\"\n",
    )
    .unwrap();
    write_config(&env, "model = \"project-model\"\n");
    env.run_loop_with(&["task"], |c| {
        c.env("XDG_CONFIG_HOME", env.path().join("xdg"));
    })
    .assert_code(2);
    assert!(env.agent_argv(1).contains(&"project-model".to_owned()));
}

#[test]
fn init_writes_a_commented_config_once() {
    let env = TestEnv::new();
    let run = env.run(&["--init"]);
    run.assert_code(0);
    let text = fs::read_to_string(env.ralph_file("config.toml")).unwrap();
    assert!(text.contains("# max_iterations = 0"));
    env.run(&["--config"]).assert_code(0);
    let again = env.run(&["--init"]);
    again.assert_code(1);
    assert!(again.stderr().contains("already exists"));
}

#[test]
fn a_custom_agent_gets_its_prompt_as_an_argument_or_on_stdin() {
    let env = TestEnv::new();
    env.write_executable("my-agent", crate::support::FAKE_AGENT);
    write_config(
        &env,
        "[agents.mine]\ncommand = \"my-agent\"\nargs = [\"--message\", \"{prompt}\"]\nmodel_args = [\"--use\", \"{model}\"]\nenv = { MY_AGENT_MODE = \"fast\" }\ntool_pattern = '^TOOL (\\w+)'\n\n[agents.piped]\ncommand = \"my-agent\"\nprompt = \"stdin\"\n",
    );
    env.agent_script(None, "echo \"mode=$MY_AGENT_MODE\"; echo 'TOOL Edit a.rs'");
    let run = env.run_loop(&[
        "do the thing",
        "--agent",
        "mine",
        "--model",
        "m1",
        "--max-iterations",
        "1",
    ]);
    run.assert_code(2);
    let argv = env.agent_argv(1);
    assert_eq!(argv[0], "--message");
    assert!(argv[1].contains("## Your Task\n\ndo the thing"));
    assert_eq!(argv[2..], ["--use", "m1"]);
    assert!(run.stdout().contains("mode=fast"));
    assert!(run.stdout().contains("Agent: mine"), "{}", run.stdout());
    assert_eq!(env.history()["iterations"][0]["tools_used"]["Edit"], 1);

    env.run_loop(&["do the thing", "--agent", "piped", "--max-iterations", "1"])
        .assert_code(2);
    assert_eq!(env.agent_file("prompt-source.2").trim(), "stdin");
    assert!(env.agent_prompt(2).contains("do the thing"));
}

#[test]
fn a_bad_custom_agent_is_explained_at_start() {
    let env = TestEnv::new();
    write_config(&env, "[agents.broken]\nargs = [\"x\"]\n");
    let run = env.run_loop(&["task", "--agent", "broken"]);
    run.assert_code(1);
    assert!(
        run.stderr()
            .contains(".ralph/config.toml:1: agents.broken: `command` is missing"),
        "{}",
        run.stderr()
    );
    write_config(&env, "[agents.ghost]\ncommand = \"no-such-program\"\n");
    let run = env.run_loop(&["task", "--agent", "ghost"]);
    run.assert_code(1);
    assert!(
        run.stderr()
            .contains("`no-such-program`, which was not found"),
        "{}",
        run.stderr()
    );
    let run = env.run_loop(&["task", "--agent", "nobody"]);
    run.assert_code(1);
    assert!(
        run.stderr().contains("unknown agent 'nobody'"),
        "{}",
        run.stderr()
    );
}

#[test]
fn rotation_cycles_agents_and_history_says_which_ran() {
    let env = TestEnv::new();
    env.run_loop(&[
        "task",
        "--rotation",
        "claude-code:sonnet,codex",
        "--max-iterations",
        "3",
    ])
    .assert_code(2);
    assert_eq!(env.agent_argv(1)[0], "-p");
    assert_eq!(env.agent_argv(2)[0], "exec");
    assert_eq!(env.agent_argv(3)[0], "-p");
    let history = env.history();
    assert_eq!(history["iterations"][0]["agent"], "claude-code");
    assert_eq!(history["iterations"][0]["model"], "sonnet");
    assert_eq!(history["iterations"][1]["agent"], "codex");
}

#[test]
fn agent_arguments_after_a_double_dash_are_passed_verbatim() {
    let env = TestEnv::new();
    env.run_loop(&[
        "task",
        "--max-iterations",
        "1",
        "--",
        "--pure",
        "--weird value",
    ])
    .assert_code(2);
    let argv = env.agent_argv(1);
    assert!(
        argv.windows(2)
            .any(|pair| pair == ["--pure", "--weird value"]),
        "{argv:?}"
    );
}

/// The documented `--status --json` schema (specs/output.md); unknown fields fail the test.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "the fields are checked by deserialising")]
struct StatusSchema {
    schema: u32,
    #[serde(rename = "loop")]
    loop_state: Option<LoopSchema>,
    pending_context: Option<String>,
    tasks: Option<TasksSchema>,
    history: HistorySchema,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "the fields are checked by deserialising")]
struct LoopSchema {
    state: String,
    iteration: u32,
    min_iterations: u32,
    max_iterations: u32,
    started_at: String,
    elapsed_ms: u64,
    agent: String,
    model: Option<String>,
    completion_promise: String,
    tasks_mode: bool,
    task_promise: String,
    prompt: String,
    stop_reason: Option<String>,
    pid: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "the fields are checked by deserialising")]
struct TasksSchema {
    file: String,
    total: usize,
    complete: usize,
    in_progress: usize,
    failed: usize,
    tasks: Vec<TaskSchema>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "the fields are checked by deserialising")]
struct TaskSchema {
    number: usize,
    status: String,
    text: String,
    id: Option<String>,
    key: String,
    blocked_by: Vec<String>,
    waiting_for: Vec<String>,
    subtasks: Vec<SubtaskSchema>,
    properties: Vec<PropertySchema>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "the fields are checked by deserialising")]
struct PropertySchema {
    key: String,
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "the fields are checked by deserialising")]
struct SubtaskSchema {
    status: String,
    text: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "the fields are checked by deserialising")]
struct HistorySchema {
    iterations: usize,
    total_duration_ms: u64,
    total_tokens: TokensSchema,
    total_cost_usd: Option<f64>,
    agents: std::collections::BTreeMap<String, AgentShareSchema>,
    struggle: StruggleSchema,
    recent: Vec<IterationSchema>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "the fields are checked by deserialising")]
struct AgentShareSchema {
    iterations: u32,
    last_iteration: u32,
    tokens: Option<TokensSchema>,
    cost_usd: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "the fields are checked by deserialising")]
struct TokensSchema {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "the fields are checked by deserialising")]
struct StruggleSchema {
    no_progress_iterations: u32,
    short_iterations: u32,
    repeated_errors: std::collections::BTreeMap<String, u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "the fields are checked by deserialising")]
struct IterationSchema {
    iteration: u32,
    started_at: String,
    duration_ms: u64,
    exit_code: i32,
    completion_detected: bool,
    tools_used: std::collections::BTreeMap<String, u64>,
    files_modified: usize,
    tokens: Option<TokensSchema>,
    cost_usd: Option<f64>,
    failure: Option<String>,
    agent: Option<String>,
}

#[test]
fn status_and_list_tasks_json_match_the_documented_schema() {
    let env = TestEnv::new();
    let empty: StatusSchema =
        serde_json::from_str(&env.run(&["--status", "--json"]).stdout()).unwrap();
    assert!(empty.loop_state.is_none() && empty.tasks.is_none());

    env.run(&["--add-task", "first", "--id", "a"])
        .assert_code(0);
    env.run(&["--add-task", "second", "--blocked-by", "a"])
        .assert_code(0);
    env.run_loop(&["task", "--tasks", "--max-iterations", "2"])
        .assert_code(2);
    let run = env.run(&["--status", "--json"]);
    run.assert_code(0);
    let status: StatusSchema = serde_json::from_str(&run.stdout()).unwrap();
    assert_eq!(status.schema, 1);
    assert_eq!(status.loop_state.as_ref().unwrap().state, "stopped");
    assert_eq!(status.history.iterations, 2);
    let tasks = status.tasks.unwrap();
    assert_eq!(tasks.tasks[1].waiting_for, ["a"]);
    // The key: the id given, or one made from the text.
    assert_eq!(
        (tasks.tasks[0].key.as_str(), tasks.tasks[1].key.as_str()),
        ("a", "second")
    );

    let listed: TasksSchema =
        serde_json::from_str(&env.run(&["--list-tasks", "--json"]).stdout()).unwrap();
    assert_eq!(listed.total, 2);
    assert_eq!(listed.tasks[0].id.as_deref(), Some("a"));
}

#[test]
fn json_runs_print_one_event_per_line() {
    let env = TestEnv::new();
    env.agent_script(Some(1), "echo '|  Bash ls'");
    let run = env.run_loop_with(
        &[
            "task",
            "--json",
            "--output-format",
            "text",
            "--max-iterations",
            "3",
        ],
        |c| {
            c.env("FAKE_AGENT_COMPLETE_AT", "2");
        },
    );
    run.assert_code(0);
    let events: Vec<serde_json::Value> = run
        .stdout()
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON: {line}: {err}"))
        })
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"run_started"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run_ended"), "{kinds:?}");
    for kind in [
        "iteration_started",
        "iteration_finished",
        "tools",
        "completed",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    let end = events.last().unwrap();
    assert_eq!(end["exit_code"], 0);
    assert_eq!(end["reason"], "completed in 2 iterations");
}

#[test]
fn json_runs_stay_json_with_verification_and_retries() {
    let env = TestEnv::new();
    env.agent_script(
        Some(1),
        "cat <<'EVENTS'\n{\"type\":\"result\",\"is_error\":true,\"api_error_status\":500,\"result\":\"API Error: 500\"}\nEVENTS\nexit 1\n",
    );
    let run = env.run_loop_with(
        &[
            "task",
            "--json",
            "--agent",
            "claude-code",
            "--verify",
            "echo checking; true",
            "--max-iterations",
            "3",
        ],
        |c| {
            c.env("FAKE_AGENT_COMPLETE_AT", "2")
                .env("RALPH_RETRY_BASE_MS", "10");
        },
    );
    run.assert_code(0);
    let kinds: Vec<String> = run
        .stdout()
        .lines()
        .map(|line| {
            let event: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON: {line}: {err}"));
            event["event"].as_str().unwrap().to_owned()
        })
        .collect();
    assert!(kinds.contains(&"retry_wait".to_owned()), "{kinds:?}");
    assert!(kinds.contains(&"verified".to_owned()), "{kinds:?}");
}

#[test]
fn bash_completion_loads_and_completes_agent_values() {
    let env = TestEnv::new();
    let script = env.run(&["--completions", "bash"]).stdout();
    let path = env.path().join("ralph.bash");
    fs::write(&path, script).unwrap();
    let output = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}'; COMP_WORDS=(ralph --agent ''); COMP_CWORD=2; COMP_LINE='ralph --agent '; COMP_POINT=${{#COMP_LINE}}; _ralph ralph '' --agent; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            path.display()
        ))
        .output()
        .unwrap();
    let replies = String::from_utf8_lossy(&output.stdout);
    for agent in [
        "opencode",
        "claude-code",
        "codex",
        "aider",
        "gemini-acp",
        "acp",
    ] {
        assert!(
            replies.lines().any(|line| line == agent),
            "{agent} missing: {replies} {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    for shell in ["zsh", "fish", "powershell"] {
        let run = env.run(&["--completions", shell]);
        run.assert_code(0);
        assert!(run.stdout().contains("ralph"), "{shell}");
    }
    let man = env.run(&["--man"]);
    man.assert_code(0);
    assert!(
        man.stdout().contains(".TH ralph"),
        "{}",
        &man.stdout()[..200.min(man.stdout().len())]
    );
}

#[test]
fn doctor_names_a_missing_git_repository_and_a_missing_agent() {
    let env = TestEnv::new();
    let good = env.run(&["--doctor"]);
    good.assert_code(0);
    assert!(
        good.stdout().contains("All checks passed."),
        "{}",
        good.stdout()
    );
    assert!(good.stdout().contains("✅ OpenCode: "), "{}", good.stdout());
    // Every built-in agent is listed; a version printed on stderr (as pi does) is read too.
    env.write_executable("pi", "#!/bin/sh\necho 0.73.1 >&2\n");
    let text = good.stdout();
    for name in [
        "Gemini CLI",
        "Qwen Code",
        "Copilot CLI",
        "Droid",
        "Codex",
        "Claude Code",
        "Kilo Code",
        "Cline",
        "Crush",
        "Aider",
        "Mistral Vibe",
    ] {
        assert!(text.contains(name), "{name}: {text}");
    }
    assert!(
        text.contains(
            "➖ Aider is not installed (only needed for --agent aider): pip install aider-chat"
        ),
        "{text}"
    );
    // And every ACP preset, with how to install it; one whose CLI is there (OpenCode, here) is
    // found.
    assert!(
        text.contains(
            "➖ gemini-acp is not installed (only needed for --agent gemini-acp): npm install -g @google/gemini-cli"
        ),
        "{text}"
    );
    for name in [
        "qwen-acp",
        "copilot-acp",
        "droid-acp",
        "claude-acp",
        "codex-acp",
    ] {
        assert!(
            text.contains(&format!("➖ {name} is not installed")),
            "{name}: {text}"
        );
    }
    assert!(text.contains("cursor-acp is not installed") && text.contains("not tested with ralph"));
    assert!(text.contains("✅ opencode-acp: "), "{text}");
    let pi = env.run(&["--doctor", "--agent", "pi"]).stdout();
    assert!(
        pi.contains(&format!("✅ pi: {}/pi (0.73.1)", env.bin().display())),
        "{pi}"
    );

    fs::remove_dir_all(env.work().join(".git")).unwrap();
    fs::remove_file(env.bin().join("opencode")).unwrap();
    let bad = env.run(&["--doctor"]);
    bad.assert_code(1);
    let text = bad.stdout();
    assert!(
        text.contains("is not in a git repository: run `git init`"),
        "{text}"
    );
    assert!(
        text.contains("❌ OpenCode (the agent ralph will run)"),
        "{text}"
    );
    assert!(text.contains("RALPH_OPENCODE_BINARY"), "{text}");
    assert!(text.contains("2 problems to fix."), "{text}");
}

#[test]
fn doctor_spots_a_crashed_loop_and_a_corrupt_file() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.ralph_file("ralph-history.json"), "{ broken").unwrap();
    fs::write(
        env.ralph_file("ralph-loop.state.json"),
        r#"{"active":true,"iteration":4,"startedAt":"2026-01-01T00:00:00Z","prompt":"p"}"#,
    )
    .unwrap();
    let run = env.run(&["--doctor"]);
    run.assert_code(1);
    assert!(
        run.stdout().contains("ralph-history.json is corrupt"),
        "{}",
        run.stdout()
    );
    assert!(
        run.stdout().contains("stopped unexpectedly at iteration 4"),
        "{}",
        run.stdout()
    );
}

#[test]
fn dry_run_shows_command_environment_and_prompt_without_running() {
    let env = TestEnv::new();
    env.run(&["--add-context", "use sqlite"]).assert_code(0);
    let run = env.run(&["Build it", "--dry-run", "--model", "p/m"]);
    run.assert_code(0);
    let text = run.stdout();
    assert!(
        text.contains(&format!(
            "Command:      {}/opencode run --format json -m p/m \"$PROMPT\"",
            env.bin().display()
        )),
        "{text}"
    );
    assert!(text.contains("Environment:  OPENCODE_CONFIG="), "{text}");
    assert!(text.contains("\"permission\""), "{text}");
    assert!(text.contains("# Ralph Wiggum Loop - Iteration 1"));
    assert!(text.contains("use sqlite"));
    assert_eq!(env.agent_calls(), 0);
    assert!(!env.ralph_file("ralph-loop.state.json").exists());
    assert!(!env.ralph_file("ralph-opencode.config.json").exists());
    assert!(
        env.ralph_file("ralph-context.md").exists(),
        "the context is not consumed"
    );
}

#[test]
fn color_follows_the_choice_and_no_color() {
    let env = TestEnv::new();
    let always = env.run_loop_with(
        &["task", "--max-iterations", "1", "--color", "always"],
        |c| {
            c.env_remove("NO_COLOR");
        },
    );
    assert!(
        always.stdout().contains("\x1b[1m🔄 Iteration 1"),
        "{}",
        always.stdout()
    );
    let piped = env.run_loop_with(&["task", "--max-iterations", "1"], |c| {
        c.env_remove("NO_COLOR");
    });
    assert!(!piped.stdout().contains('\x1b'), "no colour when piped");
    let never = env.run_loop_with(
        &["task", "--max-iterations", "1", "--color", "never"],
        |c| {
            c.env_remove("NO_COLOR");
        },
    );
    assert!(!never.stdout().contains('\x1b'));
}

#[test]
fn a_missing_agent_cli_names_its_npm_package_and_variable() {
    let env = TestEnv::new();
    let run = env.run(&["Build it", "--agent", "gemini"]);
    run.assert_code(1);
    assert_eq!(
        run.stderr().trim(),
        "Error: Gemini CLI (`gemini`) not found. Install it with `npm install -g @google/gemini-cli`, put it on PATH, or set RALPH_GEMINI_BINARY to its path."
    );
    assert!(!env.ralph_file("ralph-loop.state.json").exists());
    // A fallback agent is checked at start too.
    let run = env.run(&["Build it", "--agent", "codex", "--fallback", "droid"]);
    run.assert_code(1);
    assert!(
        run.stderr().contains("npm install -g @factory/cli")
            && run.stderr().contains("RALPH_DROID_BINARY"),
        "{}",
        run.stderr()
    );
    assert_eq!(env.agent_calls(), 0);
}

#[test]
fn dry_run_shows_a_new_agents_command_and_the_fallback_agents() {
    let env = TestEnv::new();
    env.write_executable("qwen", crate::support::FAKE_AGENT);
    let run = env.run(&[
        "Build it",
        "--agent",
        "qwen",
        "--model",
        "qwen3",
        "--no-allow-all",
        "--fallback",
        "codex,pi:mock/m",
        "--dry-run",
    ]);
    run.assert_code(0);
    let text = run.stdout();
    // ralph's tools are shown as iteration 1 would get them.
    let home = env.ralph_file("");
    let home = home.display().to_string();
    let home = home.trim_end_matches('/');
    assert!(
        text.contains(&format!(
            "Command:      {}/qwen -o stream-json --approval-mode auto-edit -m qwen3 --mcp-config '{{\"mcpServers\":{{\"ralph\":{{\"args\":[\"__agent-tools\",\"--home\",\"{home}\",",
            env.bin().display()
        )),
        "{text}"
    );
    assert!(
        text.contains("\"--iteration\",\"1\",\"--ask-timeout\",\"900000\"]"),
        "{text}"
    );
    assert!(text.contains("}}}' \"$PROMPT\""), "{text}");
    assert!(
        text.contains("Environment:  QWEN_CODE_SUPPRESS_YOLO_WARNING=1"),
        "{text}"
    );
    assert!(
        text.contains(
            "Fallback:     Codex, pi (mock/m) (when the agent is out of quota for over 5m 0s)"
        ),
        "{text}"
    );
    // The same from the project's config file.
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.work().join(".ralph/config.toml"),
        "agent = \"qwen\"\nfallback = [\"codex\", \"pi:mock/m\"]\nfallback_after = \"2h\"\n",
    )
    .unwrap();
    let text = env.run(&["Build it", "--dry-run"]).stdout();
    assert!(
        text.contains(
            "Fallback:     Codex, pi (mock/m) (when the agent is out of quota for over 2h 0m 0s)"
        ),
        "{text}"
    );
    assert_eq!(env.agent_calls(), 0);
}
