//! A repository with a test its agent may be tempted to change (`tests/run.sh` wants
//! `answer.txt` to hold what `tests/expected.txt` says, 42), and what the `--protect` and
//! `--holdout` tests do with it.

use std::fs;

use crate::support::TestEnv;

/// A repository whose test (`tests/run.sh`) wants `answer.txt` to hold what
/// `tests/expected.txt` says (42).
pub(crate) fn with_a_test() -> TestEnv {
    let env = TestEnv::new();
    let tests = env.work().join("tests");
    fs::create_dir_all(&tests).unwrap();
    fs::write(tests.join("expected.txt"), "42\n").unwrap();
    fs::write(
        tests.join("run.sh"),
        "[ \"$(cat answer.txt 2>/dev/null)\" = \"$(cat tests/expected.txt)\" ] || { echo 'answer.txt is not what tests/expected.txt says'; exit 1; }\n",
    )
    .unwrap();
    env.git(&["add", "-A"]);
    env.git(&["commit", "-q", "-m", "the test"]);
    env
}

/// The task list `list` in the repository's `.ralph/` (`committed`: in a commit of its own).
pub(crate) fn with_tasks(env: &TestEnv, list: &str, committed: bool) {
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.ralph_file("ralph-tasks.md"), list).unwrap();
    if committed {
        env.git(&["add", "-A"]);
        env.git(&["commit", "-q", "-m", "tasks"]);
    }
}

/// The agent's first call cheats: it changes the expected value to its own wrong answer. Its
/// second does the work.
pub(crate) fn cheat_then_work(env: &TestEnv) {
    env.agent_script(
        Some(1),
        "echo 7 > answer.txt; echo 7 > tests/expected.txt; echo new > tests/mine.txt\necho '<promise>COMPLETE</promise>'\n",
    );
    env.agent_script(
        Some(2),
        "echo 42 > answer.txt\necho '<promise>COMPLETE</promise>'\n",
    );
}

/// The test's expected value is the one it was given, in the work tree.
pub(crate) fn assert_test_intact(env: &TestEnv) {
    let expected = fs::read_to_string(env.work().join("tests/expected.txt")).unwrap();
    assert_eq!(expected, "42\n");
}

/// Every path any commit touched.
pub(crate) fn committed_paths(env: &TestEnv) -> String {
    env.git(&["log", "--name-only", "--format="])
}

/// A holdout check kept outside the repository, which the work fails: its command.
pub(crate) fn hidden_check(env: &TestEnv) -> String {
    let dir = env.path().join("hidden");
    fs::create_dir_all(&dir).unwrap();
    let script = dir.join("edge-cases.sh");
    fs::write(
        &script,
        "grep -q 'handles zero' answer.txt || { echo 'SECRET-DETAIL: zero is not handled'; exit 1; }\n",
    )
    .unwrap();
    format!("sh {}", script.display())
}
