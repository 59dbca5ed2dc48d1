//! Agents that ask: ralph's tools for the agents it runs (`ralph __agent-tools`, passed as an
//! MCP server), driven by a fake agent CLI that calls them (`tests/fixtures/fake-mcp-agent.sh`).

use std::fs;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::{TestEnv, wait_output, wait_until};

const FAKE_MCP_AGENT: &str = include_str!("../fixtures/fake-mcp-agent.sh");

/// An environment whose `claude` calls the tool `name` with `arguments` through ralph's tools.
pub(crate) fn asking_env(name: &str, arguments: &Value) -> TestEnv {
    let env = TestEnv::new();
    env.write_executable("claude", FAKE_MCP_AGENT);
    let call = serde_json::json!({"name": name, "arguments": arguments});
    fs::write(env.agent_dir().join("call"), call.to_string()).unwrap();
    env
}

const LOOP: [&str; 8] = [
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

/// The id of the first question waiting in `.ralph/questions/`, waited for.
pub(crate) fn waiting_question(ralph_dir: &Path) -> String {
    let folder = ralph_dir.join("questions");
    let mut id = None;
    wait_until(Duration::from_secs(30), "a question waits", || {
        id = fs::read_dir(&folder).ok().and_then(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .find_map(|name| name.strip_suffix(".json").map(str::to_owned))
        });
        id.is_some()
    });
    id.unwrap()
}

/// `POST /api/v1/answers` to the server at `port`, with its `token`: the status and body.
pub(crate) fn answer_on_page(port: u16, token: &str, body: &str) -> (u16, String) {
    let bearer = format!("Bearer {token}");
    let own = format!("http://127.0.0.1:{port}");
    let allowed = [("Authorization", bearer.as_str()), ("Origin", own.as_str())];
    crate::serve::http(port, "POST", "/api/v1/answers", &allowed, body)
}

/// The command lines of the processes running now that name `text`.
fn running_with(text: &str) -> Vec<String> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    (entries.filter_map(Result::ok))
        .filter_map(|entry| fs::read(entry.path().join("cmdline")).ok())
        .map(|line| String::from_utf8_lossy(&line).replace('\0', " "))
        .filter(|line| line.contains(text))
        .collect()
}

/// The journal's events named `name`.
fn journal(env: &TestEnv, name: &str) -> Vec<Value> {
    let text = fs::read_to_string(env.ralph_file("events.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["event"] == name)
        .collect()
}

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
    let output = wait_output(&mut run, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
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
    args.extend(["--ask-timeout", "2s", "--iteration-timeout", "1s"]);
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
fn a_question_is_answered_through_the_page_api_with_the_token() {
    let ask = serde_json::json!({"question": "Ship on Friday?", "options": ["yes", "no"]});
    let env = asking_env("ralph_ask", &ask);
    let mut args = LOOP.to_vec();
    args.extend(["--serve", "127.0.0.1:0"]);
    let mut run = spawn_loop(&env, &args);
    let (port, token) = crate::support::served_at(&mut run);
    let id = waiting_question(&env.ralph_file(""));
    let http = crate::serve::http;
    let (status, listed) = http(port, "GET", "/api/v1/questions", &[], "");
    assert_eq!(status, 200, "{listed}");
    assert!(
        listed.contains(&id) && listed.contains("Ship on Friday?"),
        "{listed}"
    );
    let (_, state) = http(port, "GET", "/api/v1/state", &[], "");
    assert!(
        state.contains("\"questions\"") && state.contains(&id),
        "{state}"
    );
    let answer = serde_json::json!({"id": id, "answer": "1"}).to_string();
    // A change needs the token.
    assert_eq!(http(port, "POST", "/api/v1/answers", &[], &answer).0, 401);
    let bearer = format!("Bearer {token}");
    let own = format!("http://127.0.0.1:{port}");
    let allowed = [("Authorization", bearer.as_str()), ("Origin", own.as_str())];
    let none = serde_json::json!({"id": id}).to_string();
    assert_eq!(
        http(port, "POST", "/api/v1/answers", &allowed, &none).0,
        400
    );
    let unknown = serde_json::json!({"id": "q999999", "answer": "no"}).to_string();
    let (status, body) = answer_on_page(port, &token, &unknown);
    assert_eq!(status, 404, "{body}");
    assert!(
        body.contains(&id),
        "the questions waiting are named: {body}"
    );
    let (status, body) = answer_on_page(port, &token, &answer);
    assert_eq!(status, 200, "{body}");
    let answered: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answered["answer"]["text"], "yes");
    assert_eq!(answered["answer"]["by"], "page");
    let (status, body) = answer_on_page(port, &token, &answer);
    assert_eq!(status, 409, "answered once: {body}");
    let output = wait_output(&mut run, Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(0));
    let result = env.agent_file("mcp-out.1");
    assert!(result.contains("A person answered: yes"), "{result}");
    assert_eq!(
        env.history()["iterations"][0]["questions"][0]["answer"]["by"],
        "page"
    );
}

#[test]
fn a_task_an_agent_adds_in_a_parallel_task_lands_in_the_base_list_with_its_blockers() {
    let add =
        serde_json::json!({"text": "Document the API", "blocked_by": "api", "touches": "docs/**"});
    let env = asking_env("ralph_add_task", &add);
    // Only the first run of the agent adds the task (the added task's own run adds nothing).
    fs::rename(env.agent_dir().join("call"), env.agent_dir().join("call.1")).unwrap();
    fs::write(env.agent_dir().join("promise"), "READY_FOR_NEXT_TASK").unwrap();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [ ] Build the API\n  - id: api\n",
    )
    .unwrap();
    env.git(&["add", "-A"]);
    env.git(&["commit", "-q", "-m", "tasks"]);
    let run = env.run_loop_with(
        &[
            "Build what the list says",
            "--parallel",
            "1",
            "--agent",
            "claude-code",
            "--output-format",
            "text",
            "--max-iterations",
            "2",
        ],
        |command| {
            command.env("RALPH_WORKER_POLL_MS", "50");
        },
    );
    let result = env.agent_file("mcp-out.1");
    assert!(
        result.contains("\"number\": 2") || result.contains("\"number\":2"),
        "{result}\n{}",
        run.stdout()
    );
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert!(list.contains("- [x] Build the API"), "{list}");
    let added = list
        .split("Document the API")
        .nth(1)
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        added.contains("blocked_by: api") && added.contains("touches: docs/**"),
        "{list}"
    );
    // Bad input is the call's error, and adds nothing.
    let bad = serde_json::json!({"text": "Ship it", "blocked_by": "nosuch"});
    let env = asking_env("ralph_add_task", &bad);
    env.run(&LOOP).assert_code(0);
    let result = env.agent_file("mcp-out.1");
    assert!(
        result.contains("\"error\"") && result.contains("-32602"),
        "{result}"
    );
    assert!(result.contains("nosuch"), "{result}");
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap_or_default();
    assert!(!list.contains("Ship it"), "{list}");
}

