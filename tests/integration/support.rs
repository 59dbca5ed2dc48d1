//! The test harness: one temporary directory per test holding a git work tree (`work/`), the
//! fake agents (`bin/`), a HOME (`home/`) and the fake agents' records (`agent/`).

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub(crate) const FAKE_AGENT: &str = include_str!("../fixtures/fake-agent.sh");

pub(crate) struct TestEnv {
    root: tempfile::TempDir,
}

/// The file whose presence makes [`TestEnv::ralph`] start ralph ignoring signals.
const IGNORING: &str = "start-ignoring-signals";

impl TestEnv {
    /// From now on, ralph starts with SIGHUP, SIGINT, SIGQUIT and SIGTERM ignored.
    pub(crate) fn start_ignoring_signals(&self) {
        fs::write(self.root.path().join(IGNORING), "").unwrap();
    }

    /// A fresh environment with an initial commit, so every iteration's commit is countable.
    pub(crate) fn new() -> Self {
        Self::new_in(scratch())
    }

    /// A fresh environment under `dir` (a sandboxed agent cannot see `/dev/shm`, where
    /// `new` makes them when it can).
    pub(crate) fn new_in(dir: &Path) -> Self {
        let root = tempfile::Builder::new()
            .prefix("ralph-test")
            .tempdir_in(dir)
            .unwrap();
        let env = Self { root };
        for dir in ["work", "bin", "home", "agent"] {
            fs::create_dir_all(env.root.path().join(dir)).unwrap();
        }
        for name in ["opencode", "claude", "codex"] {
            env.write_executable(name, FAKE_AGENT);
        }
        // Where Codex keeps the bwrap it ships (beside `bin/`, as a native Codex install has it):
        // the fake Codex runs with it when the host's bubblewrap is too old for Codex's sandbox.
        let resources = env.root.path().join("codex-resources");
        fs::create_dir_all(&resources).unwrap();
        let bwrap = resources.join("bwrap");
        fs::write(
            &bwrap,
            "#!/bin/sh
exit 1
",
        )
        .unwrap();
        fs::set_permissions(&bwrap, fs::Permissions::from_mode(0o755)).unwrap();
        copy_tree(template(), &env.work());
        env
    }

    pub(crate) fn path(&self) -> &Path {
        self.root.path()
    }

    pub(crate) fn work(&self) -> PathBuf {
        self.root.path().join("work")
    }

    pub(crate) fn bin(&self) -> PathBuf {
        self.root.path().join("bin")
    }

    pub(crate) fn agent_dir(&self) -> PathBuf {
        self.root.path().join("agent")
    }

    /// Waits until the fake agent has written its `ready` marker and ralph has recorded the
    /// agent's process group in the state (ralph records it just after the spawn, so a test that
    /// looks at `.ralph/` right after `ready` could otherwise see the state mid-update).
    pub(crate) fn wait_for_agent(&self) {
        wait_for_file(&self.agent_dir().join("ready"), Duration::from_secs(30));
        wait_for_text(&self.ralph_file("ralph-loop.state.json"), "\"agentGroup\"");
    }

    pub(crate) fn ralph_file(&self, name: &str) -> PathBuf {
        self.work().join(".ralph").join(name)
    }

