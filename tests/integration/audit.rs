//! What a user types and an agent prints, handled as a user expects: decorated promises, commits
//! only of real work, task and context files edited byte for byte under their locks, every
//! prompt source used, and nothing lost or left running when ralph is killed.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use predicates::prelude::*;

use crate::signals::{HANG, wait_output};
use crate::support::claude_events;
use crate::support::{TestEnv, is_alive, wait_for_file};

fn commit_subjects(env: &TestEnv) -> Vec<String> {
    env.git(&["log", "--format=%s"])
        .lines()
        .map(str::to_owned)
        .collect()
}

// ── 1. Decorated promises ─────────────────────────────────────────────────────────────────────

#[test]
fn a_promise_in_markdown_on_the_last_line_ends_the_loop() {
    for line in [
        "**<promise>COMPLETE</promise>**",
        "`<promise>COMPLETE</promise>`",
        "<promise>COMPLETE</promise>.",
        "- <promise>COMPLETE</promise>",
        "> <promise>COMPLETE</promise>!",
    ] {
        let env = TestEnv::new();
        env.agent_script(None, &format!("echo 'Done.'; echo '{line}'"));
        env.run_loop(&["task", "--output-format", "text", "--max-iterations", "1"])
            .assert()
            .code(0)
            .stdout(predicate::str::contains("Loop ended: completed"));
    }
    for line in [
        "<promise>COMPLETE</promise> once the tests pass",
        "**<promise>COMPLETE</promise>** is what I will print later.",
    ] {
        let env = TestEnv::new();
        env.agent_script(None, &format!("echo '{line}'"));
        env.run_loop(&["task", "--output-format", "text", "--max-iterations", "1"])
            .assert()
            .code(2);
    }
}

#[test]
fn decorated_promises_count_in_the_json_final_message_and_for_tasks() {
    let env = TestEnv::new();
    env.agent_script(
        None,
        &claude_events("All done.\n\n**<promise>COMPLETE</promise>**"),
    );
    env.run_loop(&["task", "--agent", "claude-code", "--max-iterations", "1"])
        .assert()
        .code(0);

    let env = TestEnv::new();
    env.run(&["--add-task", "one"]).assert_code(0);
    env.agent_script(
        Some(1),
        "sed -i 's/- \\[ \\] one/- [x] one/' .ralph/ralph-tasks.md; echo '`<promise>READY_FOR_NEXT_TASK</promise>`.'",
    );
    env.run_loop(&[
        "task",
        "--tasks",
        "--output-format",
        "text",
        "--max-iterations",
        "1",
    ])
    .assert()
    .code(2)
    .stdout(predicate::str::contains("Task completion detected"));
}

// ── 2. Idle iterations ────────────────────────────────────────────────────────────────────────

#[test]
fn an_iteration_that_changes_nothing_makes_no_commit() {
    let env = TestEnv::new();
    let before = env.commit_count();
    let run = env.run_loop(&["task", "--max-iterations", "3"]);
    run.assert()
        .code(2)
        .stdout(predicate::str::contains("Auto-committed").not());
    assert_eq!(
        commit_subjects(&env)[..env.commit_count() - before],
        ["Ralph: progress log"],
        "one commit of ralph's own files at the end, none per idle iteration"
    );
    assert_eq!(env.git(&["status", "--porcelain"]), "", "the tree is clean");
}

#[test]
fn ralphs_own_files_ride_along_with_the_next_commit_of_work() {
    let env = TestEnv::new();
    env.agent_script(Some(2), "echo work > work.txt");
    env.run_loop(&["task", "--max-iterations", "3"])
        .assert_code(2);
    let subjects = commit_subjects(&env);
    assert_eq!(
        subjects[..3],
        [
            "Ralph: progress log",
            "Ralph iteration 2: work in progress",
            "initial"
        ]
    );
    let files = env.git(&["show", "--name-only", "--format=", "HEAD~1"]);
    assert!(
        files.contains(".ralph/progress.md") && files.contains("work.txt"),
        "{files}"
    );
    assert_eq!(env.git(&["status", "--porcelain"]), "");
}

// ── 3–6, 18. The task and context files ───────────────────────────────────────────────────────

#[test]
fn remove_task_removes_the_whole_block_blank_lines_included() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [x] a\n- [ ] b\n  - [ ] b.1\n\n  - [ ] b.2\n- [ ] c\n",
    )
    .unwrap();
    env.run(&["--remove-task", "2"]).assert_code(0);
    assert_eq!(
        fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap(),
        "- [x] a\n- [ ] c\n"
    );
    env.run(&["--list-tasks"])
        .assert()
        .stdout(predicate::str::contains("b.2").not());
}

