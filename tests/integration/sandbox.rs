//! `--sandbox bwrap`: a probing agent tries to get out, and every verdict is taken on the host
//! afterwards — as root, and as an unprivileged user (`setpriv`, in a repository that user
//! owns). A control run without `--sandbox` shows the same probe does reach the host.

use std::fs;
use std::io::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

use crate::support::{Run, TestEnv};

/// The probe: it reports what it sees and tries every way out it knows, then does its work.
const PROBE: &str = r#"#!/bin/bash
[ "$1" = "--version" ] && { echo "probe 1.0"; exit 0; }
echo "SEEN GITHUB_TOKEN=${GITHUB_TOKEN:-absent} AWS=${AWS_SECRET_ACCESS_KEY:-absent} SSH=${SSH_AUTH_SOCK:-absent} KEY=${OPENAI_API_KEY:-absent}"
read=0; leaks=0
for environ in /proc/[0-9]*/environ; do
  vars=$(tr '\0' '\n' < "$environ" 2>/dev/null) || continue
  read=$((read + 1))
  case "$vars" in *ghp_secret*|*aws_secret*|*ssh-agent.sock*) leaks=$((leaks + 1)); echo "LEAK in $environ";; esac
done
echo "ENVIRONS read=$read leaked=$leaks"
echo out > "$OUTSIDE/escape.txt" 2>/dev/null
echo home > "$HOME/escape.txt" 2>/dev/null
echo etc > "$ETC_PROBE" 2>/dev/null
cat "$HOME/.ssh/id_rsa" 2>/dev/null
mount -o remount,rw / 2>/dev/null && echo REMOUNTED
mount -o remount,rw,bind / 2>/dev/null && echo REMOUNTED
echo 'echo hooked' > .git/hooks/pre-commit 2>/dev/null
echo '[evil]' >> .git/config 2>/dev/null
printf '[core]\n' > .git/config.new 2>/dev/null && mv -f .git/config.new .git/config 2>/dev/null
echo 'verify = ["true"]' >> .ralph/config.toml 2>/dev/null
printf 'x' > .ralph/cfg.new 2>/dev/null && mv -f .ralph/cfg.new .ralph/config.toml 2>/dev/null
echo "probe note" >> .ralph/progress.md
echo refreshed > "$HOME/.local/share/opencode/auth.json"
if (exec 3<>"/dev/tcp/127.0.0.1/$HOST_PORT") 2>/dev/null; then echo "DIRECT reached"; else echo "DIRECT refused"; fi
ask() {
  exec 3<>/dev/tcp/127.0.0.1/3128 || { echo "$2 no-proxy"; return; }
  printf 'CONNECT 127.0.0.1:%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n' "$1" >&3
  read -r status <&3
  echo "$2 ${status%$'\r'}"
  if [ "$2" = ALLOWED ]; then cat <&3 | head -c 200; echo; else echo "$2 SAYS $(cat <&3 | tail -n 1)"; fi
  exec 3>&-
}
ask "$ALLOWED_PORT" ALLOWED
ask "$HOST_PORT" UNLISTED
echo work > work.txt
echo "<promise>COMPLETE</promise>"
"#;

/// The one line that says why a test is skipped.
#[expect(
    clippy::print_stderr,
    reason = "the one line that explains a skipped test"
)]
fn skipped(why: &str) {
    eprintln!("{why}");
}

/// Whether bwrap can make a sandbox here; says why not when it cannot.
pub(crate) fn bwrap_works() -> bool {
    let works = crate::support::bwrap_can_sandbox();
    if !works {
        skipped(
            "skipped: bubblewrap is not installed or cannot make namespaces here (bash scripts/install-test-tools.sh)",
        );
    }
    works
}