    /// Asserts that no task branch (`ralph/*`) and no task worktree is left; `context` starts
    /// each failure message.
    pub(crate) fn assert_no_task_leftovers(&self, context: &str) {
        assert_eq!(
            self.git(&["branch", "--list", "ralph/*"]).trim(),
            "",
            "{context}no task branch left"
        );
        let worktrees = fs::read_dir(self.ralph_file("worktrees"))
            .map(|dir| {
                dir.flatten()
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(worktrees, 0, "{context}no task worktree left");
    }

    pub(crate) fn write_executable(&self, name: &str, content: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        let path = self.bin().join(name);
        fs::write(&path, content).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Shell code the fake agent sources on call `n` (`None`: every call without its own).
    pub(crate) fn agent_script(&self, n: Option<u32>, code: &str) -> &Self {
        let name = n.map_or_else(|| "script".to_owned(), |n| format!("script.{n}"));
        fs::write(self.agent_dir().join(name), code).unwrap();
        self
    }

    /// How many times any fake agent ran.
    pub(crate) fn agent_calls(&self) -> u32 {
        fs::read_to_string(self.agent_dir().join("count"))
            .map(|s| s.trim().parse().unwrap())
            .unwrap_or(0)
    }

    pub(crate) fn agent_argv(&self, n: u32) -> Vec<String> {
        let raw = fs::read(self.agent_dir().join(format!("argv.{n}"))).unwrap();
        let text = String::from_utf8(raw).unwrap();
        let mut args: Vec<String> = text.split('\0').map(str::to_owned).collect();
        args.pop();
        args
    }

    pub(crate) fn agent_prompt(&self, n: u32) -> String {
        fs::read_to_string(self.agent_dir().join(format!("prompt.{n}"))).unwrap()
    }

    pub(crate) fn agent_file(&self, name: &str) -> String {
        fs::read_to_string(self.agent_dir().join(name)).unwrap()
    }

    /// The environment every ralph (and fake agent) runs with.
    fn apply_env(&self, command: &mut Command) {
        command
            .current_dir(self.work())
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", self.bin().display()),
            )
            .env("HOME", self.path().join("home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            // No `git maintenance run --auto` after every commit and fetch: a test repository
            // never needs it, and it is two processes each time.
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "maintenance.auto")
            .env("GIT_CONFIG_VALUE_0", "false")
            .env("GIT_AUTHOR_NAME", "ralph-test")
            .env("GIT_AUTHOR_EMAIL", "test@example.invalid")
            .env("GIT_COMMITTER_NAME", "ralph-test")
            .env("GIT_COMMITTER_EMAIL", "test@example.invalid")
            .env("NO_COLOR", "1")
            .env("FAKE_AGENT_DIR", self.agent_dir())
            .env("RALPH_HEARTBEAT_MS", "60000")
            .env("RALPH_KILL_GRACE", "1s")
            .env("RALPH_LEAK_TIMEOUT_MS", "300")
            .env("RALPH_ERROR_PAUSE_MS", "50")
            .env("RALPH_LEFTOVER_GRACE_MS", "1000");
    }

    /// A `ralph` command with a hermetic environment and a null stdin.
    pub(crate) fn ralph(&self) -> Command {
        let ralph = assert_cmd::cargo::cargo_bin!("ralph");
        let mut command = if self.root.path().join(IGNORING).exists() {
            // As a script's background job or `nohup` starts it: these signals ignored.
            let mut shell = Command::new("sh");
            shell.args(["-c", "trap '' HUP INT QUIT TERM; exec \"$0\" \"$@\""]);
            shell.arg(ralph);
            shell
        } else {
            Command::new(ralph)
        };
        self.apply_env(&mut command);
        command.stdin(Stdio::null());
        command
    }

    /// Starts `ralph ARGS` in the background with its output discarded (kill and crash tests).
    pub(crate) fn spawn_quiet(&self, args: &[&str]) -> std::process::Child {
        self.ralph()
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    pub(crate) fn git(&self, args: &[&str]) -> String {
        let mut command = Command::new("git");
        self.apply_env(&mut command);
        let output = command.args(args).output().unwrap();
        assert!(
            output.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Runs git, which may fail (a merge that conflicts): whether it succeeded.
    pub(crate) fn try_git(&self, args: &[&str]) -> bool {
        let mut command = Command::new("git");
        self.apply_env(&mut command);
        command
            .args(args)
            .env("GIT_EDITOR", "true")
            .output()
            .unwrap()
            .status
            .success()
    }

    pub(crate) fn commit_count(&self) -> usize {
        self.git(&["rev-list", "--count", "HEAD"])
            .trim()
            .parse()
            .unwrap()
    }

    pub(crate) fn history(&self) -> serde_json::Value {
        serde_json::from_str(&fs::read_to_string(self.ralph_file("ralph-history.json")).unwrap())
            .unwrap()
    }
}

/// Where the tests' temporary directories go: the unit tests' rule (`src/testing.rs`), one piece
/// of code for both.
#[allow(
    dead_code,
    reason = "the integration tests use only its scratch folder"
)]
#[path = "../../src/testing.rs"]
mod unit_testing;

pub(crate) use unit_testing::scratch;

/// A repository with one commit (`README.md`, "initial"), made once per test run; every test
/// starts from a copy of it (three git processes fewer per test).
fn template() -> &'static Path {
    static TEMPLATE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            // Under cargo's scratch directory for tests (a static is never dropped).
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("ralph-template-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            let env = TestEnv {
                root: tempfile::Builder::new()
                    .prefix("ralph-test")
                    .tempdir_in(scratch())
                    .unwrap(),
            };
            let work = env.work();
            fs::create_dir_all(&work).unwrap();
            env.git(&["init", "-q", "--template=", "-b", "main"]);
            fs::create_dir_all(work.join(".git/hooks")).unwrap();
            fs::write(work.join("README.md"), "project\n").unwrap();
            env.git(&["add", "-A"]);
            env.git(&["commit", "-q", "-m", "initial"]);
            copy_tree(&work, &dir);
            dir
        })
        .as_path()
}

/// Copies the files and directories under `from` into `to` (created if needed).
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Runs a command to completion (stdin: `/dev/null`), failing the test if it takes longer than
/// `limit`.
pub(crate) fn run_with_deadline(command: &mut Command, limit: Duration) -> Output {
    run_with_input(command, b"", limit)
}

/// [`run_with_deadline`] with `input` written to the command's stdin, then closed (no input:
/// `/dev/null`, as a run started from a script has — never a pipe that a loaded machine might
/// close late).
pub(crate) fn run_with_input(command: &mut Command, input: &[u8], limit: Duration) -> Output {
    let mut command = std::mem::replace(command, Command::new("true"));
    let mut command = if input.is_empty() {
        command.stdin(Stdio::null());
        assert_cmd::Command::from_std(command)
    } else {
        command.stdin(Stdio::piped());
        let mut command = assert_cmd::Command::from_std(command);
        command.write_stdin(input.to_vec());
        command
    };
    let output = command.timeout(limit).output().unwrap();
    {
        use std::os::unix::process::ExitStatusExt as _;
        assert!(
            output.status.signal() != Some(9),
            "the command did not finish within {limit:?}\n--- stdout\n{}\n--- stderr\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    output
}

/// The result of a ralph run, with helpers for assertions.
pub(crate) struct Run {
    pub(crate) output: Output,
}

impl Run {
    pub(crate) fn code(&self) -> i32 {
        self.output.status.code().unwrap_or(-1)
    }

    pub(crate) fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub(crate) fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// The run for `assert_cmd` assertions with `predicates`.
    pub(crate) fn assert(&self) -> assert_cmd::assert::Assert {
        assert_cmd::assert::OutputAssertExt::assert(self.output.clone())
    }

    #[track_caller]
    pub(crate) fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code(),
            code,
            "unexpected exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout(),
            self.stderr()
        );
        self
    }
}

impl TestEnv {
    /// Runs `ralph ARGS` with a 60 s deadline.
    pub(crate) fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, |_| {})
    }

    /// Runs `ralph ARGS` after `adjust` changes the command (its environment).
    pub(crate) fn run_with(&self, args: &[&str], adjust: impl FnOnce(&mut Command)) -> Run {
        self.run_piped(args, b"", adjust)
    }

    /// Runs `ralph ARGS` with `input` piped to its stdin.
    pub(crate) fn run_piped(
        &self,
        args: &[&str],
        input: &[u8],
        adjust: impl FnOnce(&mut Command),
    ) -> Run {
        let mut command = self.ralph();
        command.args(args);
        adjust(&mut command);
        Run {
            output: run_with_input(&mut command, input, Duration::from_secs(60)),
        }
    }

    /// Runs a loop with no pause between iterations.
    pub(crate) fn run_loop(&self, args: &[&str]) -> Run {
        let mut all = vec!["--pause", "0"];
        all.extend_from_slice(args);
        self.run(&all)
    }

    pub(crate) fn run_loop_with(&self, args: &[&str], adjust: impl FnOnce(&mut Command)) -> Run {
        let mut all = vec!["--pause", "0"];
        all.extend_from_slice(args);
        self.run_with(&all, adjust)
    }
}

