//! The matrix: every run shape — a loop, `--tasks`, `--parallel 2`, two `--worker`s on a bare
//! remote, `--worktree NAME --merge` — × the agent's output format (JSON, text) × the sandbox
//! (none, bwrap where it works) × the start (a given task list, a spec planned first), each cell
//! checked for the same invariants: every task's work done once and merged once, nothing left
//! behind (worktrees, branches, claims, the integration worktree, held locks), no conflict marker
//! in the base, the history, the journal, `--status --json` and the report agreeing on
//! iterations, cost and tokens (the planning call included), and no secret readable inside the
//! sandbox. A cell that cannot run here says why and passes.
//!
//! Then the kill variant: `--parallel` and worker cells (with tasks whose merges conflict) killed
//! with SIGKILL at random moments and resumed, round after round, each checked for the same
//! invariants of the base. `RALPH_MATRIX_KILL_ROUNDS` sets the rounds (2 of each by default);
//! `RALPH_MATRIX_SEED` replays a failing round.

#![allow(dead_code, unreachable_pub)]

#[path = "../integration/support.rs"]
mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::{Rng, TestEnv, wait_for_file};

/// The secret in ralph's environment that no process inside the sandbox may see.
const SECRET: &str = "matrix-secret-7f3a91";

/// The fake agent of every cell (installed as `opencode`). It plans (`# Plan the work`), does a
/// task's work (its `<id>.txt`, a line of its own in `shared.txt`, which every task appends to,
/// so merges side by side conflict), resolves a conflict it is handed (keeping both sides), and
/// keeps the promise its loop expects. In JSON mode it reports tokens and cost. Inside a sandbox
/// it prints `LEAK` when any process it can see holds the secret. Every call is counted in
/// `$FAKE_AGENT_DIR/calls`.
const AGENT: &str = r###"#!/bin/sh
[ "$1" = --version ] && { echo "opencode 1.0.0"; exit 0; }
dir=${FAKE_AGENT_DIR:?}
json=; for arg in "$@"; do [ "$arg" = json ] && json=1; done
for last in "$@"; do :; done
echo $$ >> "$dir/pids"
if [ -n "$MATRIX_SANDBOXED" ]; then
  for environ in /proc/[0-9]*/environ; do
    if tr '\0' '\n' < "$environ" 2>/dev/null | grep -q matrix-secret-7f3a91; then echo "LEAK in $environ"; fi
  done
fi
usage() {
  if [ -n "$json" ]; then
    echo "{\"type\":\"step_finish\",\"part\":{\"tokens\":{\"input\":$1,\"output\":$2,\"cache\":{\"read\":0,\"write\":0}},\"cost\":$3}}"
  fi
}
case "$last" in
  "# Plan the work"*)
    echo plan >> "$dir/calls"
    echo "Here is the plan:"
    while IFS= read -r line || [ -n "$line" ]; do printf '%s\n' "$line"; done < "$dir/plan.json"
    usage 100 20 0.5
    exit 0;;
esac
case "$last" in
  *"CURRENT TASK: \""*) task=${last#*CURRENT TASK: \"}; task=${task%%\"*};;
  *"NEXT TASK: \""*) task=${last#*NEXT TASK: \"}; task=${task%%\"*};;
  *) task="Task single";;
esac
id=${task#Task }
touch "$dir/started"
case "$last" in
  *"Merge conflicts to resolve first"*)
    echo "resolve $id" >> "$dir/calls"
    for file in shared.txt .ralph/progress.md; do
      [ -f "$file" ] || continue
      # Rewritten in place (a sandbox keeps .ralph/ itself read-only).
      kept=$(mktemp)
      grep -v -e '^<<<<<<< ' -e '^=======$' -e '^>>>>>>> ' -e '^||||||| ' "$file" > "$kept"
      cat "$kept" > "$file"; rm -f "$kept"
    done;;
  *)
    echo "work $id" >> "$dir/calls"
    echo "$id" > "$id.txt"
    grep -qx "$id" shared.txt 2>/dev/null || echo "$id" >> shared.txt
    [ -f "$dir/sleep" ] && sleep "$(cat "$dir/sleep")";;
