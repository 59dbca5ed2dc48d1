//! Agents that ask: ralph's tools for the agents it runs (`ralph __agent-tools`, passed as an
//! MCP server), driven by a fake agent CLI that calls them. The tools' other ways and places
//! (the page's API, notifications and a stop, a `--parallel` task, the sandbox) are in the
//! `asking` target.

use std::fs;

use crate::asking_fixture::{
    LOOP, asking_env, finished_well, journal, spawn_loop, waiting_question,
};

#[test]
fn a_question_is_shown_answered_from_another_shell_and_recorded() {
    let ask = serde_json::json!({"question": "Which store?", "options": ["SQLite", "Postgres"]});
    let env = asking_env("ralph_ask", &ask);
    let mut run = spawn_loop(&env, &LOOP);
    let id = waiting_question(&env.ralph_file(""));
    // The agent was given the tools, and told of them.
    let argv = fs::read_to_string(env.agent_dir().join("argv.1")).unwrap();
    assert!(
        argv.contains("--mcp-config") && argv.contains("__agent-tools"),
        "{argv}"
    );
    // `--status` shows the question and how to answer it.
    let status = env.run(&["--status"]);
    let shown = status.stdout();
    assert!(
        shown.contains(&format!("❓ Question {id}")) && shown.contains("Which store?"),
        "{shown}"
    );
    assert!(
        shown.contains("2. Postgres") && shown.contains(&format!("ralph --answer {id}")),
        "{shown}"
    );
    // Unknown ids and empty answers are refused, saying what waits.
    let unknown = env.run(&["--answer", "q000", "yes"]);
    unknown.assert_code(1);
    assert!(unknown.stderr().contains(&id), "{}", unknown.stderr());
    let answered = env.run(&["--answer", &id, "2"]);
    answered.assert_code(0);
    assert!(
        answered.stdout().contains("\"Postgres\""),
        "{}",
        answered.stdout()
    );
    let again = env.run(&["--answer", &id, "1"]);
    again.assert_code(1);
    assert!(
        again.stderr().contains("answered already"),
        "{}",
        again.stderr()
    );
    let stdout = finished_well(&mut run);
    // The terminal told the question and its answer.
    assert!(
        stdout.contains(&format!("❓ The agent asks (question {id}): Which store?")),
        "{stdout}"
    );
    assert!(stdout.contains("2. Postgres"), "{stdout}");
    assert!(
        stdout.contains(&format!("💬 Question {id} answered with ralph --answer")),
        "{stdout}"
    );
    // The agent got the answer.
    let result = env.agent_file("mcp-out.1");
    assert!(result.contains("A person answered: Postgres"), "{result}");
    // The history and the journal record both.
    let history = env.history();
    let asked = &history["iterations"][0]["questions"][0];
    assert_eq!(asked["id"], id.as_str(), "{history:#}");
    assert_eq!(asked["question"], "Which store?");
    assert_eq!(asked["status"], "answered");
    assert_eq!(asked["answer"]["text"], "Postgres");
    assert_eq!(asked["answer"]["by"], "cli");
    assert!(asked["answer"]["at"].is_string());
    let told = journal(&env, "question_asked");
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(
        told[0]["options"],
        serde_json::json!(["SQLite", "Postgres"])
    );
    let done = journal(&env, "question_answered");
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0]["answer"], "Postgres");
    assert_eq!(done[0]["by"], "cli");
}

