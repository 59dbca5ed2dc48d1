//! The checks of a landing hold for `--worker`s too: the run's gate, a protected path.

use std::fs;

use crate::support::CHEATS_ONCE;

#[test]
fn the_gate_holds_for_workers_too() {
    use crate::fleet::{finish, machines, remote, start_worker};
    use crate::workers::remote_tasks;
    let env = machines("- [ ] A\n  - id: a\n- [ ] B\n  - id: b\n", &["m1", "m2"]);
    // Both tasks run at once, so the second merge meets the first.
    fs::write(env.agent_dir().join("script"), "sleep 0.3\n").unwrap();
    let check = "test ! -f A.txt || test ! -f B.txt";
    let args = ["--verify", check, "--max-iterations", "2"];
    let workers: Vec<_> = ["m1", "m2"]
        .iter()
        .map(|name| start_worker(&env, name, &args))
        .collect();
    let mut said = String::new();
    for worker in workers {
        let (_, stdout, stderr) = finish(worker);
        said.push_str(&stdout);
        said.push_str(&stderr);
    }
    assert!(said.contains("🚧 Not merged: `"), "{said}");
    let list = remote_tasks(&env);
    assert_eq!(list.matches("- [x]").count(), 1, "{list}");
    assert_eq!(list.matches("- [!]").count(), 1, "{list}");
    let bare = remote(&env);
    for commit in env
        .git(&["-C", &bare, "log", "--format=%H", "main"])
        .lines()
    {
        let files = env.git(&["-C", &bare, "ls-tree", "--name-only", commit]);
        assert!(
            !(files.contains("A.txt") && files.contains("B.txt")),
            "{commit} fails the gate: {files}"
        );
    }
}

/// Two `--worker`s on two tasks: the agent of one edits its test to pass, and gets it put back;
/// the remote's base never holds the edit, and both tasks land once the work meets the test.
#[test]
fn workers_agents_cannot_change_the_test_that_judges_them() {
    let env = crate::fleet::machines(
        "- [ ] Answer\n  - id: answer\n- [ ] Other\n  - id: other\n",
        &["m1", "m2"],
    );
    env.write_executable("opencode", crate::support::FAKE_AGENT);
    let clone = crate::fleet::machine(&env, "m1");
    let at = |args: &[&str]| {
        let mut all = vec!["-C", clone.to_str().unwrap()];
        all.extend_from_slice(args);
        env.git(&all)
    };
    fs::create_dir_all(clone.join("tests")).unwrap();
    fs::write(clone.join("tests/expected.txt"), "42\n").unwrap();
    fs::write(
        clone.join("tests/run.sh"),
        "[ \"$(cat answer.txt 2>/dev/null)\" = \"$(cat tests/expected.txt)\" ] || [ -f other.txt ]\n",
    )
    .unwrap();
    at(&["add", "-A"]);
    at(&["commit", "-q", "-m", "the test"]);
    at(&["push", "-q", "origin", "main"]);
    at(&[
        "-C",
        crate::fleet::machine(&env, "m2").to_str().unwrap(),
        "pull",
        "-q",
    ]);
    env.agent_script(None, CHEATS_ONCE);
    let args = [
        "--protect",
        "tests/**",
        "--verify",
        "sh tests/run.sh",
        "--wait",
    ];
    let workers: Vec<_> = ["m1", "m2"]
        .iter()
        .map(|name| crate::fleet::start_worker(&env, name, &args))
        .collect();
    for worker in workers {
        let (code, stdout, stderr) = crate::fleet::finish(worker);
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    }
    let remote = crate::fleet::remote(&env);
    let shown = |path: &str| env.git(&["-C", &remote, "show", &format!("main:{path}")]);
    assert_eq!(shown("tests/expected.txt").trim(), "42");
    assert_eq!(shown("answer.txt").trim(), "42");
    assert_eq!(shown("other.txt").trim(), "other");
    let touched = env.git(&["-C", &remote, "log", "--name-only", "--format=", "--all"]);
    assert_eq!(
        touched.matches("tests/expected.txt").count(),
        1,
        "{touched}"
    );
    assert!(
        env.agent_dir().join("cheated").exists(),
        "the agent did cheat"
    );
}

