//! Gemini CLI: `gemini -p PROMPT [-o stream-json] (--yolo | --approval-mode auto_edit)
//! --skip-trust [-m MODEL]`.
//!
//! Quirks: the answer arrives in pieces (`message` events with `delta: true`) that must be
//! joined before the promise is looked for; in JSON mode an API error exits with the HTTP status
//! truncated to 8 bits (500 → 244), so the `result` event decides, not the exit code; a folder
//! it does not trust ends a headless run with exit 55, hence `--skip-trust`.

use serde_json::Value;

use super::events::{
    Failure, failure_from_message, session_event, str_field, tool_event, u64_field,
};
use super::{
    Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, ConfigHome, OutputFormat, Usage,
    command_from, prompt_argument,
};

pub(super) struct Gemini;

/// Gemini CLI takes MCP servers from its settings files only, and its system-wide ones must be
/// root's: ralph's server goes into a copy of the user's `settings.json` in a home of ralph's
/// (`GEMINI_CLI_HOME`), trusted so that a call needs no confirmation.
const CONFIG_HOME: ConfigHome = ConfigHome {
    variable: "GEMINI_CLI_HOME",
    folder: ".gemini",
    file: "settings.json",
    with_tools: settings_with_tools,
};

fn settings_with_tools(tools: &super::ToolServer, own: Option<Value>) -> Value {
    let server = serde_json::json!({"command": tools.command, "args": tools.args, "trust": true});
    let mut settings = super::with_server(own, "mcpServers", server);
    // A list of the servers allowed leaves out any other: ralph's joins it.
    if let Some(allowed) = settings
        .pointer_mut("/mcp/allowed")
        .and_then(Value::as_array_mut)
        && !allowed.iter().any(|name| name == super::TOOL_SERVER)
    {
        allowed.push(super::TOOL_SERVER.into());
    }
    if let Some(excluded) = settings
        .pointer_mut("/mcp/excluded")
        .and_then(Value::as_array_mut)
    {
        excluded.retain(|name| name != super::TOOL_SERVER);
    }
    settings
}

impl Agent for Gemini {
    fn kind(&self) -> Option<AgentKind> {
        Some(AgentKind::Gemini)
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let mut args = Vec::new();
        // `-p` makes the run headless; without it a prompt on stdin does the same.
        if let Some(prompt) = prompt_argument(request) {
            args.extend(["-p".to_owned(), prompt]);
        }
        if request.format == OutputFormat::Json {
            args.extend(["-o".to_owned(), "stream-json".to_owned()]);
        }
        if request.allow_all {
            args.push("--yolo".to_owned());
        } else {
            args.extend(["--approval-mode".to_owned(), "auto_edit".to_owned()]);
        }
        args.push("--skip-trust".to_owned());
        if let Some(model) = request.model {
            args.extend(["-m".to_owned(), model.to_owned()]);
        }
        args.extend(request.extra_args.iter().cloned());
        command_from(request, args, super::tools_home_env(request, &CONFIG_HOME))
    }

    fn takes_tools(&self) -> bool {
        true
    }

    fn config_home(&self) -> Option<ConfigHome> {
        Some(CONFIG_HOME)
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        Some(&super::events::CHECKMARK_TOOL_LINE)
    }

    fn parse_event(&self, line: &str) -> Option<Vec<AgentEvent>> {
        let event: Value = serde_json::from_str(line).ok()?;
        let events = match str_field(&event, "type")? {
            "init" => vec![session_event(&event, "session_id")],
            "message" => match (str_field(&event, "role"), str_field(&event, "content")) {
                (Some("assistant"), Some(text)) => vec![AgentEvent::TextPiece(text.to_owned())],
                _ => vec![AgentEvent::Quiet],
            },
            "tool_use" => vec![tool_event(
                str_field(&event, "tool_name")?,
                event.get("parameters"),
            )],
            "tool_result" if str_field(&event, "status") == Some("error") => {
                let message = event
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("the tool call failed");
                vec![AgentEvent::ToolError(message.to_owned())]
            }
            "tool_result" => vec![AgentEvent::Quiet],
            "error" => vec![AgentEvent::Notice(format!(
                "Gemini CLI: {}",
                str_field(&event, "message").unwrap_or("warning")
            ))],
            "result" => result_events(&event),
            _ => return None,
        };
        Some(events)
    }

