//! A `--parallel` run seen and steered like a single loop: its iterations in the base's history
//! (`--status`, `--report`, `--log`), its end line's totals and the tasks that never ran.

use std::fs;

use crate::fleet::setup;

/// Each task takes two iterations: the first leaves a mark in its worktree and stops short of
/// the task's promise, the second keeps it.
const TWO_PASSES: &str = r#"
if [ ! -f ".pass_$id" ]; then
  echo "first pass of $id" > ".pass_$id"
  echo "first pass of $id"
  exit 0
fi
echo "second pass of $id"
"#;

#[test]
fn a_finished_parallel_run_shows_every_task_in_status_report_and_log() {
    let env =
        setup("- [ ] Alpha\n  - id: alpha\n- [ ] Beta\n  - id: beta\n- [ ] Gamma\n  - id: gamma\n");
    env.agent_script(None, TWO_PASSES);
    env.run_loop(&["Build", "--tasks", "--parallel", "3"])
        .assert_code(0);

    let status = env.run(&["--status"]);
    status.assert_code(0);
    let out = status.stdout();
    assert!(out.contains("TASK LOOPS (3)"), "{out}");
    for id in ["alpha", "beta", "gamma"] {
        let row = out
            .lines()
            .find(|line| line.trim_start().starts_with(id))
            .unwrap_or_else(|| panic!("no row for {id}: {out}"));
        assert!(
            row.contains("done") && row.contains("2 iterations"),
            "{row}"
        );
        assert!(row.contains("last iteration 2"), "{row}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&env.run(&["--status", "--json"]).stdout()).unwrap();
    assert_eq!(json["history"]["iterations"], 6, "{json}");
    let workers = json["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 3, "{json}");
    assert!(
        workers
            .iter()
            .all(|w| w["iterations"] == 2 && w["state"] == "done")
    );

    env.run(&["--report"]).assert_code(0);
    let html = fs::read_to_string(env.ralph_file("report.html")).unwrap();
    assert!(
        html.contains("6 recorded"),
        "the report counts every task's iterations"
    );

    let last = env.run(&["--log"]);
    last.assert_code(0);
    assert!(
        last.stdout().contains("second pass of"),
        "{}",
        last.stdout()
    );
    let alpha = env.run(&["--log", "alpha"]);
    alpha.assert_code(0);
    assert!(
        alpha.stdout().contains("second pass of Alpha"),
        "{}",
        alpha.stdout()
    );
    let first = env.run(&["--log", "beta/1"]);
    first.assert_code(0);
    assert!(
        first.stdout().contains("first pass of Beta"),
        "{}",
        first.stdout()
    );
    let missing = env.run(&["--log", "delta"]);
    missing.assert_code(1);
    assert!(
        missing.stderr().contains("alpha, beta, gamma")
            || missing.stderr().contains("tasks with logs"),
        "{}",
        missing.stderr()
    );
}

#[test]
fn the_end_line_says_why_tasks_never_ran_and_counts_failed_ones() {
    let env = setup(
        "- [ ] A\n  - id: a\n  - blocked_by: b\n- [ ] B\n  - id: b\n  - blocked_by: a\n\
         - [ ] C\n  - id: c\n  - blocked_by: zzz\n- [!] D\n  - id: d\n- [ ] E\n  - id: e\n",
    );
    let run = env.run_loop(&["Build", "--tasks", "--parallel", "2"]);
    run.assert_code(3);
    let out = run.stdout();
    let end = out
        .lines()
        .find(|line| line.starts_with("Parallel run ended:"))
        .unwrap_or_else(|| panic!("no end line: {out}"));
    assert!(
        end.contains("1 task done, 1 failed, 3 not started"),
        "{end}"
    );
    assert!(end.contains("1 iteration"), "{end}");
    assert!(out.contains("a never ran: waits for b"), "{out}");
    assert!(
        out.contains("c never ran: waits for zzz (unknown id)"),
        "{out}"
    );
}

#[test]
fn a_parallel_run_without_tasks_whose_agent_gives_no_plan_commits_nothing() {
    let env = setup("");
    fs::remove_file(env.ralph_file("ralph-tasks.md")).unwrap();
    let commits = env.commit_count();
    // The run plans first; this agent answers with no plan, twice.
    let run = env.run_loop(&["Build", "--parallel", "2"]);
    run.assert_code(1);
    assert!(run.stderr().contains("refused twice"), "{}", run.stderr());
    assert!(run.stderr().contains("--add-task"), "{}", run.stderr());
    assert_eq!(env.commit_count(), commits, "nothing committed");
    fs::write(env.ralph_file("ralph-tasks.md"), "# Tasks\n").unwrap();
    env.run_loop(&["Build", "--parallel", "2"]).assert_code(1);
    assert_eq!(env.commit_count(), commits, "nothing committed");
}

#[test]
fn a_task_loop_keeps_its_tasks_promise_in_an_agents_json_output_as_in_text() {
    let env = crate::support::TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.ralph_file("ralph-tasks.md"), "- [ ] One\n  - id: one\n").unwrap();
    env.agent_script(
        None,
        &crate::support::claude_events("Wrote it.\n<promise>READY_FOR_NEXT_TASK</promise>"),
    );
    let run = env.run_loop(&[
        "Build",
        "--agent",
        "claude-code",
        "--parallel",
        "1",
        "--json",
    ]);
    run.assert_code(0);
    let events: Vec<serde_json::Value> = run
        .stdout()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let finished: Vec<&serde_json::Value> = events
        .iter()
        .filter(|event| event["event"] == "iteration_finished")
        .collect();
    assert_eq!(
        finished.len(),
        1,
        "the promise was kept in the first iteration"
    );
    assert_eq!(finished[0]["completion_detected"], true);
    assert!(events.iter().any(|event| event["event"] == "task_merged"));
    assert!(
        fs::read_to_string(env.ralph_file("ralph-tasks.md"))
            .unwrap()
            .contains("- [x] One")
    );
}

/// Runs `--parallel 1` until the agent of "Write tests" has started, then stops it with Ctrl+C.
fn interrupt_during_write_tests(env: &crate::support::TestEnv) {
    let started = env.agent_dir().join("started");
    env.agent_script(
        None,
        &format!(
            "if [ \"$task\" = 'Write tests' ] && [ ! -f '{0}' ]; then touch '{0}'; i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done; fi",
            started.display()
        ),
    );
    let mut run = env.spawn_quiet(&["Build", "--tasks", "--parallel", "1", "--pause", "0"]);
    crate::support::wait_for_file(&started, std::time::Duration::from_secs(20));
    crate::support::interrupt(&run);
    let ended = crate::support::wait_output(&mut run, std::time::Duration::from_secs(20));
    assert_eq!(ended.status.code(), Some(130));
}

#[test]
fn a_resumed_run_sets_aside_work_made_for_a_reworded_task_and_never_merges_it() {
    let env = setup("- [ ] Write tests\n- [ ] Write tests!\n");
    interrupt_during_write_tests(&env);
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert!(
        list.contains("  - id: write-tests\n") && list.contains("  - id: write-tests-2\n"),
        "ids are written down: {list}"
    );
    // The run's end marked no task in progress and committed the list.
    assert!(list.contains("- [ ] Write tests\n"), "{list}");
    assert_eq!(
        env.git(&["status", "--porcelain"]),
        "",
        "the checkout is left clean"
    );
    // The user rewords the interrupted task (its id stays).
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        list.replace("[ ] Write tests\n", "[ ] Write benchmarks\n"),
    )
    .unwrap();
    env.git(&["commit", "-qam", "reword"]);
    let resumed = env.run(&["--resume", "--pause", "0"]);
    resumed.assert_code(0);
    assert!(
        resumed.stderr().contains("was made for \"Write tests\""),
        "{}",
        resumed.stderr()
    );
    assert!(
        env.work().join("Write_benchmarks.txt").exists(),
        "the reworded task's own work is merged"
    );
    assert!(
        !env.work().join("Write_tests.txt").exists(),
        "work made for the old text is not merged"
    );
    assert!(
        env.git(&["branch", "--list", "ralph-kept/*"])
            .contains("ralph-kept/write-tests-"),
        "it is kept on its own branch"
    );
}

#[test]
fn a_resumed_run_after_a_task_was_removed_gives_its_work_to_no_other_task() {
    let env = setup("- [ ] Write tests\n- [ ] Write tests!\n");
    interrupt_during_write_tests(&env);
    // The user removes the interrupted task.
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    let kept: String = list.replace("- [ ] Write tests\n  - id: write-tests\n", "");
    assert_ne!(kept, list, "{list}");
    fs::write(env.ralph_file("ralph-tasks.md"), kept).unwrap();
    env.git(&["commit", "-qam", "remove"]);
    env.run(&["--resume", "--pause", "0"]).assert_code(0);
    let merged = fs::read_to_string(env.work().join("Write_tests!.txt")).unwrap();
    assert_eq!(
        merged.trim(),
        "Write tests!",
        "the other task did its own work"
    );
    assert!(
        !env.work().join("Write_tests.txt").exists(),
        "the removed task's work is not merged"
    );
    let subjects = env.git(&["log", "--format=%s"]);
    assert!(
        subjects.contains("Ralph: merge task write-tests-2 — Write tests!"),
        "{subjects}"
    );
    assert!(
        !subjects.contains("Ralph: merge task write-tests —"),
        "{subjects}"
    );
}

#[test]
fn a_merge_blocked_by_the_users_own_edit_waits_for_it_and_then_goes_on() {
    let env = setup("- [ ] Touch\n  - id: touch\n");
    fs::write(env.work().join("shared.txt"), "base\n").unwrap();
    env.git(&["add", "shared.txt"]);
    env.git(&["commit", "-qm", "shared"]);
    let go = env.path().join("go");
    let started = env.agent_dir().join("started");
    env.agent_script(
        None,
        &format!(
            "echo task > shared.txt; touch '{}'; i=0; while [ ! -f '{}' ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done",
            started.display(),
            go.display()
        ),
    );
    let out = env.path().join("run.out");
    let mut run = env
        .ralph()
        .args(["Build", "--tasks", "--parallel", "1", "--pause", "0"])
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(&out).unwrap())
        .spawn()
        .unwrap();
    crate::support::wait_for_file(&started, std::time::Duration::from_secs(20));
    // The user edits the same file in the base while the task runs.
    fs::write(env.work().join("shared.txt"), "mine\n").unwrap();
    fs::write(&go, "").unwrap();
    crate::support::wait_for_text(&out, "its merge waits");
    let said = fs::read_to_string(&out).unwrap();
    assert!(said.contains("uncommitted changes to shared.txt"), "{said}");
    assert!(
        fs::read_to_string(env.ralph_file("ralph-tasks.md"))
            .unwrap()
            .contains("[/] Touch"),
        "not failed"
    );
    // The user puts their edit away: the merge goes on by itself.
    env.git(&["checkout", "--", "shared.txt"]);
    let ended = crate::support::wait_output(&mut run, std::time::Duration::from_secs(20));
    assert_eq!(ended.status.code(), Some(0));
    assert_eq!(
        fs::read_to_string(env.work().join("shared.txt")).unwrap(),
        "task\n"
    );
    assert!(
        fs::read_to_string(env.ralph_file("ralph-tasks.md"))
            .unwrap()
            .contains("[x] Touch")
    );
}

