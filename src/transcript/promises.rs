//! The promises an agent run is listened for, and whether its answer keeps them.

use crate::promise::Promise;

use super::tail::last_line_tail;

/// The promises of one run: completion, task and (when set) abort, in that order.
pub(super) struct Promises<'a> {
    list: Vec<&'a Promise>,
    /// `--promise-anywhere`: a promise counts wherever it appears in the text.
    pub(super) anywhere: bool,
    seen_anywhere: Vec<bool>,
}

impl<'a> Promises<'a> {
    pub(super) fn new(list: Vec<&'a Promise>, anywhere: bool) -> Self {
        let seen_anywhere = vec![false; list.len()];
        Self {
            list,
            anywhere,
            seen_anywhere,
        }
    }

    /// Notes the promises that appear in `text` (only with `--promise-anywhere`).
    pub(super) fn check_anywhere(&mut self, text: &str) {
        if self.anywhere {
            for (seen, promise) in self.seen_anywhere.iter_mut().zip(&self.list) {
                *seen |= promise.appears_in(text);
            }
        }
    }

    /// Per promise, whether `answer` (the agent's decisive text) keeps it.
    pub(super) fn kept(&self, answer: &str) -> impl Iterator<Item = bool> {
        let last_line = last_line_tail(answer);
        self.list
            .iter()
            .zip(&self.seen_anywhere)
            .map(move |(promise, &seen)| (self.anywhere && seen) || promise.ends_line(&last_line))
    }
}
