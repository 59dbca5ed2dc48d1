//! The command line, described for clap. The doc comments here are the `--help` text.
//!
//! Nothing here decides anything: `config` turns a parsed [`Cli`] into a validated `Config`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};

use crate::agents::{AgentKind, OutputFormat};
use crate::output::ColorChoice;
use crate::promise::PromiseFormat;

const USAGE: &str = "ralph \"<prompt>\" [options]
       ralph --prompt-file <path> [options]
       cat prompt.md | ralph [options]
       ralph <command>";

const AFTER_HELP: &str = "\
Examples:
  ralph \"Build a REST API for todos\" --max-iterations 20
  ralph --prompt-file PROMPT.md --agent claude-code --model sonnet
  cat PROMPT.md | ralph --agent codex --max-iterations 10
  ralph \"Finish the roadmap\" --tasks --max-iterations 30
  ralph --add-context \"The tests live in tests/api\"   (from another terminal)
  ralph \"Fix the build\" -- --some-agent-flag          (arguments after -- go to the agent)

How it works:
  1. ralph sends your prompt to the agent, wrapped with loop instructions.
  2. The agent works on it: reads and edits files, runs commands.
  3. ralph checks whether the last line of the agent's answer is <promise>COMPLETE</promise>.
  4. If not, ralph commits the work and runs the agent again with the same prompt.
  5. The agent sees its previous work in the files and carries on.
  6. This repeats until the promise is kept or a limit is reached.

State, history, context and tasks live in .ralph/ in the current directory.
Press Ctrl+C to stop; the loop can be resumed with `ralph --resume`.
Learn more: https://ghuntley.com/ralph/";

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
                "--agent needs a name: opencode, claude-code, codex, or a custom agent\n",
            ));
        }
        Ok(text)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            [AgentKind::OpenCode, AgentKind::ClaudeCode, AgentKind::Codex]
                .into_iter()
                .map(|kind| clap::builder::PossibleValue::new(kind.id()).help(kind.display_name())),
        ))
    }
}

/// Ralph Wiggum Loop - run an AI coding agent in a loop until it keeps its promise.
#[derive(Debug, Parser)]
#[command(
    name = "ralph",
    version,
    override_usage = USAGE,
    after_help = AFTER_HELP,
    disable_version_flag = true,
    disable_help_flag = true,
    args_override_self = true,
    max_term_width = 100
)]
pub(crate) struct Cli {
    /// The task for the agent (words are joined with spaces; a single existing file path is read).
    #[arg(value_name = "PROMPT")]
    pub(crate) prompt: Vec<String>,

    /// Arguments passed to the agent verbatim (everything after `--`).
    #[arg(last = true, value_name = "AGENT_ARGS")]
    pub(crate) agent_args: Vec<String>,

    // ── Commands ──────────────────────────────────────────────────────────────────────────────
    /// Show the loop's status, pending context, tasks and history, then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) status: bool,

