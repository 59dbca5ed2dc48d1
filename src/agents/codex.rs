//! Codex: `codex exec [--model MODEL] [--sandbox workspace-write --skip-git-repo-check] PROMPT`.
//!
//! Codex 0.169 removed `--full-auto` (passing it exits 2). Its `exec` mode never asks for
//! approval, so ralph's `--allow-all` maps to the workspace-write sandbox, plus
//! `--skip-git-repo-check` so a directory that is not a trusted git repository still works.

use std::sync::LazyLock;

use regex::Regex;

use serde_json::Value;

use super::events::{Failure, command_detail, one_line, session_event, str_field, u64_field};
use super::{
    Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, OutputFormat, Usage, command_from,
    prompt_needs_stdin,
};

pub(super) struct Codex;

static TOOL_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:Tool:|Using|Calling|Running)\s+([A-Za-z0-9_-]+)").expect("valid regex")
});

impl Agent for Codex {
    fn kind(&self) -> Option<AgentKind> {
        Some(AgentKind::Codex)
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let mut args = vec!["exec".to_owned()];
        if request.format == OutputFormat::Json {
            args.push("--json".to_owned());
        }
        if let Some(model) = request.model {
            args.extend(["--model".to_owned(), model.to_owned()]);
        }
        if request.allow_all {
            // Inside ralph's sandbox, Codex's own would be a sandbox in a sandbox (which fails
            // as root): Codex documents danger-full-access for runs sandboxed from outside.
            let mode = if request.sandboxed {
                "danger-full-access"
            } else {
                "workspace-write"
            };
            args.extend([
                "--sandbox".to_owned(),
                mode.to_owned(),
                "--skip-git-repo-check".to_owned(),
            ]);
        }
        args.extend(request.extra_args.iter().cloned());
        // `-` tells `codex exec` to read the prompt from stdin.
        args.push(if prompt_needs_stdin(request.prompt) {
            "-".to_owned()
        } else {
            request.prompt.to_owned()
        });
        command_from(request, args, Vec::new())
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        Some(&TOOL_LINE)
    }

    fn parse_event(&self, line: &str) -> Option<Vec<AgentEvent>> {
        let event: Value = serde_json::from_str(line).ok()?;
        let events = match str_field(&event, "type")? {
            "thread.started" => vec![session_event(&event, "thread_id")],
            "turn.started" | "item.started" | "item.updated" => vec![AgentEvent::Quiet],
            "item.completed" => item_events(event.get("item")?),
            "turn.completed" => {
                let usage = event.get("usage").unwrap_or(&Value::Null);
                let cached = u64_field(usage, "cached_input_tokens");
                vec![
                    AgentEvent::Usage(Usage {
                        // OpenAI counts cached tokens inside input_tokens; keep them apart.
                        input: u64_field(usage, "input_tokens").saturating_sub(cached),
                        output: u64_field(usage, "output_tokens"),
                        cache_read: cached,
                        cache_write: u64_field(usage, "cache_write_input_tokens"),
                    }),
                    AgentEvent::Turns(1),
                ]
            }
            "turn.failed" => {
                let message = event
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("Codex reported a failed turn");
                vec![AgentEvent::Failure(Failure::classify(
                    None,
                    message,
                    crate::model::now(),
                ))]
            }
            "error" => vec![AgentEvent::Notice(format!(
                "Codex: {}",
                str_field(&event, "message").unwrap_or("error")
            ))],
            _ => return None,
        };
        Some(events)
    }

    fn reports_cost(&self) -> bool {
        false
    }
}

fn item_events(item: &Value) -> Vec<AgentEvent> {
    let Some(kind) = str_field(item, "type") else {
        return vec![AgentEvent::Quiet];
    };
    match kind {
        "agent_message" => {
            let text = str_field(item, "text").unwrap_or("").to_owned();
            vec![AgentEvent::FinalText(text)]
        }
        "command_execution" => {
            let command = str_field(item, "command").unwrap_or("");
            let mut events = vec![AgentEvent::Tool {
                name: "Shell".to_owned(),
                detail: Some(command_detail(command)),
            }];
            let exit = item.get("exit_code").and_then(Value::as_i64);
            if str_field(item, "status") == Some("failed") || exit.is_some_and(|code| code != 0) {
                events.push(AgentEvent::ToolError(format!(
                    "command failed (exit {}): {}",
                    exit.map_or_else(|| "?".to_owned(), |code| code.to_string()),
                    command_detail(command)
                )));
            }
            events
        }
        "file_change" => item
            .get("changes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|change| AgentEvent::Tool {
                name: match str_field(change, "kind") {
                    Some("add") => "Write",
                    Some("delete") => "Delete",
                    _ => "Edit",
                }
                .to_owned(),
                detail: str_field(change, "path").map(str::to_owned),
            })
            .collect(),
        "mcp_tool_call" => {
            let name = format!(
                "{}.{}",
                str_field(item, "server").unwrap_or("mcp"),
                str_field(item, "tool").unwrap_or("tool")
            );
            let mut events = vec![AgentEvent::Tool { name, detail: None }];
            if let Some(error) = item.get("error").filter(|error| !error.is_null()) {
                events.push(AgentEvent::ToolError(one_line(&error.to_string(), 200)));
            }
            events
        }
        "web_search" => vec![AgentEvent::Tool {
            name: "WebSearch".to_owned(),
            detail: str_field(item, "query").map(str::to_owned),
        }],
        "error" => vec![AgentEvent::Notice(format!(
            "Codex: {}",
            str_field(item, "message").unwrap_or("error")
        ))],
        _ => vec![AgentEvent::Quiet],
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::request;
    use super::*;

    #[test]
    fn argv_for_model_and_permissions() {
        let sandbox = ["--sandbox", "workspace-write", "--skip-git-repo-check"];
        let cases: [(Option<&str>, bool, Vec<&str>); 4] = [
            (None, false, vec!["exec", "go"]),
            (None, true, [&["exec"][..], &sandbox, &["go"]].concat()),
            (Some("gpt-5"), false, vec!["exec", "--model", "gpt-5", "go"]),
            (
                Some("gpt-5"),
                true,
                [&["exec", "--model", "gpt-5"][..], &sandbox, &["go"]].concat(),
            ),
        ];
        for (model, allow_all, expected) in cases {
            let command = Codex.command(&request("go", model, allow_all));
            assert_eq!(command.display_args(), expected);
            assert!(
                !command
                    .display_args()
                    .iter()
                    .any(|arg| arg == "--full-auto")
            );
        }
    }

    #[test]
    fn in_ralphs_sandbox_codex_does_not_nest_its_own() {
        let mut asked = request("go", None, true);
        asked.sandboxed = true;
        let args = Codex.command(&asked).display_args();
        assert_eq!(
            args,
            [
                "exec",
                "--sandbox",
                "danger-full-access",
                "--skip-git-repo-check",
                "go"
            ]
        );
    }

    #[test]
    fn tool_lines_are_recognised() {
        assert_eq!(
            Codex.tool_in_line("Running cargo test").as_deref(),
            Some("cargo")
        );
        assert_eq!(Codex.tool_in_line("plain text"), None);
    }
}
