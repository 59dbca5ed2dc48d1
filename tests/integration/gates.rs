//! Completion you can trust: verification gates, task dependencies and attempts, the progress
//! log, and promise formats.

use std::fs;

use crate::support::TestEnv;

fn write_tasks(env: &TestEnv, content: &str) {
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.ralph_file("ralph-tasks.md"), content).unwrap();
}

fn tasks_file(env: &TestEnv) -> String {
    fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap()
}

#[test]
fn a_failing_verify_refuses_completion_and_tells_the_agent_why() {
    let env = TestEnv::new();
    fs::write(
        env.work().join("check.sh"),
        "echo 'checking the widgets'; test -f done.txt\n",
    )
    .unwrap();
    env.agent_script(Some(2), "touch done.txt");
    let run = env.run_loop_with(
        &["task", "--verify", "sh check.sh", "--max-iterations", "4"],
        |c| {
            c.env("FAKE_AGENT_COMPLETE_AT", "1");
        },
    );
    run.assert_code(0);
    assert_eq!(env.agent_calls(), 2, "refused once, accepted once");
    assert!(run.stdout().contains("🔎 Verifying: sh check.sh"));
    assert!(
        run.stdout().contains("   │ checking the widgets"),
        "{}",
        run.stdout()
    );
    assert!(
        run.stdout()
            .contains("⛔ Completion refused after iteration 1: `sh check.sh` failed.")
    );
    let prompt = env.agent_prompt(2);
    assert!(prompt.contains("## Completion was refused"), "{prompt}");
    assert!(prompt.contains("`sh check.sh` failed (exit code 1)"));
    assert!(prompt.contains("checking the widgets"));
    let history = env.history();
    assert_eq!(
        history["iterations"][0]["completion_refused"],
        "verification failed: `sh check.sh` (exit code 1)"
    );
    assert_eq!(history["iterations"][0]["verification"][0]["passed"], false);
    let passed = &history["iterations"][1]["verification"][0];
    assert_eq!(passed["passed"], true);
    // The evidence: the exit code, how long it ran, and the tree it ran on (the agent's file in it).
    assert_eq!(passed["exit_code"], 0);
    assert!(passed["duration_ms"].is_u64(), "{passed}");
    let tree = passed["tree"].as_str().unwrap();
    assert_eq!(env.git(&["cat-file", "-t", tree]).trim(), "tree");
    assert!(
        env.git(&["ls-tree", "--name-only", tree])
            .contains("done.txt")
    );
    let refused_tree = history["iterations"][0]["verification"][0]["tree"].as_str();
    assert_ne!(
        refused_tree,
        Some(tree),
        "the first ran on the tree without done.txt"
    );
}

#[test]
fn a_passing_verify_completes_and_verify_output_never_completes() {
    let env = TestEnv::new();
    let run = env.run_loop_with(
        &[
            "task",
            "--verify",
            "true",
            "--verify",
            "echo '<promise>COMPLETE</promise>'",
        ],
        |c| {
            c.env("FAKE_AGENT_COMPLETE_AT", "1");
        },
    );
    run.assert_code(0);
    assert_eq!(env.agent_calls(), 1);

    let env = TestEnv::new();
    let run = env.run_loop(&[
        "task",
        "--verify",
        "echo '<promise>COMPLETE</promise>'; false",
        "--max-iterations",
        "2",
    ]);
    run.assert_code(2);
}

#[test]
fn dependencies_point_the_agent_at_an_unblocked_task() {
    let env = TestEnv::new();
    write_tasks(
        &env,
        "# Ralph Tasks\n\n- [ ] Build the API\n  - blocked_by: db\n- [ ] Create the schema\n  - id: db\n",
    );
    env.agent_script(
        Some(1),
        "sed -i 's/- \\[ \\] Create/- [x] Create/' .ralph/ralph-tasks.md",
    );
    env.run_loop(&["goal", "--tasks", "--max-iterations", "2"])
        .assert_code(2);
    assert!(
        env.agent_prompt(1)
            .contains("📍 NEXT TASK: \"Create the schema\""),
        "{}",
        env.agent_prompt(1)
    );
    assert!(
        env.agent_prompt(2)
            .contains("📍 NEXT TASK: \"Build the API\"")
    );

    let list = env.run(&["--list-tasks"]).stdout();
    assert!(list.contains("1. ⏸️ Build the API\n"), "{list}");
}

#[test]
fn blocked_tasks_are_shown_and_a_cycle_stops_the_run() {
    let env = TestEnv::new();
    write_tasks(
        &env,
        "- [ ] A\n  - id: a\n  - blocked_by: b\n- [ ] B\n  - id: b\n  - blocked_by: a\n",
    );
    let list = env.run(&["--list-tasks"]).stdout();
    assert!(list.contains("1. ⏸️ A (blocked by: b)"), "{list}");
    let run = env.run_loop(&["goal", "--tasks"]);
    run.assert_code(3);
    assert_eq!(env.agent_calls(), 0);
    let stdout = run.stdout();
    assert!(stdout.contains("⛔ No task can be started"), "{stdout}");
    assert!(stdout.contains("1. ⏸️ A — waits for b"), "{stdout}");
    assert!(stdout.contains("2. ⏸️ B — waits for a"), "{stdout}");
}

