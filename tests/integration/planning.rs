//! A spec and no task list: ralph plans first (one planning call), commits the plan, then runs it.

use std::fs;

use crate::fleet::PARALLEL_AGENT;
use crate::support::TestEnv;

/// The planning branch of the fake agent: a prompt that starts `# Plan the work` is a planning
/// call; its prompt is kept as `plan-prompt.N` and it answers with `$FAKE_AGENT_DIR/plan.N`.
pub(crate) const PLANNING: &str = r###"#!/bin/sh
dir=${FAKE_AGENT_DIR:?}
for last in "$@"; do :; done
# Claude Code is given its prompt right after -p.
[ "${0##*/}" = claude ] && last=$2
printf '%s' "$last" > "$dir/last-prompt"
case "$last" in
  "# Restate the spec"*)
    echo "## Goal"
    echo "REFINED: build the todo API"
    exit 0;;
  "# Plan the work"*)
    p=0; [ -f "$dir/plans" ] && read -r p < "$dir/plans"
    p=$((p + 1)); echo "$p" > "$dir/plans"
    printf '%s' "$last" > "$dir/plan-prompt.$p"
    echo "${0##*/}" > "$dir/planner"
    if [ -f "$dir/write-plan" ]; then
      # The plan goes to the file the prompt names; the answer only says so.
      cp "$dir/plan.$p" .ralph/plan.json; echo "The plan is in .ralph/plan.json."
    else
      echo "Here is the plan:"
      while IFS= read -r line || [ -n "$line" ]; do printf '%s\n' "$line"; done < "$dir/plan.$p"
    fi
    echo '{"type":"step_finish","part":{"tokens":{"input":100,"output":20,"cache":{"read":0,"write":0}},"cost":0.5}}'
    exit 0;;
esac
"###;

const SPEC: &str = "Build a todo API: a schema, the endpoints, and their docs.";

pub(crate) const PLAN: &str = r#"[
  {"id": "schema", "content": "Create the schema", "status": "pending", "activeForm": "Creating the schema", "blockedBy": []},
  {"id": "docs", "content": "Write the docs", "status": "pending", "activeForm": "Writing the docs", "blockedBy": []},
  {"id": "api", "content": "Build the endpoints", "status": "pending", "activeForm": "Building the endpoints", "blockedBy": ["schema", "docs"]}
]"#;

#[test]
fn plan_writes_and_shows_the_plan_and_commits_nothing() {
    let env = planning_env(&[PLAN, PLAN]);
    fs::write(env.work().join("SPEC.md"), SPEC).unwrap();
    let commits = env.commit_count();
    let run = env.run(&["--plan", "-f", "SPEC.md"]);
    run.assert_code(0);
    assert_shows_the_plan(&run.stdout());
    // The agent's raw answer is not printed before ralph's table (it is in the log).
    assert!(
        !run.stdout().contains("Here is the plan:"),
        "{}",
        run.stdout()
    );
    assert!(plan_prompt(&env, 1).contains(SPEC));
    assert_eq!(env.commit_count(), commits, "nothing committed");
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(list.matches("- [ ]").count(), 3, "{list}");
    // A list with tasks is not planned over.
    let again = env.run(&["--plan", SPEC]);
    again.assert_code(1);
    assert!(
        again.stderr().contains("has 3 tasks already"),
        "{}",
        again.stderr()
    );
    assert_eq!(planning_calls(&env), 1);
}

#[test]
fn plan_json_prints_the_plan_as_an_event_and_plan_agent_chooses_the_planner() {
    let env = planning_env(&[PLAN]);
    let tasks = &PARALLEL_AGENT["#!/bin/sh\n".len()..];
    env.write_executable("claude", &format!("{PLANNING}{tasks}"));
    let run = env.run(&["--plan", SPEC, "--json", "--plan-agent", "claude-code"]);
    run.assert_code(0);
    let event: serde_json::Value = run
        .stdout()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|event| event["event"] == "plan_created")
        .unwrap_or_else(|| panic!("no plan_created: {}", run.stdout()));
    assert_eq!(event["tasks"].as_array().map(Vec::len), Some(3));
    assert_eq!(event["tasks"][0]["content"], "Create the schema");
    let planner = fs::read_to_string(env.agent_dir().join("planner")).unwrap();
    assert_eq!(planner.trim(), "claude");
}