esac
usage 80 20 0.01
case "$last" in
  *"## The Goal of the Whole Task List"*) echo "<promise>READY_FOR_NEXT_TASK</promise>";;
  *"CURRENT TASK"*|*"NEXT TASK"*)
    marked=$(mktemp)
    sed "s/^- \[[ /]\] Task $id\$/- [x] Task $id/" .ralph/ralph-tasks.md > "$marked"
    cat "$marked" > .ralph/ralph-tasks.md; rm -f "$marked"
    if grep -q '^- \[[ /]\]' .ralph/ralph-tasks.md; then
      echo "<promise>READY_FOR_NEXT_TASK</promise>"
    else
      echo "<promise>COMPLETE</promise>"
    fi;;
  *) echo "<promise>COMPLETE</promise>";;
esac
"###;

const TASKS: [&str; 3] = ["alpha", "bravo", "charlie"];

/// The task list a cell starts from (charlie waits for alpha).
const LIST: &str = "# Tasks\n\n- [ ] Task alpha\n  - id: alpha\n- [ ] Task bravo\n  - id: bravo\n- [ ] Task charlie\n  - id: charlie\n  - blocked_by: alpha\n";

/// What the planner answers for a spec: the same three tasks.
const PLAN: &str = r#"[
  {"id": "alpha", "content": "Task alpha", "status": "pending", "activeForm": "A", "blockedBy": []},
  {"id": "bravo", "content": "Task bravo", "status": "pending", "activeForm": "B", "blockedBy": []},
  {"id": "charlie", "content": "Task charlie", "status": "pending", "activeForm": "C", "blockedBy": ["alpha"]}
]"#;

const SPEC: &str = "Build the three parts: alpha, bravo and charlie.";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Single,
    Tasks,
    Parallel,
    Workers,
    Worktree,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Json,
    Text,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sandbox {
    None,
    Bwrap,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    List,
    Planned,
}

#[derive(Clone, Copy, Debug)]
struct Cell {
    shape: Shape,
    format: Format,
    sandbox: Sandbox,
    start: Start,
}

/// Says why a cell does not run here (the test passes).
#[expect(
    clippy::print_stderr,
    reason = "the one line that explains a skipped cell"
)]
fn skipped(cell: Cell, why: &str) {
    eprintln!("skipped {cell:?}: {why}");
}

/// A repository with the agent, and the task list committed unless the cell plans.
fn setup(cell: Cell) -> TestEnv {
    let env = TestEnv::new();
    env.write_executable("opencode", AGENT);
    fs::write(env.agent_dir().join("plan.json"), PLAN).unwrap();
    fs::write(env.work().join("shared.txt"), "base\n").unwrap();
    if cell.start == Start::List && cell.shape != Shape::Single {
        fs::create_dir_all(env.work().join(".ralph")).unwrap();
        fs::write(env.ralph_file("ralph-tasks.md"), LIST).unwrap();
    }
    env.git(&["add", "-A"]);
    env.git(&["commit", "-q", "-m", "the project"]);
    env
}

/// The options every run of the cell takes: format, sandbox.
fn cell_args(env: &TestEnv, cell: Cell) -> Vec<String> {
    let mut args: Vec<String> = ["--pause", "0", "--max-iterations", "6"]
        .map(str::to_owned)
        .to_vec();
    if cell.format == Format::Text {
        args.extend(["--output-format".to_owned(), "text".to_owned()]);
    }
    if cell.sandbox == Sandbox::Bwrap {
        args.extend([
            "--sandbox".to_owned(),
            "bwrap".to_owned(),
            "--sandbox-mount".to_owned(),
            env.bin().to_string_lossy().into_owned(),
            "--sandbox-mount".to_owned(),
            format!("{}:rw", env.agent_dir().display()),
            "--sandbox-env".to_owned(),
            "FAKE_AGENT_DIR".to_owned(),
            "--sandbox-env".to_owned(),
            "MATRIX_SANDBOXED".to_owned(),
        ]);
    }
    args
}

