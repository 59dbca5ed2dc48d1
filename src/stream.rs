//! The one place that runs an agent process and streams its output.
//!
//! Design (each choice is deliberate):
//! - The agent runs in its own process group, so a stop or timeout can end the whole tree it
//!   started (shells, MCP servers, test runners): SIGTERM to the group, a grace period while
//!   output is still drained, then SIGKILL. A second Ctrl-C skips the grace period.
//! - Stdin is null (or a pipe that carries a long prompt and is then closed). The agents run in
//!   non-interactive modes, and some of them wait forever on an open stdin. An agent that speaks
//!   ACP is the exception: its stdin carries ralph's side of the conversation until the turn is
//!   over (see `conversation`); a stop first asks it to cancel the turn.
//! - Two reader threads read raw bytes (never `lines()`, which fails on invalid UTF-8) in chunks
//!   of up to 256 KiB and send them over a bounded channel, so a fast agent is slowed down rather
//!   than buffered in memory. The main thread owns the child, splits lines, and keeps the clock
//!   for the heartbeat and the timeouts. The stdout reader may also parse part of each chunk's
//!   lines for the handler (JSON events, see [`LineParser`]), at the same time as the main thread
//!   handles the chunk before.
//! - A line longer than [`MAX_SEGMENT`] is delivered in pieces, so one huge line never grows
//!   memory either.
//! - After the agent exits, a grandchild that keeps the pipes open does not hang the loop: after a
//!   short wait the group is killed and the readers are abandoned.
//! - When to wait, signal, reap or end is decided by one pure state machine of the agent
//!   process's phases (`phase.rs`); the main thread carries its actions out.

use std::io::{Read, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::agents::{AgentCommand, AgentEvent};
use crate::signal::{StopFlag, set_agent_group};

mod conversation;
mod lines;
mod phase;

use lines::LineSplitter;
pub(crate) use lines::{LineParser, ParsedLines, each_line, lines_of, parse_run};
use phase::{Action, Machine, Seen};

/// Longest piece of a line delivered at once.
pub(crate) const MAX_SEGMENT: usize = 64 * 1024;
/// Most bytes read from a pipe at once; the pipes are made this large where the system allows.
const READ_CHUNK: usize = 256 * 1024;
/// Chunks in flight between a reader thread and the main thread.
const CHANNEL_CHUNKS: usize = 4;
/// How long an ACP agent gets to answer a cancel, and to exit once its turn is over, before it
/// is ended.
const TURN_GRACE: Duration = Duration::from_secs(2);

/// Which pipe a piece of output came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Stdout,
    Stderr,
}

/// A piece of one output line.
#[derive(Debug)]
pub(crate) struct Segment<'a> {
    pub(crate) source: Source,
    /// The text, without the line break; invalid UTF-8 replaced.
    pub(crate) text: &'a str,
    /// This piece starts a line.
    pub(crate) starts_line: bool,
    /// The line ends after this piece.
    pub(crate) ends_line: bool,
    /// When the chunk holding this piece arrived.
    pub(crate) received: Instant,
}