/// `env`'s repository with a submodule `lib` (one file, `lib.txt`), committed.
fn with_submodule(env: &crate::support::TestEnv) {
    let lib = env.path().join("lib");
    fs::create_dir_all(&lib).unwrap();
    let git = |dir: &std::path::Path, args: &[&str]| {
        let done = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@e",
                "-c",
                "protocol.file.allow=always",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            done.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
    };
    git(&lib, &["init", "-q", "-b", "main"]);
    fs::write(lib.join("lib.txt"), "library\n").unwrap();
    git(&lib, &["add", "."]);
    git(&lib, &["commit", "-qm", "lib"]);
    git(
        &env.work(),
        &["submodule", "add", "-q", &lib.display().to_string(), "lib"],
    );
    git(&env.work(), &["commit", "-qm", "submodule"]);
}

#[test]
fn a_task_worktree_has_the_bases_submodules_checked_out() {
    let env = setup("- [ ] Build\n  - id: build\n");
    with_submodule(&env);
    let seen = env.path().join("seen");
    env.agent_script(None, &format!("ls lib > '{}'", seen.display()));
    env.run_loop(&["Build", "--tasks", "--parallel", "1"])
        .assert_code(0);
    assert_eq!(
        fs::read_to_string(&seen).unwrap().trim(),
        "lib.txt",
        "the submodule is checked out in the task's worktree"
    );
}

