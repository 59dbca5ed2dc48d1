//! The agent's whole answer, kept when asked for: a planning call reads its plan there.

use crate::stream::Source;

use super::Transcript;
use super::tail::keep_last;

/// How much of an answer is kept: far more than any plan.
const ANSWER_BYTES: usize = 1 << 20;

impl Transcript<'_> {
    /// Keeps everything the agent says on stdout (its text, not its events), for
    /// [`Transcript::answer`].
    pub(crate) fn keeping_answer(mut self) -> Self {
        self.answer = Some(String::new());
        self
    }

    /// What the agent said on stdout so far (empty unless [`Transcript::keeping_answer`]).
    pub(crate) fn answer(&self) -> &str {
        self.answer.as_deref().unwrap_or_default()
    }

    /// Adds what is shown of stdout to the answer, when it is kept: its last [`ANSWER_BYTES`]
    /// (cut when it is twice that, so an agent that prints without end costs bounded memory).
    pub(super) fn keep_answer(&mut self, source: Source, text: &str, ends_line: bool) {
        if let Some(answer) = self.answer.as_mut().filter(|_| source == Source::Stdout) {
            answer.push_str(text);
            if ends_line {
                answer.push('\n');
            }
            if answer.len() > 2 * ANSWER_BYTES {
                keep_last(answer, ANSWER_BYTES);
            }
        }
    }
}
