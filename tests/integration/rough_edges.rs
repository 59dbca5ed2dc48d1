//! Rough edges a new user meets: task ids in any script, remotes named by URL or without the
//! branch, notification URLs checked at start, and the wording of the end lines and errors.

use crate::support::TestEnv;

#[test]
fn task_ids_keep_the_letters_of_every_script() {
    let env = TestEnv::new();
    for task in ["实现用户认证", "编写文档", "Ünïcödé façade — naïve café"] {
        env.run(&["--add-task", task]).assert_code(0);
    }
    env.git(&["add", "-A"]);
    env.git(&["commit", "-qm", "tasks"]);
    let run = env.run(&["x", "--dry-run", "--parallel", "3"]);
    run.assert_code(0);
    let stdout = run.stdout();
    for id in ["实现用户认证", "编写文档", "ünïcödé-façade-naïve-café"] {
        assert!(
            stdout.contains(&format!("in .ralph/worktrees/{id} on branch ralph/{id}")),
            "{id}: {stdout}"
        );
    }
    let refused = env.run(&["x", "--worktree", ".integrate"]);
    refused.assert_code(1);
    let stderr = refused.stderr();
    assert!(
        stderr.contains("not starting with '-' or '.'")
            && stderr.contains("'.integrate' is not one"),
        "{stderr}"
    );
}