#[test]
fn reset_after_an_interrupted_run_sets_its_work_aside_so_a_new_run_starts_afresh() {
    let env = setup("- [ ] Write tests\n- [ ] Write tests!\n");
    interrupt_during_write_tests(&env);
    // Branches of the names the next seconds' set-aside would take (work set aside before,
    // within the same second): they are kept as they are, and the work goes beside them.
    let head = env.git(&["rev-parse", "HEAD"]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let taken: Vec<String> = (now - 1..now + 30)
        .map(|at| {
            let stamp = std::process::Command::new("date")
                .args(["-u", "-d", &format!("@{at}"), "+%Y%m%d%H%M%S"])
                .output()
                .unwrap();
            let name = format!(
                "ralph-kept/write-tests-reset-{}",
                String::from_utf8_lossy(&stamp.stdout).trim()
            );
            env.git(&["branch", &name, head.trim()]);
            name
        })
        .collect();
    let reset = env.run(&["--reset"]);
    reset.assert_code(0);
    let said = reset.stderr();
    let kept = said
        .split("its work is kept on branch ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default()
        .to_owned();
    assert!(
        kept.starts_with("ralph-kept/write-tests-reset-") && kept.ends_with("-2"),
        "{said}"
    );
    for name in &taken {
        assert_eq!(env.git(&["rev-parse", name]), head, "{name} kept as it was");
    }
    assert_ne!(
        env.git(&["rev-parse", &kept]),
        head,
        "{kept} holds the work"
    );
    assert_eq!(
        env.git(&["branch", "--list", "ralph/*"]).trim(),
        "",
        "no task branch is taken up again"
    );
    assert!(!env.ralph_file("worktrees/write-tests").exists());
    // A new run does the task afresh: the old, uncommitted work is not merged.
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [ ] Write tests\n  - id: write-tests\n",
    )
    .unwrap();
    env.git(&["commit", "-qam", "again"]);
    env.agent_script(None, "");
    env.run_loop(&["Build", "--tasks", "--parallel", "1"])
        .assert_code(0);
    let subjects = env.git(&["log", "--format=%s", "-3"]);
    assert!(
        subjects.contains("Ralph: merge task write-tests — Write tests"),
        "{subjects}"
    );
}

#[test]
fn a_task_whose_agent_changed_a_submodule_is_not_merged_and_keeps_its_worktree() {
    let env = setup("- [ ] Patch\n  - id: patch\n- [ ] Docs\n  - id: docs\n");
    with_submodule(&env);
    env.agent_script(
        None,
        "if [ \"$task\" = Patch ]; then echo patched >> lib/lib.txt; fi",
    );
    let run = env.run_loop(&["Build", "--tasks", "--parallel", "2"]);
    run.assert_code(3);
    assert!(
        run.stderr().contains("its agent changed the submodule lib"),
        "{}",
        run.stderr()
    );
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert!(
        list.contains("- [!] Patch") && list.contains("- [x] Docs"),
        "{list}"
    );
    let kept = env.ralph_file("worktrees/patch/lib/lib.txt");
    assert!(
        fs::read_to_string(kept).unwrap().contains("patched"),
        "the change is kept"
    );
}

#[test]
fn a_kept_branch_of_a_failed_task_is_not_taken_up_by_the_task_reworded() {
    let env = setup("- [ ] Login\n  - id: login\n  - max_iterations: 1\n");
    // The first agent does some work but never keeps the promise: the task fails, its branch kept.
    env.agent_script(None, "exit 0");
    env.run_loop(&["Build", "--tasks", "--parallel", "1"])
        .assert_code(3);
    assert!(
        env.git(&["branch", "--list", "ralph/login"])
            .contains("ralph/login")
    );
    // The user rewords the task and sets it to do again.
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [ ] Sign in\n  - id: login\n",
    )
    .unwrap();
    env.git(&["commit", "-qam", "reword"]);
    env.agent_script(None, "");
    let run = env.run_loop(&["Build", "--tasks", "--parallel", "1"]);
    run.assert_code(0);
    assert!(
        run.stderr()
            .contains("made for \"another text of the task\""),
        "{}",
        run.stderr()
    );
    assert!(
        env.work().join("Sign_in.txt").exists(),
        "the task's own work is merged"
    );
    assert!(
        !env.work().join("Login.txt").exists(),
        "work made for the old text is not merged"
    );
    assert!(
        env.git(&["branch", "--list", "ralph-kept/*"])
            .contains("ralph-kept/login-")
    );
}

