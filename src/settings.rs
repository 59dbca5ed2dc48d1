//! Settings from config files and `RALPH_*` environment variables, layered under the command line.
//!
//! Precedence, highest first: command line, environment, project file (`.ralph/config.toml`), user
//! file (`$XDG_CONFIG_HOME/ralph/config.toml`, else `~/.config/ralph/config.toml`), defaults. Every
//! loop option has a key named like its flag (`max_iterations` for `--max-iterations`) and a
//! variable (`RALPH_MAX_ITERATIONS`); both are parsed by the command line's own parsers, so a value
//! means the same wherever it is written. Unknown keys and bad values name the file, the line and
//! the key. Custom agents are defined in `[agents.NAME]` tables (see `agents/custom.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};

use crate::agents::OutputFormat;
use crate::agents::custom::CustomAgentDef;
use crate::config::{LoopFlags, usage};
use crate::output::ColorChoice;
use crate::promise::PromiseFormat;

/// The project config file, relative to the working directory.
pub(crate) const PROJECT_FILE: &str = ".ralph/config.toml";

/// Every key a config file may set, in the order `--config` and `--init` show them.
pub(crate) const KEYS: [&str; 30] = [
    "agent",
    "model",
    "rotation",
    "min_iterations",
    "max_iterations",
    "completion_promise",
    "promise_format",
    "promise_anywhere",
    "pause",
    "verify",
    "verify_timeout",
    "tasks",
    "task_promise",
    "iteration_timeout",
    "idle_timeout",
    "max_runtime",
    "max_cost",
    "max_tokens",
    "max_stalled",
    "abort_promise",
    "max_retries",
    "retry_max_wait",
    "output_format",
    "stream",
    "verbose_tools",
    "no_plugins",
    "allow_all",
    "commit",
    "agent_args",
    "color",
];

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    CommandLine,
    Environment(String),
    File { path: PathBuf, line: usize },
    Default,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CommandLine => f.write_str("command line"),
            Self::Environment(variable) => write!(f, "environment ({variable})"),
            Self::File { path, line } => write!(f, "{}:{line}", path.display()),
            Self::Default => f.write_str("default"),
        }
    }
}

/// A raw value before it is parsed for its key.
enum Raw {
    Text(String),
    Bool(bool),
    List(Vec<String>),
}

/// One source of settings.
#[derive(Debug, Default)]
pub(crate) struct Layer {
    pub(crate) flags: LoopFlags,
    pub(crate) color: Option<ColorChoice>,
    /// Where each key set here came from.
    pub(crate) sources: BTreeMap<&'static str, Source>,
}

/// The environment and config-file layers, plus the custom agents the files define.
#[derive(Debug, Default)]
pub(crate) struct Settings {
    /// Environment, project file, user file: highest first.
    pub(crate) layers: Vec<Layer>,
    pub(crate) agents: BTreeMap<String, CustomAgentDef>,
    /// The files that exist, for `--config`.
    pub(crate) files: Vec<PathBuf>,
}

impl Settings {
    /// Reads the environment and both config files.
    pub(crate) fn load(cwd: &Path, var: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let mut settings = Self::default();
        settings.layers.push(from_environment(var)?);
        let user = user_file(var);
        for path in [Some(cwd.join(PROJECT_FILE)), user].into_iter().flatten() {
            let Some(text) = crate::storage::read_text(&path)
                .map_err(|err| usage(format!("cannot read {}: {err}", path.display())))?
            else {
                continue;
            };
            let (layer, agents) = from_file(&path, &text)?;
            settings.layers.push(layer);
            for (name, agent) in agents {
                // The project's definition of a name wins over the user's.
                settings.agents.entry(name).or_insert(agent);
            }
            settings.files.push(path);
        }
        Ok(settings)
    }

    /// The flags of all layers merged (highest first), under `command_line`.
    pub(crate) fn merged(&self, command_line: LoopFlags) -> LoopFlags {
        self.layers
            .iter()
            .fold(command_line, |merged, layer| merged.or(layer.flags.clone()))
    }

