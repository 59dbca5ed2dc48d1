//! End-to-end tests: the built ralph drives the real agent CLIs (Claude Code, Codex, OpenCode,
//! Gemini CLI, Qwen Code, pi, Copilot CLI, Droid), each pointed at the scripted mock model server
//! (`mock_model`).
//!
//! The CLIs are installed outside the repository by `tests/e2e/install-agents.sh`; when one is
//! missing its tests print one "skipping" line and pass. `record_agent_fixtures` (ignored by
//! default) re-records `tests/fixtures/agents/` from the CLIs run directly.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::mock_model::{Api, MockModel, Turn};
use crate::real_agents_support::{
    Agent, AgentSetup, SetupOptions, assert_failure_recorded, assert_structured_findings,
    history_iterations, run_agent_with_deadline,
};
use crate::support::{Run, TestEnv};

/// The most one ralph run with a real agent may take. A Kilo Code iteration alone is about twenty
/// seconds of CPU, and beside the rest of the suite on two cores one took a minute; the limit is
/// there to end a run that hangs, not to time one.
const DEADLINE: Duration = Duration::from_secs(240);

/// Runs `ralph PROMPT --agent A --model M --pause 0 ARGS -- AGENT_ARGS` with the agent set up
/// against `mock`.
fn run_ralph(env: &TestEnv, agent: Agent, binary: &Path, mock: &MockModel, args: &[&str]) -> Run {
    let setup = AgentSetup::new(agent, binary, mock, env.path());
    let mut command = env.ralph();
    command.args(args);
    ralph_args(&mut command, agent, &setup)
}

/// Adds the prompt, the agent, its model and its arguments after `--` to a ralph command, and
/// runs it.
fn ralph_args(command: &mut Command, agent: Agent, setup: &AgentSetup) -> Run {
    ralph_args_as(
        command,
        (agent, agent.ralph_name()),
        Some(agent.model()),
        setup,
    )
}

/// [`ralph_args`] with the CLI of `agent` run as `--agent NAME` (an ACP preset), and `model`
/// (none: the agent's configuration names it).
fn ralph_args_as(
    command: &mut Command,
    (agent, name): (Agent, &str),
    model: Option<&str>,
    setup: &AgentSetup,
) -> Run {
    command.args(["create hello.txt", "--agent", name, "--pause", "0"]);
    if let Some(model) = model {
        command.args(["--model", model]);
    }
    if !agent.extra_args().is_empty() {
        command.arg("--").args(agent.extra_args());
    }
    setup.apply_to_ralph(command);
    // Retries of an iteration that failed on the provider's side come at once.
    command.env("RALPH_RETRY_BASE_MS", "100");
    Run {
        output: run_agent_with_deadline(command, DEADLINE),
    }
}

/// Iteration 1: the model writes `hello.txt` with a tool, then answers without the promise.
/// Iteration 2: the model keeps the promise. ralph commits the file and records two iterations.
fn completes_in_two_iterations(agent: Agent) {
    completes_in_two_iterations_as(agent, false);
}

/// [`completes_in_two_iterations`] with the agent in ralph's sandbox (`--sandbox bwrap`), its
/// model reached through the sandbox's forward of the mock model's port.
fn completes_in_two_iterations_sandboxed(agent: Agent) {
    if crate::sandbox::bwrap_works() {
        completes_in_two_iterations_as(agent, true);
    }
}

/// The model's script of a two-iteration loop: it writes `hello` with a tool and answers without
/// the promise, then keeps the promise.
fn write_hello_then_promise(hello: &Path) -> [Turn; 3] {
    [
        Turn::WriteFile {
            path: hello.display().to_string(),
            content: "hello from the mock model\n".into(),
        },
        Turn::Text("I created hello.txt.".into()),
        Turn::Text("Everything is in place.\n<promise>COMPLETE</promise>".into()),
    ]
}

/// The loop `run` ended well (exit 0) with `hello` written by the model, in two recorded
/// iterations the second of which kept the promise; the iterations.
fn assert_wrote_hello_in_two_iterations(
    env: &TestEnv,
    run: &Run,
    mock: &MockModel,
    hello: &Path,
) -> Vec<serde_json::Value> {
    let context = || format!("{}\n--- mock: {}", run.stdout(), mock.summary());
    assert_eq!(run.code(), 0, "{}\n--- stderr\n{}", context(), run.stderr());
    assert_eq!(
        fs::read_to_string(hello).ok().as_deref(),
        Some("hello from the mock model\n"),
        "{}",
        context()
    );
    let iterations = history_iterations(&env.history());
    assert_eq!(iterations.len(), 2, "{iterations:#?}");
    assert_eq!(iterations[1]["completion_detected"], true);
    iterations
}