/// Receives the agent's output and the clock ticks while it runs.
pub(crate) trait OutputHandler {
    /// A chunk as read from one pipe, before its line segments: lets a handler look at a whole
    /// chunk at once (one search instead of one per line).
    fn on_chunk(&mut self, source: Source, data: &[u8]) {
        let _ = (source, data);
    }
    fn on_segment(&mut self, segment: &Segment<'_>);
    /// Whole lines at once: `text` is valid UTF-8, starts a line and ends with `\n` (all of it
    /// from one read, so at most 256 KiB), with what the reader thread parsed of them (see
    /// [`Self::line_parser`]). A handler that can take a run of lines in one go (one search,
    /// one write) does; by default each line is one segment.
    fn on_lines(
        &mut self,
        source: Source,
        text: &str,
        received: Instant,
        parsed: Option<ParsedLines>,
    ) {
        let _ = parsed;
        each_line(source, text, received, self);
    }
    /// A parser for the stdout reader thread to run on most of each run of whole lines.
    fn line_parser(&self) -> Option<LineParser> {
        None
    }
    /// Every segment of the chunk was given.
    fn on_chunk_end(&mut self) {}
    /// Called at least every tick, with the time of the last output from the agent.
    fn on_tick(&mut self, now: Instant, last_output: Instant);
    /// Called once the agent runs, with its process group.
    fn on_spawn(&mut self, group: i32) {
        let _ = group;
    }
    /// Called when ralph starts stopping the agent.
    fn on_stopping(&mut self, reason: EndedBy) {
        let _ = reason;
    }
    /// Whether the agent has already said a promise (its answer so far ends with one): from then
    /// on it has [`RunOptions::completion_grace`] to exit.
    fn promise_said(&self) -> bool {
        false
    }
    /// What the runner learnt by talking with the agent (ACP): the same events a parsed line
    /// gives.
    fn on_agent_event(&mut self, event: AgentEvent) {
        let _ = event;
    }
    /// Whether the agent waits for a person's answer (`ralph_ask`), and how long it has waited
    /// so far: the run's time limits do not count that time.
    fn asking(&mut self, now: Instant) -> Asking {
        let _ = now;
        Asking::default()
    }
    /// Whether the agent's turn is over (ACP): it has a short grace to exit, then it is ended.
    fn turn_over(&self) -> bool {
        false
    }
    /// Asks the agent to cancel its turn before it is stopped (ACP); whether it was asked.
    fn cancel_turn(&mut self) -> bool {
        false
    }
}

/// An agent's waits for a person's answer, as the time limits see them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Asking {
    /// The time spent waiting for answers so far (the wait going on included).
    pub(crate) paused: Duration,
    /// Since when a question waits, when one waits now: the agent is not idle.
    pub(crate) waiting_since: Option<Instant>,
    /// When the last wait ended: silence is counted from then at the earliest.
    pub(crate) resumed: Option<Instant>,
}

/// Timing of the runner.
#[derive(Clone, Debug)]
pub(crate) struct RunOptions {
    /// SIGTERM → SIGKILL delay when stopping the agent.
    pub(crate) grace: Duration,
    /// How long to wait for the pipes to close after the agent exits.
    pub(crate) leak_timeout: Duration,
    /// Longest sleep of the main thread between checks.
    pub(crate) tick: Duration,
    /// Wall-clock limit for the whole run.
    pub(crate) run_timeout: Option<Duration>,
    /// Limit on silence (no output at all).
    pub(crate) idle_timeout: Option<Duration>,
    /// How long an agent that has said its promise may take to exit.
    pub(crate) completion_grace: Option<Duration>,
}

/// Why ralph ended the agent early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EndedBy {
    /// The user asked ralph to stop.
    User,
    /// The run exceeded its wall-clock limit.
    RunTimeout,
    /// The agent printed nothing for too long.
    IdleTimeout,
    /// The agent said its promise but did not exit within the completion grace.
    CompletionGrace,
    /// An ACP agent whose turn was over did not exit by itself. Never reported: the run ends as
    /// if the agent had exited.
    TurnOver,
}

/// How the agent's run ended.
#[derive(Clone, Debug)]
pub(crate) struct RunOutcome {
    /// The exit code; 128 + N when the agent died from signal N.
    pub(crate) exit_code: i32,
    /// Set when ralph terminated the agent.
    pub(crate) ended_by: Option<EndedBy>,
    /// The signal that ended the agent when ralph stopped it: `SIGTERM` (`SIGINT` after Ctrl-C)
    /// when it exited within the grace, or `SIGKILL`; none when it exited by itself or on an ACP
    /// cancel.
    pub(crate) stop_signal: Option<&'static str>,
}

