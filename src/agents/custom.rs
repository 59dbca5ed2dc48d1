//! Agents defined in a config file (`[agents.NAME]`), for any CLI ralph does not know.
//!
//! A definition names the command, its arguments (with `{prompt}` where the prompt goes, or the
//! prompt on stdin), arguments added for a model (`{model}`) and for `--allow-all`, environment
//! variables, and how to read the output: plain text with an optional tool pattern, or the JSON
//! events of one of the known agents. With `protocol = "acp"` the agent speaks ACP instead: the
//! prompt and the answer travel in its conversation on stdin and stdout (see [`super::acp`]).
//! The ACP presets (`gemini-acp`, …) are definitions of this kind that ralph ships.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use regex::Regex;
use toml::de::DeValue;

use super::{Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, OutputFormat};

/// How a custom agent gets its prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PromptDelivery {
    /// In place of `{prompt}` in the arguments.
    Argument,
    /// Written to stdin, which is then closed.
    Stdin,
    /// In an ACP conversation (`protocol = "acp"`).
    Acp,
}

/// A custom agent as defined in a config file, checked.
#[derive(Clone, Debug)]
pub(crate) struct CustomAgentDef {
    pub(crate) name: String,
    pub(crate) command: String,
    pub(crate) args: Vec<String>,
    pub(crate) model_args: Vec<String>,
    /// Variables set when a model is asked for (`{model}` replaced), for agents that take the
    /// model from their environment.
    pub(crate) model_env: BTreeMap<String, String>,
    pub(crate) allow_all_args: Vec<String>,
    pub(crate) prompt: PromptDelivery,
    /// `None`: plain text; `Some(kind)`: the JSON events of that agent.
    pub(crate) events: Option<AgentKind>,
    pub(crate) tool_pattern: Option<Regex>,
    pub(crate) env: BTreeMap<String, String>,
    /// Under `--sandbox`: the variables of the user's environment the agent needs inside (its
    /// key, its base URL), and the hosts (HOST or HOST:PORT) it must reach.
    pub(crate) sandbox_env: Vec<String>,
    pub(crate) sandbox_hosts: Vec<String>,
    /// The built-in agent whose CLI this runs (an ACP preset's): its keys and API hosts pass
    /// the sandbox, and its install hint is shown.
    pub(crate) family: Option<AgentKind>,
    /// How the agent is given ralph's tools: arguments with `{mcp_config}` (the JSON of
    /// `{"mcpServers": {"ralph": {…}}}`), `{tools_command}` or `{tools_args}` (its arguments as a
    /// JSON list). Empty: a command-line agent gets no tools.
    pub(crate) tools_args: Vec<String>,
}

const FIELDS: [&str; 13] = [
    "command",
    "args",
    "model_args",
    "model_env",
    "allow_all_args",
    "prompt",
    "format",
    "protocol",
    "tool_pattern",
    "env",
    "sandbox_env",
    "sandbox_hosts",
    "tools_args",
];

