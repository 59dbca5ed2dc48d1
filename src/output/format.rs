//! Pure text formatting shared by everything ralph prints: durations, rules, boxes, tool counts.

use std::collections::BTreeMap;
use std::time::Duration;

/// Width of rules and boxes, as in the reference.
pub(crate) const WIDTH: usize = 68;

/// `m:ss`, or `h:mm:ss` from one hour (heartbeat, iteration summary).
pub(crate) fn short_duration(duration: Duration) -> String {
    let total = duration.as_secs();
    let (hours, minutes, seconds) = (total / 3600, (total % 3600) / 60, total % 60);
    if hours > 0 {
        format!("{hours}:{minutes:02}:{seconds:02}")
    } else {
        format!("{minutes}:{seconds:02}")
    }
}

/// `Xh Ym Zs`, `Ym Zs` or `Zs` (boxes, status).
pub(crate) fn long_duration(duration: Duration) -> String {
    let total = duration.as_secs();
    let (hours, minutes, seconds) = (total / 3600, (total % 3600) / 60, total % 60);
    if hours > 0 {
        format!("{hours}h {minutes}m {seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m {seconds}s")
    } else {
        format!("{seconds}s")
    }
}

/// Milliseconds as a [`long_duration`].
pub(crate) fn long_duration_ms(ms: u64) -> String {
    long_duration(Duration::from_millis(ms))
}

/// A horizontal rule of `c`.
pub(crate) fn rule(c: char) -> String {
    std::iter::repeat_n(c, WIDTH).collect()
}

/// A 68-column double box around `lines`.
pub(crate) fn boxed(lines: &[String]) -> Vec<String> {
    let inner = WIDTH - 2;
    let mut out = vec![format!("╔{}╗", "═".repeat(inner))];
    for line in lines {
        let width = display_width(line);
        let padding = inner.saturating_sub(width + 2);
        out.push(format!("║  {line}{}║", " ".repeat(padding)));
    }
    out.push(format!("╚{}╝", "═".repeat(inner)));
    out
}

/// Terminal columns of `text` (East Asian wide characters and emoji count as two).
pub(crate) fn display_width(text: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(text)
}

/// Tools sorted by count (descending, then name), as `(name, count)`.
pub(crate) fn ranked_tools(tools: &BTreeMap<String, u64>) -> Vec<(&str, u64)> {
    let mut ranked: Vec<(&str, u64)> = tools
        .iter()
        .map(|(name, &count)| (name.as_str(), count))
        .collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    ranked
}

/// `Bash 3 • Read 2 • +1 more`: the six most used tools.
pub(crate) fn tool_summary(tools: &BTreeMap<String, u64>) -> String {
    const MAX_ITEMS: usize = 6;
    let ranked = ranked_tools(tools);
    let mut parts: Vec<String> = ranked
        .iter()
        .take(MAX_ITEMS)
        .map(|(name, count)| format!("{name} {count}"))
        .collect();
    if ranked.len() > MAX_ITEMS {
        parts.push(format!("+{} more", ranked.len() - MAX_ITEMS));
    }
    parts.join(" • ")
}

/// The prompt collapsed to one line and cut to `max` characters (with `...` when cut).
pub(crate) fn preview(text: &str, max: usize) -> String {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() > max {
        format!("{}...", collapsed.chars().take(max).collect::<String>())
    } else {
        collapsed
    }
}

/// `1 iteration`, `3 iterations`.
pub(crate) fn plural(count: u64, word: &str) -> String {
    if count == 1 {
        format!("{count} {word}")
    } else {
        format!("{count} {word}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_match_the_reference_formats() {
        assert_eq!(short_duration(Duration::from_millis(65_900)), "1:05");
        assert_eq!(short_duration(Duration::from_secs(3_725)), "1:02:05");
        assert_eq!(long_duration(Duration::from_secs(5)), "5s");
        assert_eq!(long_duration(Duration::from_secs(125)), "2m 5s");
        assert_eq!(long_duration(Duration::from_secs(3_725)), "1h 2m 5s");
    }

    #[test]
    fn boxes_are_68_columns_wide() {
        for line in boxed(&[
            "✅ Done".to_owned(),
            "plain".to_owned(),
            "⚠️  warned".to_owned(),
            "任务：构建一个接口".to_owned(),
        ]) {
            assert_eq!(display_width(&line), WIDTH, "{line}");
        }
        assert_eq!(display_width("漢字"), 4);
    }

    #[test]
    fn tool_summary_ranks_and_truncates() {
        let tools: BTreeMap<String, u64> = [
            ("Read", 2),
            ("Bash", 5),
            ("Edit", 2),
            ("a", 1),
            ("b", 1),
            ("c", 1),
            ("d", 1),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        assert_eq!(
            tool_summary(&tools),
            "Bash 5 • Edit 2 • Read 2 • a 1 • b 1 • c 1 • +1 more"
        );
        assert_eq!(tool_summary(&BTreeMap::new()), "");
    }

    #[test]
    fn preview_collapses_and_cuts() {
        assert_eq!(preview("a\n\n b", 80), "a b");
        assert_eq!(
            preview(&"x".repeat(81), 80),
            format!("{}...", "x".repeat(80))
        );
    }
}
