//! Settings from config files and `RALPH_*` environment variables: the layers under the command
//! line.
//!
//! Precedence, highest first: command line, environment, project file (`.ralph/config.toml`), user
//! file (`$XDG_CONFIG_HOME/ralph/config.toml`, else `~/.config/ralph/config.toml`), defaults
//! (`--resume` puts the saved loop right under the command line). Every option of `options.rs`
//! has a key named like its flag and a variable; a value is parsed by its option's type wherever
//! it is written. Unknown keys and bad values name the file, the line and the key. Custom agents
//! are defined in `[agents.NAME]` tables (see `agents/custom.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};

use crate::agents::custom::CustomAgentDef;
use crate::error::{Error, usage};
use crate::options::{self, DEFS, Layer, Raw, Source};

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
    pub(crate) fn load(cwd: &Path, var: &dyn Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let mut settings = Self::default();
        settings.layers.push(from_environment(var)?);
        let user = options::user_file(var);
        for path in [Some(cwd.join(options::PROJECT_FILE)), user]
            .into_iter()
            .flatten()
        {
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

    /// The layers to resolve options from: `above` (the command line, the saved loop), then these.
    pub(crate) fn stack<'a>(&'a self, above: &[&'a Layer]) -> Vec<&'a Layer> {
        above.iter().copied().chain(self.layers.iter()).collect()
    }
}

/// Where `key`'s value comes from in `layers`.
pub(crate) fn source_of(layers: &[&Layer], key: &str) -> Source {
    options::layer::find(layers, key).map_or(Source::Default, |(_, source)| source.clone())
}

fn from_environment(var: &dyn Fn(&str) -> Option<String>) -> Result<Layer, Error> {
    let mut layer = Layer::new(Source::Environment(String::new()));
    for def in DEFS {
        let name = def.variable();
        let Some(value) = var(&name).filter(|value| !value.trim().is_empty()) else {
            continue;
        };
        let raw = Raw::Text(value);
        (def.check)(&raw).map_err(|err| usage(format!("{name}: {err}")))?;
        layer.set(def.key, raw, Source::Environment(name));
    }
    Ok(layer)
}

fn from_file(path: &Path, text: &str) -> Result<(Layer, BTreeMap<String, CustomAgentDef>), Error> {
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let table = DeTable::parse(text).map_err(|err| {
        let line = err.span().map_or(1, |span| line_of(span.start));
        usage(format!(
            "{}:{line}: not valid TOML: {}",
            path.display(),
            err.message()
        ))
    })?;
    let mut layer = Layer::new(Source::File {
        path: path.to_owned(),
        line: 0,
    });
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
        let Some(def) = options::def(name) else {
            let hint = options::closest(name)
                .map_or_else(String::new, |k| format!(" (did you mean `{k}`?)"));
            return Err(at(format!("unknown key `{name}`{hint}")));
        };
        let raw = raw_value(value.get_ref())
            .ok_or_else(|| at(format!("`{}`: must be {}", def.key, def.wants)))?;
        (def.check)(&raw).map_err(|err| at(format!("`{}`: {err}", def.key)))?;
        let source = Source::File {
            path: path.to_owned(),
            line,
        };
        layer.set(def.key, raw, source);
    }
    Ok((layer, agents))
}

/// A TOML value as a raw option value; `None` for what no option takes (tables, dates, lists of
/// anything but strings).
fn raw_value(value: &DeValue<'_>) -> Option<Raw> {
    Some(match value {
        DeValue::String(text) => Raw::Str(text.to_string()),
        DeValue::Integer(number) => Raw::Int(number.as_str().replace('_', "")),
        DeValue::Float(number) => Raw::Float(number.as_str().replace('_', "")),
        DeValue::Boolean(flag) => Raw::Bool(*flag),
        DeValue::Array(items) => Raw::List(
            items
                .iter()
                .map(|item| match item.get_ref() {
                    DeValue::String(text) => Some(text.to_string()),
                    _ => None,
                })
                .collect::<Option<_>>()?,
        ),
        DeValue::Datetime(_) | DeValue::Table(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> Result<(Layer, BTreeMap<String, CustomAgentDef>), Error> {
        from_file(Path::new(".ralph/config.toml"), text)
    }

    fn resolved(layer: &Layer) -> options::LoopOptions {
        options::LoopOptions::resolve(&[layer]).unwrap()
    }

    #[test]
    fn values_parse_like_the_command_line() {
        let (layer, _) = file("agent = \"codex\"\nmax_iterations = 20\npause = \"2s\"\ncommit = false\nverify = [\"cargo test\", \"make lint\"]\nmax_cost = 2.5\nmax_tokens = \"500k\"\n").unwrap();
        let options = resolved(&layer);
        assert_eq!(options.agent.0, "codex");
        assert_eq!(options.max_iterations, 20);
        assert_eq!(options.pause, std::time::Duration::from_secs(2));
        assert!(!options.commit);
        assert_eq!(options.verify.len(), 2);
        assert_eq!(options.max_tokens, Some(500_000));
        assert_eq!(
            source_of(&[&layer], "max_iterations"),
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
        let options = resolved(&layer);
        assert_eq!(options.max_iterations, 7);
        assert_eq!(options.verify, ["cargo test", "make lint"]);
        let bad: BTreeMap<&str, &str> = [("RALPH_MAX_COST", "lots")].into();
        let error = from_environment(&|name| bad.get(name).map(|v| (*v).to_owned())).unwrap_err();
        assert!(error.to_string().starts_with("RALPH_MAX_COST: "), "{error}");
    }

    #[test]
    fn the_init_file_is_valid_and_sets_nothing() {
        let (layer, agents) = file(&options::init_text()).unwrap();
        assert!(layer.is_empty() && agents.is_empty());
    }
}