fn completes_in_two_iterations_as(agent: Agent, sandboxed: bool) {
    let Some(binary) = agent.installed_or_skip() else {
        return;
    };
    let env = TestEnv::new();
    let hello = env.work().join("hello.txt");
    let mock = MockModel::start(write_hello_then_promise(&hello));

    let setup = AgentSetup::new(agent, &binary, &mock, env.path());
    let mut command = env.ralph();
    command.args(["--max-iterations", "3"]);
    if sandboxed {
        command.args(setup.sandbox_args(&mock));
    }
    let run = ralph_args(&mut command, agent, &setup);
    let iterations = assert_wrote_hello_in_two_iterations(&env, &run, &mock, &hello);
    let context = || format!("{}\n--- mock: {}", run.stdout(), mock.summary());
    let committed = env.git(&["log", "--name-only", "--format="]);
    assert!(
        committed.lines().any(|line| line == "hello.txt"),
        "hello.txt not committed: {committed}"
    );
    assert_eq!(mock.remaining_turns(), 0, "{}", context());
    assert!(mock.errors().is_empty(), "{}", context());

    if agent == Agent::Claude {
        // The compact tool line, and the totals the CLI reported, on --status.
        assert!(run.stdout().contains("| Tools    Write 1"), "{}", context());
        let status = env.run(&["--status"]).stdout();
        assert!(status.contains("   Tokens:       "), "{status}");
        assert!(status.contains("   Cost:         $"), "{status}");
    }
    assert_eq!(iterations[0]["completion_detected"], false);
    assert_structured_findings(&iterations[0], agent);
}

/// ralph's exit code when the provider keeps failing and no retry is left: the run stops with
/// an error rather than spending iterations on an outage.
const HTTP_500_EXIT: i32 = 1;

/// The model fails every request with HTTP 500: the agent gives up, ralph records the failed
/// iteration (and any retries of it) and stops instead of hanging. A CLI that retries for minutes
/// with no setting to stop it sooner is bounded by `--iteration-timeout`.
fn http_500_ends_the_iteration(agent: Agent) {
    let Some(binary) = agent.installed_or_skip() else {
        return;
    };
    let env = TestEnv::new();
    let mock = MockModel::start([Turn::HttpErrorForever(500)]);

    // The run is bounded by `run_agent_with_deadline` (which leaves out the wait for a free
    // agent slot, minutes when the suite runs every CLI together).
    let mut args = vec!["--max-iterations", "1", "--max-retries", "0"];
    if let Some(limit) = agent.failure_timeout() {
        args.extend(["--iteration-timeout", limit]);
    }
    let run = run_ralph(&env, agent, &binary, &mock, &args);

    let ended = run.stdout();
    let first = history_iterations(&env.history()).into_iter().next();
    let timed_out = first.is_some_and(|record| record["failure"]["kind"] == "timeout");
    if agent.failure_timeout().is_some() && timed_out {
        assert!(
            ended.contains("Loop ended: max iterations (1) reached"),
            "{ended}"
        );
    } else {
        run.assert_code(HTTP_500_EXIT);
        assert!(
            ended.contains("Loop ended: the agent failed (api error)"),
            "{ended}"
        );
    }
    assert!(
        !mock.conversation_requests().is_empty(),
        "the agent never reached the mock: {}",
        mock.summary()
    );
    let iterations = history_iterations(&env.history());
    assert!(!iterations.is_empty(), "no iteration recorded");
    for record in &iterations {
        // pi exits 0 after an API failure in JSON mode: its event says it failed. A CLI that
        // ralph stopped may exit 0 on SIGTERM.
        if agent != Agent::Pi && !timed_out {
            assert_ne!(record["exit_code"].as_i64(), Some(0), "{record:#}");
        }
        assert_eq!(record["completion_detected"], false, "{record:#}");
        assert_failure_recorded(record, agent);
    }
}

/// The model answers HTTP 429 until ralph's `on_iteration` hook has run once (the CLI's own
/// retries fail too): ralph records a rate limit and retries the same iteration, which completes.
fn rate_limit_is_retried(agent: Agent) {
    let Some(binary) = agent.installed_or_skip() else {
        return;
    };
    let env = TestEnv::new();
    let marker = env.path().join("iteration-recorded");
    let mock = MockModel::start([
        Turn::HttpErrorUntil {
            status: 429,
            marker: marker.clone(),
        },
        Turn::Text("All done.\n<promise>COMPLETE</promise>".into()),
    ]);
    let hook = format!("touch '{}'", marker.display());
    let run = run_ralph(
        &env,
        agent,
        &binary,
        &mock,
        &["--max-iterations", "1", "--on-iteration", &hook],
    );
    let context = || format!("{}\n--- mock: {}", run.stdout(), mock.summary());
    assert_eq!(run.code(), 0, "{}\n--- stderr\n{}", context(), run.stderr());
    let iterations = history_iterations(&env.history());
    assert_eq!(iterations.len(), 2, "{iterations:#?}");
    assert_eq!(
        iterations[0]["failure"]["kind"], "rate limit",
        "{:#}",
        iterations[0]
    );
    assert_eq!(
        iterations[1]["iteration"], 1,
        "the retry is the same iteration"
    );
    assert_eq!(
        iterations[1]["completion_detected"], true,
        "{:#}",
        iterations[1]
    );
}

#[test]
fn claude_verbose_tools_show_the_written_path() {
    let Some(binary) = Agent::Claude.installed_or_skip() else {
        return;
    };
    let env = TestEnv::new();
    let hello = env.work().join("hello.txt");
    let mock = MockModel::start([
        Turn::WriteFile {
            path: hello.display().to_string(),
            content: "hi\n".into(),
        },
        Turn::Text("Done.\n<promise>COMPLETE</promise>".into()),
    ]);
    let run = run_ralph(&env, Agent::Claude, &binary, &mock, &["--verbose-tools"]);
    run.assert_code(0);
    assert!(
        run.stdout()
            .contains(&format!("| Write {}", hello.display())),
        "{}",
        run.stdout()
    );
}

