//! The command line: version, help, usage errors, prompt sources.

use crate::support::TestEnv;

#[test]
fn version_prints_name_and_version() {
    let env = TestEnv::new();
    let run = env.run(&["--version"]);
    run.assert_code(0);
    assert_eq!(
        run.stdout(),
        format!("ralph {}\n", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(env.run(&["-v"]).stdout(), run.stdout());
}

#[test]
fn help_lists_commands_options_examples_and_how_it_works() {
    let env = TestEnv::new();
    let run = env.run(&["--help"]);
    run.assert_code(0);
    let help = run.stdout();
    for needle in [
        "Usage:",
        "Commands:",
        "--status",
        "--add-context",
        "--list-tasks",
        "--resume",
        "Loop:",
        "--max-iterations",
        "--completion-promise",
        "Tasks:",
        "--task-promise",
        "--no-commit",
        "--prompt-file",
        "Examples:",
        "How it works:",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}:\n{help}");
    }
}

#[test]
fn usage_errors_exit_1_with_a_hint_and_touch_nothing() {
    let env = TestEnv::new();
    for args in [
        &["x", "--bogus"][..],
        &["x", "--agent", "gpt"],
        &["x", "--max-iterations", "ten"],
        &["x", "--max-iterations", "-1"],
        &["x", "--min-iterations", "5", "--max-iterations", "3"],
        &["--remove-task", "two"],
        &["--add-context", ""],
        &["x", "--no-commit", "--commit-dirty"],
    ] {
        let run = env.run(args);
        run.assert_code(1);
        let stderr = run.stderr();
        assert!(stderr.starts_with("Error: "), "{args:?}: {stderr}");
        assert!(stderr.contains("Run 'ralph --help'"), "{args:?}: {stderr}");
        assert!(
            !env.work().join(".ralph").exists(),
            "{args:?} created .ralph/"
        );
        assert_eq!(env.agent_calls(), 0);
    }
    let run = env.run(&["x", "--min-iterations", "5", "--max-iterations", "3"]);
    assert!(
        run.stderr().contains("(5)") && run.stderr().contains("(3)"),
        "{}",
        run.stderr()
    );
}

#[test]
fn an_empty_prompt_is_a_usage_error() {
    let env = TestEnv::new();
    let run = env.run(&[]);
    run.assert_code(1);
    assert!(run.stderr().contains("no prompt given"), "{}", run.stderr());
    assert!(run.stderr().contains("--prompt-file"));
}

#[test]
fn prompt_file_problems_name_the_path() {
    let env = TestEnv::new();
    std::fs::write(env.work().join("empty.md"), "  \n").unwrap();
    std::fs::create_dir(env.work().join("adir")).unwrap();
    for (args, message) in [
        (
            &["--prompt-file", "missing.md"][..],
            "prompt file not found: missing.md",
        ),
        (&["-f", "empty.md"], "prompt file is empty: empty.md"),
        (&["--file", "adir"], "prompt path is not a file: adir"),
    ] {
        let run = env.run(args);
        run.assert_code(1);
        assert!(run.stderr().contains(message), "{args:?}: {}", run.stderr());
    }
}

#[test]
fn missing_agent_binary_names_it_and_the_override_variable() {
    let env = TestEnv::new();
    std::fs::remove_file(env.bin().join("codex")).unwrap();
    let run = env.run_loop(&["task", "--agent", "codex"]);
    run.assert_code(1);
    assert!(run.stderr().contains("`codex`"), "{}", run.stderr());
    assert!(
        run.stderr().contains("RALPH_CODEX_BINARY"),
        "{}",
        run.stderr()
    );
    assert!(!env.ralph_file("ralph-loop.state.json").exists());
}

#[test]
fn binary_override_variable_is_honoured() {
    let env = TestEnv::new();
    std::fs::remove_file(env.bin().join("claude")).unwrap();
    env.write_executable("my-claude", crate::support::FAKE_AGENT);
    let run = env.run_loop_with(
        &["task", "--agent", "claude-code", "--max-iterations", "1"],
        |c| {
            c.env("RALPH_CLAUDE_BINARY", "my-claude");
        },
    );
    run.assert_code(2);
    assert_eq!(env.agent_calls(), 1);
}
