//! Mistral Vibe: `vibe -p PROMPT --output text --trust [--agent auto-approve]`, the model in
//! `VIBE_ACTIVE_MODEL` (Vibe has no model option).
//!
//! Plain text only. Without `--allow-all` Vibe runs its `accept-edits` agent (edits approved,
//! commands not). Not driven by ralph's tests: it needs Python 3.12.

use std::ffi::OsString;

use super::{
    Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, command_from, prompt_argument,
};

pub(super) struct Vibe;

impl Agent for Vibe {
    fn kind(&self) -> Option<AgentKind> {
        Some(AgentKind::Vibe)
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let mut args = vec!["-p".to_owned()];
        // Without a prompt after -p, Vibe reads it from stdin.
        args.extend(prompt_argument(request));
        args.extend([
            "--output".to_owned(),
            "text".to_owned(),
            "--trust".to_owned(),
        ]);
        let agent = if request.allow_all {
            "auto-approve"
        } else {
            "accept-edits"
        };
        args.extend(["--agent".to_owned(), agent.to_owned()]);
        args.extend(request.extra_args.iter().cloned());
        let env = request
            .model
            .map(|model| ("VIBE_ACTIVE_MODEL".to_owned(), OsString::from(model)))
            .into_iter()
            .collect();
        command_from(request, args, env)
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
