//! Agents that ask, beyond the default run's tests: a question answered through the page's API,
//! notified with the page's link and withdrawn by a stop; a task an agent adds in a `--parallel`
//! task; a sandboxed agent asking; a `--tasks` loop stopped while its agent asks and run again; a
//! `--worktree` loop in JSON, and one killed while it waits; a `--parallel` run killed while its
//! agents ask and resumed. Plain `cargo test` leaves this target out and the README's test
//! command runs it after the rest (`cargo test --test asking`).

use std::fs;
use std::time::Duration;

use serde_json::Value;

use crate::asking_fixture::{
    LOOP, answer_on_page, asking_env, finished_well, journal, spawn_loop, waiting_question,
    waiting_questions,
};
use crate::support::wait_output;

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

/// The first event named `name` among the JSON lines of `stdout`.
fn first_event(stdout: &str, name: &str) -> Value {
    (stdout.lines())
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|event| event["event"] == name)
        .unwrap_or_else(|| panic!("no {name} event: {stdout}"))
}

/// One iteration of a `--tasks` loop.
const TASK_LOOP: [&str; 8] = [
    "Build what the list says",
    "--tasks",
    "--agent",
    "claude-code",
    "--output-format",
    "text",
    "--max-iterations",
    "1",
];

/// A `--parallel 2` run of the task list's two tasks.
const PARALLEL_TWO: [&str; 7] = [
    "Build what the list says",
    "--parallel",
    "2",
    "--agent",
    "claude-code",
    "--output-format",
    "text",
];

/// Waits until no process names `home` (no agent, no tool server of a run there).
fn nothing_left_running(home: &std::path::Path) {
    let home = home.display().to_string();
    crate::support::wait_until(Duration::from_secs(20), "nothing left running", || {
        running_with(&home).is_empty()
    });
}

/// The question asked after `before` (the loop's first), waited for.
fn asked_anew(env: &crate::support::TestEnv, before: &str) -> String {
    let asked = waiting_questions(&env.ralph_file(""), 2);
    asked.into_iter().find(|id| id != before).unwrap()
}

/// Kills `run` outright (SIGKILL) and reaps it.
fn kill_outright(run: &mut std::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(run.id()).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = run.wait();
}

/// Two tasks (`api`, `page`) whose agents ask which store, committed.
fn two_asking_tasks() -> crate::support::TestEnv {
    let env =
        asking_tasks_env("- [ ] Build the API\n  - id: api\n- [ ] Build the page\n  - id: page\n");
    env.git(&["add", "-A"]);
    env.git(&["commit", "-q", "-m", "tasks"]);
    env
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
    let http = crate::support::http;
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
    let (url, requests) = crate::support::http_server();
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
    // Run again, the loop asks anew; the new question is answered and the loop ends well.
    let mut run = spawn_loop(&env, &["--resume", "--max-iterations", "2"]);
    let again = asked_anew(&env, &id);
    env.run(&["--answer", &again, "yes"]).assert_code(0);
    finished_well(&mut run);
}

#[test]
fn a_stop_withdraws_the_questions_of_every_parallel_task() {
    let env = two_asking_tasks();
    let mut run = spawn_loop(&env, &PARALLEL_TWO);
    let ids = waiting_questions(&env.ralph_file(""), 2);
    crate::support::interrupt(&run);
    let output = wait_output(&mut run, Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(130));
    for id in &ids {
        let answer = env.run(&["--answer", id, "1"]);
        answer.assert_code(1);
        assert!(
            answer.stderr().contains("its run stopped"),
            "{}",
            answer.stderr()
        );
    }
    let home = env.ralph_file("").display().to_string();
    assert!(
        running_with(&home).is_empty(),
        "left running: {:?}",
        running_with(&home)
    );
}

