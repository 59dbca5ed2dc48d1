//! The agent CLIs ralph drives: how to call each one and how to read what it prints.
//!
//! An [`Agent`] builds the command for one iteration and recognises tool calls in its output, but
//! never spawns anything: `stream` runs the command. That keeps every agent's argument vector
//! testable without a process.

pub(crate) mod acp;
mod jsonc;
mod tools;

pub(crate) use jsonc::plain_json;

use tools::tools_home_env;
pub(crate) use tools::{ConfigHome, TOOL_SERVER, TOOLS_ARG, ToolBinding, ToolServer, with_server};
mod aider;
mod claude_code;
mod cline;
mod codex;
mod copilot;
mod crush;
pub(crate) mod custom;
mod droid;
pub(crate) mod events;
mod gemini;
mod kilocode;
mod opencode;
mod pi;
pub(crate) mod presets;
mod qwen;
mod vibe;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub(crate) use cline::{
    mcp_settings_with as cline_mcp_settings_with, own_mcp_settings as cline_own_mcp_settings,
};
pub(crate) use codex::{Bwrap as CodexBwrap, bwrap_for as codex_bwrap_for};
pub(crate) use events::{AgentEvent, Failure, FailureKind, Usage};
pub(crate) use opencode::{OpenCodeConfigSources, opencode_config};

/// The variable that points OpenCode at ralph's generated configuration.
pub(crate) const OPENCODE_CONFIG_ENV: &str = "OPENCODE_CONFIG";

/// Prompts longer than this many bytes go to the agent's stdin instead of its argument list:
/// Linux refuses a single argument over 128 KiB.
pub(crate) const MAX_PROMPT_ARGUMENT_BYTES: usize = 100 * 1024;

/// The agents ralph knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum AgentKind {
    /// OpenCode (`opencode run`)
    #[value(name = "opencode")]
    OpenCode,
    /// Claude Code (`claude -p`)
    #[value(name = "claude-code")]
    ClaudeCode,
    /// OpenAI Codex (`codex exec`)
    #[value(name = "codex")]
    Codex,
    /// Gemini CLI (`gemini -p`)
    #[value(name = "gemini")]
    Gemini,
    /// Qwen Code (`qwen`)
    #[value(name = "qwen")]
    Qwen,
    /// pi (`pi -p`)
    #[value(name = "pi")]
    Pi,
    /// GitHub Copilot CLI (`copilot -p`)
    #[value(name = "copilot")]
    Copilot,
    /// Factory Droid (`droid exec`)
    #[value(name = "droid")]
    Droid,
    /// Kilo Code (`kilocode run`)
    #[value(name = "kilocode")]
    KiloCode,
    /// Cline (`cline --json`)
    #[value(name = "cline")]
    Cline,
    /// Crush (`crush run`)
    #[value(name = "crush")]
    Crush,
    /// Aider (`aider --message`)
    #[value(name = "aider")]
    Aider,
    /// Mistral Vibe (`vibe -p`)
    #[value(name = "vibe")]
    Vibe,
}

impl AgentKind {
    /// Every built-in agent, in the order they are listed.
    pub(crate) const ALL: [Self; 13] = [
        Self::OpenCode,
        Self::ClaudeCode,
        Self::Codex,
        Self::Gemini,
        Self::Qwen,
        Self::Pi,
        Self::Copilot,
        Self::Droid,
        Self::KiloCode,
        Self::Cline,
        Self::Crush,
        Self::Aider,
        Self::Vibe,
    ];

