//! Stop requests from the user (Ctrl-C, SIGTERM, SIGHUP).
//!
//! The handler only counts requests; the loop and the process runner act on them at their next
//! tick. The first request stops the loop gracefully (the agent's process group gets SIGTERM and a
//! grace period), the second skips the grace period, and the third kills the agent's group at once
//! and exits, in case something is stuck.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use anyhow::Context as _;
use nix::sys::signal::Signal;

/// Process group of the agent currently running, or 0. Read by the third-request escape hatch.
static AGENT_GROUP: AtomicI32 = AtomicI32::new(0);

/// A shared counter of stop requests.
#[derive(Clone, Default, Debug)]
pub(crate) struct StopFlag(Arc<AtomicUsize>);

impl StopFlag {
    /// Installs the process-wide handler for SIGINT, SIGTERM and SIGHUP.
    ///
    /// A signal that was ignored when ralph started (SIGHUP under `nohup`, SIGINT for a
    /// background job) stays without effect: it is blocked in every thread before the handler
    /// is installed, so logging out does not stop a loop started with `nohup ralph … &`.
    pub(crate) fn install() -> anyhow::Result<Self> {
        keep_ignored_signals_ignored();
        let flag = Self::default();
        let counter = Arc::clone(&flag.0);
        ctrlc::set_handler(move || {
            if counter.fetch_add(1, Ordering::SeqCst) + 1 >= 3 {
                kill_agent_group();
                std::process::exit(i32::from(crate::exit::ExitStatus::Interrupted.code()));
            }
        })
        .context("failed to install the Ctrl-C handler")?;
        Ok(flag)
    }

    /// How many stop requests have arrived so far.
    pub(crate) fn requested(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    /// Whether the loop should stop.
    pub(crate) fn is_stopping(&self) -> bool {
        self.requested() > 0
    }

    /// Adds a stop request (ralph's own: a worker whose claim was taken over).
    pub(crate) fn request(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    /// Brings this flag up to `other`'s requests (a task's flag follows the user's).
    pub(crate) fn follow(&self, other: &Self) {
        self.0.fetch_max(other.requested(), Ordering::SeqCst);
    }
}

fn keep_ignored_signals_ignored() {
    use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return;
    };
    let Some(mask) = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
    else {
        return;
    };
    let mut blocked = SigSet::empty();
    for signal in [Signal::SIGHUP, Signal::SIGINT] {
        if mask & (1 << (signal as i32 - 1)) != 0 {
            blocked.add(signal);
        }
    }
    // Child processes start with an empty signal mask (std resets it), so agents are unaffected.
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&blocked), None);
}

/// Records the running agent's process group (0 when none runs).
pub(crate) fn set_agent_group(pgid: i32) {
    AGENT_GROUP.store(pgid, Ordering::SeqCst);
}

fn kill_agent_group() {
    let pgid = AGENT_GROUP.load(Ordering::SeqCst);
    if pgid > 0 {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), Signal::SIGKILL);
    }
}
