//! What a task loop (one task of `--parallel`, or of a `--worker`) shows: one line per event,
//! prefixed with its task, and nothing that belongs to the run (boxes, summaries, `--resume`
//! advice). Also what a hook's failure at a loop's end says. The audit's defects 15 and 20.

use std::fs;
use std::time::Duration;

use crate::fleet::setup;
use crate::fleet::{finish, machine, machines, start_worker};
use crate::parallel::conflicting;
use crate::support::TestEnv;

/// The run's stdout and stderr together.
fn all_output(run: &crate::support::Run) -> String {
    format!("{}\n{}", run.stdout(), run.stderr())
}

/// A task loop that ends at its iteration limit, or by its agent's failure, is a failed task: the
/// coordinator says so, and nothing advises resuming a loop whose worktree is gone.
#[test]
fn a_task_loop_that_ends_without_its_promise_fails_its_task_without_resume_advice() {
    let env = setup(
        "- [ ] Hang forever\n  - id: hang\n  - max_iterations: 1\n\
         - [ ] Bad agent\n  - id: bad\n",
    );
    // `hang` works but never prints its promise; `bad` exits with an error having changed nothing.
    env.agent_script(
        None,
        "case \"$task\" in\n  Hang*) exit 0 ;;\n  Bad*) rm -f \"$id.txt\"; echo 'it broke' >&2; exit 1 ;;\nesac\n",
    );
    let run = env.run_loop(&["x", "--parallel", "2", "--max-failed-runs", "1"]);
    let text = all_output(&run);
    run.assert_code(3);
    for advice in [
        "State kept",
        "raise the limit",
        "ralph --resume --max-iterations",
        "continues at iteration",
        "Max iterations (1) reached",
        "Loop stopped.",
    ] {
        assert!(!text.contains(advice), "{advice}\n{text}");
    }
    for id in ["hang", "bad"] {
        let failed = format!("[{id}] ❌ Task failed: ");
        assert!(text.contains(&failed), "{failed}\n{text}");
        let resume = text
            .lines()
            .find(|line| line.starts_with(&format!("[{id}]")) && line.contains("--resume"));
        assert_eq!(resume, None, "{text}");
    }
    let tasks = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(tasks.matches("- [!]").count(), 2, "{tasks}");
}

/// `on_stop` and `on_complete` run once the loop has ended: their failure changes nothing, and
/// the warning does not claim the loop goes on.
#[test]
fn a_failing_end_hook_says_the_outcome_is_unchanged_not_that_the_loop_goes_on() {
    let env = TestEnv::new();
    let run = env.run_loop(&["x", "--max-iterations", "1", "--on-stop", "exit 7"]);
    let text = all_output(&run);
    run.assert_code(2);
    assert!(
        text.contains("The on_stop hook failed (exit code 7); the loop's outcome is unchanged"),
        "{text}"
    );
    assert!(!text.contains("the loop goes on"), "{text}");

    // The settings key, and `on_complete` after a loop that completed.
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.ralph_file("config.toml"), "on_complete = \"exit 7\"\n").unwrap();
    let run = env.run_loop_with(&["x"], |c| {
        c.env("FAKE_AGENT_COMPLETE_AT", "1");
    });
    let text = all_output(&run);
    run.assert_code(0);
    assert!(
        text.contains("The on_complete hook failed (exit code 7); the loop's outcome is unchanged"),
        "{text}"
    );
    assert!(!text.contains("the loop goes on"), "{text}");
}

/// The parallel agent's first call for a task ends without the promise, the second keeps it.
const PROMISE_ON_SECOND_CALL: &str =
    "if [ ! -f \"$dir/first.$id\" ]; then touch \"$dir/first.$id\"; echo 'not yet'; exit 0; fi\n";

#[test]
fn a_task_loop_prints_no_iteration_summary_and_no_promise_not_detected() {
    let env = setup("- [ ] One\n  - id: one\n");
    env.agent_script(None, PROMISE_ON_SECOND_CALL);
    let run = env.run_loop(&["x", "--parallel", "1"]);
    let text = all_output(&run);
    run.assert_code(0);
    for summary in ["Iteration Summary", "Completion promise:", "not detected"] {
        assert!(!text.contains(summary), "{summary}\n{text}");
    }
    assert!(
        text.contains("[one] ✅ Task done in 2 iterations"),
        "{text}"
    );
}