#[test]
fn claude_completes_in_two_iterations_in_a_sandbox() {
    completes_in_two_iterations_sandboxed(Agent::Claude);
}

#[test]
fn codex_completes_in_two_iterations_in_a_sandbox() {
    completes_in_two_iterations_sandboxed(Agent::Codex);
}

#[test]
fn opencode_completes_in_two_iterations_in_a_sandbox() {
    completes_in_two_iterations_sandboxed(Agent::OpenCode);
}

#[test]
fn gemini_completes_in_two_iterations_in_a_sandbox() {
    completes_in_two_iterations_sandboxed(Agent::Gemini);
}

#[test]
fn qwen_completes_in_two_iterations_in_a_sandbox() {
    completes_in_two_iterations_sandboxed(Agent::Qwen);
}

#[test]
fn pi_completes_in_two_iterations_in_a_sandbox() {
    completes_in_two_iterations_sandboxed(Agent::Pi);
}

#[test]
fn copilot_completes_in_two_iterations_in_a_sandbox() {
    completes_in_two_iterations_sandboxed(Agent::Copilot);
}

#[test]
fn droid_completes_in_two_iterations_in_a_sandbox() {
    completes_in_two_iterations_sandboxed(Agent::Droid);
}

#[test]
fn kilocode_completes_in_two_iterations_in_a_sandbox() {
    completes_in_two_iterations_sandboxed(Agent::KiloCode);
}

#[test]
fn cline_completes_in_two_iterations_in_a_sandbox() {
    completes_in_two_iterations_sandboxed(Agent::Cline);
}

#[test]
fn aider_completes_in_two_iterations_in_a_sandbox() {
    if crate::sandbox::bwrap_works() {
        aider_loop(true);
    }
}

#[test]
fn claude_completes_in_two_iterations() {
    completes_in_two_iterations(Agent::Claude);
}

#[test]
fn codex_completes_in_two_iterations() {
    completes_in_two_iterations(Agent::Codex);
}

#[test]
fn opencode_completes_in_two_iterations() {
    completes_in_two_iterations(Agent::OpenCode);
}

#[test]
fn claude_http_500_ends_the_iteration() {
    http_500_ends_the_iteration(Agent::Claude);
}

#[test]
fn codex_http_500_ends_the_iteration() {
    http_500_ends_the_iteration(Agent::Codex);
}

#[test]
fn opencode_http_500_ends_the_iteration() {
    http_500_ends_the_iteration(Agent::OpenCode);
}

#[test]
fn gemini_completes_in_two_iterations() {
    completes_in_two_iterations(Agent::Gemini);
}

#[test]
fn gemini_http_500_ends_the_iteration() {
    http_500_ends_the_iteration(Agent::Gemini);
}

#[test]
fn gemini_rate_limit_is_retried() {
    rate_limit_is_retried(Agent::Gemini);
}

#[test]
fn qwen_completes_in_two_iterations() {
    completes_in_two_iterations(Agent::Qwen);
}

#[test]
fn qwen_http_500_ends_the_iteration() {
    http_500_ends_the_iteration(Agent::Qwen);
}

#[test]
fn qwen_rate_limit_is_retried() {
    rate_limit_is_retried(Agent::Qwen);
}

#[test]
fn pi_completes_in_two_iterations() {
    completes_in_two_iterations(Agent::Pi);
}

#[test]
fn pi_http_500_ends_the_iteration() {
    http_500_ends_the_iteration(Agent::Pi);
}

#[test]
fn pi_rate_limit_is_retried() {
    rate_limit_is_retried(Agent::Pi);
}

#[test]
fn copilot_completes_in_two_iterations() {
    completes_in_two_iterations(Agent::Copilot);
}

#[test]
fn copilot_http_500_ends_the_iteration() {
    http_500_ends_the_iteration(Agent::Copilot);
}

#[test]
fn copilot_rate_limit_is_retried() {
    rate_limit_is_retried(Agent::Copilot);
}

#[test]
fn droid_completes_in_two_iterations() {
    completes_in_two_iterations(Agent::Droid);
}

#[test]
fn droid_http_500_ends_the_iteration() {
    http_500_ends_the_iteration(Agent::Droid);
}

#[test]
fn droid_rate_limit_is_retried() {
    rate_limit_is_retried(Agent::Droid);
}

/// `--fallback`: Claude Code's API answers HTTP 429 with no reset time; ralph hands the same
/// iteration to Codex at once, which completes it.
#[test]
fn claude_out_of_quota_falls_back_to_codex() {
    let (Some(claude), Some(codex)) = (
        Agent::Claude.installed_or_skip(),
        Agent::Codex.installed_or_skip(),
    ) else {
        return;
    };
    let env = TestEnv::new();
    let mock = MockModel::start([Turn::Text("Done.\n<promise>COMPLETE</promise>".into())]);
    mock.fail_api(Api::Anthropic, 429);
    let mut command = env.ralph();
    command.args(["--max-iterations", "1", "--fallback", "codex"]);
    AgentSetup::new(Agent::Codex, &codex, &mock, env.path()).apply_to_ralph(&mut command);
    let setup = AgentSetup::new(Agent::Claude, &claude, &mock, env.path());
    let run = ralph_args(&mut command, Agent::Claude, &setup);

    let context = || {
        format!(
            "{}\n--- stderr\n{}\n--- mock: {}",
            run.stdout(),
            run.stderr(),
            mock.summary()
        )
    };
    assert_eq!(run.code(), 0, "{}", context());
    assert!(
        run.stderr().contains(
            "↪ Claude Code is out of quota and gave no reset time. Codex takes this iteration."
        ),
        "{}",
        context()
    );
    let iterations = history_iterations(&env.history());
    assert_eq!(iterations.len(), 2, "{iterations:#?}");
    assert_eq!(iterations[0]["agent"], "claude-code");
    assert_eq!(iterations[0]["failure"]["kind"], "rate limit");
    assert_eq!(iterations[1]["agent"], "codex");
    assert_eq!(iterations[1]["iteration"], 1);
    assert_eq!(iterations[1]["completion_detected"], true);
}