/// Two tasks whose `touches` overlap never run at the same time; a third runs beside them.
/// A run of the tasks `api` and `users`, whose `touches` overlap, and `docs`, with `args`; each
/// agent writes its start and end to `events`.
fn touching_tasks(args: &[&str]) -> (crate::support::TestEnv, crate::support::Run) {
    let env = crate::support::TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [ ] The API\n  - id: api\n  - touches: src/api/**\n- [ ] The users endpoint\n  - id: users\n  - touches: src/api/users.rs\n- [ ] The docs\n  - id: docs\n  - touches: docs/\n",
    )
    .unwrap();
    env.agent_script(
        None,
        r#"id=${PWD##*/worktrees/}; id=${id%%/*}
echo "start $id" >> "$dir/events"; sleep 0.4; echo "$id" > "$id.txt"; echo "end $id" >> "$dir/events"
echo '<promise>READY_FOR_NEXT_TASK</promise>'
"#,
    );
    let run = env.run_loop(&[&["Build", "--parallel", "3"], args].concat());
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    (env, run)
}

/// Whether the tasks of [`touching_tasks`] ran as they should: `api` and `users` apart, `docs`
/// beside one of them.
fn assert_touching_tasks_kept_apart(env: &crate::support::TestEnv) {
    let events = fs::read_to_string(env.agent_dir().join("events")).unwrap();
    let at = |what: &str| {
        events
            .lines()
            .position(|line| line == what)
            .unwrap_or_else(|| panic!("{what}: {events}"))
    };
    let (api, users, docs) = (
        (at("start api"), at("end api")),
        (at("start users"), at("end users")),
        (at("start docs"), at("end docs")),
    );
    let apart = |a: (usize, usize), b: (usize, usize)| a.1 < b.0 || b.1 < a.0;
    assert!(apart(api, users), "{events}");
    assert!(
        !apart(docs, api) || !apart(docs, users),
        "docs ran beside: {events}"
    );
}

#[test]
fn tasks_that_touch_the_same_files_never_run_at_once_and_a_third_runs_beside() {
    let (env, run) = touching_tasks(&[]);
    assert_touching_tasks_kept_apart(&env);
    assert!(
        run.stdout()
            .contains("[users] ⏳ Waits for api: the two touch the same files (touches:)"),
        "{}",
        run.stdout()
    );
}

/// With `--json` the wait is a `task_waits` line naming the two tasks and why.
#[test]
fn a_task_kept_apart_by_its_touches_is_a_task_waits_event_in_json() {
    let (env, run) = touching_tasks(&["--json"]);
    assert_touching_tasks_kept_apart(&env);
    let lines: Vec<serde_json::Value> = (run.stdout().lines())
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    let waits: Vec<_> = (lines.iter())
        .filter(|line| line["event"] == "task_waits")
        .collect();
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert_eq!(waits[0]["task"], "users", "{}", waits[0]);
    assert_eq!(waits[0]["behind"], "api", "{}", waits[0]);
    assert_eq!(waits[0]["reason"], "touches", "{}", waits[0]);
}

/// `--parallel auto` with `--agent-memory` at 40% of the machine's available memory: two agents
/// fit at once, a third waits and says why (in the run's output and in `--status`); every task
/// is done.
#[test]
fn parallel_auto_starts_only_the_agents_the_memory_has_room_for() {
    parallel_auto_admits("--agent-memory", false);
}

/// The same with the agents in the sandbox and `--sandbox-memory` at 40%: the limit is the need.
#[test]
fn parallel_auto_under_the_sandbox_takes_its_memory_limit_as_the_need() {
    if crate::support::can_sandbox_agents() {
        parallel_auto_admits("--sandbox-memory", true);
    }
}

/// A `--parallel auto` run of four tasks with `memory` (`--agent-memory` or `--sandbox-memory`)
/// at 40% of the machine's available memory, its agents `sandboxed` or not.
fn parallel_auto_admits(memory: &str, sandboxed: bool) {
    use std::process::Stdio;
    use std::time::Duration;
    let need = (crate::support::available_memory() / 10 * 4).to_string();
    let env = crate::support::TestEnv::new();
    let sandbox = if sandboxed {
        crate::support::sandboxed_agents(&env)
    } else {
        Vec::new()
    };
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [ ] One\n  - id: one\n- [ ] Two\n  - id: two\n- [ ] Three\n  - id: three\n- [ ] Four\n  - id: four\n",
    )
    .unwrap();
    // Every agent waits for the test's `go` (30 s at most); the sandbox's check of the agent
    // (`--version`) does nothing.
    env.agent_script(
        None,
        r#"[ "$1" = --version ] && exit 0
id=${PWD##*/worktrees/}; id=${id%%/*}
echo "start $id" >> "$dir/events"
i=0; while [ ! -f "$dir/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
echo "$id" > "$id.txt"; echo "end $id" >> "$dir/events"
echo '<promise>READY_FOR_NEXT_TASK</promise>'
"#,
    );
    let mut ralph = env
        .ralph()
        .args(["--pause", "0", "Build", "--parallel", "auto", memory, &need])
        .args(&sandbox)
        // The load of a machine running many tests at once is not what this test is about.
        .env("RALPH_MAX_LOAD", "1000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    crate::support::wait_for_text(
        &env.ralph_file("ralph-loop.state.json"),
        "waiting for memory",
    );
    let status = env.run(&["--status"]);
    let shown = status.stdout();
    assert!(
        shown.contains("Waits:        three: waiting for memory: "),
        "{shown}"
    );
    // The same in `--status --json`, which the page reads.
    let json: serde_json::Value =
        serde_json::from_str(&env.run(&["--status", "--json"]).stdout()).unwrap();
    let why = json["loop"]["waiting"]["three"]
        .as_str()
        .unwrap_or_default();
    assert!(why.starts_with("waiting for memory: "), "{json}");
    fs::write(env.agent_dir().join("go"), "").unwrap();
    let output = crate::support::wait_output(&mut ralph, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    let events = fs::read_to_string(env.agent_dir().join("events")).unwrap();
    let (mut running, mut most) = (0, 0);
    for line in events.lines() {
        running = if line.starts_with("start") {
            running + 1
        } else {
            running - 1
        };
        most = most.max(running);
    }
    assert!(most <= 2, "{most} agents at once: {events}");
    assert_eq!(events.lines().count(), 8, "{events}");
    assert!(
        stdout.contains("[three] ⏳ Waits, waiting for memory: "),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("(the need is set by {memory}).")),
        "{stdout}"
    );
    let tasks = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(tasks.matches("- [x]").count(), 4, "{tasks}");
}

/// A `--parallel` run of every task at once, with a gate whose first merge (task `lead`) is
/// held until the other tasks' loops have ended, so those land as a train; task `breaker`'s
/// first work fails the gate beside the lead's. The base's reflog: what it says of each move of
/// the base.
fn train(tasks: &[&str], breaker: &str) -> (crate::support::TestEnv, String) {
    let env = crate::support::TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    let list: String = std::iter::once("lead")
        .chain(tasks.iter().copied())
        .map(|id| format!("- [ ] Task {id}\n  - id: {id}\n"))
        .collect();
    fs::write(env.ralph_file("ralph-tasks.md"), list).unwrap();
    env.agent_script(
        None,
        &format!(
            r#"id=${{PWD##*/worktrees/}}; id=${{id%%/*}}
n=0; [ -f "$dir/calls.$id" ] && read -r n < "$dir/calls.$id"; n=$((n + 1)); echo "$n" > "$dir/calls.$id"
printf '%s' "$last" > "$dir/prompt.$id.$n"
case "$id" in
  lead) echo lead > lead.txt ;;
  {breaker}) sleep 0.2; if [ "$n" -eq 1 ]; then echo bad > "$id.txt"; else echo good > "$id.txt"; fi ;;
  *) sleep 0.2; echo good > "$id.txt" ;;
esac
echo '<promise>READY_FOR_NEXT_TASK</promise>'
"#
        ),
    );
    // In the integration worktree only (a task's own loop runs the same check in its worktree,
    // where the bad work passes: it breaks the gate only beside the lead's). The lead's merge
    // waits until every other task's loop has ended (the run's journal says so).
    let ended = tasks.len() + 1;
    let gate = format!(
        "case \"$PWD\" in */worktrees/.integrate*) ;; *) exit 0 ;; esac; if [ -f lead.txt ] && [ ! -f {first}.txt ]; then i=0; while [ $i -lt 600 ] && [ \"$(grep -c '\"event\":\"run_ended\"' ../../events.jsonl)\" -lt {ended} ]; do sleep 0.05; i=$((i + 1)); done; sleep 0.2; fi; if [ -f lead.txt ] && grep -l bad *.txt; then echo 'bad work found'; exit 1; fi",
        first = tasks[0]
    );
    let at_once = (tasks.len() + 1).to_string();
    let run = env.run_loop(&["Build", "--parallel", &at_once, "--verify", &gate]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(list.matches("- [x]").count(), tasks.len() + 1, "{list}");
    let reflog = env.git(&["reflog", "show", "--format=%gs", "main"]);
    // The breaker went back to its agent with the gate's output.
    let again = fs::read_to_string(env.agent_dir().join(format!("prompt.{breaker}.2"))).unwrap();
    assert!(again.contains("bad work found"), "{again}");
    (env, reflog)
}