/// At a `--worker`'s landing: a task branch pushed by an earlier worker without `--protect`
/// carries a change to the test; it is refused and sent back, and lands once put back.
#[test]
fn a_workers_landing_refuses_a_branch_that_changes_a_protected_path() {
    let env = crate::fleet::machines("- [ ] Answer\n  - id: answer\n", &["m1"]);
    env.write_executable("opencode", crate::support::FAKE_AGENT);
    let clone = crate::fleet::machine(&env, "m1");
    let at = |args: &[&str]| {
        let mut all = vec!["-C", clone.to_str().unwrap()];
        all.extend_from_slice(args);
        env.git(&all)
    };
    fs::create_dir_all(clone.join("tests")).unwrap();
    fs::write(clone.join("tests/expected.txt"), "42\n").unwrap();
    at(&["add", "-A"]);
    at(&["commit", "-q", "-m", "the test"]);
    at(&["push", "-q", "origin", "main"]);
    // An earlier worker, without --protect: its agent changed the test, and gave up.
    env.agent_script(
        Some(1),
        "echo 7 > answer.txt; echo 7 > tests/expected.txt\n",
    );
    let earlier = crate::fleet::start_worker(&env, "m1", &["--max-iterations", "1"]);
    let (code, stdout, stderr) = crate::fleet::finish(earlier);
    assert_ne!(code, Some(0), "{stdout}\n{stderr}");
    // The task is given another try on the remote.
    at(&["pull", "-q", "--rebase"]);
    let list = fs::read_to_string(clone.join(".ralph/ralph-tasks.md")).unwrap();
    fs::write(
        clone.join(".ralph/ralph-tasks.md"),
        list.replace("- [!]", "- [ ]"),
    )
    .unwrap();
    at(&["commit", "-qam", "try the task again"]);
    at(&["push", "-q", "origin", "main"]);
    env.agent_script(Some(2), "echo '<promise>READY_FOR_NEXT_TASK</promise>'\n");
    env.agent_script(
        Some(3),
        "echo 42 > answer.txt; echo 8 > tests/expected.txt\necho '<promise>READY_FOR_NEXT_TASK</promise>'\n",
    );
    let worker = crate::fleet::start_worker(&env, "m1", &["--protect", "tests/**"]);
    let (code, stdout, stderr) = crate::fleet::finish(worker);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let journal = fs::read_to_string(clone.join(".ralph/events.jsonl")).unwrap();
    assert!(
        journal.contains(r#""command":"no change to protected paths""#),
        "{journal}"
    );
    let remote = crate::fleet::remote(&env);
    let shown = |path: &str| env.git(&["-C", &remote, "show", &format!("main:{path}")]);
    assert_eq!(shown("tests/expected.txt").trim(), "42");
    assert_eq!(shown("answer.txt").trim(), "42");
}

/// `--holdout` holds a worker's task too: its loop refuses the promise while a hidden check fails
/// (the agent learns only the count), and the task lands once it passes.
#[test]
fn a_holdout_check_holds_a_workers_task_and_the_agent_learns_only_the_count() {
    use crate::fleet::{finish, machines, remote, start_worker};
    let env = machines("- [ ] Answer\n  - id: answer\n", &["m1"]);
    let hidden = env.path().join("hidden");
    fs::create_dir_all(&hidden).unwrap();
    let check = hidden.join("edge-cases.sh");
    fs::write(
        &check,
        "grep -q 'handles zero' Answer.txt || { echo 'SECRET-DETAIL: zero'; exit 1; }\n",
    )
    .unwrap();
    // The second call handles the edge case; every call keeps its prompt.
    fs::write(
        env.agent_dir().join("script"),
        r#"n=0; [ -f "$dir/n" ] && read -r n < "$dir/n"; n=$((n + 1)); echo "$n" > "$dir/n"
printf '%s' "$last" > "$dir/prompt.$n"
[ "$n" -ge 2 ] && echo 'handles zero' >> "$id.txt"
"#,
    )
    .unwrap();
    let holdout = format!("sh {}", check.display());
    let worker = start_worker(&env, "m1", &["--holdout", &holdout]);
    let (code, stdout, stderr) = finish(worker);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let second = fs::read_to_string(env.agent_dir().join("prompt.2")).unwrap();
    assert!(second.contains("1 of 1 holdout checks failed"), "{second}");
    assert!(
        !second.contains("SECRET-DETAIL") && !second.contains("edge-cases.sh"),
        "{second}"
    );
    let landed = env.git(&["-C", &remote(&env), "show", "main:Answer.txt"]);
    assert!(landed.contains("handles zero"), "{landed}");
}