/// The fixture scenarios of an agent: name, and whether the CLI may write files. The first three
/// agents were recorded with a permission-denied run; the others with HTTP 429 (and Droid 401).
fn scenarios(agent: Agent) -> Vec<(&'static str, bool)> {
    let mut list = vec![("success", true), ("tool-use", true), ("http500", true)];
    match agent {
        Agent::Claude | Agent::Codex | Agent::OpenCode => list.push(("permission-denied", false)),
        Agent::Droid => list.extend([("http429", true), ("http401", true)]),
        // Cline's failure carries the provider's message only: a scripted 429 says nothing of a
        // limit.
        Agent::Cline => {}
        _ => list.push(("http429", true)),
    }
    list
}

/// The mock's script for one fixture scenario, writing `hello` when a tool is called.
fn scenario_turns(scenario: &str, hello: &Path) -> Vec<Turn> {
    let write = Turn::WriteFile {
        path: hello.display().to_string(),
        content: "hello from the mock model\n".into(),
    };
    match scenario {
        "success" => vec![Turn::Text(
            "Nothing left to do.\n<promise>COMPLETE</promise>".into(),
        )],
        "tool-use" => vec![
            write,
            Turn::Text("Wrote hello.txt.\n<promise>COMPLETE</promise>".into()),
        ],
        "http500" => vec![Turn::HttpErrorForever(500)],
        "http429" => vec![Turn::HttpErrorForever(429)],
        "http401" => vec![Turn::HttpErrorForever(401)],
        _ => vec![write, Turn::Text("I could not write hello.txt.".into())],
    }
}

/// The CLI's own argv in JSON mode, as ralph runs it.
fn json_mode_args(agent: Agent, prompt: &str, allow_writes: bool) -> Vec<String> {
    let args: Vec<&str> = match agent {
        Agent::Claude => {
            let mut args = vec!["-p", prompt, "--output-format", "stream-json", "--verbose"];
            if allow_writes {
                args.push("--dangerously-skip-permissions");
            }
            args.extend(["--model", agent.model()]);
            args
        }
        Agent::Codex => {
            let sandbox = if allow_writes {
                "workspace-write"
            } else {
                "read-only"
            };
            vec![
                "exec",
                "--json",
                "--sandbox",
                sandbox,
                "--skip-git-repo-check",
                "--model",
                agent.model(),
                prompt,
            ]
        }
        _ => fixed_json_args(agent, prompt),
    };
    args.into_iter().map(str::to_owned).collect()
}

/// [`json_mode_args`] of the CLIs whose argv does not depend on writes being allowed.
fn fixed_json_args(agent: Agent, prompt: &str) -> Vec<&str> {
    match agent {
        Agent::OpenCode => vec![
            "run",
            "--format",
            "json",
            "-m",
            agent.model(),
            "--pure",
            prompt,
        ],
        Agent::Gemini => vec![
            "-p",
            prompt,
            "-o",
            "stream-json",
            "--yolo",
            "--skip-trust",
            "-m",
            agent.model(),
        ],
        Agent::Qwen => vec![
            "-o",
            "stream-json",
            "--yolo",
            "-m",
            agent.model(),
            "--auth-type",
            "openai",
            prompt,
        ],
        Agent::Pi => vec![
            "-p",
            "--mode",
            "json",
            "--model",
            agent.model(),
            "--no-session",
            prompt,
        ],
        Agent::Copilot => vec![
            "-p",
            prompt,
            "--output-format",
            "json",
            "--yolo",
            "--no-auto-update",
            "--model",
            agent.model(),
        ],
        Agent::Droid => vec![
            "exec",
            "--skip-permissions-unsafe",
            "-m",
            agent.model(),
            "-o",
            "stream-json",
            prompt,
        ],
        Agent::KiloCode => vec![
            "run",
            "--format",
            "json",
            "-m",
            agent.model(),
            "--auto",
            "--pure",
            prompt,
        ],
        Agent::Cline => vec!["--json", prompt],
        Agent::Claude | Agent::Codex | Agent::Aider => Vec::new(),
    }
}

/// The most one recorded run may take.
const RECORD_DEADLINE: Duration = Duration::from_secs(400);

/// A JSON line over this size has its long arrays shortened in a fixture.
const MAX_FIXTURE_LINE: usize = 20_000;

