//! Errors that end a command, typed with their exit status and how they are shown. Modules
//! return them; only `main` prints them (through `output`), once.

use crate::exit::ExitStatus;

/// What went wrong, for the user: one message (continuation lines indented), the exit status,
/// and whether a pointer to `--help` helps.
#[derive(Debug)]
pub(crate) struct Error {
    pub(crate) message: String,
    pub(crate) status: ExitStatus,
    /// A usage mistake: the message is followed by "Run 'ralph --help' for available options",
    /// and nothing was touched.
    pub(crate) usage: bool,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// A usage mistake (exit 1, with the `--help` pointer).
pub(crate) fn usage(message: impl Into<String>) -> Error {
    Error {
        message: message.into(),
        status: ExitStatus::Error,
        usage: true,
    }
}

/// A failure that is not about usage (exit 1).
pub(crate) fn fail(message: impl Into<String>) -> Error {
    Error {
        message: message.into(),
        status: ExitStatus::Error,
        usage: false,
    }
}

/// What any error that reaches `main` is shown as: ours as they are, others (I/O, git) as a
/// failure with their causes on one line.
pub(crate) fn classify(err: anyhow::Error) -> Error {
    match err.downcast::<Error>() {
        Ok(ours) => ours,
        Err(other) => fail(format!("{other:#}")),
    }
}
