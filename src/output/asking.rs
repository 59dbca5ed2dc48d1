//! The terminal's lines for an agent's questions (`ralph_ask`): asked, and answered or not.

use std::time::Duration;

use super::Voice;
use super::format::{compact_duration, long_duration};
use crate::event::LoopEvent;

/// Whether a line typed on ralph's terminal answers the agents' questions: its stdin and stdout
/// are a terminal, and it does not speak JSON.
pub(crate) fn terminal_answers(json: bool) -> bool {
    use std::io::IsTerminal as _;
    !json && std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// A question's options as a person picks one by its number: `1. SQLite`, `2. Postgres`.
pub(crate) fn numbered(options: &[String]) -> impl Iterator<Item = String> + '_ {
    (options.iter().enumerate()).map(|(n, option)| format!("{}. {option}", n + 1))
}

/// `❓ The agent asks (q1a2b3): …`, its options, and how to answer.
pub(super) fn asked(out: &Voice, event: &LoopEvent) {
    let LoopEvent::QuestionAsked {
        id,
        question,
        options,
        urgency,
        timeout_ms,
        ..
    } = event
    else {
        return;
    };
    let urgent = if urgency.as_deref() == Some("high") {
        " (urgent)"
    } else {
        ""
    };
    let mut lines = vec![format!(
        "❓ The agent asks{urgent} (question {id}): {question}"
    )];
    lines.extend(numbered(options).map(|option| format!("   {option}")));
    let answer = if options.is_empty() {
        "\"…\""
    } else {
        "N|\"…\""
    };
    lines.push(format!(
        "   Answer with: ralph --answer {id} {answer} (or on the --serve page); in {} it decides itself.",
        compact_duration(Duration::from_millis(*timeout_ms))
    ));
    if terminal_answers(out.is_json()) {
        lines.push(format!(
            "   Or type the answer here{} and press Enter.",
            if options.is_empty() {
                ""
            } else {
                " (or an option's number)"
            }
        ));
    }
    out.say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// Where an answer came from, for people.
fn answered_by(by: &str) -> String {
    match by {
        "page" => "on the --serve page".to_owned(),
        "cli" => "with ralph --answer".to_owned(),
        "terminal" => "at the terminal".to_owned(),
        "mcp" => "through ralph --mcp".to_owned(),
        "remote" => "from another clone (ralph --answer --remote)".to_owned(),
        other => format!("by {other}"),
    }
}

/// `💬 Answered by … after …: "…"`, or that nobody answered in time.
pub(super) fn answered(out: &Voice, event: &LoopEvent) {
    let LoopEvent::QuestionAnswered {
        id,
        status,
        answer,
        by,
        waited_ms,
        ..
    } = event
    else {
        return;
    };
    let waited = Duration::from_millis(*waited_ms);
    let line = match (status.as_str(), answer, by) {
        ("answered", Some(answer), Some(by)) => format!(
            "💬 Question {id} answered {} after {}: {answer:?}",
            answered_by(by),
            long_duration(waited)
        ),
        ("timed_out", ..) => format!(
            "⌛ Nobody answered question {id} in {}: the agent was told to decide itself and say what it chose",
            compact_duration(waited)
        ),
        _ => format!(
            "🚫 Question {id} withdrawn after {}: its agent stopped (its iteration ended, or the run is stopping)",
            long_duration(waited)
        ),
    };
    out.say(&[&line]);
}

/// The heartbeat while the agent waits for a person's answer (`ralph_ask`).
pub(crate) fn heartbeat_asking(out: &Voice, elapsed: Duration, waiting: Duration) {
    out.say(&[&super::paint(
        super::Style::Dim,
        &format!(
            "⏳ waiting for an answer ({}) · elapsed {} · ralph --status shows the question",
            compact_duration(waiting),
            super::format::short_duration(elapsed)
        ),
        false,
    )]);
}