/// Keeps a recorded line verbatim unless it is huge; then its arrays keep 5 entries.
fn trim_line(line: &str) -> String {
    if line.len() <= MAX_FIXTURE_LINE {
        return line.to_owned();
    }
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(line) else {
        return line.to_owned();
    };
    if let Some(object) = value.as_object_mut() {
        for field in object.values_mut() {
            if let Some(array) = field.as_array_mut() {
                array.truncate(5);
            }
        }
    }
    value.to_string()
}

/// Re-records `tests/fixtures/agents/<agent>-<scenario>.jsonl` (the CLI's stdout, run directly
/// in JSON mode against the mock). Run with
/// `cargo test --test integration record_agent_fixtures -- --ignored --nocapture`;
/// `RALPH_RECORD_AGENTS=gemini,pi` records only those.
#[test]
#[ignore = "records fixtures from the real CLIs; run by hand"]
#[allow(clippy::print_stderr, reason = "reports what was recorded")]
fn record_agent_fixtures() {
    let out_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents");
    fs::create_dir_all(&out_dir).unwrap();
    let only = std::env::var("RALPH_RECORD_AGENTS").unwrap_or_default();
    for agent in Agent::ALL {
        if !only.is_empty() && !only.split(',').any(|name| name == agent.binary_name()) {
            continue;
        }
        // Aider prints text only: nothing to record.
        if agent == Agent::Aider {
            continue;
        }
        let Some(binary) = agent.installed_or_skip() else {
            continue;
        };
        for (scenario, allow_writes) in scenarios(agent) {
            let root = tempfile::Builder::new()
                .prefix("ralph-fixture")
                .tempdir_in(crate::support::scratch())
                .unwrap();
            let (work, home) = (root.path().join("work"), root.path().join("home"));
            fs::create_dir_all(&work).unwrap();
            fs::create_dir_all(&home).unwrap();
            let hello = work.join("hello.txt");
            let turns = scenario_turns(scenario, &hello);
            let mock = MockModel::start_with_lifetime(turns, RECORD_DEADLINE);
            let options = SetupOptions {
                opencode_edit_ask: !allow_writes,
            };
            let setup = AgentSetup::with_options(agent, &binary, &mock, root.path(), options);
            let mut args = json_mode_args(agent, "create hello.txt", allow_writes);
            // Copilot CLI's tokens are only in the usage file ralph asks it for.
            let usage_file = root.path().join("usage.json");
            if agent == Agent::Copilot && scenario == "tool-use" {
                args.extend([
                    "--usage-output-file".to_owned(),
                    usage_file.display().to_string(),
                ]);
            }
            let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut command: Command = setup.direct(&work, &home, &arg_refs);
            let started = Instant::now();
            // Droid retries a 5xx for about 250 s.
            let output = run_agent_with_deadline(&mut command, RECORD_DEADLINE);
            let stdout = String::from_utf8_lossy(&output.stdout);
            let mut text: String = stdout.lines().map(|line| trim_line(line) + "\n").collect();
            if text.is_empty() {
                text.push('\n');
            }
            let name = format!("{}-{scenario}.jsonl", agent.binary_name());
            fs::write(out_dir.join(&name), text).unwrap();
            if let Ok(report) = fs::read_to_string(&usage_file) {
                fs::write(out_dir.join("copilot-usage-output-file.json"), report).unwrap();
            }
            eprintln!(
                "{name}: exit {:?}, {:.1} s, file written: {}, mock: {}",
                output.status.code(),
                started.elapsed().as_secs_f64(),
                hello.exists(),
                mock.summary()
            );
            let stderr = String::from_utf8_lossy(&output.stderr);
            if !stderr.trim().is_empty() {
                let tail: String = stderr.lines().take(15).collect::<Vec<_>>().join("\n");
                eprintln!("  stderr: {tail}");
            }
        }
    }
}

/// Claude Code, given `ralph --mcp` as an MCP server, calls `ralph_status` when the (mock) model
/// asks it to, and the model gets ralph's answer: the task list of the repository.
#[test]
fn claude_calls_ralph_status_through_mcp() {
    let Some(binary) = Agent::Claude.installed_or_skip() else {
        return;
    };
    let root = tempfile::Builder::new()
        .prefix("ralph-mcp")
        .tempdir_in(crate::support::scratch())
        .unwrap();
    let (work, home) = (root.path().join("work"), root.path().join("home"));
    fs::create_dir_all(work.join(".ralph")).unwrap();
    fs::create_dir_all(&home).unwrap();
    fs::write(
        work.join(".ralph/ralph-tasks.md"),
        "- [ ] Write the docs\n  - id: docs\n",
    )
    .unwrap();
    let mock = MockModel::start([
        Turn::CallTool {
            name: "mcp__ralph__ralph_status".to_owned(),
            arguments: serde_json::json!({}),
        },
        Turn::Text("ralph has one task left.".to_owned()),
    ]);
    let setup = AgentSetup::new(Agent::Claude, &binary, &mock, root.path());
    let ralph = assert_cmd::cargo::cargo_bin!("ralph").display().to_string();
    let config =
        serde_json::json!({"mcpServers": {"ralph": {"command": ralph, "args": ["--mcp"]}}})
            .to_string();
    let args = [
        "-p",
        "What does ralph say about this repository?",
        "--mcp-config",
        &config,
        "--strict-mcp-config",
        "--allowedTools",
        "mcp__ralph__ralph_status",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        Agent::Claude.model(),
    ];
    let mut command = setup.direct(&work, &home, &args);
    let output = run_agent_with_deadline(&mut command, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        mock.summary()
    );
    // The model's second request carries the tool's result: ralph's status of this repository.
    let answered = mock
        .conversation_requests()
        .iter()
        .any(|request| request.body.to_string().contains("Write the docs"));
    assert!(answered, "{}\n{stdout}", mock.summary());
    assert!(stdout.contains("ralph has one task left."), "{stdout}");
}