#[test]
fn the_iteration_that_keeps_the_tasks_promise_is_recorded_as_completion_detected() {
    let env = setup("- [ ] One\n  - id: one\n");
    env.agent_script(None, PROMISE_ON_SECOND_CALL);
    let run = env.run_loop(&[
        "x",
        "--parallel",
        "1",
        "--json",
        "--on-iteration",
        "cat >> \"$FAKE_AGENT_DIR/hooked.jsonl\"",
    ]);
    run.assert_code(0);
    let finished: Vec<serde_json::Value> = run
        .stdout()
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|event| event["event"] == "iteration_finished")
        .collect();
    let detected: Vec<(&serde_json::Value, &serde_json::Value, &serde_json::Value)> = finished
        .iter()
        .map(|e| (&e["task"], &e["iteration"], &e["completion_detected"]))
        .collect();
    assert_eq!(
        detected,
        [
            (&"one".into(), &1.into(), &false.into()),
            (&"one".into(), &2.into(), &true.into())
        ],
        "{}",
        run.stdout()
    );
    // The hook hears the same events.
    let hooked: Vec<bool> = env
        .agent_file("hooked.jsonl")
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .map(|event| event["completion_detected"] == true)
        .collect();
    assert_eq!(hooked, [false, true]);
}

#[test]
fn a_task_loops_hook_output_is_shown_without_verbose_and_names_its_task() {
    let env = setup("- [ ] One\n  - id: one\n");
    let run = env.run_loop(&[
        "x",
        "--parallel",
        "1",
        "--on-iteration",
        "echo hooked-$RALPH_TASK",
    ]);
    run.assert_code(0);
    let stdout = run.stdout();
    let line = stdout
        .lines()
        .find(|line| line.contains("hooked-"))
        .unwrap_or_else(|| panic!("no hook output\n{stdout}\n{}", run.stderr()));
    assert!(line.starts_with("[one] "), "{line}");
    assert!(line.ends_with("hooked-one"), "{line}");
}

/// The agent never resolves the conflict of the second merge: it leaves the markers and prints
/// its task's promise, which is refused by the conflict-marker check (no `--verify` is set).
#[test]
fn markers_left_after_a_conflict_refuse_the_tasks_promise_by_name() {
    let env = conflicting();
    let run = env.run_loop(&["Edit", "--parallel", "2", "--max-iterations", "3"]);
    let text = all_output(&run);
    run.assert_code(3);
    let refused: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("Completion refused"))
        .collect();
    assert!(!refused.is_empty(), "{text}");
    for line in &refused {
        let (id, rest) = line.split_once("] ").unwrap_or_else(|| panic!("{line}"));
        assert!(["[first", "[second"].contains(&id), "{line}");
        let iteration = rest
            .strip_prefix("⛔ Completion refused after iteration ")
            .and_then(|rest| rest.split_once(": "))
            .unwrap_or_else(|| panic!("{line}"));
        assert!(iteration.0.parse::<u32>().is_ok(), "{line}");
        assert_eq!(
            iteration.1, "`no conflict markers in shared.txt` failed.",
            "{line}"
        );
    }
    assert!(!text.contains("verification failed"), "{text}");
    let prompt = fs::read_dir(env.agent_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.to_string_lossy().contains("refused."))
        .map(|path| fs::read_to_string(path).unwrap())
        .unwrap_or_else(|| panic!("no prompt after the refusal\n{text}"));
    assert!(
        prompt.contains("you printed <promise>READY_FOR_NEXT_TASK</promise>, but"),
        "{prompt}"
    );
    assert!(
        !prompt.contains("<promise>COMPLETE</promise>, but"),
        "{prompt}"
    );
}

/// A worker's loop is not resumed with `ralph --resume`: after Ctrl+C it says to start the worker
/// again, and `--status` in its clone shows it while it runs.
#[test]
fn a_stopped_worker_points_to_ralph_worker_and_status_shows_it_running() {
    let env = machines("- [ ] Long\n  - id: long\n", &["m1"]);
    env.agent_script(None, "echo ready > \"$dir/ready\"; sleep 600\n");
    let worker = start_worker(&env, "m1", &[]);
    crate::support::wait_for_file(&env.agent_dir().join("ready"), Duration::from_secs(30));
    let status = env.run_with(&["--status"], |c| {
        c.current_dir(machine(&env, "m1"));
    });
    crate::support::interrupt(&worker);
    let (code, stdout, stderr) = finish(worker);
    assert_eq!(code, Some(130), "{stdout}\n{stderr}");
    let text = format!("{stdout}\n{stderr}");
    assert!(text.contains("ralph --worker"), "{text}");
    assert!(!text.contains("ralph --resume"), "{text}");
    status.assert_code(0);
    assert!(
        !status.stdout().contains("No active loop"),
        "{}",
        status.stdout()
    );
}