/// The prompt words of the cell's run.
fn prompt(cell: Cell) -> Vec<String> {
    match (cell.shape, cell.start) {
        (Shape::Workers, Start::List) => Vec::new(),
        (_, Start::Planned) => vec![SPEC.to_owned()],
        _ => vec!["Build the parts".to_owned()],
    }
}

/// `ralph ARGS` in `dir` with the secret in its environment, its output captured.
fn ralph_in(env: &TestEnv, dir: &Path, args: &[String]) -> Command {
    let mut command = env.ralph();
    if args.iter().any(|arg| arg == "--sandbox") {
        command.env("MATRIX_SANDBOXED", "1");
    }
    command
        .current_dir(dir)
        .args(args)
        .env("GITHUB_TOKEN", SECRET)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("RALPH_WORKER_POLL_MS", "200")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Waits (90 s at most) for `child`: its exit code and what it said.
fn finish(mut child: Child) -> (Option<i32>, String) {
    let output = support::wait_output(&mut child, Duration::from_secs(90));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), said)
}

/// Where a cell's machines are: the work tree itself, or the workers' clones.
fn machines(env: &TestEnv, cell: Cell) -> Vec<PathBuf> {
    if cell.shape == Shape::Workers {
        vec![env.path().join("m1"), env.path().join("m2")]
    } else {
        vec![env.work()]
    }
}

fn remote(env: &TestEnv) -> String {
    env.path().join("remote.git").to_string_lossy().into_owned()
}

/// A bare repository of the work tree, and two clones of it as machines.
fn make_remote(env: &TestEnv) {
    let bare = remote(env);
    env.git(&["clone", "-q", "--bare", ".", &bare]);
    env.git(&["-C", &bare, "config", "receive.autoGc", "false"]);
    // A reflog of the remote's base, to check that no push rewrote it.
    env.git(&["-C", &bare, "config", "core.logAllRefUpdates", "always"]);
    for name in ["m1", "m2"] {
        env.git(&[
            "clone",
            "-q",
            &bare,
            &env.path().join(name).to_string_lossy(),
        ]);
    }
}

/// Runs the cell to its end; what every run said.
fn run_cell(env: &TestEnv, cell: Cell) -> String {
    let mut args = cell_args(env, cell);
    let words = prompt(cell);
    match cell.shape {
        Shape::Single => {}
        Shape::Tasks => args.push("--tasks".to_owned()),
        Shape::Parallel => args.extend(["--parallel".to_owned(), "2".to_owned()]),
        Shape::Worktree => {
            args.extend(["--worktree", "feat", "--merge", "--tasks"].map(str::to_owned))
        }
        Shape::Workers => {
            make_remote(env);
            args.extend([
                "--worker".to_owned(),
                "--claim-heartbeat".to_owned(),
                "200ms".to_owned(),
            ]);
            args.extend(words);
            let children: Vec<Child> = ["m1", "m2"]
                .iter()
                .map(|name| {
                    ralph_in(env, &env.path().join(name), &args)
                        .spawn()
                        .unwrap()
                })
                .collect();
            let mut said = String::new();
            for child in children {
                let (code, text) = finish(child);
                assert_eq!(code, Some(0), "{cell:?}: a worker ended {code:?}:\n{text}");
                said.push_str(&text);
            }
            return said;
        }
    }
    args.extend(words);
    let (code, said) = finish(ralph_in(env, &env.work(), &args).spawn().unwrap());
    assert_eq!(code, Some(0), "{cell:?}: the run ended {code:?}:\n{said}");
    said
}