/// A repository whose agent plans with `plans` (answer N for planning call N) and then does
/// each task as a parallel test's agent does.
pub(crate) fn planning_env(plans: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    let tasks = &PARALLEL_AGENT["#!/bin/sh\n".len()..];
    env.write_executable("opencode", &format!("{PLANNING}{tasks}"));
    for (n, plan) in plans.iter().enumerate() {
        fs::write(env.agent_dir().join(format!("plan.{}", n + 1)), plan).unwrap();
    }
    env
}

/// The terminal shows [`PLAN`]: how many tasks, and each with what it waits for.
fn assert_shows_the_plan(stdout: &str) {
    assert!(stdout.contains("🗺️  Planned 3 tasks:"), "{stdout}");
    assert!(
        stdout.contains("   api  Build the endpoints (after schema, docs)"),
        "{stdout}"
    );
}

fn plan_prompt(env: &TestEnv, n: u32) -> String {
    fs::read_to_string(env.agent_dir().join(format!("plan-prompt.{n}"))).unwrap_or_default()
}

fn planning_calls(env: &TestEnv) -> u32 {
    let text = fs::read_to_string(env.agent_dir().join("plans")).unwrap_or_default();
    text.trim().parse().unwrap_or(0)
}

#[test]
fn a_spec_with_parallel_is_planned_committed_and_run_side_by_side() {
    let env = planning_env(&[PLAN]);
    // The schema and the docs each wait until both have started.
    let both = crate::parallel::barrier(2);
    env.agent_script(
        None,
        &format!("case \"$task\" in \"Create the schema\"|\"Write the docs\") {both} ;; esac"),
    );
    let run = env.run_loop(&[SPEC, "--parallel", "2", "--json"]);
    run.assert_code(0);
    assert_eq!(planning_calls(&env), 1);
    let prompt = plan_prompt(&env, 1);
    assert!(
        prompt.contains(SPEC) && prompt.contains("\"blockedBy\""),
        "{prompt}"
    );
    // The plan's commit comes before any task's work.
    let subjects = env.git(&["log", "--reverse", "--format=%s"]);
    let subjects: Vec<&str> = subjects.lines().collect();
    let plan_at = subjects.iter().position(|s| *s == "Ralph: plan — 3 tasks");
    let first_merge = subjects
        .iter()
        .position(|s| s.starts_with("Ralph: merge task"));
    assert!(plan_at.is_some() && plan_at < first_merge, "{subjects:?}");
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(list.matches("- [x]").count(), 3, "{list}");
    assert!(
        list.contains("  - id: api\n  - blocked_by: schema, docs\n"),
        "{list}"
    );
    // schema and docs ran side by side; api after both.
    let events = fs::read_to_string(env.agent_dir().join("events")).unwrap();
    let lines: Vec<&str> = events.lines().collect();
    assert!(
        lines[..2].iter().all(|l| l.starts_with("start")),
        "{events}"
    );
    assert_eq!(lines.last(), Some(&"end Build_the_endpoints"), "{events}");
    let created = run
        .stdout()
        .lines()
        .find(|line| line.contains("\"plan_created\""))
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .expect("a plan_created event");
    assert_eq!(created["tasks"][2]["id"], "api");
    assert_eq!(created["tasks"][2]["blockedBy"][1], "docs");
    // The planning call is in the history, its cost in the totals, its output in a log.
    let history = env.history();
    assert_eq!(history["calls"][0]["kind"], "plan");
    assert_eq!(history["calls"][0]["cost_usd"], 0.5);
    assert_eq!(history["calls"][0]["tokens"]["input"], 100);
    assert!(
        history["total_cost_usd"].as_f64().unwrap() >= 0.5,
        "{history}"
    );
    let log = env.run(&["--log", "plan"]);
    log.assert_code(0);
    assert!(
        log.stdout().contains("Here is the plan:"),
        "{}",
        log.stdout()
    );
}

