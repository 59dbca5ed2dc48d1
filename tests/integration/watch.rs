//! `ralph --watch`, on a real terminal: tmux runs it in a detached session of a fixed size, and
//! the test reads the screen with `capture-pane` and types with `send-keys`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::signals::wait_output;
use crate::support::{TestEnv, wait_until};

/// A tmux server of the test's own (its socket in the test's directory), with the test's
/// environment.
pub(crate) struct Tmux {
    socket: PathBuf,
    template: Command,
}

impl Tmux {
    /// `None`, with a note, where tmux is not installed (`.ci/run` installs it).
    #[expect(
        clippy::print_stderr,
        reason = "the one line that explains a skipped test"
    )]
    pub(crate) fn new(env: &TestEnv) -> Option<Self> {
        let found = Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|out| out.status.success());
        if !found {
            eprintln!("note: tmux is not installed; a terminal screen test is skipped");
            return None;
        }
        Some(Self {
            socket: env.path().join("tmux.sock"),
            template: env.ralph(),
        })
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("tmux");
        command.env_clear();
        for (key, value) in self.template.get_envs() {
            if let Some(value) = value {
                command.env(key, value);
            }
        }
        command
            .env("TERM", "xterm-256color")
            .arg("-S")
            .arg(&self.socket)
            .args(["-f", "/dev/null"])
            .args(args)
            .stdin(Stdio::null());
        if let Some(dir) = self.template.get_current_dir() {
            command.current_dir(dir);
        }
        command
    }

    pub(crate) fn run(&self, args: &[&str]) -> String {
        let mut child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let output = wait_output(&mut child, Duration::from_secs(10));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Starts `ralph ARGS` (the arguments shell-quoted as given) in a detached session of
    /// `cols` × `rows`; when ralph exits the screen says `ralph exited <code>`.
    pub(crate) fn start_ralph(&self, args: &str, (cols, rows): (u32, u32)) {
        let ralph = assert_cmd::cargo::cargo_bin!("ralph").display().to_string();
        let script = format!("'{ralph}' {args}; echo \"ralph exited $?\"; sleep 60");
        let (cols, rows) = (cols.to_string(), rows.to_string());
        let session = ["new-session", "-d", "-s", "watch", "-x", &cols, "-y", &rows];
        let mut command: Vec<&str> = session.to_vec();
        command.extend(["sh", "-c", &script]);
        self.run(&command);
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "watch"])
    }

    /// Waits (30 s at most: the suite's real agents may be loading the machine) until the screen
    /// shows every one of `texts`.
    pub(crate) fn wait_for(&self, texts: &[&str]) -> String {
        let mut screen = String::new();
        wait_until(
            Duration::from_secs(30),
            &format!("{texts:?} on the screen"),
            || {
                screen = self.screen();
                texts.iter().all(|text| screen.contains(text))
            },
        );
        screen
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command(&["kill-server"]).output();
    }
}

#[test]
fn watch_shows_the_running_iteration_and_the_agents_last_line_then_quits_cleanly() {
    let env = TestEnv::new();
    let Some(tmux) = Tmux::new(&env) else { return };
    let go = env.path().join("go");
    env.agent_script(
        Some(1),
        &format!(
            "echo 'the agent is thinking about the tests'\ntouch \"$dir/ready\"\ni=0; while [ ! -f '{}' ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done",
            go.display()
        ),
    );
    let mut run = env
        .ralph()
        .args(["Build it", "--max-iterations", "3", "--pause", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    env.wait_for_agent();
    tmux.start_ralph("--watch", (100, 32));
    let screen = tmux.wait_for(&[
        "running",
        "iteration 1 / 3",
        "the agent is thinking about the tests",
    ]);
    assert!(
        screen.contains("agent output, iteration 1 (running)"),
        "{screen}"
    );
    // Resizing redraws at the new size.
    tmux.run(&["resize-window", "-t", "watch", "-x", "80", "-y", "30"]);
    tmux.wait_for(&["iteration 1 / 3"]);
    std::fs::write(&go, "").unwrap();
    tmux.run(&["send-keys", "-t", "watch", "q"]);
    let screen = tmux.wait_for(&["ralph exited 0"]);
    // The dashboard was on the alternate screen: the terminal is back as it was.
    assert!(!screen.contains("agent output"), "{screen}");
    wait_output(&mut run, Duration::from_secs(20));
}

#[test]
fn watch_without_a_loop_says_there_is_nothing_to_watch() {
    let env = TestEnv::new();
    let run = env.run(&["--watch"]);
    run.assert_code(1);
    assert!(
        run.stderr().contains("nothing to watch in ")
            && run
                .stderr()
                .contains(".ralph: no ralph loop runs here and none has run"),
        "{}",
        run.stderr()
    );
    assert!(!env.work().join(".ralph").exists(), "nothing was created");
}

#[test]
fn watch_follows_a_parallel_run_one_row_per_running_task() {
    let env = crate::fleet::setup("- [ ] Alpha\n  - id: alpha\n- [ ] Beta\n  - id: beta\n");
    let Some(tmux) = Tmux::new(&env) else { return };
    let go = env.path().join("go");
    // Each agent waits (10 s at most) for the test's go.
    env.agent_script(
        None,
        &format!(
            "i=0; while [ ! -f '{}' ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done",
            go.display()
        ),
    );
    let mut run = env
        .ralph()
        .args(["Build", "--tasks", "--parallel", "2", "--pause", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let events = env.agent_dir().join("events");
    wait_until(Duration::from_secs(20), "both agents to start", || {
        std::fs::read_to_string(&events).is_ok_and(|text| text.matches("start").count() >= 2)
    });
    let status = env.run(&["--status"]).stdout();
    assert!(
        status.contains("PARALLEL RUN: up to 2 tasks at once"),
        "{status}"
    );
    assert!(
        status.contains("Progress: 0/2 complete, 2 in progress"),
        "{status}"
    );
    tmux.start_ralph("--watch", (110, 32));
    let screen = tmux.wait_for(&["parallel run, up to 2 tasks at once", "alpha", "beta"]);
    let rows: Vec<&str> = screen
        .lines()
        .filter(|line| line.contains("alpha") || line.contains("beta"))
        .filter(|line| line.contains("running"))
        .collect();
    assert_eq!(rows.len(), 2, "{screen}");
    std::fs::write(&go, "").unwrap();
    tmux.run(&["send-keys", "-t", "watch", "q"]);
    tmux.wait_for(&["ralph exited 0"]);
    wait_output(&mut run, Duration::from_secs(20));
}
