//! The facts every layer shares: what an agent used and how it failed, what a verification
//! command showed, and the time as ralph records it. Nothing here does I/O; everything above
//! (storage, agents, output, the loop) may use it.

use std::sync::LazyLock;

use chrono::{DateTime, TimeZone as _, Utc};
use regex::Regex;
use serde::{Deserialize, Serialize};

/// The current time at millisecond precision, as ralph stores timestamps (like ralph.ts).
pub(crate) fn now() -> DateTime<Utc> {
    chrono::SubsecRound::trunc_subsecs(Utc::now(), 3)
}

/// `bytes` random bytes (from `/dev/urandom`), in hex.
pub(crate) fn random_hex(bytes: usize) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut buffer = vec![0_u8; bytes];
    std::fs::File::open("/dev/urandom").and_then(|mut random| random.read_exact(&mut buffer))?;
    Ok(buffer.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// A timing knob: the environment variable `name` in milliseconds, else `default_ms`; clamped
/// to a day, so no knob can overflow a deadline.
pub(crate) fn env_millis(name: &str, default_ms: u64) -> std::time::Duration {
    let ms = std::env::var(name)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(default_ms)
        .min(86_400_000);
    std::time::Duration::from_millis(ms)
}

/// Parses `90s`, `30m`, `1h`, `500ms`, or a plain number of seconds.
pub(crate) fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let bad = || format!("'{text}' is not a duration; use e.g. 500ms, 90s, 30m or 1h");
    let value: f64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit.trim() {
        "" | "s" | "sec" | "secs" => value,
        "ms" => value / 1000.0,
        "m" | "min" | "mins" => value * 60.0,
        "h" | "hr" | "hrs" => value * 3600.0,
        _ => return Err(bad()),
    };
    if !seconds.is_finite() || !(0.0..=1.0e9).contains(&seconds) {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

/// A process's exit code; 128 + N when signal N ended it (as shells report it).
pub(crate) fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(1)
}

/// Token counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Usage {
    #[serde(default)]
    pub(crate) input: u64,
    #[serde(default)]
    pub(crate) output: u64,
    #[serde(default)]
    pub(crate) cache_read: u64,
    #[serde(default)]
    pub(crate) cache_write: u64,
}

impl Usage {
    /// Adds counts, saturating: an absurd number from an agent must not crash the loop.
    pub(crate) fn add(&mut self, other: Usage) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
    }

    /// The tokens `--max-tokens` counts: input, output and cache writes. Cache reads are left
    /// out: they are cheap and, with Claude, large enough to trip any limit early.
    pub(crate) fn billable(&self) -> u64 {
        self.input
            .saturating_add(self.output)
            .saturating_add(self.cache_write)
    }

    /// Every token counted: input, output and cache traffic.
    pub(crate) fn total(&self) -> u64 {
        self.billable().saturating_add(self.cache_read)
    }
}

/// The kinds of failure ralph tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum FailureKind {
    /// HTTP 429, or a usage or quota limit.
    #[serde(rename = "rate limit")]
    RateLimit,
    /// HTTP 529 or "overloaded".
    #[serde(rename = "overloaded")]
    Overloaded,
    /// Any other error from the model's API (5xx, 4xx without a better kind).
    #[serde(rename = "api error")]
    ApiError,
    /// The API could not be reached.
    #[serde(rename = "connection")]
    Connection,
    /// HTTP 401/403: bad or missing credentials.
    #[serde(rename = "auth")]
    Auth,
    /// The requested model does not exist.
    #[serde(rename = "model not found")]
    ModelNotFound,
    /// The agent reported an error that is not about the API (max turns, crash).
    #[serde(rename = "agent error")]
    AgentError,
    /// ralph ended the iteration because it ran too long or was silent too long.
    #[serde(rename = "timeout")]
    Timeout,
}

impl FailureKind {
    /// The label used in history and messages.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::RateLimit => "rate limit",
            Self::Overloaded => "overloaded",
            Self::ApiError => "api error",
            Self::Connection => "connection",
            Self::Auth => "auth",
            Self::ModelNotFound => "model not found",
            Self::AgentError => "agent error",
            Self::Timeout => "timeout",
        }
    }

    /// Failures on the provider's side, not the agent's work: retried without spending an
    /// iteration, and not counted as the agent struggling.
    pub(crate) fn is_transient(self) -> bool {
        matches!(
            self,
            Self::RateLimit | Self::Overloaded | Self::ApiError | Self::Connection
        )
    }

    /// Failures that retrying cannot fix: the run stops.
    pub(crate) fn is_fatal(self) -> bool {
        matches!(self, Self::Auth | Self::ModelNotFound)
    }
}

/// A failed agent run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Failure {
    pub(crate) kind: FailureKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<u16>,
    pub(crate) message: String,
    /// When the provider said the limit resets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) retry_at: Option<DateTime<Utc>>,
}