#[test]
fn an_unanswered_question_times_out_and_the_iteration_timeout_waits_for_it() {
    let env = asking_env(
        "ralph_ask",
        &serde_json::json!({"question": "Where is the key?"}),
    );
    let mut args = LOOP.to_vec();
    // Neither the iteration's timeout nor its idle timeout runs while the agent waits.
    args.extend([
        "--ask-timeout",
        "2s",
        "--iteration-timeout",
        "1s",
        "--idle-timeout",
        "1s",
    ]);
    let run = env.run(&args);
    run.assert_code(0);
    let result = env.agent_file("mcp-out.1");
    assert!(
        result.contains("no answer in 2s: decide yourself and say what you chose"),
        "{result}"
    );
    let stdout = run.stdout();
    assert!(
        !stdout.contains("timed out"),
        "the iteration timeout waited: {stdout}"
    );
    assert!(stdout.contains("⌛ Nobody answered question"), "{stdout}");
    let history = env.history();
    let iteration = &history["iterations"][0];
    assert_eq!(
        iteration["questions"][0]["status"], "timed_out",
        "{history:#}"
    );
    assert_eq!(iteration["exit_code"], 0, "{history:#}");
    assert_eq!(journal(&env, "question_answered")[0]["status"], "timed_out");
}

#[test]
fn without_agent_tools_no_server_is_passed_and_the_prompt_does_not_name_them() {
    let env = asking_env("ralph_note", &serde_json::json!({"text": "x"}));
    let mut args = LOOP.to_vec();
    args.push("--no-agent-tools");
    env.run(&args).assert_code(0);
    let argv = fs::read_to_string(env.agent_dir().join("argv.1")).unwrap();
    assert!(!argv.contains("--mcp-config"), "{argv}");
    assert!(!argv.contains("ralph_ask"), "{argv}");
    // With them, the prompt says when to ask.
    let env = asking_env(
        "ralph_note",
        &serde_json::json!({"text": "Learned: the API needs auth."}),
    );
    env.run(&LOOP).assert_code(0);
    let argv = fs::read_to_string(env.agent_dir().join("argv.1")).unwrap();
    assert!(argv.contains("## Ralph's Tools"), "{argv}");
    assert!(
        argv.contains("Never use it to ask permission to continue"),
        "{argv}"
    );
    // ralph_note wrote the progress log.
    let log = fs::read_to_string(env.ralph_file("progress.md")).unwrap();
    assert!(
        log.contains("## Note from iteration 1") && log.contains("Learned: the API needs auth."),
        "{log}"
    );
}

#[test]
fn on_a_terminal_a_typed_number_answers_the_question() {
    let ask = serde_json::json!({"question": "Which store?", "options": ["SQLite", "Postgres"]});
    let env = asking_env("ralph_ask", &ask);
    let Some(tmux) = crate::watch::Tmux::new(&env) else {
        return;
    };
    tmux.start_ralph(
        "'Build the API' --agent claude-code --output-format text --max-iterations 1",
        (140, 40),
    );
    tmux.wait_for(&[
        "❓ The agent asks",
        "Or type the answer here (or an option's number) and press Enter",
    ]);
    tmux.run(&["send-keys", "-t", "watch", "2", "Enter"]);
    let screen = tmux.wait_for(&["ralph exited 0"]);
    assert!(screen.contains("answered at the terminal"), "{screen}");
    let result = env.agent_file("mcp-out.1");
    assert!(result.contains("A person answered: Postgres"), "{result}");
}

