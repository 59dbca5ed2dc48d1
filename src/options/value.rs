//! How each type of option value is read, checked and shown.

use std::time::Duration;

use clap::builder::TypedValueParser as _;
use clap::{Arg, ArgAction};

use super::Raw;
use super::parse::{self, AgentName, Rotation};
use crate::agents::OutputFormat;
use crate::output::ColorChoice;
use crate::promise::PromiseFormat;

/// A type an option can have.
pub(crate) trait OptionValue: Sized + 'static {
    /// What a config file must give, for its error messages.
    const WANTS: &'static str;
    /// A switch (`--tasks`) rather than a flag that takes a value.
    const BOOLEAN: bool = false;
    /// A list that repeated flags add to.
    const LIST: bool = false;

    /// Parses a value from any source; a config-file value of the wrong type is refused with
    /// [`Self::WANTS`].
    fn from_raw(raw: &Raw) -> Result<Self, String>;

    /// The value as a config file writes it.
    fn to_raw(&self) -> Raw;

    /// The clap argument for the option: how many values, which parser.
    fn arg(arg: Arg) -> Arg {
        arg.action(ArgAction::Set).value_parser(validator::<Self>)
    }
}

/// Checks a command-line value when clap reads it, so a bad one is a usage error at once.
fn validator<T: OptionValue>(text: &str) -> Result<String, String> {
    T::from_raw(&Raw::Text(text.to_owned())).map(|_| text.to_owned())
}

fn wrong<T: OptionValue, V>() -> Result<V, String> {
    Err(format!("must be {}", T::WANTS))
}

impl OptionValue for bool {
    const WANTS: &'static str = "a boolean (true or false)";
    const BOOLEAN: bool = true;

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            Raw::Bool(flag) => Ok(*flag),
            Raw::Text(text) => match text.trim().to_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" => Ok(false),
                _ => Err(format!("expects true or false, not '{text}'")),
            },
            _ => wrong::<Self, _>(),
        }
    }

    fn to_raw(&self) -> Raw {
        Raw::Bool(*self)
    }

    fn arg(arg: Arg) -> Arg {
        arg.action(ArgAction::SetTrue)
    }
}

impl OptionValue for u32 {
    const WANTS: &'static str = "a whole number";

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            Raw::Text(text) | Raw::Int(text) => parse::whole_number(text),
            _ => wrong::<Self, _>(),
        }
    }

    fn to_raw(&self) -> Raw {
        Raw::Int(self.to_string())
    }

    fn arg(arg: Arg) -> Arg {
        arg.action(ArgAction::Set)
            .allow_negative_numbers(true)
            .value_parser(validator::<Self>)
    }
}

/// `max_stalled`: a whole number where 0 means off.
impl OptionValue for Option<u32> {
    const WANTS: &'static str = "a whole number";

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            Raw::Null => Ok(None),
            other => u32::from_raw(other).map(|n| Some(n).filter(|n| *n > 0)),
        }
    }

    fn to_raw(&self) -> Raw {
        self.map_or(Raw::Null, |n| n.to_raw())
    }

    fn arg(arg: Arg) -> Arg {
        u32::arg(arg).value_parser(validator::<Self>)
    }
}

impl OptionValue for Duration {
    const WANTS: &'static str = "a string like \"30s\" or a number of seconds";

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            Raw::Text(text) | Raw::Str(text) | Raw::Int(text) => parse::duration(text),
            _ => wrong::<Self, _>(),
        }
    }

    fn to_raw(&self) -> Raw {
        Raw::Str(parse::short_duration(*self))
    }
}

impl OptionValue for Option<Duration> {
    const WANTS: &'static str = Duration::WANTS;

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            Raw::Null => Ok(None),
            other => Duration::from_raw(other).map(Some),
        }
    }

    fn to_raw(&self) -> Raw {
        self.map_or(Raw::Null, |d| d.to_raw())
    }
}

/// `max_cost`: an amount in USD.
impl OptionValue for Option<f64> {
    const WANTS: &'static str = "a number";

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            Raw::Null => Ok(None),
            Raw::Text(text) | Raw::Int(text) | Raw::Float(text) => parse::usd(text).map(Some),
            _ => wrong::<Self, _>(),
        }
    }

    fn to_raw(&self) -> Raw {
        self.map_or(Raw::Null, |usd| Raw::Float(usd.to_string()))
    }
}

/// `max_tokens` (tokens) and `log_max_size` (bytes): a count, `k` and `M` suffixes accepted.
impl OptionValue for Option<u64> {
    const WANTS: &'static str = "a number or a string like \"500k\"";

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            Raw::Null => Ok(None),
            Raw::Text(text) | Raw::Str(text) | Raw::Int(text) | Raw::Float(text) => {
                parse::token_count(text).map(Some)
            }
            _ => wrong::<Self, _>(),
        }
    }

    fn to_raw(&self) -> Raw {
        self.map_or(Raw::Null, |n| Raw::Int(n.to_string()))
    }
}

