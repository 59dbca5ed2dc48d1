//! Aider: `aider --message PROMPT [--yes-always] [--model MODEL] --no-auto-commits
//! --no-check-update --no-analytics --no-show-model-warnings --no-pretty`.
//!
//! Plain text only. ralph commits the work itself, so Aider's own commits are off. After its
//! answer Aider prints `Tokens: 1.2k sent, 350 received. Cost: $0.01 message, $0.02 session.`:
//! that line gives the iteration's tokens and cost and is not the answer's last line (where the
//! promise must be). Each applied edit prints `Applied edit to PATH`, counted as an `edit` tool.

use std::sync::LazyLock;

use regex::Regex;

use super::{
    Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, MAX_PROMPT_ARGUMENT_BYTES, Usage,
    command_from,
};

pub(super) struct Aider;

static TOOL_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^Applied (edit) to \S").expect("valid regex"));

/// How Aider's token report starts.
const TOKENS: &str = "Tokens: ";

static COST: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"Cost: \$([0-9.]+) message").expect("valid regex"));

impl Agent for Aider {
    fn kind(&self) -> Option<AgentKind> {
        Some(AgentKind::Aider)
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let mut args = Vec::new();
        // A prompt too long for an argument is read from stdin as a file.
        if request.prompt.len() > MAX_PROMPT_ARGUMENT_BYTES {
            args.extend(["--message-file".to_owned(), "/dev/stdin".to_owned()]);
        } else {
            args.extend(["--message".to_owned(), request.prompt.to_owned()]);
        }
        if request.allow_all {
            args.push("--yes-always".to_owned());
        }
        if let Some(model) = request.model {
            args.extend(["--model".to_owned(), model.to_owned()]);
        }
        args.extend(
            [
                "--no-auto-commits",
                "--no-check-update",
                "--no-analytics",
                "--no-show-model-warnings",
                "--no-pretty",
            ]
            .map(str::to_owned),
        );
        args.extend(request.extra_args.iter().cloned());
        command_from(request, args, Vec::new())
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        Some(&TOOL_LINE)
    }

    fn parse_event(&self, _line: &str) -> Option<Vec<AgentEvent>> {
        None
    }

    fn trailer_marker(&self) -> Option<&'static str> {
        Some(TOKENS)
    }

    fn trailer(&self, line: &str) -> Option<Vec<AgentEvent>> {
        let report = line.trim().strip_prefix(TOKENS)?;
        let mut usage = Usage::default();
        // The counts, up to the sentence that ends with "received." (a cost may follow).
        let counts = report.split(". ").next().unwrap_or(report);
        for part in counts
            .split(',')
            .map(|part| part.trim().trim_end_matches('.'))
        {
            let Some((count, what)) = part.split_once(' ') else {
                continue;
            };
            let Some(count) = tokens(count) else {
                continue;
            };
            match what {
                "sent" => usage.input = count,
                "received" => usage.output = count,
                "cache write" => usage.cache_write = count,
                "cache hit" => usage.cache_read = count,
                _ => {}
            }
        }
        let mut events = vec![AgentEvent::Usage(usage)];
        let cost = COST.captures(line).and_then(|found| found[1].parse().ok());
        events.extend(cost.map(AgentEvent::Cost));
        Some(events)
    }
}

/// A count as Aider prints it: `350`, `1.2k`, `3.4M`.
fn tokens(count: &str) -> Option<u64> {
    let (number, scale) = match count.as_bytes().last()? {
        b'k' => (&count[..count.len() - 1], 1e3),
        b'M' => (&count[..count.len() - 1], 1e6),
        _ => (count, 1.0),
    };
    let value: f64 = number.parse().ok()?;
    // Token counts are far below 2^53: the conversion is exact enough.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let whole = (value * scale).round().max(0.0) as u64;
    Some(whole)
}

#[cfg(test)]
mod tests {
    use super::super::tests::request;
    use super::*;

    #[test]
    fn argv() {
        let command = Aider.command(&request("go", Some("m1"), true));
        assert_eq!(
            command.display_args(),
            [
                "--message",
                "go",
                "--yes-always",
                "--model",
                "m1",
                "--no-auto-commits",
                "--no-check-update",
                "--no-analytics",
                "--no-show-model-warnings",
                "--no-pretty"
            ]
        );
        let careful = Aider.command(&request("go", None, false)).display_args();
        assert!(!careful.contains(&"--yes-always".to_owned()));
        let long = "x".repeat(MAX_PROMPT_ARGUMENT_BYTES + 1);
        let command = Aider.command(&request(&long, None, true));
        assert_eq!(
            &command.display_args()[..2],
            ["--message-file", "/dev/stdin"]
        );
        assert_eq!(command.stdin.as_deref(), Some(long.as_str()));
    }

    #[test]
    fn the_token_report_gives_usage_and_cost_and_edits_are_tools() {
        let events = Aider
            .trailer("Tokens: 2.5k sent, 1.2k cache write, 300 cache hit, 350 received. Cost: $0.0123 message, $0.0456 session.")
            .unwrap();
        assert_eq!(
            events,
            [
                AgentEvent::Usage(Usage {
                    input: 2500,
                    output: 350,
                    cache_read: 300,
                    cache_write: 1200
                }),
                AgentEvent::Cost(0.0123)
            ]
        );
        assert_eq!(
            Aider.trailer("Tokens: 594 sent, 9 received."),
            Some(vec![AgentEvent::Usage(Usage {
                input: 594,
                output: 9,
                ..Usage::default()
            })])
        );
        assert_eq!(Aider.trailer("Done. <promise>COMPLETE</promise>"), None);
        assert_eq!(
            Aider.tool_in_line("Applied edit to hello.txt").as_deref(),
            Some("edit")
        );
        assert_eq!(Aider.tool_in_line("I applied the edit."), None);
    }
}