/// A repository with the probe as `opencode`, a planted key in `$HOME/.ssh`, the agent's own
/// state folder, and a folder outside the work tree.
fn probe_env() -> TestEnv {
    let env = TestEnv::new();
    env.write_executable("opencode", PROBE);
    let home = env.path().join("home");
    fs::create_dir_all(home.join(".ssh")).unwrap();
    fs::write(home.join(".ssh/id_rsa"), "PRIVATE-KEY\n").unwrap();
    fs::create_dir_all(home.join(".local/share/opencode")).unwrap();
    fs::create_dir_all(env.path().join("outside")).unwrap();
    fs::create_dir_all(env.ralph_file("")).unwrap();
    fs::write(env.ralph_file("config.toml"), "# the user's\n").unwrap();
    // The user's hook, which ralph's commit runs: it records that it ran (in the tree) and
    // tries to write outside.
    let hook = env.work().join(".git/hooks/post-commit");
    let outside = env.path().join("outside").display().to_string();
    let body = format!(
        "#!/bin/sh\necho \"$GIT_INDEX_FILE\" > hook-ran.txt\necho x > '{outside}/hook-escape' 2>/dev/null\nexit 0\n"
    );
    fs::write(&hook, body).unwrap();
    fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    env
}

/// Listeners on the host's loopback: one the agent may reach through the proxy (it greets), one
/// it may not reach at all.
struct Listeners {
    allowed: TcpListener,
    unlisted: TcpListener,
}

impl Listeners {
    fn new() -> Self {
        let listeners = Self {
            allowed: TcpListener::bind("127.0.0.1:0").unwrap(),
            unlisted: TcpListener::bind("127.0.0.1:0").unwrap(),
        };
        listeners.unlisted.set_nonblocking(true).unwrap();
        let greeter = listeners.allowed.try_clone().unwrap();
        std::thread::spawn(move || {
            for mut stream in greeter.incoming().flatten() {
                let _ = stream.write_all(b"UPSTREAM-HELLO");
            }
        });
        listeners
    }

    fn port(listener: &TcpListener) -> String {
        listener.local_addr().unwrap().port().to_string()
    }
}

/// Runs the probe once (as `nobody` when `unprivileged`) with `args`.
/// Where the probe tries to write in `/etc` (a name of its own), or, for a run that is not
/// sandboxed, a harmless place.
fn etc_probe(env: &TestEnv, sandboxed: bool) -> std::path::PathBuf {
    if sandboxed {
        let name = env
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        Path::new("/etc").join(name)
    } else {
        env.path().join("etc-probe")
    }
}

fn probe(env: &TestEnv, listeners: &Listeners, args: &[&str], unprivileged: bool) -> Run {
    let mut all = vec![
        "Probe",
        "--max-iterations",
        "1",
        "--pause",
        "0",
        "--output-format",
        "text",
    ];
    all.extend_from_slice(args);
    let outside = env.path().join("outside");
    let (allowed, unlisted) = (
        Listeners::port(&listeners.allowed),
        Listeners::port(&listeners.unlisted),
    );
    if unprivileged {
        chown_nobody(env.path());
    }
    env.run_with(&all, |command| {
        command
            .env("OUTSIDE", &outside)
            .env("ETC_PROBE", etc_probe(env, !args.is_empty()))
            .env("HOST_PORT", &unlisted)
            .env("ALLOWED_PORT", &allowed)
            .env("GITHUB_TOKEN", "ghp_secret")
            .env("AWS_SECRET_ACCESS_KEY", "aws_secret")
            .env("SSH_AUTH_SOCK", "/run/ssh-agent.sock")
            .env("OPENAI_API_KEY", "sk-probe");
        if unprivileged {
            let program = command.get_program().to_owned();
            let mut wrapped = Command::new("setpriv");
            wrapped
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(program);
            wrapped.args(command.get_args());
            wrapped.current_dir(env.work()).env_clear();
            for (name, value) in command.get_envs() {
                if let Some(value) = value {
                    wrapped.env(name, value);
                }
            }
            wrapped.stdin(std::process::Stdio::null());
            *command = wrapped;
        }
    })
}