#[test]
fn gemini_cli_gets_the_tools_in_a_home_of_ralphs_and_the_users_settings_stay_as_they_were() {
    let env = crate::support::TestEnv::new();
    let users = env.path().join("home/.gemini");
    fs::create_dir_all(&users).unwrap();
    let settings = "{\n  // mine\n  \"general\": {\"maxAttempts\": 1},\n}\n";
    fs::write(users.join("settings.json"), settings).unwrap();
    fs::write(users.join("oauth_creds.json"), "{\"token\": \"t\"}").unwrap();
    // The fake Gemini CLI keeps what its home holds, and keeps the promise.
    env.write_executable(
        "gemini",
        "#!/bin/sh\nh=$GEMINI_CLI_HOME/.gemini\ncat \"$h/settings.json\" > \"$FAKE_AGENT_DIR/settings\"\ncat \"$h/oauth_creds.json\" > \"$FAKE_AGENT_DIR/creds\"\necho '<promise>COMPLETE</promise>'\n",
    );
    let args = ["Build it", "--agent", "gemini", "--output-format", "text"];
    let dry = env.run(&[&args[..], &["--dry-run"]].concat());
    dry.assert_code(0);
    assert!(
        dry.stdout().contains("GEMINI_CLI_HOME=") && dry.stdout().contains("\"trust\":true"),
        "{}",
        dry.stdout()
    );
    env.run(&[&args[..], &["--max-iterations", "1"]].concat())
        .assert_code(0);
    let given: serde_json::Value = serde_json::from_str(&env.agent_file("settings")).unwrap();
    assert_eq!(given["general"]["maxAttempts"], 1, "{given}");
    assert_eq!(given["mcpServers"]["ralph"]["args"][0], "__agent-tools");
    assert_eq!(env.agent_file("creds"), "{\"token\": \"t\"}");
    assert_eq!(
        fs::read_to_string(users.join("settings.json")).unwrap(),
        settings
    );
    // Nothing of it is committed.
    let committed = env.git(&["ls-files", ".ralph"]);
    assert!(!committed.contains("agent-homes"), "{committed}");
    // A settings file that is not JSON stops the run before the agent starts, saying what to do.
    fs::write(users.join("settings.json"), "{ not json").unwrap();
    let refused = env.run(&[&args[..], &["--max-iterations", "1"]].concat());
    refused.assert_code(1);
    assert!(
        refused
            .stderr()
            .contains("cannot give Gemini CLI ralph's tools")
            && refused.stderr().contains("--no-agent-tools"),
        "{}",
        refused.stderr()
    );
    env.run(&[&args[..], &["--max-iterations", "1", "--no-agent-tools"]].concat())
        .assert_code(0);
}

#[test]
fn the_heartbeat_says_the_agent_waits_for_an_answer_and_ralph_context_tells_the_question() {
    let ask = serde_json::json!({"question": "Which store?", "options": ["SQLite", "Postgres"]});
    let env = asking_env("ralph_ask", &ask);
    // The second run of the agent asks for its context.
    let context = serde_json::json!({"name": "ralph_context", "arguments": {}});
    fs::write(env.agent_dir().join("call.2"), context.to_string()).unwrap();
    // Streamed, the agent's wait shows in the heartbeat.
    let mut args = LOOP[..5].to_vec();
    args.extend(["--max-iterations", "2", "--min-iterations", "2"]);
    let mut run = env
        .ralph()
        .args(&args)
        .env("RALPH_HEARTBEAT_MS", "100")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let seen = crate::support::read_until(
        &mut run,
        "waiting for an answer (",
        std::time::Duration::from_secs(20),
    );
    let id = waiting_question(&env.ralph_file(""));
    env.run(&["--answer", &id, "2"]).assert_code(0);
    let output = crate::support::wait_output(&mut run, std::time::Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(0), "{seen}");
    // The next iteration's ralph_context names the question, its answer, and the iteration.
    let told = env.agent_file("mcp-out.2");
    assert!(
        told.contains(&id) && told.contains("Postgres") && told.contains("\\\"iteration\\\": 2"),
        "{told}"
    );
}

#[test]
fn a_custom_command_line_agent_gets_the_tools_its_tools_args_name_and_asks() {
    let ask = serde_json::json!({"question": "Which store?", "options": ["SQLite", "Postgres"]});
    let env = asking_env("ralph_ask", &ask);
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.ralph_file("config.toml"),
        "[agents.mine]\ncommand = \"claude\"\nargs = [\"{prompt}\"]\ntools_args = [\"--mcp-config\", \"{mcp_config}\"]\n",
    )
    .unwrap();
    let args = ["Build the API", "--agent", "mine", "--max-iterations", "1"];
    let mut run = spawn_loop(&env, &args);
    let id = waiting_question(&env.ralph_file(""));
    env.run(&["--answer", &id, "2"]).assert_code(0);
    finished_well(&mut run);
    assert!(
        env.agent_file("mcp-out.1")
            .contains("A person answered: Postgres")
    );
    let argv = fs::read_to_string(env.agent_dir().join("argv.1")).unwrap();
    assert!(argv.contains("## Ralph's Tools"), "{argv}");
}
