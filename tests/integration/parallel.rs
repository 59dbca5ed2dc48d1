//! `--tasks --parallel N`: tasks side by side in git worktrees, merged back one by one.

use std::fs;

use crate::fleet::setup;
use crate::fleet::{NOTES_AND_FOLLOW_UPS, STEERED};
use crate::support::TestEnv;

/// (time, started?, task) in time order.
/// (position, started?, task) in the order they happened: appends land in that order.
fn events(env: &TestEnv) -> Vec<(usize, bool, String)> {
    let text = fs::read_to_string(env.agent_dir().join("events")).unwrap();
    text.lines()
        .enumerate()
        .map(|(at, line)| {
            let mut parts = line.split(' ');
            let started = parts.next().unwrap() == "start";
            (at, started, parts.next().unwrap_or("").to_owned())
        })
        .collect()
}

fn most_at_once(events: &[(usize, bool, String)]) -> usize {
    let mut running = 0usize;
    let mut most = 0;
    for (_, started, _) in events {
        if *started {
            running += 1;
            most = most.max(running);
        } else {
            running -= 1;
        }
    }
    most
}

fn time_of(events: &[(usize, bool, String)], started: bool, task: &str) -> usize {
    events
        .iter()
        .find(|(_, s, t)| *s == started && t == task)
        .unwrap_or_else(|| panic!("no event for {task}"))
        .0
}

/// Waits (10 s at most) until `n` agents have started: on a loaded machine a 0.3 s agent could
/// otherwise end before the next one starts, and the test would see no overlap.
pub(crate) fn barrier(n: u32) -> String {
    format!(
        "i=0; while [ \"$(grep -c start \"$dir/events\")\" -lt {n} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done"
    )
}

#[test]
fn four_independent_tasks_two_at_a_time_are_all_merged() {
    let env =
        setup("# Tasks\n\n- [ ] Task one\n- [ ] Task two\n- [ ] Task three\n- [ ] Task four\n");
    env.agent_script(None, &barrier(2));
    let run = env.run_loop(&[
        "Build",
        "--tasks",
        "--parallel",
        "2",
        "--on-complete",
        "cat >> \"$FAKE_AGENT_DIR/complete.json\"",
    ]);
    run.assert_code(0);
    // Unattended, every permission, no sandbox: said once.
    let warning = "The agents run unattended with every permission and no sandbox";
    assert_eq!(run.stderr().matches(warning).count(), 1, "{}", run.stderr());
    // The run's end fires on_complete once, with the parallel_ended event.
    let ended: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(env.agent_dir().join("complete.json")).unwrap())
            .unwrap();
    assert_eq!(ended["event"], "parallel_ended");
    assert_eq!(ended["exit_code"], 0);
    let events = events(&env);
    assert_eq!(events.len(), 8, "{events:?}");
    assert_eq!(most_at_once(&events), 2, "{events:?}");
    let tasks = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(tasks.matches("- [x]").count(), 4, "{tasks}");
    let first_parent = env.git(&["log", "--first-parent", "--format=%s"]);
    assert_eq!(
        first_parent.matches("Ralph: merge task ").count(),
        4,
        "{first_parent}"
    );
    assert!(first_parent.contains("Ralph: merge task task-one — Task one"));
    for name in ["Task_one", "Task_two", "Task_three", "Task_four"] {
        assert!(env.work().join(format!("{name}.txt")).exists(), "{name}");
    }
    let worktrees = env.git(&["worktree", "list"]);
    assert_eq!(worktrees.lines().count(), 1, "{worktrees}");
    assert_eq!(env.git(&["branch", "--list", "ralph/*"]), "");
    assert_eq!(env.git(&["status", "--porcelain"]), "");
    assert!(
        run.stdout().contains("[task-two] 🔀 Merged into main"),
        "{}",
        run.stdout()
    );
}