enum Event {
    Data(Source, Vec<u8>, Option<ParsedLines>),
    Closed,
}

/// Runs `command` in `cwd` until it exits (or is stopped), feeding its output to `handler`.
pub(crate) fn run(
    command: &AgentCommand,
    cwd: &Path,
    options: &RunOptions,
    stop: &StopFlag,
    handler: &mut dyn OutputHandler,
) -> anyhow::Result<RunOutcome> {
    let failed = || format!("failed to start `{}`", command.program.display());
    // The sandbox's limits are joined by a guard in front of the agent; otherwise the agent
    // joins the group of the guard beside this thread's agents.
    let beside = if crate::sandbox::needs_guard_in_front(&command.env) {
        None
    } else {
        crate::guard::group_beside(options.grace)
    };
    let in_front = beside
        .is_none()
        .then(|| crate::guard::command_line(&command.program))
        .flatten();
    let mut process = match in_front {
        // The guard starts the agent and ends it (and its group) if ralph dies. What the guard
        // cannot report (a program that cannot start) is checked here first.
        Some((guard, guard_args)) => {
            startable(&command.program, cwd).with_context(failed)?;
            let mut process = Command::new(guard);
            // If ralph dies, the guard ends the agent with the same grace ralph would give it.
            process.args(guard_args).env(
                crate::guard::GRACE_VARIABLE,
                options.grace.as_millis().to_string(),
            );
            process
        }
        None => Command::new(&command.program),
    };
    command.set_env(&mut process);
    process
        .args(&command.args)
        .current_dir(cwd)
        .stdin(if command.stdin.is_some() || command.acp.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(beside.unwrap_or(0));
    let mut child = process.spawn().with_context(failed)?;
    let group = beside.unwrap_or_else(|| i32::try_from(child.id()).unwrap_or(0));
    set_agent_group(group);
    handler.on_spawn(group);
    let result = supervise(&mut child, group, (command, cwd), options, stop, handler);
    set_agent_group(0);
    if result.is_err() {
        signal_group(group, Signal::SIGKILL);
        let _ = child.wait();
    }
    result
}

/// Feeds the agent its stdin (a prompt, or ralph's side of an ACP conversation) and streams
/// its output until it ends.
fn supervise(
    child: &mut Child,
    group: i32,
    (command, cwd): (&AgentCommand, &Path),
    options: &RunOptions,
    stop: &StopFlag,
    handler: &mut dyn OutputHandler,
) -> anyhow::Result<RunOutcome> {
    let stdin = match (&command.acp, child.stdin.take()) {
        (Some(turn), Some(stdin)) => {
            let client = crate::agents::acp::Client::new(turn, cwd);
            let mut talking = conversation::Conversation::start(handler, client, stdin)?;
            let mut outcome = stream_output(child, group, options, stop, &mut talking)?;
            let lingered = outcome.ended_by == Some(EndedBy::TurnOver);
            let answered = talking.finish(outcome.ended_by.is_some() && !lingered);
            if lingered {
                // The turn was over: ending the agent was only tidying up.
                outcome.ended_by = None;
                outcome.stop_signal = None;
                if answered {
                    outcome.exit_code = 0;
                }
            }
            return Ok(outcome);
        }
        (_, stdin) => stdin,
    };
    if let (Some(text), Some(mut stdin)) = (command.stdin.clone(), stdin) {
        thread::Builder::new()
            .name("ralph-agent-stdin".into())
            .spawn(move || {
                // An agent that exits without reading its prompt closes the pipe: not our error.
                let _ = stdin.write_all(text.as_bytes());
            })
            .context("failed to start the stdin writer thread")?;
    }
    stream_output(child, group, options, stop, handler)
}

/// Streams the agent's output to `handler` until it ends.
fn stream_output(
    child: &mut Child,
    group: i32,
    options: &RunOptions,
    stop: &StopFlag,
    handler: &mut dyn OutputHandler,
) -> anyhow::Result<RunOutcome> {
    let (sender, receiver) = mpsc::sync_channel(CHANNEL_CHUNKS);
    let stdout = child
        .stdout
        .take()
        .context("agent stdout was not captured")?;
    let stderr = child
        .stderr
        .take()
        .context("agent stderr was not captured")?;
    widen(&stdout);
    widen(&stderr);
    let parser = handler.line_parser();
    spawn_reader(
        "ralph-agent-stdout",
        stdout,
        Source::Stdout,
        sender.clone(),
        parser,
    )?;
    spawn_reader("ralph-agent-stderr", stderr, Source::Stderr, sender, None)?;
    let mut pipes = Pipes::new();
    let (status, machine) = pipes.run(child, group, options, stop, &receiver, handler)?;
    for splitter in &mut pipes.splitters {
        splitter.finish(handler);
    }
    // Whatever the agent left running in its group (a server, a watcher) ends with the iteration.
    signal_group(group, Signal::SIGTERM);
    Ok(RunOutcome {
        exit_code: crate::model::exit_code(status),
        ended_by: machine.ended_by,
        stop_signal: machine.stop_signal,
    })
}

/// The agent's output as the main thread takes it in: the lines of each pipe, whether any is
/// still open, and when anything last arrived.
struct Pipes {
    last_output: Instant,
    splitters: [LineSplitter; 2],
    open: u8,
}

impl Pipes {
    fn new() -> Self {
        Self {
            last_output: Instant::now(),
            splitters: [
                LineSplitter::new(Source::Stdout),
                LineSplitter::new(Source::Stderr),
            ],
            open: 2,
        }
    }

    /// Carries out what the agent process's state machine says (`phase.rs`) until the agent
    /// has exited and its pipes are closed (or given up on): its exit status, and the machine.
    fn run(
        &mut self,
        child: &mut Child,
        group: i32,
        options: &RunOptions,
        stop: &StopFlag,
        receiver: &Receiver<Event>,
        handler: &mut dyn OutputHandler,
    ) -> anyhow::Result<(std::process::ExitStatus, Machine)> {
        let mut machine = Machine::new(options, self.last_output);
        let mut exit = None;
        loop {
            let now = Instant::now();
            handler.on_tick(now, self.last_output);
            if exit.is_none() {
                exit = child.try_wait().context("failed to wait for the agent")?;
            }
            let seen = Seen {
                now,
                exited: exit.is_some(),
                pipes_open: self.open > 0,
                last_output: self.last_output,
                requests: stop.requested(),
                user_signal: stop.signal(),
                promise_said: handler.promise_said(),
                turn_over: handler.turn_over(),
                asking: handler.asking(now),
            };
            let mut actions: std::collections::VecDeque<Action> = machine.step(&seen).into();
            while let Some(action) = actions.pop_front() {
                match action {
                    Action::Stopping(reason) => handler.on_stopping(reason),
                    Action::CancelTurn => {
                        if !handler.cancel_turn() {
                            actions.extend(machine.not_cancelled(&seen));
                        }
                    }
                    Action::Signal(signal) => signal_group(group, signal),
                    Action::Wait(limit) if self.open > 0 => {
                        self.absorb(receive(receiver, limit), handler);
                    }
                    Action::Wait(limit) => thread::sleep(limit),
                    Action::Reap => exit = Some(child.wait()?),
                    Action::End => {
                        let status = exit.context("the agent's exit status is unknown")?;
                        return Ok((status, machine));
                    }
                }
            }
        }
    }

    /// Takes in what the readers sent: output to show, or a pipe closed (for good: the loop
    /// never waits for it again).
    fn absorb(&mut self, received: Received, handler: &mut dyn OutputHandler) {
        match received {
            Received::Data(source, bytes, parsed) => {
                self.last_output = Instant::now();
                let index = usize::from(source == Source::Stderr);
                handler.on_chunk(source, &bytes);
                self.splitters[index].push(&bytes, parsed, self.last_output, handler);
                handler.on_chunk_end();
            }
            Received::Closed => self.open -= 1,
            Received::Nothing => {}
        }
    }
}

enum Received {
    Data(Source, Vec<u8>, Option<ParsedLines>),
    Closed,
    Nothing,
}

fn receive(receiver: &Receiver<Event>, timeout: Duration) -> Received {
    match receiver.recv_timeout(timeout) {
        Ok(Event::Data(source, bytes, parsed)) => Received::Data(source, bytes, parsed),
        Ok(Event::Closed) => Received::Closed,
        Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
            if matches!(receiver.try_recv(), Err(mpsc::TryRecvError::Disconnected)) {
                // Both readers are gone; avoid spinning on a dead channel.
                thread::sleep(timeout);
            }
            Received::Nothing
        }
    }
}