impl Failure {
    /// Classifies an API failure from its HTTP status (if any) and its error message.
    pub(crate) fn classify(status: Option<u16>, message: &str, now: DateTime<Utc>) -> Self {
        let lower = message.to_lowercase();
        let has = |needles: &[&str]| needles.iter().any(|needle| lower.contains(needle));
        let kind = match status {
            Some(401 | 403) => FailureKind::Auth,
            Some(404) if has(&["model"]) => FailureKind::ModelNotFound,
            Some(429) => FailureKind::RateLimit,
            Some(529) => FailureKind::Overloaded,
            Some(500..=599) if has(&["overloaded"]) => FailureKind::Overloaded,
            Some(500..=599) => FailureKind::ApiError,
            _ if has(&[
                "usage limit",
                "rate limit",
                "rate_limit",
                "quota",
                "too many requests",
            ]) =>
            {
                FailureKind::RateLimit
            }
            _ if has(&["overloaded"]) => FailureKind::Overloaded,
            _ if has(&[
                "unauthorized",
                "authentication",
                "invalid api key",
                "invalid x-api-key",
                "forbidden",
            ]) =>
            {
                FailureKind::Auth
            }
            _ if has(&[
                "model not found",
                "model_not_found",
                "unknown model",
                "does not exist",
            ]) && has(&["model"]) =>
            {
                FailureKind::ModelNotFound
            }
            _ if has(&[
                "connection refused",
                "unable to connect",
                "econnrefused",
                "failed to lookup",
                "network",
                "connection error",
                "timed out",
            ]) =>
            {
                FailureKind::Connection
            }
            _ => FailureKind::ApiError,
        };
        Self {
            kind,
            status,
            message: readable_epoch(message.trim()).chars().take(500).collect(),
            retry_at: if kind == FailureKind::RateLimit {
                reset_time(message, now)
            } else {
                None
            },
        }
    }

    /// A failure that is not about the API.
    pub(crate) fn agent(message: &str) -> Self {
        Self {
            kind: FailureKind::AgentError,
            status: None,
            message: message.trim().chars().take(500).collect(),
            retry_at: None,
        }
    }
}

static EPOCH_AFTER_PIPE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\|(\d{10})\b").expect("valid regex"));
static RELATIVE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:try again|retry|resets?)\s+(?:after|in)\s+(\d+)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?)\b")
        .expect("valid regex")
});
static ABSOLUTE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:resets?|try again|retry)\s+(?:at|after)\s+(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d))")
        .expect("valid regex")
});

/// A message with a reset time as epoch seconds after a `|` (Claude's `usage limit
/// reached|1795492258`) written for people: `usage limit reached (resets 2026-11-25 04:30 UTC)`.
fn readable_epoch(message: &str) -> std::borrow::Cow<'_, str> {
    EPOCH_AFTER_PIPE.replace_all(message, |captures: &regex::Captures<'_>| {
        (captures[1].parse().ok())
            .and_then(|seconds| Utc.timestamp_opt(seconds, 0).single())
            .map_or_else(
                || captures[0].to_owned(),
                |at| format!(" (resets {} UTC)", at.format("%Y-%m-%d %H:%M")),
            )
    })
}

/// The reset time a usage-limit message gives, if any: `…|1767225600` (epoch seconds), `try
/// again in 5 minutes`, `resets at 2026-01-01T00:00:00Z`.
///
/// A time more than [`MAX_RESET_WAIT_HOURS`] ahead is not believed (it would keep a loop asleep for
/// days on a garbled message); the caller then backs off as if no time was given.
pub(crate) fn reset_time(message: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let at = if let Some(captures) = EPOCH_AFTER_PIPE.captures(message) {
        let seconds: i64 = captures[1].parse().ok()?;
        Utc.timestamp_opt(seconds, 0).single()?
    } else if let Some(captures) = ABSOLUTE.captures(message) {
        DateTime::parse_from_rfc3339(&captures[1])
            .ok()?
            .with_timezone(&Utc)
    } else if let Some(captures) = RELATIVE.captures(message) {
        let amount: i64 = captures[1].parse().ok()?;
        let unit = captures[2].to_lowercase();
        let scale = match unit.chars().next() {
            Some('h') => 3600,
            Some('m') => 60,
            _ => 1,
        };
        let delta = chrono::Duration::try_seconds(amount.checked_mul(scale)?)?;
        now.checked_add_signed(delta)?
    } else {
        return None;
    };
    (at <= now + chrono::Duration::hours(MAX_RESET_WAIT_HOURS)).then_some(at)
}

/// The longest wait for a provider's reset time that ralph believes.
pub(crate) const MAX_RESET_WAIT_HOURS: i64 = 24;

