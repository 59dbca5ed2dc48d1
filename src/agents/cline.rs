//! Cline: `cline [--json] [-m MODEL] [--auto-approve false] PROMPT`.
//!
//! With `--json` every line is an object with a `type`: `hook_event` (the task id comes with
//! `agent_start`), `agent_event` (its `event`: `usage` per model call, `content_start` of a tool
//! with its name and input, `content_end` of a tool with an `error` when it failed, `content_end`
//! of a text with the whole message, `error`, `done`), `run_result` (the outcome, the final text,
//! the total cost) and a bare `error`. Cline retries a failing provider by itself for about a
//! minute, then reports `done` with `reason: "error"` and exits 1. ralph runs it with
//! `CLINE_SESSION_BACKEND_MODE=local`: by default it starts a hub daemon in a session of its
//! own that outlives the run.

use serde_json::Value;

use super::events::{failure_from_message, str_field, tool_event, u64_field};
use super::{
    Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, OutputFormat, Usage, command_from,
    prompt_argument,
};

pub(super) struct Cline;

/// The variable naming the file Cline reads its MCP servers from.
const MCP_SETTINGS_VARIABLE: &str = "CLINE_MCP_SETTINGS_PATH";

/// The user's own MCP settings file for Cline: the variable's, else Cline's default.
pub(crate) fn own_mcp_settings(
    var: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> Option<std::path::PathBuf> {
    var(MCP_SETTINGS_VARIABLE)
        .map(std::path::PathBuf::from)
        .or_else(|| {
            let home = std::path::PathBuf::from(var("HOME")?);
            Some(home.join(".cline/data/settings/cline_mcp_settings.json"))
        })
}

/// Cline's MCP settings (`own`, or new ones) with ralph's server added, its tools approved.
pub(crate) fn mcp_settings_with(tools: &super::ToolServer, own: Option<Value>) -> Value {
    let approved = ["ralph_ask", "ralph_add_task", "ralph_note", "ralph_context"];
    super::with_server(
        own,
        "mcpServers",
        serde_json::json!({
            "command": tools.command, "args": tools.args, "disabled": false, "autoApprove": approved,
        }),
    )
}

impl Agent for Cline {
    fn kind(&self) -> Option<AgentKind> {
        Some(AgentKind::Cline)
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let mut args = Vec::new();
        if request.format == OutputFormat::Json {
            args.push("--json".to_owned());
        }
        if let Some(model) = request.model {
            args.extend(["-m".to_owned(), model.to_owned()]);
        }
        // Cline approves every tool unless told not to.
        if !request.allow_all {
            args.extend(["--auto-approve".to_owned(), "false".to_owned()]);
        }
        args.extend(request.extra_args.iter().cloned());
        args.extend(prompt_argument(request));
        // Cline otherwise hands the session to a hub daemon of its own, which starts a session
        // of its own and outlives the run.
        let local = ("CLINE_SESSION_BACKEND_MODE".to_owned(), "local".into());
        let mut env = vec![local];
        if let Some(file) = request.tools_file.filter(|_| request.tools.is_some()) {
            env.push((
                MCP_SETTINGS_VARIABLE.to_owned(),
                file.as_os_str().to_owned(),
            ));
        }
        command_from(request, args, env)
    }

    fn takes_tools(&self) -> bool {
        true
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        None
    }

    fn parse_event(&self, line: &str) -> Option<Vec<AgentEvent>> {
        let event: Value = serde_json::from_str(line).ok()?;
        let events = match str_field(&event, "type")? {
            "hook_event" => match (
                str_field(&event, "hookEventName"),
                str_field(&event, "taskId"),
            ) {
                (Some("agent_start"), Some(id)) => vec![AgentEvent::Session(id.to_owned())],
                _ => vec![AgentEvent::Quiet],
            },
            "agent_event" => agent_event(event.get("event")?),
            "run_result" => {
                let mut events = Vec::new();
                let cost = event["usage"]["totalCost"]
                    .as_f64()
                    .filter(|cost| *cost > 0.0);
                events.extend(cost.map(AgentEvent::Cost));
                match (str_field(&event, "finishReason"), str_field(&event, "text")) {
                    (Some("error"), text) => events.push(failure(text)),
                    (_, Some(text)) => events.push(AgentEvent::Final(text.to_owned())),
                    _ => {}
                }
                events
            }
            // The run's failure came with `done` and `run_result`; a bare error line is shown.
            "error" => match str_field(&event, "message") {
                Some(message) => vec![AgentEvent::Notice(message.to_owned())],
                None => vec![AgentEvent::Quiet],
            },
            _ => return None,
        };
        Some(events)
    }

    fn reports_cost(&self) -> bool {
        true
    }
}

/// One `agent_event`'s `event`.
fn agent_event(event: &Value) -> Vec<AgentEvent> {
    let tool = str_field(event, "contentType") == Some("tool");
    match str_field(event, "type") {
        Some("usage") => vec![AgentEvent::Usage(Usage {
            input: u64_field(event, "inputTokens"),
            output: u64_field(event, "outputTokens"),
            cache_read: u64_field(event, "cacheReadTokens"),
            cache_write: u64_field(event, "cacheWriteTokens"),
        })],
        Some("content_start") if tool => vec![tool_event(
            str_field(event, "toolName").unwrap_or("tool"),
            event.get("input"),
        )],
        Some("content_end") if tool => match str_field(event, "error") {
            Some(error) => vec![AgentEvent::ToolError(error.to_owned())],
            None => vec![AgentEvent::Quiet],
        },
        Some("content_end") => match str_field(event, "text") {
            Some(text) => vec![AgentEvent::FinalText(text.to_owned())],
            None => vec![AgentEvent::Quiet],
        },
        Some("iteration_end") => vec![AgentEvent::Turns(1)],
        Some("error") if event["recoverable"] == false => {
            vec![failure(str_field(&event["error"], "message"))]
        }
        Some("done") if str_field(event, "reason") == Some("error") => {
            vec![failure(str_field(event, "text"))]
        }
        _ => vec![AgentEvent::Quiet],
    }
}

fn failure(message: Option<&str>) -> AgentEvent {
    let message = message.unwrap_or("Cline stopped with an error");
    AgentEvent::Failure(failure_from_message(message))
}

#[cfg(test)]
mod tests {
    use super::super::tests::argv_matrix;
    use super::*;

    #[test]
    fn argv() {
        let argv = |extra: &[&str]| {
            let mut argv = vec!["--json".to_owned()];
            argv.extend(extra.iter().map(|arg| (*arg).to_owned()));
            argv.push("go".to_owned());
            argv
        };
        assert_eq!(
            argv_matrix(AgentKind::Cline, "go"),
            [
                argv(&["--auto-approve", "false"]),
                argv(&[]),
                argv(&["-m", "m1", "--auto-approve", "false"]),
                argv(&["-m", "m1"]),
            ]
        );
    }
}