    /// The identifier used on the command line and in the state file.
    pub(crate) fn id(self) -> &'static str {
        match self {
            Self::OpenCode => "opencode",
            Self::ClaudeCode => "claude-code",
            Self::Codex => "codex",
            Self::Gemini => "gemini",
            Self::Qwen => "qwen",
            Self::Pi => "pi",
            Self::Copilot => "copilot",
            Self::Droid => "droid",
            Self::KiloCode => "kilocode",
            Self::Cline => "cline",
            Self::Crush => "crush",
            Self::Aider => "aider",
            Self::Vibe => "vibe",
        }
    }

    /// The name shown to people.
    pub(crate) fn display_name(self) -> &'static str {
        match self {
            Self::OpenCode => "OpenCode",
            Self::ClaudeCode => "Claude Code",
            Self::Codex => "Codex",
            Self::Gemini => "Gemini CLI",
            Self::Qwen => "Qwen Code",
            Self::Pi => "pi",
            Self::Copilot => "Copilot CLI",
            Self::Droid => "Droid",
            Self::KiloCode => "Kilo Code",
            Self::Cline => "Cline",
            Self::Crush => "Crush",
            Self::Aider => "Aider",
            Self::Vibe => "Mistral Vibe",
        }
    }

    /// The executable looked up on PATH.
    pub(crate) fn binary_name(self) -> &'static str {
        match self {
            Self::OpenCode => "opencode",
            Self::ClaudeCode => "claude",
            Self::Codex => "codex",
            Self::Gemini => "gemini",
            Self::Qwen => "qwen",
            Self::Pi => "pi",
            Self::Copilot => "copilot",
            Self::Droid => "droid",
            Self::KiloCode => "kilocode",
            Self::Cline => "cline",
            Self::Crush => "crush",
            Self::Aider => "aider",
            Self::Vibe => "vibe",
        }
    }

    /// The command that installs the CLI.
    pub(crate) fn install_command(self) -> &'static str {
        match self {
            Self::OpenCode => "npm install -g opencode-ai",
            Self::ClaudeCode => "npm install -g @anthropic-ai/claude-code",
            Self::Codex => "npm install -g @openai/codex",
            Self::Gemini => "npm install -g @google/gemini-cli",
            Self::Qwen => "npm install -g @qwen-code/qwen-code",
            Self::Pi => "npm install -g @mariozechner/pi-coding-agent",
            Self::Copilot => "npm install -g @github/copilot",
            Self::Droid => "npm install -g @factory/cli",
            Self::KiloCode => "npm install -g @kilocode/cli",
            Self::Cline => "npm install -g cline",
            Self::Crush => "npm install -g @charmland/crush",
            Self::Aider => "pip install aider-chat",
            Self::Vibe => "pip install mistral-vibe (Python 3.12 or later)",
        }
    }

    /// Whether ralph reads the CLI's JSON events (else its plain text, whatever
    /// `--output-format` says).
    pub(crate) fn json_events(self) -> bool {
        !matches!(self, Self::Crush | Self::Aider | Self::Vibe)
    }

    /// The environment variable that overrides the executable.
    pub(crate) fn binary_variable(self) -> &'static str {
        match self {
            Self::OpenCode => "RALPH_OPENCODE_BINARY",
            Self::ClaudeCode => "RALPH_CLAUDE_BINARY",
            Self::Codex => "RALPH_CODEX_BINARY",
            Self::Gemini => "RALPH_GEMINI_BINARY",
            Self::Qwen => "RALPH_QWEN_BINARY",
            Self::Pi => "RALPH_PI_BINARY",
            Self::Copilot => "RALPH_COPILOT_BINARY",
            Self::Droid => "RALPH_DROID_BINARY",
            Self::KiloCode => "RALPH_KILOCODE_BINARY",
            Self::Cline => "RALPH_CLINE_BINARY",
            Self::Crush => "RALPH_CRUSH_BINARY",
            Self::Aider => "RALPH_AIDER_BINARY",
            Self::Vibe => "RALPH_VIBE_BINARY",
        }
    }

    /// Finds an agent kind by its identifier (as saved in the state file).
    pub(crate) fn from_id(id: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.id() == id)
    }

    /// The display name for a saved identifier; unknown identifiers are shown as they are.
    pub(crate) fn display_name_for(id: &str) -> String {
        if id.is_empty() {
            return Self::OpenCode.display_name().to_owned();
        }
        Self::from_id(id).map_or_else(|| id.to_owned(), |kind| kind.display_name().to_owned())
    }

    /// The implementation for this kind.
    pub(crate) fn agent(self) -> Box<dyn Agent> {
        match self {
            Self::OpenCode => Box::new(opencode::OpenCode),
            Self::ClaudeCode => Box::new(claude_code::ClaudeCode),
            Self::Codex => Box::new(codex::Codex),
            Self::Gemini => Box::new(gemini::Gemini),
            Self::Qwen => Box::new(qwen::Qwen),
            Self::Pi => Box::new(pi::Pi),
            Self::Copilot => Box::new(copilot::Copilot),
            Self::Droid => Box::new(droid::Droid),
            Self::KiloCode => Box::new(kilocode::KiloCode),
            Self::Cline => Box::new(cline::Cline),
            Self::Crush => Box::new(crush::Crush),
            Self::Aider => Box::new(aider::Aider),
            Self::Vibe => Box::new(vibe::Vibe),
        }
    }
}

