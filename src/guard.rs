//! The agents' guards: so that no agent outlives ralph, even when ralph is killed with SIGKILL
//! (the OOM killer, `kill -9`, a closed SSH session).
//!
//! **Beside the agents** (the usual way, no process in front of an agent): each thread of ralph
//! that starts agents (a loop, a parallel task's loop) starts once `ralph __ralph-group-guard
//! <ralph-pid>`, the leader of a new process group, and starts every agent of its own in that
//! group (`setpgid` between fork and exec, done by the standard library). The guard blocks the
//! stop signals (ralph's SIGTERM or SIGINT to the group is for the agent), asks for the kernel's
//! parent-death signal, says `ready` on its stdout, and sleeps in `sigwait`. When ralph dies, or
//! the thread that started the guard ends, it ends the group: SIGTERM, up to the grace period
//! (`--kill-grace`, passed in `RALPH_GRACE_MS`) while anything else is in the group, then
//! SIGKILL, which takes the guard along. ralph's own SIGKILL of a stopped agent's group takes the
//! guard too; the next agent gets a new one.
//!
//! **In front of the agent**, when the sandbox needs it (its cgroups or rlimits are joined
//! between the guard's start and the agent's): ralph starts `ralph __ralph-guard <ralph-pid>
//! <program> <args…>` as the leader of a new process group. The guard starts the agent in that
//! same group with the guard's own stdin, stdout and stderr, then sleeps in `sigwait` until
//! something happens:
//! - the agent exits: the guard exits with the agent's status (128 + N when signal N ended it);
//! - ralph dies: the kernel sends the guard its parent-death signal (Linux; elsewhere the guard
//!   notices that its parent changed), and the guard ends the whole group as above;
//! - ralph's own stop (SIGTERM to the group) reaches the agent directly; the guard keeps waiting
//!   for the agent, and ralph's SIGKILL after the grace period ends the guard with the rest.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal, killpg};
use nix::unistd::{Pid, getpgrp, getppid};

/// The hidden first argument that turns `ralph` into the guard in front of an agent.
pub(crate) const ARG: &str = "__ralph-guard";

/// The hidden first argument that turns `ralph` into the guard beside a thread's agents.
pub(crate) const BESIDE_ARG: &str = "__ralph-group-guard";

/// The variable in which ralph tells the guard its `--kill-grace`, in milliseconds.
pub(crate) const GRACE_VARIABLE: &str = "RALPH_GRACE_MS";

/// How long the agent gets to exit after SIGTERM once ralph is gone: the grace ralph gives an
/// agent it stops itself (3 s when not told).
fn grace() -> Duration {
    crate::model::env_millis(GRACE_VARIABLE, 3_000)
}

/// The signal the kernel sends the guard when ralph dies.
const PARENT_DIED: Signal = Signal::SIGUSR1;

/// The guard's command line for running `program args` under ralph (this process). Unit tests
/// run in a test binary that cannot be a guard: they run agents directly.
pub(crate) fn command_line(
    program: &std::path::Path,
) -> Option<(std::path::PathBuf, Vec<OsString>)> {
    if cfg!(test) {
        return None;
    }
    let ralph = std::env::current_exe().ok()?;
    let args = vec![
        OsString::from(ARG),
        OsString::from(std::process::id().to_string()),
        program.as_os_str().to_owned(),
    ];
    Some((ralph, args))
}

thread_local! {
    /// This thread's guard beside its agents, started with its first agent.
    static BESIDE: std::cell::RefCell<Option<Beside>> = const { std::cell::RefCell::new(None) };
}

/// A guard beside the agents of one thread of ralph: the leader of their process group.
struct Beside {
    guard: std::process::Child,
    grace: Duration,
}

impl Drop for Beside {
    fn drop(&mut self) {
        // The thread is ending, and so is every agent it started: only the guard is left.
        let _ = self.guard.kill();
        let _ = self.guard.wait();
    }
}

/// The process group, led by this thread's guard, that an agent ralph starts now joins; a guard
/// is started when the thread has none alive (or its grace differs). `None` when none can be
/// had (then the caller puts a guard in front of the agent), and in unit tests, whose binary
/// cannot be a guard.
pub(crate) fn group_beside(grace: Duration) -> Option<i32> {
    if cfg!(test) {
        return None;
    }
    BESIDE.with(|slot| {
        let mut slot = slot.borrow_mut();
        if let Some(beside) = slot.as_mut()
            && beside.grace == grace
            && matches!(beside.guard.try_wait(), Ok(None))
        {
            return i32::try_from(beside.guard.id()).ok();
        }
        *slot = None;
        let beside = start_beside(grace)?;
        let group = i32::try_from(beside.guard.id()).ok();
        *slot = Some(beside);
        group
    })
}

