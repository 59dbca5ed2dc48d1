//! Settings layers: the values one source gives (the command line, the environment, a config
//! file, the saved loop), before they are resolved into [`super::LoopOptions`].

use std::collections::BTreeMap;
use std::path::PathBuf;

/// A value as a source gave it, before it is parsed for its option.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Raw {
    /// Untyped text: a command-line value or an environment variable (read leniently).
    Text(String),
    /// A string in a config file or the saved state.
    Str(String),
    /// A whole number in a config file or the saved state (its digits).
    Int(String),
    /// A number with a fraction in a config file or the saved state.
    Float(String),
    Bool(bool),
    List(Vec<String>),
    /// Explicitly nothing (the saved state's `null`): an optional option that is off.
    Null,
}

impl Raw {
    /// As a config file writes it: strings quoted, lists in brackets, nothing as `none`.
    pub(crate) fn shown(&self) -> String {
        match self {
            Self::Str(text) => format!("{text:?}"),
            Self::Text(text) | Self::Int(text) | Self::Float(text) => text.clone(),
            Self::Bool(flag) => flag.to_string(),
            Self::List(items) => format!(
                "[{}]",
                items
                    .iter()
                    .map(|item| format!("{item:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Self::Null => "none".to_owned(),
        }
    }

    /// As a message shows it: like [`Raw::shown`], but a single string without quotes.
    pub(crate) fn shown_bare(&self) -> String {
        match self {
            Self::Str(text) => text.clone(),
            other => other.shown(),
        }
    }

    /// As the saved state stores it.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Self::Text(text) | Self::Str(text) => Value::String(text.clone()),
            Self::Int(digits) => digits
                .parse::<u64>()
                .map_or_else(|_| Value::String(digits.clone()), Value::from),
            Self::Float(number) => number
                .parse::<f64>()
                .map_or_else(|_| Value::String(number.clone()), Value::from),
            Self::Bool(flag) => Value::Bool(*flag),
            Self::List(items) => Value::from(items.clone()),
            Self::Null => Value::Null,
        }
    }

    /// From the saved state (or any JSON); `None` for what no option can hold.
    pub(crate) fn from_json(value: &serde_json::Value) -> Option<Self> {
        use serde_json::Value;
        Some(match value {
            Value::Null => Self::Null,
            Value::Bool(flag) => Self::Bool(*flag),
            Value::Number(number) if number.is_f64() => Self::Float(number.to_string()),
            Value::Number(number) => Self::Int(number.to_string()),
            Value::String(text) => Self::Str(text.clone()),
            Value::Array(items) => Self::List(
                items
                    .iter()
                    .map(|item| item.as_str().map(str::to_owned))
                    .collect::<Option<_>>()?,
            ),
            Value::Object(_) => return None,
        })
    }
}

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    CommandLine,
    Environment(String),
    File {
        path: PathBuf,
        line: usize,
    },
    /// The options of the loop `--resume` continues.
    SavedLoop,
    Default,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CommandLine => f.write_str("command line"),
            Self::Environment(variable) => write!(f, "environment ({variable})"),
            Self::File { path, line } => write!(f, "{}:{line}", path.display()),
            Self::SavedLoop => f.write_str("the saved loop"),
            Self::Default => f.write_str("default"),
        }
    }
}

/// The values one source gives, each with where exactly it came from.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Layer {
    pub(crate) source: Source,
    values: BTreeMap<&'static str, (Raw, Source)>,
}

impl Default for Layer {
    fn default() -> Self {
        Self::new(Source::Default)
    }
}

impl Layer {
    pub(crate) fn new(source: Source) -> Self {
        Self {
            source,
            values: BTreeMap::new(),
        }
    }

    pub(crate) fn set(&mut self, key: &'static str, raw: Raw, source: Source) {
        self.values.insert(key, (raw, source));
    }

    pub(crate) fn get(&self, key: &str) -> Option<&(Raw, Source)> {
        self.values.get(key)
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// The first value of `key` in `layers` (highest first), with its source.
pub(crate) fn find<'a>(layers: &[&'a Layer], key: &str) -> Option<(&'a Raw, &'a Source)> {
    layers
        .iter()
        .find_map(|layer| layer.get(key))
        .map(|(raw, source)| (raw, source))
}

/// One entry of the saved state's `options` object, with its declaration. Keys of the format
/// older ralph versions wrote (camelCase, durations in milliseconds) are read too.
pub(crate) fn saved_entry(
    key: &str,
    value: &serde_json::Value,
) -> Option<(&'static super::Def, Raw)> {
    if let Some(def) = super::def(key) {
        return Some((def, Raw::from_json(value)?));
    }
    let (key, raw) = match key {
        "plainText" => (
            "output_format",
            Raw::Str(if value.as_bool()? { "text" } else { "json" }.to_owned()),
        ),
        "plainPromises" => (
            "promise_format",
            Raw::Str(if value.as_bool()? { "plain" } else { "xml" }.to_owned()),
        ),
        camel => {
            let snake: String = camel
                .chars()
                .flat_map(|c| {
                    let lower = c.to_ascii_lowercase();
                    (c.is_ascii_uppercase())
                        .then_some('_')
                        .into_iter()
                        .chain(std::iter::once(lower))
                })
                .collect();
            match snake.strip_suffix("_ms") {
                Some(base) => (
                    super::def(base)?.key,
                    match value.as_u64() {
                        Some(ms) => Raw::Str(format!("{ms}ms")),
                        None => Raw::from_json(value)?,
                    },
                ),
                None => (super::def(&snake)?.key, Raw::from_json(value)?),
            }
        }
    };
    Some((super::def(key)?, raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_older_saved_format_is_read() {
        let (def, raw) = saved_entry("pauseMs", &serde_json::json!(1500)).unwrap();
        assert_eq!((def.key, raw), ("pause", Raw::Str("1500ms".to_owned())));
        let (def, raw) = saved_entry("plainText", &serde_json::json!(true)).unwrap();
        assert_eq!(
            (def.key, raw),
            ("output_format", Raw::Str("text".to_owned()))
        );
        let (def, raw) = saved_entry("maxRuntimeMs", &serde_json::Value::Null).unwrap();
        assert_eq!((def.key, raw), ("max_runtime", Raw::Null));
        let (def, _) = saved_entry("verboseTools", &serde_json::json!(true)).unwrap();
        assert_eq!(def.key, "verbose_tools");
        assert!(saved_entry("promptFile", &serde_json::json!("x")).is_none());
    }
}
