//! One stream for every listener: in every shape of run (a loop, a task list, `--parallel`,
//! `--worker`, `--worktree`), an iteration's timeout, a refused commit and a gate's refusal are
//! events in `.ralph/events.jsonl`, on the page's event stream, and for the hooks subscribed to
//! their names.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::fleet::{machine, machines, start_worker};
use crate::serve::{events_until, stop_server};
use crate::support::{TestEnv, served_at, wait_output};

/// The agent: its first call runs past the iteration's time limit, its second writes a file the
/// repository's pre-commit hook refuses, its third removes it, does the work and keeps its
/// promise (`$PROMISE`), as every later one does.
const AGENT: &str = r#"case $n in
1) sleep 20 ;;
2) echo refused > refused.txt ;;
3) rm -f refused.txt; echo done > work.txt
   if [ -f .ralph/ralph-tasks.md ]; then sed -i 's/^- \[.\] /- [x] /' .ralph/ralph-tasks.md; fi
   echo "<promise>$PROMISE</promise>" ;;
*) echo "<promise>$PROMISE</promise>" ;;
esac
"#;

/// Refuses a commit that holds `refused.txt`.
const PRE_COMMIT: &str = "#!/bin/sh
if git diff --cached --name-only | grep -qx refused.txt; then
  echo 'refused.txt may not be committed' >&2
  exit 1
fi
";

/// The events each shape must tell, and the gate's refusal it meets.
const TOLD: [&str; 2] = ["iteration_timed_out", "commit_failed"];