impl CustomAgentDef {
    /// Checks a `[agents.NAME]` table.
    pub(crate) fn from_toml(name: &str, value: &DeValue<'_>) -> Result<Self, String> {
        let DeValue::Table(table) = value else {
            return Err("must be a table (command = …, args = […])".to_owned());
        };
        if super::is_builtin_name(name) {
            return Err(format!(
                "`{name}` is a built-in agent; give the custom one another name"
            ));
        }
        let mut fields = Fields(BTreeMap::new());
        for (key, value) in table {
            let key = key.get_ref().as_ref();
            let Some(known) = FIELDS.iter().copied().find(|field| *field == key) else {
                return Err(format!(
                    "unknown field `{key}` (known: {})",
                    FIELDS.join(", ")
                ));
            };
            fields.0.insert(known, value.get_ref());
        }
        let (command, mut args) = fields.command()?;
        args.extend(fields.strings("args")?);
        let has_placeholder = args.iter().any(|arg| arg.contains("{prompt}"));
        let acp = match fields.string("protocol")?.as_deref() {
            None | Some("cli") => false,
            Some("acp") => true,
            Some(other) => {
                return Err(format!(
                    "`protocol` must be \"acp\" (or left out for a command-line agent), not '{other}'"
                ));
            }
        };
        if acp
            && (has_placeholder
                || fields.0.contains_key("prompt")
                || fields.0.contains_key("format"))
        {
            return Err("an ACP agent gets its prompt and gives its answer in the protocol: leave out `prompt`, `format` and `{prompt}`".to_owned());
        }
        let events = match fields.string("format")?.as_deref() {
            None | Some("text") => None,
            Some(id) => Some(AgentKind::from_id(id).ok_or_else(|| {
                let ids: Vec<&str> = AgentKind::ALL.iter().map(|kind| kind.id()).collect();
                format!(
                    "`format` must be text or one of {}, not '{id}'",
                    ids.join(", ")
                )
            })?),
        };
        Ok(Self {
            name: name.to_owned(),
            command,
            prompt: if acp {
                PromptDelivery::Acp
            } else {
                prompt_delivery(fields.string("prompt")?.as_deref(), has_placeholder)?
            },
            args,
            model_args: fields.strings("model_args")?,
            model_env: fields.table("model_env")?,
            allow_all_args: fields.strings("allow_all_args")?,
            events,
            tool_pattern: fields
                .string("tool_pattern")?
                .map(|pattern| tool_pattern(&pattern))
                .transpose()?,
            env: fields.table("env")?,
            sandbox_env: fields.strings("sandbox_env")?,
            sandbox_hosts: fields.strings("sandbox_hosts")?,
            tools_args: fields.strings("tools_args")?,
            family: None,
        })
    }
}

/// The fields of an `[agents.NAME]` table, read with messages that name the field.
struct Fields<'a>(BTreeMap<&'static str, &'a DeValue<'a>>);

impl Fields<'_> {
    fn string(&self, field: &str) -> Result<Option<String>, String> {
        match self.0.get(field) {
            None => Ok(None),
            Some(DeValue::String(text)) => Ok(Some(text.to_string())),
            Some(_) => Err(format!("`{field}` must be a string")),
        }
    }

    fn strings(&self, field: &str) -> Result<Vec<String>, String> {
        let wrong = || format!("`{field}` must be a list of strings");
        match self.0.get(field) {
            None => Ok(Vec::new()),
            Some(DeValue::Array(items)) => items
                .iter()
                .map(|item| match item.get_ref() {
                    DeValue::String(text) => Ok(text.to_string()),
                    _ => Err(wrong()),
                })
                .collect(),
            Some(_) => Err(wrong()),
        }
    }

    /// `command`: a program (`"my-agent"`), or a program and its first arguments (`["gemini",
    /// "--acp"]`).
    fn command(&self) -> Result<(String, Vec<String>), String> {
        let missing = || {
            "`command` is missing: the program to run, e.g. command = \"my-agent\" or [\"gemini\", \"--acp\"]"
                .to_owned()
        };
        let mut words = match self.0.get("command") {
            None => return Err(missing()),
            Some(DeValue::String(text)) => vec![text.to_string()],
            Some(DeValue::Array(_)) => self.strings("command")?,
            Some(_) => return Err("`command` must be a string or a list of strings".to_owned()),
        };
        if words
            .first()
            .is_none_or(|program| program.trim().is_empty())
        {
            return Err(missing());
        }
        let program = words.remove(0);
        Ok((program, words))
    }

    /// A table of strings (`env`, `model_env`).
    fn table(&self, field: &str) -> Result<BTreeMap<String, String>, String> {
        match self.0.get(field) {
            None => Ok(BTreeMap::new()),
            Some(DeValue::Table(vars)) => vars
                .iter()
                .map(|(key, value)| match value.get_ref() {
                    DeValue::String(text) => Ok((key.get_ref().to_string(), text.to_string())),
                    _ => Err(format!("`{field}.{}` must be a string", key.get_ref())),
                })
                .collect(),
            Some(_) => Err(format!("`{field}` must be a table of strings")),
        }
    }
}

