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
    assert_eq!(env.history()["iterations"].as_array().unwrap().len(), 1);
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