fn chown_nobody(path: &Path) {
    let status = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// The names of the files in `dir`.
fn names_in(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Every verdict of a sandboxed probe run, taken on the host.
fn assert_contained(env: &TestEnv, run: &Run, listeners: &Listeners) {
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), 0, "{said}");
    let outside = env.path().join("outside");
    let escaped = names_in(&outside);
    assert!(
        escaped.is_empty(),
        "nothing the agent or the git hook wrote outside the tree is there: {escaped:?}\n{said}"
    );
    let hook = fs::read_to_string(env.work().join("hook-ran.txt")).unwrap_or_default();
    assert!(
        hook.trim().ends_with(".git/index"),
        "the user's hook ran, with git's variables: {hook:?}"
    );
    assert!(
        !env.path().join("home/escape.txt").exists(),
        "$HOME is private"
    );
    let etc = etc_probe(env, true);
    let escaped = etc.exists();
    let _ = fs::remove_file(&etc);
    assert!(!escaped, "/etc is read-only");
    assert!(
        !said.contains("PRIVATE-KEY"),
        "the planted key is unreadable: {said}"
    );
    assert!(!said.contains("REMOUNTED"), "no remount: {said}");
    assert!(
        said.contains("SEEN GITHUB_TOKEN=absent AWS=absent SSH=absent KEY=sk-probe"),
        "only the agent's own key passes: {said}"
    );
    let environs = said
        .lines()
        .find_map(|line| line.strip_prefix("ENVIRONS read="))
        .unwrap_or_else(|| panic!("the probe read the processes' environments: {said}"));
    let (read, leaked) = environs.split_once(" leaked=").unwrap();
    assert!(
        read.parse::<u32>().unwrap() >= 2 && leaked == "0",
        "no process the agent can see (pid 1 included) holds a secret in /proc/*/environ: {said}"
    );
    let hooks = env.work().join(".git/hooks/pre-commit");
    assert!(!hooks.exists(), "no hook was planted");
    let config = fs::read_to_string(env.work().join(".git/config")).unwrap();
    assert!(
        !config.contains("[evil]") && config.contains("[core]"),
        "{config}"
    );
    assert_eq!(
        fs::read_to_string(env.ralph_file("config.toml")).unwrap(),
        "# the user's\n",
        ".ralph/config.toml is as the user left it"
    );
    let progress = fs::read_to_string(env.ralph_file("progress.md")).unwrap();
    assert!(
        progress.contains("probe note"),
        "progress.md can be appended: {progress}"
    );
    let auth = env.path().join("home/.local/share/opencode/auth.json");
    assert_eq!(
        fs::read_to_string(auth).unwrap_or_default(),
        "refreshed\n",
        "the agent's refreshed login is kept"
    );
    assert!(
        said.contains("DIRECT refused"),
        "no route to the host's loopback: {said}"
    );
    assert!(
        listeners.unlisted.accept().is_err(),
        "the unlisted listener was never reached"
    );
    assert!(said.contains("ALLOWED HTTP/1.1 200"), "{said}");
    assert!(
        said.contains("UPSTREAM-HELLO"),
        "the allowed upstream answered through the proxy: {said}"
    );
    assert!(said.contains("UNLISTED HTTP/1.1 403"), "{said}");
    let port = Listeners::port(&listeners.unlisted);
    // The agent is told the value that allows that very port (a bare host allows 80 and 443).
    assert!(
        said.contains(&format!(
            "UNLISTED SAYS ralph's sandbox does not let the agent reach 127.0.0.1:{port}; the user can allow it with --sandbox-allow 127.0.0.1:{port}"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "🚧 blocked: 127.0.0.1:{port} ×1 — allow with --sandbox-allow 127.0.0.1:{port}"
        )),
        "{said}"
    );
    let history = env.history();
    assert_eq!(
        history["iterations"][0]["sandbox_blocked"][format!("127.0.0.1:{port}")],
        1,
        "{history}"
    );
    assert_eq!(
        fs::read_to_string(env.work().join("work.txt")).unwrap(),
        "work\n"
    );
    let committed = env.git(&[
        "-c",
        "safe.directory=*",
        "show",
        "--name-only",
        "--format=%s",
        "HEAD",
    ]);
    assert!(
        committed.contains("work.txt"),
        "the agent's work is committed: {committed}"
    );
}

