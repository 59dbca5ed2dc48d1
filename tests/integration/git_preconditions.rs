//! What a loop asks of its repository: no operation of the user's under way, a warning on a
//! detached HEAD, the user's uncommitted changes left out of ralph's commits, and a `.ralph/`
//! that can be written.

use std::fs;

use crate::support::TestEnv;

/// Every path the commits after `since` touch.
fn committed_since(env: &TestEnv, since: &str) -> Vec<String> {
    env.git(&["log", "--name-only", "--format=", &format!("{since}..HEAD")])
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The user's modified `README.md` and untracked `secrets.env` are in no ralph commit and are
/// still as the user left them.
fn assert_users_files_left_out(env: &TestEnv, committed: &[String]) {
    assert!(
        !committed
            .iter()
            .any(|path| path == "README.md" || path == "secrets.env"),
        "{committed:?}"
    );
    assert_eq!(
        env.git(&["status", "--porcelain"]),
        " M README.md\n?? secrets.env\n"
    );
}

#[test]
fn files_changed_before_the_loop_are_listed_and_never_committed() {
    let env = TestEnv::new();
    let start = env.git(&["rev-parse", "HEAD"]).trim().to_owned();
    fs::write(env.work().join("README.md"), "the user's edit\n").unwrap();
    fs::write(env.work().join("secrets.env"), "API_KEY=secret\n").unwrap();
    env.agent_script(None, "echo \"work $n\" >> work.txt");
    let run = env.run_loop(&["task", "--max-iterations", "1"]);
    run.assert_code(2);
    let told = run.stderr();
    assert!(
        told.contains("2 files had uncommitted changes when the loop started")
            && told.contains("   README.md")
            && told.contains("   secrets.env"),
        "{told}"
    );
    let committed = committed_since(&env, &start);
    assert!(committed.contains(&"work.txt".to_owned()), "{committed:?}");
    assert_users_files_left_out(&env, &committed);
    // The list is saved with the loop: a resumed loop leaves them out too, and says so again.
    let resumed = env.run_loop(&["--resume", "--max-iterations", "2"]);
    resumed.assert_code(2);
    assert!(
        resumed.stderr().contains("   secrets.env"),
        "{}",
        resumed.stderr()
    );
    assert_eq!(env.agent_calls(), 2);
    let committed = committed_since(&env, &start);
    assert_users_files_left_out(&env, &committed);
}

#[test]
fn commit_dirty_commits_them_as_before() {
    let env = TestEnv::new();
    fs::write(env.work().join("notes.txt"), "the user's\n").unwrap();
    env.agent_script(None, "echo work >> work.txt");
    let run = env.run_loop(&["task", "--max-iterations", "1", "--commit-dirty"]);
    run.assert_code(2);
    assert!(
        !run.stderr().contains("uncommitted changes"),
        "{}",
        run.stderr()
    );
    let files = env.git(&["show", "--name-only", "--format=", "HEAD"]);
    assert!(
        files.contains("notes.txt") && files.contains("work.txt"),
        "{files}"
    );
}

/// A repository where `main` and `other` change `f` differently.
fn diverged() -> TestEnv {
    let env = TestEnv::new();
    fs::write(env.work().join("f"), "base\n").unwrap();
    env.git(&["add", "f"]);
    env.git(&["commit", "-q", "-m", "base"]);
    env.git(&["checkout", "-q", "-b", "other"]);
    fs::write(env.work().join("f"), "other\n").unwrap();
    env.git(&["commit", "-q", "-am", "other"]);
    env.git(&["checkout", "-q", "-"]);
    fs::write(env.work().join("f"), "mine\n").unwrap();
    env.git(&["commit", "-q", "-am", "mine"]);
    env
}

/// Starting a loop (`args`) refuses with exit 1, naming `what`, and commits nothing.
fn refused(env: &TestEnv, args: &[&str], what: &str) {
    let commits = env.commit_count();
    let run = env.run_loop(args);
    run.assert_code(1);
    let told = run.stderr();
    assert!(
        told.contains(&format!("the repository is in the middle of {what}"))
            && told.contains("then run ralph again"),
        "{told}"
    );
    assert_eq!(env.commit_count(), commits);
    assert_eq!(env.agent_calls(), 0);
}

#[test]
fn a_loop_refuses_to_start_in_the_middle_of_a_merge_rebase_or_cherry_pick() {
    let env = diverged();
    assert!(
        !env.try_git(&["merge", "-q", "other"]),
        "the merge conflicts"
    );
    refused(
        &env,
        &["task", "--max-iterations", "1"],
        "a merge (.git/MERGE_HEAD); finish it",
    );
    fs::write(env.work().join(".ralph/ralph-tasks.md"), "- [ ] one\n").unwrap();
    refused(&env, &["task", "--tasks", "--parallel", "2"], "a merge");
    refused(&env, &["--worktree", "side", "task"], "a merge");
    assert!(env.try_git(&["merge", "--abort"]));

    assert!(!env.try_git(&["rebase", "-q", "other"]), "the rebase stops");
    refused(
        &env,
        &["task", "--max-iterations", "1"],
        "a rebase (.git/rebase-",
    );
    assert!(env.try_git(&["rebase", "--abort"]));

    assert!(
        !env.try_git(&["cherry-pick", "other"]),
        "the cherry-pick stops"
    );
    refused(&env, &["task", "--max-iterations", "1"], "a cherry-pick");
    assert!(env.try_git(&["cherry-pick", "--abort"]));

    // Conflicts left with no operation under way (a stash that did not apply cleanly).
    fs::write(env.work().join("f"), "stashed\n").unwrap();
    env.git(&["stash", "-q"]);
    env.git(&["merge", "-q", "--no-edit", "-X", "theirs", "other"]);
    assert!(!env.try_git(&["stash", "pop", "-q"]), "the stash conflicts");
    let run = env.run_loop(&["task", "--max-iterations", "1"]);
    run.assert_code(1);
    assert!(
        run.stderr()
            .contains("the repository has unmerged paths (f)"),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_detached_head_is_warned_about_and_the_loop_runs() {
    let env = TestEnv::new();
    env.git(&["checkout", "-q", "--detach"]);
    let head = env.git(&["rev-parse", "--short=7", "HEAD"]);
    let edit = env.work().join("notes.txt");
    let run = env.run_loop_with(&["task", "--max-iterations", "1"], |c| {
        c.env("FAKE_AGENT_EDIT", &edit);
    });
    run.assert_code(2);
    assert!(
        run.stderr().contains(&format!(
            "HEAD is detached (at {}): ralph's commits will not be on any branch",
            head.trim()
        )),
        "{}",
        run.stderr()
    );
    assert_eq!(env.commit_count(), 2);
}

#[test]
#[expect(
    clippy::print_stderr,
    reason = "the one line that explains a skipped check"
)]
fn doctor_reports_a_ralph_directory_that_cannot_be_written() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = TestEnv::new();
    let ralph = env.work().join(".ralph");
    fs::create_dir_all(&ralph).unwrap();
    let healthy = env.run(&["--doctor"]).stdout();
    assert!(
        healthy.contains(".ralph can be written")
            && healthy.contains("the repository can be written"),
        "{healthy}"
    );
    fs::set_permissions(&ralph, fs::Permissions::from_mode(0o500)).unwrap();
    // Root (or a file system without permissions) writes there anyway.
    let privileged = fs::write(ralph.join("probe"), "").is_ok();
    let doctor = env.run(&["--doctor"]);
    fs::set_permissions(&ralph, fs::Permissions::from_mode(0o700)).unwrap();
    if privileged {
        eprintln!("note: chmod 500 does not stop writes here (running as root?); not checked");
        return;
    }
    doctor.assert_code(1);
    assert!(
        doctor
            .stdout()
            .contains(".ralph cannot be written (Permission denied"),
        "{}",
        doctor.stdout()
    );
}

#[test]
fn a_worker_refuses_to_start_in_the_middle_of_a_bisect() {
    use crate::fleet::{finish, machine, machines, start_worker};
    let env = machines("- [ ] Only\n  - id: only\n", &["m1"]);
    let m1 = machine(&env, "m1");
    env.git(&["-C", &m1.to_string_lossy(), "bisect", "start"]);
    let (code, stdout, stderr) = finish(start_worker(&env, "m1", &[]));
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("in the middle of a bisect (.git/BISECT_LOG); end it (git bisect reset)"),
        "{stderr}"
    );
    assert!(!env.agent_dir().join("events").exists(), "no agent ran");
}
