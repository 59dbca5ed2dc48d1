//! Process exit statuses: the one place where ralph's exit codes are defined.
//!
//! Keep this file, the README's "Exit codes" table and `specs/cli.md` in sync.

/// How a ralph invocation ended, as seen by the shell that started it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExitStatus {
    /// 0: the agent kept its promise, or a command such as `--status` finished.
    Success,
    /// 1: bad usage, a missing agent binary, another loop running, or a fatal error.
    Error,
    /// 2: a limit stopped the loop before completion (`--max-iterations`, `--max-runtime`,
    /// `--max-cost`, `--max-tokens`).
    LimitReached,
    /// 3: the loop was stopped on purpose before completion: the agent's abort promise, too many
    /// iterations without changes, or every remaining task blocked.
    Stopped,
    /// 130: the user interrupted the loop (Ctrl-C, SIGTERM or SIGHUP).
    Interrupted,
}

impl ExitStatus {
    /// The numeric code the process exits with.
    pub(crate) fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Error => 1,
            Self::LimitReached => 2,
            Self::Stopped => 3,
            Self::Interrupted => 130,
        }
    }
}

impl From<ExitStatus> for std::process::ExitCode {
    fn from(status: ExitStatus) -> Self {
        Self::from(status.code())
    }
}

#[cfg(test)]
mod tests {
    use super::ExitStatus;

    #[test]
    fn codes_match_the_documented_table() {
        let table = [
            (ExitStatus::Success, 0),
            (ExitStatus::Error, 1),
            (ExitStatus::LimitReached, 2),
            (ExitStatus::Stopped, 3),
            (ExitStatus::Interrupted, 130),
        ];
        for (status, code) in table {
            assert_eq!(status.code(), code, "{status:?}");
        }
    }
}