fn sandboxed_args(env: &TestEnv, listeners: &Listeners) -> Vec<String> {
    vec![
        "--sandbox".into(),
        "bwrap".into(),
        "--sandbox-mount".into(),
        env.bin().to_string_lossy().into_owned(),
        "--sandbox-allow".into(),
        format!("127.0.0.1:{}", Listeners::port(&listeners.allowed)),
        "--sandbox-env".into(),
        "HOST_PORT".into(),
        "--sandbox-env".into(),
        "ALLOWED_PORT".into(),
        "--sandbox-env".into(),
        "OUTSIDE".into(),
        "--sandbox-env".into(),
        "ETC_PROBE".into(),
    ]
}

#[test]
fn a_sandboxed_agent_as_root_reaches_only_its_tree_its_key_and_the_allowed_host() {
    if !bwrap_works() {
        return;
    }
    probe_sandboxed(false);
}

/// Runs the probe in `--sandbox bwrap` (as nobody when `unprivileged`) and takes every verdict.
fn probe_sandboxed(unprivileged: bool) {
    let env = probe_env();
    let listeners = Listeners::new();
    let args = sandboxed_args(&env, &listeners);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = probe(&env, &listeners, &args, unprivileged);
    assert_contained(&env, &run, &listeners);
}

#[test]
fn a_sandboxed_agent_of_an_unprivileged_user_is_held_the_same() {
    if !bwrap_works() {
        return;
    }
    if !nix::unistd::geteuid().is_root()
        || Command::new("setpriv").arg("--version").output().is_err()
    {
        skipped("skipped: the unprivileged run needs root and setpriv to become nobody");
        return;
    }
    probe_sandboxed(true);
}

#[test]
fn without_a_sandbox_the_same_probe_reaches_the_host() {
    let env = probe_env();
    let listeners = Listeners::new();
    let run = probe(&env, &listeners, &[], false);
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert!(env.path().join("outside/escape.txt").exists(), "{said}");
    assert!(
        env.path().join("outside/hook-escape").exists(),
        "the hook ran outside: {said}"
    );
    assert!(env.path().join("home/escape.txt").exists(), "{said}");
    assert!(said.contains("PRIVATE-KEY"), "{said}");
    assert!(said.contains("SEEN GITHUB_TOKEN=ghp_secret"), "{said}");
    assert!(
        said.contains("LEAK in /proc/"),
        "the environ probe finds secrets: {said}"
    );
    assert!(said.contains("DIRECT reached"), "{said}");
    assert!(
        listeners.unlisted.accept().is_ok(),
        "the host's listener was reached"
    );
    assert!(env.work().join(".git/hooks/pre-commit").exists(), "{said}");
}

