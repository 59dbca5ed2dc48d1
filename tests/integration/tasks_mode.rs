//! Tasks mode: the task file, the prompt's task selection, and gated completion.

use std::fs;

use crate::support::TestEnv;

#[test]
fn tasks_mode_creates_the_task_file_and_says_so() {
    let env = TestEnv::new();
    let run = env.run_loop(&["goal", "--tasks", "--max-iterations", "1"]);
    run.assert_code(2);
    assert!(
        run.stdout().contains("📋 Created tasks file:"),
        "{}",
        run.stdout()
    );
    let content = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert!(content.starts_with("# Ralph Tasks\n\n"));
    assert!(!content.contains("- ["), "no example task: {content}");
    assert!(env.agent_prompt(1).contains("📋 No tasks found."));
    assert!(run.stdout().contains("Tasks mode: ENABLED"));
}

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
