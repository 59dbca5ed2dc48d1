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
    /// A piece of the assistant message being streamed; pieces are joined and shown as one
    /// [`AgentEvent::Text`] when the message ends (at the next other event).
    TextPiece(String),
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
    /// The agent's id for this conversation (to find it in the agent's own records).
    Session(String),
    /// Why the agent ended its turn (ACP: `end_turn`, `max_tokens`, `refusal`, `cancelled`…).
    StopReason(String),
    /// The final assistant message (the last one wins).
    Final(String),
    /// A message shown like [`AgentEvent::Text`] that is also the final message so far (one
    /// event, one copy of the text, for the agents whose every message may be the last).
    FinalText(String),
    /// The run failed.
    Failure(Failure),
    /// Something worth a line (a retry, a warning).
    Notice(String),
    /// The agent retries after a failure it reported: that failure no longer decides.
    Retrying(String),
    /// A known event with nothing to show.
    Quiet,
}

impl AgentEvent {
    /// The text this event carries, for the kinds that carry one (a message or a piece of one).
    pub(crate) fn text_mut(&mut self) -> Option<&mut String> {
        match self {
            Self::Text(text)
            | Self::TextPiece(text)
            | Self::Final(text)
            | Self::FinalText(text) => Some(text),
            _ => None,
        }
    }
}

/// A JSON value's field as a string.
pub(crate) fn str_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// A JSON value's field as an HTTP status, when it is one.
pub(crate) fn status_field(value: &Value, key: &str) -> Option<u16> {
    value
        .get(key)
        .and_then(Value::as_u64)
        .and_then(|code| u16::try_from(code).ok())
}

/// A JSON value's field as a whole number (0 when absent).
pub(crate) fn u64_field(value: &Value, key: &str) -> u64 {
    value.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// The session id in `value[key]`, or nothing to report.
pub(crate) fn session_event(value: &Value, key: &str) -> AgentEvent {
    str_field(value, key).map_or(AgentEvent::Quiet, |id| AgentEvent::Session(id.to_owned()))
}

/// Token counts named as Anthropic's API names them (`input_tokens`, `output_tokens`,
/// `cache_read_input_tokens`, `cache_creation_input_tokens`), which Claude Code, Qwen Code and
/// Droid report.
pub(crate) fn anthropic_usage(usage: Option<&Value>) -> AgentEvent {
    let usage = usage.unwrap_or(&Value::Null);
    AgentEvent::Usage(Usage {
        input: u64_field(usage, "input_tokens"),
        output: u64_field(usage, "output_tokens"),
        cache_read: u64_field(usage, "cache_read_input_tokens"),
        cache_write: u64_field(usage, "cache_creation_input_tokens"),
    })
}

/// A tool line of the CLIs that mark each tool call with a check, a cross or a dot (Gemini CLI,
/// Qwen Code, Copilot CLI): `✓ write_file hello.txt`, `● Create hello.txt`; the name is one word.
pub(crate) static CHECKMARK_TOOL_LINE: std::sync::LazyLock<regex::Regex> =
    std::sync::LazyLock::new(|| {
        regex::Regex::new(r"^\s*[●✓✔✗x]\s+([A-Za-z][A-Za-z0-9_]*)\b").expect("valid regex")
    });

/// The HTTP status an error message starts with or quotes: `429 Too many…`, `[API Error: 500
/// …]`, `{"error":{"code":401,…}}`.
pub(crate) fn status_in(message: &str) -> Option<u16> {
    static STATUS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r#"(?:^\s*|API Error:?\s*|"code"\s*:\s*|status(?:Code)?\s*:?\s*)([1-5]\d\d)\b"#,
        )
        .expect("valid regex")
    });
    STATUS.captures(message)?.get(1)?.as_str().parse().ok()
}

/// A failure reported only as a message: its status is read from the text.
pub(crate) fn failure_from_message(message: &str) -> Failure {
    Failure::classify(status_in(message), message, crate::model::now())
}

/// A tool call as ralph shows it: the name with a capital (`write` → `Write`) and the main
/// argument of its input.
pub(crate) fn tool_event(name: &str, input: Option<&Value>) -> AgentEvent {
    AgentEvent::Tool {
        name: capitalized(name),
        detail: input.and_then(tool_detail),
    }
}

/// `write` → `Write`, so tool names read the same for every agent.
pub(crate) fn capitalized(name: &str) -> String {
    let mut chars = name.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
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

/// The first line of `text`, cut to `columns` terminal columns.
pub(crate) fn one_line(text: &str, columns: usize) -> String {
    let first = text.trim().lines().next().unwrap_or("");
    crate::text::fit(first, columns)
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
    fn statuses_are_read_from_messages() {
        assert_eq!(status_in("429 mock: scripted failure 429"), Some(429));
        assert_eq!(status_in("[API Error: 500 boom]"), Some(500));
        assert_eq!(
            status_in(r#"[API Error: {"error":{"code":401,"message":"no"}}]"#),
            Some(401)
        );
        assert_eq!(status_in("Connection error."), None);
        assert_eq!(status_in("wrote 200 lines"), None);
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