/// How the agent reports its work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OutputFormat {
    /// The agent's JSON event stream: tools, tokens, cost and failures are understood.
    #[default]
    Json,
    /// The agent's plain text; tools are recognised by a pattern per agent.
    Text,
}

impl OutputFormat {
    /// `json` or `text`, as the option writes it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Text => "text",
        }
    }
}

/// What one iteration needs from the agent.
#[derive(Debug)]
pub(crate) struct CommandRequest<'a> {
    pub(crate) binary: &'a Path,
    pub(crate) prompt: &'a str,
    pub(crate) model: Option<&'a str>,
    pub(crate) allow_all: bool,
    /// Arguments given after `--` on ralph's command line, passed through verbatim.
    pub(crate) extra_args: &'a [String],
    /// The generated OpenCode configuration file, when one is in use.
    pub(crate) opencode_config: Option<&'a Path>,
    pub(crate) format: OutputFormat,
    /// A path the agent may be asked to write its usage report to (Copilot); ralph reads and
    /// removes it after the run.
    pub(crate) usage_file: Option<&'a Path>,
    /// The agent runs in ralph's sandbox: its own sandbox is not nested inside (Codex).
    pub(crate) sandboxed: bool,
    /// ralph's tools for the agent (`ralph __agent-tools …`), passed the agent's own way.
    pub(crate) tools: Option<&'a ToolServer>,
    /// A settings file ralph wrote that gives the agent its tools, for an agent that takes MCP
    /// servers only from a file (Cline), or the home ralph made for one ([`ConfigHome`]).
    pub(crate) tools_file: Option<&'a Path>,
}

/// A fully described agent invocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AgentCommand {
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<OsString>,
    /// Variables added to ralph's own environment (to none, with `clear_env`).
    pub(crate) env: Vec<(String, OsString)>,
    /// The process starts with `env` alone, none of ralph's environment: a sandbox whose own
    /// process the agent can see (`/proc/1/environ` under bwrap) holds no variable it may not.
    pub(crate) clear_env: bool,
    /// Text written to the agent's stdin (then closed); `None` means stdin is null.
    pub(crate) stdin: Option<String>,
    /// The usage report the agent writes at exit, read by [`Agent::usage_file_events`].
    pub(crate) usage_file: Option<PathBuf>,
    /// The agent speaks ACP: stdin and stdout carry this turn's conversation (stdin stays open
    /// until the turn ends).
    pub(crate) acp: Option<acp::Turn>,
}

impl AgentCommand {
    /// Gives `process` this command's environment.
    pub(crate) fn set_env(&self, process: &mut std::process::Command) {
        if self.clear_env {
            process.env_clear();
        }
        process.envs(self.env.iter().map(|(key, value)| (key, value)));
    }

    /// The argument vector as strings, for messages and tests.
    pub(crate) fn display_args(&self) -> Vec<String> {
        self.args
            .iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect()
    }
}

/// One agent CLI.
pub(crate) trait Agent: Send + Sync {
    /// The built-in agent this is, or `None` for a custom agent.
    fn kind(&self) -> Option<AgentKind>;

    /// The name shown to people.
    fn display_name(&self) -> String {
        self.kind().map_or_else(
            || "the agent".to_owned(),
            |kind| kind.display_name().to_owned(),
        )
    }

    /// The command for one iteration.
    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand;

    /// How a tool call looks in plain-text output: a pattern matched against one line (ANSI
    /// codes stripped) whose first group names the tool.
    fn tool_pattern(&self) -> Option<&regex::Regex>;

