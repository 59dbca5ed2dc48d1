//! Recognising the agent's promises (`<promise>COMPLETE</promise>` and friends) in its output.
//!
//! By default a promise counts only when the last non-empty line of the agent's output ends
//! with the tag, so an agent that echoes its prompt or says "I won't print <promise>…</promise>
//! yet" does not end the loop. `--promise-anywhere` restores the reference's anywhere-match.

use regex::Regex;

/// How the agent writes its promises.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PromiseFormat {
    /// `<promise>TEXT</promise>` ending the last line.
    #[default]
    Xml,
    /// The bare TEXT as the whole last line (the tagged form is accepted too).
    Plain,
}

/// One promise text, with its matchers built once.
#[derive(Clone, Debug)]
pub(crate) struct Promise {
    text: String,
    at_line_end: Regex,
    anywhere: Regex,
    /// In plain format: the whole line is the bare text.
    whole_line: Option<Regex>,
}

impl Promise {
    pub(crate) fn new(text: &str, format: PromiseFormat) -> Self {
        let escaped = regex::escape(text);
        let tag = format!(r"(?i)<promise>\s*{escaped}\s*</promise>");
        Self {
            text: text.to_owned(),
            at_line_end: Regex::new(&format!("{tag}$")).expect("escaped promise is a valid regex"),
            anywhere: Regex::new(&tag).expect("escaped promise is a valid regex"),
            whole_line: (format == PromiseFormat::Plain).then(|| {
                Regex::new(&format!(r"(?i)^{escaped}$")).expect("escaped promise is a valid regex")
            }),
        }
    }

    /// The tag the agent must print, e.g. `<promise>COMPLETE</promise>`.
    pub(crate) fn tag(&self) -> String {
        format!("<promise>{}</promise>", self.text)
    }

    /// Whether a line (ANSI codes stripped) keeps the promise: it ends with the tag, or, in
    /// plain format, it is the bare text.
    ///
    /// Markdown around the promise is accepted: a list or quote marker before it (`- `, `* `,
    /// `> `), emphasis or code marks around it (`*`, `_`, `` ` ``, `~`) and trailing `.` or `!`.
    pub(crate) fn ends_line(&self, line: &str) -> bool {
        let line = undecorated(line);
        self.at_line_end.is_match(line)
            || self.whole_line.as_ref().is_some_and(|re| re.is_match(line))
    }

    /// Whether the tag appears anywhere in `text`.
    pub(crate) fn appears_in(&self, text: &str) -> bool {
        self.anywhere.is_match(text)
    }
}

/// A line without the markdown an agent puts around a promise: leading list or quote markers,
/// and emphasis or code marks and trailing `.`/`!` at either end. Words stay, so a promise
/// followed by more prose still does not end the line.
fn undecorated(line: &str) -> &str {
    const MARKS: [char; 4] = ['*', '_', '`', '~'];
    let mut rest = line.trim();
    loop {
        let stripped = ["- ", "* ", "+ ", "> ", ">"]
            .iter()
            .find_map(|marker| rest.strip_prefix(marker));
        match stripped {
            Some(next) => rest = next.trim_start(),
            None => break,
        }
    }
    rest.trim_start_matches(|c: char| MARKS.contains(&c) || c.is_whitespace())
        .trim_end_matches(|c: char| {
            MARKS.contains(&c) || matches!(c, '.' | '!') || c.is_whitespace()
        })
}

#[cfg(test)]
mod tests {
    use super::{Promise, PromiseFormat};

    #[test]
    fn the_tag_must_end_the_line() {
        let promise = Promise::new("COMPLETE", PromiseFormat::Xml);
        assert!(promise.ends_line("Done. <promise>COMPLETE</promise>"));
        assert!(promise.ends_line("  <promise> complete </promise>  "));
        assert!(!promise.ends_line("I won't print <promise>COMPLETE</promise> yet."));
        assert!(!promise.ends_line("<promise>INCOMPLETE</promise>"));
        assert!(promise.appears_in("I won't print <promise>COMPLETE</promise> yet."));
    }

    #[test]
    fn markdown_around_the_promise_is_accepted() {
        let promise = Promise::new("COMPLETE", PromiseFormat::Xml);
        for line in [
            "**<promise>COMPLETE</promise>**",
            "`<promise>COMPLETE</promise>`",
            "<promise>COMPLETE</promise>.",
            "<promise>COMPLETE</promise>!",
            "- <promise>COMPLETE</promise>",
            "> <promise>COMPLETE</promise>",
            "_<promise>COMPLETE</promise>_",
            "~~<promise>COMPLETE</promise>~~",
            "All done: **<promise>COMPLETE</promise>**.",
        ] {
            assert!(promise.ends_line(line), "{line}");
        }
        for line in [
            "<promise>COMPLETE</promise> but more remains",
            "**<promise>COMPLETE</promise>** is what I will print later",
            "`<promise>COMPLETE</promise>` once the tests pass.",
        ] {
            assert!(!promise.ends_line(line), "{line}");
        }
        let plain = Promise::new("COMPLETE", PromiseFormat::Plain);
        assert!(plain.ends_line("**COMPLETE**"));
        assert!(plain.ends_line("- COMPLETE."));
    }

    #[test]
    fn plain_format_accepts_the_bare_text_as_the_whole_line() {
        let promise = Promise::new("COMPLETE", PromiseFormat::Plain);
        assert!(promise.ends_line("  complete "));
        assert!(promise.ends_line("Done. <promise>COMPLETE</promise>"));
        assert!(!promise.ends_line("The task is COMPLETE now"));
        assert!(!Promise::new("COMPLETE", PromiseFormat::Xml).ends_line("COMPLETE"));
    }

    #[test]
    fn promise_text_is_escaped() {
        let promise = Promise::new("A+B (done)", PromiseFormat::Xml);
        assert!(promise.ends_line("<promise>A+B (done)</promise>"));
        assert!(!promise.ends_line("<promise>AAB (done)</promise>"));
        assert_eq!(promise.tag(), "<promise>A+B (done)</promise>");
    }
}
