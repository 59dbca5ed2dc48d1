//! The agent's guard: a small process between ralph and the agent, so that no agent outlives
//! ralph, even when ralph is killed with SIGKILL (the OOM killer, `kill -9`, a closed SSH
//! session).
//!
//! ralph starts `ralph __ralph-guard <ralph-pid> <program> <args…>` as the leader of a new process
//! group. The guard starts the agent in that same group with the guard's own stdin, stdout and
//! stderr, then sleeps in `sigwait` until something happens:
//! - the agent exits: the guard exits with the agent's status (128 + N when signal N ended it);
//! - ralph dies: the kernel sends the guard its parent-death signal (Linux; elsewhere the guard
//!   notices that its parent changed), and the guard ends the whole group: SIGTERM, a grace
//!   period (ralph's `--kill-grace`, passed in `RALPH_GRACE_MS`), then SIGKILL, which takes the
//!   guard and anything the agent started along;
//! - ralph's own stop (SIGTERM to the group) reaches the agent directly; the guard keeps waiting
//!   for the agent, and ralph's SIGKILL after the grace period ends the guard with the rest.

use std::ffi::OsString;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal, killpg};
use nix::unistd::{Pid, getpgrp, getppid};

/// The hidden first argument that turns `ralph` into the guard.
pub(crate) const ARG: &str = "__ralph-guard";

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
    let mut agent = match Command::new(&program).args(args).spawn() {
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