    /// Whether the agent is given ralph's tools (an MCP server) when the request has them.
    fn takes_tools(&self) -> bool {
        false
    }

    /// For an agent that reads MCP servers only from a file in its config folder: how ralph
    /// gives it a home of its own with its tools in that file.
    fn config_home(&self) -> Option<ConfigHome> {
        None
    }

    /// The tool named by one line of plain-text output (ANSI codes already stripped), if any.
    fn tool_in_line(&self, line: &str) -> Option<String> {
        let pattern = self.tool_pattern()?;
        // Most lines are not tool lines: a match test allocates nothing, a capture does.
        if !pattern.is_match(line) {
            return None;
        }
        Some(pattern.captures(line)?.get(1)?.as_str().to_owned())
    }

    /// The events in one line of JSON output; `None` when the line is not an event ralph knows
    /// (not JSON, or an unknown type), so it is shown as text.
    fn parse_event(&self, line: &str) -> Option<Vec<AgentEvent>>;

    /// The built-in agent whose JSON events this agent prints (a custom agent names one).
    fn events_of(&self) -> Option<AgentKind> {
        self.kind()
    }

    /// Whether the agent reports what a run cost.
    fn reports_cost(&self) -> bool {
        true
    }

    /// What an exit code says when the agent printed no failure of its own (a turn limit, a
    /// configuration error).
    fn exit_failure(&self, _code: i32) -> Option<Failure> {
        None
    }

    /// The events in the usage report the agent wrote at exit (see [`AgentCommand::usage_file`]).
    fn usage_file_events(&self, _text: &str) -> Vec<AgentEvent> {
        Vec::new()
    }

    /// What a line of plain stdout that the agent prints after its answer tells (Aider's token
    /// report), or `None` for any other line. Such a line is never the answer's last line.
    fn trailer(&self, _line: &str) -> Option<Vec<AgentEvent>> {
        None
    }

    /// Text that every line [`Agent::trailer`] reads contains: a run of many lines without it is
    /// not looked at line by line (a single line goes to `trailer`, which answers `None` fast).
    fn trailer_marker(&self) -> Option<&'static str> {
        None
    }
}

/// The agent a loop runs: a built-in one, or one defined in a config file.
#[derive(Clone, Debug)]
pub(crate) enum AgentSpec {
    Builtin(AgentKind),
    Custom(Box<custom::CustomAgentDef>),
}

impl PartialEq for AgentSpec {
    fn eq(&self, other: &Self) -> bool {
        self.id() == other.id()
    }
}

impl AgentSpec {
    /// Finds an agent by name among the built-in and the custom ones.
    pub(crate) fn resolve(
        name: &str,
        custom: &std::collections::BTreeMap<String, custom::CustomAgentDef>,
    ) -> Result<Self, String> {
        if let Some(kind) = AgentKind::from_id(name) {
            return Ok(Self::Builtin(kind));
        }
        // As roadmaps and the CLI's own name have it.
        if name == "claude" && !custom.contains_key(name) {
            return Ok(Self::Builtin(AgentKind::ClaudeCode));
        }
        if let Some(definition) = custom.get(name) {
            return Ok(Self::Custom(Box::new(definition.clone())));
        }
        if let Some(preset) = presets::find(name) {
            return Ok(Self::Custom(Box::new(preset.definition())));
        }
        if name == ACP_AGENT {
            return Err("--agent acp runs the ACP agent that --acp-command \"CMD ARGS…\" starts; give that too (or use a preset such as gemini-acp)".to_owned());
        }
        let mut names: Vec<&str> = AgentKind::ALL.iter().map(|kind| kind.id()).collect();
        names.extend(presets::PRESETS.iter().map(|preset| preset.name));
        names.push(ACP_AGENT);
        names.extend(custom.keys().map(String::as_str));
        Err(format!(
            "unknown agent '{name}'; use one of {}, or define [agents.{name}] in .ralph/config.toml",
            names.join(", ")
        ))
    }

    /// The name used on the command line, in the state file and in history.
    pub(crate) fn id(&self) -> &str {
        match self {
            Self::Builtin(kind) => kind.id(),
            Self::Custom(definition) => &definition.name,
        }
    }