    /// Add a hint for the next iteration (works while a loop runs), then exit.
    #[arg(
        long,
        value_name = "TEXT",
        allow_hyphen_values = true,
        help_heading = "Commands"
    )]
    pub(crate) add_context: Option<String>,

    /// Remove the pending context, then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) clear_context: bool,

    /// List the tasks in .ralph/ralph-tasks.md, then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) list_tasks: bool,

    /// Append a task to .ralph/ralph-tasks.md, then exit.
    #[arg(
        long,
        value_name = "DESCRIPTION",
        allow_hyphen_values = true,
        help_heading = "Commands"
    )]
    pub(crate) add_task: Option<String>,

    /// With --add-task: the new task's id, for other tasks' `blocked_by`.
    #[arg(
        long,
        value_name = "ID",
        requires = "add_task",
        help_heading = "Commands"
    )]
    pub(crate) id: Option<String>,

    /// With --add-task: ids of the tasks that must be done first (comma-separated).
    #[arg(
        long,
        value_name = "IDS",
        requires = "add_task",
        help_heading = "Commands"
    )]
    pub(crate) blocked_by: Option<String>,

    /// Remove task N (and its subtasks) from .ralph/ralph-tasks.md, then exit.
    #[arg(long, value_name = "N", help_heading = "Commands")]
    pub(crate) remove_task: Option<String>,

    /// Continue the interrupted or crashed loop recorded in .ralph/.
    #[arg(long, help_heading = "Commands")]
    pub(crate) resume: bool,

    /// Remove the loop's state, history and context (never the task file), then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) reset: bool,

    /// Write a commented .ralph/config.toml with the defaults, then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) init: bool,

    /// Show the settings in effect and where each comes from, then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) config: bool,

    /// Check git, the agents and .ralph/, and say what to fix, then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) doctor: bool,

    /// Show the command, environment and prompt of iteration 1 without running anything.
    #[arg(long, help_heading = "Commands")]
    pub(crate) dry_run: bool,

    /// Print a shell completion script (bash, zsh, fish, powershell, elvish), then exit.
    #[arg(long, value_name = "SHELL", help_heading = "Commands")]
    pub(crate) completions: Option<clap_complete::Shell>,

    /// Print the man page (roff), then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) man: bool,

    /// Machine-readable output: JSON for --status and --list-tasks, JSON lines for a run.
    #[arg(long, help_heading = "Agent and output")]
    pub(crate) json: bool,

    /// When to colour ralph's own messages [default: auto].
    #[arg(
        long,
        value_enum,
        value_name = "WHEN",
        help_heading = "Agent and output"
    )]
    pub(crate) color: Option<ColorChoice>,

    /// Print help.
    #[arg(short = 'h', long, action = ArgAction::Help, help_heading = "Commands")]
    pub(crate) help: Option<bool>,

    /// Print the version.
    #[arg(short = 'v', long, action = ArgAction::Version, help_heading = "Commands")]
    pub(crate) version: Option<bool>,

    // ── Loop options ──────────────────────────────────────────────────────────────────────────
    /// Read the prompt from a file.
    #[arg(
        short = 'f',
        long,
        visible_alias = "file",
        value_name = "PATH",
        help_heading = "Loop"
    )]
    pub(crate) prompt_file: Option<PathBuf>,

    /// The agent CLI to run: opencode, claude-code, codex, or a custom agent from the config.
    #[arg(long, value_name = "AGENT", value_parser = AgentNameParser, help_heading = "Loop")]
    pub(crate) agent: Option<String>,

    /// Cycle agents and models, one per iteration: AGENT[:MODEL],AGENT[:MODEL],…
    #[arg(long, value_name = "LIST", value_parser = parse::rotation_list, help_heading = "Loop")]
    pub(crate) rotation: Option<parse::Rotation>,

    /// The model to ask the agent for (passed through as given).
    #[arg(long, value_name = "MODEL", help_heading = "Loop")]
    pub(crate) model: Option<String>,

    /// Completion is accepted only from this iteration on [default: 1].
    #[arg(long, value_name = "N", value_parser = parse::whole_number, allow_negative_numbers = true, help_heading = "Loop")]
    pub(crate) min_iterations: Option<u32>,

    /// Stop after N iterations; 0 means no limit [default: 0].
    #[arg(long, value_name = "N", value_parser = parse::whole_number, allow_negative_numbers = true, help_heading = "Loop")]
    pub(crate) max_iterations: Option<u32>,

    /// The text the agent prints as <promise>TEXT</promise> when done [default: COMPLETE].
    #[arg(
        long,
        value_name = "TEXT",
        allow_hyphen_values = true,
        help_heading = "Loop"
    )]
    pub(crate) completion_promise: Option<String>,

    /// How promises are written: `<promise>TEXT</promise>` (xml) or the bare TEXT as the last line
    /// (plain) [default: xml].
    #[arg(long, value_enum, value_name = "FORMAT", help_heading = "Loop")]
    pub(crate) promise_format: Option<PromiseFormat>,

    /// A command that must pass before completion is accepted (repeatable; run by `sh -c` from
    /// the repository's top directory).
    #[arg(
        long,
        value_name = "CMD",
        allow_hyphen_values = true,
        help_heading = "Loop"
    )]
    pub(crate) verify: Vec<String>,

    /// Time limit for each --verify command and each task's verify command [default: 10m].
    #[arg(long, value_name = "DURATION", value_parser = parse::duration, help_heading = "Loop")]
    pub(crate) verify_timeout: Option<Duration>,

    /// Count a promise anywhere in the output, not only at the end of the last line.
    #[arg(long, help_heading = "Loop")]
    pub(crate) promise_anywhere: bool,

    /// Pause between iterations, e.g. 0, 500ms, 2s [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = parse::duration, help_heading = "Loop")]
    pub(crate) pause: Option<Duration>,

    // ── Limits ────────────────────────────────────────────────────────────────────────────────
    /// Stop the agent if one iteration runs longer than this (e.g. 30m); the loop goes on.
    #[arg(long, value_name = "DURATION", value_parser = parse::duration, help_heading = "Limits")]
    pub(crate) iteration_timeout: Option<Duration>,

    /// Stop the agent if it prints nothing for this long (e.g. 10m); the loop goes on.
    #[arg(long, value_name = "DURATION", value_parser = parse::duration, help_heading = "Limits")]
    pub(crate) idle_timeout: Option<Duration>,

    /// Stop the loop after this much time in all (e.g. 8h); checked between iterations.
    #[arg(long, value_name = "DURATION", value_parser = parse::duration, help_heading = "Limits")]
    pub(crate) max_runtime: Option<Duration>,

    /// Stop the loop once the agent has reported this much cost in USD (e.g. 5.00).
    #[arg(long, value_name = "USD", value_parser = parse::usd, help_heading = "Limits")]
    pub(crate) max_cost: Option<f64>,

    /// Stop the loop once the agent has used this many tokens (input, output and cache).
    #[arg(long, value_name = "N", value_parser = parse::token_count, help_heading = "Limits")]
    pub(crate) max_tokens: Option<u64>,

    /// Stop after N iterations in a row that changed no files.
    #[arg(long, value_name = "N", value_parser = parse::whole_number, allow_negative_numbers = true, help_heading = "Limits")]
    pub(crate) max_stalled: Option<u32>,

    /// The text the agent prints as <promise>TEXT</promise> to stop the loop because it cannot go on.
    #[arg(
        long,
        value_name = "TEXT",
        allow_hyphen_values = true,
        help_heading = "Limits"
    )]
    pub(crate) abort_promise: Option<String>,

    /// Retries in a row of an iteration that failed on the provider's side (rate limit, overload,
    /// server or network error) [default: 3].
    #[arg(long, value_name = "N", value_parser = parse::whole_number, allow_negative_numbers = true, help_heading = "Limits")]
    pub(crate) max_retries: Option<u32>,

    /// Longest wait before such a retry when the provider gives no reset time [default: 10m].
    #[arg(long, value_name = "DURATION", value_parser = parse::duration, help_heading = "Limits")]
    pub(crate) retry_max_wait: Option<Duration>,

    // ── Tasks ─────────────────────────────────────────────────────────────────────────────────
    /// Work through .ralph/ralph-tasks.md one task at a time.
    #[arg(short = 't', long, help_heading = "Tasks")]
    pub(crate) tasks: bool,

    /// The text the agent prints when one task is done [default: READY_FOR_NEXT_TASK].
    #[arg(
        long,
        value_name = "TEXT",
        allow_hyphen_values = true,
        help_heading = "Tasks"
    )]
    pub(crate) task_promise: Option<String>,

    // ── Agent and output ──────────────────────────────────────────────────────────────────────
    /// Show the agent's output as it arrives (default).
    #[arg(long, overrides_with = "no_stream", help_heading = "Agent and output")]
    pub(crate) stream: bool,

    /// Show the agent's output only when it exits.
    #[arg(long, overrides_with = "stream", help_heading = "Agent and output")]
    pub(crate) no_stream: bool,

    /// Read the agent's JSON event stream (default) or its plain text.
    #[arg(
        long,
        value_enum,
        value_name = "FORMAT",
        help_heading = "Agent and output"
    )]
    pub(crate) output_format: Option<OutputFormat>,

    /// Print every tool call instead of the compact `| Tools` summary.
    #[arg(long, help_heading = "Agent and output")]
    pub(crate) verbose_tools: bool,

    /// OpenCode only: load no plugins except authentication plugins.
    #[arg(long, help_heading = "Agent and output")]
    pub(crate) no_plugins: bool,

    /// Let the agent use every tool without asking (default).
    #[arg(
        long,
        overrides_with = "no_allow_all",
        help_heading = "Agent and output"
    )]
    pub(crate) allow_all: bool,

    /// Keep the agent's own permission prompts.
    #[arg(long, overrides_with = "allow_all", help_heading = "Agent and output")]
    pub(crate) no_allow_all: bool,

    /// Commit the agent's work after every iteration (default).
    #[arg(long, overrides_with = "no_commit", help_heading = "Agent and output")]
    pub(crate) commit: bool,

    /// Do not commit anything.
    #[arg(long, overrides_with = "commit", help_heading = "Agent and output")]
    pub(crate) no_commit: bool,
}

