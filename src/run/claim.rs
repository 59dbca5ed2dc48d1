//! Taking a directory for a loop: its lock, its saved state (a crashed loop is refused, a corrupt
//! file kept aside), and an agent a killed ralph left running.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::fail;
use crate::event::Notice;
use crate::storage::state::{self, LoopState};
use crate::storage::{self, Loaded, RalphDir, lock};

use super::Knobs;
use super::sink::Sink;

/// Where the loop starts.
pub(crate) enum Start {
    Fresh,
    /// The saved loop, and the options given now over its saved ones (`--flag: old → new`).
    Resume {
        saved: Box<LoopState>,
        overrides: Vec<String>,
    },
}

/// Takes the directory's loop lock and decides where the loop starts: a fresh loop is refused
/// when the saved state says one crashed or was interrupted here (it is for `--resume`, which
/// keeps its history and budgets, or `--reset`).
pub(super) fn claim(
    dir: &RalphDir,
    start: Start,
    knobs: &Knobs,
    sink: &Sink,
) -> anyhow::Result<(std::fs::File, Option<LoopState>)> {
    dir.ensure()?;
    let lock = take_lock(dir, knobs)?;
    let previous = load_keeping_corrupt(&dir.state(), state::load(&dir.state()), sink)?;
    let resumed = match start {
        Start::Resume { saved, overrides } => {
            sink.notice(Notice::ResumeOverrides(&overrides));
            Some(*saved)
        }
        Start::Fresh => {
            refuse_fresh(previous.as_ref(), &dir.state(), &GoOn::HERE)?;
            None
        }
    };
    Ok((lock, resumed))
}

/// The commands that go on from a loop that crashed or was interrupted: for the loop here,
/// `ralph --resume` and `ralph --reset`; a `--worktree` loop's name its worktree.
pub(crate) struct GoOn<'a> {
    pub(crate) resume: &'a str,
    pub(crate) reset: &'a str,
}

impl GoOn<'_> {
    const HERE: GoOn<'static> = GoOn {
        resume: "ralph --resume",
        reset: "ralph --reset",
    };
}

/// Refuses a fresh loop where the saved state (`previous`, at `state_path`) says one crashed or
/// was interrupted: that loop is for `go_on.resume`, which keeps its history and budgets, or
/// `go_on.reset`.
pub(crate) fn refuse_fresh(
    previous: Option<&LoopState>,
    state_path: &Path,
    go_on: &GoOn<'_>,
) -> anyhow::Result<()> {
    let Some(previous) = previous else {
        return Ok(());
    };
    if previous.active {
        return Err(fail(crashed_loop(previous, state_path, go_on)).into());
    }
    if previous.interrupted() {
        return Err(fail(interrupted_loop(previous, state_path, go_on)).into());
    }
    Ok(())
}

/// The directory's loop lock, or the error that says which loop holds it.
pub(crate) fn take_lock(dir: &RalphDir, knobs: &Knobs) -> anyhow::Result<std::fs::File> {
    lock::loop_lock(dir, knobs.lock_wait)?.ok_or_else(|| {
        let running = state::load(&dir.state()).ok();
        fail(loop_already_running(running.as_ref(), &dir.state())).into()
    })
}

/// A corrupt file is reported and copied aside; if the copy fails, ralph stops rather than
/// overwrite the only copy.
pub(super) fn load_keeping_corrupt<T>(
    path: &Path,
    loaded: Loaded<T>,
    sink: &Sink,
) -> anyhow::Result<Option<T>> {
    match loaded {
        Loaded::Found(value) => Ok(Some(value)),
        Loaded::Missing => Ok(None),
        Loaded::Corrupt(reason) => {
            let copy = storage::keep_corrupt_copy(path)?;
            sink.notice(Notice::CorruptFile {
                path,
                reason: &reason,
                copy: Some(&copy),
            });
            Ok(None)
        }
    }
}

/// Stops an agent that outlived a killed ralph (its process group still exists): SIGTERM, then
/// SIGKILL after `grace`. `told` is called first when there is one to stop.
pub(crate) fn stop_leftover_agent(group: i32, grace: Duration, told: impl FnOnce()) {
    use nix::sys::signal::{Signal, killpg};
    let pid = nix::unistd::Pid::from_raw(group);
    if group <= 0 || killpg(pid, None).is_err() {
        return;
    }
    told();
    let _ = killpg(pid, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && killpg(pid, None).is_ok() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = killpg(pid, Signal::SIGKILL);
}

/// The error when another ralph holds this directory's loop lock.
fn loop_already_running(state: Option<&LoopState>, state_path: &Path) -> String {
    let detail = state.map_or_else(
        || "its state is not written yet".to_owned(),
        |state| {
            let pid = state
                .pid
                .map_or_else(String::new, |pid| format!(", pid {pid}"));
            format!(
                "iteration {}, started {}{pid}",
                state.iteration,
                state
                    .started_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            )
        },
    );
    format!(
        "a Ralph loop is already running in this directory ({detail}).\n       \
         Stop it with Ctrl+C in its terminal, or wait for it to finish; see it with `ralph --status`.\n       \
         State file: {}",
        state_path.display()
    )
}

/// The error when the state says a loop here was interrupted: the same command again would
/// start over and drop its history and totals (and so its budgets), which only `--reset` does.
fn interrupted_loop(state: &LoopState, state_path: &Path, go_on: &GoOn<'_>) -> String {
    let stopped = (state.stopped_at).map(|at| {
        format!(
            "stopped {}",
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )
    });
    let (what, details) = if state.parallel() > 0 {
        ("an interrupted --parallel run", stopped)
    } else {
        let at = format!("at iteration {}", state.iteration);
        let details = stopped.map_or_else(|| at.clone(), |stopped| format!("{at}, {stopped}"));
        ("an interrupted Ralph loop", Some(details))
    };
    let details = details.map(|d| format!(" ({d})")).unwrap_or_default();
    format!(
        "{what} is recorded here{details}.\n       \
         Continue it with `{}` (its history and budgets are kept), or discard it with `{}` and start again.\n       \
         State file: {}",
        go_on.resume,
        go_on.reset,
        state_path.display()
    )
}

/// The error when the state says a loop is active but nothing holds its lock: it crashed or was
/// killed.
fn crashed_loop(state: &LoopState, state_path: &Path, go_on: &GoOn<'_>) -> String {
    if let Some(worker) = &state.worker {
        return format!(
            "the --worker {worker} that ran here stopped unexpectedly.\n       \
             Start it again with `ralph --worker` (it goes on with the remote's tasks), or discard its state with `{}`.\n       \
             State file: {}",
            go_on.reset,
            state_path.display()
        );
    }
    let owner = match (&state.host, state.pid) {
        (Some(host), Some(pid)) => format!(" (pid {pid} on {host})"),
        (None, Some(pid)) => format!(" (pid {pid})"),
        _ => String::new(),
    };
    format!(
        "a previous Ralph loop here stopped unexpectedly at iteration {}{owner}, started {}.\n       \
         Continue it with `{}`, or discard it with `{}` and start again.\n       \
         State file: {}",
        state.iteration,
        state
            .started_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        go_on.resume,
        go_on.reset,
        state_path.display()
    )
}
