//! The ends of what an agent printed, kept bounded while it streams: its last non-empty line
//! and the tails of its texts (the promise is read from them), without ANSI codes.

use std::borrow::Cow;

use super::LINE_TAIL_BYTES;

/// Keeps `line` (trimmed, its last [`LINE_TAIL_BYTES`]) as the last non-empty line, reusing the
/// buffer: this runs for every line the agent prints.
pub(super) fn set_last_line(last: &mut String, line: &str) {
    let line = line.trim();
    if line.is_empty() {
        return;
    }
    last.clear();
    push_tail(last, line);
}

/// The text without ANSI escape sequences (borrowed when there are none, the common case).
pub(super) fn without_ansi(text: &str) -> Cow<'_, str> {
    if text.contains('\x1b') {
        Cow::Owned(strip_ansi_escapes::strip_str(text))
    } else {
        Cow::Borrowed(text)
    }
}

/// The last non-empty line of `text`, without ANSI codes, bounded.
pub(super) fn last_line_tail(text: &str) -> String {
    let line = text
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("");
    let mut tail = String::new();
    push_tail(&mut tail, &without_ansi(line));
    tail
}

/// Keeps the last 2 KB of a message in `slot` (reusing its buffer: this runs for every message).
pub(super) fn keep_text_tail(slot: &mut Option<String>, text: &str) {
    let mut cut = text.len().saturating_sub(2048);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    let tail = slot.get_or_insert_default();
    tail.clear();
    tail.push_str(&text[cut..]);
}

/// Appends to a bounded tail, keeping the last [`LINE_TAIL_BYTES`] bytes.
pub(super) fn push_tail(tail: &mut String, text: &str) {
    tail.push_str(text);
    if tail.len() > LINE_TAIL_BYTES {
        keep_last(tail, LINE_TAIL_BYTES);
    }
}

/// Cuts `text` to its last `bytes` bytes at most (never inside a character).
pub(super) fn keep_last(text: &mut String, bytes: usize) {
    let mut cut = text.len().saturating_sub(bytes);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text.drain(..cut);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_bytes_kept_never_cut_a_character() {
        let mut text = "aé".repeat(10);
        keep_last(&mut text, 4);
        assert_eq!(text, "aé");
        let mut short = "abc".to_owned();
        keep_last(&mut short, 10);
        assert_eq!(short, "abc");
    }
}
