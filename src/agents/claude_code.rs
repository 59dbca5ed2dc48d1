//! Claude Code: `claude -p PROMPT [--model MODEL] [--dangerously-skip-permissions]`.

use std::sync::LazyLock;

use regex::Regex;

use serde_json::Value;

use super::events::{
    Failure, anthropic_usage, one_line, session_event, status_field, status_in, str_field,
    tool_detail, u64_field,
};
use super::{
    Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, OutputFormat, command_from,
    prompt_needs_stdin,
};

pub(super) struct ClaudeCode;

static TOOL_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:Using|Called|Tool:)\s+([A-Za-z0-9_-]+)").expect("valid regex")
});

impl Agent for ClaudeCode {
    fn kind(&self) -> Option<AgentKind> {
        Some(AgentKind::ClaudeCode)
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        // `-p` is a switch (print mode); the prompt is the positional argument, or stdin.
        let mut args = vec!["-p".to_owned()];
        if !prompt_needs_stdin(request.prompt) {
            args.push(request.prompt.to_owned());
        }
        if request.format == OutputFormat::Json {
            // `stream-json` is refused in print mode without `--verbose`.
            args.extend(["--output-format", "stream-json", "--verbose"].map(str::to_owned));
        }
        if let Some(model) = request.model {
            args.extend(["--model".to_owned(), model.to_owned()]);
        }
        if request.allow_all {
            args.push("--dangerously-skip-permissions".to_owned());
        }
        args.extend(request.extra_args.iter().cloned());
        let mut env = Vec::new();
        if let Some(tools) = request.tools {
            // Both take several values: last, after the prompt, they take nothing else.
            let config = tools.mcp_servers_json(&serde_json::json!({"type": "stdio"}));
            args.extend(["--mcp-config".to_owned(), config]);
            if !request.allow_all {
                args.extend(["--allowedTools".to_owned(), "mcp__ralph".to_owned()]);
            }
            env.extend(connect_wait());
        }
        command_from(request, args, env)
    }

    fn takes_tools(&self) -> bool {
        true
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        Some(&TOOL_LINE)
    }

    fn parse_event(&self, line: &str) -> Option<Vec<AgentEvent>> {
        parse_stream_json(line, "Claude Code")
    }
}

/// The variable saying how long `claude -p` waits for its tool servers before its first request.
const CONNECT_WAIT_VARIABLE: &str = "MCP_CONNECT_TIMEOUT_MS";

/// How long Claude Code waits for ralph's tool server, unless the user's environment says.
/// Its own default is five seconds, after which the first request goes without the tools that
/// are not connected yet: on a loaded machine (a fleet of agents starting at once) ralph's server
/// can take longer, and the agent would not be offered `ralph_ask` when it needs it. The wait ends
/// as soon as the servers are connected; thirty seconds is Claude Code's own limit on connecting one.
fn connect_wait() -> Option<(String, std::ffi::OsString)> {
    (std::env::var_os(CONNECT_WAIT_VARIABLE).is_none())
        .then(|| (CONNECT_WAIT_VARIABLE.to_owned(), "30000".into()))
}

/// One line of Claude Code's `stream-json` output, a format Qwen Code shares; `who` names the
/// agent in notices.
pub(super) fn parse_stream_json(line: &str, who: &str) -> Option<Vec<AgentEvent>> {
    let event: Value = serde_json::from_str(line).ok()?;
    let events = match str_field(&event, "type")? {
        "system" => match str_field(&event, "subtype") {
            Some("api_retry") => {
                let status = event
                    .get("error_status")
                    .and_then(Value::as_u64)
                    .map_or_else(String::new, |status| format!(" (HTTP {status})"));
                let error = str_field(&event, "error").unwrap_or("error");
                vec![AgentEvent::Notice(format!(
                    "{who} is retrying the API: {error}{status}, attempt {} of {}",
                    u64_field(&event, "attempt"),
                    u64_field(&event, "max_retries")
                ))]
            }
            Some("init") => vec![session_event(&event, "session_id")],
            _ => vec![AgentEvent::Quiet],
        },
        "assistant" => {
            let content = event
                .pointer("/message/content")
                .and_then(Value::as_array)?;
            content.iter().filter_map(content_block).collect()
        }
        "user" => {
            let content = event.pointer("/message/content").and_then(Value::as_array);
            let errors: Vec<AgentEvent> = content
                .into_iter()
                .flatten()
                .filter(|block| block.get("is_error").and_then(Value::as_bool) == Some(true))
                .map(|block| AgentEvent::ToolError(result_text(block.get("content"))))
                .collect();
            if errors.is_empty() {
                vec![AgentEvent::Quiet]
            } else {
                errors
            }
        }
        "result" => result_events(&event, who),
        "stream_event" | "rate_limit_event" => vec![AgentEvent::Quiet],
        _ => return None,
    };
    Some(events)
}

