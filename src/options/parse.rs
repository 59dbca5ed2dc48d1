//! Value parsers shared by the command line, config files, environment variables and the saved
//! loop, with messages a person understands.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::agents::AgentKind;

/// Parses a non-negative whole number with a message a person understands.
pub(crate) fn whole_number(text: &str) -> Result<u32, String> {
    let trimmed = text.trim();
    trimmed.parse::<u32>().map_err(|_| {
        if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
            format!("'{text}' is too large; the largest allowed is {}", u32::MAX)
        } else {
            format!("'{text}' is not a whole number of 0 or more")
        }
    })
}

/// Parses an amount of US dollars.
pub(crate) fn usd(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .trim_start_matches('$')
        .parse()
        .map_err(|_| format!("'{text}' is not an amount in USD; use e.g. 5 or 2.50"))?;
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(format!("'{text}' must be an amount above 0"))
    }
}

/// Parses a count (of tokens for `max_tokens`, of bytes for `log_max_size`); `k` and `M` suffixes
/// are accepted (`500k`, `2M`).
pub(crate) fn token_count(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let (number, scale) = match trimmed.char_indices().last() {
        Some((at, 'k' | 'K')) => (&trimmed[..at], 1_000.0),
        Some((at, 'm' | 'M')) => (&trimmed[..at], 1_000_000.0),
        _ => (trimmed, 1.0),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a number; use e.g. 200000, 500k or 2M"))?;
    if !value.is_finite() || value <= 0.0 {
        return Err(format!("'{text}' must be a number above 0"));
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "checked positive and finite"
    )]
    Ok((value * scale).round() as u64)
}

pub(crate) use crate::model::parse_duration as duration;

/// One entry of `--rotation`: an agent name and perhaps a model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RotationEntry {
    pub(crate) agent: String,
    pub(crate) model: Option<String>,
}

/// A whole `--rotation` value (one clap value holding several entries).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rotation(pub(crate) Vec<RotationEntry>);

/// Parses `AGENT[:MODEL],AGENT[:MODEL],…`.
pub(crate) fn rotation(text: &str) -> Result<Vec<RotationEntry>, String> {
    let entries: Vec<RotationEntry> = text
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| match entry.split_once(':') {
            Some((agent, model)) => RotationEntry {
                agent: agent.trim().to_owned(),
                model: Some(model.trim().to_owned()).filter(|m| !m.is_empty()),
            },
            None => RotationEntry {
                agent: entry.to_owned(),
                model: None,
            },
        })
        .collect();
    if entries.is_empty() || entries.iter().any(|entry| entry.agent.is_empty()) {
        return Err(format!(
            "'{text}' is not a list of agents; use e.g. claude-code:sonnet,codex"
        ));
    }
    Ok(entries)
}

/// The name of an agent: built in or custom (checked against the config's agents later).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AgentName(pub(crate) String);

impl std::fmt::Display for RotationEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.model {
            Some(model) => write!(f, "{}:{model}", self.agent),
            None => f.write_str(&self.agent),
        }
    }
}

/// `90s`, `1500ms`, `2h` — as a config file would write it.
pub(crate) fn short_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms.is_multiple_of(3_600_000) && ms > 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Accepts any agent name (custom agents come from config files) but offers the built-in ones
/// to help and shell completion.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AgentNameParser;

impl clap::builder::TypedValueParser for AgentNameParser {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let text = clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)?;
        if text.trim().is_empty() {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                "--agent needs a name: opencode, claude-code, codex, …, an ACP preset such as gemini-acp, or a custom agent\n",
            ));
        }
        Ok(text)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let builtin = AgentKind::ALL
            .into_iter()
            .map(|kind| clap::builder::PossibleValue::new(kind.id()).help(kind.display_name()));
        let presets = crate::agents::presets::PRESETS.iter().map(|preset| {
            let command = preset.command.join(" ");
            clap::builder::PossibleValue::new(preset.name).help(format!("`{command}`, over ACP"))
        });
        let any = clap::builder::PossibleValue::new(crate::agents::ACP_AGENT)
            .help("any ACP agent, started by --acp-command");
        Some(Box::new(builtin.chain(presets).chain([any])))
    }
}

/// Where `--serve` alone listens.
pub(crate) const DEFAULT_ADDR: &str = "127.0.0.1:8765";

/// `--parallel`: up to `max` tasks at once; with `auto`, only as many as memory and load allow
/// (`--parallel auto`, or `auto:MAX`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Parallel {
    pub(crate) max: u32,
    pub(crate) auto: bool,
}

