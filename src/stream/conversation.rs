//! An agent that speaks ACP: its stdout lines go to the output handler as any agent's do, and
//! to the turn's [`Client`], whose replies are written to the agent's stdin. The stdin stays open
//! until the turn is over, then it is closed. A thread of its own writes it, so an agent that
//! stops reading (a prompt larger than the pipe) never holds up the clock of the main thread.

use std::io::Write as _;
use std::process::ChildStdin;
use std::sync::mpsc;
use std::time::Instant;

use anyhow::Context as _;

use super::{LineParser, OutputHandler, ParsedLines, Segment, Source};
use crate::agents::AgentEvent;
use crate::agents::acp::{Client, End};

/// Longest line of the agent's that the client reads; a longer one (a notification of no use to
/// the turn, such as a large command list) is passed over.
const MAX_LINE: usize = 4 * 1024 * 1024;

/// The output handler of an ACP agent's run: `inner` with the conversation around it.
pub(super) struct Conversation<'a> {
    inner: &'a mut dyn OutputHandler,
    client: Client,
    /// To the thread that writes the agent's stdin; dropped to close it.
    stdin: Option<mpsc::Sender<String>>,
    /// The stdout line being received in pieces, unless it is too long.
    line: String,
    too_long: bool,
}

impl<'a> Conversation<'a> {
    /// Starts the conversation: the client's first message is written.
    pub(super) fn start(
        inner: &'a mut dyn OutputHandler,
        client: Client,
        mut stdin: ChildStdin,
    ) -> anyhow::Result<Self> {
        let (sender, messages) = mpsc::channel::<String>();
        std::thread::Builder::new()
            .name("ralph-agent-acp".into())
            .spawn(move || {
                // An agent that exited does not read: what it did not answer is found at its
                // end. The stdin closes when the conversation is over (the channel with it).
                for message in messages {
                    let written = stdin
                        .write_all(message.as_bytes())
                        .and_then(|()| stdin.write_all(b"\n"))
                        .and_then(|()| stdin.flush());
                    if written.is_err() {
                        break;
                    }
                }
            })
            .context("failed to start the thread that talks to the agent")?;
        let mut conversation = Self {
            inner,
            stdin: Some(sender),
            line: String::new(),
            too_long: false,
            client,
        };
        let opening = conversation.client.opening();
        conversation.send(opening);
        Ok(conversation)
    }

    fn send(&mut self, message: String) {
        if let Some(stdin) = &self.stdin
            && stdin.send(message).is_err()
        {
            self.stdin = None;
        }
    }

    /// One whole line of the agent's stdout.
    fn take_line(&mut self, line: &str) {
        let step = self.client.on_line(line);
        for message in step.send {
            self.send(message);
        }
        for event in step.events {
            self.inner.on_agent_event(event);
        }
        if self.client.is_over() {
            // Nothing more to say: the agent may exit.
            self.stdin = None;
        }
    }

    /// The agent's process is gone (`stopped`: ralph ended it): a turn it left unanswered is a
    /// failure of the iteration. Whether the turn was answered.
    pub(super) fn finish(&mut self, stopped: bool) -> bool {
        self.stdin = None;
        if !stopped && let Some(event) = self.client.exited() {
            self.inner.on_agent_event(event);
        }
        matches!(self.client.end(), Some(End::Answered(_)))
    }
}

impl OutputHandler for Conversation<'_> {
    fn on_chunk(&mut self, source: Source, data: &[u8]) {
        self.inner.on_chunk(source, data);
    }

    fn on_segment(&mut self, segment: &Segment<'_>) {
        self.inner.on_segment(segment);
        if segment.source != Source::Stdout {
            return;
        }
        if segment.starts_line {
            self.line.clear();
            self.too_long = false;
        }
        if !self.too_long {
            if self.line.len() + segment.text.len() > MAX_LINE {
                self.too_long = true;
                self.line = String::new();
            } else {
                self.line.push_str(segment.text);
            }
        }
        if segment.ends_line && !self.too_long {
            let line = std::mem::take(&mut self.line);
            self.take_line(&line);
        }
    }

    fn on_lines(
        &mut self,
        source: Source,
        text: &str,
        received: Instant,
        parsed: Option<ParsedLines>,
    ) {
        self.inner.on_lines(source, text, received, parsed);
        if source == Source::Stdout {
            for line in text.lines() {
                self.take_line(line);
            }
        }
    }

    fn line_parser(&self) -> Option<LineParser> {
        self.inner.line_parser()
    }

    fn on_chunk_end(&mut self) {
        self.inner.on_chunk_end();
    }

    fn on_tick(&mut self, now: Instant, last_output: Instant) {
        self.inner.on_tick(now, last_output);
    }

    fn on_spawn(&mut self, group: i32) {
        self.inner.on_spawn(group);
    }

    fn on_stopping(&mut self, reason: super::EndedBy) {
        self.inner.on_stopping(reason);
    }

    fn promise_said(&self) -> bool {
        self.inner.promise_said()
    }

    fn on_agent_event(&mut self, event: AgentEvent) {
        self.inner.on_agent_event(event);
    }

    fn turn_over(&self) -> bool {
        self.client.is_over()
    }

    fn cancel_turn(&mut self) -> bool {
        match self.client.cancel() {
            Some(message) => {
                self.send(message);
                true
            }
            None => false,
        }
    }
}