/// The gate's records from the first of `label`'s: `count` of them, as (what, passed).
fn gates_from(env: &crate::support::TestEnv, label: &str, count: usize) -> Vec<(String, bool)> {
    let gates = env.history()["gates"].clone();
    let tried: Vec<(String, bool)> = (gates.as_array().unwrap().iter())
        .map(|gate| {
            let task = gate["task"].as_str().unwrap_or_default().to_owned();
            (task, gate["passed"] == true)
        })
        .collect();
    let at = tried
        .iter()
        .position(|(task, _)| task == label)
        .unwrap_or_else(|| panic!("{tried:?}"));
    tried[at..(at + count).min(tried.len())].to_vec()
}

/// `[(what, passed)]` as [`gates_from`] gives them.
fn gates(expected: &[(&str, bool)]) -> Vec<(String, bool)> {
    (expected.iter())
        .map(|(task, passed)| ((*task).to_owned(), *passed))
        .collect()
}

#[test]
fn a_train_of_three_lands_the_two_that_pass_in_one_move_and_sends_the_third_back() {
    let (env, reflog) = train(&["one", "two", "three"], "two");
    assert!(
        reflog.contains("ralph: merge task one, three\n"),
        "{reflog}"
    );
    // The whole was gated once, then halves on top of what passed until the breaker was found.
    assert_eq!(
        gates_from(&env, "one+two+three", 4),
        gates(&[
            ("one+two+three", false),
            ("one", true),
            ("one+two", false),
            ("one+three", true),
        ])
    );
}

