//! OpenCode: `opencode run [-m MODEL] PROMPT`.
//!
//! OpenCode has no permission flag for `run`; `--allow-all` and `--no-plugins` work through a
//! generated configuration file named by `OPENCODE_CONFIG` (see [`opencode_config`]).

use std::borrow::Cow;
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::events::{Failure, capitalized, status_field, str_field, tool_detail};
use super::{
    Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, OutputFormat, Usage, command_from,
    prompt_needs_stdin,
};

pub(super) struct OpenCode;

static TOOL_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\|\s{2}([A-Za-z0-9_-]+)").expect("valid regex"));

/// Permission keys set to `allow` under `--allow-all`.
const PERMISSION_KEYS: [&str; 15] = [
    "read",
    "edit",
    "glob",
    "grep",
    "list",
    "bash",
    "task",
    "webfetch",
    "websearch",
    "codesearch",
    "todowrite",
    "todoread",
    "question",
    "lsp",
    "external_directory",
];

impl Agent for OpenCode {
    fn kind(&self) -> Option<AgentKind> {
        Some(AgentKind::OpenCode)
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let mut args = vec!["run".to_owned()];
        if request.format == OutputFormat::Json {
            args.extend(["--format".to_owned(), "json".to_owned()]);
        }
        if let Some(model) = request.model {
            args.extend(["-m".to_owned(), model.to_owned()]);
        }
        args.extend(request.extra_args.iter().cloned());
        if !prompt_needs_stdin(request.prompt) {
            args.push(request.prompt.to_owned());
        }
        let env = request
            .opencode_config
            .map(|path| {
                (
                    super::OPENCODE_CONFIG_ENV.to_owned(),
                    path.as_os_str().to_owned(),
                )
            })
            .into_iter()
            .collect();
        command_from(request, args, env)
    }

    fn takes_tools(&self) -> bool {
        true
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        Some(&TOOL_LINE)
    }

    fn parse_event(&self, line: &str) -> Option<Vec<AgentEvent>> {
        // Only the fields ralph reads are taken, borrowed where they can be, and the rest
        // skipped without being built: the agent's output can be gigabytes, mostly text parts.
        let event: Outline<'_> = serde_json::from_str(line).ok()?;
        let part = event.part.unwrap_or_default();
        let events = match &*event.kind {
            "text" => {
                let text = part.text?.into_owned();
                vec![AgentEvent::FinalText(text)]
            }
            "step_start" => match event.session {
                Some(id) => vec![AgentEvent::Session(id.into_owned())],
                None => vec![AgentEvent::Quiet],
            },
            "reasoning" => vec![AgentEvent::Quiet],
            "tool_use" => {
                let state: ToolState = parse_raw(part.state).unwrap_or_default();
                let mut events = vec![AgentEvent::Tool {
                    name: capitalized(part.tool.as_deref()?),
                    detail: state.input.as_ref().and_then(tool_detail),
                }];
                if parse_raw::<Cow<str>>(state.status).as_deref() == Some("error") {
                    let message = parse_raw::<Cow<str>>(state.error);
                    let message = message.as_deref().unwrap_or("the tool call failed");
                    events.push(AgentEvent::ToolError(message.to_owned()));
                }
                events
            }
            "step_finish" => {
                let tokens: Tokens = parse_raw(part.tokens).unwrap_or_default();
                let cache: CacheTokens = parse_raw(tokens.cache).unwrap_or_default();
                let mut events = vec![
                    AgentEvent::Usage(Usage {
                        input: count(tokens.input),
                        output: count(tokens.output).saturating_add(count(tokens.reasoning)),
                        cache_read: count(cache.read),
                        cache_write: count(cache.write),
                    }),
                    AgentEvent::Turns(1),
                ];
                if let Some(cost) = parse_raw::<f64>(part.cost) {
                    events.push(AgentEvent::Cost(cost));
                }
                events
            }
            "error" => {
                let error = parse_raw::<Value>(event.error).unwrap_or_default();
                let error = &error;
                let data = error.get("data").unwrap_or(&Value::Null);
                let status = status_field(data, "statusCode");
                let message = str_field(data, "message")
                    .or_else(|| str_field(error, "message"))
                    .or_else(|| str_field(error, "name"))
                    .unwrap_or("OpenCode reported an error");
                vec![AgentEvent::Failure(Failure::classify(
                    status,
                    message,
                    crate::model::now(),
                ))]
            }
            _ => return None,
        };
        Some(events)
    }
}

/// A field kept as text until the event's type says it is needed.
fn parse_raw<'a, T: serde::Deserialize<'a>>(raw: Option<&'a RawValue>) -> Option<T> {
    serde_json::from_str(raw?.get()).ok()
}

