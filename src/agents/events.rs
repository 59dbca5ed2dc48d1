//! What ralph understands from an agent's JSON event stream, and how failures are classified.
//!
//! Each agent's parser turns one stdout line into [`AgentEvent`]s. A line that is not JSON, or is
//! JSON of a type the parser does not know, yields `None`, and the caller shows it as text.
//! Failures are classified from the structured fields the agents report (HTTP status, error
//! type, the error message of a failure event) — never from the agent's prose about the user's
//! code.

use serde_json::Value;

pub(crate) use crate::model::{Failure, FailureKind, Usage};

/// One thing an agent reported.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum AgentEvent {
    /// Assistant text to show (complete, may span lines).
    Text(String),
    /// A tool call.
    Tool {
        name: String,
        detail: Option<String>,
    },
    /// A tool call failed (permission denied, command failed…).
    ToolError(String),
    /// Tokens used, to be added to the iteration's total.
    Usage(Usage),
    /// Cost in USD, to be added to the iteration's total.
    Cost(f64),
    /// Model turns, to be added.
    Turns(u32),
    /// The final assistant message (the last one wins).
    Final(String),
    /// The run failed.
    Failure(Failure),
    /// Something worth a line (a retry, a warning).
    Notice(String),
    /// A known event with nothing to show.
    Quiet,
}

/// A JSON value's field as a string.
pub(crate) fn str_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// A JSON value's field as a whole number (0 when absent).
pub(crate) fn u64_field(value: &Value, key: &str) -> u64 {
    value.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// A short description of a tool call from its input: the path, command, pattern or URL.
pub(crate) fn tool_detail(input: &Value) -> Option<String> {
    const KEYS: [&str; 10] = [
        "file_path",
        "filePath",
        "path",
        "command",
        "cmd",
        "pattern",
        "url",
        "query",
        "notebook_path",
        "description",
    ];
    let text = KEYS.iter().find_map(|key| match input.get(*key) {
        Some(Value::String(text)) if !text.trim().is_empty() => Some(text.clone()),
        Some(Value::Array(items)) => {
            let parts: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
            (!parts.is_empty()).then(|| parts.join(" "))
        }
        _ => None,
    })?;
    Some(one_line(&text, 120))
}

/// A shell command as a person wants to read it: without a `bash -lc "…"` wrapper, on one line
/// (white space runs folded), cut to 120 characters.
pub(crate) fn command_detail(command: &str) -> String {
    let mut text = command.trim();
    for wrapper in [
        "/bin/bash -lc ",
        "bash -lc ",
        "/bin/sh -c ",
        "sh -c ",
        "/bin/zsh -lc ",
        "zsh -lc ",
    ] {
        if let Some(rest) = text.strip_prefix(wrapper) {
            text = rest.trim();
            if let Some(inner) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
                text = inner;
            } else if let Some(inner) = text.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')) {
                text = inner;
            }
            break;
        }
    }
    let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
    one_line(&folded, 120)
}

/// The first line of `text`, cut to `max` characters.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let first = text.trim().lines().next().unwrap_or("");
    if first.chars().count() > max {
        format!("{}…", first.chars().take(max).collect::<String>())
    } else {
        first.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_commands_read_well() {
        assert_eq!(
            command_detail("/bin/bash -lc \"cargo test\nmore\""),
            "cargo test more"
        );
        assert_eq!(command_detail("ls -la"), "ls -la");
    }

    #[test]
    fn tool_details() {
        assert_eq!(
            tool_detail(&serde_json::json!({"file_path": "src/main.rs"})).as_deref(),
            Some("src/main.rs")
        );
        assert_eq!(
            tool_detail(&serde_json::json!({"command": "cargo test\nmore"})).as_deref(),
            Some("cargo test")
        );
        assert_eq!(
            tool_detail(&serde_json::json!({"cmd": ["bash", "-lc", "ls"]})).as_deref(),
            Some("bash -lc ls")
        );
        assert_eq!(tool_detail(&serde_json::json!({})), None);
    }
}
