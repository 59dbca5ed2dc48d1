//! The agent process's phases, as one pure state machine: what the runner saw goes in (the
//! clock, an exit, the pipes, stop requests, what the handler knows of the answer), what the
//! runner must do comes out (tell why the agent is ended, ask an ACP agent to cancel its turn,
//! signal the group, wait for output, reap, end). `stream.rs` carries the actions out; every
//! rule is tested here, without a process.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::{EndedBy, RunOptions, TURN_GRACE};

/// How often output is read while the agent is being ended.
const DRAIN_TICK: Duration = Duration::from_millis(20);

/// Where the agent process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The agent runs.
    Running,
    /// An ACP agent was asked to cancel its turn; it has until `until` to end it.
    Cancelling { until: Instant },
    /// The group got its first signal; the agent has until `until` to exit.
    Terminating { until: Instant },
    /// The group got SIGKILL: the agent is reaped.
    Killed,
    /// The agent exited: its pipes are drained while something it left holds them, for at most
    /// the leak timeout of silence since `quiet_since`, then its group is killed, once.
    Exited {
        quiet_since: Instant,
        leftovers_killed: bool,
    },
}

/// What the runner saw before this step.
#[derive(Clone, Copy, Debug)]
pub(super) struct Seen {
    pub(super) now: Instant,
    /// The agent has exited (its status is known).
    pub(super) exited: bool,
    /// A pipe of the agent's is still open.
    pub(super) pipes_open: bool,
    /// When the agent last printed anything.
    pub(super) last_output: Instant,
    /// Stop requests so far (one made before the agent started counts too).
    pub(super) requests: usize,
    /// The signal a user's stop sends: SIGINT after Ctrl-C, else SIGTERM.
    pub(super) user_signal: Signal,
    /// The answer so far ends with the promise.
    pub(super) promise_said: bool,
    /// An ACP agent's turn is over.
    pub(super) turn_over: bool,
    /// The agent's waits for a person's answer.
    pub(super) asking: super::Asking,
}

/// What the runner does next, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// Tell the handler why the agent is being ended.
    Stopping(EndedBy),
    /// Ask an ACP agent to cancel its turn; the runner calls [`Machine::not_cancelled`] when
    /// there is no turn to cancel.
    CancelTurn,
    /// Send the signal to the agent's process group.
    Signal(Signal),
    /// Read output for at most this long (with both pipes closed: sleep that long).
    Wait(Duration),
    /// Wait for the killed agent's exit.
    Reap,
    /// The run is over: the agent exited and its pipes are closed or given up on.
    End,
}

/// The agent process's phase, and what the rules remember between steps.
pub(super) struct Machine {
    phase: Phase,
    options: RunOptions,
    started: Instant,
    /// When both pipes were first seen closed with the agent still running.
    closed_at: Option<Instant>,
    /// Since when the answer has ended with the promise.
    promise_said_at: Option<Instant>,
    /// Since when an ACP agent's turn has been over.
    turn_over_at: Option<Instant>,
    /// Stop requests acted on.
    seen_requests: usize,
    /// Why ralph ended the agent (the first reason).
    pub(super) ended_by: Option<EndedBy>,
    /// The last signal sent to end the agent.
    pub(super) stop_signal: Option<&'static str>,
}

impl Machine {
    pub(super) fn new(options: &RunOptions, started: Instant) -> Self {
        Self {
            phase: Phase::Running,
            options: options.clone(),
            started,
            closed_at: None,
            promise_said_at: None,
            turn_over_at: None,
            seen_requests: 0,
            ended_by: None,
            stop_signal: None,
        }
    }

    /// What follows what the runner saw.
    pub(super) fn step(&mut self, seen: &Seen) -> Vec<Action> {
        if seen.exited && !matches!(self.phase, Phase::Exited { .. }) {
            self.phase = Phase::Exited {
                quiet_since: seen.now,
                leftovers_killed: false,
            };
        }
        match self.phase {
            Phase::Running => self.running(seen),
            // Another stop request cuts every wait short.
            Phase::Cancelling { until } => {
                if self.again(seen) || seen.turn_over || seen.now >= until {
                    self.first_signal(seen)
                } else {
                    vec![Action::Wait(DRAIN_TICK)]
                }
            }
            Phase::Terminating { until } => {
                if self.again(seen) || seen.now >= until {
                    self.stop_signal = Some(Signal::SIGKILL.as_str());
                    self.phase = Phase::Killed;
                    vec![Action::Signal(Signal::SIGKILL), Action::Reap]
                } else {
                    vec![Action::Wait(DRAIN_TICK)]
                }
            }
            Phase::Killed => vec![Action::Reap],
            Phase::Exited {
                quiet_since,
                leftovers_killed,
            } => self.exited(seen, quiet_since.max(seen.last_output), leftovers_killed),
        }
    }

