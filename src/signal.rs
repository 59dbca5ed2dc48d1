//! Stop requests from the user (Ctrl-C, SIGTERM, SIGHUP), and the signal dispositions every child
//! starts with.
//!
//! A thread counts requests; the loop and the process runner act on them at their next tick. The
//! first request stops the loop gracefully (the agent's process group gets the signal ralph got,
//! SIGINT for Ctrl-C and SIGTERM otherwise, then a grace period), the second skips the grace
//! period, and the third kills the agent's group at once and exits, in case something is stuck.
//!
//! Children (agents, hooks, verify commands, git) start with an empty signal mask (the standard
//! library clears it between fork and exec) and default dispositions: a signal ralph was started
//! ignoring (`nohup`, a background job of a script, `trap '' QUIT`) would stay ignored across
//! exec, so ralph catches each of those with a handler that does nothing, and exec resets a caught
//! signal to its default. ralph itself still takes no notice of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

use anyhow::Context as _;
use nix::sys::signal::Signal;

/// Process group of the agent currently running, or 0. Read by the third-request escape hatch.
static AGENT_GROUP: AtomicI32 = AtomicI32::new(0);

/// The signals that ask ralph to stop.
const STOPS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Signals a child must not inherit as ignored: the stops, SIGQUIT, the user's and the timer's,
/// and SIGCHLD (an ignored SIGCHLD reaps children before anyone can wait for them).
const RESET: [Signal; 8] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGALRM,
    Signal::SIGCHLD,
];

/// A shared count of stop requests, and whether the last one was Ctrl-C.
#[derive(Clone, Default, Debug)]
pub(crate) struct StopFlag(Arc<Requests>);

#[derive(Default, Debug)]
struct Requests {
    count: AtomicUsize,
    interrupt: AtomicBool,
}

impl StopFlag {
    /// Installs the process-wide handling of SIGINT, SIGTERM and SIGHUP, and gives the signals
    /// ralph was started ignoring a handler that does nothing (see the module's documentation).
    ///
    /// A stop signal that was ignored when ralph started (SIGHUP under `nohup`, SIGINT for a
    /// background job) stays without effect: it is blocked in every thread before the handler
    /// is installed, so logging out does not stop a loop started with `nohup ralph … &`.
    pub(crate) fn install() -> anyhow::Result<Self> {
        catch_ignored(&ignored_at_start());
        let flag = Self::default();
        let requests = Arc::clone(&flag.0);
        let mut signals = signal_hook::iterator::Signals::new(STOPS.map(|s| s as i32))
            .context("failed to install the Ctrl-C handler")?;
        std::thread::Builder::new()
            .name("ralph-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    requests
                        .interrupt
                        .store(signal == Signal::SIGINT as i32, Ordering::SeqCst);
                    if requests.count.fetch_add(1, Ordering::SeqCst) + 1 >= 3 {
                        kill_agent_group();
                        std::process::exit(i32::from(crate::exit::ExitStatus::Interrupted.code()));
                    }
                }
            })
            .context("failed to start the thread that listens for Ctrl-C")?;
        Ok(flag)
    }

    /// How many stop requests have arrived so far.
    pub(crate) fn requested(&self) -> usize {
        self.0.count.load(Ordering::SeqCst)
    }

    /// Whether the loop should stop.
    pub(crate) fn is_stopping(&self) -> bool {
        self.requested() > 0
    }

    /// The signal a stopped agent is sent first: SIGINT when the user pressed Ctrl-C, else
    /// SIGTERM.
    pub(crate) fn signal(&self) -> Signal {
        if self.is_stopping() && self.0.interrupt.load(Ordering::SeqCst) {
            Signal::SIGINT
        } else {
            Signal::SIGTERM
        }
    }

    /// Adds a stop request (ralph's own: a worker whose claim was taken over).
    pub(crate) fn request(&self) {
        self.0.count.fetch_add(1, Ordering::SeqCst);
    }

    /// Brings this flag up to `other`'s requests (a task's flag follows the user's).
    pub(crate) fn follow(&self, other: &Self) {
        let interrupt = other.0.interrupt.load(Ordering::SeqCst);
        self.0.interrupt.store(interrupt, Ordering::SeqCst);
        self.0.count.fetch_max(other.requested(), Ordering::SeqCst);
    }
}

/// The signals of [`RESET`] ralph was started ignoring, read from `/proc/self/status` (none where
/// there is no such file).
fn ignored_at_start() -> Vec<i32> {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return Vec::new();
    };
    let Some(mask) = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
    else {
        return Vec::new();
    };
    RESET
        .iter()
        .map(|&signal| signal as i32)
        .filter(|number| mask & (1 << (number - 1)) != 0)
        .collect()
}

/// Gives each `ignored` signal a handler that does nothing, so that children start with its
/// default; SIGHUP and SIGINT among them are blocked instead (the stop handler catches them),
/// so that they stay without effect here.
fn catch_ignored(ignored: &[i32]) {
    use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
    let mut blocked = SigSet::empty();
    for &number in ignored {
        if let Ok(signal) = Signal::try_from(number) {
            if matches!(signal, Signal::SIGHUP | Signal::SIGINT) {
                blocked.add(signal);
            } else if !STOPS.contains(&signal) {
                // The flag is never read: the handler is only there to be reset by exec.
                let _ = signal_hook::flag::register(number, Arc::new(AtomicBool::new(false)));
            }
        }
    }
    // Threads started from here on inherit the mask; children start with an empty one.
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