/// Why a loop or a run ended, as a kind: the `stop` field of `run_ended` and `parallel_ended`,
/// and of the state a stopped loop leaves, so nothing reads it back from prose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StopKind {
    /// The promise was kept (a run: every task done).
    Completed,
    MaxIterations,
    MaxRuntime,
    MaxCost,
    MaxTokens,
    /// The agent printed the abort promise.
    Aborted,
    /// No file changes in `--max-stalled` iterations in a row.
    Stalled,
    AgentFailed,
    LegacyPlugin,
    /// ralph itself failed.
    RalphFailed,
    /// The agent exited with an error and changed nothing, several iterations in a row.
    AgentKeptFailing,
    /// No open task can be started (failed, or waiting for a failed one).
    Blocked,
    /// A verify command could not run at all.
    Unverified,
    /// `--protect-mode fail`: the agent changed protected paths.
    Tampered,
    /// Ctrl+C, a stop request, SIGTERM.
    Interrupted,
}

/// The outcome of one verification command.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Verification {
    pub(crate) command: String,
    pub(crate) passed: bool,
    /// The exit code; absent when the command timed out or could not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) timed_out: bool,
    /// The last lines of its output (stdout and stderr together).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) output_tail: String,
    /// How long it ran.
    #[serde(default)]
    pub(crate) duration_ms: u64,
    /// The git tree of the work tree it ran on (ignored files left out); absent outside a
    /// repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tree: Option<String>,
    /// With `--protect`: one hash of the protected files as the check found them (each file's
    /// blob and path) — the evidence that it judged them as the task found them, not as the
    /// agent would have them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) protected_tree: Option<String>,
}

impl Verification {
    /// The command could not run at all (not found: 127; not executable: 126): nothing was
    /// verified.
    pub(crate) fn could_not_run(&self) -> bool {
        matches!(self.exit_code, Some(126 | 127))
    }

    /// `exit code 1`, `timed out`, `could not start`.
    pub(crate) fn outcome(&self) -> String {
        match (self.timed_out, self.exit_code) {
            (true, _) => "timed out".to_owned(),
            (false, Some(127)) => "exit code 127: command not found".to_owned(),
            (false, Some(126)) => "exit code 126: not executable".to_owned(),
            (false, Some(code)) => format!("exit code {code}"),
            (false, None) => "could not start".to_owned(),
        }
    }
}

/// The `--sandbox-allow` value that lets the agent reach `target` (`host:port`): the host alone
/// for its web ports (80 and 443, which a bare host allows), else the host and its port.
pub(crate) fn sandbox_allow_value(target: &str) -> &str {
    target
        .rsplit_once(':')
        .filter(|(_, port)| *port == "443" || *port == "80")
        .map_or(target, |(host, _)| host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn classification_by_status_then_message() {
        let kind = |status, message| Failure::classify(status, message, now()).kind;
        assert_eq!(
            kind(Some(500), "API Error: 500 boom"),
            FailureKind::ApiError
        );
        assert_eq!(kind(Some(529), "x"), FailureKind::Overloaded);
        assert_eq!(kind(Some(429), "x"), FailureKind::RateLimit);
        assert_eq!(kind(Some(401), "x"), FailureKind::Auth);
        assert_eq!(
            kind(Some(404), "model: mock-9 not found"),
            FailureKind::ModelNotFound
        );
        assert_eq!(
            kind(None, "Claude AI usage limit reached|1767225600"),
            FailureKind::RateLimit
        );
        assert_eq!(kind(None, "Overloaded"), FailureKind::Overloaded);
        assert_eq!(
            kind(None, "Unable to connect to API (ECONNREFUSED)"),
            FailureKind::Connection
        );
        assert_eq!(
            kind(None, "We're currently experiencing high demand"),
            FailureKind::ApiError
        );
    }

    #[test]
    fn a_reset_epoch_in_a_message_is_written_as_a_date() {
        let failure =
            Failure::classify(Some(429), "Claude AI usage limit reached|1767225600", now());
        assert_eq!(
            failure.message,
            "Claude AI usage limit reached (resets 2026-01-01 00:00 UTC)"
        );
        assert_eq!(
            failure.retry_at,
            reset_time("usage limit reached|1767225600", now())
        );
    }

    #[test]
    fn reset_times() {
        let epoch = reset_time("Claude AI usage limit reached|1767225600", now()).unwrap();
        assert_eq!(epoch, Utc.timestamp_opt(1_767_225_600, 0).unwrap());
        let relative = reset_time("Rate limited. Try again in 5 minutes.", now()).unwrap();
        assert_eq!(relative, now() + chrono::Duration::minutes(5));
        let absolute = reset_time("limit resets at 2026-01-01T03:00:00Z", now()).unwrap();
        assert_eq!(
            absolute,
            "2026-01-01T03:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(reset_time("no time here", now()), None);
        assert_eq!(
            reset_time("Try again in 9999999999999 seconds", now()),
            None,
            "no overflow"
        );
        assert_eq!(
            reset_time("usage limit reached|9999999999", now()),
            None,
            "not believed"
        );
    }
}