#[test]
fn a_diamond_runs_the_middle_side_by_side_and_the_end_after_both() {
    let env = setup(
        "- [ ] Alpha\n  - id: a\n- [ ] Bravo\n  - id: b\n  - blocked_by: a\n\
         - [ ] Charlie\n  - id: c\n  - blocked_by: a\n- [ ] Delta\n  - id: d\n  - blocked_by: b, c\n",
    );
    // Bravo and Charlie each wait until both have started (Alpha's start counts as the first).
    env.agent_script(
        None,
        &format!("case \"$task\" in Bravo|Charlie) {} ;; esac", barrier(3)),
    );
    env.run_loop(&["Build", "--tasks", "--parallel", "3"])
        .assert_code(0);
    let events = events(&env);
    let (b_start, b_end) = (
        time_of(&events, true, "Bravo"),
        time_of(&events, false, "Bravo"),
    );
    let (c_start, c_end) = (
        time_of(&events, true, "Charlie"),
        time_of(&events, false, "Charlie"),
    );
    assert!(time_of(&events, true, "Bravo") > time_of(&events, false, "Alpha"));
    assert!(
        b_start < c_end && c_start < b_end,
        "b and c overlap: {events:?}"
    );
    let d_start = time_of(&events, true, "Delta");
    assert!(d_start > b_end && d_start > c_end, "{events:?}");
    let first_parent = env.git(&["log", "--first-parent", "--format=%s"]);
    let order: Vec<&str> = first_parent
        .lines()
        .filter_map(|line| line.strip_prefix("Ralph: merge task "))
        .collect();
    assert_eq!(order.len(), 4);
    assert!(order[0].starts_with("d "), "{order:?}");
    assert!(order[3].starts_with("a "), "{order:?}");
}

/// Both tasks rewrite the same line of `shared.txt`: the second merge conflicts.
const SAME_LINE: &str = "- [ ] First edit\n  - id: first\n- [ ] Second edit\n  - id: second\n";
const EDIT_SHARED: &str = r#"
case "$last" in
  *"Completion was refused"*) printf '%s' "$last" > "$dir/refused.$id" ;;
esac
case "$last" in
  *"Merge conflicts to resolve first"*)
    touch "$dir/conflicted.$id"
    if [ -f "$dir/resolves" ]; then echo "first and second" > shared.txt; fi ;;
  *) [ -f "$dir/conflicted.$id" ] || echo "$task" > shared.txt ;;
esac
"#;

pub(crate) fn conflicting() -> TestEnv {
    let env = setup(SAME_LINE);
    fs::write(env.work().join("shared.txt"), "base\n").unwrap();
    env.git(&["add", "-A"]);
    env.git(&["commit", "-q", "-m", "shared file"]);
    env.agent_script(None, EDIT_SHARED);
    env
}

#[test]
fn a_conflicting_merge_is_resolved_by_the_agent() {
    let env = conflicting();
    fs::write(env.agent_dir().join("resolves"), "").unwrap();
    let run = env.run_loop(&[
        "Edit",
        "--tasks",
        "--parallel",
        "2",
        "--max-iterations",
        "3",
    ]);
    run.assert_code(0);
    let shared = fs::read_to_string(env.work().join("shared.txt")).unwrap();
    assert_eq!(shared, "first and second\n");
    assert!(
        run.stderr().contains("Merge conflict in shared.txt"),
        "{}",
        run.stderr()
    );
    let tasks = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(tasks.matches("- [x]").count(), 2, "{tasks}");
    assert_eq!(env.git(&["branch", "--list", "ralph/*"]), "");
}

