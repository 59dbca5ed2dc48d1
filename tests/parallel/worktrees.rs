//! Task worktrees reused from task to task: cleaned of the last task's files (its build outputs
//! kept with `--keep-build-cache`), checked out side by side into the pool, taken over from a
//! killed run.

use std::fs;

use crate::fleet::setup;
use crate::support::TestEnv;

/// What each task's agent found in its worktree when it started (`found-<id>`): the build
/// outputs there, and whether a history of iterations was (another task's); then it leaves a
/// build output of its own.
const LOOKS_AROUND: &str = r#"
{ ls build 2>/dev/null; grep -q '"iteration": ' .ralph/ralph-history.json 2>/dev/null && echo "a history"; } > "$dir/found-$id"
mkdir -p build && echo "$id" > "build/from-$id"
"#;

/// Three tasks, one at a time, in worktrees taken over from task to task.
fn three_tasks_one_worktree(extra: &[&str]) -> TestEnv {
    let env = setup("# Tasks\n\n- [ ] Task one\n- [ ] Task two\n- [ ] Task three\n");
    fs::write(env.work().join(".gitignore"), "build/\n").unwrap();
    env.git(&["add", ".gitignore"]);
    env.git(&["commit", "-q", "-m", "ignore builds"]);
    env.agent_script(None, LOOKS_AROUND);
    let mut args = vec!["Build", "--tasks", "--parallel", "1"];
    args.extend_from_slice(extra);
    env.run_loop(&args).assert_code(0);
    let tasks = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(tasks.matches("- [x]").count(), 3, "{tasks}");
    for name in ["Task_one", "Task_two", "Task_three"] {
        assert!(env.work().join(format!("{name}.txt")).exists(), "{name}");
    }
    // Nothing is left: no worktree, parked or not, no branch.
    let worktrees = env.git(&["worktree", "list"]);
    assert_eq!(worktrees.lines().count(), 1, "{worktrees}");
    assert!(!env.ralph_file("worktrees/.pool").exists());
    assert_eq!(env.git(&["branch", "--list", "ralph/*"]), "");
    assert_eq!(env.git(&["status", "--porcelain"]), "");
    env
}

#[test]
fn a_worktree_is_reused_from_task_to_task_cleaned_of_the_last_ones_files() {
    let env = three_tasks_one_worktree(&[]);
    assert_eq!(env.agent_file("found-Task_one"), "");
    // The worktree was the last task's (its build output was there to clean), and nothing of
    // that task's is left: no build output, no ralph history.
    assert_eq!(env.agent_file("found-Task_two"), "");
    assert_eq!(env.agent_file("found-Task_three"), "");
    let kept = three_tasks_one_worktree(&["--keep-build-cache"]);
    assert_eq!(kept.agent_file("found-Task_one"), "");
    // One worktree for the whole run: task one's became the one its merge was made in, task two
    // took it from there, and task three took it back after task two's merge; the build outputs
    // stayed, ralph's files of the last task went.
    assert_eq!(kept.agent_file("found-Task_two"), "from-Task_one\n");
    assert_eq!(
        kept.agent_file("found-Task_three"),
        "from-Task_one\nfrom-Task_two\n"
    );
}

#[test]
fn tasks_that_start_together_take_worktrees_checked_out_side_by_side_into_the_pool() {
    let env = setup("# Tasks\n\n- [ ] Task one\n- [ ] Task two\n- [ ] Task three\n");
    let trace = env.path().join("git-trace.json");
    env.run_loop_with(&["Build", "--tasks", "--parallel", "3"], |command| {
        command.env("GIT_TRACE2_EVENT", &trace);
    })
    .assert_code(0);
    let tasks = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    assert_eq!(tasks.matches("- [x]").count(), 3, "{tasks}");
    // Every `git worktree add` ralph ran, by what it made.
    let adds: Vec<String> = (fs::read_to_string(&trace).unwrap().lines())
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["event"] == "start")
        .filter_map(|event| {
            let argv: Vec<&str> = (event["argv"].as_array()?.iter())
                .filter_map(serde_json::Value::as_str)
                .collect();
            (argv.get(1..3) == Some(&["worktree", "add"][..])).then(|| argv.join(" "))
        })
        .collect();
    // Three worktrees for the three tasks that started together, parked first (detached), then
    // taken by the tasks; none checked out for one task alone, none for the merges.
    assert_eq!(adds.len(), 3, "{adds:#?}");
    assert!(
        adds.iter()
            .all(|add| add.contains("--detach") && add.contains(".ralph/worktrees/.pool/")),
        "{adds:#?}"
    );
    let worktrees = env.git(&["worktree", "list"]);
    assert_eq!(worktrees.lines().count(), 1, "{worktrees}");
    assert!(!env.ralph_file("worktrees/.pool").exists());
    assert_eq!(env.git(&["status", "--porcelain"]), "");
}

#[test]
fn a_worktree_a_killed_run_left_parked_is_taken_by_the_next_run_and_removed_at_its_end() {
    let env = setup("# Tasks\n\n- [ ] Task one\n");
    fs::write(env.work().join(".gitignore"), "build/\n").unwrap();
    env.git(&["add", ".gitignore"]);
    env.git(&["commit", "-q", "-m", "ignore builds"]);
    // As a killed run leaves it: a worktree parked with its HEAD detached, a build output in it.
    env.git(&[
        "worktree",
        "add",
        "-q",
        "--detach",
        ".ralph/worktrees/.pool/1",
    ]);
    let parked = env.ralph_file("worktrees/.pool/1");
    fs::create_dir_all(parked.join("build")).unwrap();
    fs::write(parked.join("build/from-before"), "x").unwrap();
    env.agent_script(None, LOOKS_AROUND);
    env.run_loop(&["Build", "--tasks", "--parallel", "1", "--keep-build-cache"])
        .assert_code(0);
    assert_eq!(env.agent_file("found-Task_one"), "from-before\n");
    let worktrees = env.git(&["worktree", "list"]);
    assert_eq!(worktrees.lines().count(), 1, "{worktrees}");
    assert!(!env.ralph_file("worktrees/.pool").exists());
    assert!(env.work().join("Task_one.txt").exists());
}