#[test]
fn the_planning_calls_cost_counts_toward_max_cost() {
    let env = planning_env(&[PLAN]);
    let run = env.run_loop(&[SPEC, "--parallel", "2", "--max-cost", "0.4"]);
    run.assert_code(2);
    assert!(run.stdout().contains("max cost"), "{}", run.stdout());
    assert!(!env.agent_dir().join("events").exists(), "no task ran");
}

#[test]
fn a_spec_with_tasks_is_planned_then_run_by_one_loop_in_order() {
    let env = TestEnv::new();
    // Planning as the other tests; then, as an agent in tasks mode does, it marks the first
    // open task done (and says so), and says the whole is complete when none is left.
    let tasks_mode = r#"
list=.ralph/ralph-tasks.md
if grep -q '^- \[ \]' "$list"; then
  grep -m1 '^- \[ \]' "$list" | cut -c7- >> "$dir/order"
  sed -i '0,/^- \[ \]/s//- [x]/' "$list"
  echo "<promise>READY_FOR_NEXT_TASK</promise>"
else
  echo "<promise>COMPLETE</promise>"
fi
"#;
    env.write_executable("opencode", &format!("{PLANNING}{tasks_mode}"));
    fs::write(env.agent_dir().join("plan.1"), PLAN).unwrap();
    let run = env.run_loop(&[SPEC, "--tasks", "--max-iterations", "6"]);
    run.assert_code(0);
    assert_eq!(planning_calls(&env), 1);
    assert_shows_the_plan(&run.stdout());
    let order = fs::read_to_string(env.agent_dir().join("order")).unwrap();
    assert_eq!(
        order,
        "Create the schema\nWrite the docs\nBuild the endpoints\n"
    );
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(list.matches("- [x]").count(), 3, "{list}");
    let subjects = env.git(&["log", "--reverse", "--format=%s"]);
    let subjects: Vec<&str> = subjects.lines().collect();
    assert_eq!(subjects[1], "Ralph: plan — 3 tasks", "{subjects:?}");
}

#[test]
fn two_plans_with_a_cycle_end_the_run_naming_it() {
    let cycle = r#"[{"id": "a", "content": "A", "blockedBy": ["b"]}, {"id": "b", "content": "B", "blockedBy": ["a"]}]"#;
    let env = planning_env(&[cycle, cycle]);
    let run = env.run_loop(&[SPEC, "--tasks"]);
    run.assert_code(1);
    assert!(
        run.stderr()
            .contains("the tasks wait for each other in a cycle: a → b → a"),
        "{}",
        run.stderr()
    );
    assert!(env.ralph_file("plan-rejected.json").exists());
}