    /// The name shown to people.
    pub(crate) fn display_name(&self) -> &str {
        match self {
            Self::Builtin(kind) => kind.display_name(),
            Self::Custom(definition) => &definition.name,
        }
    }

    /// How to install the agent's CLI, when ralph knows.
    pub(crate) fn install_hint(&self) -> Option<String> {
        match self {
            Self::Builtin(kind) => Some(kind.install_command().to_owned()),
            Self::Custom(definition) => {
                presets::find(&definition.name).map(|preset| preset.install.to_owned())
            }
        }
    }

    /// The built-in kind, if any.
    pub(crate) fn kind(&self) -> Option<AgentKind> {
        match self {
            Self::Builtin(kind) => Some(*kind),
            Self::Custom(_) => None,
        }
    }

    /// The implementation.
    pub(crate) fn agent(&self) -> Box<dyn Agent> {
        match self {
            Self::Builtin(kind) => kind.agent(),
            Self::Custom(definition) => Box::new((**definition).clone()),
        }
    }

    /// How its output is read: a custom agent's definition decides.
    pub(crate) fn format(&self, requested: OutputFormat) -> OutputFormat {
        match self {
            Self::Builtin(kind) if !kind.json_events() => OutputFormat::Text,
            Self::Builtin(_) => requested,
            Self::Custom(definition) => definition.format(),
        }
    }

    /// Finds the executable (honouring `RALPH_*_BINARY` for built-in agents).
    pub(crate) fn find_binary(
        &self,
        var: &dyn Fn(&str) -> Option<OsString>,
        cwd: &Path,
    ) -> Result<PathBuf, String> {
        match self {
            Self::Builtin(kind) => resolve_binary(*kind, var(kind.binary_variable()), var("PATH"), cwd),
            Self::Custom(definition) => which::which_in(definition.program(), var("PATH"), cwd).map_err(|_| {
                let (name, program) = (&definition.name, &definition.command);
                if let Some(preset) = presets::find(name) {
                    format!("{name} runs `{program}`, which was not found. Install it ({}) or put it on PATH.", preset.install)
                } else if name == ACP_AGENT {
                    format!("--acp-command runs `{program}`, which was not found. Install it, put it on PATH, or give its path.")
                } else {
                    format!("the custom agent '{name}' runs `{program}`, which was not found. Install it, put it on PATH, or fix `command` in [agents.{name}].")
                }
            }),
        }
    }
}

/// The agent `--agent acp` runs, started by `--acp-command`.
pub(crate) const ACP_AGENT: &str = "acp";

/// Whether `name` is taken by ralph's own agents (a built-in CLI, an ACP preset, or `acp`): a
/// config's `[agents.NAME]` may not use it.
pub(crate) fn is_builtin_name(name: &str) -> bool {
    AgentKind::from_id(name).is_some() || presets::find(name).is_some() || name == ACP_AGENT
}

/// Splits a command line as a shell would split simple words: spaces separate, quotes (single
/// or double) group, a backslash takes the next character as it is.
pub(crate) fn command_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"') | None, '\\') => {
                let next = chars.next().ok_or("it ends with a lone backslash")?;
                word.get_or_insert_default().push(next);
            }
            (Some(_), c) => word.get_or_insert_default().push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_default();
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_default().push(c),
        }
    }
    if let Some(q) = quote {
        return Err(format!("a {q} quote is never closed"));
    }
    words.extend(word);
    if words.is_empty() {
        return Err("it is empty".to_owned());
    }
    Ok(words)
}

/// Whether the prompt must travel on stdin rather than as an argument.
pub(crate) fn prompt_needs_stdin(prompt: &str) -> bool {
    prompt.len() > MAX_PROMPT_ARGUMENT_BYTES
}

/// Builds an [`AgentCommand`] from string arguments.
fn command_from(
    request: &CommandRequest<'_>,
    args: Vec<String>,
    env: Vec<(String, OsString)>,
) -> AgentCommand {
    AgentCommand {
        program: request.binary.to_path_buf(),
        args: args.into_iter().map(OsString::from).collect(),
        env,
        clear_env: false,
        stdin: prompt_needs_stdin(request.prompt).then(|| request.prompt.to_owned()),
        usage_file: None,
        acp: None,
    }
}