    /// The colour choice: command line, else the highest layer that sets one.
    pub(crate) fn color(&self, command_line: Option<ColorChoice>) -> ColorChoice {
        command_line
            .or_else(|| self.layers.iter().find_map(|layer| layer.color))
            .unwrap_or_default()
    }

    /// Where `key` came from, given the command line's flags.
    pub(crate) fn source_of(&self, key: &str, command_line: &LoopFlags, cli_color: bool) -> Source {
        if command_line.is_set(key) || (key == "color" && cli_color) {
            return Source::CommandLine;
        }
        self.layers
            .iter()
            .find_map(|layer| layer.sources.get(key).cloned())
            .unwrap_or(Source::Default)
    }
}

/// `$XDG_CONFIG_HOME/ralph/config.toml`, else `~/.config/ralph/config.toml`.
pub(crate) fn user_file(var: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    var("XDG_CONFIG_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|home| PathBuf::from(home).join(".config")))
        .map(|dir| dir.join("ralph").join("config.toml"))
}

/// The variable for a key: `max_iterations` → `RALPH_MAX_ITERATIONS`.
pub(crate) fn variable(key: &str) -> String {
    format!("RALPH_{}", key.to_uppercase())
}

fn from_environment(var: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Layer> {
    let mut layer = Layer::default();
    for key in KEYS {
        let name = variable(key);
        let Some(value) = var(&name).filter(|value| !value.trim().is_empty()) else {
            continue;
        };
        let raw = match key {
            // Lists in a variable: one item per line (so commands may contain commas).
            "verify" | "agent_args" => Raw::List(
                value
                    .lines()
                    .map(str::to_owned)
                    .filter(|l| !l.trim().is_empty())
                    .collect(),
            ),
            _ => Raw::Text(value),
        };
        apply(&mut layer, key, raw).map_err(|err| usage(format!("{name}: {err}")))?;
        layer.sources.insert(key, Source::Environment(name));
    }
    Ok(layer)
}

fn from_file(path: &Path, text: &str) -> anyhow::Result<(Layer, BTreeMap<String, CustomAgentDef>)> {
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let table = DeTable::parse(text).map_err(|err| {
        let line = err.span().map_or(1, |span| line_of(span.start));
        usage(format!(
            "{}:{line}: not valid TOML: {}",
            path.display(),
            err.message()
        ))
    })?;
    let mut layer = Layer::default();
    let mut agents = BTreeMap::new();
    for (key, value) in table.get_ref() {
        let line = line_of(key.span().start);
        let at = |message: String| usage(format!("{}:{line}: {message}", path.display()));
        let name = key.get_ref().as_ref();
        if name == "agents" {
            let DeValue::Table(definitions) = value.get_ref() else {
                return Err(at(
                    "`agents` must be a table of agent definitions ([agents.NAME])".to_owned(),
                ));
            };
            for (agent, definition) in definitions {
                let agent_line = line_of(agent.span().start);
                let parsed = CustomAgentDef::from_toml(agent.get_ref(), definition.get_ref())
                    .map_err(|err| {
                        usage(format!(
                            "{}:{agent_line}: agents.{}: {err}",
                            path.display(),
                            agent.get_ref()
                        ))
                    })?;
                agents.insert(agent.get_ref().to_string(), parsed);
            }
            continue;
        }
        let Some(known) = KEYS.iter().copied().find(|k| *k == name) else {
            let hint =
                closest(name).map_or_else(String::new, |k| format!(" (did you mean `{k}`?)"));
            return Err(at(format!("unknown key `{name}`{hint}")));
        };
        check_type(known, value.get_ref()).map_err(|err| at(format!("`{known}`: {err}")))?;
        let raw = raw_value(value.get_ref()).map_err(|err| at(format!("`{known}`: {err}")))?;
        apply(&mut layer, known, raw).map_err(|err| at(format!("`{known}`: {err}")))?;
        layer.sources.insert(
            known,
            Source::File {
                path: path.to_owned(),
                line,
            },
        );
    }
    Ok((layer, agents))
}

/// The TOML type a key needs (environment variables are always text and parsed leniently).
fn check_type(key: &str, value: &DeValue<'_>) -> Result<(), String> {
    let wanted = match key {
        "promise_anywhere" | "tasks" | "stream" | "verbose_tools" | "no_plugins" | "allow_all"
        | "commit" => "a boolean (true or false)",
        "min_iterations" | "max_iterations" | "max_stalled" | "max_retries" => "a whole number",
        "max_cost" => "a number",
        "max_tokens" => "a number or a string like \"500k\"",
        "pause" | "verify_timeout" | "iteration_timeout" | "idle_timeout" | "max_runtime"
        | "retry_max_wait" => "a string like \"30s\" or a number of seconds",
        "verify" | "agent_args" => "a list of strings",
        "rotation" => "a list of strings or a string",
        _ => "a string",
    };
    let fits = match value {
        DeValue::Boolean(_) => wanted.starts_with("a boolean"),
        DeValue::Integer(_) => wanted.contains("number"),
        DeValue::Float(_) => key == "max_cost" || key == "max_tokens",
        DeValue::String(_) => wanted.contains("string") && !wanted.starts_with("a list of"),
        DeValue::Array(_) => wanted.starts_with("a list"),
        DeValue::Datetime(_) | DeValue::Table(_) => false,
    };
    if fits {
        Ok(())
    } else {
        Err(format!("must be {wanted}"))
    }
}

fn raw_value(value: &DeValue<'_>) -> Result<Raw, String> {
    Ok(match value {
        DeValue::String(text) => Raw::Text(text.to_string()),
        DeValue::Integer(number) => Raw::Text(number.as_str().replace('_', "")),
        DeValue::Float(number) => Raw::Text(number.as_str().replace('_', "")),
        DeValue::Boolean(flag) => Raw::Bool(*flag),
        DeValue::Array(items) => Raw::List(
            items
                .iter()
                .map(|item| match item.get_ref() {
                    DeValue::String(text) => Ok(text.to_string()),
                    _ => Err("the list must hold strings only".to_owned()),
                })
                .collect::<Result<_, _>>()?,
        ),
        DeValue::Datetime(_) | DeValue::Table(_) => return Err("unexpected value".to_owned()),
    })
}

fn text(raw: Raw) -> Result<String, String> {
    match raw {
        Raw::Text(text) => Ok(text),
        Raw::Bool(_) => Err("expects a string or a number, not true/false".to_owned()),
        Raw::List(_) => Err("expects a single value, not a list".to_owned()),
    }
}

fn boolean(raw: Raw) -> Result<bool, String> {
    match raw {
        Raw::Bool(flag) => Ok(flag),
        Raw::Text(text) => match text.trim().to_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(format!("expects true or false, not '{text}'")),
        },
        Raw::List(_) => Err("expects true or false, not a list".to_owned()),
    }
}

fn list(raw: Raw) -> Result<Vec<String>, String> {
    match raw {
        Raw::List(items) => Ok(items),
        Raw::Text(text) => Ok(vec![text]),
        Raw::Bool(_) => Err("expects a list of strings".to_owned()),
    }
}

fn choice<T: clap::ValueEnum>(raw: Raw) -> Result<T, String> {
    let value = text(raw)?;
    T::from_str(value.trim(), true).map_err(|_| {
        let names: Vec<String> = T::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value().map(|p| p.get_name().to_owned()))
            .collect();
        format!("'{value}' is not one of {}", names.join(", "))
    })
}

