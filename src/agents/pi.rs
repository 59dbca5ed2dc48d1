//! pi: `pi -p [--mode json] [--model MODEL] --no-session [--tools read,edit,write] PROMPT`.
//!
//! pi has no permission system: its tools run without asking. `--no-allow-all` leaves its shell
//! tool out. Quirks: it reads stdin to the end and merges it into the prompt, so an open stdin
//! blocks it (ralph's stdin is null, or the prompt, closed); in JSON mode it exits 0 after an API
//! failure, which only its assistant message's `stopReason: "error"` tells.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::events::{failure_from_message, session_event, str_field, tool_event, u64_field};
use super::{
    Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, OutputFormat, Usage, command_from,
    prompt_argument,
};

pub(super) struct Pi;

static TOOL_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s*(?:[→>$]\s*)?(read|bash|edit|write)\b").expect("valid regex")
});

impl Agent for Pi {
    fn kind(&self) -> Option<AgentKind> {
        Some(AgentKind::Pi)
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let mut args = vec!["-p".to_owned()];
        if request.format == OutputFormat::Json {
            args.extend(["--mode".to_owned(), "json".to_owned()]);
        }
        if let Some(model) = request.model {
            args.extend(["--model".to_owned(), model.to_owned()]);
        }
        // Each iteration is a fresh conversation; ralph keeps the history.
        args.push("--no-session".to_owned());
        if !request.allow_all {
            args.extend(["--tools".to_owned(), "read,edit,write".to_owned()]);
        }
        args.extend(request.extra_args.iter().cloned());
        args.extend(prompt_argument(request));
        command_from(request, args, Vec::new())
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        Some(&TOOL_LINE)
    }

    fn parse_event(&self, line: &str) -> Option<Vec<AgentEvent>> {
        let event: Value = serde_json::from_str(line).ok()?;
        let events = match str_field(&event, "type")? {
            "session" => vec![session_event(&event, "id")],
            "agent_start"
            | "agent_end"
            | "turn_start"
            | "turn_end"
            | "message_start"
            | "message_update"
            | "tool_execution_update"
            | "auto_retry_end"
            | "compaction_start"
            | "compaction_end"
            | "queue_update" => vec![AgentEvent::Quiet],
            "message_end" => message_end(event.get("message")?),
            "tool_execution_start" => vec![tool_event(
                str_field(&event, "toolName")?,
                event.get("args"),
            )],
            "tool_execution_end" if event.get("isError").and_then(Value::as_bool) == Some(true) => {
                let text = event
                    .pointer("/result/content/0/text")
                    .and_then(Value::as_str)
                    .unwrap_or("the tool call failed");
                vec![AgentEvent::ToolError(super::events::one_line(text, 200))]
            }
            "tool_execution_end" => vec![AgentEvent::Quiet],
            "auto_retry_start" => vec![AgentEvent::Retrying(format!(
                "pi is retrying: {}, attempt {} of {}",
                str_field(&event, "errorMessage").unwrap_or("error"),
                u64_field(&event, "attempt"),
                u64_field(&event, "maxAttempts")
            ))],
            _ => return None,
        };
        Some(events)
    }
}

/// A complete message: an assistant's text, usage and cost, or its failure.
fn message_end(message: &Value) -> Vec<AgentEvent> {
    if str_field(message, "role") != Some("assistant") {
        return vec![AgentEvent::Quiet];
    }
    let usage = message.get("usage").unwrap_or(&Value::Null);
    let mut events = vec![
        AgentEvent::Usage(Usage {
            input: u64_field(usage, "input"),
            output: u64_field(usage, "output"),
            cache_read: u64_field(usage, "cacheRead"),
            cache_write: u64_field(usage, "cacheWrite"),
        }),
        AgentEvent::Turns(1),
    ];
    if let Some(cost) = usage.pointer("/cost/total").and_then(Value::as_f64) {
        events.push(AgentEvent::Cost(cost));
    }
    let texts: Vec<&str> = message
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|block| str_field(block, "type") == Some("text"))
        .filter_map(|block| str_field(block, "text"))
        .collect();
    if !texts.is_empty() {
        let text = texts.join("\n");
        events.push(AgentEvent::FinalText(text));
    }
    if str_field(message, "stopReason") == Some("error") {
        let error = str_field(message, "errorMessage").unwrap_or("pi reported an error");
        events.push(AgentEvent::Failure(failure_from_message(error)));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::super::tests::argv_matrix;
    use super::*;

    #[test]
    fn argv_for_model_and_permissions() {
        let head = ["-p", "--mode", "json"];
        let safe = ["--tools", "read,edit,write"];
        let expected: Vec<Vec<&str>> = vec![
            [&head[..], &["--no-session"], &safe, &["go"]].concat(),
            [&head[..], &["--no-session", "go"]].concat(),
            [
                &head[..],
                &["--model", "m1", "--no-session"],
                &safe,
                &["go"],
            ]
            .concat(),
            [&head[..], &["--model", "m1", "--no-session", "go"]].concat(),
        ];
        assert_eq!(argv_matrix(AgentKind::Pi, "go"), expected);
    }

    #[test]
    fn a_retry_clears_the_failure_before_it() {
        let events = Pi
            .parse_event(
                r#"{"type":"auto_retry_start","attempt":1,"maxAttempts":3,"errorMessage":"429 x"}"#,
            )
            .unwrap();
        assert!(matches!(&events[0], AgentEvent::Retrying(m) if m.contains("attempt 1 of 3")));
    }
}
