//! Claude Code: `claude -p PROMPT [--model MODEL] [--dangerously-skip-permissions]`.

use std::sync::LazyLock;

use regex::Regex;

use super::{Agent, AgentCommand, AgentKind, CommandRequest, command_from, prompt_needs_stdin};

pub(super) struct ClaudeCode;

static TOOL_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:Using|Called|Tool:)\s+([A-Za-z0-9_-]+)").expect("valid regex")
});

impl Agent for ClaudeCode {
    fn kind(&self) -> AgentKind {
        AgentKind::ClaudeCode
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        // `-p` is a switch (print mode); the prompt is the positional argument, or stdin.
        let mut args = vec!["-p".to_owned()];
        if !prompt_needs_stdin(request.prompt) {
            args.push(request.prompt.to_owned());
        }
        if let Some(model) = request.model {
            args.extend(["--model".to_owned(), model.to_owned()]);
        }
        if request.allow_all {
            args.push("--dangerously-skip-permissions".to_owned());
        }
        args.extend(request.extra_args.iter().cloned());
        command_from(request, args, Vec::new())
    }

    fn tool_in_line(&self, line: &str) -> Option<String> {
        TOOL_LINE
            .captures(line)
            .map(|captures| captures[1].to_owned())
    }
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