#[test]
fn max_attempts_fails_a_task_and_blocks_its_dependents() {
    let env = TestEnv::new();
    write_tasks(
        &env,
        "- [ ] Hard task\n  - id: hard\n  - max_attempts: 2\n- [ ] Needs hard\n  - blocked_by: hard\n- [ ] Other\n",
    );
    env.agent_script(
        Some(3),
        "sed -i 's/- \\[ \\] Other/- [x] Other/' .ralph/ralph-tasks.md",
    );
    let run = env.run_loop(&["goal", "--tasks", "--max-iterations", "6"]);
    run.assert_code(3);
    assert_eq!(env.agent_calls(), 3);
    assert!(env.agent_prompt(2).contains("NEXT TASK: \"Hard task\""));
    assert!(
        env.agent_prompt(3).contains("NEXT TASK: \"Other\""),
        "{}",
        env.agent_prompt(3)
    );
    let content = tasks_file(&env);
    assert!(
        content.contains(
            "- [!] Hard task\n  - id: hard\n  - max_attempts: 2\n  - note: failed after 2 attempts"
        ),
        "{content}"
    );
    assert!(
        run.stdout()
            .contains("❌ Task \"Hard task\" failed after 2 attempts")
    );
    assert!(
        run.stdout()
            .contains("2. ⏸️ Needs hard — waits for hard (failed)"),
        "{}",
        run.stdout()
    );
    let status = env.run(&["--status", "--tasks"]).stdout();
    assert!(status.contains("❌ Hard task"), "{status}");
    assert!(
        status.contains("Needs hard (blocked by: hard (failed))"),
        "{status}"
    );
}

#[test]
fn a_task_verify_failure_puts_the_task_back_in_progress() {
    let env = TestEnv::new();
    write_tasks(&env, "- [ ] Make ok.txt\n  - verify: test -f ok.txt\n");
    env.agent_script(Some(1), "sed -i 's/- \\[ \\]/- [x]/' .ralph/ralph-tasks.md; echo '<promise>READY_FOR_NEXT_TASK</promise>'");
    env.agent_script(Some(2), "touch ok.txt; sed -i 's/- \\[\\/\\]/- [x]/' .ralph/ralph-tasks.md; echo '<promise>READY_FOR_NEXT_TASK</promise>'");
    env.run_loop(&["goal", "--tasks", "--max-iterations", "2"])
        .assert_code(2);
    let prompt = env.agent_prompt(2);
    assert!(prompt.contains("## The task was not accepted"), "{prompt}");
    assert!(
        prompt.contains("🔄 CURRENT TASK: \"Make ok.txt\""),
        "{prompt}"
    );
    assert!(prompt.contains("`test -f ok.txt` failed (exit code 1)"));
    assert!(
        tasks_file(&env).starts_with("- [x] Make ok.txt"),
        "accepted the second time"
    );
}

#[test]
fn add_task_with_id_and_blockers() {
    let env = TestEnv::new();
    env.run(&["--add-task", "Schema", "--id", "db"])
        .assert_code(0);
    env.run(&["--add-task", "API", "--blocked-by", "db"])
        .assert_code(0);
    assert_eq!(
        tasks_file(&env),
        "# Ralph Tasks\n\n- [ ] Schema\n  - id: db\n- [ ] API\n  - blocked_by: db\n"
    );
    let run = env.run(&["--id", "x"]);
    run.assert_code(1);
}

#[test]
fn the_progress_log_has_a_section_per_iteration() {
    let env = TestEnv::new();
    let edit = env.work().join("notes.txt");
    env.agent_script(Some(2), "echo 'Error: the build broke'");
    let run = env.run_loop_with(&["task", "--max-iterations", "3"], |c| {
        c.env("FAKE_AGENT_EDIT", &edit);
    });
    run.assert_code(2);
    let log = fs::read_to_string(env.ralph_file("progress.md")).unwrap();
    assert_eq!(log.matches("\n## Iteration ").count(), 3, "{log}");
    assert!(
        log.contains("- Outcome: continued\n- Files changed: `notes.txt`\n"),
        "{log}"
    );
    assert!(log.contains("- Error: Error: the build broke"), "{log}");
    assert!(
        env.agent_prompt(1)
            .contains("Read .ralph/progress.md first")
    );
    env.run(&["--reset"]).assert_code(0);
    assert!(!env.ralph_file("progress.md").exists());
}

#[test]
fn plain_promises_complete_on_a_bare_last_line_only() {
    let env = TestEnv::new();
    env.agent_script(
        Some(1),
        "echo 'The task is COMPLETE except for docs'; echo 'more work'",
    );
    env.agent_script(Some(2), "echo 'All good.'; echo 'COMPLETE'");
    env.run_loop(&["task", "--promise-format", "plain", "--max-iterations", "4"])
        .assert_code(0);
    assert_eq!(env.agent_calls(), 2);
}

#[test]
fn a_verify_command_that_cannot_run_ends_the_run_unverified_after_one_agent_call() {
    for (verify, why) in [
        ("no-such-check-command", "command not found"),
        ("./check.sh", "not executable"),
    ] {
        let env = TestEnv::new();
        fs::write(env.work().join("check.sh"), "exit 0\n").unwrap();
        let run = env.run_loop_with(
            &["task", "--verify", verify, "--max-iterations", "4"],
            |c| {
                c.env("FAKE_AGENT_COMPLETE_AT", "1");
            },
        );
        run.assert_code(1);
        assert_eq!(env.agent_calls(), 1, "{verify}");
        let all = format!("{}{}", run.stdout(), run.stderr());
        assert!(all.contains("unverified"), "{all}");
        assert!(all.contains(why), "{all}");
        let record = &env.history()["iterations"][0];
        assert!(record["completion_refused"].is_null(), "{record}");
    }
}
