//! `--status`, `--add-context`, `--clear-context`, `--list-tasks`, `--add-task`, `--remove-task`.

use std::fs;

use crate::support::TestEnv;

const NOTES: &str = "# Ralph Tasks\n\nNotes about the project.\n\n- [x] Set up\n  - [x] cargo init\n      deeper note\n";

#[test]
fn task_commands_edit_only_what_they_are_about() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.ralph_file("ralph-tasks.md"), NOTES).unwrap();
    for task in ["Build API", "Write tests", "Ship"] {
        let run = env.run(&["--add-task", task]);
        run.assert_code(0);
        assert!(run.stdout().contains(&format!("\"{task}\"")));
    }
    let content = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(
        content,
        format!("{NOTES}- [ ] Build API\n- [ ] Write tests\n- [ ] Ship\n")
    );

    let list = env.run(&["--list-tasks"]);
    list.assert_code(0);
    assert_eq!(
        list.stdout(),
        "Current tasks:\n1. ✅ Set up\n   ✅ cargo init\n2. ⏸️ Build API\n3. ⏸️ Write tests\n4. ⏸️ Ship\n"
    );

    env.run(&["--remove-task", "3"]).assert_code(0);
    let content = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(content, format!("{NOTES}- [ ] Build API\n- [ ] Ship\n"));

    let out_of_range = env.run(&["--remove-task", "9"]);
    out_of_range.assert_code(1);
    assert!(
        out_of_range.stderr().contains("out of range (1-3)"),
        "{}",
        out_of_range.stderr()
    );
    env.run(&["--remove-task", "1"]).assert_code(0);
    let content = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(
        content,
        "# Ralph Tasks\n\nNotes about the project.\n\n- [ ] Build API\n- [ ] Ship\n"
    );
    let multi_line = env.run(&["--add-task", "two\nlines"]);
    multi_line.assert_code(1);
    assert!(multi_line.stderr().contains("line break"));
}

#[test]
fn task_commands_without_a_file() {
    let env = TestEnv::new();
    let list = env.run(&["--list-tasks"]);
    list.assert_code(0);
    assert!(list.stdout().contains("--add-task"));
    let remove = env.run(&["--remove-task", "1"]);
    remove.assert_code(1);
    assert!(
        remove.stderr().contains("no tasks file found"),
        "{}",
        remove.stderr()
    );
    assert!(
        !env.work().join(".ralph").exists(),
        "read-only commands create nothing"
    );
}

#[test]
fn context_is_injected_once_and_additions_during_an_iteration_wait_for_the_next() {
    let env = TestEnv::new();
    let added = env.run(&["--add-context", "use sqlite"]);
    added.assert_code(0);
    assert!(
        added.stdout().contains("when the next loop starts"),
        "{}",
        added.stdout()
    );
    let ralph = env!("CARGO_BIN_EXE_ralph");
    env.agent_script(
        Some(1),
        &format!("'{ralph}' --add-context 'added during iteration 1'"),
    );
    let run = env.run_loop(&["task", "--max-iterations", "3"]);
    run.assert_code(2);
    assert!(env.agent_prompt(1).contains("use sqlite"));
    assert!(!env.agent_prompt(1).contains("added during iteration 1"));
    assert!(env.agent_prompt(2).contains("added during iteration 1"));
    assert!(!env.agent_prompt(2).contains("use sqlite"));
    assert!(!env.agent_prompt(3).contains("Additional Context"));
    assert!(run.stdout().contains("Context was consumed this iteration"));
    assert!(!env.ralph_file("ralph-context.md").exists());
}

#[test]
fn clear_context_says_whether_there_was_anything() {
    let env = TestEnv::new();
    assert!(
        env.run(&["--clear-context"])
            .stdout()
            .contains("No pending context")
    );
    env.run(&["--add-context", "hint"]).assert_code(0);
    let text = fs::read_to_string(env.ralph_file("ralph-context.md")).unwrap();
    assert!(
        text.starts_with("# Ralph Loop Context\n\n## Context added at 20"),
        "{text}"
    );
    assert!(text.ends_with("Z\nhint\n"), "{text}");
    assert!(env.run(&["--clear-context"]).stdout().contains("cleared"));
    assert!(!env.ralph_file("ralph-context.md").exists());
}