/// Every line of the agent's calls log: `plan`, `work ID`, `resolve ID`.
fn calls(env: &TestEnv) -> Vec<String> {
    fs::read_to_string(env.agent_dir().join("calls"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `git ARGS` in `dir`, whatever its exit code.
fn git_raw(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// The tasks the cell works on (a single loop has one of its own).
fn task_ids(cell: Cell) -> Vec<&'static str> {
    if cell.shape == Shape::Single {
        vec!["single"]
    } else {
        TASKS.to_vec()
    }
}

/// The invariants of the base after a cell (or a kill round) ended: every task's work there once,
/// merged once, marked done, no conflict marker, nothing of ralph's left behind.
fn check_base(env: &TestEnv, cell: Cell, context: &str) {
    let base = if cell.shape == Shape::Workers {
        PathBuf::from(remote(env))
    } else {
        env.work()
    };
    let show = |path: &str| {
        let output = git_raw(&base, &["show", &format!("HEAD:{path}")]);
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let shared = show("shared.txt");
    for id in task_ids(cell) {
        assert_eq!(
            show(&format!("{id}.txt")).trim(),
            id,
            "{context}: {id}'s work is in the base"
        );
        assert_eq!(
            shared.lines().filter(|line| *line == id).count(),
            1,
            "{context}: {id}'s line is in shared.txt once:\n{shared}"
        );
    }
    check_subjects(&base, cell, context);
    if cell.shape != Shape::Single {
        let list = show(".ralph/ralph-tasks.md");
        for id in TASKS {
            assert!(
                list.contains(&format!("- [x] Task {id}")),
                "{context}: {id} done:\n{list}"
            );
        }
    }
    let markers = git_raw(
        &base,
        &[
            "grep",
            "-n",
            "-e",
            "^<<<<<<< ",
            "-e",
            "^>>>>>>> ",
            "-e",
            "^=======$",
            "HEAD",
        ],
    );
    assert!(
        markers.stdout.is_empty(),
        "{context}: no conflict marker in the base: {}",
        String::from_utf8_lossy(&markers.stdout)
    );
    check_nothing_left(env, &base, cell, context);
}

/// The base's history: each task merged once, the plan committed once, the worktree merged
/// once, and (on a remote) no value of the base ever rewritten.
fn check_subjects(base: &Path, cell: Cell, context: &str) {
    let subjects =
        String::from_utf8_lossy(&git_raw(base, &["log", "--format=%s"]).stdout).into_owned();
    if matches!(cell.shape, Shape::Parallel | Shape::Workers) {
        for id in TASKS {
            let merges = (subjects.lines())
                .filter(|subject| subject.starts_with(&format!("Ralph: merge task {id} ")))
                .count();
            assert_eq!(merges, 1, "{context}: {id} merged once:\n{subjects}");
        }
    }
    if cell.start == Start::Planned {
        let plans = (subjects.lines())
            .filter(|s| s.starts_with("Ralph: plan — "))
            .count();
        assert_eq!(plans, 1, "{context}: the plan committed once:\n{subjects}");
    }
    if cell.shape == Shape::Workers {
        // Every value the remote's base ever had is an ancestor of its last: nothing was
        // force-pushed over another worker's merge.
        let reflog = git_raw(base, &["reflog", "show", "--format=%H", "refs/heads/main"]);
        let shas = String::from_utf8_lossy(&reflog.stdout).into_owned();
        assert!(
            shas.lines().count() > 1,
            "{context}: the base moved: {shas}"
        );
        for sha in shas.lines() {
            let kept = git_raw(base, &["merge-base", "--is-ancestor", sha, "main"]);
            assert!(kept.status.success(), "{context}: {sha} was rewritten");
        }
    }
    if cell.shape == Shape::Worktree {
        let merges = (subjects.lines())
            .filter(|s| s.starts_with("Ralph: merge worktree feat"))
            .count();
        assert_eq!(
            merges, 1,
            "{context}: the worktree merged once:\n{subjects}"
        );
    }
}

/// Nothing left behind on any machine (worktrees, task branches, held locks) nor on the remote
/// (task branches, claims).
fn check_nothing_left(env: &TestEnv, base: &Path, cell: Cell, context: &str) {
    for machine in machines(env, cell) {
        let worktrees =
            String::from_utf8_lossy(&git_raw(&machine, &["worktree", "list"]).stdout).into_owned();
        assert_eq!(
            worktrees.lines().count(),
            1,
            "{context}: no worktree left:\n{worktrees}"
        );
        let branches =
            String::from_utf8_lossy(&git_raw(&machine, &["branch", "--list", "ralph/*"]).stdout)
                .into_owned();
        assert_eq!(branches.trim(), "", "{context}: no task branch left");
        let folder = machine.join(".ralph/worktrees");
        let left: Vec<String> = fs::read_dir(&folder)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            left.is_empty(),
            "{context}: .ralph/worktrees holds {left:?}"
        );
        // No lock is held: a command that takes the loop lock runs at once.
        let status = env
            .ralph()
            .current_dir(&machine)
            .args(["--status", "--json"])
            .output()
            .unwrap();
        assert!(status.status.success(), "{context}: --status");
    }
    if cell.shape == Shape::Workers {
        let left = String::from_utf8_lossy(
            &git_raw(base, &["for-each-ref", "refs/heads/ralph/", "refs/ralph/"]).stdout,
        )
        .into_owned();
        assert_eq!(
            left.trim(),
            "",
            "{context}: no task branch or claim left on the remote"
        );
    }
}

/// Iterations, tokens and cost as one machine's records tell them.
#[derive(Debug, PartialEq)]
struct Totals {
    iterations: u64,
    tokens: u64,
    /// In hundredths of a cent, to compare without rounding.
    cost: Option<i64>,
}

fn cents(cost: Option<f64>) -> Option<i64> {
    #[expect(clippy::cast_possible_truncation, reason = "test amounts are small")]
    cost.map(|usd| (usd * 10_000.0).round() as i64)
}

/// The tokens of a usage object, every kind counted.
fn usage(tokens: &serde_json::Value) -> u64 {
    ["input", "output", "cache_read", "cache_write"]
        .iter()
        .map(|key| tokens[*key].as_u64().unwrap_or(0))
        .sum::<u64>()
}

/// The report of `machine` says the history's iterations and cost.
fn check_report(env: &TestEnv, machine: &Path, totals: &Totals, context: &str) {
    let report = env
        .ralph()
        .current_dir(machine)
        .args(["--report", "-"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&report.stdout).into_owned();
    let item = |name: &str| {
        let start = report
            .find(&format!("<dt>{name}</dt><dd>"))
            .map(|at| at + name.len() + 13);
        start
            .and_then(|at| report[at..].split('<').next())
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(
        item("Iterations"),
        totals.iterations.to_string(),
        "{context}: the report's iterations"
    );
    // The report shows cost to the cent above a dollar, to a hundredth of a cent below.
    let shown = item("Cost");
    let shown_cost = cents(shown.trim_start_matches('$').parse::<f64>().ok());
    match totals.cost {
        Some(cost) if cost >= 10_000 => assert_eq!(
            shown_cost.map(|c| c / 100),
            Some(cost / 100),
            "{context}: the report's cost {shown}"
        ),
        cost => assert_eq!(shown_cost, cost, "{context}: the report's cost {shown}"),
    }
}

/// The journal's end event says the history's tokens and cost, and every iteration is in it.
fn check_journal_end(journal: &str, totals: &Totals, context: &str) {
    let end = (journal.lines().rev())
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|event| event["event"] == "run_ended" || event["event"] == "parallel_ended");
    let end = end.unwrap_or_else(|| panic!("{context}: the journal has the run's end:\n{journal}"));
    let tokens = if end["tokens"].is_object() {
        usage(&end["tokens"])
    } else {
        end["tokens"].as_u64().unwrap_or(0)
    };
    assert_eq!(
        tokens, totals.tokens,
        "{context}: the journal's end and the history, tokens"
    );
    assert_eq!(
        cents(end["cost_usd"].as_f64()),
        totals.cost,
        "{context}: the journal's end and the history, cost"
    );
    let finished = (journal.lines())
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["event"] == "iteration_finished")
        .count() as u64;
    assert!(
        finished >= totals.iterations,
        "{context}: every iteration is in the journal"
    );
}

/// The records of `machine` agree: the history, `--status --json`, the report and the journal's
/// end event (when the shape has one) say the same iterations, tokens and cost; the totals.
fn check_records(env: &TestEnv, machine: &Path, cell: Cell, context: &str) -> Totals {
    let read =
        |name: &str| fs::read_to_string(machine.join(".ralph").join(name)).unwrap_or_default();
    let history: serde_json::Value =
        serde_json::from_str(&read("ralph-history.json")).unwrap_or_default();
    let numbered: std::collections::BTreeSet<(String, u64)> = (history["iterations"].as_array())
        .into_iter()
        .flatten()
        .map(|record| {
            (
                record["task_id"].as_str().unwrap_or("").to_owned(),
                record["iteration"].as_u64().unwrap(),
            )
        })
        .collect();
    let totals = Totals {
        iterations: numbered.len() as u64,
        tokens: usage(&history["total_tokens"]),
        cost: cents(history["total_cost_usd"].as_f64()),
    };
    let status = env
        .ralph()
        .current_dir(machine)
        .args(["--status", "--json"])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let from_status = Totals {
        iterations: status["history"]["iterations"].as_u64().unwrap_or(0),
        tokens: usage(&status["history"]["total_tokens"]),
        cost: cents(status["history"]["total_cost_usd"].as_f64()),
    };
    assert_eq!(
        from_status, totals,
        "{context}: --status --json and the history"
    );
    check_report(env, machine, &totals, context);
    if matches!(cell.shape, Shape::Single | Shape::Tasks | Shape::Parallel) {
        check_journal_end(&read("events.jsonl"), &totals, context);
    }
    totals
}

/// One cell: run, then every invariant.
fn cell(shape: Shape, format: Format, sandbox: Sandbox, start: Start) {
    let cell = Cell {
        shape,
        format,
        sandbox,
        start,
    };
    if shape == Shape::Single && start == Start::Planned {
        return skipped(
            cell,
            "a loop on one prompt takes no task list, so it plans nothing",
        );
    }
    if sandbox == Sandbox::Bwrap && !support::bwrap_can_sandbox() {
        return skipped(
            cell,
            "bubblewrap is not installed or cannot make namespaces here (bash scripts/install-test-tools.sh)",
        );
    }
    let env = setup(cell);
    let said = run_cell(&env, cell);
    let context = format!("{cell:?}");
    assert!(
        !said.contains("interrupted iteration"),
        "{context}: no iteration was interrupted:\n{said}"
    );
    check_base(&env, cell, &context);
    // Every task's work was done once; a plan was asked for once when the cell plans.
    let calls = calls(&env);
    for id in task_ids(cell) {
        let done = calls
            .iter()
            .filter(|call| **call == format!("work {id}"))
            .count();
        assert_eq!(
            done, 1,
            "{context}: {id}'s work done once: {calls:?}\n{said}"
        );
    }
    let plans = calls.iter().filter(|call| *call == "plan").count();
    assert_eq!(
        plans,
        usize::from(start == Start::Planned),
        "{context}: planning calls: {calls:?}"
    );
    // The records agree, on each machine and in all.
    let mut iterations = 0;
    let mut cost = 0;
    for machine in machines(&env, cell) {
        let totals = check_records(
            &env,
            &machine,
            cell,
            &format!("{context} on {}", machine.display()),
        );
        iterations += totals.iterations;
        cost += totals.cost.unwrap_or(0);
    }
    let task_calls = calls.iter().filter(|call| *call != "plan").count() as u64;
    assert_eq!(
        iterations, task_calls,
        "{context}: an iteration for every task call: {calls:?}"
    );
    if format == Format::Json {
        let expected = task_calls as i64 * 100 + if start == Start::Planned { 5_000 } else { 0 };
        assert_eq!(
            cost, expected,
            "{context}: the cost of every call, the planning call's included"
        );
    }
    // Nothing the agent could see inside the sandbox held the secret.
    if sandbox == Sandbox::Bwrap {
        for machine in machines(&env, cell) {
            let logs = all_logs(&machine.join(".ralph/logs"));
            assert!(
                !logs.contains("LEAK"),
                "{context}: a secret was readable inside:\n{logs}"
            );
            assert!(!logs.is_empty(), "{context}: the agents' logs are there");
        }
    }
}

/// Every log under `folder`, one after the other.
fn all_logs(folder: &Path) -> String {
    let mut text = String::new();
    let Ok(entries) = fs::read_dir(folder) else {
        return text;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            text.push_str(&all_logs(&path));
        } else {
            text.push_str(&fs::read_to_string(&path).unwrap_or_default());
        }
    }
    text
}

macro_rules! cells {
    ($($name:ident: $shape:ident $format:ident $sandbox:ident $start:ident;)*) => {
        $(
            #[test]
            fn $name() {
                cell(Shape::$shape, Format::$format, Sandbox::$sandbox, Start::$start);
            }
        )*
    };
}

cells! {
    single_json_none_list: Single Json None List;
    single_json_none_planned: Single Json None Planned;
    single_text_none_list: Single Text None List;
    single_text_none_planned: Single Text None Planned;
    single_json_bwrap_list: Single Json Bwrap List;
    single_json_bwrap_planned: Single Json Bwrap Planned;
    single_text_bwrap_list: Single Text Bwrap List;
    single_text_bwrap_planned: Single Text Bwrap Planned;
    tasks_json_none_list: Tasks Json None List;
    tasks_json_none_planned: Tasks Json None Planned;
    tasks_text_none_list: Tasks Text None List;
    tasks_text_none_planned: Tasks Text None Planned;
    tasks_json_bwrap_list: Tasks Json Bwrap List;
    tasks_json_bwrap_planned: Tasks Json Bwrap Planned;
    tasks_text_bwrap_list: Tasks Text Bwrap List;
    tasks_text_bwrap_planned: Tasks Text Bwrap Planned;
    parallel_json_none_list: Parallel Json None List;
    parallel_json_none_planned: Parallel Json None Planned;
    parallel_text_none_list: Parallel Text None List;
    parallel_text_none_planned: Parallel Text None Planned;
    parallel_json_bwrap_list: Parallel Json Bwrap List;
    parallel_json_bwrap_planned: Parallel Json Bwrap Planned;
    parallel_text_bwrap_list: Parallel Text Bwrap List;
    parallel_text_bwrap_planned: Parallel Text Bwrap Planned;
    workers_json_none_list: Workers Json None List;
    workers_json_none_planned: Workers Json None Planned;
    workers_text_none_list: Workers Text None List;
    workers_text_none_planned: Workers Text None Planned;
    workers_json_bwrap_list: Workers Json Bwrap List;
    workers_json_bwrap_planned: Workers Json Bwrap Planned;
    workers_text_bwrap_list: Workers Text Bwrap List;
    workers_text_bwrap_planned: Workers Text Bwrap Planned;
    worktree_json_none_list: Worktree Json None List;
    worktree_json_none_planned: Worktree Json None Planned;
    worktree_text_none_list: Worktree Text None List;
    worktree_text_none_planned: Worktree Text None Planned;
    worktree_json_bwrap_list: Worktree Json Bwrap List;
    worktree_json_bwrap_planned: Worktree Json Bwrap Planned;
    worktree_text_bwrap_list: Worktree Text Bwrap List;
    worktree_text_bwrap_planned: Worktree Text Bwrap Planned;
}

// ── The kill variant ────────────────────────────────────────────────────────────────────────

/// Rounds of each kill test: `RALPH_MATRIX_KILL_ROUNDS` in all (half each), 2 of each by default.
fn kill_rounds() -> u64 {
    std::env::var("RALPH_MATRIX_KILL_ROUNDS")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
        .map_or(2, |n| n.div_ceil(2))
}

/// Kills `child` (SIGKILL) and reaps it.
fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Every agent that ran is gone (a killed ralph's guard ends its agents).
fn assert_agents_gone(env: &TestEnv, context: &str) {
    let pids = fs::read_to_string(env.agent_dir().join("pids")).unwrap_or_default();
    support::wait_until(
        Duration::from_secs(10),
        &format!("{context}: every agent gone"),
        || {
            pids.lines()
                .filter_map(|pid| pid.trim().parse::<i32>().ok())
                .all(|pid| !support::is_alive(pid))
        },
    );
}

/// A kill round's cell of `shape` (a given list or a spec planned first, as `rng` says), set up,
/// with agents that take 0.1 to 0.3 s.
fn kill_cell(shape: Shape, rng: &mut Rng) -> (Cell, TestEnv) {
    let start = if rng.below(2) == 0 {
        Start::List
    } else {
        Start::Planned
    };
    let cell = Cell {
        shape,
        format: Format::Json,
        sandbox: Sandbox::None,
        start,
    };
    let env = setup(cell);
    fs::write(
        env.agent_dir().join("sleep"),
        format!("0.{}", 1 + rng.below(3)),
    )
    .unwrap();
    (cell, env)
}

/// A `--parallel 2` run whose merges conflict, killed at random moments (once or twice) and then
/// resumed until it ends.
fn parallel_kill_round(seed: u64) {
    let mut rng = Rng(seed);
    let (cell, env) = kill_cell(Shape::Parallel, &mut rng);
    // Room for the iterations kills cut short and conflicts add: this round is about what the
    // base holds, not a limit.
    let mut args = cell_args(&env, cell);
    args.extend(["--max-iterations", "20", "--parallel", "2"].map(str::to_owned));
    args.extend(prompt(cell));
    let quiet = |command: &mut Command| {
        command.stdout(Stdio::null()).stderr(Stdio::null());
    };
    let mut kills = 1 + rng.below(2);
    let mut first = true;
    let context = format!("seed {seed} ({cell:?})");
    for attempt in 0..8 {
        let again: Vec<String> = if first || !env.ralph_file("ralph-loop.state.json").exists() {
            args.clone()
        } else {
            vec!["--resume".to_owned(), "--pause".to_owned(), "0".to_owned()]
        };
        first = false;
        let mut command = ralph_in(&env, &env.work(), &again);
        if kills > 0 {
            quiet(&mut command);
        }
        let mut run = command.spawn().unwrap();
        if kills > 0 {
            kills -= 1;
            let _ = fs::remove_file(env.agent_dir().join("started"));
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while !env.agent_dir().join("started").exists() && std::time::Instant::now() < deadline
            {
                if run.try_wait().unwrap().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(rng.below(1200)));
            kill(run);
            continue;
        }
        let output = support::wait_output(&mut run, Duration::from_secs(90));
        assert_eq!(
            output.status.code(),
            Some(0),
            "{context}: attempt {attempt} ended {}:\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        break;
    }
    check_base(&env, cell, &context);
    assert_agents_gone(&env, &context);
}

/// Two workers whose merges conflict; one killed at a random moment and started again (waiting
/// for the claim it left to go stale).
fn worker_kill_round(seed: u64) {
    let mut rng = Rng(seed);
    let (cell, env) = kill_cell(Shape::Workers, &mut rng);
    make_remote(&env);
    let mut args = cell_args(&env, cell);
    args.extend(
        [
            "--max-iterations",
            "20",
            "--worker",
            "--claim-heartbeat",
            "200ms",
            "--claim-ttl",
            "1s",
        ]
        .map(str::to_owned),
    );
    args.extend(prompt(cell));
    let start = |name: &str, args: &[String]| {
        let mut command = ralph_in(&env, &env.path().join(name), args);
        command.stdout(Stdio::null());
        command.spawn().unwrap()
    };
    let m1 = start("m1", &args);
    let m2 = start("m2", &args);
    wait_for_file(&env.agent_dir().join("started"), Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(rng.below(1500)));
    kill(m1);
    let mut waiting = args.clone();
    waiting.push("--wait".to_owned());
    let again = start("m1", &waiting);
    let context = format!("seed {seed} ({cell:?})");
    for (name, mut child) in [("m2", m2), ("m1", again)] {
        let output = support::wait_output(&mut child, Duration::from_secs(90));
        assert_eq!(
            output.status.code(),
            Some(0),
            "{context}: {name} ended {}:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    check_base(&env, cell, &context);
    assert_agents_gone(&env, &context);
}

#[test]
fn parallel_cells_killed_at_random_moments_resume_to_a_clean_base() {
    for seed in support::round_seeds("RALPH_MATRIX_SEED", kill_rounds(), 0) {
        parallel_kill_round(seed);
    }
}

#[test]
fn worker_cells_killed_at_random_moments_finish_every_task_once() {
    for seed in support::round_seeds("RALPH_MATRIX_SEED", kill_rounds(), 0x9e37_79b9_7f4a_7c15) {
        worker_kill_round(seed);
    }
}
