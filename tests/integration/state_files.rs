//! Files under .ralph/: formats, permissions, corrupt files.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;

use crate::support::TestEnv;

#[test]
fn state_and_history_formats() {
    let env = TestEnv::new();
    env.agent_script(None, "cat \"$OPENCODE_CONFIG\" > /dev/null; cp .ralph/ralph-loop.state.json \"$FAKE_AGENT_DIR/state.json\"");
    env.run_loop(&["task", "--max-iterations", "1", "--model", "m"])
        .assert_code(2);
    let state: serde_json::Value = serde_json::from_str(&env.agent_file("state.json")).unwrap();
    for key in [
        "active",
        "iteration",
        "minIterations",
        "maxIterations",
        "completionPromise",
        "tasksMode",
        "taskPromise",
        "prompt",
        "startedAt",
        "model",
        "agent",
        "pid",
        "host",
    ] {
        assert!(state.get(key).is_some(), "state lacks {key}: {state}");
    }
    assert_eq!(state["active"], true);
    assert_eq!(state["agent"], "opencode");
    let history = env.history();
    let record = &history["iterations"][0];
    for key in [
        "iteration",
        "started_at",
        "ended_at",
        "duration_ms",
        "tools_used",
        "files_modified",
        "exit_code",
        "completion_detected",
        "errors",
    ] {
        assert!(record.get(key).is_some(), "record lacks {key}: {record}");
    }
    assert!(history["struggle_indicators"]["no_progress_iterations"].is_number());
    let dir_mode = fs::metadata(env.work().join(".ralph"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
    for name in ["ralph-history.json", "ralph-opencode.config.json"] {
        let mode = fs::metadata(env.ralph_file(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{name}");
    }
}

#[test]
fn corrupt_state_and_history_are_kept_aside_and_the_loop_runs() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.ralph_file("ralph-loop.state.json"), "{ not json").unwrap();
    fs::write(env.ralph_file("ralph-history.json"), "[1, 2").unwrap();
    let run = env.run_loop(&["task", "--max-iterations", "1"]);
    run.assert_code(2);
    assert!(
        run.stderr()
            .contains("ralph-loop.state.json: it is not valid"),
        "{}",
        run.stderr()
    );
    assert_eq!(
        fs::read_to_string(env.ralph_file("ralph-loop.state.json.corrupt")).unwrap(),
        "{ not json"
    );
    assert_eq!(env.agent_calls(), 1);

    fs::write(env.ralph_file("ralph-history.json"), "[1, 2").unwrap();
    let status = env.run(&["--status"]);
    status.assert_code(0);
    assert!(
        status
            .stderr()
            .contains("ralph-history.json: it is not valid"),
        "{}",
        status.stderr()
    );
    assert_eq!(
        fs::read_to_string(env.ralph_file("ralph-history.json")).unwrap(),
        "[1, 2",
        "--status changes nothing"
    );
}

#[test]
fn a_crashed_loop_is_explained_and_can_be_resumed() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.ralph_file("ralph-loop.state.json"),
        r#"{"active":true,"iteration":3,"minIterations":1,"maxIterations":4,"completionPromise":"COMPLETE",
            "tasksMode":false,"taskPromise":"READY_FOR_NEXT_TASK","prompt":"saved prompt",
            "startedAt":"2026-01-01T00:00:00.000Z","model":"","agent":"codex","pid":999999,"host":"elsewhere"}"#,
    )
    .unwrap();
    let run = env.run_loop(&["new task"]);
    run.assert_code(1);
    assert!(
        run.stderr().contains("stopped unexpectedly at iteration 3"),
        "{}",
        run.stderr()
    );
    assert!(run.stderr().contains("--resume") && run.stderr().contains("--reset"));
    assert_eq!(env.agent_calls(), 0);

    let run = env.run(&["--resume", "--pause", "0"]);
    run.assert_code(2);
    assert_eq!(env.agent_calls(), 2, "iterations 3 and 4 ran");
    assert!(env.agent_prompt(1).contains("saved prompt"));
    assert!(env.agent_prompt(1).contains("Iteration 3"));
    assert_eq!(env.agent_argv(1)[0], "exec", "the saved agent is used");
}

#[test]
fn reset_removes_state_history_and_context_but_not_tasks() {
    let env = TestEnv::new();
    env.run(&["--add-task", "keep me"]).assert_code(0);
    env.run(&["--add-context", "hint"]).assert_code(0);
    env.run_loop(&["task", "--max-iterations", "1"])
        .assert_code(2);
    // A task left marked in progress: no loop works on it after a reset.
    let list = std::fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    std::fs::write(
        env.ralph_file("ralph-tasks.md"),
        list.replace("- [ ] keep me", "- [/] keep me"),
    )
    .unwrap();
    let run = env.run(&["--reset"]);
    run.assert_code(0);
    let list = std::fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert!(list.contains("- [ ] keep me"), "{list}");
    assert!(
        run.stdout().contains("ralph-history.json"),
        "{}",
        run.stdout()
    );
    assert!(!env.ralph_file("ralph-history.json").exists());
    assert!(env.ralph_file("ralph-tasks.md").exists());
    assert!(
        env.run(&["--resume"])
            .stderr()
            .contains("no loop to resume")
    );
}
