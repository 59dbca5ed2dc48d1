//! A kill -9 at the worst moments of a parallel run's merge step, then `--resume`: the base ends
//! clean, every task's work merged exactly once, no worktree or task branch left behind.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use crate::fleet::setup;
use crate::support::{TestEnv, wait_for_file};

/// Kills the run with SIGKILL once `marker` exists, and waits for it to go.
fn kill_when(run: &mut std::process::Child, marker: &std::path::Path) {
    wait_for_file(marker, Duration::from_secs(20));
    let _ = run.kill();
    let _ = run.wait();
}

/// Runs a one-task parallel run with the hook `name` holding it (`body`, shell code that
/// touches `{marker}` when ralph is where the test wants it), kills it there, and removes the hook.
fn kill_in_hook(env: &TestEnv, name: &str, body: &str) {
    let marker = env.path().join("held");
    let hook = env.work().join(".git/hooks").join(name);
    let body = body.replace("{marker}", &format!("'{}'", marker.display()));
    fs::write(&hook, format!("#!/bin/sh\n{body}exit 0\n")).unwrap();
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
    let mut run = env.spawn_quiet(&["Build", "--tasks", "--parallel", "1", "--pause", "0"]);
    kill_when(&mut run, &marker);
    fs::remove_file(&hook).unwrap();
}

/// The base is as a finished run leaves it: no merge under way, nothing uncommitted, no task
/// branch or worktree, every task `[x]`, and each task merged by exactly one merge commit.
fn assert_clean_and_merged_once(env: &TestEnv, tasks: &[&str]) {
    assert!(
        !env.work().join(".git/MERGE_HEAD").exists(),
        "no merge left under way"
    );
    assert_eq!(
        env.git(&["status", "--porcelain"]).trim(),
        "",
        "nothing left uncommitted"
    );
    env.assert_no_task_leftovers("");
    let list = fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap();
    let subjects = env.git(&["log", "--format=%s"]);
    for task in tasks {
        assert!(list.contains(&format!("- [x] {task}")), "{list}");
        let merges = subjects
            .lines()
            .filter(|s| s.starts_with(&format!("Ralph: merge task {} ", task.to_lowercase())))
            .count();
        assert_eq!(merges, 1, "{task} merged exactly once:\n{subjects}");
        assert!(
            env.work().join(format!("{task}.txt")).exists(),
            "{task}'s work is in the base"
        );
    }
}

#[test]
fn a_kill_right_after_a_merge_commit_leaves_nothing_behind_after_resume() {
    let env = setup("- [ ] Alpha\n  - id: alpha\n");
    // The hook holds ralph just after its merge commit.
    kill_in_hook(
        &env,
        "post-commit",
        "case \"$(git log -1 --format=%s)\" in \"Ralph: merge task\"*) touch {marker}; sleep 5;; esac\n",
    );
    // The merge commit was made in the integration worktree: the base never moved to it.
    assert_eq!(
        env.git(&["log", "-1", "--format=%s"]).trim(),
        "Ralph: task list"
    );
    let resumed = env.run(&["--resume"]);
    resumed.assert_code(0);
    assert_clean_and_merged_once(&env, &["Alpha"]);
}

#[test]
fn a_kill_after_the_base_moved_to_a_merge_is_finished_on_resume() {
    let env = setup("- [ ] Alpha\n  - id: alpha\n");
    // The hook holds ralph just after its base moved to the merge, before the files came.
    kill_in_hook(
        &env,
        "reference-transaction",
        "[ \"$1\" = committed ] || exit 0\nwhile read -r old new ref; do\n  if [ \"$ref\" = refs/heads/main ] && git log -1 --format=%s \"$new\" | grep -q '^Ralph: merge task'; then touch {marker}; sleep 5; fi\ndone\n",
    );
    assert!(
        env.git(&["log", "-1", "--format=%s"])
            .starts_with("Ralph: merge task alpha"),
        "the base is at the merge"
    );
    assert!(
        !env.work().join("Alpha.txt").exists(),
        "its files are not yet"
    );
    let resumed = env.run(&["--resume"]);
    resumed.assert_code(0);
    assert!(
        resumed
            .stderr()
            .contains("[alpha] ⚠️  The task's merge was cut off"),
        "{}",
        resumed.stderr()
    );
    assert_clean_and_merged_once(&env, &["Alpha"]);
}

#[test]
fn a_kill_during_a_merge_is_undone_and_the_task_merged_once_on_resume() {
    let env = setup("- [ ] Alpha\n  - id: alpha\n- [ ] Beta\n  - id: beta\n");
    let marker = env.path().join("in-merge");
    // A merge driver that takes a while on the progress log, which both tasks change.
    let done = env.path().join("merge-done");
    fs::create_dir_all(env.work().join(".git/info")).unwrap();
    fs::write(
        env.work().join(".git/info/attributes"),
        "progress.md merge=slow\n",
    )
    .unwrap();
    env.git(&[
        "config",
        "merge.slow.driver",
        &format!(
            "touch '{}'; sleep 1; git merge-file -q %A %O %B; s=$?; touch '{}'; exit $s",
            marker.display(),
            done.display()
        ),
    ]);
    let mut run = env.spawn_quiet(&["Build", "--tasks", "--parallel", "2", "--pause", "0"]);
    kill_when(&mut run, &marker);
    // git goes on with the merge after ralph is gone; it must finish, not die half way.
    wait_for_file(&done, Duration::from_secs(20));
    crate::support::wait_until(Duration::from_secs(10), "git's merge to end", || {
        !env.work().join(".git/index.lock").exists()
    });
    env.git(&["config", "--unset", "merge.slow.driver"]);
    let resumed = env.run(&["--resume", "--pause", "0"]);
    resumed.assert_code(0);
    assert_clean_and_merged_once(&env, &["Alpha", "Beta"]);
}
