//! Runs of several task loops: `--parallel` runs (their fake agent and set-up), and several
//! "machines" — clones of one bare repository in a test's environment — with `ralph --worker`
//! started on them.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::support::{TestEnv, wait_output};

/// A fake agent for workers (shell built-ins only): it finds its task in the prompt, records the
/// task and the machine (the clone's directory) when it starts and ends, writes `<task>.txt`, sources
/// `$FAKE_AGENT_DIR/script` if there is one, and keeps the task's promise.
pub(crate) const WORKER_AGENT: &str = r#"#!/bin/sh
dir=${FAKE_AGENT_DIR:?}
for last in "$@"; do :; done
task=${last#*CURRENT TASK: \"}
task=${task%%\"*}
id=
set -f; for word in $task; do id=${id:+${id}_}$word; done; set +f
machine=${PWD%%/.ralph/worktrees/*}
machine=${machine##*/}
echo "start $id $machine" >> "$dir/events"
echo "$task" > "$id.txt"
if [ -f "$dir/script" ]; then . "$dir/script"; fi
sleep 0.05
echo "end $id $machine" >> "$dir/events"
echo "<promise>READY_FOR_NEXT_TASK</promise>"
"#;

/// A bare repository `remote.git` whose `main` holds `tasks`, and one clone per machine.
pub(crate) fn machines(tasks: &str, names: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_executable("opencode", WORKER_AGENT);
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.ralph_file("ralph-tasks.md"), tasks).unwrap();
    env.git(&["add", "-A"]);
    env.git(&["commit", "-q", "-m", "tasks"]);
    let bare = remote(&env);
    env.git(&["clone", "-q", "--bare", ".", &bare]);
    // Every update of the base is logged, so the test can see it was never rewritten.
    env.git(&["-C", &bare, "config", "core.logAllRefUpdates", "always"]);
    // A local push runs the remote's `git maintenance` unless told not to (the test
    // environment's configuration does not cross to the other repository).
    env.git(&["-C", &bare, "config", "receive.autoGc", "false"]);
    for name in names {
        let path = env.path().join(name);
        env.git(&["clone", "-q", &bare, &path.to_string_lossy()]);
    }
    env
}

pub(crate) fn remote(env: &TestEnv) -> String {
    env.path().join("remote.git").to_string_lossy().into_owned()
}

pub(crate) fn machine(env: &TestEnv, name: &str) -> PathBuf {
    env.path().join(name)
}

/// `ralph --worker ARGS` on a machine, its output captured.
pub(crate) fn start_worker(env: &TestEnv, name: &str, args: &[&str]) -> Child {
    start_worker_with(env, name, args, &[])
}

/// [`start_worker`] with the variables `vars` set (an engine job's, say).
pub(crate) fn start_worker_with(
    env: &TestEnv,
    name: &str,
    args: &[&str],
    vars: &[(&str, &str)],
) -> Child {
    env.ralph()
        .current_dir(machine(env, name))
        .args(["--pause", "0", "--worker"])
        .args(args)
        .env("RALPH_WORKER_POLL_MS", "250")
        .envs(vars.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a worker; its exit code, stdout and stderr.
pub(crate) fn finish(mut child: Child) -> (Option<i32>, String, String) {
    let output = wait_output(&mut child, Duration::from_secs(90));
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Three machines sharing the tasks `solo` and `duo`, with a worker on `m1` and one on `m2`
/// (each with the variables of `jobs`) each holding its task (their agent waits for
/// `$FAKE_AGENT_DIR/go`); `m3` is left to watch.
pub(crate) fn two_workers_holding_their_tasks(jobs: [&[(&str, &str)]; 2]) -> (TestEnv, Vec<Child>) {
    let env = machines(
        "- [ ] Solo\n  - id: solo\n- [ ] Duo\n  - id: duo\n",
        &["m1", "m2", "m3"],
    );
    let hold = r#"touch "$dir/held-$machine"
i=0; while [ ! -f "$dir/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
"#;
    fs::write(env.agent_dir().join("script"), hold).unwrap();
    let workers = ["m1", "m2"]
        .iter()
        .zip(jobs)
        .map(|(name, vars)| {
            let worker = start_worker_with(&env, name, &[], vars);
            let held = env.agent_dir().join(format!("held-{name}"));
            crate::support::wait_for_file(&held, Duration::from_secs(30));
            worker
        })
        .collect();
    (env, workers)
}

/// Lets the workers of [`two_workers_holding_their_tasks`] finish, each with exit 0.
pub(crate) fn release_workers(env: &TestEnv, workers: Vec<Child>) {
    fs::write(env.agent_dir().join("go"), "").unwrap();
    for worker in workers {
        let (code, stdout, stderr) = finish(worker);
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    }
}

/// Each agent appends a note to its copy of the progress log and a follow-up task to its copy of
/// the task list (the follow-ups, run in turn, add nothing).
pub(crate) const NOTES_AND_FOLLOW_UPS: &str = r#"
case "$task" in
  Follow-up*) ;;
  *) printf '\nLEARNED: the API needs header X-Key (%s)\n' "$task" >> .ralph/progress.md
     printf -- '- [ ] Follow-up found by %s\n' "$task" >> .ralph/ralph-tasks.md ;;
esac
"#;

/// For the parallel agents: each task's first call records its prompt, leaves `waiting.<id>` and
/// waits (30 s at most) for the test's `go` before it ends without the promise; its second call
/// records its prompt and goes on to the promise. Calls are counted per task in `calls.<id>`.
pub(crate) const STEERED: &str = r#"
n=0
[ -f "$dir/calls.$id" ] && read -r n < "$dir/calls.$id"
n=$((n + 1))
echo "$n" > "$dir/calls.$id"
printf '%s' "$last" > "$dir/prompt.$id.$n"
if [ "$n" -eq 1 ]; then
  touch "$dir/waiting.$id"
  i=0; while [ ! -f "$dir/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
  echo "more to do"
  exit 0
fi
"#;

/// A fake agent for parallel runs: it finds its task in the prompt (the `CURRENT TASK` line),
/// records when it starts and ends (appends are atomic, so the file keeps their order), writes
/// `<task>.txt`, sources `$FAKE_AGENT_DIR/script` if there is one, and keeps the task's promise.
/// Shell built-ins only (every parallel test runs it many times): the task's words joined by `_`
/// are its id.
pub(crate) const PARALLEL_AGENT: &str = r#"#!/bin/sh
dir=${FAKE_AGENT_DIR:?}
for last in "$@"; do :; done
task=${last#*CURRENT TASK: \"}
task=${task%%\"*}
id=
set -f; for word in $task; do id=${id:+${id}_}$word; done; set +f
echo "start $id" >> "$dir/events"
echo "$task" > "$id.txt"
if [ -f "$dir/script" ]; then . "$dir/script"; fi
sleep 0.3
echo "end $id" >> "$dir/events"
echo "<promise>READY_FOR_NEXT_TASK</promise>"
"#;

pub(crate) fn setup(tasks: &str) -> TestEnv {
    let env = TestEnv::new();
    env.write_executable("opencode", PARALLEL_AGENT);
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.ralph_file("ralph-tasks.md"), tasks).unwrap();
    env
}
