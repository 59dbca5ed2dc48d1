//! Modified-files detection and auto-commit.

use std::fs;

use crate::support::TestEnv;

#[test]
fn odd_file_names_and_new_nested_files_are_detected() {
    let env = TestEnv::new();
    fs::write(env.work().join("tracked file.txt"), "old\n").unwrap();
    env.git(&["add", "-A"]);
    env.git(&["commit", "-q", "-m", "more"]);
    env.agent_script(
        None,
        r#"echo new >> "tracked file.txt"
mkdir -p "deep/new dir"; echo x > "deep/new dir/été \"quoted\".md"
echo y > 'it'"'"'s.txt'
git mv README.md MOVED.md"#,
    );
    env.run_loop(&["task", "--max-iterations", "1", "--no-commit"])
        .assert_code(2);
    let files: Vec<String> = env.history()["iterations"][0]["files_modified"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    for expected in [
        "tracked file.txt",
        "deep/new dir/été \"quoted\".md",
        "it's.txt",
        "MOVED.md",
        "README.md",
    ] {
        assert!(
            files.contains(&expected.to_owned()),
            "{expected} missing from {files:?}"
        );
    }
    assert!(files.iter().all(|f| !f.starts_with(".ralph/")), "{files:?}");
}

/// The files an iteration's history record lists.
fn files_of(env: &TestEnv, index: usize) -> Vec<String> {
    env.history()["iterations"][index]["files_modified"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn each_commit_holds_exactly_what_its_iteration_changed() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join("old dir/inner")).unwrap();
    fs::write(env.work().join("old dir/inner/a.txt"), "a\n").unwrap();
    fs::write(env.work().join("old dir/b.txt"), "b\n").unwrap();
    fs::write(env.work().join("run.sh"), "echo hi\n").unwrap();
    fs::write(env.work().join("[x].txt"), "glob\n").unwrap();
    env.git(&["add", "-A"]);
    env.git(&["commit", "-q", "-m", "more"]);
    env.agent_script(Some(1), "rm -r 'old dir'");
    env.agent_script(Some(2), "chmod +x run.sh");
    env.agent_script(
        Some(3),
        "echo more >> '[x].txt'; mkdir -p n/m; echo n > n/m/new.txt",
    );
    env.run_loop(&["task", "--max-iterations", "3"])
        .assert_code(2);
    let changed = |rev: &str| {
        env.git(&["show", "--name-status", "--format=", rev])
            .lines()
            .filter(|line| !line.contains(".ralph/"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        changed("HEAD~2"),
        ["D\told dir/b.txt", "D\told dir/inner/a.txt"]
    );
    assert_eq!(
        env.git(&["diff", "--summary", "HEAD~2", "HEAD~1"]).trim(),
        "mode change 100644 => 100755 run.sh"
    );
    assert_eq!(changed("HEAD"), ["M\t[x].txt", "A\tn/m/new.txt"]);
    // Each iteration's record names its own changes only: the scan kept from the iteration
    // before, after ralph's commit, is the tree as it was.
    assert_eq!(files_of(&env, 0), ["old dir/b.txt", "old dir/inner/a.txt"]);
    assert_eq!(files_of(&env, 1), ["run.sh"]);
    assert_eq!(files_of(&env, 2), ["[x].txt", "n/m/new.txt"]);
    assert_eq!(env.git(&["status", "--porcelain"]), "");
}

#[test]
fn no_commit_makes_no_commits() {
    let env = TestEnv::new();
    let edit = env.work().join("notes.txt");
    env.run_loop_with(&["task", "--max-iterations", "2", "--no-commit"], |c| {
        c.env("FAKE_AGENT_EDIT", &edit);
    })
    .assert_code(2);
    assert_eq!(env.commit_count(), 1);
    assert_eq!(
        env.history()["iterations"][1]["files_modified"][0],
        "notes.txt"
    );
}

#[test]
fn commits_never_include_ralph_runtime_files_but_include_the_task_file() {
    let env = TestEnv::new();
    // A task list, so the run does not plan first.
    env.run(&["--add-task", "one"]).assert_code(0);
    let edit = env.work().join("notes.txt");
    env.run_loop_with(&["task", "--max-iterations", "1", "--tasks"], |c| {
        c.env("FAKE_AGENT_EDIT", &edit);
    })
    .assert_code(2);
    let files = env.git(&["show", "--name-only", "--format=", "HEAD"]);
    assert!(files.contains("notes.txt"), "{files}");
    assert!(files.contains(".ralph/ralph-tasks.md"), "{files}");
    assert!(
        !files.contains("ralph-loop.state.json") && !files.contains("ralph-history.json"),
        "{files}"
    );
    assert_eq!(
        env.git(&["status", "--porcelain"]).trim(),
        "",
        "runtime files are ignored by git"
    );
}

#[test]
fn changes_the_agent_commits_itself_are_detected() {
    let env = TestEnv::new();
    env.agent_script(
        None,
        "echo x > committed.txt; git add committed.txt; git commit -q -m 'by agent'",
    );
    env.run_loop(&["task", "--max-iterations", "1"])
        .assert_code(2);
    assert_eq!(
        env.history()["iterations"][0]["files_modified"][0],
        "committed.txt"
    );
}

#[test]
fn a_failed_commit_is_a_warning() {
    let env = TestEnv::new();
    fs::write(
        env.work().join(".git/hooks/pre-commit"),
        "#!/bin/sh\necho 'hook says no' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(
        env.work().join(".git/hooks/pre-commit"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let edit = env.work().join("notes.txt");
    let run = env.run_loop_with(&["task", "--max-iterations", "1"], |c| {
        c.env("FAKE_AGENT_EDIT", &edit);
    });
    run.assert_code(2);
    assert!(
        run.stderr()
            .contains("Auto-commit failed: git commit failed (hook says no)"),
        "{}",
        run.stderr()
    );
    assert!(!run.stdout().contains("Auto-committed"));
    assert_eq!(env.commit_count(), 1);
}

#[test]
fn outside_a_git_repository_the_loop_still_runs() {
    let env = TestEnv::new();
    fs::remove_dir_all(env.work().join(".git")).unwrap();
    let run = env.run_loop_with(&["task", "--max-iterations", "3"], |c| {
        c.env("FAKE_AGENT_COMPLETE_AT", "2");
    });
    run.assert_code(0);
    assert_eq!(env.agent_calls(), 2);
}

/// Files touched after they were staged leave the index's stamps stale, and ralph's scans
/// (which take no optional locks) would hash them again in every iteration: a loop refreshes
/// the index once when it starts, changing nothing that is staged.
#[test]
fn a_loop_refreshes_a_stale_index_once_and_stages_nothing() {
    let env = TestEnv::new();
    for name in ["a.txt", "b.txt"] {
        std::fs::write(env.work().join(name), "same\n").unwrap();
    }
    env.git(&["add", "a.txt", "b.txt"]);
    env.git(&["commit", "-q", "-m", "two files"]);
    // The same content, new stamps; and one change the user staged.
    env.git(&["update-index", "--refresh"]);
    for name in ["a.txt", "b.txt"] {
        let file = std::fs::File::options()
            .append(true)
            .open(env.work().join(name))
            .unwrap();
        file.set_modified(
            std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(86_400),
        )
        .unwrap();
    }
    let stale = env.git(&["diff-files", "--name-only"]);
    assert_eq!(stale, "a.txt\nb.txt\n", "the index is stale");
    std::fs::write(env.work().join("c.txt"), "new\n").unwrap();
    env.git(&["add", "c.txt"]);
    let run = env.run_loop_with(
        &["task", "--no-commit", "--max-iterations", "1"],
        |command| {
            command.env("FAKE_AGENT_COMPLETE_AT", "1");
        },
    );
    run.assert_code(0);
    assert_eq!(env.git(&["diff-files", "--name-only"]), "", "refreshed");
    assert_eq!(
        env.git(&["diff", "--cached", "--name-only"]),
        "c.txt\n",
        "staged as it was"
    );
}