/// Polls until `done` holds, failing with `what` after `limit`.
pub(crate) fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends SIGINT (Ctrl+C) to `child`.
pub(crate) fn interrupt(child: &std::process::Child) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
}

/// Polls until `path` exists, failing after `limit`.
pub(crate) fn wait_for_file(path: &Path, limit: Duration) {
    wait_until(limit, &format!("{} did not appear", path.display()), || {
        path.exists()
    });
}

/// Polls (30 s at most) until the file at `path` contains `text`.
pub(crate) fn wait_for_text(path: &Path, text: &str) {
    let what = format!("{} did not come to hold {text:?}", path.display());
    wait_until(Duration::from_secs(30), &what, || {
        fs::read_to_string(path).is_ok_and(|content| content.contains(text))
    });
}

/// Whether a process id is still alive (and not a zombie).
pub(crate) fn is_alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

pub(crate) fn wait_output(
    child: &mut std::process::Child,
    limit: Duration,
) -> std::process::Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ralph did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        std::io::Read::read_to_end(&mut out, &mut stdout).unwrap();
    }
    if let Some(mut err) = child.stderr.take() {
        std::io::Read::read_to_end(&mut err, &mut stderr).unwrap();
    }
    std::process::Output {
        status: child.wait().unwrap(),
        stdout,
        stderr,
    }
}