/// Value parsers shared by the command line, config files and environment variables.
pub(crate) mod parse {
    use std::time::Duration;

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

    /// Parses a token count; `k` and `M` suffixes are accepted (`500k`, `2M`).
    pub(crate) fn token_count(text: &str) -> Result<u64, String> {
        let trimmed = text.trim();
        let (number, scale) = match trimmed.char_indices().last() {
            Some((at, 'k' | 'K')) => (&trimmed[..at], 1_000.0),
            Some((at, 'm' | 'M')) => (&trimmed[..at], 1_000_000.0),
            _ => (trimmed, 1.0),
        };
        let value: f64 = number
            .parse()
            .map_err(|_| format!("'{text}' is not a token count; use e.g. 200000, 500k or 2M"))?;
        if !value.is_finite() || value <= 0.0 {
            return Err(format!("'{text}' must be a token count above 0"));
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "checked positive and finite"
        )]
        Ok((value * scale).round() as u64)
    }

    /// Parses `90s`, `30m`, `1h`, `500ms`, or a plain number of seconds.
    pub(crate) fn duration(text: &str) -> Result<Duration, String> {
        let trimmed = text.trim();
        let split = trimmed
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(trimmed.len());
        let (number, unit) = trimmed.split_at(split);
        let bad = || format!("'{text}' is not a duration; use e.g. 500ms, 90s, 30m or 1h");
        let value: f64 = number.parse().map_err(|_| bad())?;
        let seconds = match unit.trim() {
            "" | "s" | "sec" | "secs" => value,
            "ms" => value / 1000.0,
            "m" | "min" | "mins" => value * 60.0,
            "h" | "hr" | "hrs" => value * 3600.0,
            _ => return Err(bad()),
        };
        if !seconds.is_finite() || !(0.0..=1.0e9).contains(&seconds) {
            return Err(bad());
        }
        Ok(Duration::from_secs_f64(seconds))
    }

    /// One entry of `--rotation`: an agent name and perhaps a model.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub(crate) struct RotationEntry {
        pub(crate) agent: String,
        pub(crate) model: Option<String>,
    }

    /// A whole `--rotation` value (one clap value holding several entries).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub(crate) struct Rotation(pub(crate) Vec<RotationEntry>);

    /// Parses `--rotation`.
    pub(crate) fn rotation_list(text: &str) -> Result<Rotation, String> {
        rotation(text).map(Rotation)
    }

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
                "'{text}' is not a rotation; use e.g. claude-code:sonnet,codex"
            ));
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::parse::*;
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn the_command_definition_is_valid() {
        Cli::command().debug_assert();
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