#[test]
fn a_sandboxed_agent_asks_through_its_tools() {
    if !crate::support::bwrap_can_sandbox() {
        return;
    }
    let ask = serde_json::json!({"question": "Which store?", "options": ["SQLite", "Postgres"]});
    let env = asking_env("ralph_ask", &ask);
    let sandbox = crate::support::sandboxed_agents(&env);
    let mut args = LOOP.to_vec();
    args.extend(sandbox.iter().map(String::as_str));
    let mut run = spawn_loop(&env, &args);
    let id = waiting_question(&env.ralph_file(""));
    env.run(&["--answer", &id, "1"]).assert_code(0);
    finished_well(&mut run);
    // The sandbox's check of the agent's program ran it once before.
    let result = env.agent_file(&format!("mcp-out.{}", env.agent_calls()));
    assert!(result.contains("A person answered: SQLite"), "{result}");
}

/// An environment whose agent asks which store (SQLite or Postgres) and keeps each task's
/// promise, with the task list `list`.
fn asking_tasks_env(list: &str) -> crate::support::TestEnv {
    let ask = serde_json::json!({"question": "Which store?", "options": ["SQLite", "Postgres"]});
    let env = asking_env("ralph_ask", &ask);
    fs::write(env.agent_dir().join("promise"), "READY_FOR_NEXT_TASK").unwrap();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.ralph_file("ralph-tasks.md"), list).unwrap();
    env
}

