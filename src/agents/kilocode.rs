//! Kilo Code: `kilocode run [--format json] [-m MODEL] [--auto] PROMPT`.
//!
//! The Kilo CLI is built on OpenCode: `run` prints OpenCode's JSON events (read by its parser) and
//! OpenCode's text; `--auto` grants every permission its configuration does not deny.

use super::opencode::OpenCode;
use super::{
    Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, OutputFormat, command_from,
    prompt_argument,
};

pub(super) struct KiloCode;

/// The variable whose JSON Kilo Code merges over its configuration files.
const CONFIG_VARIABLE: &str = "KILO_CONFIG_CONTENT";

impl Agent for KiloCode {
    fn kind(&self) -> Option<AgentKind> {
        Some(AgentKind::KiloCode)
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let mut args = vec!["run".to_owned()];
        if request.format == OutputFormat::Json {
            args.extend(["--format".to_owned(), "json".to_owned()]);
        }
        if let Some(model) = request.model {
            args.extend(["-m".to_owned(), model.to_owned()]);
        }
        if request.allow_all {
            args.push("--auto".to_owned());
        }
        args.extend(request.extra_args.iter().cloned());
        // Without a message, `run` reads it from stdin.
        args.extend(prompt_argument(request));
        let mut env = Vec::new();
        if let Some(tools) = request.tools {
            // Its configuration is OpenCode's, given whole in a variable.
            let own = std::env::var(CONFIG_VARIABLE).ok();
            let own = own.and_then(|text| serde_json::from_str(&text).ok());
            let config = super::opencode::with_tools(own, tools);
            env.push((CONFIG_VARIABLE.to_owned(), config.to_string().into()));
        }
        command_from(request, args, env)
    }

    fn takes_tools(&self) -> bool {
        true
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        OpenCode.tool_pattern()
    }

    fn parse_event(&self, line: &str) -> Option<Vec<AgentEvent>> {
        OpenCode.parse_event(line)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::argv_matrix;
    use super::*;

    #[test]
    fn argv() {
        let run = |extra: &[&str]| {
            let mut argv: Vec<String> = ["run", "--format", "json"].map(str::to_owned).to_vec();
            argv.extend(extra.iter().map(|arg| (*arg).to_owned()));
            argv.push("go".to_owned());
            argv
        };
        assert_eq!(
            argv_matrix(AgentKind::KiloCode, "go"),
            [
                run(&[]),
                run(&["--auto"]),
                run(&["-m", "m1"]),
                run(&["-m", "m1", "--auto"]),
            ]
        );
    }
}