/// Sets one key on a layer, parsing the value as the command line would.
fn apply(layer: &mut Layer, key: &str, raw: Raw) -> Result<(), String> {
    use crate::cli::parse;
    let flags = &mut layer.flags;
    let limits = &mut flags.limits;
    match key {
        "agent" => flags.agent = Some(text(raw)?.trim().to_owned()),
        // An empty model means the agent's default, as on the command line.
        "model" => flags.model = Some(text(raw)?).filter(|model| !model.trim().is_empty()),
        "rotation" => flags.rotation = Some(parse::rotation(&list(raw)?.join(","))?),
        "min_iterations" => flags.min_iterations = Some(parse::whole_number(&text(raw)?)?),
        "max_iterations" => flags.max_iterations = Some(parse::whole_number(&text(raw)?)?),
        "completion_promise" => flags.completion_promise = Some(text(raw)?),
        "promise_format" => flags.promise_format = Some(choice::<PromiseFormat>(raw)?),
        "promise_anywhere" => flags.promise_anywhere = Some(boolean(raw)?),
        "pause" => flags.pause = Some(parse::duration(&text(raw)?)?),
        "verify" => flags.verify = Some(list(raw)?),
        "verify_timeout" => flags.verify_timeout = Some(parse::duration(&text(raw)?)?),
        "tasks" => flags.tasks = Some(boolean(raw)?),
        "task_promise" => flags.task_promise = Some(text(raw)?),
        "iteration_timeout" => limits.iteration_timeout = Some(parse::duration(&text(raw)?)?),
        "idle_timeout" => limits.idle_timeout = Some(parse::duration(&text(raw)?)?),
        "max_runtime" => limits.max_runtime = Some(parse::duration(&text(raw)?)?),
        "max_cost" => limits.max_cost = Some(parse::usd(&text(raw)?)?),
        "max_tokens" => limits.max_tokens = Some(parse::token_count(&text(raw)?)?),
        "max_stalled" => limits.max_stalled = Some(parse::whole_number(&text(raw)?)?),
        "abort_promise" => limits.abort_promise = Some(text(raw)?),
        "max_retries" => limits.max_retries = Some(parse::whole_number(&text(raw)?)?),
        "retry_max_wait" => limits.retry_max_wait = Some(parse::duration(&text(raw)?)?),
        "output_format" => flags.output_format = Some(choice::<OutputFormat>(raw)?),
        "stream" => flags.stream = Some(boolean(raw)?),
        "verbose_tools" => flags.verbose_tools = Some(boolean(raw)?),
        "no_plugins" => flags.no_plugins = Some(boolean(raw)?),
        "allow_all" => flags.allow_all = Some(boolean(raw)?),
        "commit" => flags.commit = Some(boolean(raw)?),
        "agent_args" => flags.agent_args = Some(list(raw)?),
        "color" => layer.color = Some(choice::<ColorChoice>(raw)?),
        _ => return Err(format!("unknown key `{key}`")),
    }
    Ok(())
}

