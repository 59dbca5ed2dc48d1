//! What every engine test starts from: a bare repository holding a task list, clones of it as
//! the engine's "machines", and the tools found on this machine.

use std::fs;
use std::path::{Path, PathBuf};

use crate::support::TestEnv;

/// A worker's fake agent (shell built-ins only, so it runs inside `--sandbox` too): it finds its
/// task in the prompt, writes `<task>.txt` and keeps the task's promise; a task named `Stuck`
/// never does, and one named `Crash` waits (a minute at most) for a file `go` in its work tree.
/// Asked to plan, it answers with two tasks, `Alpha` and `Beta` (blocked by `Alpha`).
pub(crate) const AGENT: &str = r###"#!/bin/sh
for last in "$@"; do :; done
case "$last" in
  "# Plan the work"*)
    echo '[{"id": "alpha", "content": "Alpha", "status": "pending", "activeForm": "Doing alpha", "blockedBy": []},'
    echo ' {"id": "beta", "content": "Beta", "status": "pending", "activeForm": "Doing beta", "blockedBy": ["alpha"]}]'
    exit 0;;
esac
task=${last#*CURRENT TASK: \"}
task=${task%%\"*}
echo "$task" > "$task.txt"
echo "$task $$" >> runs.log
if [ "$task" = Stuck ]; then sleep 0.3; echo "not yet"; exit 0; fi
if [ "$task" = Crash ]; then
  i=0; while [ ! -f go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
fi
echo "<promise>READY_FOR_NEXT_TASK</promise>"
"###;

/// A test environment whose `remote.git` has `main` with `tasks` as its task list, and whose
/// `bin/` holds the fake `opencode`.
pub(crate) fn seeded(tasks: &str) -> TestEnv {
    seeded_with(&[(".ralph/ralph-tasks.md", tasks)])
}

/// Like `seeded`, with `files` (path, content) on `main` instead of a task list.
pub(crate) fn seeded_with(files: &[(&str, &str)]) -> TestEnv {
    // Under /tmp, which the workers' sandboxes hide (their agents' folder is mounted for them).
    let env = TestEnv::new_in(&std::env::temp_dir());
    env.write_executable("opencode", AGENT);
    for (path, content) in files {
        let path = env.work().join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }
    // Each agent's run log stays out of the commits.
    fs::write(env.work().join(".gitignore"), "runs.log\ngo\n").unwrap();
    env.git(&["add", "-A"]);
    env.git(&["commit", "-q", "-m", "tasks"]);
    let bare = remote(&env);
    env.git(&["clone", "-q", "--bare", ".", &bare]);
    env.git(&["-C", &bare, "config", "receive.autoGc", "false"]);
    env
}

/// The fake agents' folder, mounted into the workers' sandboxes (`RALPH_SANDBOX_MOUNT`): where
/// the tests' files are may be hidden there (`/tmp` and `/dev` are the sandbox's own).
pub(crate) fn agent_folder(env: &TestEnv) -> PathBuf {
    env.bin()
}

pub(crate) fn remote(env: &TestEnv) -> String {
    env.path().join("remote.git").to_string_lossy().into_owned()
}

/// The task list on the remote's `main`.
pub(crate) fn remote_tasks(env: &TestEnv) -> String {
    env.git(&["-C", &remote(env), "show", "main:.ralph/ralph-tasks.md"])
}

/// The claims left on the remote.
pub(crate) fn remote_claims(env: &TestEnv) -> String {
    env.git(&["-C", &remote(env), "for-each-ref", "refs/ralph/claims/"])
}

/// How many merge commits on the remote's `main` name `task` (each task is merged once).
pub(crate) fn merges_of(env: &TestEnv, task: &str) -> usize {
    let log = env.git(&["-C", &remote(env), "log", "--merges", "--format=%s", "main"]);
    log.lines().filter(|line| line.contains(task)).count()
}

/// The ralph binary under test.
pub(crate) fn ralph_bin() -> PathBuf {
    PathBuf::from(assert_cmd::cargo::cargo_bin!("ralph"))
}

/// A program on this machine: on the PATH (not a version manager's shim, which needs its own
/// environment), else in one of Python's scripts directories (where `pip` puts `act` and
/// `kubernetes-validate`, for everyone or for the user).
pub(crate) fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let on_path = std::env::split_paths(&path)
        .filter(|dir| !dir.to_string_lossy().contains("shims"))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate));
    on_path.or_else(|| {
        let ask = "import os, sysconfig\nfor scheme in (sysconfig.get_default_scheme(), os.name + '_user'):\n    print(sysconfig.get_path('scripts', scheme))";
        let output = std::process::Command::new("python3")
            .args(["-c", ask])
            .output()
            .ok()?;
        let dirs = String::from_utf8_lossy(&output.stdout).into_owned();
        dirs.lines()
            .map(|dir| Path::new(dir.trim()).join(name))
            .find(|candidate| is_executable(candidate))
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Says why a test did not run.
#[expect(clippy::print_stderr, reason = "a skipped test says why")]
pub(crate) fn skipped(why: &str) {
    eprintln!("skipped: {why}");
}