/// The fields of an event line ralph reads; the others are skipped (the ones only some types
/// of event need are kept as text, which costs nothing to build).
#[derive(serde::Deserialize)]
struct Outline<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, rename = "sessionID", borrow)]
    session: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    part: Option<Part<'a>>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// The fields of a `part` ralph reads (which ones depends on the event's type).
#[derive(Default, serde::Deserialize)]
struct Part<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    state: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tokens: Option<&'a RawValue>,
    #[serde(default, borrow)]
    cost: Option<&'a RawValue>,
}

/// The fields of a tool call's `state` ralph reads (its output, often large, is skipped).
#[derive(Default, serde::Deserialize)]
struct ToolState<'a> {
    #[serde(default, borrow)]
    status: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
    #[serde(default)]
    input: Option<Value>,
}

/// A step's token counts, read without building a map; see [`count`].
#[derive(Default, serde::Deserialize)]
struct Tokens<'a> {
    #[serde(default, borrow)]
    input: Option<&'a RawValue>,
    #[serde(default, borrow)]
    output: Option<&'a RawValue>,
    #[serde(default, borrow)]
    reasoning: Option<&'a RawValue>,
    #[serde(default, borrow)]
    cache: Option<&'a RawValue>,
}

/// The cached tokens of a step.
#[derive(Default, serde::Deserialize)]
struct CacheTokens<'a> {
    #[serde(default, borrow)]
    read: Option<&'a RawValue>,
    #[serde(default, borrow)]
    write: Option<&'a RawValue>,
}

/// A token count: a whole number, or 0 for anything else (a fraction, a string, nothing).
fn count(raw: Option<&RawValue>) -> u64 {
    raw.and_then(|raw| raw.get().parse().ok()).unwrap_or(0)
}

/// Where OpenCode's own configuration files live, for the `--no-plugins` plugin filter.
pub(crate) struct OpenCodeConfigSources<'a> {
    pub(crate) config_home: Option<&'a Path>,
    pub(crate) cwd: &'a Path,
}

/// The configuration ralph writes for OpenCode, or `None` when neither option needs one.
pub(crate) fn opencode_config(
    sources: &OpenCodeConfigSources<'_>,
    (no_plugins, allow_all): (bool, bool),
    tools: Option<&super::ToolServer>,
) -> Option<Value> {
    if !no_plugins && !allow_all && tools.is_none() {
        return None;
    }
    let mut config = Map::new();
    config.insert("$schema".into(), json!("https://opencode.ai/config.json"));
    if no_plugins {
        let mut plugins: Vec<String> = Vec::new();
        let mut files = Vec::new();
        if let Some(home) = sources.config_home {
            files.push(home.join("opencode").join("opencode.json"));
        }
        files.push(sources.cwd.join(".ralph").join("opencode.json"));
        files.push(sources.cwd.join(".opencode").join("opencode.json"));
        for file in files {
            for plugin in plugins_in(&file) {
                if plugin.to_lowercase().contains("auth") && !plugins.contains(&plugin) {
                    plugins.push(plugin);
                }
            }
        }
        config.insert("plugin".into(), json!(plugins));
    }
    if allow_all {
        let permission: Map<String, Value> = PERMISSION_KEYS
            .iter()
            .map(|key| ((*key).to_owned(), json!("allow")))
            .collect();
        config.insert("permission".into(), Value::Object(permission));
    }
    let config = Value::Object(config);
    Some(match tools {
        Some(tools) => with_tools(Some(config), tools),
        None => config,
    })
}

/// An OpenCode configuration (`config`, or a new one) with ralph's tools as a local MCP server
/// (its command one list: the program, then its arguments).
pub(super) fn with_tools(config: Option<Value>, tools: &super::ToolServer) -> Value {
    let command: Vec<&str> = std::iter::once(tools.command.as_str())
        .chain(tools.args.iter().map(String::as_str))
        .collect();
    let server = json!({"type": "local", "command": command, "enabled": true});
    super::with_server(config, "mcp", server)
}

