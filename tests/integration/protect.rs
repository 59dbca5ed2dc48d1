//! Checks the agent cannot change: `--protect GLOB`. An agent that makes its failing test pass
//! by editing the test gets the test put back, never committed, and is told why.

use std::fs;

use crate::protect_fixture::{
    assert_test_intact, cheat_then_work, committed_paths, hidden_check, with_a_test, with_tasks,
};

#[test]
fn an_agent_that_edits_its_test_to_pass_gets_it_put_back_and_never_committed() {
    let env = with_a_test();
    cheat_then_work(&env);
    let run = env.run_loop(&[
        "Make the test pass",
        "--protect",
        "tests/**",
        "--verify",
        "sh tests/run.sh",
        "--max-iterations",
        "4",
    ]);
    run.assert_code(0);
    // The first claim was judged on the test as it was: refused; the second completed.
    assert_eq!(env.agent_calls(), 2);
    assert_test_intact(&env);
    assert!(!env.work().join("tests/mine.txt").exists());
    let touched = committed_paths(&env);
    assert_eq!(
        touched.matches("tests/expected.txt").count(),
        1,
        "only the commit that made it: {touched}"
    );
    assert!(!touched.contains("tests/mine.txt"), "{touched}");
    assert_eq!(env.git(&["status", "--porcelain"]).trim(), "");
    // The agent is told which files were put back, and why.
    let prompt = env.agent_prompt(2);
    assert!(
        prompt.contains("Your changes to protected files were undone")
            && prompt.contains("- tests/expected.txt")
            && prompt.contains("- tests/mine.txt"),
        "{prompt}"
    );
    // The history, the journal and the terminal keep it.
    let first = &env.history()["iterations"][0];
    assert_eq!(
        first["protected_changes"],
        serde_json::json!(["tests/expected.txt", "tests/mine.txt"])
    );
    assert_eq!(first["files_modified"], serde_json::json!(["answer.txt"]));
    // Both checks judged the same sealed tests, and say so.
    let sealed =
        |n: usize| env.history()["iterations"][n]["verification"][0]["protected_tree"].clone();
    assert!(
        sealed(0).as_str().is_some_and(|hash| hash.len() == 40),
        "{}",
        sealed(0)
    );
    assert_eq!(sealed(0), sealed(1));
    let journal = fs::read_to_string(env.ralph_file("events.jsonl")).unwrap();
    assert!(
        journal.contains(r#""event":"protected_change_restored""#),
        "{journal}"
    );
    let report = env.run(&["--report", "-"]).stdout();
    assert!(
        report.contains("<h2>Checks the agent could not change</h2>")
            && report.contains("<td>tests/expected.txt, tests/mine.txt</td>")
            && report.contains("<td>yes (<code>"),
        "{report}"
    );
    let status = env.run(&["--status"]).stdout();
    assert!(
        status.contains("| protected files put back: tests/expected.txt, tests/mine.txt"),
        "{status}"
    );
    assert!(
        run.stderr().contains(
            "🛡️  Iteration 1 changed protected files (tests/expected.txt, tests/mine.txt); they were put back and are not committed"
        ),
        "{}",
        run.stderr()
    );
}

#[test]
fn with_protect_mode_fail_the_loop_ends_and_the_change_is_still_put_back() {
    let env = with_a_test();
    cheat_then_work(&env);
    let run = env.run_loop(&[
        "Make the test pass",
        "--protect",
        "tests/**",
        "--protect-mode",
        "fail",
        "--max-iterations",
        "4",
    ]);
    run.assert_code(1);
    assert_eq!(env.agent_calls(), 1);
    assert_test_intact(&env);
    assert!(
        run.stdout().contains(
            "the agent changed protected paths (tests/expected.txt, tests/mine.txt) at iteration 1"
        ),
        "{}",
        run.stdout()
    );
    // What else it did is its work, committed.
    assert!(committed_paths(&env).contains("answer.txt"));
    assert!(!committed_paths(&env).contains("tests/mine.txt"));
}

#[test]
fn what_a_task_may_change_is_committed() {
    let env = with_a_test();
    with_tasks(
        &env,
        "- [ ] Change the expected answer to 7\n  - may_change: tests/expected.txt\n",
        false,
    );
    env.agent_script(
        None,
        "echo 7 > tests/expected.txt; echo x > tests/other.txt\nsed -i 's/^- \\[ \\]/- [x]/' .ralph/ralph-tasks.md\necho '<promise>COMPLETE</promise>'\n",
    );
    let run = env.run_loop(&["Do the tasks", "--tasks", "--protect", "tests"]);
    run.assert_code(0);
    assert_eq!(
        env.git(&["show", "HEAD:tests/expected.txt"]).trim(),
        "7",
        "{}",
        committed_paths(&env)
    );
    assert!(!env.work().join("tests/other.txt").exists());
}

#[test]
fn a_pattern_that_matches_nothing_is_said_and_a_bad_one_refused() {
    let env = with_a_test();
    env.agent_script(None, "echo '<promise>COMPLETE</promise>'\n");
    let run = env.run_loop(&["Work", "--protect", "test/**"]);
    run.assert_code(0);
    assert!(
        run.stderr()
            .contains("⚠️  --protect 'test/**' matches no file here"),
        "{}",
        run.stderr()
    );
    let refused = env.run_loop(&["Work", "--protect", "tests/[a"]);
    refused.assert_code(1);
    assert!(
        refused
            .stderr()
            .contains("--protect 'tests/[a' is not a glob"),
        "{}",
        refused.stderr()
    );
    let mode = env.run_loop(&["Work", "--protect-mode", "warn"]);
    mode.assert_code(1);
    assert!(
        mode.stderr()
            .contains("--protect-mode must be restore or fail, not 'warn'"),
        "{}",
        mode.stderr()
    );
}

#[test]
fn a_sandboxed_agents_write_to_a_protected_path_fails_read_only() {
    if !crate::sandbox::bwrap_works() {
        return;
    }
    let env = with_a_test();
    env.write_executable(
        "opencode",
        "#!/bin/sh\n{ echo 7 > tests/expected.txt && echo wrote; } 2> attempt.txt\necho '<promise>COMPLETE</promise>'\n",
    );
    let bin = env.bin().to_string_lossy().into_owned();
    let run = env.run_loop(&[
        "Work",
        "--protect",
        "tests/**",
        "--sandbox",
        "bwrap",
        "--sandbox-mount",
        &bin,
        "--max-iterations",
        "1",
    ]);
    run.assert_code(0);
    let attempt = fs::read_to_string(env.work().join("attempt.txt"))
        .unwrap_or_else(|err| panic!("{err}: {}{}", run.stdout(), run.stderr()));
    assert!(attempt.contains("Read-only file system"), "{attempt}");
    assert_test_intact(&env);
}

#[test]
fn an_agent_cannot_grant_itself_what_its_task_may_change() {
    let env = with_a_test();
    with_tasks(&env, "- [ ] Make the test pass\n", false);
    // It gives its task leave to change the test, then changes it.
    env.agent_script(
        Some(1),
        "printf '  - may_change: tests/**\\n' >> .ralph/ralph-tasks.md\n",
    );
    env.agent_script(
        Some(2),
        "echo 7 > answer.txt; echo 7 > tests/expected.txt\nsed -i 's/^- \\[ \\]/- [x]/' .ralph/ralph-tasks.md\necho '<promise>COMPLETE</promise>'\n",
    );
    let run = env.run_loop(&[
        "Do the tasks",
        "--tasks",
        "--protect",
        "tests/**",
        "--verify",
        "sh tests/run.sh",
        "--max-iterations",
        "2",
    ]);
    run.assert_code(2);
    assert_eq!(env.git(&["show", "HEAD:tests/expected.txt"]).trim(), "42");
    assert_eq!(
        env.history()["iterations"][1]["protected_changes"],
        serde_json::json!(["tests/expected.txt"])
    );
}

#[test]
fn a_holdout_check_refuses_completion_and_the_agent_learns_only_the_count() {
    let env = with_a_test();
    let holdout = hidden_check(&env);
    env.agent_script(
        None,
        "echo 42 > answer.txt\necho '<promise>COMPLETE</promise>'\n",
    );
    let run = env.run_loop(&[
        "Make the test pass",
        "--verify",
        "sh tests/run.sh",
        "--holdout",
        &holdout,
        "--max-iterations",
        "2",
    ]);
    run.assert_code(2);
    assert!(
        run.stderr()
            .contains("--holdout checks are hidden from the agent only under --sandbox"),
        "{}",
        run.stderr()
    );
    let prompt = env.agent_prompt(2);
    assert!(
        prompt.contains("the visible checks passed, but 1 of 1 holdout checks failed"),
        "{prompt}"
    );
    for secret in ["edge-cases.sh", "SECRET-DETAIL", "hidden"] {
        for n in [1, 2] {
            assert!(
                !env.agent_prompt(n).contains(secret),
                "prompt {n} holds {secret}"
            );
        }
    }
    // The user has it all: the history and the report.
    let check = &env.history()["iterations"][0]["holdout"][0];
    assert_eq!(check["command"], holdout.as_str());
    assert!(
        check["output_tail"]
            .as_str()
            .unwrap()
            .contains("SECRET-DETAIL: zero is not handled")
    );
    let report = env.run(&["--report", "-"]).stdout();
    assert!(
        report.contains("<td>holdout</td>") && report.contains("SECRET-DETAIL"),
        "{report}"
    );
    let journal = fs::read_to_string(env.ralph_file("events.jsonl")).unwrap();
    assert!(
        journal.contains(r#""event":"holdout_failed""#) && !journal.contains("SECRET-DETAIL"),
        "{journal}"
    );
}

#[test]
fn a_sandboxed_agent_cannot_read_a_holdout_check_or_its_results() {
    if !crate::sandbox::bwrap_works() {
        return;
    }
    let env = with_a_test();
    let holdout = hidden_check(&env);
    let script = holdout.trim_start_matches("sh ");
    // The agent looks for the check and for ralph's records of it, then does the work.
    env.write_executable(
        "opencode",
        &format!(
            "#!/bin/sh\n{{ cat '{script}'; cat .ralph/ralph-history.json .ralph/events.jsonl; }} > looked.txt 2>&1\necho 42 > answer.txt\necho handles zero >> answer.txt\necho '<promise>COMPLETE</promise>'\n"
        ),
    );
    let bin = env.bin().to_string_lossy().into_owned();
    let run = env.run_loop(&[
        "Work",
        "--holdout",
        &holdout,
        "--sandbox",
        "bwrap",
        "--sandbox-mount",
        &bin,
        "--max-iterations",
        "3",
    ]);
    // The holdout check itself runs, in a sandbox of checks that has its file.
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let looked = fs::read_to_string(env.work().join("looked.txt")).unwrap();
    assert!(
        !looked.contains("SECRET-DETAIL") && !looked.contains("grep -q"),
        "{looked}"
    );
}

/// ralph killed (-9) while its agent's change to a protected file is in the tree: `--resume`
/// puts it back before anything is committed, and the loop goes on protected.
#[test]
fn a_protected_change_left_by_a_killed_ralph_is_put_back_on_resume() {
    let env = with_a_test();
    env.agent_script(
        Some(1),
        "echo 7 > tests/expected.txt; echo 7 > answer.txt\necho ready > \"$dir/ready\"; sleep 600\n",
    );
    env.agent_script(
        Some(2),
        "echo 42 > answer.txt\necho '<promise>COMPLETE</promise>'\n",
    );
    let mut child = env.spawn_quiet(&[
        "--pause",
        "0",
        "Make the test pass",
        "--protect",
        "tests/**",
        "--verify",
        "sh tests/run.sh",
        "--max-iterations",
        "4",
    ]);
    env.wait_for_agent();
    child.kill().unwrap();
    child.wait().unwrap();
    let resumed = env.run(&["--resume", "--pause", "0"]);
    resumed.assert_code(0);
    assert_test_intact(&env);
    let touched = committed_paths(&env);
    assert_eq!(
        touched.matches("tests/expected.txt").count(),
        1,
        "only the commit that made it: {touched}"
    );
    assert!(
        resumed
            .stderr()
            .contains("changed protected files (tests/expected.txt)"),
        "{}",
        resumed.stderr()
    );
}

/// A `--worktree NAME --merge` loop is protected as any loop: the edited test is put back in the
/// worktree, never on its branch, never in the merge; `--json` tells it as an event line.
#[test]
fn a_worktree_loop_puts_the_test_back_and_merges_only_the_work() {
    let env = with_a_test();
    cheat_then_work(&env);
    let run = env.run_loop(&[
        "Make the test pass",
        "--worktree",
        "fix",
        "--merge",
        "--json",
        "--protect",
        "tests/**",
        "--verify",
        "sh tests/run.sh",
        "--max-iterations",
        "4",
    ]);
    run.assert_code(0);
    assert_eq!(env.agent_calls(), 2);
    assert_test_intact(&env);
    assert_eq!(
        fs::read_to_string(env.work().join("answer.txt")).unwrap(),
        "42\n"
    );
    let touched = env.git(&["log", "--name-only", "--format=", "--all"]);
    assert_eq!(
        touched.matches("tests/expected.txt").count(),
        1,
        "{touched}"
    );
    assert!(!touched.contains("tests/mine.txt"), "{touched}");
    // Every stdout line is an event; one says what was put back.
    let restored: Vec<serde_json::Value> = (run.stdout().lines())
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|event| event["event"] == "protected_change_restored")
        .collect();
    assert_eq!(restored.len(), 1, "{}", run.stdout());
    assert_eq!(
        restored[0]["files"],
        serde_json::json!(["tests/expected.txt", "tests/mine.txt"])
    );
}

/// `--holdout` in a `--tasks` loop: the task's promise is refused while a holdout check fails,
/// the agent learns only the count, and the task is done once it passes.
#[test]
fn a_holdout_check_holds_a_tasks_promise_in_a_task_list_loop() {
    let env = with_a_test();
    with_tasks(&env, "- [ ] Handle zero\n", true);
    let holdout = hidden_check(&env);
    env.agent_script(
        Some(1),
        "echo 42 > answer.txt\nsed -i 's/- \\[ \\]/- [x]/' .ralph/ralph-tasks.md\necho '<promise>COMPLETE</promise>'\n",
    );
    env.agent_script(
        Some(2),
        "echo 'handles zero' >> answer.txt\nsed -i 's/- \\[ \\]/- [x]/' .ralph/ralph-tasks.md\necho '<promise>COMPLETE</promise>'\n",
    );
    let run = env.run_loop(&[
        "Make the test pass",
        "--tasks",
        "--holdout",
        &holdout,
        "--max-iterations",
        "3",
    ]);
    run.assert_code(0);
    assert_eq!(env.agent_calls(), 2);
    let prompt = env.agent_prompt(2);
    assert!(prompt.contains("1 of 1 holdout checks failed"), "{prompt}");
    assert!(
        !prompt.contains("SECRET-DETAIL") && !prompt.contains("edge-cases.sh"),
        "{prompt}"
    );
}

/// `--holdout` in a `--worktree NAME --merge` loop: the completion is refused in the worktree
/// while a hidden check fails (the agent learns only the count), and only the work that passes
/// is merged.
#[test]
fn a_holdout_check_holds_a_worktree_loops_completion_until_it_passes() {
    let env = with_a_test();
    let holdout = hidden_check(&env);
    env.agent_script(
        Some(1),
        "echo 42 > answer.txt\necho '<promise>COMPLETE</promise>'\n",
    );
    env.agent_script(
        Some(2),
        "echo 'handles zero' >> answer.txt\necho '<promise>COMPLETE</promise>'\n",
    );
    let run = env.run_loop(&[
        "Make the test pass",
        "--worktree",
        "fix",
        "--merge",
        "--holdout",
        &holdout,
        "--max-iterations",
        "3",
    ]);
    run.assert_code(0);
    assert_eq!(env.agent_calls(), 2);
    let prompt = env.agent_prompt(2);
    assert!(prompt.contains("1 of 1 holdout checks failed"), "{prompt}");
    assert!(!prompt.contains("SECRET-DETAIL"), "{prompt}");
    let merged = fs::read_to_string(env.work().join("answer.txt")).unwrap();
    assert!(merged.contains("handles zero"), "{merged}");
}