/// Three iterations with changes, a verification and a completion, `report = true`.
pub(crate) fn finished_run() -> TestEnv {
    let env = TestEnv::new();
    env.agent_script(Some(2), "cp .ralph/report.html \"$dir/report-at-2.html\"");
    let edit = env.work().join("notes <b>.txt");
    env.run_loop_with(
        &[
            "Write notes & more",
            "--max-iterations",
            "5",
            "--verify",
            "echo checked",
        ],
        |c| {
            c.env("FAKE_AGENT_EDIT", &edit)
                .env("FAKE_AGENT_COMPLETE_AT", "3")
                .env("RALPH_REPORT", "true");
        },
    )
    .assert_code(0);
    env
}

/// The port and token of the `--serve` server `child` started, from the line it prints when it
/// listens (`Serving … at http://127.0.0.1:PORT/#token=T`), waited for 30 s at most. Its stderr
/// is drained to the end meanwhile, so it never fills.
pub(crate) fn served_at(child: &mut std::process::Child) -> (u16, String) {
    let lines = lines_of(child.stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .expect("ralph printed where it serves");
        if let Some(url) = line.split("runs at http://127.0.0.1:").nth(1) {
            let (port, token) = url.split_once("/#token=").unwrap();
            return (port.parse().unwrap(), token.trim().to_owned());
        }
    }
}

/// The lines `reader` yields, sent as they come by a thread of their own, which reads it to its
/// end (also once the receiver is gone), so a child writing to it never blocks on a full pipe.
pub(crate) fn lines_of(
    reader: impl std::io::Read + Send + 'static,
) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead as _;
    let (send, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(reader)
            .lines()
            .map_while(Result::ok)
        {
            let _ = send.send(line);
        }
    });
    lines
}

/// The lines `child` prints on stdout until one holds `text` (`within` at most), read as they
/// come, so a test can act once the child says something; the rest of its stdout is drained.
pub(crate) fn read_until(child: &mut std::process::Child, text: &str, within: Duration) -> String {
    let lines = lines_of(child.stdout.take().unwrap());
    let deadline = Instant::now() + within;
    let mut said = String::new();
    while !said.contains(text) {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => said.push_str(&(line + "\n")),
            Err(_) => panic!("{text:?} was not said within {within:?}: {said}"),
        }
    }
    said
}

/// Shell code printing Claude stream-json events: a tool call, then a result with `final_text`.
pub(crate) fn claude_events(final_text: &str) -> String {
    let lines = [
        r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"s","tools":["Write"],"model":"m"}"#.to_owned(),
        r#"{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"I'll write the file."}],"usage":{"input_tokens":100,"output_tokens":1}}}"#.to_owned(),
        r#"{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Write","input":{"file_path":"/w/hello.txt","content":"hi"}}]}}"#.to_owned(),
        r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"t1","type":"tool_result","content":"File says <promise>COMPLETE</promise>"}]}}"#.to_owned(),
        format!(
            r#"{{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":{},"total_cost_usd":0.002,"usage":{{"input_tokens":200,"cache_creation_input_tokens":5,"cache_read_input_tokens":7,"output_tokens":40}}}}"#,
            serde_json::to_string(final_text).unwrap()
        ),
    ];
    format!("cat <<'EVENTS'\n{}\nEVENTS\n", lines.join("\n"))
}