/// How the prompt reaches the agent: `prompt = "argument"` needs `{prompt}` in `args`; without
/// a `prompt` field, a `{prompt}` placeholder means an argument, else stdin.
fn prompt_delivery(given: Option<&str>, has_placeholder: bool) -> Result<PromptDelivery, String> {
    match given {
        None if has_placeholder => Ok(PromptDelivery::Argument),
        None | Some("stdin") => Ok(PromptDelivery::Stdin),
        Some("argument") if has_placeholder => Ok(PromptDelivery::Argument),
        Some("argument") => Err("`prompt = \"argument\"` needs `{prompt}` in `args`".to_owned()),
        Some(other) => Err(format!(
            "`prompt` must be \"argument\" or \"stdin\", not '{other}'"
        )),
    }
}

/// A `tool_pattern`: a regex whose first group names the tool.
fn tool_pattern(pattern: &str) -> Result<Regex, String> {
    let regex =
        Regex::new(pattern).map_err(|err| format!("`tool_pattern` is not a valid regex: {err}"))?;
    if regex.captures_len() < 2 {
        return Err("`tool_pattern` needs a capture group for the tool name".to_owned());
    }
    Ok(regex)
}

impl Agent for CustomAgentDef {
    fn kind(&self) -> Option<AgentKind> {
        None
    }

    fn display_name(&self) -> String {
        self.name.clone()
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let fill = |arg: &str| {
            arg.replace("{prompt}", request.prompt)
                .replace("{model}", request.model.unwrap_or_default())
        };
        let mut args: Vec<OsString> = self.args.iter().map(|arg| fill(arg).into()).collect();
        if request.model.is_some() {
            args.extend(self.model_args.iter().map(|arg| fill(arg).into()));
        }
        if request.allow_all {
            args.extend(self.allow_all_args.iter().map(|arg| fill(arg).into()));
        }
        args.extend(request.extra_args.iter().map(OsString::from));
        if let Some(tools) = request.tools.filter(|_| self.prompt != PromptDelivery::Acp) {
            let config = tools.mcp_servers_json(&serde_json::json!({}));
            let list = serde_json::Value::from(tools.args.clone()).to_string();
            args.extend(self.tools_args.iter().map(|arg| {
                let arg = arg.replace("{mcp_config}", &config);
                let arg = arg.replace("{tools_command}", &tools.command);
                OsString::from(arg.replace("{tools_args}", &list))
            }));
        }
        let mut env: Vec<(String, OsString)> = (self.env.iter())
            .map(|(key, value)| (key.clone(), OsString::from(value)))
            .collect();
        if let Some(model) = request.model {
            env.extend(self.model_env.iter().map(|(key, value)| {
                let value = value.replace("{model}", model);
                let own = std::env::var(key).ok();
                (
                    key.clone(),
                    OsString::from(merged_over(own.as_deref(), value)),
                )
            }));
        }
        AgentCommand {
            program: request.binary.to_path_buf(),
            args,
            env,
            clear_env: false,
            stdin: (self.prompt == PromptDelivery::Stdin).then(|| request.prompt.to_owned()),
            usage_file: None,
            acp: (self.prompt == PromptDelivery::Acp).then(|| super::acp::Turn {
                prompt: request.prompt.to_owned(),
                allow: request.allow_all,
                tools: request.tools.cloned(),
            }),
        }
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        self.tool_pattern.as_ref()
    }

    fn takes_tools(&self) -> bool {
        // An ACP agent gets MCP servers in `session/new`; another, as its `tools_args` say.
        self.prompt == PromptDelivery::Acp || !self.tools_args.is_empty()
    }

    fn parse_event(&self, line: &str) -> Option<Vec<AgentEvent>> {
        if self.prompt == PromptDelivery::Acp {
            // The conversation's messages are read by the ACP client, never shown as text.
            return super::acp::is_message(line).then(Vec::new);
        }
        self.events?.agent().parse_event(line)
    }

    fn events_of(&self) -> Option<AgentKind> {
        self.events
    }

    fn reports_cost(&self) -> bool {
        self.events.is_some_and(|kind| kind.agent().reports_cost())
    }
}

impl CustomAgentDef {
    /// The output format this agent's output is read in.
    pub(crate) fn format(&self) -> OutputFormat {
        if self.events.is_some() || self.prompt == PromptDelivery::Acp {
            OutputFormat::Json
        } else {
            OutputFormat::Text
        }
    }

