//! The waits between iterations: the pause, and the wait before a retry with its countdown.

use std::time::{Duration, Instant};

use crate::event::{LoopEvent, Notice};
use crate::model::Failure;
use crate::signal::StopFlag;

use super::Runner;
use super::decision::{self, Stop};

/// Sleeps between iterations, waking early on a stop request.
pub(crate) fn pause(stop: &StopFlag, duration: Duration) {
    let deadline = Instant::now() + duration;
    while !stop.is_stopping() {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
}

/// Waits before retrying a failed iteration; a stop request or the runtime limit ends the loop.
pub(super) fn before_retry(runner: &Runner<'_>, iteration: u32, failure: &Failure) -> Option<Stop> {
    let env = &runner.env;
    let options = &env.config.options;
    let now = crate::model::now();
    // A reset time already past (the agent's report came late) means the limit is lifted:
    // retry at once rather than back off.
    let until_reset = failure
        .retry_at
        .map(|at| (at - now).to_std().unwrap_or_default());
    let retries = runner.counters.retries;
    let backoff = (env.knobs.retry_base, options.retry_max_wait, jitter());
    let delay =
        match decision::retry_wait(&env.rules, until_reset, retries, backoff, runner.runtime()) {
            Ok(delay) => delay,
            Err(stop) => return Some(stop),
        };
    let deadline = Instant::now() + delay;
    let every = if env.sink.voice().in_place() {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(60)
    };
    let mut last_shown: Option<Instant> = None;
    loop {
        if env.stop.is_stopping() {
            env.sink.notice(Notice::RetryWaitOver);
            return Some(Stop::Interrupted);
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        if last_shown.is_none_or(|at| now.duration_since(at) >= every) {
            env.sink.emit(LoopEvent::RetryWait {
                iteration,
                retry: retries,
                max_retries: options.max_retries,
                kind: failure.kind.label().to_owned(),
                status: failure.status,
                seconds_left: (deadline - now).as_secs(),
                until_reset: failure.retry_at.is_some(),
            });
            last_shown = Some(now);
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(100)));
    }
    env.sink.notice(Notice::RetryWaitOver);
    None
}

/// A factor between 0.8 and 1.2 for the backoff, random enough without a random-number crate:
/// std's per-process hash keys.
fn jitter() -> f64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let noise = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    #[expect(clippy::cast_precision_loss, reason = "jitter only")]
    let fraction = (noise % 1000) as f64 / 1000.0;
    0.8 + 0.4 * fraction
}
