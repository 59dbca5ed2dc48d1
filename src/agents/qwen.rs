//! Qwen Code: `qwen [-o stream-json] (--yolo | --approval-mode auto-edit) [-m MODEL] PROMPT`.
//!
//! Its `stream-json` output is Claude Code's format, read by the same parser. Quirk: on its
//! turn or budget limits it writes no `result` event and only exits 53 or 55, which
//! [`Agent::exit_failure`] turns into a failure.

use super::events::Failure;
use super::{
    Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, OutputFormat, command_from,
    prompt_argument,
};

pub(super) struct Qwen;

impl Agent for Qwen {
    fn kind(&self) -> Option<AgentKind> {
        Some(AgentKind::Qwen)
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let mut args = Vec::new();
        if request.format == OutputFormat::Json {
            args.extend(["-o".to_owned(), "stream-json".to_owned()]);
        }
        if request.allow_all {
            args.push("--yolo".to_owned());
        } else {
            args.extend(["--approval-mode".to_owned(), "auto-edit".to_owned()]);
        }
        if let Some(model) = request.model {
            args.extend(["-m".to_owned(), model.to_owned()]);
        }
        if let Some(tools) = request.tools {
            let config = tools.mcp_servers_json(&serde_json::json!({}));
            args.extend(["--mcp-config".to_owned(), config]);
        }
        args.extend(request.extra_args.iter().cloned());
        // A positional prompt runs one headless turn; without one, Qwen reads stdin.
        args.extend(prompt_argument(request));
        let mut command = command_from(request, args, Vec::new());
        // Its "running without a sandbox" warning under --yolo says nothing ralph's user can act on.
        command
            .env
            .push(("QWEN_CODE_SUPPRESS_YOLO_WARNING".to_owned(), "1".into()));
        command
    }

    fn takes_tools(&self) -> bool {
        true
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        Some(&super::events::CHECKMARK_TOOL_LINE)
    }

    fn parse_event(&self, line: &str) -> Option<Vec<AgentEvent>> {
        super::claude_code::parse_stream_json(line, "Qwen Code")
    }

    fn reports_cost(&self) -> bool {
        false
    }

    fn exit_failure(&self, code: i32) -> Option<Failure> {
        let why = match code {
            53 => "Qwen Code reached its session-turn limit (exit 53)",
            55 => "Qwen Code ran out of its tool-call or time budget (exit 55)",
            _ => return None,
        };
        Some(Failure::agent(why))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::argv_matrix;
    use super::*;

    #[test]
    fn argv_for_model_and_permissions() {
        let json = ["-o", "stream-json"];
        let safe = ["--approval-mode", "auto-edit"];
        let expected: Vec<Vec<&str>> = vec![
            [&json[..], &safe, &["go"]].concat(),
            [&json[..], &["--yolo", "go"]].concat(),
            [&json[..], &safe, &["-m", "m1", "go"]].concat(),
            [&json[..], &["--yolo", "-m", "m1", "go"]].concat(),
        ];
        assert_eq!(argv_matrix(AgentKind::Qwen, "go"), expected);
    }

    #[test]
    fn limits_without_a_result_are_failures() {
        assert_eq!(
            Qwen.exit_failure(53).map(|f| f.kind),
            Some(crate::model::FailureKind::AgentError)
        );
        assert_eq!(Qwen.exit_failure(1), None);
        assert_eq!(
            Qwen.tool_in_line("✗ run_shell_command ls").as_deref(),
            Some("run_shell_command")
        );
    }
}