    /// The command, for messages.
    pub(crate) fn program(&self) -> &Path {
        Path::new(&self.command)
    }
}

/// A `model_env` value: when it is a JSON object and the variable already holds one (`own`, a
/// configuration given whole in a variable, as Kilo Code's `KILO_CONFIG_CONTENT`), the value's
/// keys over the user's, so the user's configuration is kept; else the value itself.
fn merged_over(own: Option<&str>, value: String) -> String {
    let parse = |text: &str| {
        serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .filter(serde_json::Value::is_object)
    };
    match (own.and_then(parse), parse(&value)) {
        (Some(mut merged), Some(serde_json::Value::Object(ours))) => {
            if let Some(merged_map) = merged.as_object_mut() {
                merged_map.extend(ours);
            }
            merged.to_string()
        }
        _ => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn definition(text: &str) -> Result<CustomAgentDef, String> {
        let table = toml::de::DeTable::parse(text).unwrap();
        let value = DeValue::Table(table.into_inner());
        CustomAgentDef::from_toml("mine", &value)
    }

    #[test]
    fn a_custom_agent_names_what_its_sandbox_lets_through() {
        let agent = definition(
            "command = \"my-agent\"\nsandbox_env = [\"MY_KEY\", \"MY_*\"]\nsandbox_hosts = [\"api.example.com\", \"llm.local:8443\"]",
        )
        .unwrap();
        assert_eq!(agent.sandbox_env, ["MY_KEY", "MY_*"]);
        assert_eq!(agent.sandbox_hosts, ["api.example.com", "llm.local:8443"]);
        assert!(
            definition("command = \"a\"\nsandbox_env = \"MY_KEY\"")
                .unwrap_err()
                .contains("`sandbox_env` must be a list of strings")
        );
    }

    #[test]
    fn a_json_model_variable_is_merged_over_the_users_configuration_in_it() {
        let own = r#"{"provider": {"mock": {}}, "model": "old"}"#;
        let merged = merged_over(Some(own), r#"{"model":"m1"}"#.to_owned());
        let merged: serde_json::Value = serde_json::from_str(&merged).unwrap();
        assert_eq!(
            merged,
            serde_json::json!({"provider": {"mock": {}}, "model": "m1"})
        );
        assert_eq!(merged_over(Some(own), "m1".to_owned()), "m1");
        assert_eq!(merged_over(Some("not json"), "{}".to_owned()), "{}");
        assert_eq!(
            merged_over(None, "{\"model\":\"m\"}".to_owned()),
            "{\"model\":\"m\"}"
        );
    }

    #[test]
    fn a_command_line_agent_gets_ralphs_tools_as_its_tools_args_say() {
        let agent = definition("command = \"my-agent\"\nargs = [\"{prompt}\"]\ntools_args = [\"--mcp\", \"{mcp_config}\", \"--run\", \"{tools_command}\", \"{tools_args}\"]").unwrap();
        assert!(agent.takes_tools());
        let tools = super::super::ToolServer {
            command: "/bin/ralph".to_owned(),
            args: vec![
                "__agent-tools".to_owned(),
                "--iteration".to_owned(),
                "3".to_owned(),
            ],
        };
        let mut request = super::super::tests::request("do it", None, false);
        request.tools = Some(&tools);
        let args = agent.command(&request).display_args();
        assert_eq!(args[..2], ["do it", "--mcp"]);
        let config: serde_json::Value = serde_json::from_str(&args[2]).unwrap();
        assert_eq!(config["mcpServers"]["ralph"]["command"], "/bin/ralph");
        assert_eq!(
            args[3..],
            [
                "--run",
                "/bin/ralph",
                "[\"__agent-tools\",\"--iteration\",\"3\"]"
            ]
        );
        // Without the key, no tools: the prompt does not name them either.
        let plain = definition("command = \"my-agent\"").unwrap();
        assert!(!plain.takes_tools());
    }

    #[test]
    fn prompt_as_argument_or_on_stdin() {
        let agent = definition("command = \"my-agent\"\nargs = [\"--msg\", \"{prompt}\"]\nmodel_args = [\"-m\", \"{model}\"]\nallow_all_args = [\"--yes\"]\nenv = { A = \"1\" }").unwrap();
        let request = CommandRequest {
            binary: Path::new("/bin/my-agent"),
            prompt: "do it",
            model: Some("big"),
            allow_all: true,
            extra_args: &["--x".to_owned()],
            opencode_config: None,
            format: OutputFormat::Text,
            usage_file: None,
            sandboxed: false,
            tools: None,
            tools_file: None,
        };
        let command = agent.command(&request);
        assert_eq!(
            command.display_args(),
            ["--msg", "do it", "-m", "big", "--yes", "--x"]
        );
        assert_eq!(command.stdin, None);
        assert_eq!(command.env, vec![("A".to_owned(), OsString::from("1"))]);
        let stdin = definition("command = \"my-agent\"").unwrap();
        assert_eq!(stdin.command(&request).stdin.as_deref(), Some("do it"));
    }

    #[test]
    fn bad_definitions_are_explained() {
        assert!(
            definition("args = []")
                .unwrap_err()
                .contains("`command` is missing")
        );
        assert!(
            definition("command = \"x\"\nprompt = \"argument\"")
                .unwrap_err()
                .contains("{prompt}")
        );
        assert!(
            definition("command = \"x\"\nformat = \"yaml\"")
                .unwrap_err()
                .contains("`format`")
        );
        assert!(
            definition("command = \"x\"\ntool_pattern = \"(\"")
                .unwrap_err()
                .contains("regex")
        );
        assert!(
            definition("command = \"x\"\ncolour = 1")
                .unwrap_err()
                .contains("unknown field `colour`")
        );
    }

    #[test]
    fn an_acp_agent_gets_its_prompt_in_the_protocol() {
        let agent = definition(
            "protocol = \"acp\"\ncommand = [\"my-agent\", \"--acp\"]\nmodel_env = { M = \"{model}\" }",
        )
        .unwrap();
        let request = CommandRequest {
            binary: Path::new("/bin/my-agent"),
            prompt: "do it",
            model: Some("big"),
            allow_all: false,
            extra_args: &[],
            opencode_config: None,
            format: OutputFormat::Text,
            usage_file: None,
            sandboxed: false,
            tools: None,
            tools_file: None,
        };
        let command = agent.command(&request);
        assert_eq!(command.display_args(), ["--acp"]);
        assert_eq!(command.stdin, None);
        assert_eq!(command.env, vec![("M".to_owned(), OsString::from("big"))]);
        let turn = command.acp.unwrap();
        assert_eq!((turn.prompt.as_str(), turn.allow), ("do it", false));
        assert_eq!(agent.format(), OutputFormat::Json);
        assert_eq!(
            agent.parse_event(r#"{"jsonrpc":"2.0","method":"x"}"#),
            Some(Vec::new())
        );
        assert_eq!(agent.parse_event("plain"), None);
        for wrong in [
            "protocol = \"acp\"\ncommand = \"x\"\nformat = \"codex\"",
            "protocol = \"acp\"\ncommand = \"x\"\nargs = [\"{prompt}\"]",
        ] {
            assert!(
                definition(wrong).unwrap_err().contains("in the protocol"),
                "{wrong}"
            );
        }
        assert!(
            definition("protocol = \"mcp\"\ncommand = \"x\"")
                .unwrap_err()
                .contains("`protocol`")
        );
        assert!(
            definition("command = []")
                .unwrap_err()
                .contains("`command` is missing")
        );
    }

    #[test]
    fn tool_pattern_and_event_formats() {
        let text = definition("command = \"x\"\ntool_pattern = '^TOOL (\\w+)'").unwrap();
        assert_eq!(text.tool_in_line("TOOL Edit a.rs").as_deref(), Some("Edit"));
        let json = definition("command = \"x\"\nformat = \"codex\"").unwrap();
        assert_eq!(json.format(), OutputFormat::Json);
        assert!(json.parse_event(r#"{"type":"turn.started"}"#).is_some());
        assert!(!json.reports_cost());
    }
}