#[test]
fn a_plan_with_a_cycle_is_sent_back_once_with_the_cycle_named() {
    let cycle = r#"[{"id": "a", "content": "A", "blockedBy": ["b"]}, {"id": "b", "content": "B", "blockedBy": ["a"]}]"#;
    let fixed = r#"```json
[{"id": "a", "content": "Do A", "blockedBy": []}, {"id": "b", "content": "Do B", "blockedBy": ["a"]}]
```"#;
    let env = planning_env(&[cycle, fixed]);
    env.run(&["--plan", SPEC]).assert_code(0);
    assert_eq!(planning_calls(&env), 2);
    let again = plan_prompt(&env, 2);
    assert!(again.contains("in a cycle: a → b → a"), "{again}");
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert!(list.contains("- [ ] Do A\n"), "{list}");
    assert!(
        list.contains("- [ ] Do B\n  - id: b\n  - blocked_by: a\n"),
        "{list}"
    );
}

#[test]
fn two_refused_plans_end_the_run_with_nothing_committed() {
    let unknown = r#"[{"id": "a", "content": "A", "agent": "nonesuch"}]"#;
    let env = planning_env(&[unknown, unknown]);
    let commits = env.commit_count();
    let run = env.run_loop(&[SPEC, "--parallel", "2"]);
    run.assert_code(1);
    assert!(
        run.stderr()
            .contains("names the agent \"nonesuch\", which ralph does not know"),
        "{}",
        run.stderr()
    );
    assert!(
        run.stderr().contains("plan-rejected.json"),
        "{}",
        run.stderr()
    );
    assert_eq!(env.commit_count(), commits, "nothing committed");
    let kept = fs::read_to_string(env.ralph_file("plan-rejected.json")).unwrap();
    let kept: serde_json::Value = serde_json::from_str(&kept).unwrap();
    assert_eq!(kept["answers"].as_array().map(Vec::len), Some(2));
    assert!(kept["answers"][1].as_str().unwrap().contains("nonesuch"));
    assert_eq!(planning_calls(&env), 2);
}

#[test]
fn the_run_level_verify_gates_every_merge_and_sends_a_failing_one_back() {
    // Each task passes the check alone; merged together they fail it.
    let env = crate::fleet::setup("- [ ] A\n  - id: a\n- [ ] B\n  - id: b\n");
    fs::write(
        env.agent_dir().join("script"),
        "printf '%s\\n---\\n' \"$last\" >> \"$dir/prompts-$id\"\n",
    )
    .unwrap();
    let check = "test ! -f A.txt || test ! -f B.txt";
    let run = env.run_loop(&[
        "Build",
        "--parallel",
        "2",
        "--verify",
        check,
        "--max-iterations",
        "2",
    ]);
    run.assert_code(3);
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(list.matches("- [x]").count(), 1, "{list}");
    assert_eq!(list.matches("- [!]").count(), 1, "{list}");
    let failed = if list.contains("- [!] A") { "A" } else { "B" };
    assert!(
        run.stderr().contains(&format!(
            "🚧 Not merged: `{check}` fails on its work merged with main. Back to its agent with the output (1 of 2)."
        )),
        "{}",
        run.stderr()
    );
    assert_eq!(
        env.git(&["status", "--porcelain"]),
        "",
        "the base is left clean"
    );
    // Its agent was told why, with the command's output, in its next prompt.
    let prompts = fs::read_to_string(env.agent_dir().join(format!("prompts-{failed}"))).unwrap();
    assert!(prompts.contains("fails the run's check"), "{prompts}");
    // No commit of main ever held both files.
    for commit in env
        .git(&["log", "--first-parent", "--format=%H", "main"])
        .lines()
    {
        let files = env.git(&["ls-tree", "--name-only", commit]);
        assert!(
            !(files.contains("A.txt") && files.contains("B.txt")),
            "{commit} fails the gate: {files}"
        );
    }
    // Every check of the gate is in the history: whose merge, the command, its exit code and
    // the tree it ran on.
    let history = env.history();
    let gates = history["gates"].as_array().expect("the gate's checks");
    let passed = gates
        .iter()
        .find(|g| g["passed"] == true)
        .expect("a passing check");
    assert_eq!(passed["command"], check);
    assert_eq!(passed["exit_code"], 0);
    assert!(
        passed["tree"].as_str().is_some_and(|t| t.len() == 40),
        "{passed}"
    );
    // The failing task's check: its own, or, when both tasks were ready at once, the merge
    // train's (`a+b`), from which the bisection, the other passing alone, sent it back.
    let of_failed = |g: &&serde_json::Value| {
        (g["task"].as_str().unwrap_or_default().split('+')).any(|id| id == failed.to_lowercase())
    };
    let failing = gates
        .iter()
        .find(|g| g["passed"] == false && of_failed(g))
        .unwrap_or_else(|| panic!("a failing check of {failed}: {gates:?}"));
    assert_eq!(failing["command"], check);
    assert_the_refusal_is_seen(&env, failed, check);
}

/// A refused merge is an event, a line of the task's note, of `--status` and of the report;
/// the task's iterations go on counting after it (no number and no log used twice).
fn assert_the_refusal_is_seen(env: &crate::support::TestEnv, failed: &str, check: &str) {
    let id = failed.to_lowercase();
    let journal = fs::read_to_string(env.ralph_file("events.jsonl")).unwrap();
    let refused: Vec<serde_json::Value> = (journal.lines())
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["event"] == "merge_refused")
        .collect();
    assert!(!refused.is_empty(), "{journal}");
    assert_eq!(refused[0]["task"], id.as_str());
    assert_eq!(refused[0]["command"], check);
    assert_eq!(refused[0]["exit_code"], 1);
    assert_eq!(refused[0]["sent_back"], true);
    assert_eq!(refused[0]["tries"], 1);
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert!(
        list.contains(&format!(
            "  - note: merge refused: `{check}` failed on the work merged with main (exit 1); sent back to its agent (1 of 2)"
        )),
        "{list}"
    );
    let history = env.history();
    let records: Vec<&serde_json::Value> = (history["iterations"].as_array().unwrap().iter())
        .filter(|record| record["task_id"] == id.as_str())
        .collect();
    let numbers: Vec<u64> = records
        .iter()
        .map(|r| r["iteration"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (1..=numbers.len() as u64).collect();
    assert_eq!(
        numbers, expected,
        "numbers go on after the refusal: {history}"
    );
    let logs: std::collections::BTreeSet<&str> =
        records.iter().map(|r| r["log"].as_str().unwrap()).collect();
    assert_eq!(logs.len(), records.len(), "a log each: {history}");
    for log in &logs {
        assert!(env.ralph_file(log).exists(), "{log} is kept");
    }
    let refused_record = records
        .iter()
        .find(|r| r["merge_refused"].is_string())
        .unwrap_or_else(|| panic!("the refused iteration says so: {history}"));
    let which = format!("{id}/{}", refused_record["iteration"]);
    let status = env.run(&["--status"]).stdout();
    assert!(
        status.contains(&format!("⛔ {which}:")) && status.contains("merge refused: `"),
        "{status}"
    );
    let report = env.run(&["--report", "-"]).stdout();
    assert!(report.contains("merge refused: `"), "{report}");
    assert!(
        report.contains("<td>merge gate</td>"),
        "the gate's checks are in the report"
    );
}