fn content_block(block: &Value) -> Option<AgentEvent> {
    match str_field(block, "type")? {
        "text" => Some(AgentEvent::Text(str_field(block, "text")?.to_owned())),
        "tool_use" => Some(AgentEvent::Tool {
            name: str_field(block, "name")?.to_owned(),
            detail: block.get("input").and_then(tool_detail),
        }),
        _ => None,
    }
}

/// A tool result's content: a string, or a list of text blocks.
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => one_line(text, 200),
        Some(Value::Array(blocks)) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter_map(|block| str_field(block, "text"))
                .collect();
            one_line(&texts.join(" "), 200)
        }
        _ => "the tool call failed".to_owned(),
    }
}

fn result_events(event: &Value, who: &str) -> Vec<AgentEvent> {
    let mut events = vec![anthropic_usage(event.get("usage"))];
    if let Some(cost) = event.get("total_cost_usd").and_then(Value::as_f64) {
        events.push(AgentEvent::Cost(cost));
    }
    if let Some(turns) = event.get("num_turns").and_then(Value::as_u64) {
        events.push(AgentEvent::Turns(u32::try_from(turns).unwrap_or(u32::MAX)));
    }
    let text = str_field(event, "result")
        .or_else(|| event.pointer("/error/message").and_then(Value::as_str))
        .unwrap_or("");
    if event.get("is_error").and_then(Value::as_bool) == Some(true) {
        let status = status_field(event, "api_error_status").or_else(|| status_in(text));
        let subtype = str_field(event, "subtype").unwrap_or("error");
        let about_the_api = status.is_some() || text.contains("API Error");
        let failure = if !about_the_api && subtype.starts_with("error_") {
            Failure::agent(if text.is_empty() { subtype } else { text })
        } else {
            let message = if text.is_empty() {
                format!("{who} reported an error")
            } else {
                text.to_owned()
            };
            Failure::classify(status, &message, crate::model::now())
        };
        events.push(AgentEvent::Failure(failure));
    } else {
        events.push(AgentEvent::Final(text.to_owned()));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::super::tests::request;
    use super::*;

    #[test]
    fn argv_for_model_and_permissions() {
        let cases = [
            (None, false, vec!["-p", "go"]),
            (
                None,
                true,
                vec!["-p", "go", "--dangerously-skip-permissions"],
            ),
            (Some("sonnet"), false, vec!["-p", "go", "--model", "sonnet"]),
            (
                Some("sonnet"),
                true,
                vec![
                    "-p",
                    "go",
                    "--model",
                    "sonnet",
                    "--dangerously-skip-permissions",
                ],
            ),
        ];
        for (model, allow_all, expected) in cases {
            let command = ClaudeCode.command(&request("go", model, allow_all));
            assert_eq!(command.display_args(), expected);
            assert!(command.env.is_empty());
        }
    }

    #[test]
    fn with_ralphs_tools_it_waits_for_their_server_before_its_first_request() {
        let tools = super::super::ToolServer {
            command: "/bin/ralph".to_owned(),
            args: vec!["__agent-tools".to_owned()],
        };
        let mut req = request("go", None, true);
        req.tools = Some(&tools);
        let env = ClaudeCode.command(&req).env;
        // The test's environment does not set it (`connect_wait` leaves the user's value).
        if std::env::var_os(CONNECT_WAIT_VARIABLE).is_none() {
            assert_eq!(
                env,
                vec![(CONNECT_WAIT_VARIABLE.to_owned(), "30000".into())]
            );
        }
        let args = ClaudeCode.command(&req).display_args();
        assert!(args.contains(&"--mcp-config".to_owned()), "{args:?}");
    }

    #[test]
    fn tool_lines_are_recognised() {
        assert_eq!(
            ClaudeCode.tool_in_line("Using Read on a.rs").as_deref(),
            Some("Read")
        );
        assert_eq!(
            ClaudeCode.tool_in_line("tool: Bash").as_deref(),
            Some("Bash")
        );
        assert_eq!(ClaudeCode.tool_in_line("nothing here"), None);
    }
}
