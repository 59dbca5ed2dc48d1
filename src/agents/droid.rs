//! Factory Droid: `droid exec (--skip-permissions-unsafe | --auto low) [-m MODEL]
//! [-o stream-json] PROMPT`.
//!
//! A failed run prints the API error as an `error` event, then a second one ("Exec failed")
//! from the CLI itself; the first one is the failure.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::events::{
    Failure, anthropic_usage, failure_from_message, session_event, str_field, tool_event,
};
use super::{
    Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, ConfigHome, OutputFormat,
    command_from, prompt_argument,
};

pub(super) struct Droid;

/// `droid exec` takes MCP servers from `~/.factory/mcp.json` and the project's only: ralph's
/// server goes into a copy of the user's in a home of ralph's (`FACTORY_HOME_OVERRIDE`).
const CONFIG_HOME: ConfigHome = ConfigHome {
    variable: "FACTORY_HOME_OVERRIDE",
    folder: ".factory",
    file: "mcp.json",
    with_tools: mcp_with_tools,
};

fn mcp_with_tools(tools: &super::ToolServer, own: Option<Value>) -> Value {
    let server = serde_json::json!({
        "type": "stdio", "command": tools.command, "args": tools.args, "disabled": false,
    });
    super::with_server(own, "mcpServers", server)
}

static TOOL_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s*[⛬●•]?\s*(Read|LS|Execute|Edit|ApplyPatch|Grep|Glob|Create)\b")
        .expect("valid regex")
});

impl Agent for Droid {
    fn kind(&self) -> Option<AgentKind> {
        Some(AgentKind::Droid)
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let mut args = vec!["exec".to_owned()];
        if request.allow_all {
            args.push("--skip-permissions-unsafe".to_owned());
        } else {
            args.extend(["--auto".to_owned(), "low".to_owned()]);
        }
        if let Some(model) = request.model {
            args.extend(["-m".to_owned(), model.to_owned()]);
        }
        if request.format == OutputFormat::Json {
            args.extend(["-o".to_owned(), "stream-json".to_owned()]);
        }
        args.extend(request.extra_args.iter().cloned());
        // Without a prompt argument, `droid exec` reads it from stdin.
        args.extend(prompt_argument(request));
        command_from(request, args, super::tools_home_env(request, &CONFIG_HOME))
    }

    fn takes_tools(&self) -> bool {
        true
    }

    fn config_home(&self) -> Option<ConfigHome> {
        Some(CONFIG_HOME)
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        Some(&TOOL_LINE)
    }

    fn parse_event(&self, line: &str) -> Option<Vec<AgentEvent>> {
        let event: Value = serde_json::from_str(line).ok()?;
        let events = match str_field(&event, "type")? {
            "system" => vec![session_event(&event, "session_id")],
            "message" => match (str_field(&event, "role"), str_field(&event, "text")) {
                (Some("assistant"), Some(text)) => vec![AgentEvent::Text(text.to_owned())],
                _ => vec![AgentEvent::Quiet],
            },
            "tool_call" => vec![tool_event(
                str_field(&event, "toolName")?,
                event.get("parameters"),
            )],
            "tool_result" if event.get("isError").and_then(Value::as_bool) == Some(true) => {
                let value = str_field(&event, "value").unwrap_or("the tool call failed");
                vec![AgentEvent::ToolError(super::events::one_line(value, 200))]
            }
            "tool_result" => vec![AgentEvent::Quiet],
            "completion" => {
                let mut events = vec![anthropic_usage(event.get("usage"))];
                if let Some(turns) = event.get("numTurns").and_then(Value::as_u64) {
                    events.push(AgentEvent::Turns(u32::try_from(turns).unwrap_or(u32::MAX)));
                }
                if let Some(text) = str_field(&event, "finalText") {
                    events.push(AgentEvent::Final(text.to_owned()));
                }
                events
            }
            "error" => {
                let message = str_field(&event, "message").unwrap_or("Droid reported an error");
                if str_field(&event, "source") == Some("cli") && message == "Exec failed" {
                    // The CLI's own closing line after the error that explains it.
                    vec![AgentEvent::Quiet]
                } else if str_field(&event, "source") == Some("cli") {
                    vec![AgentEvent::Failure(Failure::agent(message))]
                } else {
                    vec![AgentEvent::Failure(failure_from_message(message))]
                }
            }
            _ => return None,
        };
        Some(events)
    }

    fn reports_cost(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::argv_matrix;
    use super::*;

    #[test]
    fn argv_for_model_and_permissions() {
        let json = ["-o", "stream-json", "go"];
        let expected: Vec<Vec<&str>> = vec![
            [&["exec", "--auto", "low"][..], &json].concat(),
            [&["exec", "--skip-permissions-unsafe"][..], &json].concat(),
            [&["exec", "--auto", "low", "-m", "m1"][..], &json].concat(),
            [
                &["exec", "--skip-permissions-unsafe", "-m", "m1"][..],
                &json,
            ]
            .concat(),
        ];
        assert_eq!(argv_matrix(AgentKind::Droid, "go"), expected);
    }
}