#[test]
fn replan_keeps_the_done_tasks_shows_them_to_the_planner_and_replaces_the_others() {
    let new = r#"[{"id": "api", "content": "Build the API", "blockedBy": ["setup"]}]"#;
    let env = planning_env(&[new]);
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "# Tasks\n\n- [x] Set up\n  - id: setup\n- [ ] Old idea\n  - id: old\n- [!] Failed idea\n",
    )
    .unwrap();
    let run = env.run(&["--plan", "--replan", "Now build the API on it"]);
    run.assert_code(0);
    let prompt = plan_prompt(&env, 1);
    assert!(
        prompt.contains("Already done") && prompt.contains("- setup: Set up"),
        "{prompt}"
    );
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert!(list.contains("- [x] Set up\n  - id: setup\n"), "{list}");
    assert!(
        !list.contains("Old idea") && !list.contains("Failed idea"),
        "{list}"
    );
    assert!(
        list.contains("- [ ] Build the API\n  - id: api\n  - blocked_by: setup\n"),
        "{list}"
    );
}

#[test]
fn a_list_with_every_task_done_runs_as_before_and_points_to_replan() {
    let env = crate::fleet::setup("- [x] Done already\n  - id: done\n");
    let run = env.run_loop(&[SPEC, "--parallel", "2"]);
    run.assert_code(0);
    assert!(
        run.stdout().contains("every task of the list was done already; to plan a new spec over it, run again with --replan"),
        "{}",
        run.stdout()
    );
    assert!(
        !env.agent_dir().join("events").exists(),
        "no agent ran, none planned"
    );
}