#[test]
fn a_conflict_the_agent_never_resolves_fails_the_task_and_keeps_its_branch() {
    let env = conflicting();
    let run = env.run_loop(&[
        "Edit",
        "--tasks",
        "--parallel",
        "2",
        "--max-iterations",
        "2",
    ]);
    run.assert_code(3);
    let shared = fs::read_to_string(env.work().join("shared.txt")).unwrap();
    assert!(!shared.contains("<<<<<<<"), "{shared}");
    let tasks = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(tasks.matches("- [x]").count(), 1, "{tasks}");
    assert_eq!(tasks.matches("- [!]").count(), 1, "{tasks}");
    assert_eq!(env.git(&["branch", "--list", "ralph/*"]).lines().count(), 1);
    // Nothing with markers was committed: the unfinished merge stays in the failed task's
    // worktree, kept for the user, and said so.
    let branches = env.git(&["branch", "--list", "--format=%(refname:short)", "ralph/*"]);
    let failed = branches.trim().trim_start_matches("ralph/").to_owned();
    let kept = env.work().join(".ralph/worktrees").join(&failed);
    assert!(kept.join(".git").exists(), "{failed}'s worktree is kept");
    assert!(
        run.stderr().contains(&format!(".ralph/worktrees/{failed} has uncommitted changes (an unfinished merge of the base, shared.txt)")),
        "{}",
        run.stderr()
    );
    let branch_file = env.git(&["show", &format!("ralph/{failed}:shared.txt")]);
    assert!(
        !branch_file.contains("<<<<<<<"),
        "no marker was committed: {branch_file}"
    );
    // The markers left refused the task's promise, and the next prompt names that promise.
    let refused = fs::read_dir(env.agent_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.to_string_lossy().contains("refused."))
        .expect("a prompt with the refusal");
    let prompt = fs::read_to_string(refused).unwrap();
    assert!(
        prompt.contains("you printed <promise>READY_FOR_NEXT_TASK</promise>, but"),
        "{prompt}"
    );
    assert!(
        prompt.contains("no conflict markers in shared.txt"),
        "{prompt}"
    );
    assert!(!prompt.contains("printed <promise>COMPLETE"), "{prompt}");
}

