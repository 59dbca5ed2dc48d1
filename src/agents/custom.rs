//! Agents defined in a config file (`[agents.NAME]`), for any CLI ralph does not know.
//!
//! A definition names the command, its arguments (with `{prompt}` where the prompt goes, or the
//! prompt on stdin), arguments added for a model (`{model}`) and for `--allow-all`, environment
//! variables, and how to read the output: plain text with an optional tool pattern, or the JSON
//! events of one of the known agents.

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
}

/// A custom agent as defined in a config file, checked.
#[derive(Clone, Debug)]
pub(crate) struct CustomAgentDef {
    pub(crate) name: String,
    pub(crate) command: String,
    pub(crate) args: Vec<String>,
    pub(crate) model_args: Vec<String>,
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
}

const FIELDS: [&str; 10] = [
    "command",
    "args",
    "model_args",
    "allow_all_args",
    "prompt",
    "format",
    "tool_pattern",
    "env",
    "sandbox_env",
    "sandbox_hosts",
];

impl CustomAgentDef {
    /// Checks a `[agents.NAME]` table.
    pub(crate) fn from_toml(name: &str, value: &DeValue<'_>) -> Result<Self, String> {
        let DeValue::Table(table) = value else {
            return Err("must be a table (command = …, args = […])".to_owned());
        };
        if super::AgentKind::from_id(name).is_some() {
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
        let command = fields
            .string("command")?
            .filter(|command| !command.trim().is_empty())
            .ok_or("`command` is missing: the program to run, e.g. command = \"aider\"")?;
        let args = fields.strings("args")?;
        let has_placeholder = args.iter().any(|arg| arg.contains("{prompt}"));
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
            prompt: prompt_delivery(fields.string("prompt")?.as_deref(), has_placeholder)?,
            args,
            model_args: fields.strings("model_args")?,
            allow_all_args: fields.strings("allow_all_args")?,
            events,
            tool_pattern: fields
                .string("tool_pattern")?
                .map(|pattern| tool_pattern(&pattern))
                .transpose()?,
            env: fields.env()?,
            sandbox_env: fields.strings("sandbox_env")?,
            sandbox_hosts: fields.strings("sandbox_hosts")?,
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

    fn env(&self) -> Result<BTreeMap<String, String>, String> {
        match self.0.get("env") {
            None => Ok(BTreeMap::new()),
            Some(DeValue::Table(vars)) => vars
                .iter()
                .map(|(key, value)| match value.get_ref() {
                    DeValue::String(text) => Ok((key.get_ref().to_string(), text.to_string())),
                    _ => Err(format!("`env.{}` must be a string", key.get_ref())),
                })
                .collect(),
            Some(_) => Err("`env` must be a table of strings".to_owned()),
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
        AgentCommand {
            program: request.binary.to_path_buf(),
            args,
            env: self
                .env
                .iter()
                .map(|(key, value)| (key.clone(), OsString::from(value)))
                .collect(),
            stdin: (self.prompt == PromptDelivery::Stdin).then(|| request.prompt.to_owned()),
            usage_file: None,
        }
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        self.tool_pattern.as_ref()
    }

    fn parse_event(&self, line: &str) -> Option<Vec<AgentEvent>> {
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
        if self.events.is_some() {
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
    fn tool_pattern_and_event_formats() {
        let text = definition("command = \"x\"\ntool_pattern = '^TOOL (\\w+)'").unwrap();
        assert_eq!(text.tool_in_line("TOOL Edit a.rs").as_deref(), Some("Edit"));
        let json = definition("command = \"x\"\nformat = \"codex\"").unwrap();
        assert_eq!(json.format(), OutputFormat::Json);
        assert!(json.parse_event(r#"{"type":"turn.started"}"#).is_some());
        assert!(!json.reports_cost());
    }
}