#[test]
fn refine_yes_plans_from_the_restated_prompt_and_keeps_it() {
    let env = planning_env(&[PLAN]);
    let run = env.run(&["--plan", "--refine", "--yes", SPEC]);
    run.assert_code(0);
    let kept = fs::read_to_string(env.ralph_file("prompt.md")).unwrap();
    assert_eq!(kept, "## Goal\nREFINED: build the todo API");
    let prompt = plan_prompt(&env, 1);
    assert!(prompt.contains("REFINED: build the todo API"), "{prompt}");
    let history = env.history();
    assert_eq!(history["calls"][0]["kind"], "refine");
    assert_eq!(history["calls"][1]["kind"], "plan");
}

#[test]
fn refine_answered_n_on_a_terminal_keeps_the_original_prompt() {
    let env = planning_env(&[PLAN]);
    let Some(tmux) = crate::watch::Tmux::new(&env) else {
        return;
    };
    tmux.start_ralph("--plan --refine 'Build the todo API'", (120, 40));
    tmux.wait_for(&["REFINED: build the todo API", "Use this prompt? [Y/n/e]"]);
    tmux.run(&["send-keys", "-t", "watch", "n", "Enter"]);
    tmux.wait_for(&["Planned 3 tasks", "ralph exited 0"]);
    let kept = fs::read_to_string(env.ralph_file("prompt.md")).unwrap();
    assert_eq!(kept, "Build the todo API");
    let prompt = plan_prompt(&env, 1);
    assert!(prompt.contains("Build the todo API"), "{prompt}");
    assert!(!prompt.contains("REFINED"), "{prompt}");
}

#[test]
fn a_plan_the_agent_writes_to_its_file_is_used() {
    let env = planning_env(&[PLAN]);
    fs::write(env.agent_dir().join("write-plan"), "").unwrap();
    let run = env.run(&["--plan", SPEC]);
    run.assert_code(0);
    assert_shows_the_plan(&run.stdout());
    assert!(
        !env.ralph_file("plan.json").exists(),
        "the file is taken, then removed"
    );
}

#[test]
fn refine_without_a_terminal_takes_the_restated_prompt_for_every_loop() {
    let env = planning_env(&[PLAN]);
    // No --yes: stdin and stdout are not a terminal here.
    let run = env.run_loop(&[SPEC, "--refine", "--tasks", "--max-iterations", "1"]);
    run.assert_code(2);
    assert!(plan_prompt(&env, 1).contains("REFINED: build the todo API"));
    // The loop's own prompt is the restated one.
    let prompt = fs::read_to_string(env.agent_dir().join("last-prompt")).unwrap();
    assert!(prompt.contains("REFINED: build the todo API"), "{prompt}");
    assert!(!prompt.contains(SPEC), "{prompt}");
}

/// Audit 6: a spec run that would be refused (a dirty tree, a repository with no commit, a folder
/// that is no repository, an agent that is not there) is refused before the planning call: no
/// agent runs, nothing is committed, one line says why.
#[test]
fn every_check_that_refuses_the_run_comes_before_the_planning_call() {
    let dirty = planning_env(&[PLAN]);
    fs::write(dirty.work().join("README.md"), "local edit\n").unwrap();
    let commits = dirty.commit_count();
    refused_before_planning(
        &dirty,
        &[SPEC, "--parallel", "2"],
        "uncommitted changes (README.md)",
    );
    assert_eq!(dirty.commit_count(), commits, "nothing committed");

    let unborn = planning_env(&[PLAN]);
    fs::remove_dir_all(unborn.work().join(".git")).unwrap();
    unborn.git(&["init", "-q", "-b", "main"]);
    refused_before_planning(&unborn, &[SPEC, "--parallel", "2"], "has no commit yet");
    assert!(
        !unborn.try_git(&["rev-parse", "HEAD"]),
        "no commit was made"
    );

    let plain = planning_env(&[PLAN]);
    fs::remove_dir_all(plain.work().join(".git")).unwrap();
    refused_before_planning(&plain, &[SPEC, "--parallel", "2"], "not a git repository");

    let missing = planning_env(&[PLAN]);
    refused_before_planning(
        &missing,
        &[SPEC, "--parallel", "2", "--agent", "claude-code"],
        "",
    );
}