    /// The agent had no turn to cancel: it is signalled at once.
    pub(super) fn not_cancelled(&mut self, seen: &Seen) -> Vec<Action> {
        self.first_signal(seen)
    }

    fn running(&mut self, seen: &Seen) -> Vec<Action> {
        // The grace runs while the answer so far ends with a promise (it may go on talking).
        if seen.promise_said {
            self.promise_said_at.get_or_insert(seen.now);
        } else {
            self.promise_said_at = None;
        }
        if seen.turn_over {
            self.turn_over_at.get_or_insert(seen.now);
        }
        let Some(reason) = self.stop_reason(seen) else {
            return vec![Action::Wait(self.running_wait(seen))];
        };
        self.ended_by.get_or_insert(reason);
        self.phase = Phase::Cancelling {
            until: seen.now + TURN_GRACE.min(self.options.grace),
        };
        vec![Action::Stopping(reason), Action::CancelTurn]
    }

    /// Why the agent must be ended now, if it must: a stop request, a time limit, a promise
    /// said past the completion grace, an ACP turn over that the agent outlives.
    fn stop_reason(&mut self, seen: &Seen) -> Option<EndedBy> {
        let now = seen.now;
        let past = |since: Instant, limit: Duration| now.duration_since(since) >= limit;
        if seen.requests > self.seen_requests {
            self.seen_requests = seen.requests;
            Some(EndedBy::User)
        } else if (self.options.run_timeout)
            .is_some_and(|limit| past(self.started, limit + seen.asking.paused))
        {
            Some(EndedBy::RunTimeout)
        } else if let Some(limit) = self.options.idle_timeout
            && seen.asking.waiting_since.is_none()
            && past(
                seen.last_output
                    .max(seen.asking.resumed.unwrap_or(seen.last_output)),
                limit,
            )
        {
            Some(EndedBy::IdleTimeout)
        } else if let (Some(said), Some(grace)) =
            (self.promise_said_at, self.options.completion_grace)
            && past(said, grace)
        {
            Some(EndedBy::CompletionGrace)
        } else if (self.turn_over_at)
            .is_some_and(|over| past(over, TURN_GRACE.min(self.options.grace)))
        {
            Some(EndedBy::TurnOver)
        } else {
            None
        }
    }

    /// How long to wait while the agent runs: a tick with output to read; with both pipes
    /// closed the exit is usually a moment away, so it is looked for often at first, then less
    /// (an agent that closed its output and runs on).
    fn running_wait(&mut self, seen: &Seen) -> Duration {
        if seen.pipes_open {
            return self.options.tick;
        }
        let closed = *self.closed_at.get_or_insert(seen.now);
        (seen.now.duration_since(closed) / 2).clamp(Duration::from_millis(1), self.options.tick)
    }

    /// A stop request came after the one (or the limit) that started ending the agent.
    fn again(&self, seen: &Seen) -> bool {
        seen.requests > self.seen_requests
    }

    /// SIGTERM to the group (a user's stop sends what the user sent: SIGINT after Ctrl-C), then
    /// the grace.
    fn first_signal(&mut self, seen: &Seen) -> Vec<Action> {
        let first = match self.ended_by {
            Some(EndedBy::User) => seen.user_signal,
            _ => Signal::SIGTERM,
        };
        self.stop_signal = Some(first.as_str());
        self.phase = Phase::Terminating {
            until: seen.now + self.options.grace,
        };
        vec![Action::Signal(first), Action::Wait(DRAIN_TICK)]
    }