/// A task loop's agent: writes its task's file in its own worktree, and tries to write into the
/// base's work tree and into every other task's worktree.
const TASK_PROBE: &str = r#"#!/bin/bash
[ "$1" = "--version" ] && { echo "probe 1.0"; exit 0; }
for last in "$@"; do :; done
task=${last#*CURRENT TASK: \"}
task=${task%%\"*}
echo "$task" > "$task.txt"
echo intruder > "$MAIN/intruder-$task.txt" 2>/dev/null
for tree in "$MAIN"/.ralph/worktrees/*/; do
  [ "$tree" -ef . ] || echo intruder > "$tree/intruder-$task.txt" 2>/dev/null
done
sleep 0.3
echo "<promise>READY_FOR_NEXT_TASK</promise>"
"#;

/// A repository with the task probe as `opencode` and a task list of `ids` (each its own text).
fn task_env(ids: &[&str]) -> TestEnv {
    let env = TestEnv::new();
    env.write_executable("opencode", TASK_PROBE);
    fs::create_dir_all(env.ralph_file("")).unwrap();
    let list: String = ids
        .iter()
        .map(|id| format!("- [ ] {id}\n  - id: {id}\n"))
        .collect();
    fs::write(env.ralph_file("ralph-tasks.md"), list).unwrap();
    env
}

#[test]
fn parallel_sandboxed_agents_each_write_their_own_worktree_and_nothing_else() {
    if !bwrap_works() {
        return;
    }
    let env = task_env(&["alpha", "bravo"]);
    let bin = env.bin().to_string_lossy().into_owned();
    let run = env.run_loop_with(
        &[
            "Build",
            "--parallel",
            "2",
            "--sandbox",
            "bwrap",
            "--sandbox-mount",
            &bin,
            "--sandbox-env",
            "MAIN",
        ],
        |command| {
            command.env("MAIN", env.work());
        },
    );
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), 0, "{said}");
    for id in ["alpha", "bravo"] {
        let file = fs::read_to_string(env.work().join(format!("{id}.txt"))).unwrap();
        assert_eq!(file.trim(), id, "{id}'s work is merged");
    }
    let everything = env.git(&["log", "--all", "--name-only", "--format="]);
    assert!(
        !everything.contains("intruder"),
        "no task wrote outside its worktree: {everything}"
    );
    let left: Vec<String> = (names_in(&env.work()).into_iter())
        .filter(|name| name.starts_with("intruder"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(
        !said.contains("no sandbox"),
        "a sandboxed run is not warned about: {said}"
    );
}

/// Whether ralph can make a memory cgroup here (says why not when it cannot).
fn memory_cgroups_work() -> bool {
    let probe = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        Path::new("/sys/fs/cgroup").join(format!("ralph-test-{}", std::process::id()))
    } else {
        Path::new("/sys/fs/cgroup/memory").join(format!("ralph-test-{}", std::process::id()))
    };
    let works = fs::create_dir(&probe).is_ok();
    let _ = fs::remove_dir(&probe);
    if !works {
        skipped("skipped: no cgroup can be made here (not root, or cgroupfs is read-only)");
    }
    works
}

#[test]
fn an_agent_past_the_memory_limit_is_reported_out_of_memory() {
    if !bwrap_works() || !memory_cgroups_work() {
        return;
    }
    let env = TestEnv::new();
    env.write_executable(
        "opencode",
        "#!/bin/bash\n[ \"$1\" = --version ] && exit 0\nx=$(head -c 300000000 /dev/zero | tr '\\0' a)\necho \"kept ${#x}\"\n",
    );
    let bin = env.bin().to_string_lossy().into_owned();
    let run = env.run_loop(&[
        "Grow",
        "--max-iterations",
        "1",
        "--sandbox",
        "bwrap",
        "--sandbox-mount",
        &bin,
        "--sandbox-memory",
        "64M",
    ]);
    let said = format!("{}{}", run.stdout(), run.stderr());
    assert!(
        !said.contains("kept 300000000"),
        "the allocation was stopped: {said}"
    );
    assert!(
        said.contains(
            "💥 Iteration 1: the agent ran out of memory: the sandbox allows 64M (--sandbox-memory)"
        ),
        "{said}"
    );
    assert_eq!(env.history()["iterations"][0]["out_of_memory"], true);
}

/// One line on stderr, exit 1, and no agent run.
fn refused_in_one_line(env: &TestEnv, args: &[&str], expected: &str) {
    let mut all = vec!["Probe", "--max-iterations", "1"];
    all.extend_from_slice(args);
    let run = env.run_loop(&all);
    run.assert_code(1);
    let stderr = run.stderr();
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains(expected), "{stderr}");
    assert_eq!(env.agent_calls(), 0, "no agent ran");
    assert!(
        !env.ralph_file("ralph-history.json").exists(),
        "no iteration"
    );
}

#[test]
fn a_sandbox_that_cannot_work_is_one_line_before_any_iteration() {
    let env = TestEnv::new();
    if which_podman() {
        skipped("note: podman is installed here, so its missing-backend line is not checked");
    } else {
        refused_in_one_line(
            &env,
            &["--sandbox", "podman", "--sandbox-image", "img"],
            "Error: --sandbox: podman is not installed (apt-get install podman); or run without --sandbox",
        );
    }
    let prompt_first = env.run(&["--sandbox", "Probe"]);
    prompt_first.assert_code(1);
    assert!(
        prompt_first
            .stderr()
            .contains("--sandbox takes an optional backend, so put the prompt before it"),
        "{}",
        prompt_first.stderr()
    );
    // A missing bwrap is refused first; the lines below need one.
    if !bwrap_works() {
        return;
    }
    let missing = env.path().join("missing");
    refused_in_one_line(
        &env,
        &[
            "--sandbox",
            "bwrap",
            "--sandbox-mount",
            &missing.to_string_lossy(),
        ],
        &format!(
            "--sandbox-mount: {} does not exist; create it or leave the mount out",
            missing.display()
        ),
    );
    let agent = env.bin().join("opencode");
    refused_in_one_line(
        &env,
        &["--sandbox", "bwrap"],
        &format!(
            "--sandbox: the agent's program {} cannot be seen inside the sandbox",
            agent.display()
        ),
    );
}

fn which_podman() -> bool {
    Command::new("podman").arg("--version").output().is_ok()
}

/// A command (`name`) that writes into `outside` and fails when any process it can see holds a
/// secret.
fn escape_attempt(outside: &Path, name: &str) -> String {
    format!(
        "echo x > '{}/{name}' 2>/dev/null; if grep -qs ghp_secret /proc/[0-9]*/environ; then echo 'LEAK in {name}' >&2; exit 1; fi; true",
        outside.display()
    )
}