#[test]
fn edits_keep_every_other_byte_whatever_the_encoding() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    let tasks = b"# T\n\nNotes: caf\xe9\n- [ ] first \xff\n".to_vec();
    fs::write(env.ralph_file("ralph-tasks.md"), &tasks).unwrap();
    env.run(&["--add-task", "second"]).assert_code(0);
    let after = fs::read(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(after, [tasks.as_slice(), b"- [ ] second\n"].concat());

    let context = b"# Ralph Loop Context\n\ncaf\xe9\n".to_vec();
    fs::write(env.ralph_file("ralph-context.md"), &context).unwrap();
    env.run(&["--add-context", "more"]).assert_code(0);
    assert!(
        fs::read(env.ralph_file("ralph-context.md"))
            .unwrap()
            .starts_with(&context)
    );
}

#[test]
fn a_write_protected_task_file_is_refused() {
    let env = TestEnv::new();
    env.run(&["--add-task", "first"]).assert_code(0);
    let path = env.ralph_file("ralph-tasks.md");
    let before = fs::read(&path).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).unwrap();
    let run = env.run(&["--add-task", "second"]);
    run.assert().code(1).stderr(
        predicate::str::contains("ralph-tasks.md").and(predicate::str::contains("write-protected")),
    );
    assert_eq!(run.stderr().trim().lines().count(), 1, "{}", run.stderr());
    assert_eq!(fs::read(&path).unwrap(), before);
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o444
    );
}