#[test]
fn remote_errors_name_the_remote_and_the_branch_and_what_to_do() {
    let env = crate::fleet::machines(
        "- [ ] Write t1\n  - id: t1\n- [ ] Final\n  - id: final\n",
        &["m1"],
    );
    let m1 = crate::fleet::machine(&env, "m1");
    // The board's ids are one column.
    let status = crate::support::run_with_deadline(
        env.ralph().current_dir(&m1).args(["--status", "--remote"]),
        std::time::Duration::from_secs(30),
    );
    let board = String::from_utf8_lossy(&status.stdout);
    assert!(
        board.contains("   ⏸️ t1     Write t1\n   ⏸️ final  Final\n"),
        "{board}"
    );
    let run = |args: &[&str]| {
        let output = crate::support::run_with_deadline(
            env.ralph().current_dir(&m1).args(args),
            std::time::Duration::from_secs(30),
        );
        assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let bare = env.path().join("remote.git");
    let bare = bare.to_string_lossy();
    let stderr = run(&["--worker", "--remote", &bare]);
    assert!(
        stderr.contains(&format!(
            "'{bare}' looks like a URL or a path; add it as a remote (git remote add shared {bare}), then run again with --remote shared"
        )),
        "{stderr}"
    );
    let stderr = run(&["--worker", "--base", "nope"]);
    assert!(
        stderr.contains("the git remote 'origin' has no branch 'nope'; push it (git push origin nope), or pass --base with one of its branches: 'main'"),
        "{stderr}"
    );
    assert!(!stderr.contains("taking tasks from"), "{stderr}");
    let empty = env.path().join("empty.git");
    env.git(&["init", "-q", "--bare", &empty.to_string_lossy()]);
    let m1_path = m1.to_string_lossy();
    env.git(&[
        "-C",
        &m1_path,
        "remote",
        "add",
        "empty",
        &empty.to_string_lossy(),
    ]);
    for args in [
        &["--worker", "--remote", "empty"][..],
        &["--status", "--remote", "empty"],
    ] {
        let stderr = run(args);
        assert!(
            stderr.contains("the git remote 'empty' has no branch yet")
                && stderr.contains("push yours with the task list on it (git push empty main)"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_bad_notify_url_is_refused_before_any_iteration() {
    let env = TestEnv::new();
    for url in ["notaurl", "ftp://example.com/x", "http://[::1"] {
        let run = env.run_loop(&["task", "--notify", url, "--max-iterations", "1"]);
        run.assert_code(1);
        assert!(
            run.stderr().contains(&format!("--notify '{url}'")),
            "{url}: {}",
            run.stderr()
        );
        assert_eq!(env.agent_calls(), 0, "{url}: no iteration ran");
    }
    // The same from a config file.
    std::fs::create_dir_all(env.work().join(".ralph")).unwrap();
    std::fs::write(
        env.ralph_file("config.toml"),
        "notify = [\"hooks.slack.com/x\"]\n",
    )
    .unwrap();
    let run = env.run_loop(&["task", "--max-iterations", "1"]);
    run.assert_code(1);
    assert!(
        run.stderr().contains("'hooks.slack.com/x'"),
        "{}",
        run.stderr()
    );
    assert_eq!(env.agent_calls(), 0);
}

#[test]
fn report_dash_prints_the_page_and_a_missing_directory_is_named() {
    let env = TestEnv::new();
    env.run_loop(&["task", "--max-iterations", "1"])
        .assert_code(2);
    let run = env.run(&["--report", "-"]);
    run.assert_code(0);
    assert!(
        run.stdout().starts_with("<!DOCTYPE html>"),
        "{}",
        run.stdout()
    );
    assert!(!env.work().join("-").exists(), "no file named -");
    let run = env.run(&["--report", "nodir/x.html"]);
    run.assert_code(1);
    assert!(
        run.stderr()
            .contains("cannot write the report to nodir/x.html: there is no directory nodir"),
        "{}",
        run.stderr()
    );
    assert!(!run.stderr().contains(".tmp"), "{}", run.stderr());
}

#[test]
fn the_tool_summary_is_shown_once_live_and_in_the_log() {
    let env = TestEnv::new();
    env.agent_script(
        None,
        &crate::support::claude_events("Done.\n\n<promise>COMPLETE</promise>"),
    );
    let run = env.run_loop(&["task", "--agent", "claude-code", "--max-iterations", "1"]);
    run.assert_code(0);
    let tools = |text: &str| text.lines().filter(|l| l.starts_with("| Tools")).count();
    assert_eq!(tools(&run.stdout()), 1, "{}", run.stdout());
    let log = env.run(&["--log"]);
    log.assert_code(0);
    assert_eq!(tools(&log.stdout()), 1, "{}", log.stdout());
}

#[test]
fn log_of_an_iteration_that_never_ran_names_those_that_did() {
    let env = TestEnv::new();
    env.run_loop(&["task", "--max-iterations", "2"])
        .assert_code(2);
    let run = env.run(&["--log", "9"]);
    run.assert_code(1);
    assert!(
        run.stderr()
            .contains("there is no iteration 9: the loop here ran iterations 1–2"),
        "{}",
        run.stderr()
    );
    // --log-max-size is bytes, not tokens.
    for (value, message) in [
        ("5Q", "'5Q' is not a number; use e.g. 200000, 500k or 2M"),
        ("0", "'0' must be a number above 0"),
    ] {
        let run = env.run(&["task", "--log-max-size", value]);
        run.assert_code(1);
        assert!(run.stderr().contains(message), "{}", run.stderr());
    }
}

#[test]
fn an_agent_retrying_by_itself_shows_one_failure() {
    let env = TestEnv::new();
    let failed = r#"{"type":"message_end","message":{"role":"assistant","content":[],"stopReason":"error","errorMessage":"429 busy"}}"#;
    let retry = |n: u32| {
        format!(
            r#"{{"type":"auto_retry_start","attempt":{n},"maxAttempts":2,"delayMs":10,"errorMessage":"429 busy"}}"#
        )
    };
    env.write_executable(
        "pi",
        &format!(
            "#!/bin/sh\ncat <<'EVENTS'\n{failed}\n{}\n{failed}\n{}\n{failed}\nEVENTS\nexit 1\n",
            retry(1),
            retry(2)
        ),
    );
    let run = env.run_loop(&["task", "--agent", "pi", "--max-retries", "0"]);
    run.assert_code(1);
    let stderr = run.stderr();
    assert_eq!(stderr.matches("❌ pi failed").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("↻ pi is retrying").count(), 2, "{stderr}");
}