#[test]
fn a_task_list_loop_with_json_output_tells_the_question_and_its_task() {
    let env = asking_tasks_env("- [ ] Pick the store\n  - id: store\n");
    let mut args = TASK_LOOP.to_vec();
    args.push("--json");
    let mut run = spawn_loop(&env, &args);
    let id = waiting_question(&env.ralph_file(""));
    // The question is the task's, in --status too.
    let status = env.run(&["--status", "--json"]);
    let report: Value = serde_json::from_str(&status.stdout()).unwrap();
    assert_eq!(report["questions"][0]["task"], "store", "{report}");
    env.run(&["--answer", &id, "2"]).assert_code(0);
    // One iteration: the task's promise kept, the list's not yet (exit 2).
    let output = crate::support::wait_output(&mut run, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    let named = |name: &str| first_event(&stdout, name);
    let asked = named("question_asked");
    assert_eq!(asked["id"], id.as_str());
    assert_eq!(asked["options"], serde_json::json!(["SQLite", "Postgres"]));
    let answered = named("question_answered");
    assert_eq!(answered["answer"], "Postgres");
    assert_eq!(answered["by"], "cli");
    assert!(
        !stdout.contains("❓"),
        "--json prints no person's lines: {stdout}"
    );
    let history = env.history();
    assert_eq!(
        history["iterations"][0]["questions"][0]["task"], "store",
        "{history:#}"
    );
}

#[test]
fn questions_from_parallel_tasks_are_answered_and_recorded_under_their_tasks() {
    questions_from_parallel_tasks(false);
}

#[test]
fn questions_from_sandboxed_parallel_tasks_are_answered_and_recorded_under_their_tasks() {
    if crate::support::bwrap_can_sandbox() {
        questions_from_parallel_tasks(true);
    }
}

/// Two `--parallel` tasks ask at once (in the sandbox when `sandboxed`); each is answered with
/// `ralph --answer`, and the JSON output and the history tell both under their tasks.
fn questions_from_parallel_tasks(sandboxed: bool) {
    let env = two_asking_tasks();
    let mut args = PARALLEL_TWO.to_vec();
    args.extend(["--max-iterations", "2", "--json"]);
    let sandbox = crate::support::sandboxed_agents(&env);
    if sandboxed {
        args.extend(sandbox.iter().map(String::as_str));
    }
    let mut run = spawn_loop(&env, &args);
    let ids = waiting_questions(&env.ralph_file(""), 2);
    // Both questions are listed, each under its task, from the repository's own shell.
    let status = env.run(&["--status", "--json"]);
    let report: Value = serde_json::from_str(&status.stdout()).unwrap();
    let mut tasks: Vec<&str> = (report["questions"].as_array().unwrap().iter())
        .filter_map(|question| question["task"].as_str())
        .collect();
    tasks.sort_unstable();
    assert_eq!(tasks, ["api", "page"], "{report}");
    for (id, answer) in ids.iter().zip(["1", "2"]) {
        env.run(&["--answer", id, answer]).assert_code(0);
    }
    let stdout = finished_well(&mut run);
    let events: Vec<Value> = (stdout.lines())
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let answered: Vec<&Value> = (events.iter())
        .filter(|event| event["event"] == "question_answered")
        .collect();
    assert_eq!(answered.len(), 2, "{stdout}");
    assert!(
        answered.iter().all(|event| event["by"] == "cli"),
        "{stdout}"
    );
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert!(
        list.contains("- [x] Build the API") && list.contains("- [x] Build the page"),
        "{list}"
    );
    let history = env.history();
    let mut recorded: Vec<(String, String)> = (history["iterations"].as_array().unwrap().iter())
        .flat_map(|iteration| {
            iteration["questions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|question| {
            let task = question["task"].as_str().unwrap_or_default().to_owned();
            let text = question["answer"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (task, text)
        })
        .collect();
    recorded.sort();
    assert_eq!(recorded.len(), 2, "{history:#}");
    assert_eq!(recorded[0].0, "api", "{history:#}");
    assert_eq!(recorded[1].0, "page", "{history:#}");
}

#[test]
fn a_question_in_a_worktree_loop_is_answered_from_the_repository() {
    let ask = serde_json::json!({"question": "Which store?", "options": ["SQLite", "Postgres"]});
    let env = asking_env("ralph_ask", &ask);
    let mut args = LOOP.to_vec();
    args.extend(["--worktree", "store", "--merge"]);
    let mut run = spawn_loop(&env, &args);
    let home = env.ralph_file("worktrees/store/.ralph");
    let id = waiting_question(&home);
    let status = env.run(&["--status"]);
    assert!(
        status.stdout().contains("Which store?"),
        "{}",
        status.stdout()
    );
    env.run(&["--answer", &id, "2"]).assert_code(0);
    finished_well(&mut run);
    let result = env.agent_file("mcp-out.1");
    assert!(result.contains("A person answered: Postgres"), "{result}");
}

#[test]
fn a_run_killed_while_a_question_waits_leaves_nothing_waiting_and_resumes_asking_again() {
    let ask = serde_json::json!({"question": "Which store?", "options": ["SQLite", "Postgres"]});
    let env = asking_env("ralph_ask", &ask);
    let mut run = spawn_loop(&env, &LOOP);
    let first = waiting_question(&env.ralph_file(""));
    kill_outright(&mut run);
    // No agent and no tool server outlive the kill, and nobody is asked what no one waits for.
    let home = env.ralph_file("").display().to_string();
    crate::support::wait_until(
        Duration::from_secs(20),
        "the agent and its tools end",
        || running_with(&home).is_empty(),
    );
    let status = env.run(&["--status"]);
    assert!(
        !status.stdout().contains("Which store?"),
        "{}",
        status.stdout()
    );
    let late = env.run(&["--answer", &first, "1"]);
    late.assert_code(1);
    // Resumed (the killed iteration counts), the next iteration asks again; the new question is
    // answered and the loop ends well.
    let mut run = spawn_loop(&env, &["--resume", "--max-iterations", "2"]);
    let second = asked_anew(&env, &first);
    env.run(&["--answer", &second, "2"]).assert_code(0);
    finished_well(&mut run);
}

/// `--tasks`, sandboxed when the machine can: a Ctrl-C while the task's agent asks withdraws the
/// question and leaves nothing running; run again (`--resume`), the task's agent asks anew, is
/// answered, keeps the task's promise, and the history records the answer under the task.
#[test]
fn a_task_list_loop_stopped_while_its_agent_asks_asks_anew_when_run_again() {
    let env = asking_tasks_env("- [ ] Pick the store\n  - id: store\n");
    let sandbox = crate::support::sandboxed_agents(&env);
    let mut args = TASK_LOOP.to_vec();
    if crate::support::bwrap_can_sandbox() {
        args.extend(sandbox.iter().map(String::as_str));
    }
    let mut run = spawn_loop(&env, &args);
    let first = waiting_question(&env.ralph_file(""));
    crate::support::interrupt(&run);
    let output = wait_output(&mut run, Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(130));
    nothing_left_running(&env.ralph_file(""));
    let late = env.run(&["--answer", &first, "1"]);
    late.assert_code(1);
    assert!(
        late.stderr().contains("its run stopped"),
        "{}",
        late.stderr()
    );
    let second = resumed_and_answered(&env, &args, &first);
    let history = env.history();
    let recorded = (history["iterations"].as_array().unwrap().iter())
        .flat_map(|iteration| {
            iteration["questions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|question| question["id"] == second.as_str())
        .unwrap_or_else(|| panic!("{history:#}"));
    assert_eq!(recorded["task"], "store", "{history:#}");
    assert_eq!(recorded["answer"]["text"], "Postgres", "{history:#}");
    assert_eq!(recorded["answer"]["by"], "cli", "{history:#}");
    // The withdrawn question is recorded too, in the stopped iteration.
    let withdrawn = &history["iterations"][0]["questions"][0];
    assert_eq!(withdrawn["id"], first.as_str(), "{history:#}");
    assert_eq!(withdrawn["status"], "cancelled", "{history:#}");
}

/// `--worktree` with JSON output: the question and its answer are events on stdout; a kill -9
/// while it waits leaves no agent, no tool server and no question anyone could answer.
#[test]
fn a_worktree_loop_tells_its_question_in_json_and_a_kill_leaves_none_waiting() {
    let ask = serde_json::json!({"question": "Which store?", "options": ["SQLite", "Postgres"]});
    let env = asking_env("ralph_ask", &ask);
    let mut args = LOOP.to_vec();
    args.extend(["--worktree", "store", "--merge", "--json"]);
    let mut run = spawn_loop(&env, &args);
    let home = env.ralph_file("worktrees/store/.ralph");
    let id = waiting_question(&home);
    env.run(&["--answer", &id, "2"]).assert_code(0);
    let output = wait_output(&mut run, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    let named = |name: &str| first_event(&stdout, name);
    let asked = named("question_asked");
    assert_eq!(asked["id"], id.as_str());
    let answered = named("question_answered");
    assert_eq!(answered["answer"], "Postgres");
    // Asked again in another worktree loop, then killed outright.
    let mut args = LOOP.to_vec();
    args.extend(["--worktree", "again", "--json"]);
    let mut run = spawn_loop(&env, &args);
    let home = env.ralph_file("worktrees/again/.ralph");
    let waiting = waiting_question(&home);
    kill_outright(&mut run);
    nothing_left_running(&home);
    let status = env.run(&["--status"]);
    assert!(
        !status.stdout().contains("Which store?"),
        "{}",
        status.stdout()
    );
    env.run(&["--answer", &waiting, "1"]).assert_code(1);
}

/// `--parallel`, killed outright while both tasks' agents ask: no agent and no tool server
/// outlive it, no question is left to answer, and `--resume` asks both anew; answered, both
/// tasks land and the run ends well.
#[test]
fn a_parallel_run_killed_while_its_agents_ask_resumes_and_asks_anew() {
    let env = two_asking_tasks();
    let mut args = PARALLEL_TWO.to_vec();
    args.extend(["--max-iterations", "2"]);
    let mut run = spawn_loop(&env, &args);
    let first = waiting_questions(&env.ralph_file(""), 2);
    kill_outright(&mut run);
    nothing_left_running(&env.ralph_file(""));
    let status = env.run(&["--status"]);
    assert!(
        !status.stdout().contains("Which store?"),
        "{}",
        status.stdout()
    );
    for id in &first {
        env.run(&["--answer", id, "1"]).assert_code(1);
    }
    let mut run = spawn_loop(&env, &["--resume"]);
    let asked = waiting_questions(&env.ralph_file(""), 4);
    let again: Vec<&String> = asked.iter().filter(|id| !first.contains(id)).collect();
    assert_eq!(again.len(), 2, "{asked:?}");
    for id in again {
        env.run(&["--answer", id, "2"]).assert_code(0);
    }
    finished_well(&mut run);
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert!(
        list.contains("- [x] Build the API") && list.contains("- [x] Build the page"),
        "{list}"
    );
}

/// `--worktree`, sandboxed when the machine can: a Ctrl-C while its agent asks withdraws the
/// question and leaves nothing running; the same loop started again in that worktree asks anew
/// and, answered, merges.
#[test]
fn a_worktree_loop_stopped_while_its_agent_asks_asks_anew_when_started_again() {
    let ask = serde_json::json!({"question": "Which store?", "options": ["SQLite", "Postgres"]});
    let env = asking_env("ralph_ask", &ask);
    let sandbox = crate::support::sandboxed_agents(&env);
    let mut args = LOOP.to_vec();
    args.extend(["--worktree", "store", "--merge"]);
    if crate::support::bwrap_can_sandbox() {
        args.extend(sandbox.iter().map(String::as_str));
    }
    let mut run = spawn_loop(&env, &args);
    let home = env.ralph_file("worktrees/store/.ralph");
    let first = waiting_question(&home);
    crate::support::interrupt(&run);
    let output = wait_output(&mut run, Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(130));
    nothing_left_running(&home);
    env.run(&["--answer", &first, "1"]).assert_code(1);
    // Started afresh, it is refused with the command that goes on with it.
    let refused = env.run(&args);
    refused.assert_code(1);
    assert!(
        refused
            .stderr()
            .contains("ralph --resume --worktree store --merge"),
        "{}",
        refused.stderr()
    );
    let mut run = spawn_loop(&env, &resumed(&args));
    let asked = waiting_questions(&home, 2);
    let second = asked.iter().find(|id| **id != first).unwrap();
    env.run(&["--answer", second, "2"]).assert_code(0);
    finished_well(&mut run);
    assert_answered(&env, "A person answered: Postgres");
    // Merged: the worktree and its branch are gone.
    assert!(!home.exists());
    assert_eq!(env.git(&["branch", "--list", "ralph/store"]), "");
}

/// `--tasks`, killed outright while the task's agent asks: nothing is left running or
/// answerable, and `--resume` asks anew; answered, the task's promise is kept.
#[test]
fn a_task_list_loop_killed_while_its_agent_asks_asks_anew_on_resume() {
    let env = asking_tasks_env("- [ ] Pick the store\n  - id: store\n");
    let mut run = spawn_loop(&env, &TASK_LOOP);
    let first = waiting_question(&env.ralph_file(""));
    kill_outright(&mut run);
    nothing_left_running(&env.ralph_file(""));
    env.run(&["--answer", &first, "1"]).assert_code(1);
    resumed_and_answered(&env, &TASK_LOOP, &first);
    assert_answered(&env, "A person answered: Postgres");
}

/// The options of a run of one iteration (`args`), to resume it: without its prompt (a resumed
/// run keeps the saved one), with `--resume` and one iteration more.
fn resumed<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut again: Vec<&str> = (args.iter().copied().skip(1))
        .filter(|arg| !["--max-iterations", "1"].contains(arg))
        .collect();
    again.extend(["--resume", "--max-iterations", "2"]);
    again
}

/// Resumes the `--tasks` loop run with `args` and answers (the second option) the question its
/// agent asks anew after `first`: the task's promise is kept and the list's limit of iterations
/// ends the run. The new question's id.
fn resumed_and_answered(env: &crate::support::TestEnv, args: &[&str], first: &str) -> String {
    let mut run = spawn_loop(env, &resumed(args));
    let second = asked_anew(env, first);
    env.run(&["--answer", &second, "2"]).assert_code(0);
    let output = wait_output(&mut run, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("Task completion detected"), "{stdout}");
    second
}

/// Some call of the fake agent got `answer` from its `ralph_ask`.
fn assert_answered(env: &crate::support::TestEnv, answer: &str) {
    let outputs: Vec<String> = (fs::read_dir(env.agent_dir())
        .unwrap()
        .filter_map(Result::ok))
    .filter(|entry| entry.file_name().to_string_lossy().starts_with("mcp-out."))
    .filter_map(|entry| fs::read_to_string(entry.path()).ok())
    .collect();
    assert!(
        outputs.iter().any(|output| output.contains(answer)),
        "{outputs:?}"
    );
}