#[test]
fn a_train_of_four_is_bisected_to_the_one_that_breaks_the_gate() {
    let (env, reflog) = train(&["one", "two", "three", "four"], "three");
    assert!(
        reflog.contains("ralph: merge task one, two, four\n"),
        "{reflog}"
    );
    // The whole; its first half, which passes (so the second half fails, untried); the first
    // of that half, which fails; the last, which passes.
    assert_eq!(
        gates_from(&env, "one+two+three+four", 4),
        gates(&[
            ("one+two+three+four", false),
            ("one+two", true),
            ("one+two+three", false),
            ("one+two+four", true),
        ])
    );
}

/// A kill between taking a parked worktree for a task and checking out the task's branch leaves
/// the worktree in place, detached, with the last task's files and no branch: the next run lays
/// it out for the task, so its work lands on its branch and is merged, never on a detached HEAD.
#[test]
fn a_task_worktree_a_kill_left_detached_is_laid_out_on_the_tasks_branch() {
    let env = setup("- [ ] Echo\n  - id: echo\n");
    env.git(&["add", "-A"]);
    env.git(&["commit", "-q", "-m", "tasks"]);
    env.git(&[
        "worktree",
        "add",
        "-q",
        "--detach",
        ".ralph/worktrees/echo",
        "HEAD",
    ]);
    fs::write(
        env.ralph_file("worktrees/echo/leftover.txt"),
        "the last task's\n",
    )
    .unwrap();
    let run = env.run_loop(&["Build", "--tasks", "--parallel", "1"]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    assert_eq!(env.git(&["show", "main:Echo.txt"]).trim(), "Echo");
    let files = env.git(&["ls-tree", "-r", "--name-only", "main"]);
    assert!(!files.contains("leftover.txt"), "{files}");
}

/// A run learns from a conflict: task `one`'s merge conflicts with `two`'s in `shared.txt`, which
/// becomes a `touches` of `one`; task `three`, which declares it touches `shared.txt`, does not
/// start beside `one` while `one` resolves the conflict, and says why.
#[test]
fn a_task_waits_for_one_whose_merge_conflicted_in_what_it_touches() {
    let env = crate::support::TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.work().join("shared.txt"), "base\n").unwrap();
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [ ] One\n  - id: one\n- [ ] Two\n  - id: two\n- [ ] Four\n  - id: four\n- [ ] Three\n  - id: three\n  - touches: shared.txt\n  - blocked_by: four\n",
    )
    .unwrap();
    env.git(&["add", "-A"]);
    env.git(&["commit", "-q", "-m", "tasks"]);
    env.agent_script(
        None,
        r#"id=${PWD##*/worktrees/}; id=${id%%/*}
n=0; [ -f "$dir/calls.$id" ] && read -r n < "$dir/calls.$id"; n=$((n + 1)); echo "$n" > "$dir/calls.$id"
echo "start $id $n" >> "$dir/events"
wait_for() { i=0; while ! eval "$1" && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done; }
case "$id.$n" in
  one.1) wait_for '[ -f "$dir/done-two" ]'; sleep 0.3; echo one > shared.txt ;;
  one.*) sleep 1; echo 'one and two' > shared.txt ;;
  two.*) echo two > shared.txt; touch "$dir/done-two" ;;
  four.*) wait_for 'grep -q merge_conflicted ../../events.jsonl'; echo four > four.txt ;;
  *) echo "$id" > "$id.txt" ;;