#[test]
fn a_question_is_notified_with_the_pages_link_and_a_stop_withdraws_it() {
    let env = asking_env("ralph_ask", &serde_json::json!({"question": "Deploy now?"}));
    let (url, requests) = crate::observe::http_server();
    let mut args = LOOP.to_vec();
    args.extend(["--serve", "127.0.0.1:0", "--notify", &url]);
    let mut run = spawn_loop(&env, &args);
    let (port, token) = crate::support::served_at(&mut run);
    let id = waiting_question(&env.ralph_file(""));
    let request = requests.recv_timeout(Duration::from_secs(20)).unwrap();
    let body: Value = serde_json::from_str(request.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["event"], "question_asked", "{body}");
    assert_eq!(body["title"], "ralph: the agent asks");
    let text = body["text"].as_str().unwrap();
    assert!(text.starts_with("Deploy now?"), "{text}");
    assert!(
        text.contains(&format!("http://127.0.0.1:{port}/#token={token}")),
        "{text}"
    );
    assert!(text.contains(&format!("ralph --answer {id}")), "{text}");
    // A stop (Ctrl-C) withdraws the question, and leaves no agent and no tool server running.
    crate::support::interrupt(&run);
    let output = wait_output(&mut run, Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(130));
    let question: Value = serde_json::from_str(
        &fs::read_to_string(env.ralph_file(&format!("questions/{id}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(question["status"], "cancelled", "{question}");
    assert_eq!(journal(&env, "question_answered")[0]["status"], "cancelled");
    let home = env.ralph_file("").display().to_string();
    assert!(
        running_with(&home).is_empty(),
        "a tool server is left: {:?}",
        running_with(&home)
    );
    // Too late to answer: said so.
    let late = env.run(&["--answer", &id, "yes"]);
    late.assert_code(1);
    assert!(
        late.stderr().contains("no longer waiting: its run stopped"),
        "{}",
        late.stderr()
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
fn a_sandboxed_agent_asks_through_its_tools() {
    if !crate::support::bwrap_can_sandbox() {
        return;
    }
    let ask = serde_json::json!({"question": "Which store?", "options": ["SQLite", "Postgres"]});
    let env = asking_env("ralph_ask", &ask);
    let (bin, agent) = (env.bin(), env.agent_dir());
    let writable = format!("{}:rw", agent.display());
    let mut args = LOOP.to_vec();
    args.extend(["--sandbox", "bwrap", "--sandbox-env", "FAKE_AGENT_DIR"]);
    args.extend([
        "--sandbox-mount",
        bin.to_str().unwrap(),
        "--sandbox-mount",
        &writable,
    ]);
    let mut run = spawn_loop(&env, &args);
    let id = waiting_question(&env.ralph_file(""));
    env.run(&["--answer", &id, "1"]).assert_code(0);
    let output = wait_output(&mut run, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The sandbox's check of the agent's program ran it once before.
    let result = env.agent_file(&format!("mcp-out.{}", env.agent_calls()));
    assert!(result.contains("A person answered: SQLite"), "{result}");
}