/// Starts a guard beside this thread's agents and waits for its `ready`.
fn start_beside(grace: Duration) -> Option<Beside> {
    use std::io::Read as _;
    let ralph = std::env::current_exe().ok()?;
    let mut guard = Command::new(ralph)
        .arg(BESIDE_ARG)
        .arg(std::process::id().to_string())
        .env(GRACE_VARIABLE, grace.as_millis().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .ok()?;
    let mut ready = [0; 6];
    let said = guard
        .stdout
        .take()
        .and_then(|mut out| out.read_exact(&mut ready).ok());
    if said.is_none() || &ready != b"ready\n" {
        let _ = guard.kill();
        let _ = guard.wait();
        return None;
    }
    Some(Beside { guard, grace })
}

/// Runs the guard beside the agents: `args` are what follows [`BESIDE_ARG`].
pub(crate) fn beside_main(mut args: impl Iterator<Item = OsString>) -> ExitCode {
    use std::io::Write as _;
    let parent = args
        .next()
        .and_then(|pid| pid.to_str()?.parse::<i32>().ok())
        .unwrap_or(0);
    let mut watched = SigSet::empty();
    for signal in [
        PARENT_DIED,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        watched.add(signal);
    }
    // Blocked before anything else: a stop sent to the group is for the agents.
    let _ = watched.thread_block();
    watch_parent(parent);
    if parent_is_gone(parent) {
        end_group_beside();
    }
    let mut stdout = std::io::stdout();
    if stdout
        .write_all(b"ready\n")
        .and_then(|()| stdout.flush())
        .is_err()
    {
        end_group_beside();
    }
    loop {
        if matches!(watched.wait(), Ok(signal) if signal == PARENT_DIED) || parent_is_gone(parent) {
            end_group_beside();
        }
    }
}

/// Ends the group the guard beside the agents leads: SIGTERM, the grace while anything else is
/// in it, then SIGKILL, which takes the guard along.
fn end_group_beside() -> ! {
    let group = getpgrp();
    if others_in_group(group) {
        let _ = killpg(group, Signal::SIGTERM);
        let deadline = Instant::now() + grace();
        while Instant::now() < deadline && others_in_group(group) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let _ = killpg(group, Signal::SIGKILL);
    std::process::exit(137)
}

/// Whether a process other than this one is in `group` (read from `/proc`; where there is none,
/// assumed so).
fn others_in_group(group: Pid) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    let me = std::process::id().to_string();
    let group = group.to_string();
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            return false;
        };
        if pid == me {
            return false;
        }
        // `pid (comm) state ppid pgrp …`: the command may hold spaces and parentheses.
        std::fs::read_to_string(entry.path().join("stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(2))
                .is_some_and(|pgrp| pgrp == group)
        })
    })
}

/// Runs the guard: `args` are what follows [`ARG`] on the command line.
pub(crate) fn main(mut args: impl Iterator<Item = OsString>) -> ExitCode {
    let parent = args
        .next()
        .and_then(|pid| pid.to_str()?.parse::<i32>().ok())
        .unwrap_or(0);
    let Some(program) = args.next() else {
        return ExitCode::from(2);
    };
    let mut watched = SigSet::empty();
    for signal in [
        Signal::SIGCHLD,
        PARENT_DIED,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
    ] {
        watched.add(signal);
    }
    // Blocked only once the agent runs: a child inherits the mask, and an agent with SIGTERM
    // blocked would ignore every stop until the SIGKILL. Nothing is lost meanwhile: the agent's
    // exit is looked at before each wait, a stop before the block ends the guard with its group,
    // and the parent-death signal is asked for after the block.
    // The sandbox's cgroup (or rlimits), joined before the agent starts so that it and all it
    // starts are inside.
    crate::sandbox::join_limits();
    // The guard's own variables are not the agent's (a sandbox's process inside starts with
    // exactly what ralph gave it).
    let mut agent = match Command::new(&program)
        .args(args)
        .env_remove(GRACE_VARIABLE)
        .env_remove(crate::sandbox::CGROUPS_VARIABLE)
        .spawn()
    {
        Ok(agent) => agent,
        Err(err) => {
            crate::output::error(&format!(
                "failed to start `{}`: {err}",
                program.to_string_lossy()
            ));
            return ExitCode::from(127);
        }
    };
    let _ = watched.thread_block();
    watch_parent(parent);
    loop {
        if let Ok(Some(status)) = agent.try_wait() {
            return exit_code(status);
        }
        if parent_is_gone(parent) {
            end_group(&mut agent);
        }
        match watched.wait() {
            Ok(signal) if signal == PARENT_DIED => end_group(&mut agent),
            // SIGCHLD: checked at the top. A stop from ralph went to the agent too: keep waiting.
            _ => {}
        }
    }
}

/// Asks to be told when ralph dies. Linux sends the signal when the *thread* that started the
/// guard ends, so ralph must start an agent from a thread that outlives it (it does: the thread
/// that runs an iteration waits for its agent).
#[cfg(target_os = "linux")]
fn watch_parent(_parent: i32) {
    let _ = nix::sys::prctl::set_pdeathsig(PARENT_DIED);
}

/// Without a parent-death signal, a thread looks at the parent twice a second.
#[cfg(not(target_os = "linux"))]
fn watch_parent(parent: i32) {
    let _ = std::thread::Builder::new()
        .name("ralph-guard-watch".into())
        .spawn(move || {
            while !parent_is_gone(parent) {
                std::thread::sleep(Duration::from_millis(500));
            }
            let _ = nix::sys::signal::kill(nix::unistd::getpid(), PARENT_DIED);
        });
}

/// Whether ralph is gone (the guard was re-parented); catches a death before the parent-death
/// signal was asked for.
fn parent_is_gone(parent: i32) -> bool {
    parent > 0 && getppid() != Pid::from_raw(parent)
}

/// Ends the agent and everything in its group, the guard included: SIGTERM, then SIGKILL.
fn end_group(agent: &mut std::process::Child) -> ! {
    let group = getpgrp();
    let _ = killpg(group, Signal::SIGTERM);
    let deadline = Instant::now() + grace();
    while Instant::now() < deadline {
        if !matches!(agent.try_wait(), Ok(None)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = killpg(group, Signal::SIGKILL);
    std::process::exit(137)
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    ExitCode::from(u8::try_from(crate::model::exit_code(status)).unwrap_or(1))
}