fn spawn_reader<R: Read + Send + 'static>(
    name: &str,
    mut pipe: R,
    source: Source,
    sender: SyncSender<Event>,
    parser: Option<LineParser>,
) -> anyhow::Result<()> {
    thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let mut buffer = vec![0_u8; READ_CHUNK];
            let mut at_line_start = true;
            loop {
                match pipe.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(n) => {
                        let chunk = buffer[..n].to_vec();
                        let parsed = parser
                            .as_ref()
                            .and_then(|parse| parse_run(&chunk, &mut at_line_start, parse));
                        if sender.send(Event::Data(source, chunk, parsed)).is_err() {
                            return;
                        }
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = sender.send(Event::Closed);
        })
        .with_context(|| format!("failed to start the {name} thread"))?;
    Ok(())
}

/// Makes a pipe hold a whole read chunk: fewer, larger reads when the agent prints a lot (the
/// system may refuse; then the pipe stays as it is).
fn widen(pipe: &impl std::os::fd::AsFd) {
    #[cfg(target_os = "linux")]
    {
        let size = i32::try_from(READ_CHUNK).unwrap_or(i32::MAX);
        let _ = nix::fcntl::fcntl(pipe, nix::fcntl::FcntlArg::F_SETPIPE_SZ(size));
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pipe;
}

/// Whether `program` names an executable file (looked up on PATH when it has no `/`).
fn startable(program: &Path, cwd: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = if program.components().count() > 1 {
        cwd.join(program)
    } else {
        which::which(program).map_err(|_| std::io::Error::from(std::io::ErrorKind::NotFound))?
    };
    let meta = std::fs::metadata(&path)?;
    if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
        Ok(())
    } else {
        Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
    }
}