impl OptionValue for String {
    const WANTS: &'static str = "a string";

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            Raw::Text(text) | Raw::Str(text) => Ok(text.clone()),
            _ => wrong::<Self, _>(),
        }
    }

    fn to_raw(&self) -> Raw {
        Raw::Str(self.clone())
    }

    fn arg(arg: Arg) -> Arg {
        arg.action(ArgAction::Set).allow_hyphen_values(true)
    }
}

/// An optional text: empty means not set (the agent's default model).
impl OptionValue for Option<String> {
    const WANTS: &'static str = "a string";

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            Raw::Null => Ok(None),
            other => {
                String::from_raw(other).map(|text| Some(text).filter(|t| !t.trim().is_empty()))
            }
        }
    }

    fn to_raw(&self) -> Raw {
        self.as_ref()
            .map_or(Raw::Null, |text| Raw::Str(text.clone()))
    }

    fn arg(arg: Arg) -> Arg {
        String::arg(arg)
    }
}

/// A list of strings; in an environment variable, one item per line.
impl OptionValue for Vec<String> {
    const WANTS: &'static str = "a list of strings";
    const LIST: bool = true;

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            Raw::List(items) => Ok(items.clone()),
            Raw::Text(text) => Ok(text
                .lines()
                .filter(|line| !line.trim().is_empty())
                .map(str::to_owned)
                .collect()),
            _ => wrong::<Self, _>(),
        }
    }

    fn to_raw(&self) -> Raw {
        Raw::List(self.clone())
    }

    fn arg(arg: Arg) -> Arg {
        arg.action(ArgAction::Append).allow_hyphen_values(true)
    }
}

impl OptionValue for AgentName {
    const WANTS: &'static str = "a string";

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        let name = String::from_raw(raw)?.trim().to_owned();
        if name.is_empty() {
            return Err(
                "--agent needs a name: opencode, claude-code, codex, or a custom agent".to_owned(),
            );
        }
        Ok(Self(name))
    }

    fn to_raw(&self) -> Raw {
        Raw::Str(self.0.clone())
    }

    fn arg(arg: Arg) -> Arg {
        arg.action(ArgAction::Set)
            .value_parser(parse::AgentNameParser)
    }
}

impl OptionValue for Rotation {
    const WANTS: &'static str = "a list of strings or a string";

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            // An empty list is no rotation (as `--config` shows the default).
            Raw::List(items) if items.is_empty() => Ok(Rotation(Vec::new())),
            Raw::List(items) => parse::rotation(&items.join(",")).map(Rotation),
            Raw::Text(text) | Raw::Str(text) => parse::rotation(text).map(Rotation),
            _ => wrong::<Self, _>(),
        }
    }

    fn to_raw(&self) -> Raw {
        Raw::List(self.0.iter().map(ToString::to_string).collect())
    }
}

/// A choice among named values (`xml`/`plain`, `json`/`text`, `auto`/`always`/`never`).
macro_rules! choice {
    ($ty:ty, optional $missing:literal) => {
        choice!(@impl $ty, |arg: Arg| arg.num_args(0..=1).default_missing_value($missing));
    };
    ($ty:ty) => {
        choice!(@impl $ty, |arg: Arg| arg);
    };
    (@impl $ty:ty, $extra:expr) => {
        impl OptionValue for $ty {
            const WANTS: &'static str = "a string";

            fn from_raw(raw: &Raw) -> Result<Self, String> {
                let text = String::from_raw(raw)?;
                <$ty as clap::ValueEnum>::from_str(text.trim(), true).map_err(|_| {
                    let names: Vec<String> = <$ty as clap::ValueEnum>::value_variants()
                        .iter()
                        .filter_map(|v| {
                            clap::ValueEnum::to_possible_value(v).map(|p| p.get_name().to_owned())
                        })
                        .collect();
                    format!("'{text}' is not one of {}", names.join(", "))
                })
            }

            fn to_raw(&self) -> Raw {
                Raw::Str(
                    clap::ValueEnum::to_possible_value(self)
                        .map(|p| p.get_name().to_owned())
                        .unwrap_or_default(),
                )
            }

            fn arg(arg: Arg) -> Arg {
                let extra = $extra;
                extra(arg.action(ArgAction::Set).value_parser(
                    clap::builder::EnumValueParser::<$ty>::new().map(|v| {
                        clap::ValueEnum::to_possible_value(&v)
                            .map(|p| p.get_name().to_owned())
                            .unwrap_or_default()
                    }),
                ))
            }
        }
    };
}

