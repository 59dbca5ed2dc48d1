//! What one event of the agent's does to the transcript: a message shown and kept, a tool
//! counted, tokens and cost added, a failure held to be shown.

use std::time::Instant;

use super::Transcript;
use super::tail::keep_text_tail;
use crate::agents::AgentEvent;
use crate::output;
use crate::stream::Source;

impl Transcript<'_> {
    /// The streamed message is complete: it is shown and counts as the agent's last text.
    pub(super) fn end_pieces(&mut self, now: Instant) {
        if !self.pieces.is_empty() {
            let text = std::mem::take(&mut self.pieces);
            // Its pieces may have come in other chunks than this one: searched line by line.
            let may_err = std::mem::replace(&mut self.segment_may_err, true);
            self.event(AgentEvent::Text(text), now);
            self.segment_may_err = may_err;
        }
    }

    /// A message of the agent: shown, and kept as its last text.
    fn text(&mut self, text: &str, now: Instant) {
        self.promises.check_anywhere(text);
        // Searched only when the chunk the event came in has error words (or, after the agent
        // exited, line by line).
        let may_err = self.segment_may_err;
        for line in text.lines() {
            if may_err {
                self.note_error(line, false);
            }
            self.show(Source::Stdout, line, true, now);
        }
        keep_text_tail(&mut self.last_text, text);
    }

    pub(super) fn event(&mut self, event: AgentEvent, now: Instant) {
        if let AgentEvent::TextPiece(piece) = event {
            self.pieces.push_str(&piece);
            return;
        }
        self.end_pieces(now);
        match event {
            AgentEvent::TextPiece(_) => {}
            AgentEvent::Text(text) => self.text(&text, now),
            AgentEvent::FinalText(text) => {
                self.text(&text, now);
                keep_text_tail(&mut self.final_text, &text);
            }
            AgentEvent::Final(text) => {
                self.promises.check_anywhere(&text);
                keep_text_tail(&mut self.final_text, &text);
            }
            AgentEvent::Tool { name, detail } => {
                if self.display.verbose_tools {
                    let line = match &detail {
                        Some(detail) => format!("| {name} {detail}"),
                        None => format!("| {name}"),
                    };
                    self.show(Source::Stdout, &line, true, now);
                }
                self.count_tool(name, now);
            }
            AgentEvent::ToolError(message) => {
                if self.display.verbose_tools {
                    self.show(Source::Stdout, &format!("|   ✗ {message}"), true, now);
                }
                self.note_error(&message, true);
            }
            AgentEvent::Usage(usage) => self.findings.usage.get_or_insert_default().add(usage),
            AgentEvent::Cost(cost) => *self.findings.cost.get_or_insert(0.0) += cost,
            AgentEvent::Turns(turns) => {
                let total = self.findings.turns.get_or_insert(0);
                *total = total.saturating_add(turns);
            }
            AgentEvent::Session(id) => {
                self.findings.session_id.get_or_insert(id);
            }
            AgentEvent::StopReason(reason) => self.findings.stop_reason = Some(reason),
            AgentEvent::Failure(failure) => {
                self.show_held_failure(now);
                let line = output::failure_line(&self.agent.display_name(), &failure);
                self.held_failure = Some(line);
                self.note_error(&failure.message, true);
                self.findings.failure = Some(failure);
            }
            AgentEvent::Notice(message) => {
                self.show(Source::Stderr, &format!("↻ {message}"), true, now)
            }
            AgentEvent::Retrying(message) => {
                self.findings.failure = None;
                self.held_failure = None;
                self.show(Source::Stderr, &format!("↻ {message}"), true, now)
            }
            AgentEvent::Quiet => {}
        }
    }
}
