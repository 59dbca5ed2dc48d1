//! Recognising the agent's promises (`<promise>COMPLETE</promise>` and friends) in its output.
//!
//! By default a promise counts only when the last non-empty line of the agent's output ends
//! with the tag, so an agent that echoes its prompt or says "I won't print <promise>…</promise>
//! yet" does not end the loop. `--promise-anywhere` restores the reference's anywhere-match.

use regex::Regex;

/// One promise text, with its matchers built once.
#[derive(Clone, Debug)]
pub(crate) struct Promise {
    text: String,
    at_line_end: Regex,
    anywhere: Regex,
}

impl Promise {
    pub(crate) fn new(text: &str) -> Self {
        let tag = format!(r"(?i)<promise>\s*{}\s*</promise>", regex::escape(text));
        Self {
            text: text.to_owned(),
            at_line_end: Regex::new(&format!("{tag}$")).expect("escaped promise is a valid regex"),
            anywhere: Regex::new(&tag).expect("escaped promise is a valid regex"),
        }
    }

    /// The tag the agent must print, e.g. `<promise>COMPLETE</promise>`.
    pub(crate) fn tag(&self) -> String {
        format!("<promise>{}</promise>", self.text)
    }

    /// Whether a line (ANSI codes stripped) ends with the tag.
    pub(crate) fn ends_line(&self, line: &str) -> bool {
        self.at_line_end.is_match(line.trim())
    }

    /// Whether the tag appears anywhere in `text`.
    pub(crate) fn appears_in(&self, text: &str) -> bool {
        self.anywhere.is_match(text)
    }
}

#[cfg(test)]
mod tests {
    use super::Promise;

    #[test]
    fn the_tag_must_end_the_line() {
        let promise = Promise::new("COMPLETE");
        assert!(promise.ends_line("Done. <promise>COMPLETE</promise>"));
        assert!(promise.ends_line("  <promise> complete </promise>  "));
        assert!(!promise.ends_line("I won't print <promise>COMPLETE</promise> yet."));
        assert!(!promise.ends_line("<promise>INCOMPLETE</promise>"));
        assert!(promise.appears_in("I won't print <promise>COMPLETE</promise> yet."));
    }

    #[test]
    fn promise_text_is_escaped() {
        let promise = Promise::new("A+B (done)");
        assert!(promise.ends_line("<promise>A+B (done)</promise>"));
        assert!(!promise.ends_line("<promise>AAB (done)</promise>"));
        assert_eq!(promise.tag(), "<promise>A+B (done)</promise>");
    }
}
