//! GitHub Copilot CLI: `copilot -p PROMPT [--output-format json] (--yolo | --allow-tool write)
//! --no-auto-update [--model MODEL] [--usage-output-file FILE]`.
//!
//! Its event stream carries no token counts: ralph asks for a usage report with
//! `--usage-output-file` and reads it after the run ([`Agent::usage_file_events`]).

use serde_json::Value;

use super::events::{Failure, session_event, status_field, str_field, tool_event, u64_field};
use super::{
    Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, OutputFormat, Usage, command_from,
    prompt_argument,
};

pub(super) struct Copilot;

impl Agent for Copilot {
    fn kind(&self) -> Option<AgentKind> {
        Some(AgentKind::Copilot)
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let mut args = Vec::new();
        // `-p` runs one prompt headless; without it a prompt on stdin does the same.
        if let Some(prompt) = prompt_argument(request) {
            args.extend(["-p".to_owned(), prompt]);
        }
        if request.format == OutputFormat::Json {
            args.extend(["--output-format".to_owned(), "json".to_owned()]);
        }
        if request.allow_all {
            args.push("--yolo".to_owned());
        } else {
            // File edits only: shell commands are denied (a denied tool fails, nothing hangs).
            args.extend(["--allow-tool".to_owned(), "write".to_owned()]);
        }
        if let Some(tools) = request.tools {
            let entry = serde_json::json!({"type": "local", "tools": ["*"]});
            args.extend([
                "--additional-mcp-config".to_owned(),
                tools.mcp_servers_json(&entry),
            ]);
            if !request.allow_all {
                let allowed = format!("{}(*)", super::TOOL_SERVER);
                args.extend(["--allow-tool".to_owned(), allowed]);
            }
        }
        args.push("--no-auto-update".to_owned());
        if let Some(model) = request.model {
            args.extend(["--model".to_owned(), model.to_owned()]);
        }
        if let Some(file) = request.usage_file {
            args.extend([
                "--usage-output-file".to_owned(),
                file.to_string_lossy().into_owned(),
            ]);
        }
        args.extend(request.extra_args.iter().cloned());
        let mut command = command_from(request, args, Vec::new());
        command.usage_file = request.usage_file.map(std::path::Path::to_path_buf);
        command
    }

    fn takes_tools(&self) -> bool {
        true
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        Some(&super::events::CHECKMARK_TOOL_LINE)
    }

    fn parse_event(&self, line: &str) -> Option<Vec<AgentEvent>> {
        let event: Value = serde_json::from_str(line).ok()?;
        let kind = str_field(&event, "type")?;
        let data = event.get("data").unwrap_or(&Value::Null);
        let events = match kind {
            "assistant.message" => match str_field(data, "content") {
                Some(text) if !text.trim().is_empty() => {
                    vec![AgentEvent::FinalText(text.to_owned())]
                }
                _ => vec![AgentEvent::Quiet],
            },
            "tool.execution_start" => {
                vec![tool_event(
                    str_field(data, "toolName")?,
                    data.get("arguments"),
                )]
            }
            "tool.execution_complete"
                if data.get("success").and_then(Value::as_bool) == Some(false) =>
            {
                let message = data
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("the tool call failed");
                vec![AgentEvent::ToolError(message.to_owned())]
            }
            "assistant.turn_retry" => vec![AgentEvent::Notice(format!(
                "Copilot CLI is retrying the model ({})",
                str_field(data, "reason").unwrap_or("error")
            ))],
            "session.error" => {
                let status = status_field(data, "statusCode");
                let message = str_field(data, "message").unwrap_or("Copilot CLI reported an error");
                let mut failure = Failure::classify(status, message, crate::model::now());
                if str_field(data, "errorType") == Some("rate_limit") && failure.retry_at.is_none()
                {
                    failure.kind = crate::model::FailureKind::RateLimit;
                }
                vec![AgentEvent::Failure(failure)]
            }
            "result" => vec![session_event(&event, "sessionId")],
            // Session, model and streaming events (`session.*`, `model.*`, `assistant.*_delta`…).
            _ if kind.contains('.') => vec![AgentEvent::Quiet],
            _ => return None,
        };
        Some(events)
    }

    fn reports_cost(&self) -> bool {
        false
    }

    fn usage_file_events(&self, text: &str) -> Vec<AgentEvent> {
        let Ok(report) = serde_json::from_str::<Value>(text) else {
            return Vec::new();
        };
        let mut usage = Usage::default();
        let mut requests = 0;
        for metrics in report
            .get("modelMetrics")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|models| models.values())
        {
            let counts = metrics.get("usage").unwrap_or(&Value::Null);
            usage.add(Usage {
                input: u64_field(counts, "inputTokens"),
                output: u64_field(counts, "outputTokens"),
                cache_read: u64_field(counts, "cacheReadTokens"),
                cache_write: u64_field(counts, "cacheWriteTokens"),
            });
            requests += metrics
                .pointer("/requests/count")
                .and_then(Value::as_u64)
                .unwrap_or(0);
        }
        let mut events = vec![AgentEvent::Usage(usage)];
        if requests > 0 {
            events.push(AgentEvent::Turns(
                u32::try_from(requests).unwrap_or(u32::MAX),
            ));
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{argv_matrix, request};
    use super::*;

    #[test]
    fn argv_for_model_and_permissions() {
        let head = ["-p", "go", "--output-format", "json"];
        let safe = ["--allow-tool", "write"];
        let expected: Vec<Vec<&str>> = vec![
            [&head[..], &safe, &["--no-auto-update"]].concat(),
            [&head[..], &["--yolo", "--no-auto-update"]].concat(),
            [&head[..], &safe, &["--no-auto-update", "--model", "m1"]].concat(),
            [&head[..], &["--yolo", "--no-auto-update", "--model", "m1"]].concat(),
        ];
        assert_eq!(argv_matrix(AgentKind::Copilot, "go"), expected);
    }

    #[test]
    fn the_usage_report_is_asked_for_and_read() {
        let file = std::path::Path::new("/tmp/u.json");
        let mut req = request("go", None, true);
        req.usage_file = Some(file);
        let command = Copilot.command(&req);
        assert!(
            command
                .display_args()
                .ends_with(&["--usage-output-file".to_owned(), "/tmp/u.json".to_owned()])
        );
        assert_eq!(command.usage_file.as_deref(), Some(file));
        let report = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/agents/copilot-usage-output-file.json"),
        )
        .unwrap();
        let events = Copilot.usage_file_events(&report);
        assert_eq!(
            events[0],
            AgentEvent::Usage(Usage {
                input: 200,
                output: 40,
                cache_read: 0,
                cache_write: 0
            })
        );
        assert_eq!(events[1], AgentEvent::Turns(2));
        assert!(Copilot.usage_file_events("not json").is_empty());
    }
}