fn refused_before_planning(env: &TestEnv, args: &[&str], says: &str) {
    if args.contains(&"claude-code") {
        fs::remove_file(env.bin().join("claude")).unwrap();
    }
    let run = env.run_loop(args);
    run.assert_code(1);
    let stderr = run.stderr();
    assert!(stderr.contains(says), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert_eq!(planning_calls(env), 0, "no planning call: {stderr}");
    assert!(
        !env.ralph_file("ralph-tasks.md").exists(),
        "no plan was written"
    );
}

/// Audit 7: `--dry-run` with a spec and no task list says it would plan first, and shows the
/// planning prompt; it asks no agent and writes nothing.
#[test]
fn a_dry_run_with_a_spec_shows_the_planning_step_and_its_prompt() {
    let env = planning_env(&[PLAN]);
    let shapes: [&[&str]; 2] = [&["--parallel", "2"], &["--tasks", "--max-iterations", "3"]];
    for shape in shapes {
        let mut args = vec![SPEC, "--dry-run"];
        args.extend_from_slice(shape);
        let run = env.run(&args);
        run.assert_code(0);
        let said = format!("{}{}", run.stdout(), run.stderr());
        assert!(
            said.contains(
                "Would plan:   the task list is empty, so OpenCode is asked first for a task graph"
            ),
            "{shape:?}: {said}"
        );
        assert!(said.contains("Planning prompt:\n# Plan the work"), "{said}");
        assert!(said.contains(SPEC), "{said}");
        assert!(!said.contains("nothing to run"), "{said}");
        assert_eq!(planning_calls(&env), 0);
        assert!(!env.ralph_file("ralph-tasks.md").exists());
    }
}

/// The planner's answer is read in every output format, and from an agent with no JSON mode.
#[test]
fn the_plan_is_read_from_a_text_answer_too() {
    let env = planning_env(&[PLAN]);
    let run = env.run(&["--plan", SPEC, "--output-format", "text"]);
    run.assert_code(0);
    assert_shows_the_plan(&run.stdout());
    assert_eq!(planning_calls(&env), 1);
    // A CLI the user defines, which prints plain text (the prompt as its last argument).
    let custom = planning_env(&[PLAN]);
    let planner = fs::read_to_string(custom.bin().join("opencode")).unwrap();
    custom.write_executable("my-planner", &planner);
    fs::create_dir_all(custom.work().join(".ralph")).unwrap();
    fs::write(
        custom.ralph_file("config.toml"),
        "[agents.mine]\ncommand = \"my-planner\"\nargs = [\"{prompt}\"]\n",
    )
    .unwrap();
    let run = custom.run(&["--plan", SPEC, "--agent", "mine"]);
    run.assert_code(0);
    assert_shows_the_plan(&run.stdout());
    assert_eq!(planning_calls(&custom), 1);
}

/// Audit 12: after `--plan`, `--parallel N` alone runs the list with the spec it was planned
/// from (`.ralph/prompt.md`); with no plan made, no prompt is still an error.
#[test]
fn after_plan_the_list_runs_with_the_planned_spec_and_no_prompt_given() {
    let env = planning_env(&[PLAN]);
    fs::write(env.work().join("SPEC.md"), SPEC).unwrap();
    env.run(&["--plan", "-f", "SPEC.md"]).assert_code(0);
    assert_eq!(
        fs::read_to_string(env.ralph_file("prompt.md")).unwrap(),
        SPEC
    );
    env.git(&["add", "-A"]);
    env.git(&["commit", "-qm", "plan"]);
    let run = env.run_loop(&["--parallel", "2"]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(list.matches("- [x]").count(), 3, "{list}");
    let prompt = fs::read_to_string(env.agent_dir().join("last-prompt")).unwrap();
    assert!(
        prompt.contains(SPEC),
        "the tasks' prompt has the spec: {prompt}"
    );
    let fresh = planning_env(&[PLAN]);
    let refused = fresh.run(&["--parallel", "2"]);
    refused.assert_code(1);
    assert!(
        refused.stderr().contains("no prompt given"),
        "{}",
        refused.stderr()
    );
}
