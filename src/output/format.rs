//! Pure text formatting shared by everything ralph prints: durations, rules, boxes, tool counts.

use std::collections::BTreeMap;

pub(crate) use crate::text::{display_width, fit, pad};
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

/// `15m`, `2s`, `1h30m`, `1m5s`: the parts that are not zero, with no spaces (a timeout as a
/// person would write it).
pub(crate) fn compact_duration(duration: Duration) -> String {
    let total = duration.as_secs();
    let (hours, minutes, seconds) = (total / 3600, (total % 3600) / 60, total % 60);
    let parts = [(hours, "h"), (minutes, "m"), (seconds, "s")];
    let text: String = (parts.iter())
        .filter(|(count, _)| *count > 0)
        .map(|(count, unit)| format!("{count}{unit}"))
        .collect();
    if text.is_empty() {
        format!("{}ms", duration.as_millis())
    } else {
        text
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

/// `text` collapsed to one line and cut to `columns` terminal columns (see [`fit`]).
pub(crate) fn preview(text: &str, columns: usize) -> String {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    fit(&collapsed, columns)
}

/// Where a loop stopped that ended after an iteration (`last`: the last that ran, 0 for none):
/// `after iteration 3`, or `before iteration 1`.
pub(crate) fn stop_point(last: u32) -> String {
    if last == 0 {
        "before iteration 1".to_owned()
    } else {
        format!("after iteration {last}")
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

/// The cost worth showing: a reported cost, unless it is zero for an attempt that counted no
/// tokens either (an agent refused by its provider reports `$0` for nothing spent).
pub(crate) fn spent(cost: Option<f64>, tokens: u64) -> Option<f64> {
    cost.filter(|cost| *cost > 0.0 || tokens > 0)
}

/// `$0.0123`, `$1.23`.
pub(crate) fn cost_text(cost: f64) -> String {
    if cost < 1.0 {
        format!("${cost:.4}")
    } else {
        format!("${cost:.2}")
    }
}

/// `950`, `15.5k`, `1.2M`.
pub(crate) fn compact_number(n: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "display only")]
    let value = n as f64;
    if n >= 1_000_000 {
        format!("{:.1}M", value / 1_000_000.0)
    } else if n >= 1_000 {
        format!("{:.1}k", value / 1_000.0)
    } else {
        n.to_string()
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
        assert_eq!(preview(&"x".repeat(80), 80), "x".repeat(80));
        assert_eq!(preview(&"x".repeat(81), 80), format!("{}…", "x".repeat(79)));
        assert_eq!(preview("任务\n说明 很长", 8), "任务 说…");
    }

    #[test]
    fn fit_keeps_text_that_fits_exactly() {
        assert_eq!(fit("abcde", 5), "abcde");
        assert_eq!(fit("漢字漢字", 8), "漢字漢字");
        assert_eq!(fit("✅ done", 7), "✅ done");
        assert_eq!(fit("", 0), "");
        assert_eq!(fit("abc", 0), "");
        assert_eq!(fit("abc", 1), "…");
    }

    #[test]
    fn fit_cuts_ascii_by_columns() {
        assert_eq!(fit("abcdef", 5), "abcd…");
        // No space before the ellipsis.
        assert_eq!(fit("ab cdef", 4), "ab…");
    }

    #[test]
    fn fit_cuts_cjk_between_characters() {
        assert_eq!(fit("漢字漢字", 7), "漢字漢…");
        // A wide character that does not fit whole is left out: one column stays empty.
        assert_eq!(fit("漢字漢字", 6), "漢字…");
        assert_eq!(display_width(&fit("漢字漢字", 6)), 5);
        assert_eq!(fit("漢字", 2), "…");
    }

    #[test]
    fn fit_keeps_emoji_whole() {
        assert_eq!(fit("✅ done", 3), "✅…");
        // A joined family, a skin tone and an emoji variation selector are one emoji each.
        let family = "👨\u{200D}👩\u{200D}👧";
        assert_eq!(display_width(family), 2);
        assert_eq!(fit(&format!("{family}{family}"), 3), format!("{family}…"));
        assert_eq!(fit("👍🏽👍🏽", 3), "👍🏽…");
        assert_eq!(fit("⏸️⏸️", 3), "⏸️…");
        // A combining accent stays on its letter.
        assert_eq!(
            fit("e\u{301}e\u{301}e\u{301}", 3),
            "e\u{301}e\u{301}e\u{301}"
        );
        assert_eq!(fit("e\u{301}e\u{301}e\u{301}", 2), "e\u{301}…");
    }

    #[test]
    fn fit_cuts_mixed_text() {
        assert_eq!(fit("任务 task 一", 12), "任务 task 一");
        assert_eq!(fit("任务 task 一", 11), "任务 task…");
        assert_eq!(fit("任务 task 一", 9), "任务 tas…");
        assert_eq!(fit("a漢b字", 4), "a漢…");
        assert_eq!(fit("a漢b字", 3), "a…");
    }

    #[test]
    fn pad_fills_to_display_width() {
        assert_eq!(pad("漢字", 6), "漢字  ");
        assert_eq!(pad("ab", 4), "ab  ");
        assert_eq!(pad("✅", 3), "✅ ");
        assert_eq!(pad("漢字", 4), "漢字");
        assert_eq!(pad("漢字", 3), "漢字", "wider text is left as it is");
    }

    #[test]
    fn fitted_and_padded_text_is_exactly_as_wide_as_its_column() {
        let texts = [
            "plain ascii text",
            "构建一个接口并写测试",
            "Fix 登录 bug 🐛 now",
            "👨\u{200D}👩\u{200D}👧 family ⏸️ paused",
        ];
        for text in texts {
            for columns in 0..=24 {
                let cell = pad(&fit(text, columns), columns);
                assert_eq!(
                    display_width(&cell),
                    columns,
                    "{text:?} in {columns}: {cell:?}"
                );
                assert!(text.starts_with(cell.trim_end().trim_end_matches('…')));
            }
        }
    }
}