/// The known key closest to a misspelt one.
fn closest(name: &str) -> Option<&'static str> {
    KEYS.iter()
        .copied()
        .map(|key| (edit_distance(name, key), key))
        .filter(|(distance, _)| *distance <= 3)
        .min()
        .map(|(_, key)| key)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = (previous + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            previous = current;
        }
    }
    row[b.len()]
}

/// The commented project config `ralph --init` writes.
pub(crate) fn init_text() -> String {
    "# ralph project settings. Every key is optional; the command line and RALPH_* variables win.
# Durations: 500ms, 90s, 30m, 1h. See `ralph --help` for what each option does, and
# `ralph --config` for the settings in effect and where each comes from.

# agent = \"opencode\"              # opencode, claude-code, codex, or a name from [agents.NAME]
# model = \"\"                      # passed to the agent as given
# rotation = [\"claude-code:sonnet\", \"codex\"]   # cycle agents/models per iteration
# min_iterations = 1
# max_iterations = 0              # 0 = no limit
# completion_promise = \"COMPLETE\"
# promise_format = \"xml\"          # xml or plain
# promise_anywhere = false
# pause = \"1s\"
# verify = [\"cargo test\"]         # must pass before completion is accepted
# verify_timeout = \"10m\"
# tasks = false
# task_promise = \"READY_FOR_NEXT_TASK\"
# iteration_timeout = \"30m\"
# idle_timeout = \"10m\"
# max_runtime = \"8h\"
# max_cost = 20.0                 # USD
# max_tokens = \"5M\"
# max_stalled = 5
# abort_promise = \"BLOCKED\"
# max_retries = 3
# retry_max_wait = \"10m\"
# output_format = \"json\"          # json or text
# stream = true
# verbose_tools = false
# no_plugins = false
# allow_all = true
# commit = true
# agent_args = []
# color = \"auto\"                  # auto, always or never

# A custom agent, run with `ralph --agent aider`:
# [agents.aider]
# command = \"aider\"
# args = [\"--yes-always\", \"--message\", \"{prompt}\"]   # {prompt}: the prompt as an argument
# model_args = [\"--model\", \"{model}\"]                # added when a model is set
# allow_all_args = []                                  # added with --allow-all
# prompt = \"argument\"                                  # or \"stdin\"
# format = \"text\"                 # text, or the JSON events of claude-code, codex or opencode
# tool_pattern = '^Applied edit to (\\S+)'              # text format: group 1 names the tool
# env = { AIDER_AUTO_COMMITS = \"false\" }
"
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> anyhow::Result<(Layer, BTreeMap<String, CustomAgentDef>)> {
        from_file(Path::new(".ralph/config.toml"), text)
    }

    #[test]
    fn values_parse_like_the_command_line() {
        let (layer, _) = file("agent = \"codex\"\nmax_iterations = 20\npause = \"2s\"\ncommit = false\nverify = [\"cargo test\", \"make lint\"]\nmax_cost = 2.5\nmax_tokens = \"500k\"\n").unwrap();
        assert_eq!(layer.flags.agent.as_deref(), Some("codex"));
        assert_eq!(layer.flags.max_iterations, Some(20));
        assert_eq!(layer.flags.pause, Some(std::time::Duration::from_secs(2)));
        assert_eq!(layer.flags.commit, Some(false));
        assert_eq!(layer.flags.verify.as_ref().unwrap().len(), 2);
        assert_eq!(layer.flags.limits.max_tokens, Some(500_000));
        assert_eq!(
            layer.sources["max_iterations"],
            Source::File {
                path: ".ralph/config.toml".into(),
                line: 2
            }
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_name_file_line_and_key() {
        let error = file("model = \"x\"\n\nmax_iteration = 3\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            ".ralph/config.toml:3: unknown key `max_iteration` (did you mean `max_iterations`?)"
        );
        let error = file("max_iterations = \"ten\"\n").unwrap_err().to_string();
        assert_eq!(
            error,
            ".ralph/config.toml:1: `max_iterations`: must be a whole number"
        );
        let error = file("max_iterations = -3\n").unwrap_err().to_string();
        assert!(
            error.starts_with(".ralph/config.toml:1: `max_iterations`: '-3' is not a whole number"),
            "{error}"
        );
        let error = file("commit = \"yes\"\n").unwrap_err().to_string();
        assert!(
            error.ends_with("`commit`: must be a boolean (true or false)"),
            "{error}"
        );
        let error = file("agent = 5\n").unwrap_err().to_string();
        assert_eq!(error, ".ralph/config.toml:1: `agent`: must be a string");
        let error = file("pause = [1\n").unwrap_err().to_string();
        assert!(
            error.starts_with(".ralph/config.toml:1: not valid TOML"),
            "{error}"
        );
    }

    #[test]
    fn environment_variables_are_read_and_named_in_errors() {
        let vars: BTreeMap<&str, &str> = [
            ("RALPH_MAX_ITERATIONS", "7"),
            ("RALPH_VERIFY", "cargo test\nmake lint"),
        ]
        .into();
        let layer = from_environment(&|name| vars.get(name).map(|v| (*v).to_owned())).unwrap();
        assert_eq!(layer.flags.max_iterations, Some(7));
        assert_eq!(
            layer.flags.verify.as_ref().unwrap(),
            &["cargo test", "make lint"]
        );
        let bad: BTreeMap<&str, &str> = [("RALPH_MAX_COST", "lots")].into();
        let error = from_environment(&|name| bad.get(name).map(|v| (*v).to_owned())).unwrap_err();
        assert!(error.to_string().starts_with("RALPH_MAX_COST: "), "{error}");
    }

    #[test]
    fn the_init_file_is_valid_and_sets_nothing() {
        let (layer, agents) = file(&init_text()).unwrap();
        assert!(layer.sources.is_empty() && agents.is_empty());
        for key in KEYS {
            assert!(
                init_text().contains(&format!("# {key} = ")),
                "{key} missing from --init"
            );
        }
    }
}
