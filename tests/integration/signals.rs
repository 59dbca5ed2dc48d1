//! Ctrl-C, a second loop in the same directory, and processes that outlive the agent.

use std::fs;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{TestEnv, is_alive, run_with_deadline};

pub(crate) const HANG: &str = "sleep 600 & echo $! > \"$FAKE_AGENT_DIR/grandchild.pid\"; echo $$ > \"$FAKE_AGENT_DIR/agent.pid\"; echo ready > \"$FAKE_AGENT_DIR/ready\"; wait";

#[test]
fn ctrl_c_ends_the_agent_and_its_grandchild_and_keeps_resumable_state() {
    let env = TestEnv::new();
    env.agent_script(Some(2), HANG);
    let mut child = env
        .ralph()
        .args(["--pause", "0", "task"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    env.wait_for_agent();
    let grandchild: i32 = env.agent_file("grandchild.pid").trim().parse().unwrap();
    let agent: i32 = env.agent_file("agent.pid").trim().parse().unwrap();
    let sent = Instant::now();
    crate::support::interrupt(&child);
    let output = wait_output(&mut child, Duration::from_secs(10));
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "took {:?}",
        sent.elapsed()
    );
    assert_eq!(
        output.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(
        !is_alive(agent) && !is_alive(grandchild),
        "agent or grandchild survived"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("Loop ended: interrupted at iteration 2"),
        "{stdout}"
    );
    assert!(stdout.contains("ralph --resume"), "{stdout}");
    let state: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(env.ralph_file("ralph-loop.state.json")).unwrap())
            .unwrap();
    assert_eq!(state["active"], false);
    assert_eq!(state["iteration"], 2);
    // The interrupted iteration is recorded (its number and log are used): resume goes on at 3.
    let history = env.history();
    let iterations = history["iterations"].as_array().unwrap();
    assert_eq!(iterations.len(), 2, "{history}");
    assert_eq!(iterations[1]["interrupted"], true, "{history}");
    assert_eq!(iterations[1]["log"], "logs/0002.jsonl", "{history}");
    assert!(stdout.contains("continues at iteration 3"), "{stdout}");
}

pub(crate) use crate::support::wait_output;

#[test]
fn a_second_loop_is_refused_and_changes_nothing() {
    let env = TestEnv::new();
    env.agent_script(Some(2), HANG);
    let mut first = env.spawn_quiet(&["--pause", "0", "task"]);
    env.wait_for_agent();
    let state_before = fs::read(env.ralph_file("ralph-loop.state.json")).unwrap();
    let history_before = fs::read(env.ralph_file("ralph-history.json")).unwrap();

    let mut second = env.ralph();
    second.args(["--pause", "0", "another task"]);
    let output = run_with_deadline(&mut second, Duration::from_secs(30));
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(
        lines[0].contains("already running") && lines[0].contains("iteration 2"),
        "{stderr}"
    );
    assert!(lines[2].contains("ralph-loop.state.json"), "{stderr}");
    assert_eq!(
        fs::read(env.ralph_file("ralph-loop.state.json")).unwrap(),
        state_before
    );
    assert_eq!(
        fs::read(env.ralph_file("ralph-history.json")).unwrap(),
        history_before
    );
    assert_eq!(env.agent_calls(), 2, "the second loop never ran its agent");

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(first.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while first.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_grandchild_holding_the_output_pipe_does_not_hang_the_loop() {
    let env = TestEnv::new();
    env.agent_script(
        None,
        "sleep 600 & echo $! > \"$FAKE_AGENT_DIR/leaked.pid\"; echo '<promise>COMPLETE</promise>'",
    );
    let started = Instant::now();
    env.run_loop(&["task"]).assert_code(0);
    assert!(started.elapsed() < Duration::from_secs(20));
    let leaked: i32 = env.agent_file("leaked.pid").trim().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while is_alive(leaked) {
        assert!(
            Instant::now() < deadline,
            "the leaked grandchild outlived ralph"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The signals a process blocks and ignores, from `/proc/<pid>/status` lines `SigBlk:` and
/// `SigIgn:` written by the fake agent.
fn signal_sets(status: &str) -> (u64, u64) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
            .unwrap_or_else(|| panic!("no {name} in {status}"))
    };
    (field("SigBlk:"), field("SigIgn:"))
}

/// Nothing blocked, and none of SIGHUP, SIGINT, SIGQUIT, SIGTERM ignored.
fn assert_clean_signals(status: &str, what: &str) {
    let (blocked, ignored) = signal_sets(status);
    assert_eq!(blocked, 0, "{what}: blocked signals {blocked:x}");
    for (name, number) in [
        ("SIGHUP", 1),
        ("SIGINT", 2),
        ("SIGQUIT", 3),
        ("SIGTERM", 15),
    ] {
        assert_eq!(
            ignored & (1 << (number - 1)),
            0,
            "{what}: {name} is ignored"
        );
    }
}

const SIGNALS: &str =
    "grep -E '^Sig(Blk|Ign):' /proc/self/status > \"$FAKE_AGENT_DIR/signals-$$\"\n";

fn signal_files(env: &TestEnv) -> Vec<String> {
    fs::read_dir(env.agent_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("signals-"))
        })
        .map(|path| fs::read_to_string(path).unwrap())
        .collect()
}

#[test]
fn agents_start_with_no_signal_blocked_or_ignored_in_a_loop_a_parallel_task_and_a_worker() {
    // ralph itself is started with HUP, INT, QUIT and TERM ignored, as `nohup` or a script's
    // background job starts it: its agents must not inherit that.
    // A single loop.
    let env = TestEnv::new();
    env.start_ignoring_signals();
    env.agent_script(None, SIGNALS);
    env.run_loop_with(&["task", "--max-iterations", "1"], |command| {
        command.env("FAKE_AGENT_COMPLETE_AT", "1");
    })
    .assert_code(0);
    // A task loop of a parallel run.
    let parallel = TestEnv::new();
    parallel.start_ignoring_signals();
    parallel.agent_script(None, SIGNALS);
    fs::create_dir_all(parallel.ralph_file("")).unwrap();
    fs::write(
        parallel.ralph_file("ralph-tasks.md"),
        "- [ ] Alpha\n  - id: alpha\n",
    )
    .unwrap();
    parallel
        .run_loop_with(&["Build", "--parallel", "2"], |command| {
            command
                .env("FAKE_AGENT_COMPLETE_AT", "1")
                .env("FAKE_AGENT_PROMISE", "READY_FOR_NEXT_TASK");
        })
        .assert_code(0);
    // A worker.
    let fleet = crate::fleet::machines("- [ ] Solo\n  - id: solo\n", &["m1"]);
    fleet.start_ignoring_signals();
    fs::write(fleet.agent_dir().join("script"), SIGNALS).unwrap();
    let (code, stdout, stderr) =
        crate::fleet::finish(crate::fleet::start_worker(&fleet, "m1", &[]));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    for (env, what) in [
        (&env, "loop"),
        (&parallel, "parallel task"),
        (&fleet, "worker"),
    ] {
        let files = signal_files(env);
        assert!(!files.is_empty(), "{what}: the agent wrote nothing");
        for status in &files {
            assert_clean_signals(status, what);
        }
    }
}

#[test]
fn ctrl_c_reaches_the_agent_as_a_signal_before_it_is_killed() {
    let env = TestEnv::new();
    env.agent_script(
        Some(1),
        "trap 'echo SIGTERM > \"$FAKE_AGENT_DIR/trapped\"; exit 0' TERM; trap 'echo SIGINT > \"$FAKE_AGENT_DIR/trapped\"; exit 0' INT; echo ready > \"$FAKE_AGENT_DIR/ready\"; sleep 600 & wait",
    );
    let mut child = env
        .ralph()
        .args(["--pause", "0", "task", "--kill-grace", "30s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    env.wait_for_agent();
    crate::support::interrupt(&child);
    let output = wait_output(&mut child, Duration::from_secs(20));
    assert_eq!(output.status.code(), Some(130));
    // The trap ran: the agent heard Ctrl-C as Ctrl-C, it was not killed outright (the grace is
    // 30 s).
    assert_eq!(env.agent_file("trapped").trim(), "SIGINT");
}

/// After Ctrl-C, the same command again is refused as after a crash (it would drop the run's
/// history and totals, and so its budgets): a loop, a `--tasks` loop and a `--parallel` run alike.
/// `--resume` then goes on with every iteration kept.
#[test]
fn the_same_command_after_ctrl_c_is_refused_and_resume_keeps_the_history() {
    let shapes: [&[&str]; 3] = [
        &["task"],
        &["task", "--tasks"],
        &["task", "--parallel", "1"],
    ];
    for shape in shapes {
        let env = TestEnv::new();
        fs::create_dir_all(env.work().join(".ralph")).unwrap();
        fs::write(
            env.ralph_file("ralph-tasks.md"),
            "- [ ] Only\n  - id: only\n",
        )
        .unwrap();
        env.git(&["add", ".ralph"]);
        env.git(&["commit", "-qm", "tasks"]);
        env.agent_script(Some(2), HANG);
        let mut args = vec!["--pause", "0"];
        args.extend_from_slice(shape);
        let mut child = env
            .ralph()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        crate::support::wait_for_file(&env.agent_dir().join("ready"), Duration::from_secs(30));
        crate::support::interrupt(&child);
        let output = wait_output(&mut child, Duration::from_secs(10));
        assert_eq!(output.status.code(), Some(130), "{shape:?}");
        let before = env.history();
        assert_eq!(
            before["iterations"].as_array().unwrap().len(),
            2,
            "{shape:?}: {before}"
        );
        assert_eq!(
            before["iterations"][1]["interrupted"], true,
            "{shape:?}: {before}"
        );
        let again = env.run(&args);
        again.assert_code(1);
        let said = again.stderr();
        assert!(
            said.contains("is recorded here")
                && said.contains("ralph --resume")
                && said.contains("ralph --reset"),
            "{shape:?}: {said}"
        );
        assert_eq!(env.agent_calls(), 2, "{shape:?}: no agent ran");
        assert_eq!(env.history(), before, "{shape:?}: the history is as it was");
        env.agent_script(
            Some(3),
            "echo '<promise>COMPLETE</promise>'; echo '<promise>READY_FOR_NEXT_TASK</promise>'",
        );
        let resumed = env.run(&["--resume", "--max-iterations", "3"]);
        assert!(
            matches!(resumed.code(), 0 | 2),
            "{shape:?}: {}{}",
            resumed.stdout(),
            resumed.stderr()
        );
        let after = env.history();
        let iterations = after["iterations"].as_array().unwrap();
        assert!(iterations.len() >= 3, "{shape:?}: {after}");
        assert_eq!(
            iterations[..2],
            before["iterations"].as_array().unwrap()[..],
            "{shape:?}: the earlier records are kept"
        );
        // The resumed iteration is the next number, never the interrupted one's again.
        assert_eq!(iterations[2]["iteration"], 3, "{shape:?}: {after}");
    }
}