impl Parallel {
    /// The most tasks `--parallel auto` runs at once without its own `:MAX`.
    pub(crate) const AUTO_MAX: u32 = 16;

    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let bad = || {
            format!(
                "'{text}' is not a number of tasks; give N (0: one at a time), auto or auto:MAX"
            )
        };
        match text.strip_prefix("auto") {
            Some("") => Ok(Self {
                max: Self::AUTO_MAX,
                auto: true,
            }),
            Some(rest) => match rest.strip_prefix(':').map(whole_number) {
                Some(Ok(max)) if max > 0 => Ok(Self { max, auto: true }),
                _ => Err(bad()),
            },
            None => whole_number(text)
                .map(|max| Self { max, auto: false })
                .map_err(|_| bad()),
        }
    }
}

/// A `--serve` address, as given (`HOST:PORT`, `:PORT` for loopback, or a bare port).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Addr(pub(crate) String);

impl Addr {
    /// Checks `text` names an address to listen on.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let full = if let Some(port) = text.strip_prefix(':') {
            format!("127.0.0.1:{port}")
        } else if text.parse::<u16>().is_ok() {
            format!("127.0.0.1:{text}")
        } else {
            text.to_owned()
        };
        match full.to_socket_addrs().map(|mut found| found.next()) {
            Ok(Some(_)) => Ok(Self(full)),
            _ => Err(format!(
                "'{text}' is not an address to listen on; give HOST:PORT (e.g. {DEFAULT_ADDR}) or a port"
            )),
        }
    }

    pub(crate) fn resolved(&self) -> Option<SocketAddr> {
        self.0.to_socket_addrs().ok()?.next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_is_a_count_auto_or_auto_with_a_most() {
        assert_eq!(
            Parallel::parse("3"),
            Ok(Parallel {
                max: 3,
                auto: false
            })
        );
        assert_eq!(Parallel::parse("0"), Ok(Parallel::default()));
        let auto = Parallel::parse("auto").unwrap();
        assert_eq!((auto.max, auto.auto), (16, true));
        let four = Parallel::parse("auto:4").unwrap();
        assert_eq!((four.max, four.auto), (4, true));
        for bad in ["auto:0", "auto:", "autox", "-1", "many"] {
            let err = Parallel::parse(bad).unwrap_err();
            assert!(
                err.contains("give N (0: one at a time), auto or auto:MAX"),
                "{err}"
            );
        }
    }

    #[test]
    fn addresses_are_host_and_port_or_a_port_on_loopback() {
        assert_eq!(Addr::parse("127.0.0.1:8765").unwrap().0, "127.0.0.1:8765");
        assert_eq!(Addr::parse(":9000").unwrap().0, "127.0.0.1:9000");
        assert_eq!(Addr::parse("9001").unwrap().0, "127.0.0.1:9001");
        assert_eq!(Addr::parse("0.0.0.0:80").unwrap().0, "0.0.0.0:80");
        let refused = Addr::parse("not an address").unwrap_err();
        assert!(refused.contains("give HOST:PORT"), "{refused}");
        assert!(Addr::parse("127.0.0.1:99999").is_err());
    }

    #[test]
    fn durations_parse() {
        assert_eq!(duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        assert!(duration("soon").is_err());
        assert!(duration("-1s").is_err());
    }

    #[test]
    fn rotations_parse() {
        let entries = rotation("claude-code:sonnet, codex").unwrap();
        assert_eq!(
            entries[0],
            RotationEntry {
                agent: "claude-code".into(),
                model: Some("sonnet".into())
            }
        );
        assert_eq!(
            entries[1],
            RotationEntry {
                agent: "codex".into(),
                model: None
            }
        );
        assert!(rotation(",").is_err());
        assert!(rotation(":m").is_err());
    }

    #[test]
    fn money_and_tokens_parse() {
        assert_eq!(usd("$2.50"), Ok(2.5));
        assert!(usd("0").is_err() && usd("lots").is_err());
        assert_eq!(token_count("500k"), Ok(500_000));
        assert_eq!(token_count("2M"), Ok(2_000_000));
        assert_eq!(token_count("1234"), Ok(1234));
        assert!(token_count("-5").is_err());
    }

    #[test]
    fn whole_numbers_reject_negatives() {
        assert_eq!(whole_number("5"), Ok(5));
        assert!(whole_number("-1").unwrap_err().contains("0 or more"));
        assert!(whole_number("x").is_err());
        assert!(
            whole_number("4294967296")
                .unwrap_err()
                .contains("largest allowed is 4294967295")
        );
    }
}
