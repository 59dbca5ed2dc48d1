//! The agent's whole answer, kept when asked for: a planning call reads its plan there.

use crate::stream::Source;

use super::Transcript;

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

    /// Adds what is shown of stdout to the answer, when it is kept.
    pub(super) fn keep_answer(&mut self, source: Source, text: &str, ends_line: bool) {
        if let Some(answer) = self.answer.as_mut().filter(|_| source == Source::Stdout) {
            answer.push_str(text);
            if ends_line {
                answer.push('\n');
            }
        }
    }
}