/// What a run is given: the agent, the hook, the gate failing on its `refuse_at`-th run, and a
/// hook on each event name writing the event to `heard.jsonl`.
fn prepare(env: &TestEnv, repos: &[&Path], promise: &str, refuse_at: u32) -> Vec<String> {
    env.agent_script(None, &format!("PROMISE={promise}\n{AGENT}"));
    for repo in repos {
        let hook = repo.join(".git/hooks/pre-commit");
        fs::write(&hook, PRE_COMMIT).unwrap();
        fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let dir = env.agent_dir();
    let gate = dir.join("gate.sh");
    fs::write(
        &gate,
        format!(
            "n=0; [ -f '{count}' ] && read -r n < '{count}'; n=$((n + 1)); echo $n > '{count}'
if [ $n -eq {refuse_at} ]; then echo 'the gate refuses this once'; exit 1; fi
",
            count = dir.join("gate-count").display()
        ),
    )
    .unwrap();
    let heard = dir.join("heard.jsonl");
    let mut args = vec![
        "--iteration-timeout".to_owned(),
        "600ms".to_owned(),
        "--max-iterations".to_owned(),
        "8".to_owned(),
        "--verify".to_owned(),
        format!("sh '{}'", gate.display()),
    ];
    for name in TOLD.iter().chain(&["completion_refused", "merge_refused"]) {
        args.push("--on-event".to_owned());
        args.push(format!("{name}=cat >> '{}'", heard.display()));
    }
    args
}

/// Each event named in `names` is in the journal of `repo` and on the page's event stream served
/// from it (of the task `task`, when given), and was heard by its hook.
fn assert_told(env: &TestEnv, repo: &Path, names: &[&str], task: Option<&str>) {
    let is = |event: &serde_json::Value, name: &str| {
        event["event"] == name && task.is_none_or(|task| event["task"] == task)
    };
    let journal = fs::read_to_string(repo.join(".ralph/events.jsonl")).unwrap();
    let journal: Vec<serde_json::Value> = journal
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let heard = fs::read_to_string(env.agent_dir().join("heard.jsonl")).unwrap_or_default();
    let heard: Vec<serde_json::Value> = heard
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let mut server = env
        .ralph()
        .current_dir(repo)
        .args(["--serve", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (port, _) = served_at(&mut server);
    let streamed = events_until(port, None, |events| {
        names
            .iter()
            .all(|name| events.iter().any(|(_, event)| is(event, name)))
    });
    stop_server(&mut server);
    for name in names {
        let names: Vec<&str> = journal.iter().filter_map(|e| e["event"].as_str()).collect();
        assert!(
            journal.iter().any(|event| is(event, name)),
            "{name} is in the journal: {names:?}"
        );
        assert!(
            streamed.iter().any(|(_, event)| is(event, name)),
            "{name} is on the page's stream"
        );
        // (A `--worktree` loop's hooks hear its events as the loop's own, without `task`.)
        assert!(
            heard.iter().any(|event| event["event"] == *name),
            "its hook heard {name}: {heard:?}"
        );
    }
}

/// The refused commit's event says why.
fn assert_commit_refusal_explained(repo: &Path) {
    let journal = fs::read_to_string(repo.join(".ralph/events.jsonl")).unwrap();
    let failed = journal
        .lines()
        .find(|line| line.contains("\"event\":\"commit_failed\""))
        .unwrap();
    assert!(
        failed.contains("refused.txt may not be committed"),
        "{failed}"
    );
}

#[test]
fn a_loop_tells_every_listener() {
    let env = TestEnv::new();
    let args = prepare(&env, &[&env.work()], "COMPLETE", 1);
    let mut all: Vec<&str> = vec!["Do the work"];
    all.extend(args.iter().map(String::as_str));
    let run = env.run_loop(&all);
    run.assert_code(0);
    let mut names = TOLD.to_vec();
    names.push("completion_refused");
    assert_told(&env, &env.work(), &names, None);
    assert_commit_refusal_explained(&env.work());
}

#[test]
fn a_task_list_loop_tells_every_listener() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.ralph_file("ralph-tasks.md"), "- [ ] The only task\n").unwrap();
    let args = prepare(&env, &[&env.work()], "COMPLETE", 1);
    let mut all: Vec<&str> = vec!["Do the work", "--tasks"];
    all.extend(args.iter().map(String::as_str));
    env.run_loop(&all).assert_code(0);
    let mut names = TOLD.to_vec();
    names.push("completion_refused");
    assert_told(&env, &env.work(), &names, None);
}

#[test]
fn a_worktree_loop_tells_every_listener() {
    let env = TestEnv::new();
    let args = prepare(&env, &[&env.work()], "COMPLETE", 1);
    let mut all: Vec<&str> = vec!["--worktree", "side", "--merge", "Do the work"];
    all.extend(args.iter().map(String::as_str));
    env.run_loop(&all).assert_code(0);
    let mut names = TOLD.to_vec();
    names.push("completion_refused");
    assert_told(&env, &env.work(), &names, Some("side"));
}

#[test]
fn a_parallel_run_tells_every_listener() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [ ] The only task\n  - id: only\n",
    )
    .unwrap();
    env.git(&["add", "-A"]);
    env.git(&["commit", "-q", "-m", "tasks"]);
    // The gate's first run is the task loop's own check; its second, at the merge, refuses.
    let args = prepare(&env, &[&env.work()], "READY_FOR_NEXT_TASK", 2);
    let mut all: Vec<&str> = vec!["Do the work", "--parallel", "1"];
    all.extend(args.iter().map(String::as_str));
    env.run_loop(&all).assert_code(0);
    assert_told(&env, &env.work(), &TOLD, Some("only"));
    assert_told(&env, &env.work(), &["merge_refused"], None);
}

#[test]
fn a_worker_tells_every_listener() {
    let env = machines("- [ ] The only task\n  - id: only\n", &["m1"]);
    let clone = machine(&env, "m1");
    // `machines` installs its own agent: this test's is the fake agent with the script above.
    env.write_executable("opencode", crate::support::FAKE_AGENT);
    let args = prepare(&env, &[&clone], "READY_FOR_NEXT_TASK", 2);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut worker = start_worker(&env, "m1", &args);
    let output = wait_output(&mut worker, Duration::from_secs(90));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_told(&env, &clone, &TOLD, Some("only"));
    assert_told(&env, &clone, &["merge_refused"], None);
}