fn redact(text: &str) -> String {
    let re = regex::Regex::new(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ").unwrap();
    let text = re.replace_all(text, "[TIMESTAMP]");
    let re = regex::Regex::new(r"(Elapsed:\s+)\S.*").unwrap();
    re.replace_all(&text, "${1}[ELAPSED]").into_owned()
}

#[test]
fn status_without_ralph_dir() {
    let env = TestEnv::new();
    let run = env.run(&["--status"]);
    run.assert_code(0);
    insta::assert_snapshot!(run.stdout());
    assert!(!env.work().join(".ralph").exists());
}

#[test]
fn status_of_a_finished_run_shows_history() {
    let env = TestEnv::new();
    env.agent_script(
        None,
        "echo '|  Bash ls'; echo '|  Bash ls'; echo '|  Read x'",
    );
    env.run_loop(&["task", "--max-iterations", "2", "--output-format", "text"])
        .assert_code(2);
    let run = env.run(&["--status"]);
    run.assert_code(0);
    let text = redact(&run.stdout());
    assert!(text.contains("📊 HISTORY (2 iterations)"), "{text}");
    assert!(text.contains("   🔄 #2: 0s | Bash:2 Read:1"), "{text}");
}

#[test]
fn status_of_an_active_loop_and_of_an_interrupted_one() {
    let env = TestEnv::new();
    env.agent_script(Some(2), "echo ready > \"$FAKE_AGENT_DIR/ready\"; sleep 600");
    env.run(&["--add-task", "first task"]).assert_code(0);
    let mut child = env.spawn_quiet(&[
        "--pause",
        "0",
        "--tasks",
        "--model",
        "m1",
        "Build the thing",
    ]);
    env.wait_for_agent();
    // The agent's first line is in its log before the dashboard shows it.
    crate::support::wait_for_text(&env.ralph_file("logs/0002.jsonl"), "fake agent call 2");
    let listing_before = dir_listing(&env);
    let run = env.run(&["--status"]);
    run.assert_code(0);
    insta::assert_snapshot!("status_active", redact(&run.stdout()));
    env.run(&["--list-tasks"]).assert_code(0);
    assert_eq!(
        dir_listing(&env),
        listing_before,
        "--status and --list-tasks change nothing on disk"
    );

    crate::support::interrupt(&child);
    let output = crate::signals::wait_output(&mut child, std::time::Duration::from_secs(30));
    assert_eq!(output.status.code(), Some(130));
    let run = env.run(&["--status"]);
    let text = redact(&run.stdout());
    assert!(text.contains("⏸️  INTERRUPTED at iteration 2"), "{text}");
}

fn dir_listing(env: &TestEnv) -> Vec<(String, Vec<u8>)> {
    let mut entries: Vec<(String, Vec<u8>)> = fs::read_dir(env.work().join(".ralph"))
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (
                entry.file_name().to_string_lossy().into_owned(),
                fs::read(entry.path()).unwrap_or_default(),
            )
        })
        .collect();
    entries.sort();
    entries
}

#[test]
fn status_reads_ralph_ts_camel_case_history_and_shows_struggle() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    let records: Vec<String> = (1..=4)
        .map(|i| {
            format!(
                r#"{{"iteration":{i},"startedAt":"2026-01-01T00:00:00.000Z","endedAt":"2026-01-01T00:00:05.000Z","durationMs":5000,"toolsUsed":{{"Edit":{i}}},"filesModified":[],"exitCode":{},"completionDetected":false,"errors":["Error: boom"]}}"#,
                i % 2
            )
        })
        .collect();
    let history = format!(
        r#"{{"iterations":[{}],"totalDurationMs":20000,"struggleIndicators":{{"repeatedErrors":{{"Error: boom":4}},"noProgressIterations":4,"shortIterations":4}}}}"#,
        records.join(",")
    );
    fs::write(env.ralph_file("ralph-history.json"), history).unwrap();
    let run = env.run(&["--status"]);
    run.assert_code(0);
    insta::assert_snapshot!("status_camel_case_history", run.stdout());
}

#[test]
fn status_with_a_long_history_prints_the_last_five() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    let records: Vec<String> = (1..=10_000)
        .map(|i| format!(r#"{{"iteration":{i},"started_at":"2026-01-01T00:00:00Z","ended_at":"2026-01-01T00:00:01Z","duration_ms":1000,"tools_used":{{}},"files_modified":["a"],"exit_code":0,"completion_detected":false,"errors":[]}}"#))
        .collect();
    fs::write(
        env.ralph_file("ralph-history.json"),
        format!(
            r#"{{"iterations":[{}],"total_duration_ms":10000000}}"#,
            records.join(",")
        ),
    )
    .unwrap();
    let run = env.run(&["--status"]);
    run.assert_code(0);
    let stdout = run.stdout();
    assert!(stdout.contains("📊 HISTORY (10000 iterations)"));
    assert_eq!(stdout.matches(" | no tools").count(), 5);
    assert!(stdout.contains("#9996:") && stdout.contains("#10000:") && !stdout.contains("#9995:"));
}
