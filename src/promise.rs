//! Recognising the agent's promises (`<promise>COMPLETE</promise>` and friends) in its output.
//!
//! By default a promise counts only when the last non-empty line of the agent's output ends
//! with the tag, so an agent that echoes its prompt or says "I won't print <promise>…</promise>
//! yet" does not end the loop. `--promise-anywhere` restores the reference's anywhere-match.

/// How the agent writes its promises.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PromiseFormat {
    /// `<promise>TEXT</promise>` ending the last line.
    #[default]
    Xml,
    /// The bare TEXT as the whole last line (the tagged form is accepted too).
    Plain,
}

/// One promise text, and how it is written. Matched by hand, case-insensitively, with any white
/// space inside the tag: no pattern to build each time ralph starts.
#[derive(Clone, Debug)]
pub(crate) struct Promise {
    text: String,
    format: PromiseFormat,
}

impl Promise {
    pub(crate) fn new(text: &str, format: PromiseFormat) -> Self {
        Self {
            text: text.to_owned(),
            format,
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
        self.tag_ends(line).any(|end| end == line.len())
            || (self.format == PromiseFormat::Plain
                && caseless_prefix(line, &self.text) == Some(line.len()))
    }

    /// Whether the tag appears anywhere in `text`.
    pub(crate) fn appears_in(&self, text: &str) -> bool {
        self.tag_ends(text).next().is_some()
    }

    /// Where each tag in `text` ends: `<promise>`, white space, the text, white space and
    /// `</promise>`, in any case.
    fn tag_ends<'t>(&'t self, text: &'t str) -> impl Iterator<Item = usize> + 't {
        text.match_indices('<').filter_map(move |(at, _)| {
            let mut end = at + caseless_prefix(&text[at..], "<promise>")?;
            end = skip_space(text, end);
            end += caseless_prefix(&text[end..], &self.text)?;
            end = skip_space(text, end);
            Some(end + caseless_prefix(&text[end..], "</promise>")?)
        })
    }
}

/// The length of the start of `text` that is `word` in any case, if it starts so.
fn caseless_prefix(text: &str, word: &str) -> Option<usize> {
    let mut chars = text.char_indices();
    let mut len = 0;
    for wanted in word.chars() {
        let (at, found) = chars.next()?;
        if found != wanted && !found.to_lowercase().eq(wanted.to_lowercase()) {
            return None;
        }
        len = at + found.len_utf8();
    }
    Some(len)
}

/// `at` moved past the white space there.
fn skip_space(text: &str, at: usize) -> usize {
    let rest = &text[at..];
    at + rest.len() - rest.trim_start().len()
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
    fn the_last_of_several_tags_counts_and_any_case_or_space_inside_does() {
        let promise = Promise::new("FERTIG ÄNDERUNG", PromiseFormat::Xml);
        assert!(
            promise.ends_line(
                "<promise>nope</promise> then <PROMISE>\tfertig änderung\u{a0}</Promise>"
            )
        );
        assert!(!promise.ends_line("<promise>fertig änderung</promise> <promise>x</promise>"));
        assert!(!promise.appears_in("<promise>fertig</promise> änderung"));
        assert!(!promise.appears_in("<promise fertig änderung</promise>"));
        let empty = Promise::new("", PromiseFormat::Xml);
        assert!(empty.ends_line("<promise></promise>"));
    }

    #[test]
    fn promise_text_is_escaped() {
        let promise = Promise::new("A+B (done)", PromiseFormat::Xml);
        assert!(promise.ends_line("<promise>A+B (done)</promise>"));
        assert!(!promise.ends_line("<promise>AAB (done)</promise>"));
        assert_eq!(promise.tag(), "<promise>A+B (done)</promise>");
    }
}