/// [`completes_in_two_iterations`] through ACP: `--agent PRESET` starts the CLI (linked into the
/// test's PATH under its own name) with its ACP argument, and ralph speaks the protocol.
fn completes_in_two_iterations_through_acp(agent: Agent, preset: &str) {
    completes_through_adapter(agent, preset, agent.binary_name());
}

/// [`completes_in_two_iterations_through_acp`] with the preset's program `program` (an adapter
/// installed beside the CLI) linked into the test's PATH.
fn completes_through_adapter(agent: Agent, preset: &str, program: &str) {
    let Some(binary) = agent.installed_or_skip() else {
        return;
    };
    let Some(adapter) = crate::real_agents_support::installed_program(program) else {
        return;
    };
    let env = TestEnv::new();
    // In place of the fake agent of the same name.
    let link = env.bin().join(program);
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(&adapter, link).unwrap();
    let hello = env.work().join("hello.txt");
    let mock = MockModel::start(write_hello_then_promise(&hello));
    let setup = AgentSetup::new(agent, &binary, &mock, env.path());
    let mut command = env.ralph();
    command.args(["--max-iterations", "3"]);
    // OpenCode's and Kilo Code's model comes with the mock's configuration.
    let model = (!matches!(agent, Agent::OpenCode | Agent::KiloCode)).then(|| agent.model());
    let run = ralph_args_as(&mut command, (agent, preset), model, &setup);
    let iterations = assert_wrote_hello_in_two_iterations(&env, &run, &mock, &hello);
    let first = &iterations[0];
    assert_eq!(first["stop_reason"], "end_turn", "{first:#}");
    assert!(
        first["tools_used"]
            .as_object()
            .is_some_and(|tools| !tools.is_empty()),
        "{first:#}"
    );
    assert!(
        first["session_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty()),
        "{first:#}"
    );
}

#[test]
fn gemini_completes_in_two_iterations_through_acp() {
    completes_in_two_iterations_through_acp(Agent::Gemini, "gemini-acp");
}

#[test]
fn qwen_completes_in_two_iterations_through_acp() {
    completes_in_two_iterations_through_acp(Agent::Qwen, "qwen-acp");
}

#[test]
fn copilot_completes_in_two_iterations_through_acp() {
    completes_in_two_iterations_through_acp(Agent::Copilot, "copilot-acp");
}

#[test]
fn droid_completes_in_two_iterations_through_acp() {
    completes_in_two_iterations_through_acp(Agent::Droid, "droid-acp");
}

#[test]
fn opencode_completes_in_two_iterations_through_acp() {
    completes_in_two_iterations_through_acp(Agent::OpenCode, "opencode-acp");
}

#[test]
fn kilocode_completes_in_two_iterations() {
    completes_in_two_iterations(Agent::KiloCode);
}

#[test]
fn kilocode_http_500_ends_the_iteration() {
    http_500_ends_the_iteration(Agent::KiloCode);
}

#[test]
fn kilocode_rate_limit_is_retried() {
    rate_limit_is_retried(Agent::KiloCode);
}

#[test]
fn cline_completes_in_two_iterations() {
    completes_in_two_iterations(Agent::Cline);
}

#[test]
fn cline_http_500_ends_the_iteration() {
    http_500_ends_the_iteration(Agent::Cline);
}

#[test]
fn aider_completes_in_two_iterations() {
    aider_loop(false);
}

/// Aider edits by answering with the whole file (its `whole` edit format for an unknown model);
/// the first iteration writes `hello.txt`, the second keeps the promise, and the token report
/// Aider prints after its answer gives the tokens without hiding the promise.
fn aider_loop(sandboxed: bool) {
    let agent = Agent::Aider;
    let Some(binary) = agent.installed_or_skip() else {
        return;
    };
    let env = TestEnv::new();
    // Aider writes a git identity into the repository when git has none (the tests give git
    // theirs in variables), which the sandbox's read-only `.git` refuses: as a user's would be.
    env.git(&["config", "user.name", "ralph-test"]);
    env.git(&["config", "user.email", "test@example.invalid"]);
    let hello = env.work().join("hello.txt");
    let mock = MockModel::start([
        Turn::Text("hello.txt\n```\nhello from the mock model\n```\n".into()),
        Turn::Text("Everything is in place.\n<promise>COMPLETE</promise>".into()),
    ]);
    let setup = AgentSetup::new(agent, &binary, &mock, env.path());
    let mut command = env.ralph();
    command.args(["--max-iterations", "3"]);
    if sandboxed {
        command.args(setup.sandbox_args(&mock));
        // Aider's own virtual environment, outside the sandbox's view otherwise.
        let venv = binary.parent().and_then(Path::parent).unwrap();
        command.args(["--sandbox-mount", &venv.display().to_string()]);
    }
    let run = ralph_args(&mut command, agent, &setup);
    let iterations = assert_wrote_hello_in_two_iterations(&env, &run, &mock, &hello);
    assert_structured_findings(&iterations[0], agent);
    // Aider's own commits are off: ralph's is the only one with the file.
    let log = env.git(&["log", "--format=%s", "--", "hello.txt"]);
    assert_eq!(log.lines().count(), 1, "{log}");
}

#[test]
fn kilocode_completes_in_two_iterations_through_acp() {
    completes_in_two_iterations_through_acp(Agent::KiloCode, "kilocode-acp");
}

#[test]
fn claude_completes_in_two_iterations_through_its_acp_adapter() {
    completes_through_adapter(Agent::Claude, "claude-acp", "claude-agent-acp");
}

#[test]
fn codex_completes_in_two_iterations_through_its_acp_adapter() {
    completes_through_adapter(Agent::Codex, "codex-acp", "codex-acp");
}

/// The agent (`preset`: through that ACP preset, its adapter `program` linked into the test's
/// PATH) calls ralph's `ralph_ask`; the test answers through `POST /api/v1/answers` on
/// `--serve`; the answer is in the model's next request, and the history and the report record
/// the question and its answer.
fn asks_and_the_answer_reaches_the_model(agent: Agent, through: Option<(&str, &str)>, tool: &str) {
    asks_and_is_answered(agent, through, tool, "page");
}

/// [`asks_and_the_answer_reaches_the_model`], answered `by` the page or `cli` (`ralph --answer`
/// from another shell).
fn asks_and_is_answered(agent: Agent, through: Option<(&str, &str)>, tool: &str, by: &str) {
    let Some(binary) = agent.installed_or_skip() else {
        return;
    };
    let env = TestEnv::new();
    let name = match through {
        Some((preset, program)) => {
            let Some(adapter) = crate::real_agents_support::installed_program(program) else {
                return;
            };
            let link = env.bin().join(program);
            let _ = fs::remove_file(&link);
            std::os::unix::fs::symlink(&adapter, link).unwrap();
            preset
        }
        None => agent.ralph_name(),
    };
    let mock = MockModel::start([
        Turn::CallTool {
            name: tool.to_owned(),
            arguments: serde_json::json!({"question": "Which store should the API use?", "options": ["SQLite", "Postgres"]}),
        },
        Turn::Text("Postgres it is.\n<promise>COMPLETE</promise>".to_owned()),
    ]);
    let setup = AgentSetup::new(agent, &binary, &mock, env.path());
    let mut command = env.ralph();
    // `--model` through a preset that sets it in a variable holding a configuration (Kilo
    // Code's) keeps the rest of that configuration (the mock provider).
    command.args([
        "Choose the store",
        "--agent",
        name,
        "--model",
        agent.model(),
    ]);
    command.args(["--pause", "0", "--max-iterations", "1"]);
    command.args(["--serve", "127.0.0.1:0"]);
    if !agent.extra_args().is_empty() {
        command.arg("--").args(agent.extra_args());
    }
    setup.apply_to_ralph(&mut command);
    let mut run = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (port, token) = crate::support::served_at(&mut run);
    let questions = env.ralph_file("questions");
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let asked = fs::read_dir(&questions).is_ok_and(|mut entries| entries.next().is_some());
        if asked {
            break;
        }
        let ended = run.try_wait().ok().flatten().is_some();
        if ended || std::time::Instant::now() > deadline {
            let _ = run.kill();
            let said = crate::support::wait_output(&mut run, Duration::from_secs(10));
            panic!(
                "no question asked (ralph ended: {ended}); the model was offered {:?}; the tools answered {:?}; {}\n--- stdout\n{}\n--- stderr\n{}",
                offered_tools(&mock),
                tool_results(&mock),
                mock.summary(),
                String::from_utf8_lossy(&said.stdout),
                String::from_utf8_lossy(&said.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let id = crate::asking_fixture::waiting_question(&env.ralph_file(""));
    if by == "cli" {
        env.run(&["--answer", &id, "2"]).assert_code(0);
    } else {
        let answer = serde_json::json!({"id": id, "answer": "2"}).to_string();
        let (status, body) = crate::asking_fixture::answer_on_page(port, &token, &answer);
        assert_eq!(status, 200, "{body}");
    }
    let output = crate::support::wait_output(&mut run, DEADLINE);
    assert_answered_and_recorded(&env, &mock, (&output, by));
    if through.is_none() {
        assert_users_config_untouched(&env, agent);
    }
}

/// The run ended well, the model's next request carries the answer (given `by` the page or `cli`), and the
/// history and the report record the question and its answer.
fn assert_answered_and_recorded(
    env: &TestEnv,
    mock: &MockModel,
    (output, by): (&std::process::Output, &str),
) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        mock.summary()
    );
    let carried = (mock.conversation_requests().iter()).any(|request| {
        request
            .body
            .to_string()
            .contains("A person answered: Postgres")
    });
    assert!(
        carried,
        "the answer reaches the model: {}\n{stdout}",
        mock.summary()
    );
    let history = env.history();
    let asked = &history["iterations"][0]["questions"][0];
    assert_eq!(asked["answer"]["text"], "Postgres", "{history:#}");
    assert_eq!(asked["answer"]["by"], by);
    env.run(&["--report"]).assert_code(0);
    let report = fs::read_to_string(env.ralph_file("report.html")).unwrap();
    assert!(
        report.contains("Which store should the API use?") && report.contains("<b>Postgres</b>"),
        "the report records both"
    );
}

#[test]
fn claude_code_asks_a_person_through_ralph_ask() {
    asks_and_the_answer_reaches_the_model(Agent::Claude, None, "mcp__ralph__ralph_ask");
}

#[test]
fn claude_code_through_acp_asks_a_person_through_ralph_ask() {
    asks_and_the_answer_reaches_the_model(
        Agent::Claude,
        Some(("claude-acp", "claude-agent-acp")),
        "mcp__ralph__ralph_ask",
    );
}

#[test]
fn claude_code_asks_and_is_answered_with_ralph_answer() {
    asks_and_is_answered(Agent::Claude, None, "mcp__ralph__ralph_ask", "cli");
}

#[test]
fn gemini_cli_through_acp_asks_a_person_through_ralph_ask() {
    asks_and_the_answer_reaches_the_model(
        Agent::Gemini,
        Some(("gemini-acp", "gemini")),
        "mcp_ralph_ralph_ask",
    );
}

#[test]
fn gemini_cli_asks_a_person_through_ralph_ask() {
    asks_and_the_answer_reaches_the_model(Agent::Gemini, None, "mcp_ralph_ralph_ask");
}

#[test]
fn droid_asks_a_person_through_ralph_ask() {
    asks_and_the_answer_reaches_the_model(Agent::Droid, None, "ralph___ralph_ask");
}

/// ralph gave the agent its tools in a home of its own, and left the user's config folder as it
/// was: no file there names ralph's tool server.
fn assert_users_config_untouched(env: &TestEnv, agent: Agent) {
    let folder = match agent {
        Agent::Gemini => ".gemini",
        Agent::Droid => ".factory",
        _ => return,
    };
    let users = env.path().join("home").join(folder);
    for name in ["settings.json", "mcp.json"] {
        let text = fs::read_to_string(users.join(name)).unwrap_or_default();
        assert!(!text.contains("__agent-tools"), "{name}: {text}");
    }
    let ours = env.ralph_file(&format!("agent-homes/{}/{folder}", agent.ralph_name()));
    assert!(ours.is_dir(), "no home of ralph's at {}", ours.display());
}

#[test]
fn droid_through_acp_asks_a_person_through_ralph_ask() {
    asks_and_the_answer_reaches_the_model(
        Agent::Droid,
        Some(("droid-acp", "droid")),
        "ralph___ralph_ask",
    );
}

#[test]
fn kilo_code_through_acp_asks_a_person_through_ralph_ask() {
    asks_and_the_answer_reaches_the_model(
        Agent::KiloCode,
        Some(("kilocode-acp", "kilocode")),
        "ralph_ralph_ask",
    );
}

#[test]
fn kilo_code_asks_a_person_through_ralph_ask() {
    asks_and_the_answer_reaches_the_model(Agent::KiloCode, None, "ralph_ralph_ask");
}

#[test]
fn cline_asks_a_person_through_ralph_ask() {
    asks_and_the_answer_reaches_the_model(Agent::Cline, None, "ralph__ralph_ask");
}

#[test]
fn opencode_asks_a_person_through_ralph_ask() {
    asks_and_the_answer_reaches_the_model(Agent::OpenCode, None, "ralph_ralph_ask");
}

#[test]
fn codex_asks_a_person_through_ralph_ask() {
    asks_and_the_answer_reaches_the_model(Agent::Codex, None, "mcp__ralph__ralph_ask");
}

#[test]
fn qwen_code_asks_a_person_through_ralph_ask() {
    asks_and_the_answer_reaches_the_model(Agent::Qwen, None, "mcp__ralph__ralph_ask");
}

#[test]
fn copilot_asks_a_person_through_ralph_ask() {
    asks_and_the_answer_reaches_the_model(Agent::Copilot, None, "ralph-ralph_ask");
}

/// The names of the tools the model was offered that name `ralph` (how each CLI names an MCP
/// server's tools).
/// What the agent's tools answered, as the model's requests carry it back (Anthropic's
/// `tool_result` blocks, OpenAI's `tool` messages, Gemini's `functionResponse` parts).
fn tool_results(mock: &MockModel) -> Vec<String> {
    fn walk(value: &serde_json::Value, found: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                let answer = map.get("type").and_then(serde_json::Value::as_str)
                    == Some("tool_result")
                    || map.get("role").and_then(serde_json::Value::as_str) == Some("tool")
                    || map.contains_key("functionResponse");
                if answer {
                    let text = value.to_string();
                    if !found.contains(&text) {
                        found.push(text);
                    }
                    return;
                }
                map.values().for_each(|inner| walk(inner, found));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|inner| walk(inner, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    for request in mock.conversation_requests() {
        walk(&request.body, &mut found);
    }
    found
}

/// The ralph tools each of the model's requests offered, request by request (a CLI that sends its
/// first request before its tool servers are connected offers them only later).
fn offered_tools(mock: &MockModel) -> Vec<Vec<String>> {
    let mut offered = Vec::new();
    for request in mock.conversation_requests() {
        let mut names: Vec<String> = Vec::new();
        for piece in request.body.to_string().split('"') {
            if piece.contains("ralph_")
                && piece.len() < 60
                && !names.iter().any(|name| name == piece)
            {
                names.push(piece.to_owned());
            }
        }
        offered.push(names);
    }
    offered
}
