//! Crush: `crush [--yolo] run --quiet [--model MODEL] PROMPT`.
//!
//! Plain text only (`run` prints the answer). `--yolo` accepts every permission. Not driven by
//! ralph's tests: its npm package downloads the binary from GitHub when installed.

use super::{
    Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, command_from, prompt_argument,
};

pub(super) struct Crush;

impl Agent for Crush {
    fn kind(&self) -> Option<AgentKind> {
        Some(AgentKind::Crush)
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let mut args = Vec::new();
        if request.allow_all {
            args.push("--yolo".to_owned());
        }
        args.extend(["run".to_owned(), "--quiet".to_owned()]);
        if let Some(model) = request.model {
            args.extend(["--model".to_owned(), model.to_owned()]);
        }
        args.extend(request.extra_args.iter().cloned());
        // Without a prompt argument, `run` reads it from stdin.
        args.extend(prompt_argument(request));
        command_from(request, args, Vec::new())
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        None
    }

    fn parse_event(&self, _line: &str) -> Option<Vec<AgentEvent>> {
        None
    }

    fn reports_cost(&self) -> bool {
        false
    }
}
