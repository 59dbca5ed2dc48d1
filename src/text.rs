//! Text as a terminal shows it: widths in columns, cut and padded by display width, so CJK and
//! emoji line up and are never cut mid-character.

/// Terminal columns of `text` (East Asian wide characters and emoji count as two).
pub(crate) fn display_width(text: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(text)
}

/// `text` cut to at most `columns` terminal columns, ending with `…` when cut. The cut falls
/// between characters, and never splits a character from the marks, joiners, variation
/// selectors or skin tones that belong to it.
pub(crate) fn fit(text: &str, columns: usize) -> String {
    if display_width(text) <= columns {
        return text.to_owned();
    }
    if columns == 0 {
        return String::new();
    }
    let room = columns - display_width(ELLIPSIS);
    let mut end = 0;
    let mut used = 0;
    for cluster in clusters(text) {
        used += display_width(cluster);
        if used > room {
            break;
        }
        end += cluster.len();
    }
    format!("{}{ELLIPSIS}", text[..end].trim_end())
}

/// `text` followed by spaces up to `columns` terminal columns (unchanged when wider; [`fit`]
/// it first for a column of fixed width).
pub(crate) fn pad(text: &str, columns: usize) -> String {
    let fill = columns.saturating_sub(display_width(text));
    format!("{text}{}", " ".repeat(fill))
}

const ELLIPSIS: &str = "…";

/// `text` in pieces that are shown together: a character with the zero-width characters after
/// it (combining marks, variation selectors, joiners), the emoji a joiner joins, and skin-tone
/// modifiers.
fn clusters(text: &str) -> impl Iterator<Item = &str> {
    const JOINER: char = '\u{200D}';
    let mut rest = text;
    std::iter::from_fn(move || {
        let mut chars = rest.char_indices();
        let (_, first) = chars.next()?;
        let mut previous = first;
        let end = chars
            .find(|&(_, c)| {
                let attached = previous == JOINER
                    || ('\u{1F3FB}'..='\u{1F3FF}').contains(&c)
                    || unicode_width::UnicodeWidthChar::width(c).unwrap_or(0) == 0;
                previous = c;
                !attached
            })
            .map_or(rest.len(), |(at, _)| at);
        let (cluster, after) = rest.split_at(end);
        rest = after;
        Some(cluster)
    })
}
