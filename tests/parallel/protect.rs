//! `--protect` and `--holdout` in `--parallel` runs: the landing refuses a branch that changes a
//! protected path, runs the holdout checks, and agents side by side cannot change the test that
//! judges them; a protected change a killed ralph left in a task's worktree is put back.

use std::fs;

use crate::protect_fixture::*;

/// Work a branch brought from before `--protect` (an earlier run's) is refused at the landing,
/// sent back, and lands once the agent's change to the protected file is put back.
#[test]
fn a_parallel_landing_refuses_a_branch_that_changes_a_protected_path() {
    let env = with_a_test();
    with_tasks(&env, "- [ ] Answer\n  - id: answer\n", true);
    // An earlier run, without --protect: its agent changed the test, and gave up.
    env.agent_script(
        Some(1),
        "echo 7 > answer.txt; echo 7 > tests/expected.txt\n",
    );
    let earlier = env.run_loop(&["Answer", "--parallel", "1", "--max-iterations", "1"]);
    earlier.assert_code(3);
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        list.replace("- [!]", "- [ ]"),
    )
    .unwrap();
    env.git(&["commit", "-qam", "try the task again"]);
    // Now with --protect: the branch's change is refused at the landing, whatever the agent
    // says; once the agent touches the file again, it goes back to the base's, and lands.
    env.agent_script(Some(2), "echo '<promise>READY_FOR_NEXT_TASK</promise>'\n");
    env.agent_script(
        Some(3),
        "echo 42 > answer.txt; echo 8 > tests/expected.txt\necho '<promise>READY_FOR_NEXT_TASK</promise>'\n",
    );
    let run = env.run_loop(&["Answer", "--parallel", "1", "--protect", "tests/**"]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let journal = fs::read_to_string(env.ralph_file("events.jsonl")).unwrap();
    assert!(
        journal.contains(r#""command":"no change to protected paths""#)
            && journal
                .contains("changes protected paths its task may not change: tests/expected.txt"),
        "{journal}"
    );
    assert_eq!(env.git(&["show", "HEAD:tests/expected.txt"]).trim(), "42");
    assert_eq!(env.git(&["show", "HEAD:answer.txt"]).trim(), "42");
    // The base never held the change.
    let base_history = env.git(&["log", "--first-parent", "--name-only", "--format=", "main"]);
    assert_eq!(
        base_history.matches("tests/expected.txt").count(),
        1,
        "{base_history}"
    );
}

/// At a `--parallel` landing, a holdout check that fails on the work merged with the base sends
/// the task back saying how many failed, never which or why.
#[test]
fn a_parallel_landing_runs_the_holdout_checks_and_tells_only_the_count() {
    let env = with_a_test();
    with_tasks(&env, "- [ ] Answer\n  - id: answer\n", true);
    // It passes in the task's worktree (its 1st run) and fails at the landing (its 2nd).
    let dir = env.path().join("hidden");
    fs::create_dir_all(&dir).unwrap();
    let count = dir.join("count");
    let script = dir.join("landing.sh");
    fs::write(
        &script,
        format!(
            "n=0; [ -f '{c}' ] && read -r n < '{c}'; n=$((n + 1)); echo $n > '{c}'\n[ $n -ne 2 ] || {{ echo 'SECRET-DETAIL'; exit 1; }}\n",
            c = count.display()
        ),
    )
    .unwrap();
    env.agent_script(
        None,
        "echo 42 > answer.txt\necho '<promise>READY_FOR_NEXT_TASK</promise>'\n",
    );
    let holdout = format!("sh {}", script.display());
    let run = env.run_loop(&["Answer", "--parallel", "1", "--holdout", &holdout]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let journal = fs::read_to_string(env.ralph_file("events.jsonl")).unwrap();
    let refused = journal
        .lines()
        .find(|line| line.contains(r#""event":"merge_refused""#))
        .unwrap_or_else(|| panic!("{journal}"));
    assert!(
        refused.contains(r#""command":"holdout checks""#)
            && refused.contains("1 of 1 holdout checks failed"),
        "{refused}"
    );
    assert!(!journal.contains("SECRET-DETAIL") && !journal.contains("landing.sh"));
    for n in 1..=env.agent_calls() {
        let prompt = env.agent_prompt(n);
        assert!(!prompt.contains("SECRET-DETAIL") && !prompt.contains("landing.sh"));
    }
    assert!(env.agent_prompt(2).contains("1 of 1 holdout checks failed"));
}

/// `--parallel 2` on two tasks: the agent of one edits its test to pass, and gets it put back;
/// the base never holds the edit, and both tasks are merged once the work meets the test.
#[test]
fn parallel_agents_cannot_change_the_test_that_judges_them() {
    let env = with_a_test();
    fs::write(
        env.work().join("tests/run.sh"),
        "[ \"$(cat answer.txt 2>/dev/null)\" = \"$(cat tests/expected.txt)\" ] || [ -f other.txt ]\n",
    )
    .unwrap();
    with_tasks(
        &env,
        "- [ ] Answer\n  - id: answer\n- [ ] Other\n  - id: other\n",
        true,
    );
    env.agent_script(None, crate::support::CHEATS_ONCE);
    let run = env.run_loop(&[
        "Do the tasks",
        "--parallel",
        "2",
        "--protect",
        "tests/**",
        "--verify",
        "sh tests/run.sh",
    ]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    assert!(
        env.agent_dir().join("cheated").exists(),
        "the agent did cheat"
    );
    assert_eq!(env.git(&["show", "HEAD:tests/expected.txt"]).trim(), "42");
    assert_eq!(env.git(&["show", "HEAD:answer.txt"]).trim(), "42");
    assert_eq!(env.git(&["show", "HEAD:other.txt"]).trim(), "other");
    let touched = env.git(&["log", "--all", "--name-only", "--format="]);
    assert_eq!(
        touched.matches("tests/expected.txt").count(),
        1,
        "{touched}"
    );
    let journal = fs::read_to_string(env.ralph_file("events.jsonl")).unwrap();
    assert!(
        journal.contains(r#""event":"protected_change_restored""#)
            && journal.contains(r#""task":"answer""#),
        "{journal}"
    );
}

/// The same in a `--parallel` task's worktree: ralph killed (-9) while the task's agent has
/// changed the test; `--resume` puts it back before the interrupted iteration's work is
/// committed on the task's branch, and the task lands with the test as it was.
#[test]
fn a_protected_change_a_killed_ralph_left_in_a_task_worktree_is_put_back_on_resume() {
    let env = with_a_test();
    with_tasks(&env, "- [ ] Answer\n  - id: answer\n", true);
    env.agent_script(
        Some(1),
        "echo 7 > tests/expected.txt; echo 7 > answer.txt\necho ready > \"$dir/ready\"; sleep 600\n",
    );
    env.agent_script(
        Some(2),
        "echo 42 > answer.txt\necho '<promise>READY_FOR_NEXT_TASK</promise>'\n",
    );
    let args = [
        "--pause",
        "0",
        "Make the test pass",
        "--parallel",
        "1",
        "--protect",
        "tests/**",
        "--verify",
        "sh tests/run.sh",
    ];
    let mut child = env.spawn_quiet(&args);
    crate::support::wait_for_file(
        &env.agent_dir().join("ready"),
        std::time::Duration::from_secs(30),
    );
    crate::support::wait_for_text(
        &env.ralph_file("worktrees/answer/.ralph/ralph-loop.state.json"),
        "\"agentGroup\"",
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let resumed = env.run(&["--resume", "--pause", "0"]);
    resumed.assert_code(0);
    assert_test_intact(&env);
    assert_eq!(env.git(&["show", "main:answer.txt"]).trim(), "42");
    let touched = env.git(&["log", "--all", "--name-only", "--format="]);
    assert_eq!(
        touched.matches("tests/expected.txt").count(),
        1,
        "only the commit that made it: {touched}"
    );
    let said = format!("{}{}", resumed.stdout(), resumed.stderr());
    assert!(
        said.contains("changed protected files (tests/expected.txt)"),
        "{said}"
    );
}