#[test]
fn add_task_refuses_impossible_ids() {
    let env = TestEnv::new();
    env.run(&["--add-task", "A", "--id", "a", "--blocked-by", "a"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("blocked by itself"));
    env.run(&["--add-task", "A", "--id", "a"]).assert_code(0);
    env.run(&["--add-task", "B", "--id", "a"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("already exists"));
    env.run(&["--add-task", "B", "--blocked-by", ",,"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("--blocked-by needs task ids"));
    env.run(&["--add-task", "C", "--blocked-by", "zz"])
        .assert()
        .code(0)
        .stderr(predicate::str::contains("No task has the id 'zz' yet"));
    let content = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(content.matches("- [ ]").count(), 2, "{content}");
}

#[test]
fn parallel_task_edits_during_a_loop_lose_nothing() {
    let env = TestEnv::new();
    // Every iteration the loop marks the previous task failed (max_attempts: 1): its own edits
    // of the task file race with the ten --add-task below.
    let mut tasks = String::from("# Tasks\n\n");
    for n in 1..=30 {
        tasks.push_str(&format!("- [ ] original {n}\n  - max_attempts: 1\n"));
    }
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.ralph_file("ralph-tasks.md"), &tasks).unwrap();
    let mut looping =
        env.spawn_quiet(&["--pause", "0", "--tasks", "--max-iterations", "25", "task"]);
    wait_for_file(&env.agent_dir().join("count"), Duration::from_secs(30));
    let adders: Vec<_> = (1..=10)
        .map(|n| env.spawn_quiet(&["--add-task", &format!("added {n}")]))
        .collect();
    for mut adder in adders {
        let output = wait_output(&mut adder, Duration::from_secs(30));
        assert_eq!(output.status.code(), Some(0));
    }
    let output = wait_output(&mut looping, Duration::from_secs(60));
    assert!(output.status.code().is_some());
    let content = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    for n in 1..=10 {
        assert_eq!(
            content.matches(&format!("] added {n}\n")).count(),
            1,
            "{content}"
        );
    }
    for n in 1..=30 {
        assert_eq!(
            content.matches(&format!("] original {n}\n")).count(),
            1,
            "{content}"
        );
    }
    assert!(content.contains("- [!] original 1\n"), "{content}");
}

// ── 7–15. The command line ────────────────────────────────────────────────────────────────────

#[test]
fn free_text_values_may_start_with_a_dash() {
    let env = TestEnv::new();
    env.run(&["--add-task", "-fix the parser"]).assert_code(0);
    env.run(&["--add-task", "- [x] sneaky"]).assert_code(0);
    env.run(&["--add-context", "--verbose is broken"])
        .assert_code(0);
    env.run(&["--list-tasks"])
        .assert()
        .stdout(predicate::str::contains("1. ⏸️ -fix the parser"))
        .stdout(predicate::str::contains("2. ⏸️ - [x] sneaky"));
    assert!(
        fs::read_to_string(env.ralph_file("ralph-context.md"))
            .unwrap()
            .contains("--verbose is broken")
    );
    env.run_loop(&[
        "task",
        "--max-iterations",
        "1",
        "--completion-promise",
        "-DONE-",
    ])
    .assert_code(2);
    assert!(env.agent_prompt(1).contains("<promise>-DONE-</promise>"));
}

#[test]
fn a_prompt_file_is_combined_with_words_and_stdin() {
    let env = TestEnv::new();
    fs::write(env.work().join("P.md"), "From the file\n").unwrap();
    env.run_loop(&["-f", "P.md", "extra", "words", "--max-iterations", "1"])
        .assert_code(2);
    assert!(
        env.agent_prompt(1)
            .contains("## Your Task\n\nFrom the file\nextra words\n"),
        "{}",
        env.agent_prompt(1)
    );
    env.run_piped(
        &["--pause", "0", "-f", "P.md", "--max-iterations", "1"],
        b"piped\n",
        |_| {},
    )
    .assert_code(2);
    assert!(
        env.agent_prompt(2)
            .contains("## Your Task\n\nFrom the file\npiped\n"),
        "{}",
        env.agent_prompt(2)
    );
}

#[test]
fn an_empty_prompt_says_no_prompt_was_given() {
    let env = TestEnv::new();
    env.run(&[""])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("no prompt given"))
        .stderr(predicate::str::contains("ralph --help"))
        .stderr(predicate::str::contains("not a file").not());
}

#[test]
fn a_prompt_with_a_nul_byte_is_refused_before_anything_runs() {
    let env = TestEnv::new();
    fs::write(env.work().join("P.md"), b"fix\0this").unwrap();
    env.run_loop(&["-f", "P.md"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "prompt file P.md contains a NUL byte",
        ));
    env.run_piped(&["--pause", "0"], b"fix\0this", |_| {})
        .assert()
        .code(1)
        .stderr(predicate::str::contains("stdin contains a NUL byte"));
    assert_eq!(env.agent_calls(), 0);
    assert!(!env.work().join(".ralph").exists());
}

#[test]
fn a_ralph_file_that_is_not_a_directory_is_explained() {
    let env = TestEnv::new();
    fs::write(env.work().join(".ralph"), "oops").unwrap();
    let run = env.run(&["task"]);
    run.assert()
        .code(1)
        .stderr(predicate::str::contains(
            ".ralph exists but is not a directory",
        ))
        .stderr(predicate::str::contains("--help").not());
    assert_eq!(
        fs::read_to_string(env.work().join(".ralph")).unwrap(),
        "oops"
    );
}

#[test]
fn the_last_of_a_repeated_option_wins() {
    let env = TestEnv::new();
    // A task list, so the run does not plan first.
    env.run(&["--add-task", "one"]).assert_code(0);
    env.run_loop(&[
        "task",
        "--max-iterations",
        "5",
        "--max-iterations",
        "1",
        "--tasks",
        "--tasks",
    ])
    .assert_code(2);
    assert_eq!(env.agent_calls(), 1);
}

#[test]
fn a_number_too_large_names_the_largest_allowed() {
    let env = TestEnv::new();
    env.run(&["task", "--max-iterations", "4294967296"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("too large"))
        .stderr(predicate::str::contains("4294967295"));
}

#[test]
fn outside_git_ralph_says_so_once_and_does_not_claim_tracking() {
    let env = TestEnv::new();
    let plain = env.path().join("plain");
    fs::create_dir_all(&plain).unwrap();
    let run = env.run_loop_with(&["task", "--max-iterations", "4"], |c| {
        c.current_dir(&plain)
            .env("FAKE_AGENT_EDIT", plain.join("out.txt"));
    });
    run.assert_code(2);
    let stdout = run.stdout();
    assert_eq!(
        stdout.matches("not a git repository").count(),
        1,
        "{stdout}"
    );
    assert!(!stdout.contains("after every iteration"), "{stdout}");
    assert!(!stdout.contains("No file changes"), "{stdout}");
}

#[test]
fn a_prompt_file_that_is_not_utf8_is_named_once() {
    let env = TestEnv::new();
    fs::write(env.work().join("P.md"), b"caf\xe9 au lait").unwrap();
    let run = env.run_loop(&["-f", "P.md", "--max-iterations", "1"]);
    run.assert_code(2);
    assert_eq!(
        run.stderr()
            .matches("prompt file P.md is not valid UTF-8")
            .count(),
        1,
        "{}",
        run.stderr()
    );
}

// ── 16, 17, 19. Kills, crashes and write errors ───────────────────────────────────────────────

#[test]
fn no_agent_outlives_a_killed_ralph() {
    let env = TestEnv::new();
    env.agent_script(Some(1), HANG);
    let mut ralph = env.spawn_quiet(&["--pause", "0", "task"]);
    env.wait_for_agent();
    let agent: i32 = env.agent_file("agent.pid").trim().parse().unwrap();
    let grandchild: i32 = env.agent_file("grandchild.pid").trim().parse().unwrap();
    ralph.kill().unwrap();
    ralph.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while (is_alive(agent) || is_alive(grandchild)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !is_alive(agent) && !is_alive(grandchild),
        "the agent or its child outlived ralph"
    );
}

#[test]
fn reset_ends_an_agent_left_running() {
    use std::os::unix::process::CommandExt as _;
    let env = TestEnv::new();
    let leftover = std::process::Command::new("sleep")
        .arg("600")
        .process_group(0)
        .spawn()
        .unwrap();
    let group = i32::try_from(leftover.id()).unwrap();
    // Reaped as soon as it ends, so its group is gone once it is killed.
    let mut leftover = leftover;
    let waiter = std::thread::spawn(move || leftover.wait());
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.ralph_file("ralph-loop.state.json"),
        format!(
            r#"{{"active":true,"iteration":2,"minIterations":1,"maxIterations":0,"completionPromise":"COMPLETE","prompt":"x","startedAt":"2026-01-01T00:00:00.000Z","model":"","agent":"opencode","agentGroup":{group}}}"#
        ),
    )
    .unwrap();
    env.run(&["--reset"]).assert_code(0);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !waiter.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let ended = waiter.is_finished();
    if !ended {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(group),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(ended, "--reset left the recorded agent running");
}

#[test]
fn a_kill_during_the_commit_neither_repeats_nor_loses_an_iteration() {
    let env = TestEnv::new();
    let hook = env.work().join(".git/hooks/pre-commit");
    fs::write(
        &hook,
        format!(
            "#!/bin/sh\nif [ \"$(cat '{dir}/count')\" = 3 ] && [ ! -f '{dir}/hooked' ]; then\n  touch '{dir}/hooked'; sleep 2\nfi\n",
            dir = env.agent_dir().display()
        ),
    )
    .unwrap();
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
    let edit = env.work().join("log.txt");
    let mut ralph = env
        .ralph()
        .args(["--pause", "0", "task"])
        .env("FAKE_AGENT_EDIT", &edit)
        .env("FAKE_AGENT_COMPLETE_AT", "5")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&env.agent_dir().join("hooked"), Duration::from_secs(30));
    ralph.kill().unwrap();
    ralph.wait().unwrap();
    let run = env.run_with(&["--resume"], |c| {
        c.env("FAKE_AGENT_EDIT", &edit)
            .env("FAKE_AGENT_COMPLETE_AT", "5");
    });
    run.assert()
        .code(0)
        .stdout(predicate::str::contains("completed in 5 iterations"));
    let numbers: Vec<u64> = env.history()["iterations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| record["iteration"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2, 3, 4, 5]);
    assert_eq!(env.agent_calls(), 5);
    let subjects = commit_subjects(&env);
    for n in 1..=5 {
        let subject = format!("Ralph iteration {n}: work in progress");
        assert_eq!(
            subjects.iter().filter(|s| **s == subject).count(),
            1,
            "{subjects:?}"
        );
    }
}

#[test]
fn a_failed_write_records_why_the_loop_stopped() {
    let env = TestEnv::new();
    env.agent_script(
        Some(1),
        "rm -f .ralph/ralph-history.json; mkdir -p .ralph/ralph-history.json/blocked",
    );
    let run = env.run_loop(&["task", "--max-iterations", "3"]);
    run.assert()
        .code(1)
        .stderr(predicate::str::contains("ralph-history.json"));
    let state: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(env.ralph_file("ralph-loop.state.json")).unwrap())
            .unwrap();
    assert_eq!(state["active"], false);
    assert!(
        state["stopReason"]
            .as_str()
            .unwrap()
            .starts_with("ralph failed: "),
        "{state}"
    );
    env.run(&["--status"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("ralph failed"))
        .stdout(predicate::str::contains("UNEXPECTEDLY").not());
}