/// A small random-number generator (xorshift), seeded per round so that a failing round of a
/// kill test can be replayed (the fuzz and matrix targets).
#[allow(dead_code, reason = "used by the fuzz and matrix targets only")]
pub(crate) struct Rng(pub(crate) u64);

#[allow(dead_code, reason = "used by the fuzz and matrix targets only")]
impl Rng {
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The seeds of a kill test's `rounds` rounds: the one in the variable `replay` alone (a failing
/// round's, to run it again), or new ones (`salt` keeps two tests' apart).
#[allow(dead_code, reason = "used by the fuzz and matrix targets only")]
pub(crate) fn round_seeds(replay: &str, rounds: u64, salt: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var(replay).ok().and_then(|n| n.parse().ok()) {
        return vec![seed];
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64 | 1);
    let mut seeds = Rng(now ^ salt);
    (0..rounds).map(|_| seeds.below(u64::MAX - 1) | 1).collect()
}

/// Whether a test can run its agents in bwrap here; says why not when it cannot.
#[allow(dead_code, reason = "for the machines and parallel targets")]
#[expect(
    clippy::print_stderr,
    reason = "the one line that explains a skipped test"
)]
pub(crate) fn can_sandbox_agents() -> bool {
    let can = bwrap_can_sandbox();
    if !can {
        eprintln!(
            "skipped: bubblewrap is not installed or cannot make namespaces here (bash scripts/install-test-tools.sh)"
        );
    }
    can
}

/// The arguments that run `env`'s fake agents in bwrap: `FAKE_AGENT_DIR` passed in, the fake
/// agents' folder mounted, and their own folder writable.
#[allow(dead_code, reason = "for the machines, parallel and asking targets")]
pub(crate) fn sandboxed_agents(env: &TestEnv) -> Vec<String> {
    let mut args: Vec<String> = ["--sandbox", "bwrap", "--sandbox-env", "FAKE_AGENT_DIR"]
        .map(str::to_owned)
        .to_vec();
    args.extend([
        "--sandbox-mount".to_owned(),
        env.bin().display().to_string(),
        "--sandbox-mount".to_owned(),
        format!("{}:rw", env.agent_dir().display()),
    ]);
    args
}

/// Whether bwrap is installed and can make the namespaces a sandbox needs here.
pub(crate) fn bwrap_can_sandbox() -> bool {
    Command::new("bwrap")
        .args([
            "--ro-bind",
            "/",
            "/",
            "--unshare-all",
            "--cap-drop",
            "ALL",
            "true",
        ])
        .output()
        .is_ok_and(|output| output.status.success())
}

/// For two tasks run at once, `answer` and `other` (each agent knows its task by its worktree):
/// the `answer` agent edits its test to pass once, then does the work; the `other` one works.
#[allow(dead_code, reason = "for the machines and parallel targets")]
pub(crate) const CHEATS_ONCE: &str = r#"case "$PWD" in
  */worktrees/answer*)
    if [ -f "$dir/cheated" ]; then echo 42 > answer.txt
    else touch "$dir/cheated"; echo 7 > answer.txt; echo 7 > tests/expected.txt; fi ;;
  *) echo other > other.txt ;;
esac
echo '<promise>READY_FOR_NEXT_TASK</promise>'
"#;

/// The machine's available memory (`MemAvailable`), in bytes.
#[allow(dead_code, reason = "for the machines and parallel targets")]
pub(crate) fn available_memory() -> u64 {
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap();
    let kb: u64 = (meminfo.lines())
        .find_map(|line| line.strip_prefix("MemAvailable:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// One HTTP request; the status and body of its answer.
pub(crate) fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(name, _)| *name == "Host") {
        request.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, body.to_owned())
}

/// A one-request-at-a-time HTTP server on 127.0.0.1 that answers 200 and keeps each request's
/// first line, headers and body.
pub(crate) fn http_server() -> (String, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead as _, Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/ralph-hook", listener.local_addr().unwrap());
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = sender.send(format!("{head}\r\n{}", String::from_utf8_lossy(&body)));
        }
    });
    (url, receiver)
}