fn signal_group(group: i32, signal: Signal) {
    if group > 0 {
        // ESRCH only means the group is already gone.
        let _ = killpg(Pid::from_raw(group), signal);
    }
}

#[cfg(test)]
mod tests {
    use super::lines::tests::Collect;
    use super::*;

    fn options() -> RunOptions {
        RunOptions {
            grace: Duration::from_millis(500),
            leak_timeout: Duration::from_millis(300),
            tick: Duration::from_millis(20),
            run_timeout: None,
            idle_timeout: None,
            completion_grace: None,
        }
    }

    fn sh(script: &str) -> AgentCommand {
        AgentCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            env: Vec::new(),
            clear_env: false,
            stdin: None,
            usage_file: None,
            acp: None,
        }
    }

    #[test]
    fn runs_a_process_and_reports_its_exit_code_and_output() {
        let mut handler = Collect::default();
        let outcome = run(
            &sh("echo out; echo err >&2; exit 3"),
            Path::new("."),
            &options(),
            &StopFlag::default(),
            &mut handler,
        )
        .unwrap();
        assert_eq!(outcome.exit_code, 3);
        assert_eq!(outcome.ended_by, None);
        let mut texts: Vec<_> = handler.0.iter().map(|(t, _, _)| t.clone()).collect();
        texts.sort();
        assert_eq!(texts, ["err", "out"]);
    }

    #[test]
    fn stdin_carries_the_prompt_and_is_closed() {
        let mut handler = Collect::default();
        let mut command = sh("wc -c");
        command.stdin = Some("x".repeat(300_000));
        run(
            &command,
            Path::new("."),
            &options(),
            &StopFlag::default(),
            &mut handler,
        )
        .unwrap();
        assert_eq!(handler.0[0].0.trim(), "300000");
    }

    #[test]
    fn a_grandchild_holding_the_pipes_does_not_hang_the_run() {
        let mut handler = Collect::default();
        let started = Instant::now();
        let outcome = run(
            &sh("sleep 30 & echo started"),
            Path::new("."),
            &options(),
            &StopFlag::default(),
            &mut handler,
        )
        .unwrap();
        assert_eq!(outcome.exit_code, 0);
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    /// Says the promise was said once a line "done" arrived.
    #[derive(Default)]
    struct SaysDone(Collect);

    impl OutputHandler for SaysDone {
        fn on_segment(&mut self, segment: &Segment<'_>) {
            self.0.on_segment(segment);
        }
        fn on_tick(&mut self, _: Instant, _: Instant) {}
        fn promise_said(&self) -> bool {
            self.0.0.last().is_some_and(|(text, _, _)| text == "done")
        }
    }

    #[test]
    fn an_agent_that_said_its_promise_gets_the_completion_grace_then_ends() {
        let mut opts = options();
        opts.completion_grace = Some(Duration::from_millis(200));
        let cases = [
            ("echo done; sleep 30", Some(EndedBy::CompletionGrace)),
            // An answer that went on after the promise no longer ends with it.
            ("echo done; echo more; sleep 0.4", None),
            // Without the promise, only the agent's own end (or a timeout) ends it.
            ("echo working; sleep 0.4", None),
        ];
        // The cases wait on their agents side by side.
        std::thread::scope(|scope| {
            for (script, ended_by) in cases {
                let opts = &opts;
                scope.spawn(move || {
                    let mut handler = SaysDone::default();
                    let stop = StopFlag::default();
                    let outcome = run(&sh(script), Path::new("."), opts, &stop, &mut handler);
                    assert_eq!(outcome.unwrap().ended_by, ended_by, "{script}");
                });
            }
        });
    }

    #[test]
    fn idle_timeout_ends_the_whole_group() {
        let mut handler = Collect::default();
        let mut opts = options();
        opts.idle_timeout = Some(Duration::from_millis(300));
        let outcome = run(
            &sh("echo once; sleep 30; echo never"),
            Path::new("."),
            &opts,
            &StopFlag::default(),
            &mut handler,
        )
        .unwrap();
        assert_eq!(outcome.ended_by, Some(EndedBy::IdleTimeout));
        assert_eq!(outcome.exit_code, 128 + 15);
    }

    /// Pipes that close while the agent is being ended are not waited for again: with a leak
    /// timeout of a minute, an agent that dies at SIGTERM must not cost that minute.
    #[test]
    fn an_agent_that_dies_when_ended_is_not_waited_for_as_a_leak() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut opts = options();
            opts.leak_timeout = Duration::from_secs(60);
            opts.grace = Duration::from_secs(60);
            opts.run_timeout = Some(Duration::from_millis(100));
            let outcome = run(
                &sh("sleep 30"),
                Path::new("."),
                &opts,
                &StopFlag::default(),
                &mut Collect::default(),
            );
            let _ = done.send(outcome.map(|outcome| outcome.ended_by));
        });
        let ended_by = finished
            .recv_timeout(Duration::from_secs(20))
            .expect("the run waited for pipes that had already closed")
            .unwrap();
        assert_eq!(ended_by, Some(EndedBy::RunTimeout));
    }
}