/// Git hooks of the work tree: each `(name, shell body)`.
fn install_git_hooks(env: &TestEnv, hooks: &[(&str, String)]) {
    for (name, body) in hooks {
        let hook = env.work().join(".git/hooks").join(name);
        fs::write(&hook, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
}

#[test]
fn verify_commands_the_merge_gate_and_the_merges_hooks_run_inside_the_sandbox() {
    if !bwrap_works() {
        return;
    }
    let env = task_env(&["alpha"]);
    let outside = env.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    let escape = |name: &str| escape_attempt(&outside, name);
    // The user's hooks, run by every commit of the run, the merges' included.
    install_git_hooks(
        &env,
        &[
            ("post-commit", escape("hook")),
            ("pre-commit", escape("pre-hook")),
        ],
    );
    let bin = env.bin().to_string_lossy().into_owned();
    let gate = escape("gate");
    let run = env.run_loop_with(
        &[
            "Build",
            "--parallel",
            "1",
            "--sandbox",
            "bwrap",
            "--sandbox-mount",
            &bin,
            "--verify",
            &gate,
        ],
        |command| {
            command
                .env("MAIN", env.work())
                .env("GITHUB_TOKEN", "ghp_secret");
        },
    );
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    assert!(env.work().join("alpha.txt").exists(), "the task was merged");
    env.write_executable(
        "opencode",
        "#!/bin/sh\n[ \"$1\" = --version ] && exit 0\necho '<promise>COMPLETE</promise>'\n",
    );
    let check = escape("check");
    let run = env.run_loop_with(
        &[
            "Again",
            "--max-iterations",
            "1",
            "--sandbox",
            "bwrap",
            "--sandbox-mount",
            &bin,
            "--verify",
            &check,
        ],
        |command| {
            command.env("GITHUB_TOKEN", "ghp_secret");
        },
    );
    run.assert_code(0);
    let history = env.history();
    let last = history["iterations"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last["verification"][0]["command"],
        check.as_str(),
        "{history}"
    );
    assert_eq!(last["verification"][0]["passed"], true, "{history}");
    let escaped = names_in(&outside);
    assert!(
        escaped.is_empty(),
        "the commands wrote outside the tree: {escaped:?}"
    );
}

#[test]
fn a_sandbox_wrapper_is_put_before_the_agents_command() {
    let env = TestEnv::new();
    env.write_executable(
        "opencode",
        "#!/bin/sh\n[ \"$1\" = --version ] && exit 0\necho \"$WRAPPED_BY\" > wrapped.txt\necho '<promise>COMPLETE</promise>'\n",
    );
    let run = env.run_loop(&[
        "Work",
        "--max-iterations",
        "1",
        "--sandbox-wrapper",
        "env WRAPPED_BY=the-wrapper",
    ]);
    assert_eq!(run.code(), 0, "{}{}", run.stdout(), run.stderr());
    let wrapped = fs::read_to_string(env.work().join("wrapped.txt")).unwrap();
    assert_eq!(wrapped.trim(), "the-wrapper");
    let both = env.run_loop(&["Work", "--sandbox", "bwrap", "--sandbox-wrapper", "env"]);
    both.assert_code(1);
    assert!(
        both.stderr().contains(
            "--sandbox-wrapper replaces a sandbox backend: give it or --sandbox, not both"
        ),
        "{}",
        both.stderr()
    );
}

/// A folder holding a fake `bwrap` that says it is `version`.
fn fake_bwrap(env: &TestEnv, version: &str) -> std::path::PathBuf {
    let folder = env.path().join(format!("bwrap-{version}"));
    fs::create_dir_all(&folder).unwrap();
    let bwrap = folder.join("bwrap");
    fs::write(&bwrap, format!("#!/bin/sh\necho 'bubblewrap {version}'\n")).unwrap();
    fs::set_permissions(&bwrap, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    folder
}

/// Codex's own sandbox cannot use a bubblewrap older than 0.9: ralph runs Codex with the one
/// Codex ships first on its `PATH`, or refuses to start, saying what to do — never a loop whose
/// every write fails without a word. A new enough one is left alone.
#[test]
fn codex_gets_a_bwrap_its_sandbox_can_use_or_the_run_says_what_to_do() {
    let env = TestEnv::new();
    env.agent_script(None, "echo \"PATH=$PATH\" > \"$dir/path.$n\"\n");
    let run_with_bwrap = |version: &str| {
        let folder = fake_bwrap(&env, version);
        env.run_with(
            &[
                "Build",
                "--agent",
                "codex",
                "--max-iterations",
                "1",
                "--pause",
                "0",
                "--output-format",
                "text",
            ],
            |command| {
                command.env(
                    "PATH",
                    format!(
                        "{}:{}:/usr/local/bin:/usr/bin:/bin",
                        folder.display(),
                        env.bin().display()
                    ),
                );
            },
        )
    };
    let shipped = env.path().join("codex-resources");
    // Too old, and Codex ships one: it goes first on Codex's PATH.
    let run = run_with_bwrap("0.8.0");
    assert_eq!(run.code(), 2, "{}{}", run.stdout(), run.stderr());
    assert!(
        run.stdout()
            .contains("🧱 Codex's sandbox needs bubblewrap 0.9 or newer"),
        "{}",
        run.stdout()
    );
    let path = env.agent_file("path.1");
    assert!(
        path.starts_with(&format!(
            "PATH={}:",
            fs::canonicalize(&shipped).unwrap().display()
        )),
        "{path}"
    );
    // New enough: nothing changes.
    let run = run_with_bwrap("0.11.0");
    assert!(!run.stdout().contains("🧱"), "{}", run.stdout());
    assert!(!env.agent_file("path.2").contains("codex-resources"));
    // Too old, and none shipped: refused before any agent call, saying what to do.
    fs::remove_dir_all(&shipped).unwrap();
    let run = run_with_bwrap("0.8.0");
    run.assert_code(1);
    let said = run.stderr();
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert!(
        said.contains("Codex's own sandbox (--sandbox workspace-write) cannot use")
            && said.contains("bubblewrap 0.8.0; it needs 0.9 or newer")
            && said.contains("or run ralph with --sandbox"),
        "{said}"
    );
    assert_eq!(env.agent_calls(), 2, "no agent ran");
}