    fn exited(&mut self, seen: &Seen, quiet_since: Instant, leftovers_killed: bool) -> Vec<Action> {
        if !seen.pipes_open {
            return vec![Action::End];
        }
        // The agent is gone but something it started still holds the pipes.
        if seen.now.duration_since(quiet_since) >= self.options.leak_timeout {
            if leftovers_killed {
                return vec![Action::End];
            }
            self.phase = Phase::Exited {
                quiet_since: seen.now,
                leftovers_killed: true,
            };
            return vec![
                Action::Signal(Signal::SIGKILL),
                Action::Wait(self.options.tick),
            ];
        }
        self.phase = Phase::Exited {
            quiet_since,
            leftovers_killed,
        };
        vec![Action::Wait(self.options.tick)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> RunOptions {
        RunOptions {
            grace: Duration::from_secs(5),
            leak_timeout: Duration::from_millis(500),
            tick: Duration::from_millis(100),
            run_timeout: None,
            idle_timeout: None,
            completion_grace: None,
        }
    }

    /// A clock and what the runner sees, moved by the tests.
    struct Run {
        start: Instant,
        machine: Machine,
        seen: Seen,
    }

    impl Run {
        fn new(options: &RunOptions) -> Self {
            let start = Instant::now();
            Self {
                start,
                machine: Machine::new(options, start),
                seen: Seen {
                    now: start,
                    exited: false,
                    pipes_open: true,
                    last_output: start,
                    requests: 0,
                    user_signal: Signal::SIGINT,
                    promise_said: false,
                    turn_over: false,
                    asking: crate::stream::Asking::default(),
                },
            }
        }

        /// One step at `ms` after the start.
        fn at(&mut self, ms: u64) -> Vec<Action> {
            self.seen.now = self.start + Duration::from_millis(ms);
            self.machine.step(&self.seen)
        }
    }

    const fn wait(ms: u64) -> Action {
        Action::Wait(Duration::from_millis(ms))
    }

    #[test]
    fn a_running_agent_is_waited_for_a_tick_at_a_time() {
        let mut run = Run::new(&options());
        assert_eq!(run.at(0), [wait(100)]);
        assert_eq!(run.at(5_000), [wait(100)]);
        assert_eq!(run.machine.ended_by, None);
    }

    #[test]
    fn with_both_pipes_closed_the_exit_is_looked_for_often_then_less() {
        let mut run = Run::new(&options());
        run.seen.pipes_open = false;
        assert_eq!(run.at(1_000), [wait(1)]);
        assert_eq!(run.at(1_040), [wait(20)]);
        assert_eq!(run.at(5_000), [wait(100)]);
    }

    #[test]
    fn an_exit_with_the_pipes_closed_ends_the_run() {
        let mut run = Run::new(&options());
        run.seen.exited = true;
        run.seen.pipes_open = false;
        assert_eq!(run.at(10), [Action::End]);
    }

    #[test]
    fn pipes_held_after_the_exit_get_the_leak_timeout_of_silence_then_one_kill() {
        let mut run = Run::new(&options());
        run.seen.exited = true;
        assert_eq!(run.at(100), [wait(100)]);
        // Output after the exit starts the silence again.
        run.seen.last_output = run.start + Duration::from_millis(500);
        assert_eq!(run.at(900), [wait(100)]);
        assert_eq!(run.at(1_000), [Action::Signal(Signal::SIGKILL), wait(100)]);
        assert_eq!(run.at(1_200), [wait(100)]);
        // Still held after another leak timeout: given up on.
        assert_eq!(run.at(1_500), [Action::End]);
    }

    #[test]
    fn a_stop_request_asks_for_a_cancel_then_sends_the_users_signal_then_kills() {
        let mut run = Run::new(&options());
        run.seen.requests = 1;
        assert_eq!(
            run.at(10),
            [Action::Stopping(EndedBy::User), Action::CancelTurn]
        );
        // No turn to cancel: the user's signal at once.
        let seen = run.seen;
        assert_eq!(
            run.machine.not_cancelled(&seen),
            [Action::Signal(Signal::SIGINT), wait(20)]
        );
        assert_eq!(run.machine.stop_signal, Some("SIGINT"));
        assert_eq!(run.at(4_000), [wait(20)]);
        assert_eq!(
            run.at(5_010),
            [Action::Signal(Signal::SIGKILL), Action::Reap]
        );
        assert_eq!(run.machine.stop_signal, Some("SIGKILL"));
        assert_eq!(run.machine.ended_by, Some(EndedBy::User));
    }

    #[test]
    fn a_second_stop_request_cuts_the_grace_short() {
        let mut run = Run::new(&options());
        run.seen.requests = 1;
        run.at(0);
        let seen = run.seen;
        run.machine.not_cancelled(&seen);
        run.seen.requests = 2;
        assert_eq!(run.at(100), [Action::Signal(Signal::SIGKILL), Action::Reap]);
    }

    #[test]
    fn an_acp_agent_gets_a_moment_to_end_its_cancelled_turn() {
        let mut run = Run::new(&options());
        run.seen.requests = 1;
        run.seen.user_signal = Signal::SIGTERM;
        assert_eq!(
            run.at(0),
            [Action::Stopping(EndedBy::User), Action::CancelTurn]
        );
        assert_eq!(run.at(1_000), [wait(20)]);
        // Its turn over, it is ended (it is not waited for to exit by itself).
        run.seen.turn_over = true;
        assert_eq!(run.at(1_100), [Action::Signal(Signal::SIGTERM), wait(20)]);
        // One that never ends its turn is ended after the turn's grace.
        let mut slow = Run::new(&options());
        slow.seen.requests = 1;
        slow.at(0);
        assert_eq!(slow.at(1_999), [wait(20)]);
        assert_eq!(slow.at(2_000), [Action::Signal(Signal::SIGINT), wait(20)]);
    }

    #[test]
    fn an_agent_that_exits_while_being_ended_is_drained_not_killed() {
        let mut run = Run::new(&options());
        run.seen.requests = 1;
        run.at(0);
        let seen = run.seen;
        run.machine.not_cancelled(&seen);
        run.seen.exited = true;
        run.seen.pipes_open = false;
        assert_eq!(run.at(300), [Action::End]);
        assert_eq!(run.machine.stop_signal, Some("SIGINT"));
    }

    #[test]
    fn waiting_for_an_answer_pauses_the_time_limits() {
        let mut limits = options();
        limits.run_timeout = Some(Duration::from_secs(60));
        limits.idle_timeout = Some(Duration::from_secs(10));
        let mut run = Run::new(&limits);
        // A question waits from 5 s on, silently: neither limit fires while it waits.
        run.seen.asking.waiting_since = Some(run.start + Duration::from_secs(5));
        for (at, paused) in [(20_000, 15), (90_000, 85)] {
            run.seen.asking.paused = Duration::from_secs(paused);
            assert_eq!(run.at(at), [wait(100)], "at {at} ms");
        }
        // Answered at 95 s: silence counts from then, and the run's minute less the 90 s waited.
        let resumed = run.start + Duration::from_secs(95);
        run.seen.asking = crate::stream::Asking {
            paused: Duration::from_secs(90),
            waiting_since: None,
            resumed: Some(resumed),
        };
        assert_eq!(run.at(104_999), [wait(100)]);
        assert_eq!(
            run.at(105_000),
            [Action::Stopping(EndedBy::IdleTimeout), Action::CancelTurn]
        );
        let mut long = Run::new(&limits);
        long.seen.asking.paused = Duration::from_secs(30);
        long.seen.last_output = long.start + Duration::from_secs(85);
        assert_eq!(long.at(89_999), [wait(100)]);
        assert_eq!(
            long.at(90_000),
            [Action::Stopping(EndedBy::RunTimeout), Action::CancelTurn]
        );
    }

    #[test]
    fn the_time_limits_end_the_agent_with_sigterm() {
        let mut limits = options();
        limits.run_timeout = Some(Duration::from_secs(60));
        limits.idle_timeout = Some(Duration::from_secs(10));
        let mut run = Run::new(&limits);
        run.seen.last_output = run.start + Duration::from_secs(55);
        assert_eq!(run.at(59_999), [wait(100)]);
        assert_eq!(
            run.at(60_000),
            [Action::Stopping(EndedBy::RunTimeout), Action::CancelTurn]
        );
        let mut idle = Run::new(&limits);
        assert_eq!(
            idle.at(10_000),
            [Action::Stopping(EndedBy::IdleTimeout), Action::CancelTurn]
        );
        let seen = idle.seen;
        assert_eq!(
            idle.machine.not_cancelled(&seen),
            [Action::Signal(Signal::SIGTERM), wait(20)]
        );
    }

    #[test]
    fn the_completion_grace_runs_while_the_answer_ends_with_the_promise() {
        let mut limits = options();
        limits.completion_grace = Some(Duration::from_secs(3));
        let mut run = Run::new(&limits);
        run.seen.promise_said = true;
        run.at(1_000);
        // The answer went on: the grace starts again when it ends with the promise again.
        run.seen.promise_said = false;
        run.at(2_000);
        run.seen.promise_said = true;
        assert_eq!(run.at(3_000), [wait(100)]);
        assert_eq!(run.at(5_999), [wait(100)]);
        assert_eq!(
            run.at(6_000),
            [
                Action::Stopping(EndedBy::CompletionGrace),
                Action::CancelTurn
            ]
        );
    }

    #[test]
    fn an_acp_agent_that_outlives_its_turn_is_ended() {
        let mut run = Run::new(&options());
        run.seen.turn_over = true;
        assert_eq!(run.at(1_000), [wait(100)]);
        assert_eq!(
            run.at(3_000),
            [Action::Stopping(EndedBy::TurnOver), Action::CancelTurn]
        );
    }

    #[test]
    fn the_first_reason_is_kept() {
        let mut limits = options();
        limits.run_timeout = Some(Duration::from_secs(1));
        let mut run = Run::new(&limits);
        run.at(1_000);
        run.seen.requests = 1;
        // A stop request while the agent is ended escalates, and does not rename the cause.
        let seen = run.seen;
        run.machine.not_cancelled(&seen);
        run.at(1_100);
        assert_eq!(run.machine.ended_by, Some(EndedBy::RunTimeout));
    }
}