/// The string entries of the `plugin` array of a (JSONC) OpenCode config file.
fn plugins_in(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let Ok(value) = serde_json::from_str::<Value>(&super::plain_json(&text)) else {
        return Vec::new();
    };
    value
        .get("plugin")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::tests::request;
    use super::*;

    #[test]
    fn argv_for_model_and_permissions() {
        let agent = OpenCode;
        let plain = agent.command(&request("do it", None, false));
        assert_eq!(plain.display_args(), ["run", "do it"]);
        let mut json = request("do it", Some("p/m"), true);
        json.format = OutputFormat::Json;
        assert_eq!(
            agent.command(&json).display_args(),
            ["run", "--format", "json", "-m", "p/m", "do it"]
        );
        assert!(plain.env.is_empty() && plain.stdin.is_none());
        let with_model = agent.command(&request("do it", Some("anthropic/claude"), true));
        assert_eq!(
            with_model.display_args(),
            ["run", "-m", "anthropic/claude", "do it"]
        );
    }

    #[test]
    fn config_file_is_passed_in_the_environment() {
        let mut req = request("p", None, true);
        let path = Path::new("/w/.ralph/ralph-opencode.config.json");
        req.opencode_config = Some(path);
        let command = OpenCode.command(&req);
        assert_eq!(
            command.env,
            vec![("OPENCODE_CONFIG".to_owned(), path.into())]
        );
    }

    #[test]
    fn steps_and_tool_calls_are_read_leniently() {
        let step = |tokens: &str| {
            let line = format!(
                r#"{{"type":"step_finish","part":{{"type":"step-finish","tokens":{tokens},"cost":2}}}}"#
            );
            OpenCode.parse_event(&line).unwrap()
        };
        let usage = |input, output, cache_read, cache_write| Usage {
            input,
            output,
            cache_read,
            cache_write,
        };
        assert_eq!(
            step(r#"{"input":100,"output":20,"reasoning":5,"cache":{"read":7,"write":3}}"#),
            [
                AgentEvent::Usage(usage(100, 25, 7, 3)),
                AgentEvent::Turns(1),
                AgentEvent::Cost(2.0)
            ]
        );
        // What is not a whole number counts nothing; the rest still counts.
        assert_eq!(
            step(r#"{"input":1.5,"output":"20","reasoning":-1,"cache":null,"total":9}"#)[0],
            AgentEvent::Usage(usage(0, 0, 0, 0))
        );
        assert_eq!(
            step(r#"{"input":4,"cache":{"read":{"x":1},"write":2}}"#)[0],
            AgentEvent::Usage(usage(4, 0, 0, 2))
        );
        assert_eq!(step(r#""many""#)[0], AgentEvent::Usage(usage(0, 0, 0, 0)));
        let tool = |state: &str| {
            let line = format!(
                r#"{{"type":"tool_use","part":{{"type":"tool","tool":"bash","state":{state}}}}}"#
            );
            OpenCode.parse_event(&line).unwrap()
        };
        let failed = tool(r#"{"status":"error","error":"denied","input":{"command":"rm x"}}"#);
        assert_eq!(
            failed,
            [
                AgentEvent::Tool {
                    name: "Bash".into(),
                    detail: Some("rm x".into())
                },
                AgentEvent::ToolError("denied".into())
            ]
        );
        let unexplained = tool(r#"{"status":"error","error":{"code":1}}"#);
        assert_eq!(
            unexplained[1],
            AgentEvent::ToolError("the tool call failed".into())
        );
        assert_eq!(tool(r#"{"status":"completed","output":"ok"}"#).len(), 1);
        assert_eq!(tool(r#""odd""#).len(), 1);
    }

    #[test]
    fn tool_lines_are_recognised() {
        assert_eq!(
            OpenCode.tool_in_line("|  Bash  ls").as_deref(),
            Some("Bash")
        );
        assert_eq!(OpenCode.tool_in_line("| Bash"), None);
        assert_eq!(OpenCode.tool_in_line("text |  Bash"), None);
    }

    #[test]
    fn config_keeps_only_auth_plugins_and_allows_every_permission() {
        let dir = crate::testing::tempdir().unwrap();
        let home = dir.path().join("config");
        std::fs::create_dir_all(home.join("opencode")).unwrap();
        std::fs::write(
            home.join("opencode/opencode.json"),
            "{\n // comment\n \"plugin\": [\"opencode-openai-codex-auth\", \"ralph-wiggum\", /* x */ \"my-AUTH-helper\",],\n}",
        )
        .unwrap();
        let sources = OpenCodeConfigSources {
            config_home: Some(&home),
            cwd: dir.path(),
        };
        assert_eq!(opencode_config(&sources, (false, false), None), None);
        let config = opencode_config(&sources, (true, true), None).unwrap();
        assert_eq!(
            config["plugin"],
            json!(["opencode-openai-codex-auth", "my-AUTH-helper"])
        );
        assert_eq!(config["permission"]["external_directory"], json!("allow"));
        assert_eq!(config["permission"].as_object().unwrap().len(), 15);
        let only_plugins = opencode_config(&sources, (true, false), None).unwrap();
        assert!(only_plugins.get("permission").is_none());
    }
}