esac
echo "end $id $n" >> "$dir/events"
echo '<promise>READY_FOR_NEXT_TASK</promise>'
"#,
    );
    let run = env.run_loop(&["Build", "--parallel", "3"]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    assert!(
        run.stdout().contains(
            "[three] ⏳ Waits for one: their changes conflicted earlier in this run, so they do not run at the same time."
        ),
        "{}",
        run.stdout()
    );
    let events = fs::read_to_string(env.agent_dir().join("events")).unwrap();
    let at = |what: &str| {
        (events.lines().position(|line| line == what)).unwrap_or_else(|| panic!("{what}: {events}"))
    };
    assert!(at("end one 2") < at("start three 1"), "{events}");
    assert_eq!(env.git(&["show", "main:shared.txt"]).trim(), "one and two");
}

/// Ctrl-C while the gate judges a merge train: the run stops (exit 130) and the gate's process
/// with it; the base is as the train found it (no merge under way, nothing uncommitted, the
/// train's tasks not landed), and `--resume` lands them, the base clean after.
#[test]
fn ctrl_c_during_a_merge_train_stops_its_gate_and_resume_lands_the_train() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let env = crate::support::TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "- [ ] Task lead\n  - id: lead\n- [ ] Task one\n  - id: one\n- [ ] Task two\n  - id: two\n",
    )
    .unwrap();
    env.agent_script(
        None,
        r#"id=${PWD##*/worktrees/}; id=${id%%/*}
[ "$id" = lead ] || sleep 0.2
echo "$id" > "$id.txt"
echo '<promise>READY_FOR_NEXT_TASK</promise>'
"#,
    );
    // In the integration worktree: the lead's merge waits until the other loops have ended, so
    // they land as a train; the train's gate holds (60 s) until the test lets it go.
    let dir = env.agent_dir().display().to_string();
    let gate = format!(
        "case \"$PWD\" in */worktrees/.integrate*) ;; *) exit 0 ;; esac; if [ -f lead.txt ] && [ ! -f one.txt ]; then i=0; while [ $i -lt 600 ] && [ \"$(grep -c '\"event\":\"run_ended\"' ../../events.jsonl)\" -lt 3 ]; do sleep 0.05; i=$((i + 1)); done; fi; if [ -f one.txt ] && [ -f two.txt ] && [ ! -f '{dir}/released' ]; then echo $$ > '{dir}/gate-pid'; sleep 60; fi"
    );
    let mut ralph = env
        .ralph()
        .args([
            "--pause",
            "0",
            "Build",
            "--parallel",
            "3",
            "--verify",
            &gate,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let gate_pid = env.agent_dir().join("gate-pid");
    crate::support::wait_for_text(&gate_pid, "\n");
    let pid: i32 = fs::read_to_string(&gate_pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    crate::support::interrupt(&ralph);
    let output = crate::support::wait_output(&mut ralph, Duration::from_secs(20));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(130), "{said}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while crate::support::is_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!crate::support::is_alive(pid), "the gate outlived the run");
    assert!(!env.work().join(".git/MERGE_HEAD").exists());
    assert_eq!(env.git(&["status", "--porcelain"]).trim(), "", "{said}");
    let landed = env.git(&["ls-tree", "--name-only", "main"]);
    assert!(landed.contains("lead.txt"), "{landed}");
    assert!(
        !landed.contains("one.txt") && !landed.contains("two.txt"),
        "{landed}"
    );

    fs::write(env.agent_dir().join("released"), "").unwrap();
    let resumed = env.run(&["--resume"]);
    assert_eq!(
        resumed.code(),
        0,
        "{}{}",
        resumed.stdout(),
        resumed.stderr()
    );
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(list.matches("- [x]").count(), 3, "{list}");
    for id in ["lead", "one", "two"] {
        assert_eq!(env.git(&["show", &format!("main:{id}.txt")]).trim(), id);
    }
    assert_eq!(env.git(&["status", "--porcelain"]).trim(), "");
    env.assert_no_task_leftovers("after --resume");
}
