//! `--worker`: workers on several "machines" (clones of one bare repository) share its task list.

use std::fs;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::fleet::{finish, machine, machines, remote, start_worker};
use crate::support::{TestEnv, read_until};

/// How long a worker is given to say what a test waits for.
const SAYS_WITHIN: Duration = Duration::from_secs(30);

/// Starts a worker on each machine at once and checks that each exits 0, having set no work
/// aside (each task's worktree and branch go once it is merged, whoever landed it); their
/// outputs.
fn all_succeed(env: &TestEnv, names: &[&str]) -> Vec<String> {
    let workers: Vec<Child> = names
        .iter()
        .map(|name| start_worker(env, name, &[]))
        .collect();
    (workers.into_iter().zip(names))
        .map(|(worker, name)| {
            let (code, stdout, stderr) = finish(worker);
            assert_eq!(code, Some(0), "{stdout}\n{stderr}");
            assert!(!stderr.contains("Kept task"), "{name}: {stderr}");
            let clone = machine(env, name).display().to_string();
            let kept = env.git(&["-C", &clone, "branch", "--list", "ralph-kept/*"]);
            assert_eq!(kept, "", "{name}: {stderr}");
            stdout
        })
        .collect()
}

/// (started?, task, machine) in the order they happened: appends land in that order.
fn events(env: &TestEnv) -> Vec<(bool, String, String)> {
    let text = fs::read_to_string(env.agent_dir().join("events")).unwrap_or_default();
    text.lines()
        .map(|line| {
            let parts: Vec<&str> = line.split(' ').collect();
            (
                parts[0] == "start",
                parts[1].to_owned(),
                parts.get(2).copied().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn runs_of(events: &[(bool, String, String)], task: &str) -> usize {
    events.iter().filter(|e| e.0 && e.1 == task).count()
}

/// The base's task list on the bare repository.
pub(crate) fn remote_tasks(env: &TestEnv) -> String {
    env.git(&["-C", &remote(env), "show", "main:.ralph/ralph-tasks.md"])
}

pub(crate) fn remote_claims(env: &TestEnv) -> String {
    env.git(&["-C", &remote(env), "for-each-ref", "refs/ralph/claims/"])
}

/// Every value the base had on the remote, newest first.
fn base_moves(env: &TestEnv) -> String {
    let bare = remote(env);
    env.git(&[
        "-C",
        &bare,
        "reflog",
        "show",
        "--format=%H",
        "refs/heads/main",
    ])
}

/// Every value the base ever had is an ancestor of its final one.
pub(crate) fn assert_base_never_rewritten(env: &TestEnv) {
    let bare = remote(env);
    let log = base_moves(env);
    let seed = env.git(&["rev-parse", "HEAD"]);
    let mut shas: Vec<&str> = log.lines().collect();
    assert!(!shas.is_empty(), "the base moved");
    shas.push(seed.trim());
    for sha in shas {
        env.git(&["-C", &bare, "merge-base", "--is-ancestor", sha, "main"]);
    }
}

#[test]
fn eight_tasks_three_workers_each_task_runs_once_and_all_are_merged() {
    let tasks: String = (1..=8)
        .map(|n| format!("- [ ] Task {n}\n  - id: t{n}\n"))
        .collect();
    let env = machines(&format!("# Tasks\n\n{tasks}"), &["m1", "m2", "m3"]);
    // The remote writes down the refs each push changed.
    let hook = PathBuf::from(remote(&env)).join("hooks/post-receive");
    fs::create_dir_all(hook.parent().unwrap()).unwrap();
    fs::write(&hook, "#!/bin/sh\n{ cat; echo --; } >> pushes\n").unwrap();
    fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // A worker that finds the last tasks held by the others ends then, saying which.
    for stdout in all_succeed(&env, &["m1", "m2", "m3"]) {
        assert!(
            stdout.contains("every task on origin/main is done")
                || stdout.contains("no task is left that this worker can take: other workers hold"),
            "{stdout}"
        );
    }
    let events = events(&env);
    for n in 1..=8 {
        assert_eq!(runs_of(&events, &format!("Task_{n}")), 1, "{events:?}");
        let file = env.git(&["-C", &remote(&env), "show", &format!("main:Task_{n}.txt")]);
        assert_eq!(file.trim(), format!("Task {n}"));
    }
    let list = remote_tasks(&env);
    assert_eq!(list.matches("- [x]").count(), 8, "{list}");
    assert_eq!(remote_claims(&env), "", "no claim is left");
    assert!(
        env.git(&["-C", &remote(&env), "branch", "--list", "ralph/*"])
            .is_empty(),
        "merged task branches are deleted"
    );
    assert_base_never_rewritten(&env);
    // Each task's branch reached the remote once, with its last commit, in the push that marked
    // its claim ready: no push of the branch alone before it.
    let pushes = fs::read_to_string(PathBuf::from(remote(&env)).join("pushes")).unwrap();
    let zero = "0".repeat(40);
    for n in 1..=8 {
        let (branch, claim) = (
            format!("refs/heads/ralph/t{n}"),
            format!("refs/ralph/claims/t{n}"),
        );
        let set: Vec<&str> = (pushes.split("--\n"))
            .filter(|push| {
                (push.lines())
                    .any(|line| line.ends_with(&branch) && !line.contains(&format!(" {zero} ")))
            })
            .collect();
        assert_eq!(set.len(), 1, "t{n}: {pushes}");
        assert!(
            set[0].lines().any(|line| line.ends_with(&claim)),
            "t{n}: {pushes}"
        );
    }
}

#[test]
fn a_chain_of_tasks_runs_in_order_across_two_workers() {
    let env = machines(
        "- [ ] First\n  - id: a\n- [ ] Second\n  - id: b\n  - blocked_by: a\n- [ ] Third\n  - id: c\n  - blocked_by: b\n",
        &["m1", "m2"],
    );
    all_succeed(&env, &["m1", "m2"]);
    let events = events(&env);
    let order: Vec<(bool, &str)> = events.iter().map(|e| (e.0, e.1.as_str())).collect();
    assert_eq!(
        order,
        [
            (true, "First"),
            (false, "First"),
            (true, "Second"),
            (false, "Second"),
            (true, "Third"),
            (false, "Third")
        ],
        "never two at once, always in order: {events:?}"
    );
    assert_eq!(remote_tasks(&env).matches("- [x]").count(), 3);
}

#[test]
fn two_workers_finishing_together_both_merge() {
    let env = machines(
        "- [ ] Left\n  - id: l\n- [ ] Right\n  - id: r\n",
        &["m1", "m2"],
    );
    // Both agents end only once both have started, so both merges come at once.
    fs::write(
        env.agent_dir().join("script"),
        "i=0; while [ \"$(grep -c start \"$dir/events\")\" -lt 2 ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done\n",
    )
    .unwrap();
    all_succeed(&env, &["m1", "m2"]);
    let events = events(&env);
    assert_eq!(runs_of(&events, "Left"), 1);
    assert_eq!(runs_of(&events, "Right"), 1);
    let bare = remote(&env);
    for file in ["Left.txt", "Right.txt"] {
        env.git(&["-C", &bare, "cat-file", "-e", &format!("main:{file}")]);
    }
    assert_eq!(remote_tasks(&env).matches("- [x]").count(), 2);
    assert_eq!(remote_claims(&env), "");
    assert_base_never_rewritten(&env);
}

#[test]
fn tasks_finishing_together_land_in_one_merge_train() {
    // The first worker ready waits for the other's running task (as long as it takes, here),
    // then lands both in one push.
    let linger = [("RALPH_TRAIN_LINGER_MS", "30000")];
    let (env, workers) = crate::fleet::two_workers_holding_their_tasks([&linger, &linger]);
    fs::write(env.agent_dir().join("go"), "").unwrap();
    let outputs: Vec<String> = workers
        .into_iter()
        .map(|worker| {
            let (code, stdout, stderr) = finish(worker);
            assert_eq!(code, Some(0), "{stdout}\n{stderr}");
            stdout
        })
        .collect();
    let all = outputs.join("\n");
    // One worker merged both; each worker says its own task was merged.
    let trains: Vec<&String> = (outputs.iter())
        .filter(|out| out.contains("🚂 Also merged into origin/main: task "))
        .collect();
    assert_eq!(trains.len(), 1, "{all}");
    for out in &outputs {
        assert_eq!(
            out.matches("🔀 Merged into origin/main").count(),
            1,
            "{all}"
        );
    }
    let list = remote_tasks(&env);
    assert_eq!(list.matches("- [x]").count(), 2, "{list}");
    assert_eq!(remote_claims(&env), "", "no claim is left");
    let bare = remote(&env);
    assert!(
        env.git(&["-C", &bare, "branch", "--list", "ralph/*"])
            .is_empty(),
        "both task branches are deleted"
    );
    for file in ["Solo.txt", "Duo.txt"] {
        env.git(&["-C", &bare, "cat-file", "-e", &format!("main:{file}")]);
    }
    // What the workers wrote straight into it (claims, their branches' objects) checks whole.
    env.git(&["-C", &bare, "fsck", "--strict", "--no-dangling"]);
    // The base moved once: its log has one update, carrying both merges.
    let moves = base_moves(&env);
    assert_eq!(moves.lines().count(), 1, "{moves}\n{all}");
    let log = env.git(&["-C", &bare, "log", "--first-parent", "--format=%s", "main"]);
    let subjects: Vec<&str> = log.lines().take(3).collect();
    assert!(
        subjects[0].starts_with("Ralph: tasks ") && subjects[0].ends_with(" merged"),
        "{log}"
    );
    assert!(subjects[1].starts_with("Ralph: merge task "), "{log}");
    assert!(subjects[2].starts_with("Ralph: merge task "), "{log}");
    // Each task's notes joined the base's progress log.
    let notes = env.git(&["-C", &bare, "show", "main:.ralph/progress.md"]);
    for id in ["solo", "duo"] {
        assert!(
            notes.contains(&format!("## Task {id} — notes from its branch")),
            "{notes}"
        );
    }
    assert_base_never_rewritten(&env);
}

/// Ctrl-C to a worker whose task is done and who waits to lead a merge train: it lands its task
/// at once rather than wait for the other, and stops (exit 130) saying it holds nothing; the
/// other lands its own, and the first, started again, finds nothing left: both tasks merged, no
/// claim left, the base never rewritten.
#[test]
fn ctrl_c_to_a_worker_waiting_to_lead_a_merge_train_loses_nothing() {
    let env = machines(
        "- [ ] Solo\n  - id: solo\n- [ ] Duo\n  - id: duo\n",
        &["m1", "m2"],
    );
    let hold = r#"if [ "$machine" = m2 ]; then touch "$dir/held-m2"
i=0; while [ ! -f "$dir/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done; fi
"#;
    fs::write(env.agent_dir().join("script"), hold).unwrap();
    let second = start_worker(&env, "m2", &[]);
    crate::support::wait_for_file(&env.agent_dir().join("held-m2"), Duration::from_secs(30));
    let linger = [("RALPH_TRAIN_LINGER_MS", "30000")];
    let first = crate::fleet::start_worker_with(&env, "m1", &[], &linger);
    // m1's claim says its task is ready to land: m1 waits for m2's to come along.
    let bare = remote(&env);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let claims = env.git(&[
            "-C",
            &bare,
            "for-each-ref",
            "--format=%(contents)",
            "refs/ralph/claims/",
        ]);
        if claims.contains("\"ready\"") {
            break;
        }
        assert!(Instant::now() < deadline, "no claim became ready: {claims}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stopped = Instant::now();
    crate::support::interrupt(&first);
    let (code, stdout, stderr) = finish(first);
    assert_eq!(code, Some(130), "{stdout}\n{stderr}");
    // It landed what was ready, then stopped.
    assert!(stdout.contains("🔀 Merged into origin/main"), "{stdout}");
    assert!(
        stdout.contains("interrupted between tasks; this worker holds no claim"),
        "{stdout}"
    );
    assert!(stopped.elapsed() < Duration::from_secs(10), "{stdout}");
    fs::write(env.agent_dir().join("go"), "").unwrap();
    let (code, stdout, stderr) = finish(second);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let (code, again, stderr) = finish(start_worker(&env, "m1", &[]));
    assert_eq!(code, Some(0), "{again}\n{stderr}");
    let list = remote_tasks(&env);
    assert_eq!(
        list.matches("- [x]").count(),
        2,
        "{list}\n{stdout}\n{again}"
    );
    for file in ["Solo.txt", "Duo.txt"] {
        env.git(&["-C", &bare, "cat-file", "-e", &format!("main:{file}")]);
    }
    assert_eq!(remote_claims(&env), "", "no claim is left");
    assert_base_never_rewritten(&env);
}

/// The agent's script on m1: its first call pushes some work and stops short of the promise, the
/// second says `ready` and hangs. What follows it is m2's.
const M1_STALLS: &str = r#"if [ "$machine" = m1 ]; then
  if [ -f "$dir/m1-first" ]; then echo ready > "$dir/ready"; sleep 600; fi
  touch "$dir/m1-first"; echo work > m1-work.txt; exit 0
fi
"#;

/// Claims quick to go stale, so a take-over comes within a second (`--wait`: a worker waits for
/// the claims other workers hold, to take a stale one over).
pub(crate) const FAST_CLAIMS: [&str; 7] = [
    "--claim-heartbeat",
    "400ms",
    "--claim-ttl",
    "1s",
    "--max-iterations",
    "5",
    "--wait",
];

/// Claims that go stale within a second, for the tests that race a stalled worker's pushes.
const FASTEST_CLAIMS: [&str; 7] = [
    "--claim-heartbeat",
    "200ms",
    "--claim-ttl",
    "600ms",
    "--max-iterations",
    "5",
    "--wait",
];

/// Starts the worker on m1 with `args` and kills it (SIGKILL) once its agent hangs mid-task.
fn kill_m1_mid_task(env: &TestEnv, args: &[&str]) {
    let mut first = start_worker(env, "m1", args);
    crate::support::wait_for_file(&env.agent_dir().join("ready"), Duration::from_secs(30));
    first.kill().unwrap();
    first.wait().unwrap();
}

#[test]
fn a_killed_workers_task_is_taken_over_after_the_claim_ttl() {
    let env = machines("- [ ] Solo\n  - id: solo\n", &["m1", "m2"]);
    // On m1 the agent commits some work and stops short of the promise, then hangs; on m2 it
    // checks that m1's pushed work is there and finishes.
    let m2 = "if [ -f m1-work.txt ]; then touch \"$dir/m2-saw-m1-work\"; fi\n";
    fs::write(env.agent_dir().join("script"), format!("{M1_STALLS}{m2}")).unwrap();
    kill_m1_mid_task(&env, &FAST_CLAIMS);

    let status = env
        .ralph()
        .current_dir(machine(&env, "m2"))
        .args(["--status", "--remote"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.status.code(), Some(0), "{text}");
    assert!(text.contains("CLAIMS on origin (1)"), "{text}");
    assert!(text.contains("   solo  "), "{text}");
    assert!(text.contains("TASKS on origin/main"), "{text}");

    let started = Instant::now();
    let (code, stdout, stderr) = finish(start_worker(&env, "m2", &FAST_CLAIMS));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("taken over from"), "{stdout}");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(
        env.agent_dir().join("m2-saw-m1-work").exists(),
        "m2 went on from the branch m1 pushed"
    );
    let bare = remote(&env);
    env.git(&["-C", &bare, "cat-file", "-e", "main:m1-work.txt"]);
    env.git(&["-C", &bare, "cat-file", "-e", "main:Solo.txt"]);
    assert!(remote_tasks(&env).contains("- [x] Solo"));
    assert_eq!(remote_claims(&env), "");
    assert_base_never_rewritten(&env);
    // m1, started again, finds its task done by m2: its worktree and branch go, and it ends.
    let (code, stdout, stderr) = finish(start_worker(&env, "m1", &FAST_CLAIMS));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Removed the worktrees and branches of 1 merged task"),
        "{stdout}"
    );
    assert!(!machine(&env, "m1").join(".ralph/worktrees/solo").exists());
}

#[test]
fn a_killed_workers_uncommitted_work_is_set_aside_once_another_worker_finished_its_task() {
    let env = machines("- [ ] Solo\n  - id: solo\n", &["m1", "m2"]);
    // m1's agent leaves a file uncommitted when it is killed.
    let script = M1_STALLS.replace(
        r#"echo ready > "$dir/ready""#,
        r#"echo half > half.txt; echo ready > "$dir/ready""#,
    );
    fs::write(env.agent_dir().join("script"), script).unwrap();
    kill_m1_mid_task(&env, &FAST_CLAIMS);
    let (code, stdout, stderr) = finish(start_worker(&env, "m2", &FAST_CLAIMS));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(remote_tasks(&env).contains("- [x] Solo"));

    let (code, stdout, stderr) = finish(start_worker(&env, "m1", &FAST_CLAIMS));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let said = format!("{stdout}{stderr}");
    assert!(
        said.contains(
            "Kept task solo's worktree or branch: its work is kept on branch ralph-kept/solo-"
        ),
        "{said}"
    );
    let m1 = machine(&env, "m1");
    assert!(!m1.join(".ralph/worktrees/solo").exists(), "{said}");
    let m1 = m1.to_string_lossy().into_owned();
    let kept = env.git(&[
        "-C",
        &m1,
        "for-each-ref",
        "--format=%(refname:short)",
        "refs/heads/ralph-kept/",
    ]);
    let kept = kept.trim();
    assert!(kept.starts_with("ralph-kept/solo-"), "{kept}");
    let half = env.git(&["-C", &m1, "show", &format!("{kept}:half.txt")]);
    assert_eq!(half.trim(), "half");
    assert_eq!(
        env.git(&["-C", &m1, "branch", "--list", "ralph/*"]).trim(),
        ""
    );
    // Never merged: the remote's base has no trace of it.
    let bare = remote(&env);
    let on_base = env.git(&["-C", &bare, "ls-tree", "--name-only", "main"]);
    assert!(!on_base.contains("half.txt"), "{on_base}");
}

#[test]
fn a_worker_started_again_while_another_holds_its_task_removes_its_stale_worktree() {
    let env = machines("- [ ] Solo\n  - id: solo\n", &["m1", "m2"]);
    // m1 pushes some work, then hangs; m2 goes on with it and waits for the test's go.
    let m2 = r#"touch "$dir/m2-started"
i=0; while [ ! -f "$dir/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
"#;
    fs::write(env.agent_dir().join("script"), format!("{M1_STALLS}{m2}")).unwrap();
    kill_m1_mid_task(&env, &FAST_CLAIMS);
    let stale = machine(&env, "m1").join(".ralph/worktrees/solo");
    assert!(stale.exists());
    let second = start_worker(&env, "m2", &FAST_CLAIMS);
    crate::support::wait_for_file(&env.agent_dir().join("m2-started"), Duration::from_secs(30));
    // m1 again with a long TTL: m2 is alive, however late its heartbeat on a loaded machine.
    let mut patient = FAST_CLAIMS;
    patient[3] = "60s";
    let again = start_worker(&env, "m1", &patient);
    let deadline = Instant::now() + Duration::from_secs(30);
    while stale.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let removed_while_held = !stale.exists();
    fs::write(env.agent_dir().join("go"), "").unwrap();
    let (code, stdout, stderr) = finish(again);
    assert!(
        removed_while_held,
        "m1's stale worktree went while m2 held the task:\n{stdout}\n{stderr}"
    );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("[solo] 🧹 Worker ") && stdout.contains("took this task over"),
        "{stdout}"
    );
    assert!(
        stdout.contains("every task on origin/main is done"),
        "{stdout}"
    );
    let (code, stdout, stderr) = finish(second);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(remote_tasks(&env).contains("- [x] Solo"));
    assert_eq!(runs_of(&events(&env), "Solo"), 3, "m1 twice, m2 once");
}

/// A worker on m1 exits 1 with one line naming the remote.
fn fails_in_one_line(env: &TestEnv) {
    let (code, stdout, stderr) = finish(start_worker(env, "m1", &[]));
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("cannot use the git remote 'origin'"),
        "{stderr}"
    );
}

#[test]
fn a_remote_out_of_reach_or_refusing_pushes_is_one_line_and_exit_1() {
    let env = machines("- [ ] Only\n  - id: only\n", &["m1"]);
    let m1 = machine(&env, "m1");
    let m1 = m1.to_string_lossy();
    let bare = remote(&env);

    env.git(&[
        "-C",
        &m1,
        "remote",
        "set-url",
        "origin",
        "/nonexistent/remote.git",
    ]);
    fails_in_one_line(&env);

    env.git(&["-C", &m1, "remote", "set-url", "origin", &bare]);
    let hook = format!("{bare}/hooks/pre-receive");
    fs::create_dir_all(format!("{bare}/hooks")).unwrap();
    fs::write(&hook, "#!/bin/sh\necho 'pushes are closed' >&2\nexit 1\n").unwrap();
    fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    fails_in_one_line(&env);
    assert_eq!(remote_claims(&env), "", "no claim left behind");
    assert!(!env.agent_dir().join("events").exists(), "no agent ran");
}

#[test]
fn ctrl_c_releases_the_claim_and_leaves_no_agent() {
    let env = machines("- [ ] Long\n  - id: long\n", &["m1"]);
    fs::write(
        env.agent_dir().join("script"),
        "echo $$ > \"$dir/agent.pid\"; echo ready > \"$dir/ready\"; sleep 600\n",
    )
    .unwrap();
    let worker = start_worker(&env, "m1", &[]);
    crate::support::wait_for_file(&env.agent_dir().join("ready"), Duration::from_secs(30));
    assert!(remote_claims(&env).contains("refs/ralph/claims/long"));
    crate::support::interrupt(&worker);
    let (code, stdout, stderr) = finish(worker);
    assert_eq!(code, Some(130), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("interrupted in task long; its claim is released"),
        "{stdout}"
    );
    // Released, not deleted: free to take at once, and it still names the text it was for.
    let claim = env.git(&[
        "-C",
        &remote(&env),
        "log",
        "-1",
        "--format=%B",
        "refs/ralph/claims/long",
    ]);
    assert!(
        claim.contains("\"released\":true") && claim.contains("\"fingerprint\""),
        "{claim}"
    );
    let agent: i32 = env.agent_file("agent.pid").trim().parse().unwrap();
    assert!(!crate::support::is_alive(agent), "the agent was ended");
    assert!(
        remote_tasks(&env).contains("- [ ] Long"),
        "the task is still open"
    );
}

#[test]
fn worker_options_that_cannot_work_are_usage_errors() {
    let env = machines("- [ ] One\n", &["m1"]);
    for (args, message) in [
        (&["--remote"][..], "--remote goes with --worker"),
        (
            &["--base", "main"][..],
            "--base names the branch a --worker",
        ),
        (
            &["--worker", "--claim-ttl", "30s"][..],
            "--claim-ttl must be longer than --claim-heartbeat",
        ),
        (
            &["--worker", "--parallel", "2"][..],
            "--worker runs one task at a time",
        ),
    ] {
        let run = env.run_with(args, |c| {
            c.current_dir(env.path().join("m1"));
        });
        run.assert_code(1);
        assert!(run.stderr().contains(message), "{args:?}: {}", run.stderr());
    }
    assert!(!env.agent_dir().join("events").exists(), "no agent ran");
}

#[test]
fn a_workers_dry_run_names_its_first_task_and_shows_that_tasks_loop() {
    let env = machines(
        "- [x] Done already\n  - id: done\n- [ ] Write alpha\n  - id: alpha\n- [ ] Write beta\n  - id: beta\n",
        &["m1"],
    );
    let run = env.run_with(&["--worker", "--dry-run"], |c| {
        c.current_dir(env.path().join("m1"));
    });
    run.assert_code(0);
    let text = run.stdout();
    for line in [
        "Worker:       takes the tasks of origin/main one at a time",
        "First task:   alpha \"Write alpha\" in .ralph/worktrees/alpha on branch ralph/alpha",
        "🔄 CURRENT TASK: \"Write alpha\"",
        "merges your branch `ralph/alpha` into `main`",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    assert!(!text.contains("Only when ALL tasks"), "{text}");
    assert!(!env.agent_dir().join("events").exists(), "no agent ran");
    assert_eq!(remote_claims(&env), "", "nothing was claimed");
    assert!(!env.path().join("m1/.ralph/worktrees").exists());
}

#[test]
fn the_agents_notes_and_follow_up_tasks_join_the_remote_base() {
    // One worker: what two workers racing to merge do is the eight-task test's.
    let env = machines(
        "- [ ] Write alpha\n  - id: alpha\n- [ ] Write beta\n  - id: beta\n",
        &["m1"],
    );
    fs::write(
        env.agent_dir().join("script"),
        crate::fleet::NOTES_AND_FOLLOW_UPS,
    )
    .unwrap();
    all_succeed(&env, &["m1"]);
    let log = env.git(&["-C", &remote(&env), "show", "main:.ralph/progress.md"]);
    for task in ["alpha", "beta"] {
        let note = format!("LEARNED: the API needs header X-Key (Write {task})");
        assert_eq!(log.matches(&note).count(), 1, "{log}");
    }
    let list = remote_tasks(&env);
    for task in ["alpha", "beta"] {
        let follow_up = format!("- [x] Follow-up found by Write {task}\n");
        assert_eq!(list.matches(&follow_up).count(), 1, "{list}");
    }
    assert_eq!(list.matches("- [x]").count(), 4, "{list}");
    assert_eq!(remote_claims(&env), "");
    assert_base_never_rewritten(&env);
}

#[test]
fn context_added_in_a_workers_clone_reaches_every_task_once_and_one_task_as_targeted() {
    let env = machines(
        "- [ ] Write alpha\n  - id: alpha\n- [ ] Write beta\n  - id: beta\n  - blocked_by: alpha\n",
        &["m1"],
    );
    fs::write(env.agent_dir().join("script"), crate::fleet::STEERED).unwrap();
    let worker = start_worker(&env, "m1", &[]);
    let waiting = env.agent_dir().join("waiting.Write_alpha");
    crate::support::wait_for_file(&waiting, Duration::from_secs(30));
    let add = |args: &[&str]| {
        let run = env.run_with(args, |c| {
            c.current_dir(machine(&env, "m1"));
        });
        run.assert_code(0);
        run.stdout()
    };
    let added = add(&["--add-context", "USE SQLITE"]);
    assert!(
        added.contains("Every task's loop picks it up once"),
        "{added}"
    );
    // Beta does not run yet: its hint waits in the clone until it does.
    add(&["--add-context", "BETA ONLY", "--task", "beta"]);
    let pending = machine(&env, "m1").join(".ralph/ralph-context.md");
    fs::write(env.agent_dir().join("go"), "").unwrap();
    let (code, stdout, stderr) = finish(worker);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let alpha = env.agent_file("prompt.Write_alpha.2");
    assert!(
        alpha.contains("USE SQLITE") && !alpha.contains("BETA ONLY"),
        "{alpha}"
    );
    let beta: Vec<String> = [1, 2]
        .iter()
        .map(|n| env.agent_file(&format!("prompt.Write_beta.{n}")))
        .collect();
    assert_eq!(
        beta.iter().filter(|p| p.contains("BETA ONLY")).count(),
        1,
        "{beta:?}"
    );
    // Beta started after the hint for every task was added: it gets it once too.
    assert_eq!(
        beta.iter().filter(|p| p.contains("USE SQLITE")).count(),
        1,
        "{beta:?}"
    );
    assert!(!pending.exists(), "nothing is left pending");
}

#[test]
fn a_worker_that_lost_its_claim_never_pushes_the_tasks_branch_again() {
    let env = machines("- [ ] Solo\n  - id: solo\n", &["m1", "m2"]);
    // m1 commits some work (pushed), then, in its second iteration, stalls until m2 is done and
    // commits more; m2 takes the task over and finishes it.
    fs::write(
        env.agent_dir().join("script"),
        r#"if [ "$machine" = m1 ]; then
  if [ -f "$dir/m1-first" ]; then
    touch "$dir/ready"
    i=0; while [ ! -f "$dir/m2-done" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
    echo late > m1-late.txt; exit 0
  fi
  touch "$dir/m1-first"; echo work > m1-work.txt; exit 0
fi
"#,
    )
    .unwrap();
    let fast = FASTEST_CLAIMS;
    let first = start_worker(&env, "m1", &fast);
    crate::support::wait_for_file(&env.agent_dir().join("ready"), Duration::from_secs(30));
    // m1 stalls (its heartbeat stops) past the claim's time to live.
    let m1 = nix::unistd::Pid::from_raw(i32::try_from(first.id()).unwrap());
    nix::sys::signal::kill(m1, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let (code, stdout, stderr) = finish(start_worker(&env, "m2", &fast));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("taken over from"), "{stdout}");
    fs::write(env.agent_dir().join("m2-done"), "").unwrap();
    nix::sys::signal::kill(m1, nix::sys::signal::Signal::SIGCONT).unwrap();
    let (_, stdout, stderr) = finish(first);
    let bare = remote(&env);
    let branches = env.git(&["-C", &bare, "for-each-ref", "refs/heads/ralph/"]);
    assert_eq!(
        branches.trim(),
        "",
        "m1 pushed its branch after losing the claim:\n{stdout}\n{stderr}"
    );
    assert!(remote_tasks(&env).contains("- [x] Solo"));
}

#[test]
fn work_pushed_for_another_text_of_a_task_is_set_aside_when_its_claim_is_taken_over() {
    let env = machines("- [ ] Solo\n  - id: solo\n", &["m1", "m2"]);
    // m1 commits work (pushed to ralph/solo), then hangs; m2 finishes whatever it is given.
    fs::write(env.agent_dir().join("script"), M1_STALLS).unwrap();
    let fast = FASTEST_CLAIMS;
    kill_m1_mid_task(&env, &fast);
    reword_solo_on_the_base(&env);
    let (code, stdout, stderr) = finish(start_worker(&env, "m2", &fast));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_old_work_set_aside(&env, &stdout, &stderr);
    let bare = remote(&env);
    let kept = env.git(&[
        "-C",
        &bare,
        "for-each-ref",
        "--format=%(refname)",
        "refs/heads/ralph-kept/",
    ]);
    assert!(kept.contains("refs/heads/ralph-kept/solo-"), "{kept}");
}

#[test]
fn work_pushed_under_a_released_claim_for_another_text_is_set_aside() {
    let env = machines("- [ ] Solo\n  - id: solo\n", &["m1", "m2"]);
    // m1 commits work (pushed), then waits in its second iteration until stopped with Ctrl+C.
    fs::write(env.agent_dir().join("script"), M1_STALLS).unwrap();
    let worker = start_worker(&env, "m1", &["--max-iterations", "5"]);
    crate::support::wait_for_file(&env.agent_dir().join("ready"), Duration::from_secs(30));
    crate::support::interrupt(&worker);
    let (code, _, _) = finish(worker);
    assert_eq!(code, Some(130));
    reword_solo_on_the_base(&env);
    let (code, stdout, stderr) = finish(start_worker(&env, "m2", &[]));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_old_work_set_aside(&env, &stdout, &stderr);
}

/// The user rewords task `solo` on the base (its id stays) and pushes it.
fn reword_solo_on_the_base(env: &TestEnv) {
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [ ] Solo, reworded\n  - id: solo\n",
    )
    .unwrap();
    env.git(&["commit", "-qam", "reword"]);
    env.git(&["push", "-q", &remote(env), "HEAD:main"]);
}

/// m1's work, made for the old text of `solo`, was said to be set aside and is not merged; the
/// reworded task is done.
fn assert_old_work_set_aside(env: &TestEnv, stdout: &str, stderr: &str) {
    assert!(
        stderr.contains("was made for another text of it"),
        "{stdout}\n{stderr}"
    );
    assert!(
        !env.git(&["-C", &remote(env), "ls-tree", "--name-only", "main"])
            .contains("m1-work.txt"),
        "the work made for the old text is not merged"
    );
    assert!(remote_tasks(env).contains("- [x] Solo, reworded"));
}

/// `ralph --worker` on a machine inside an engine job (its variables in `vars`).
fn start_worker_in_job(env: &TestEnv, name: &str, vars: &[(&str, &str)]) -> Child {
    crate::fleet::start_worker_with(env, name, &["--max-iterations", "5"], vars)
}

const SLURM_41_2: [(&str, &str); 4] = [
    ("SLURM_JOB_ID", "42"),
    ("SLURM_ARRAY_JOB_ID", "41"),
    ("SLURM_ARRAY_TASK_ID", "2"),
    ("SLURMD_NODENAME", "n7"),
];

/// `--status --remote` on m3 names the GitHub Actions job holding `solo` and the Slurm job
/// holding `duo`, in text and in JSON.
fn assert_remote_status_names_the_jobs(env: &TestEnv) {
    let status = |json: bool| {
        let mut command = env.ralph();
        command
            .current_dir(machine(env, "m3"))
            .args(["--status", "--remote"]);
        if json {
            command.arg("--json");
        }
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let text = status(false);
    let lines: Vec<&str> = text.lines().collect();
    let after = |task: &str| {
        let at = (lines.iter())
            .position(|line| line.trim_start().starts_with(&format!("{task} ")))
            .unwrap_or_else(|| panic!("no claim of {task}: {text}"));
        lines[at + 1].trim()
    };
    assert_eq!(
        after("solo"),
        "in GitHub Actions run 9001, job work #1: https://github.example/me/app/actions/runs/9001"
    );
    assert_eq!(after("duo"), "in Slurm job 41_2 (job id 42) on node n7");
    let json: serde_json::Value = serde_json::from_str(&status(true)).unwrap();
    assert_eq!(json["left_to_run"], 2, "{json}");
    assert_eq!(json["claims"][0]["task"], "duo", "{json}");
    assert_eq!(json["claims"][0]["job"]["slot"], "slurm::41_2", "{json}");
    assert_eq!(json["claims"][1]["job"]["engine"], "github", "{json}");
}

#[test]
fn claims_name_their_engine_job_and_a_requeued_job_takes_its_task_back_at_once() {
    let env = machines(
        "- [ ] Solo\n  - id: solo\n- [ ] Duo\n  - id: duo\n",
        &["m1", "m2", "m3"],
    );
    // The first call on m1 and on m2 hangs until the test says go.
    let script = r#"case "$machine" in m1|m2)
  if [ ! -f "$dir/hung-$machine" ]; then
    touch "$dir/hung-$machine"; echo ready > "$dir/ready-$machine"
    i=0; while [ ! -f "$dir/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
  fi;;
esac
"#;
    fs::write(env.agent_dir().join("script"), script).unwrap();
    let github = start_worker_in_job(
        &env,
        "m1",
        &[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_RUN_ID", "9001"),
            ("GITHUB_JOB", "work"),
            ("RALPH_JOB_INDEX", "1"),
            ("GITHUB_SERVER_URL", "https://github.example"),
            ("GITHUB_REPOSITORY", "me/app"),
        ],
    );
    crate::support::wait_for_file(&env.agent_dir().join("ready-m1"), Duration::from_secs(30));
    let mut slurm = start_worker_in_job(&env, "m2", &SLURM_41_2);
    crate::support::wait_for_file(&env.agent_dir().join("ready-m2"), Duration::from_secs(30));

    assert_remote_status_names_the_jobs(&env);

    // The Slurm job's node dies; the job is requeued onto m3 and takes `duo` back without
    // waiting for the claim to go stale (its time to live is the default quarter of an hour).
    slurm.kill().unwrap();
    slurm.wait().unwrap();
    let mut requeued = SLURM_41_2.to_vec();
    requeued[3] = ("SLURMD_NODENAME", "n8");
    requeued.push(("SLURM_RESTART_COUNT", "1"));
    let again = start_worker_in_job(&env, "m3", &requeued);
    crate::support::wait_until(Duration::from_secs(30), "duo to be merged", || {
        remote_tasks(&env).contains("- [x] Duo")
    });
    fs::write(env.agent_dir().join("go"), "").unwrap();
    let (code, stdout, stderr) = finish(again);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(" in Slurm job 41_2 (job id 42) on node n8, requeued 1×: taking tasks"),
        "{stdout}"
    );
    assert!(
        stdout.contains("[duo] 📌 Claimed \"Duo\" (taken back from ")
            && stdout.contains(", an earlier attempt of this job)"),
        "{stdout}"
    );
    let (code, stdout, stderr) = finish(github);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(remote_tasks(&env).contains("- [x] Solo"));
    assert_eq!(remote_claims(&env), "");
    assert_base_never_rewritten(&env);
}

/// A worker that can take nothing more ends at once (exit 0), naming what the others still run,
/// instead of polling until they are done; `--wait` waits. No worktree is left registered.
#[test]
fn a_worker_with_nothing_left_to_take_ends_and_names_what_others_run() {
    let env = machines("- [ ] Slow\n  - id: slow\n", &["m1", "m2"]);
    fs::write(
        env.agent_dir().join("script"),
        "touch \"$dir/slow-started\"; i=0; while [ ! -f \"$dir/go\" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done\n",
    )
    .unwrap();
    let first = start_worker(&env, "m1", &[]);
    crate::support::wait_for_file(
        &env.agent_dir().join("slow-started"),
        Duration::from_secs(30),
    );
    let started = Instant::now();
    let (code, stdout, stderr) = finish(start_worker(&env, "m2", &[]));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("no task is left that this worker can take: other workers hold slow"),
        "{stdout}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "it did not poll"
    );
    // With --wait, it waits (it says so) until the task is done.
    let mut waiting = start_worker(&env, "m2", &["--wait"]);
    let said = read_until(
        &mut waiting,
        "Waiting for one to finish or go stale",
        SAYS_WITHIN,
    );
    fs::write(env.agent_dir().join("go"), "").unwrap();
    let (code, stdout, stderr) = finish(first);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let (code, _, _) = finish(waiting);
    assert_eq!(code, Some(0), "{said}");
    for name in ["m1", "m2"] {
        let list = env.git(&[
            "-C",
            &machine(&env, name).to_string_lossy(),
            "worktree",
            "list",
        ]);
        assert_eq!(list.lines().count(), 1, "{name}: {list}");
    }
}

/// The heartbeat refreshes the claim while the task's loop pushes its branch: every commit of
/// every iteration still reaches the remote (neither push is dropped for meeting the other).
#[test]
fn every_commit_reaches_the_remote_however_often_the_claim_is_refreshed() {
    let env = machines("- [ ] Solo\n  - id: solo\n", &["m1"]);
    // Each call checks that the last iteration's commit is on the remote's task branch, and
    // keeps the promise on the sixth.
    let script = r#"n=0; [ -f "$dir/calls" ] && read -r n < "$dir/calls"; n=$((n + 1)); echo "$n" > "$dir/calls"
if [ "$n" -gt 1 ]; then
  pushed=$(git ls-remote origin refs/heads/ralph/solo); pushed=${pushed%%	*}
  [ "$(git rev-parse HEAD)" = "$pushed" ] || echo "$n" >> "$dir/unpushed"
fi
echo "$n" > "work-$n.txt"
[ "$n" -ge 6 ] || exit 0
"#;
    fs::write(env.agent_dir().join("script"), script).unwrap();
    // Every push takes a while before the remote says where its refs are: the heartbeat (as
    // often as it goes) would land a refresh of the claim in most of a branch's push.
    env.write_executable(
        "slow-receive-pack",
        "#!/bin/sh\nsleep 0.08\nexec git-receive-pack \"$@\"\n",
    );
    let slow = env.bin().join("slow-receive-pack");
    let m1 = machine(&env, "m1");
    let m1 = m1.to_string_lossy();
    env.git(&[
        "-C",
        &m1,
        "config",
        "remote.origin.receivepack",
        &slow.to_string_lossy(),
    ]);
    let args = [
        "--claim-heartbeat",
        "1ms",
        "--claim-ttl",
        "60s",
        "--max-iterations",
        "6",
    ];
    let (code, stdout, stderr) = finish(start_worker(&env, "m1", &args));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_eq!(env.agent_file("calls").trim(), "6");
    let unpushed = fs::read_to_string(env.agent_dir().join("unpushed")).unwrap_or_default();
    assert_eq!(
        unpushed, "",
        "iterations whose last commit was not pushed:\n{stdout}"
    );
    let said = format!("{stdout}{stderr}");
    assert!(!said.contains("Not pushing"), "{said}");
    // A worktree laid for the task has no interrupted iteration's work to commit.
    assert!(!said.contains("interrupted iteration"), "{said}");
}

/// A copy of the remote as it is now (`stale.git`): its path.
fn snapshot_remote(env: &TestEnv) -> String {
    let stale = env.path().join("stale.git").to_string_lossy().into_owned();
    env.git(&["clone", "-q", "--bare", &remote(env), &stale]);
    stale
}

/// Makes `machine` fetch from the copy `stale` until the remote has a claim of task `task`, and
/// from the remote from then on (`remote.origin.uploadpack`): the file that appears then.
fn serve_stale_until(env: &TestEnv, (stale, machine_name): (&str, &str), task: &str) -> PathBuf {
    let (bare, served) = (remote(env), env.path().join("served-new"));
    let script = format!(
        "#!/bin/sh\nif [ -f '{flag}' ] || git --git-dir='{bare}' rev-parse -q --verify refs/ralph/claims/{task} >/dev/null; then\n  touch '{flag}'; exec git upload-pack '{bare}'\nfi\nexec git upload-pack '{stale}'\n",
        flag = served.display()
    );
    env.write_executable("stale-upload-pack", &script);
    let clone = machine(env, machine_name).to_string_lossy().into_owned();
    let wrapper = env.bin().join("stale-upload-pack");
    let wrapper = wrapper.to_string_lossy();
    env.git(&["-C", &clone, "config", "remote.origin.uploadpack", &wrapper]);
    served
}

/// A fetch reads the remote's refs one by one, so a worker can see the base from before a merge
/// and the claims from after it (the merge deleted the task's claim): the merged task looks free.
/// The worker that claims it then finds it done and lets it go: its agent never runs again and
/// the base never merges it twice.
#[test]
fn a_task_merged_while_the_worker_looked_is_neither_run_nor_merged_again() {
    let env = machines("- [ ] Left\n  - id: l\n", &["m0", "m1"]);
    let bare = remote(&env);
    // What m1's first look sees: the remote before the merge.
    let stale = snapshot_remote(&env);
    // Meanwhile another worker merged the task.
    let m0 = machine(&env, "m0").to_string_lossy().into_owned();
    let list = fs::read_to_string(machine(&env, "m0").join(".ralph/ralph-tasks.md")).unwrap();
    fs::write(
        machine(&env, "m0").join(".ralph/ralph-tasks.md"),
        list.replace("- [ ]", "- [x]"),
    )
    .unwrap();
    fs::write(machine(&env, "m0").join("Left.txt"), "Left\n").unwrap();
    env.git(&["-C", &m0, "add", "-A"]);
    env.git(&[
        "-C",
        &m0,
        "commit",
        "-q",
        "-m",
        "Ralph: merge task l — Left",
    ]);
    env.git(&["-C", &m0, "push", "-q", "origin", "main"]);
    // m1 fetches from the stale copy until its claim of the task is on the remote.
    let served = serve_stale_until(&env, (&stale, "m1"), "l");
    let (code, stdout, stderr) = finish(start_worker(&env, "m1", &[]));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(served.exists(), "the worker claimed the task it saw free");
    assert!(
        stdout.contains("every task on origin/main is done"),
        "{stdout}"
    );
    assert_eq!(runs_of(&events(&env), "Left"), 0, "the agent never ran");
    let subjects = env.git(&["-C", &bare, "log", "--format=%s", "main"]);
    assert_eq!(
        subjects.matches("Ralph: merge task l ").count(),
        1,
        "{subjects}"
    );
    assert_eq!(remote_claims(&env), "", "the claim is dropped");
}

/// Two workers claiming tasks that touch the same files at the same moment both succeed (claims
/// are per task): here m1 looks at a view of the remote from before m2 claimed `api`, and
/// claims `users`. Once its claim took, m1 sees m2's and gives way, saying so; it takes `users`
/// only when `api` is done, so the two never run at the same time.
#[test]
fn a_worker_that_claimed_a_task_touching_what_another_just_claimed_gives_way() {
    let env = machines(
        "- [ ] api\n  - id: api\n  - touches: src/api/**\n- [ ] users\n  - id: users\n  - touches: src/api/users.rs\n",
        &["m1", "m2"],
    );
    let stale = snapshot_remote(&env);
    fs::write(
        env.agent_dir().join("script"),
        "if [ \"$machine\" = m2 ]; then touch \"$dir/m2-started\"; i=0; while [ ! -f \"$dir/go\" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done; fi\n",
    )
    .unwrap();
    let holder = start_worker(&env, "m2", &[]);
    crate::support::wait_for_file(&env.agent_dir().join("m2-started"), Duration::from_secs(30));
    // m1 fetches from the copy made before m2's claim until its own claim of `users` is there.
    let served = serve_stale_until(&env, (&stale, "m1"), "users");
    let mut giving_way = start_worker(&env, "m1", &["--wait"]);
    let said = read_until(&mut giving_way, "Waits for api", SAYS_WITHIN);
    assert!(served.exists(), "m1 claimed users on a stale view: {said}");
    assert_eq!(runs_of(&events(&env), "users"), 0, "{said}");
    fs::write(env.agent_dir().join("go"), "").unwrap();
    let (code, stdout, stderr) = finish(holder);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let (code, _, stderr) = finish(giving_way);
    assert_eq!(code, Some(0), "{said}\n{stderr}");
    let order: Vec<(bool, String)> = (events(&env).into_iter())
        .map(|(started, task, _)| (started, task))
        .collect();
    let expected = [
        (true, "api"),
        (false, "api"),
        (true, "users"),
        (false, "users"),
    ];
    let expected: Vec<(bool, String)> = (expected.iter())
        .map(|(started, task)| (*started, (*task).to_owned()))
        .collect();
    assert_eq!(order, expected, "never side by side");
    assert_eq!(remote_tasks(&env).matches("- [x]").count(), 2);
}