    fn reports_cost(&self) -> bool {
        false
    }

    fn exit_failure(&self, code: i32) -> Option<Failure> {
        let why = match code {
            41 => {
                return Some(Failure::classify(
                    Some(401),
                    "Gemini CLI could not authenticate (exit 41): check GEMINI_API_KEY or the auth type in ~/.gemini/settings.json",
                    crate::model::now(),
                ));
            }
            42 => "Gemini CLI rejected its input (exit 42)",
            44 => "Gemini CLI's sandbox failed (exit 44)",
            52 => "Gemini CLI's configuration is invalid (exit 52)",
            53 => "Gemini CLI reached its session-turn limit (exit 53)",
            54 => "a Gemini CLI tool failed to run (exit 54)",
            55 => "Gemini CLI does not trust this folder (exit 55)",
            _ => return None,
        };
        Some(Failure::agent(why))
    }
}

fn result_events(event: &Value) -> Vec<AgentEvent> {
    let stats = event.get("stats").unwrap_or(&Value::Null);
    let cached = u64_field(stats, "cached");
    let mut events = vec![AgentEvent::Usage(Usage {
        input: u64_field(stats, "input_tokens").saturating_sub(cached),
        output: u64_field(stats, "output_tokens"),
        cache_read: cached,
        cache_write: 0,
    })];
    if str_field(event, "status") == Some("error") {
        let message = event
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("Gemini CLI reported an error");
        events.push(AgentEvent::Failure(failure_from_message(message)));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::super::tests::{argv_matrix, request};
    use super::*;

    #[test]
    fn argv_for_model_and_permissions() {
        let safe = ["--approval-mode", "auto_edit"];
        let expected: Vec<Vec<&str>> = vec![
            [
                &["-p", "go", "-o", "stream-json"][..],
                &safe,
                &["--skip-trust"],
            ]
            .concat(),
            vec!["-p", "go", "-o", "stream-json", "--yolo", "--skip-trust"],
            [
                &["-p", "go", "-o", "stream-json"][..],
                &safe,
                &["--skip-trust", "-m", "m1"],
            ]
            .concat(),
            vec![
                "-p",
                "go",
                "-o",
                "stream-json",
                "--yolo",
                "--skip-trust",
                "-m",
                "m1",
            ],
        ];
        assert_eq!(argv_matrix(AgentKind::Gemini, "go"), expected);
        let text = Gemini.command(&request("go", None, true));
        assert_eq!(text.display_args(), ["-p", "go", "--yolo", "--skip-trust"]);
    }

    #[test]
    fn pieces_of_the_answer_and_an_error_result() {
        assert_eq!(
            Gemini.parse_event(
                r#"{"type":"message","role":"assistant","content":"Do","delta":true}"#
            ),
            Some(vec![AgentEvent::TextPiece("Do".into())])
        );
        let events = Gemini
            .parse_event(r#"{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: {\"error\":{\"code\":401}}]"},"stats":{}}"#)
            .unwrap();
        assert!(
            matches!(&events[1], AgentEvent::Failure(f) if f.kind == crate::model::FailureKind::Auth)
        );
        assert_eq!(
            Gemini.exit_failure(55).map(|f| f.kind),
            Some(crate::model::FailureKind::AgentError)
        );
        assert_eq!(Gemini.exit_failure(244), None);
    }

    #[test]
    fn tool_lines_are_recognised() {
        assert_eq!(
            Gemini.tool_in_line("✓  write_file hello.txt").as_deref(),
            Some("write_file")
        );
        assert_eq!(Gemini.tool_in_line("I wrote the file."), None);
    }
}
