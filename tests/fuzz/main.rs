//! Kill -9 fuzzing: a `--parallel 3` run killed at a random moment, then `--resume`d, round after
//! round. After each round every task's work is in the base exactly once, no conflict marker is
//! committed, no worktree or task branch is left for a done task, no agent is alive, and `git
//! fsck` is clean. `RALPH_FUZZ_ROUNDS` sets the rounds (8 by default; 200 for a long run);
//! `RALPH_FUZZ_SEED` replays a failing round's seed.

#![allow(dead_code, unreachable_pub)]

#[path = "../integration/support.rs"]
mod support;

use std::fs;
use std::time::Duration;

use support::{Rng, TestEnv, wait_for_file, wait_until};

/// A task loop's agent: it records its pid, writes its task's file (one line: the task's id),
/// takes a little while (random), and keeps the task's promise.
const AGENT: &str = r#"#!/bin/sh
dir=${FAKE_AGENT_DIR:?}
for last in "$@"; do :; done
task=${last#*CURRENT TASK: \"}
task=${task%%\"*}
echo $$ >> "$dir/pids"
echo "$task" > "$task.txt"
touch "$dir/started"
sleep "0.$(( $$ % 4 ))"
echo "<promise>READY_FOR_NEXT_TASK</promise>"
"#;

const TASKS: [&str; 5] = ["alpha", "bravo", "charlie", "delta", "echo"];

fn rounds() -> u64 {
    std::env::var("RALPH_FUZZ_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(8)
}

fn setup() -> TestEnv {
    let env = TestEnv::new();
    env.write_executable("opencode", AGENT);
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    let list: String = TASKS
        .iter()
        .map(|id| format!("- [ ] {id}\n  - id: {id}\n"))
        .collect();
    fs::write(env.ralph_file("ralph-tasks.md"), list).unwrap();
    env
}

/// One round: a run killed after `delay`, then resumed (or started again when it was killed
/// before it saved its state) until it ends.
fn round(seed: u64) {
    let mut rng = Rng(seed);
    let env = setup();
    let mut run = env.spawn_quiet(&["Build", "--tasks", "--parallel", "3", "--pause", "0"]);
    wait_for_file(&env.agent_dir().join("started"), Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(rng.below(1500)));
    let _ = run.kill();
    let _ = run.wait();
    let again = if env.ralph_file("ralph-loop.state.json").exists() {
        env.run(&["--resume", "--pause", "0"])
    } else {
        env.run(&["Build", "--tasks", "--parallel", "3", "--pause", "0"])
    };
    assert_eq!(
        again.code(),
        0,
        "seed {seed}: the run after the kill ended {}:\n{}\n{}",
        again.code(),
        again.stdout(),
        again.stderr()
    );
    check(&env, seed);
}

/// `git ARGS` in `dir`, whatever its exit code (`git grep` exits 1 when it finds nothing).
fn git_raw(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// The invariants every round must keep.
fn check(env: &TestEnv, seed: u64) {
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    let subjects = env.git(&["log", "--format=%s"]);
    for id in TASKS {
        assert!(
            list.contains(&format!("- [x] {id}")),
            "seed {seed}: {id} not done:\n{list}"
        );
        let file = fs::read_to_string(env.work().join(format!("{id}.txt"))).unwrap_or_default();
        assert_eq!(
            file.trim(),
            id,
            "seed {seed}: {id}'s work is in the base:\n{}",
            env.git(&["log", "--name-status", "--format=%h %s (%p)"])
        );
        let merges = subjects
            .lines()
            .filter(|s| s.starts_with(&format!("Ralph: merge task {id} ")))
            .count();
        assert_eq!(merges, 1, "seed {seed}: {id} merged once:\n{subjects}");
    }
    let markers = git_raw(
        &env.work(),
        &["grep", "-n", "-e", "^<<<<<<< ", "-e", "^>>>>>>> ", "HEAD"],
    );
    assert!(
        markers.stdout.is_empty(),
        "seed {seed}: no conflict marker committed: {}",
        String::from_utf8_lossy(&markers.stdout)
    );
    env.assert_no_task_leftovers(&format!("seed {seed}: "));
    let fsck = git_raw(&env.work(), &["fsck", "--no-progress"]);
    assert!(
        fsck.status.success(),
        "seed {seed}: git fsck: {}",
        String::from_utf8_lossy(&fsck.stderr)
    );
    let pids = fs::read_to_string(env.agent_dir().join("pids")).unwrap_or_default();
    wait_until(Duration::from_secs(10), "every agent to be gone", || {
        pids.lines()
            .filter_map(|pid| pid.trim().parse::<i32>().ok())
            .all(|pid| !support::is_alive(pid))
    });
}

/// A bare repository `remote.git` whose `main` holds the tasks, and two clones as machines.
fn machines() -> TestEnv {
    let env = setup();
    env.git(&["add", "-A"]);
    env.git(&["commit", "-q", "-m", "tasks"]);
    let bare = env.path().join("remote.git").to_string_lossy().into_owned();
    env.git(&["clone", "-q", "--bare", ".", &bare]);
    env.git(&["-C", &bare, "config", "receive.autoGc", "false"]);
    for name in ["m1", "m2"] {
        env.git(&[
            "clone",
            "-q",
            &bare,
            &env.path().join(name).to_string_lossy(),
        ]);
    }
    env
}

fn worker(env: &TestEnv, name: &str) -> std::process::Child {
    env.ralph()
        .current_dir(env.path().join(name))
        .args([
            "--pause",
            "0",
            "--worker",
            "--claim-heartbeat",
            "200ms",
            "--claim-ttl",
            "1s",
            // The claim a killed worker left is waited for and taken over, not left to others.
            "--wait",
        ])
        .env("RALPH_WORKER_POLL_MS", "200")
        .stdout(said_to(env, name))
        .stderr(said_to(env, name))
        .spawn()
        .unwrap()
}

/// Where a worker on machine `name` says what it does (appended, for a failing round's message).
fn said_to(env: &TestEnv, name: &str) -> std::fs::File {
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(env.path().join(format!("{name}.said")))
        .unwrap()
}

/// One round of two workers, m1 killed at a random moment and started again.
fn worker_round(seed: u64) {
    let mut rng = Rng(seed);
    let env = machines();
    let mut m1 = worker(&env, "m1");
    let mut m2 = worker(&env, "m2");
    wait_for_file(&env.agent_dir().join("started"), Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(rng.below(1500)));
    let _ = m1.kill();
    let _ = m1.wait();
    let mut again = worker(&env, "m1");
    for (name, child) in [("m2", &mut m2), ("m1", &mut again)] {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "seed {seed}: {name} never ended"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let said = fs::read_to_string(env.path().join(format!("{name}.said"))).unwrap_or_default();
        assert_eq!(
            status.code(),
            Some(0),
            "seed {seed}: {name} ended {status}:\n{said}"
        );
    }
    let bare = env.path().join("remote.git").to_string_lossy().into_owned();
    let list = env.git(&["-C", &bare, "show", "main:.ralph/ralph-tasks.md"]);
    let subjects = env.git(&["-C", &bare, "log", "--format=%s", "main"]);
    for id in TASKS {
        assert!(
            list.contains(&format!("- [x] {id}")),
            "seed {seed}: {id} not done:\n{list}"
        );
        let file = env.git(&["-C", &bare, "show", &format!("main:{id}.txt")]);
        assert_eq!(file.trim(), id, "seed {seed}: {id}'s work is on the base");
        let merges = subjects
            .lines()
            .filter(|s| s.starts_with(&format!("Ralph: merge task {id} ")))
            .count();
        assert_eq!(merges, 1, "seed {seed}: {id} merged once:\n{subjects}");
    }
    let left = env.git(&[
        "-C",
        &bare,
        "for-each-ref",
        "refs/heads/ralph/",
        "refs/ralph/claims/",
    ]);
    assert_eq!(
        left.trim(),
        "",
        "seed {seed}: no task branch or claim left on the remote"
    );
    let fsck = git_raw(std::path::Path::new(&bare), &["fsck", "--no-progress"]);
    assert!(
        fsck.status.success(),
        "seed {seed}: git fsck: {}",
        String::from_utf8_lossy(&fsck.stderr)
    );
}

#[test]
fn workers_killed_at_random_moments_and_started_again_finish_every_task_once() {
    let rounds = rounds().div_ceil(2);
    for seed in support::round_seeds("RALPH_FUZZ_SEED", rounds, 0x9e37_79b9_7f4a_7c15) {
        worker_round(seed);
    }
}

#[test]
fn parallel_runs_killed_at_random_moments_resume_to_a_clean_base() {
    for seed in support::round_seeds("RALPH_FUZZ_SEED", rounds(), 0) {
        round(seed);
    }
}