#[test]
fn a_parallel_dry_run_shows_the_worktrees_the_merges_and_a_task_loops_prompt() {
    let env = setup("# Tasks\n\n- [ ] Write alpha\n- [ ] Write beta\n- [ ] Write gamma\n");
    let before = env.commit_count();
    let run = env.run(&["x", "--parallel", "2", "--dry-run"]);
    run.assert_code(0);
    let text = run.stdout();
    for line in [
        "Parallel:     up to 2 tasks at once, each in its own git worktree on its own branch; when a task's loop completes, its branch is merged into main",
        "Would start:  write-alpha \"Write alpha\" in .ralph/worktrees/write-alpha on branch ralph/write-alpha\n",
        "              write-beta \"Write beta\" in .ralph/worktrees/write-beta on branch ralph/write-beta\n",
        "Then:         write-gamma\n",
        "----- PROMPT of task write-alpha, iteration 1 (",
        "own git worktree on branch `ralph/write-alpha`",
        "🔄 CURRENT TASK: \"Write alpha\"",
        "   <promise>READY_FOR_NEXT_TASK</promise>",
        "merges your branch `ralph/write-alpha` into `main`",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    assert!(
        text.contains(&format!(
            "Directory:    {}",
            env.work().join(".ralph/worktrees/write-alpha").display()
        )),
        "{text}"
    );
    for sequential in ["📍 NEXT TASK", "Only when ALL tasks", "Task Workflow"] {
        assert!(!text.contains(sequential), "{sequential}\n{text}");
    }
    assert_eq!(env.agent_calls(), 0);
    assert_eq!(env.commit_count(), before, "nothing is committed");
    assert!(!env.work().join(".ralph/worktrees").exists());
    assert!(!env.ralph_file("ralph-loop.state.json").exists());
}

#[test]
fn max_cost_counts_every_worker_together() {
    let env = setup("- [ ] One\n- [ ] Two\n- [ ] Three\n");
    // Claude's result events report 0.02 USD per iteration; no task ever finishes.
    env.write_executable(
        "claude",
        "#!/bin/sh\nsleep 0.2\necho '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"num_turns\":1,\"result\":\"working\",\"total_cost_usd\":0.02,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}'\necho x >> \"$FAKE_AGENT_DIR/calls\"\n",
    );
    let run = env.run_loop(&[
        "Build",
        "--tasks",
        "--parallel",
        "3",
        "--agent",
        "claude-code",
        "--max-cost",
        "0.10",
    ]);
    run.assert_code(2);
    let calls = fs::read_to_string(env.agent_dir().join("calls")).unwrap();
    let calls = calls.lines().count();
    // The three first iterations start together (nothing to expect yet: 0.06); after them, each
    // iteration reserves what the last ones cost and starts only if the budget can pay for it,
    // so the run never passes 0.10 (unreserved, the three loops would have reached 0.14).
    assert!((4..=5).contains(&calls), "{calls} calls");
    assert!(run.stdout().contains("max cost"), "{}", run.stdout());
    let history = env.history();
    let total = history["total_cost_usd"].as_f64().unwrap();
    assert!(total <= 0.10 + 1e-9, "{total}");
    // The budget is the run's, not the session's: a resumed run has none left.
    env.run(&["--resume"]).assert_code(2);
    let after = fs::read_to_string(env.agent_dir().join("calls")).unwrap();
    assert_eq!(after.lines().count(), calls, "no agent ran after --resume");
}

#[test]
fn ctrl_c_stops_every_worker_and_its_agent() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let env = setup("- [ ] One\n- [ ] Two\n");
    env.agent_script(
        None,
        "sleep 600 & echo $! >> \"$dir/pids\"; echo $$ >> \"$dir/pids\"; echo x >> \"$dir/ready\"; wait",
    );
    let mut ralph = env
        .ralph()
        .args(["--pause", "0", "Build", "--tasks", "--parallel", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = env.agent_dir().join("ready");
    let deadline = Instant::now() + Duration::from_secs(30);
    while fs::read_to_string(&ready).map_or(0, |text| text.lines().count()) < 2 {
        assert!(Instant::now() < deadline, "the two agents did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pids: Vec<i32> = fs::read_to_string(env.agent_dir().join("pids"))
        .unwrap()
        .lines()
        .map(|pid| pid.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 4);
    crate::support::interrupt(&ralph);
    let output = crate::signals::wait_output(&mut ralph, Duration::from_secs(10));
    assert_eq!(
        output.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|pid| crate::support::is_alive(*pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !pids.iter().any(|pid| crate::support::is_alive(*pid)),
        "an agent survived"
    );
}

/// Two loops with different prompts, each in its own worktree, at the same time.
#[test]
fn two_worktree_loops_run_at_once_and_status_lists_both() {
    use std::time::Duration;
    let env = TestEnv::new();
    // Each agent waits until both are running, then writes its prompt's first word and completes.
    env.write_executable(
        "opencode",
        r#"#!/bin/sh
dir=${FAKE_AGENT_DIR:?}
for last in "$@"; do :; done
word=$(printf '%s' "$last" | grep -A2 '^## Your Task' | sed -n 3p | cut -d' ' -f1)
touch "$dir/started.$word"
n=0
while [ ! -f "$dir/go" ] && [ "$n" -lt 2400 ]; do sleep 0.05; n=$((n + 1)); done
echo "$word" > "$word.txt"
echo "<promise>COMPLETE</promise>"
"#,
    );
    let start =
        |name: &str, prompt: &str| env.spawn_quiet(&["--pause", "0", "--worktree", name, prompt]);
    let mut first = start("alpha", "Alpha the first prompt");
    let mut second = start("beta", "Beta the second prompt");
    for word in ["Alpha", "Beta"] {
        let started = env.agent_dir().join(format!("started.{word}"));
        crate::support::wait_for_file(&started, Duration::from_secs(30));
    }
    let status = env.run(&["--status"]).stdout();
    assert!(status.contains("alpha  🔄 running"), "{status}");
    assert!(status.contains("beta   🔄 running"), "{status}");
    fs::write(env.agent_dir().join("go"), "").unwrap();
    for child in [&mut first, &mut second] {
        let output = crate::signals::wait_output(child, Duration::from_secs(30));
        assert_eq!(output.status.code(), Some(0));
    }
    let alpha = env.work().join(".ralph/worktrees/alpha/Alpha.txt");
    assert!(alpha.exists(), "the alpha loop worked in its worktree");
    assert!(
        !env.work().join("Alpha.txt").exists(),
        "and not in the base"
    );
    assert!(
        env.git(&["branch", "--list", "ralph/*"])
            .contains("ralph/beta")
    );
    let merged = env.run_loop(&["--worktree", "gamma", "--merge", "Gamma the third"]);
    merged.assert_code(0);
    // A worktree loop is no task: its merge says so, and no commit claims a task list.
    assert!(
        merged.stdout().contains("[gamma] 🔀 Merged into main (")
            && merged
                .stdout()
                .contains("its worktree and branch are removed")
            && !merged.stdout().contains("task marked [x]"),
        "{}",
        merged.stdout()
    );
    assert!(
        !env.git(&["log", "--format=%s"])
            .contains("Ralph: task list"),
        "{}",
        env.git(&["log", "--format=%s"])
    );
    assert!(
        env.work().join("Gamma.txt").exists(),
        "merged into the base"
    );
    assert!(
        !env.git(&["branch", "--list", "ralph/gamma"])
            .contains("gamma")
    );
}

#[test]
fn a_workers_task_settings_reach_its_agent_and_verbose_shows_its_output() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [ ] **only**: The only task\n  - cli: codex\n  - model: gpt-x\n  - success: only.txt exists\n  - timeout: 5m\n",
    )
    .unwrap();
    let run = env.run_loop_with(&["Build", "--tasks", "--parallel", "1", "--verbose"], |c| {
        c.env("FAKE_AGENT_COMPLETE_AT", "1");
    });
    run.assert_code(0);
    assert_eq!(env.agent_argv(1)[0], "exec", "the task's agent: codex");
    assert!(env.agent_argv(1).contains(&"gpt-x".to_owned()));
    let prompt = env.agent_prompt(1);
    assert!(prompt.contains("Done means: only.txt exists"), "{prompt}");
    assert!(
        prompt.contains("🔄 CURRENT TASK: \"**only**: The only task\""),
        "{prompt}"
    );
    // A task loop's prompt: its one task, its branch, its promise; not the sequential workflow.
    assert!(prompt.contains("on branch `ralph/only`"), "{prompt}");
    assert!(
        prompt.contains("\n   <promise>READY_FOR_NEXT_TASK</promise>\n"),
        "{prompt}"
    );
    assert!(!prompt.contains("Only when ALL tasks"), "{prompt}");
    assert!(!prompt.contains("Task Workflow"), "{prompt}");
    assert!(
        run.stdout().contains("[only] fake agent call 1"),
        "{}",
        run.stdout()
    );
    let quiet = TestEnv::new();
    fs::create_dir_all(quiet.work().join(".ralph")).unwrap();
    fs::write(quiet.ralph_file("ralph-tasks.md"), "- [ ] Quiet\n").unwrap();
    let run = quiet.run_loop_with(&["Build", "--tasks", "--parallel", "1"], |c| {
        c.env("FAKE_AGENT_COMPLETE_AT", "1");
    });
    run.assert_code(0);
    assert!(
        !run.stdout().contains("fake agent call"),
        "{}",
        run.stdout()
    );
}

#[test]
fn parallel_runs_need_commits_and_a_clean_work_tree() {
    let env = setup("- [ ] One\n");
    env.run_loop(&["Build", "--tasks", "--parallel", "2", "--no-commit"])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("needs auto-commit"));
    fs::write(env.work().join("README.md"), "changed\n").unwrap();
    env.run_loop(&["Build", "--tasks", "--parallel", "2"])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("uncommitted changes (README.md)"));
    assert_eq!(env.commit_count(), 1, "nothing was committed");
    assert!(!env.work().join(".ralph/worktrees").exists());
}

#[test]
fn json_events_of_a_parallel_run_name_their_task() {
    let env = setup("- [ ] One\n");
    let run = env.run_loop(&["Build", "--tasks", "--parallel", "1", "--json"]);
    run.assert_code(0);
    let events: Vec<serde_json::Value> = run
        .stdout()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    for kind in [
        "task_started",
        "iteration_started",
        "iteration_finished",
        "task_merged",
    ] {
        let found = events.iter().find(|e| e["event"] == kind);
        assert_eq!(
            found.map(|e| &e["task"]),
            Some(&serde_json::json!("one")),
            "{kinds:?}"
        );
    }
    assert_eq!(kinds.last(), Some(&"parallel_ended"));
}

#[test]
fn the_agents_notes_and_follow_up_tasks_join_the_base_at_merge() {
    let env = setup("- [ ] Write alpha\n  - id: alpha\n- [ ] Write beta\n  - id: beta\n");
    // Both branches start from the same base, so the second merge meets the first one's notes.
    env.agent_script(None, &format!("{}\n{NOTES_AND_FOLLOW_UPS}", barrier(2)));
    let run = env.run_loop(&["x", "--parallel", "2"]);
    run.assert_code(0);
    let log = fs::read_to_string(env.ralph_file("progress.md")).unwrap();
    assert!(log.starts_with("# Ralph Progress Log\n"), "{log}");
    for task in ["alpha", "beta"] {
        let note = format!("LEARNED: the API needs header X-Key (Write {task})");
        assert_eq!(log.matches(&note).count(), 1, "{log}");
        assert!(
            log.contains(&format!("## Task {task} — notes from its branch")),
            "{log}"
        );
    }
    let tasks = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    for task in ["alpha", "beta"] {
        let follow_up = format!("- [x] Follow-up found by Write {task}\n");
        assert_eq!(tasks.matches(&follow_up).count(), 1, "{tasks}");
        assert!(
            run.stdout().contains(&format!(
                "[{task}] 📝 1 task it added joined the task list of main: \"Follow-up found by Write {task}\""
            )),
            "{}",
            run.stdout()
        );
    }
    assert_eq!(tasks.matches("- [x]").count(), 4, "{tasks}");
    assert!(!tasks.contains("- [ ]"), "{tasks}");
    assert_eq!(env.git(&["status", "--porcelain"]), "");
    assert_eq!(env.git(&["branch", "--list", "ralph/*"]), "");
}

/// Starts `ralph x --parallel 2` on tasks alpha and beta (agent: [`STEERED`]) and waits until
/// both agents wait in their first iteration.
fn two_steered_tasks() -> (TestEnv, std::process::Child) {
    use std::process::Stdio;
    use std::time::Duration;
    let env = setup("- [ ] Write alpha\n  - id: alpha\n- [ ] Write beta\n  - id: beta\n");
    env.agent_script(None, STEERED);
    let ralph = env
        .ralph()
        .args(["--pause", "0", "x", "--parallel", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for id in ["Write_alpha", "Write_beta"] {
        let waiting = env.agent_dir().join(format!("waiting.{id}"));
        crate::support::wait_for_file(&waiting, Duration::from_secs(30));
    }
    (env, ralph)
}

/// Lets the agents go on; the run's stdout once it ended, every hint used up.
fn steered_run_ends(env: &TestEnv, mut ralph: std::process::Child) -> String {
    use std::time::Duration;
    let base = env.ralph_file("ralph-context.md");
    fs::write(env.agent_dir().join("go"), "").unwrap();
    let output = crate::signals::wait_output(&mut ralph, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!base.exists(), "nothing is left pending");
    stdout
}

#[test]
fn context_added_during_a_parallel_run_reaches_every_running_task() {
    let (env, ralph) = two_steered_tasks();
    let added = env.run(&["--add-context", "USE SQLITE"]);
    added.assert_code(0);
    assert!(
        added
            .stdout()
            .contains("Every task's loop picks it up once, at its next iteration: those running now and those that start later in this run."),
        "{}",
        added.stdout()
    );
    let stdout = steered_run_ends(&env, ralph);
    // Each task's prompt names the other task as not its own; the one started second knows the
    // first runs beside it.
    let alpha = env.agent_file("prompt.Write_alpha.1");
    assert!(
        alpha.contains("## The Other Tasks (not yours)")
            && alpha.contains("- `beta` Write beta — "),
        "{alpha}"
    );
    let beta = env.agent_file("prompt.Write_beta.1");
    assert!(
        beta.contains(
            "- `alpha` Write alpha — in progress: another agent works on it now, beside you"
        ),
        "{beta}"
    );
    assert!(!beta.contains("- `beta`"), "{beta}");
    for id in ["Write_alpha", "Write_beta"] {
        assert!(
            !env.agent_file(&format!("prompt.{id}.1"))
                .contains("USE SQLITE")
        );
        let second = env.agent_file(&format!("prompt.{id}.2"));
        assert!(second.contains("USE SQLITE"), "{id}: {second}");
    }
    for id in ["alpha", "beta"] {
        assert!(
            stdout.contains(&format!(
                "[{id}] 📨 The hint added with --add-context goes into this iteration's prompt"
            )),
            "{stdout}"
        );
    }
    assert_eq!(env.git(&["status", "--porcelain"]), "");
}

#[test]
fn context_for_one_task_reaches_only_that_tasks_loop() {
    let (env, ralph) = two_steered_tasks();
    let unknown = env.run(&["--add-context", "hint", "--task", "gamma"]);
    unknown.assert_code(1);
    assert_eq!(
        unknown.stderr().trim().lines().count(),
        1,
        "{}",
        unknown.stderr()
    );
    assert!(
        unknown.stderr().contains("no task 'gamma'")
            && unknown.stderr().contains("its tasks: alpha, beta"),
        "{}",
        unknown.stderr()
    );
    assert!(!env.ralph_file("ralph-context.md").exists());
    // The task may come first: `--add-context` takes text that starts with `-`, but not `--task`.
    let added = env.run(&["--add-context", "--task", "alpha", "USE SQLITE"]);
    added.assert_code(0);
    assert!(
        added
            .stdout()
            .contains("Only task alpha's loop picks it up"),
        "{}",
        added.stdout()
    );
    let stdout = steered_run_ends(&env, ralph);
    let alpha = env.agent_file("prompt.Write_alpha.2");
    assert!(alpha.contains("USE SQLITE"), "{alpha}");
    assert!(alpha.contains("for task alpha"), "{alpha}");
    for n in [1, 2] {
        let beta = env.agent_file(&format!("prompt.Write_beta.{n}"));
        assert!(!beta.contains("USE SQLITE"), "{beta}");
    }
    assert!(stdout.contains("[alpha] 📨 The hint"), "{stdout}");
    assert!(!stdout.contains("[beta] 📨"), "{stdout}");
}

/// Waits for `$dir/go` on alpha's first call; every prompt is kept (`prompt.<id>.<n>`).
const HOLDS_ALPHA: &str = r#"
n=0
[ -f "$dir/calls.$id" ] && read -r n < "$dir/calls.$id"
n=$((n + 1))
echo "$n" > "$dir/calls.$id"
printf '%s' "$last" > "$dir/prompt.$id.$n"
if [ "$id" = Write_alpha ]; then
  touch "$dir/waiting.$id"
  i=0; while [ ! -f "$dir/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
fi
"#;

#[test]
fn a_hint_reaches_the_tasks_that_start_after_it_and_status_says_where_it_went() {
    use std::process::Stdio;
    use std::time::Duration;
    // Alpha runs alone (beta and gamma wait for it) and ends in the iteration the hint was
    // added in: the hint must reach beta and gamma, which start later, once each.
    let env = setup(
        "- [ ] Write alpha\n  - id: alpha\n- [ ] Write beta\n  - id: beta\n  - blocked_by: alpha\n\
         - [ ] Write gamma\n  - id: gamma\n  - blocked_by: alpha\n",
    );
    env.agent_script(None, HOLDS_ALPHA);
    let mut ralph = env
        .ralph()
        .args(["--pause", "0", "x", "--parallel", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let waiting = env.agent_dir().join("waiting.Write_alpha");
    crate::support::wait_for_file(&waiting, Duration::from_secs(30));
    env.run(&["--add-context", "HINT-FOR-ALL"]).assert_code(0);
    env.run(&["--add-context", "--task", "gamma", "HINT-FOR-GAMMA"])
        .assert_code(0);
    let status = env.run(&["--status"]).stdout();
    assert!(
        status.contains("HINT-FOR-ALL")
            && status.contains("→ for the next prompt of every task loop"),
        "{status}"
    );
    assert!(
        status.contains("→ for task gamma's next prompt"),
        "{status}"
    );
    fs::write(env.agent_dir().join("go"), "").unwrap();
    let output = crate::signals::wait_output(&mut ralph, Duration::from_secs(60));
    let said = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(!env.agent_file("prompt.Write_alpha.1").contains("HINT"));
    for id in ["beta", "gamma"] {
        let prompt = env.agent_file(&format!("prompt.Write_{id}.1"));
        assert_eq!(prompt.matches("HINT-FOR-ALL").count(), 1, "{id}: {prompt}");
        assert_eq!(
            prompt.contains("HINT-FOR-GAMMA"),
            id == "gamma",
            "{id}: {prompt}"
        );
    }
    // Every hint reached its prompts: nothing is left pending.
    assert!(!env.ralph_file("ralph-context.md").exists());
    assert!(!env.ralph_file("ralph-context-given.json").exists());
}

/// Work whose files hold a conflict block (an agent that committed markers, or a merge a kill
/// cut short) never lands: the merge is refused and sent back, and the base never holds them.
#[test]
fn work_with_conflict_markers_never_lands_on_the_base() {
    let env = setup("- [ ] Marked\n  - id: marked\n");
    env.agent_script(
        None,
        "printf '<<<<<<< HEAD\\nmine\\n=======\\ntheirs\\n>>>>>>> main\\n' > marked.txt\n",
    );
    let run = env.run_loop(&["Edit", "--parallel", "1", "--max-iterations", "2"]);
    run.assert_code(3);
    let journal = fs::read_to_string(env.ralph_file("events.jsonl")).unwrap();
    assert!(
        journal.contains("\"event\":\"merge_refused\"")
            && journal.contains("no conflict markers in the merged files"),
        "{journal}"
    );
    assert!(
        run.stderr().contains(
            "`no conflict markers in the merged files` fails on its work merged with main"
        ),
        "{}",
        run.stderr()
    );
    for commit in env
        .git(&["log", "--first-parent", "--format=%H", "main"])
        .lines()
    {
        let files = env.git(&["ls-tree", "--name-only", commit]);
        assert!(!files.contains("marked.txt"), "{commit} holds the markers");
    }
}

/// A `--worktree` loop stopped by Ctrl-C: started afresh it is refused, naming the command
/// that goes on with it; `--resume --worktree NAME --merge` goes on there and merges it. One
/// with no such worktree says so.
#[test]
fn a_stopped_worktree_loop_goes_on_with_resume_worktree_and_merges() {
    use std::time::Duration;
    let env = TestEnv::new();
    // Its first call waits to be stopped; the next completes.
    env.write_executable(
        "opencode",
        r#"#!/bin/sh
dir=${FAKE_AGENT_DIR:?}
n=$(cat "$dir/count" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$dir/count"
touch "$dir/started.$n"
if [ "$n" = 1 ]; then sleep 30; fi
echo done > done.txt
echo "<promise>COMPLETE</promise>"
"#,
    );
    let args = ["--pause", "0", "--worktree", "w", "--merge", "Do it"];
    let mut run = env.spawn_quiet(&args);
    crate::support::wait_for_file(&env.agent_dir().join("started.1"), Duration::from_secs(30));
    crate::support::interrupt(&run);
    let output = crate::signals::wait_output(&mut run, Duration::from_secs(30));
    assert_eq!(output.status.code(), Some(130));
    let again = env.run(&args);
    again.assert_code(1);
    assert!(
        again
            .stderr()
            .contains("ralph --resume --worktree w --merge")
            && again
                .stderr()
                .contains("cd .ralph/worktrees/w && ralph --reset"),
        "{}",
        again.stderr()
    );
    let resumed = env.run(&["--resume", "--worktree", "w", "--merge"]);
    resumed.assert_code(0);
    assert!(
        resumed.stdout().contains("[w] 🔀 Merged into main ("),
        "{}",
        resumed.stdout()
    );
    assert!(env.work().join("done.txt").exists());
    assert!(!env.work().join(".ralph/worktrees/w").exists());
    let none = env.run(&["--resume", "--worktree", "nope"]);
    none.assert_code(1);
    assert!(
        none.stderr()
            .contains("there is no --worktree nope loop to resume"),
        "{}",
        none.stderr()
    );
}