choice!(PromiseFormat);
choice!(OutputFormat);
choice!(ColorChoice);
choice!(crate::sandbox::Net);
choice!(crate::sandbox::Backend, optional "auto");

/// `--sandbox-memory`: a size (`512M`, `2G`).
impl OptionValue for Option<crate::sandbox::Bytes> {
    const WANTS: &'static str = "a string like \"512M\" or a number of bytes";

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            Raw::Null => Ok(None),
            Raw::Text(text) | Raw::Str(text) | Raw::Int(text) => {
                crate::sandbox::Bytes::parse(text).map(Some)
            }
            _ => wrong::<Self, _>(),
        }
    }

    fn to_raw(&self) -> Raw {
        self.map_or(Raw::Null, |bytes| Raw::Str(bytes.shown()))
    }
}

/// `--parallel`: N, `auto` or `auto:MAX`.
impl OptionValue for crate::options::parse::Parallel {
    const WANTS: &'static str = "a whole number, \"auto\" or \"auto:MAX\"";

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            Raw::Text(text) | Raw::Int(text) | Raw::Str(text) => Self::parse(text),
            _ => wrong::<Self, _>(),
        }
    }

    fn to_raw(&self) -> Raw {
        // `auto` with its most, so that a saved run's state says how many it runs at most.
        if self.auto {
            Raw::Str(format!("auto:{}", self.max))
        } else {
            Raw::Int(self.max.to_string())
        }
    }
}

/// `--serve [ADDR]`: an address to listen on (`--serve` alone: 127.0.0.1:8765).
impl OptionValue for Option<crate::options::parse::Addr> {
    const WANTS: &'static str = "an address like \"127.0.0.1:8765\"";

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            Raw::Null => Ok(None),
            Raw::Text(text) | Raw::Str(text) if text.trim().is_empty() => Ok(None),
            Raw::Text(text) | Raw::Str(text) | Raw::Int(text) => {
                crate::options::parse::Addr::parse(text).map(Some)
            }
            _ => wrong::<Self, _>(),
        }
    }

    fn to_raw(&self) -> Raw {
        self.as_ref()
            .map_or(Raw::Null, |addr| Raw::Str(addr.0.clone()))
    }

    fn arg(arg: Arg) -> Arg {
        arg.action(ArgAction::Set)
            .value_parser(validator::<Self>)
            .num_args(0..=1)
            .default_missing_value(crate::options::parse::DEFAULT_ADDR)
    }
}

/// `--sandbox-cpus`: a number of CPUs.
impl OptionValue for Option<crate::sandbox::Cpus> {
    const WANTS: &'static str = "a number";

    fn from_raw(raw: &Raw) -> Result<Self, String> {
        match raw {
            Raw::Null => Ok(None),
            Raw::Text(text) | Raw::Int(text) | Raw::Float(text) => {
                crate::sandbox::Cpus::parse(text).map(Some)
            }
            _ => wrong::<Self, _>(),
        }
    }

    fn to_raw(&self) -> Raw {
        self.map_or(Raw::Null, |cpus| Raw::Float(cpus.0.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_file_types_are_checked_by_the_type() {
        assert_eq!(
            u32::from_raw(&Raw::Str("ten".into())).unwrap_err(),
            "must be a whole number"
        );
        assert!(
            u32::from_raw(&Raw::Int("-3".into()))
                .unwrap_err()
                .contains("'-3' is not a whole number")
        );
        assert_eq!(
            bool::from_raw(&Raw::Str("yes".into())).unwrap_err(),
            "must be a boolean (true or false)"
        );
        assert!(bool::from_raw(&Raw::Text("yes".into())).unwrap());
        assert_eq!(
            String::from_raw(&Raw::Int("5".into())).unwrap_err(),
            "must be a string"
        );
        assert_eq!(
            Option::<u64>::from_raw(&Raw::Str("500k".into())).unwrap(),
            Some(500_000)
        );
        assert_eq!(
            Option::<u32>::from_raw(&Raw::Int("0".into())).unwrap(),
            None
        );
        assert_eq!(
            Duration::from_raw(&Raw::Int("90".into())).unwrap(),
            Duration::from_secs(90)
        );
    }

    #[test]
    fn values_show_as_a_config_file_writes_them() {
        assert_eq!(Duration::from_secs(1).to_raw().shown(), "\"1s\"");
        assert_eq!(Option::<Duration>::None.to_raw().shown(), "none");
        assert_eq!(PromiseFormat::Plain.to_raw().shown(), "\"plain\"");
        assert_eq!(vec!["a".to_owned()].to_raw().shown(), "[\"a\"]");
        assert_eq!(Some(2.5).to_raw().shown(), "2.5");
    }
}
