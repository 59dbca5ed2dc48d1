//! Tasks mode: the task file, the prompt's task selection, and gated completion.

use std::fs;

use crate::support::TestEnv;

#[test]
fn the_prompt_follows_the_task_file_and_completion_waits_for_every_task() {
    let env = TestEnv::new();
    env.run(&["--add-task", "first"]).assert_code(0);
    env.run(&["--add-task", "second"]).assert_code(0);
    // 1: starts "first" and finishes it; 2: claims completion with "second" open;
    // 3: finishes "second" and claims completion for real.
    env.agent_script(Some(1), "sed -i 's/- \\[ \\] first/- [x] first/' .ralph/ralph-tasks.md; echo '<promise>READY_FOR_NEXT_TASK</promise>'")
        .agent_script(Some(2), "sed -i 's/- \\[ \\] second/- [\\/] second/' .ralph/ralph-tasks.md; echo '<promise>COMPLETE</promise>'")
        .agent_script(Some(3), "sed -i 's/- \\[\\/\\] second/- [x] second/' .ralph/ralph-tasks.md; echo '<promise>COMPLETE</promise>'");
    let run = env.run_loop(&["goal", "--tasks", "--max-iterations", "5"]);
    run.assert_code(0);
    assert_eq!(env.agent_calls(), 3);
    assert!(env.agent_prompt(1).contains("📍 NEXT TASK: \"first\""));
    assert!(env.agent_prompt(2).contains("📍 NEXT TASK: \"second\""));
    assert!(env.agent_prompt(3).contains("🔄 CURRENT TASK: \"second\""));
    assert!(env.agent_prompt(3).contains("## Completion was refused"));
    assert!(env.agent_prompt(3).contains("- 2. second"));
    assert!(
        run.stdout()
            .contains("🔄 Task completion detected: <promise>READY_FOR_NEXT_TASK</promise>")
    );
    assert!(
        run.stdout().contains("but 1 task is still open"),
        "{}",
        run.stdout()
    );
}

#[test]
fn all_tasks_complete_tells_the_agent_to_finish() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [x] done\n- [X] also done\n",
    )
    .unwrap();
    env.run_loop_with(&["goal", "--tasks"], |c| {
        c.env("FAKE_AGENT_COMPLETE_AT", "1");
    })
    .assert_code(0);
    assert!(env.agent_prompt(1).contains("✅ ALL TASKS COMPLETE!"));
}

/// A roadmap in seed 004's format, used as it is: per-task agent (`cli`), model, promise
/// (`completion_promise`), success criteria, `max_iterations` and `timeout`.
#[test]
fn per_task_properties_reach_the_agent_the_prompt_and_the_limits() {
    let env = TestEnv::new();
    std::fs::create_dir_all(env.work().join(".ralph")).unwrap();
    std::fs::write(
        env.ralph_file("ralph-tasks.md"),
        "## Tasks\n\n\
         - [ ] **alpha**: Write the alpha file\n  - ralph: true\n  - cli: codex\n  - model: gpt-x\n  \
         - completion_promise: ALPHA_DONE\n  - success: alpha.txt exists\n  - timeout: 60min\n\
         - [ ] **beta**: Time out once\n  - timeout: 300ms\n  - max_iterations: 1\n  - blocked_by: alpha\n",
    )
    .unwrap();
    env.agent_script(
        Some(1),
        "echo alpha > alpha.txt; sed -i 's/- \\[ \\] \\*\\*alpha/- [x] **alpha/' .ralph/ralph-tasks.md; echo '<promise>ALPHA_DONE</promise>'",
    );
    env.agent_script(Some(2), "sleep 30");
    let run = env.run_loop(&["Build it", "--tasks", "--max-iterations", "5"]);
    run.assert_code(3);
    let stdout = run.stdout();
    assert_eq!(env.agent_argv(1)[0], "exec", "the task's agent: codex");
    assert!(env.agent_argv(1).contains(&"gpt-x".to_owned()));
    let prompt = env.agent_prompt(1);
    assert!(prompt.contains("Done means: alpha.txt exists"), "{prompt}");
    assert!(prompt.contains("<promise>ALPHA_DONE</promise>"), "{prompt}");
    assert!(
        stdout.contains("Task completion detected: <promise>ALPHA_DONE</promise>"),
        "{stdout}"
    );
    assert_eq!(env.agent_argv(2)[0], "run", "the loop's agent: opencode");
    assert!(
        run.stderr().contains("ran longer than 300ms"),
        "{}",
        run.stderr()
    );
    assert_eq!(env.agent_calls(), 2, "beta may take one iteration");
    let tasks = std::fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert!(tasks.contains("- [!] **beta**"), "{tasks}");
    assert!(tasks.contains("failed after 1 attempts"), "{tasks}");
}

