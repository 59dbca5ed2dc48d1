//! Codex: `codex exec [--model MODEL] [--sandbox workspace-write --skip-git-repo-check] PROMPT`.
//!
//! Codex 0.169 removed `--full-auto` (passing it exits 2). Its `exec` mode never asks for
//! approval, so ralph's `--allow-all` maps to the workspace-write sandbox, plus
//! `--skip-git-repo-check` so a directory that is not a trusted git repository still works.

use std::sync::LazyLock;

use regex::Regex;

use super::{Agent, AgentCommand, AgentKind, CommandRequest, command_from, prompt_needs_stdin};

pub(super) struct Codex;

static TOOL_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:Tool:|Using|Calling|Running)\s+([A-Za-z0-9_-]+)").expect("valid regex")
});

impl Agent for Codex {
    fn kind(&self) -> AgentKind {
        AgentKind::Codex
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let mut args = vec!["exec".to_owned()];
        if let Some(model) = request.model {
            args.extend(["--model".to_owned(), model.to_owned()]);
        }
        if request.allow_all {
            args.extend([
                "--sandbox".to_owned(),
                "workspace-write".to_owned(),
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
    fn tool_lines_are_recognised() {
        assert_eq!(
            Codex.tool_in_line("Running cargo test").as_deref(),
            Some("cargo")
        );
        assert_eq!(Codex.tool_in_line("plain text"), None);
    }
}