/// Where an agent may be asked to write its usage report for one iteration: in the temporary
/// directory, named by ralph's process and the iteration, removed after the run.
pub(crate) fn usage_file_path(iteration: u32) -> PathBuf {
    std::env::temp_dir().join(format!(
        "ralph-usage-{}-{iteration}.json",
        std::process::id()
    ))
}

/// The prompt as the last argument, or nothing when it travels on stdin.
fn prompt_argument(request: &CommandRequest<'_>) -> Option<String> {
    (!prompt_needs_stdin(request.prompt)).then(|| request.prompt.to_owned())
}

/// Resolves the agent's executable, honouring its `RALPH_*_BINARY` override.
pub(crate) fn resolve_binary(
    kind: AgentKind,
    override_value: Option<OsString>,
    path: Option<OsString>,
    cwd: &Path,
) -> Result<PathBuf, String> {
    let variable = kind.binary_variable();
    let wanted = override_value
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| kind.binary_name().into());
    let display = wanted.to_string_lossy().into_owned();
    which::which_in(&wanted, path, cwd).map_err(|_| {
        let name = kind.display_name();
        let name = if name.ends_with("CLI") {
            name.to_owned()
        } else {
            format!("{name} CLI")
        };
        format!(
            "{name} (`{display}`) not found. Install it with `{}`, put it on PATH, or set {variable} to its path.",
            kind.install_command()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn request<'a>(
        prompt: &'a str,
        model: Option<&'a str>,
        allow_all: bool,
    ) -> CommandRequest<'a> {
        CommandRequest {
            binary: Path::new("/bin/agent"),
            prompt,
            model,
            allow_all,
            extra_args: &[],
            opencode_config: None,
            format: OutputFormat::Text,
            usage_file: None,
            sandboxed: false,
            tools: None,
            tools_file: None,
        }
    }

    /// The argv of `kind` for each of model on/off × allow-all on/off, in JSON mode.
    pub(super) fn argv_matrix(kind: AgentKind, prompt: &str) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        for model in [None, Some("m1")] {
            for allow_all in [false, true] {
                let mut req = request(prompt, model, allow_all);
                req.format = OutputFormat::Json;
                out.push(kind.agent().command(&req).display_args());
            }
        }
        out
    }

    #[test]
    fn gemini_and_droid_are_pointed_at_a_home_with_ralphs_server_beside_the_users() {
        let tools = ToolServer {
            command: "/bin/ralph".to_owned(),
            args: vec!["__agent-tools".to_owned()],
        };
        let home = Path::new("/w/.ralph/agent-homes/x");
        for (kind, variable) in [
            (AgentKind::Gemini, "GEMINI_CLI_HOME"),
            (AgentKind::Droid, "FACTORY_HOME_OVERRIDE"),
        ] {
            let agent = kind.agent();
            assert!(agent.takes_tools());
            let mut req = request("go", None, true);
            req.tools_file = Some(home);
            assert!(
                agent
                    .command(&req)
                    .env
                    .iter()
                    .all(|(name, _)| name != variable)
            );
            req.tools = Some(&tools);
            let env = agent.command(&req).env;
            assert!(env.contains(&(variable.to_owned(), home.into())), "{env:?}");
            let config = agent.config_home().unwrap();
            let users =
                config.users_folder(&|name| (name == "HOME").then(|| OsString::from("/home/me")));
            assert_eq!(users.unwrap(), Path::new("/home/me").join(config.folder));
            let own = serde_json::json!({"mcpServers": {"theirs": {"command": "x"}}, "a": 1});
            let written = (config.with_tools)(&tools, Some(own));
            assert_eq!(written["a"], 1);
            assert_eq!(written["mcpServers"]["theirs"]["command"], "x");
            assert_eq!(written["mcpServers"]["ralph"]["command"], "/bin/ralph");
        }
        // Gemini CLI's lists of servers allowed and left out let ralph's through.
        let own = serde_json::json!({"mcp": {"allowed": ["theirs"], "excluded": ["ralph"]}});
        let config = AgentKind::Gemini.agent().config_home().unwrap();
        let written = (config.with_tools)(&tools, Some(own));
        assert_eq!(
            written["mcp"]["allowed"],
            serde_json::json!(["theirs", "ralph"])
        );
        assert_eq!(written["mcp"]["excluded"], serde_json::json!([]));
        assert_eq!(written["mcpServers"]["ralph"]["trust"], true);
    }

    #[test]
    fn ids_round_trip_and_unknown_ids_show_raw() {
        for kind in AgentKind::ALL {
            assert_eq!(AgentKind::from_id(kind.id()), Some(kind));
        }
        assert_eq!(AgentKind::display_name_for("claude-code"), "Claude Code");
        assert_eq!(AgentKind::display_name_for("cursor"), "cursor");
        assert_eq!(AgentKind::display_name_for(""), "OpenCode");
    }

    /// `--output-format text` leaves out each new agent's JSON flag and keeps the rest.
    #[test]
    fn text_mode_drops_only_the_json_flags() {
        let json_flags = ["stream-json", "json"];
        for kind in [
            AgentKind::Gemini,
            AgentKind::Qwen,
            AgentKind::Pi,
            AgentKind::Copilot,
            AgentKind::Droid,
        ] {
            let text = kind
                .agent()
                .command(&request("go", Some("m1"), true))
                .display_args();
            assert!(
                text.iter().all(|arg| !json_flags.contains(&arg.as_str())),
                "{kind:?}: {text:?}"
            );
            let json = &argv_matrix(kind, "go")[3];
            let mut without: Vec<String> = json.clone();
            for flag in ["-o", "--mode", "--output-format"] {
                if let Some(at) = without.iter().position(|arg| arg == flag) {
                    without.drain(at..at + 2);
                }
            }
            assert_eq!(text, without, "{kind:?}");
        }
    }

    /// Each text-mode tool pattern takes the tool's name from a tool line and nothing from prose.
    #[test]
    fn text_mode_tool_lines() {
        let cases = [
            (AgentKind::Pi, "→ bash ls -la", "bash"),
            (AgentKind::Copilot, "● Create hello.txt", "Create"),
            (AgentKind::Droid, "⛬ Execute ls", "Execute"),
        ];
        for (kind, line, tool) in cases {
            let agent = kind.agent();
            assert_eq!(agent.tool_in_line(line).as_deref(), Some(tool), "{kind:?}");
            assert_eq!(
                agent.tool_in_line("I wrote the file and ran the tests."),
                None,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn long_prompts_travel_on_stdin() {
        let long = "x".repeat(MAX_PROMPT_ARGUMENT_BYTES + 1);
        for kind in AgentKind::ALL {
            let command = kind.agent().command(&request(&long, None, true));
            assert_eq!(command.stdin.as_deref(), Some(long.as_str()), "{kind:?}");
            assert!(
                command.display_args().iter().all(|arg| arg.len() < 1000),
                "{kind:?} must not also pass the prompt as an argument"
            );
        }
    }

    /// The final messages of `events`, streamed pieces joined into one message as the
    /// transcript joins them.
    fn final_messages(events: &[AgentEvent]) -> Vec<String> {
        let mut finals: Vec<String> = Vec::new();
        let mut pieces = String::new();
        for event in events {
            match event {
                AgentEvent::TextPiece(piece) => pieces.push_str(piece),
                AgentEvent::Final(text) | AgentEvent::FinalText(text) => {
                    finals.push(text.clone());
                }
                _ if !pieces.is_empty() => finals.push(std::mem::take(&mut pieces)),
                _ => {}
            }
        }
        if !pieces.is_empty() {
            finals.push(pieces);
        }
        finals
    }

    /// Every line of every recorded stream parses without a panic, and each recording yields
    /// what it was recorded for.
    #[test]
    fn recorded_event_streams_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.ends_with(".jsonl") {
                continue;
            }
            seen += 1;
            let prefix = name.split('-').next().unwrap();
            let kind = AgentKind::ALL
                .into_iter()
                .find(|kind| kind.binary_name() == prefix)
                .unwrap_or_else(|| panic!("unknown agent in fixture name {prefix}"));
            let agent = kind.agent();
            let mut events = Vec::new();
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let parsed = agent.parse_event(line);
                assert!(
                    parsed.is_some(),
                    "{name}: an event ralph does not know: {line}"
                );
                events.extend(parsed.unwrap());
            }
            let finals = final_messages(&events);
            let has = |wanted: fn(&AgentEvent) -> bool| events.iter().any(wanted);
            if name.ends_with("-success.jsonl") || name.ends_with("-tool-use.jsonl") {
                assert!(
                    finals.last().is_some_and(|text| text
                        .trim_end()
                        .ends_with("<promise>COMPLETE</promise>")),
                    "{name}: {finals:?}"
                );
                assert!(
                    has(|e| matches!(e, AgentEvent::Session(id) if !id.is_empty())),
                    "{name}: no session id"
                );
                // Copilot CLI reports tokens only in its usage file.
                assert!(
                    kind == AgentKind::Copilot
                        || has(|e| matches!(e, AgentEvent::Usage(usage) if usage.total() > 0)),
                    "{name}"
                );
            }
            if name.ends_with("-tool-use.jsonl") {
                assert!(
                    has(
                        |e| matches!(e, AgentEvent::Tool { detail: Some(d), .. } if d.contains("hello.txt"))
                    ),
                    "{name}: {events:?}"
                );
            }
            // The failure that decides is the last one reported.
            let failure = events.iter().rev().find_map(|e| match e {
                AgentEvent::Failure(f) => Some(f.kind),
                _ => None,
            });
            for (suffix, kind) in [
                ("-http500.jsonl", FailureKind::ApiError),
                ("-http429.jsonl", FailureKind::RateLimit),
                ("-http401.jsonl", FailureKind::Auth),
            ] {
                if name.ends_with(suffix) {
                    assert_eq!(failure, Some(kind), "{name}: {events:?}");
                }
            }
            if name.ends_with("-permission-denied.jsonl") && kind != AgentKind::Codex {
                assert!(
                    has(|e| matches!(e, AgentEvent::ToolError(_))),
                    "{name}: {events:?}"
                );
            }
        }
        assert_eq!(
            seen, 40,
            "nine agents × four recordings, Cline's three, and a 401"
        );
    }

    #[test]
    fn command_words_split_as_a_shell_splits_simple_words() {
        assert_eq!(
            command_words(r#"my-agent --acp  'two words' "say \"hi\"" a\ b"#).unwrap(),
            ["my-agent", "--acp", "two words", "say \"hi\"", "a b"]
        );
        assert_eq!(command_words("x ''").unwrap(), ["x", ""]);
        assert!(
            command_words("x 'open")
                .unwrap_err()
                .contains("never closed")
        );
        assert!(command_words("  ").unwrap_err().contains("empty"));
        assert!(command_words("x \\").unwrap_err().contains("backslash"));
    }

    #[test]
    fn built_in_names_cover_the_presets_and_acp() {
        for name in ["opencode", "gemini-acp", "kiro-acp", ACP_AGENT] {
            assert!(is_builtin_name(name), "{name}");
        }
        assert!(!is_builtin_name("my-agent"));
        let preset = AgentSpec::resolve("droid-acp", &std::collections::BTreeMap::new()).unwrap();
        let command = preset.agent().command(&request("go", Some("m1"), true));
        assert_eq!(
            command.display_args(),
            ["exec", "--output-format", "acp", "-m", "m1"]
        );
        assert!(command.acp.is_some());
        let codex = AgentSpec::resolve("codex-acp", &std::collections::BTreeMap::new()).unwrap();
        let sandbox_mode = |allow_all| {
            let command = codex.agent().command(&request("go", None, allow_all));
            command
                .display_args()
                .contains(&"sandbox_mode=\"workspace-write\"".to_owned())
        };
        assert!(sandbox_mode(true) && !sandbox_mode(false));
    }

    #[test]
    fn missing_binary_names_the_override_variable() {
        let error = resolve_binary(
            AgentKind::Codex,
            None,
            Some(OsString::from("/nonexistent")),
            Path::new("/"),
        )
        .unwrap_err();
        assert!(
            error.contains("`codex`") && error.contains("RALPH_CODEX_BINARY"),
            "{error}"
        );
    }
}