#[test]
fn add_task_takes_the_tasks_own_settings_and_list_tasks_shows_them() {
    let env = TestEnv::new();
    env.run(&[
        "--add-task",
        "Build the API",
        "--id",
        "api",
        "--agent",
        "codex",
        "--model",
        "gpt-x",
        "--max-iterations",
        "7",
        "--completion-promise",
        "API_DONE",
        "--iteration-timeout",
        "30m",
        "--verify",
        "cargo test",
        "--success",
        "GET /todos returns 200",
    ])
    .assert_code(0);
    let content = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert!(
        content.ends_with(
            "- [ ] Build the API\n  - id: api\n  - agent: codex\n  - model: gpt-x\n  - max_iterations: 7\n  - promise: API_DONE\n  - timeout: 30m\n  - verify: cargo test\n  - success: GET /todos returns 200\n"
        ),
        "{content}"
    );
    let listed = env.run(&["--list-tasks"]).stdout();
    assert!(
        listed.contains(
            "   agent: codex · model: gpt-x · promise: API_DONE · timeout: 30m · max iterations: 7 · success: GET /todos returns 200"
        ),
        "{listed}"
    );
}

/// Audit 11: lines of the task file ralph reads otherwise than written are named, line by line,
/// by `--list-tasks`, by a run's start and by `--doctor`, instead of a task silently not run.
#[test]
fn malformed_task_lines_and_duplicate_ids_are_warned_about_by_line() {
    let env = TestEnv::new();
    std::fs::create_dir_all(env.work().join(".ralph")).unwrap();
    std::fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [?] weird\n-[ ] nospace\n  - id: a b c\n- [ ] dup\n  - id: one\n- [ ] dup2\n  - id: one\n  - blocked_by: ,,\n",
    )
    .unwrap();
    env.git(&["add", ".ralph"]);
    env.git(&["commit", "-qm", "tasks"]);
    let expected = [
        "line 1: `[?]` is no status ralph knows",
        "line 2: `-[ ] nospace` is not a task line",
        "line 7: the id `one` is another task's already, so ralph knows this one as `one-2`",
        "line 8: `blocked_by: ,,` names no task",
    ];
    let listed = env.run(&["--list-tasks"]);
    listed.assert_code(0);
    for problem in expected {
        assert!(
            listed.stderr().contains(problem),
            "{problem}: {}",
            listed.stderr()
        );
    }
    let doctor = env.run(&["--doctor"]);
    for problem in expected {
        assert!(
            doctor.stdout().contains(problem),
            "{problem}: {}",
            doctor.stdout()
        );
    }
    for shape in [
        &["x", "--tasks", "--max-iterations", "1"][..],
        &["x", "--parallel", "2", "--max-iterations", "1"],
    ] {
        let run = env.run_loop(shape);
        for problem in expected {
            assert!(
                run.stderr().contains(problem),
                "{shape:?}: {problem}: {}",
                run.stderr()
            );
        }
        let _ = env.run(&["--reset"]);
    }
}
