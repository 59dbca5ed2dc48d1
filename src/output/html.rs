//! `--report`'s page: one self-contained HTML file (inline CSS, SVG charts, no script, nothing
//! loaded from the network) that reads well on a screen, a phone and paper.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use crate::storage::history::{History, IterationRecord};
use crate::storage::state::LoopState;
use crate::storage::tasks::{TaskList, TaskStatus};

use super::format::long_duration_ms;
use super::messages::{compact_number, cost_text};

/// Everything the page shows.
pub(crate) struct Page<'a> {
    /// The repository's (or directory's) name.
    pub(crate) project: &'a str,
    pub(crate) branch: Option<&'a str>,
    pub(crate) generated_at: DateTime<Utc>,
    pub(crate) state: Option<&'a LoopState>,
    pub(crate) running: bool,
    /// How the run ended, when the loop itself writes the page at its end (the state may be
    /// gone by then), with its prompt.
    pub(crate) ending: Option<(&'a str, &'a str)>,
    pub(crate) history: &'a History,
    pub(crate) tasks: Option<&'a TaskList>,
    /// ralph's commits, newest first: (short hash, date, subject).
    pub(crate) commits: &'a [(String, String, String)],
    /// What goes before a history record's `log` path to link it from the page.
    pub(crate) log_prefix: &'a str,
}

const STYLE: &str = "
:root { color-scheme: light dark; --line: #8884; --muted: #888; --ok: #1a7f37; --bad: #cf222e; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 0 auto;
  padding: 1rem; max-width: 72rem; }
h1 { font-size: 1.5rem; margin: 0 0 .25rem; } h2 { font-size: 1.15rem; margin: 1.75rem 0 .5rem; }
.muted { color: var(--muted); } .ok { color: var(--ok); } .bad { color: var(--bad); }
dl.summary { display: grid; grid-template-columns: repeat(auto-fill, minmax(11rem, 1fr));
  gap: .5rem 1rem; margin: 1rem 0; }
dl.summary div { border: 1px solid var(--line); border-radius: 6px; padding: .4rem .6rem; }
dt { font-size: .8rem; color: var(--muted); } dd { margin: 0; font-weight: 600; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(20rem, 1fr)); gap: 1rem; }
figure { margin: 0; border: 1px solid var(--line); border-radius: 6px; padding: .5rem; }
figcaption { font-size: .85rem; margin-bottom: .25rem; }
svg { width: 100%; height: auto; display: block; }
svg .bar { fill: #3b82f6; } svg .axis { stroke: var(--muted); stroke-width: 1; }
svg text { fill: var(--muted); font-size: 11px; }
.table { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: .85rem; }
th, td { border-bottom: 1px solid var(--line); padding: .3rem .4rem; text-align: left;
  vertical-align: top; }
td.num, th.num { text-align: right; white-space: nowrap; }
ul.tasks { list-style: none; padding: 0; } ul.tasks li { padding: .15rem 0; }
pre { white-space: pre-wrap; word-break: break-word; font-size: .8rem; margin: .25rem 0; }
@media print { body { max-width: none; font-size: 11px; } figure, tr { break-inside: avoid; } }
";

/// The whole page.
pub(crate) fn page(page: &Page<'_>) -> String {
    let mut html = String::with_capacity(16 * 1024 + page.history.iterations.len() * 600);
    let title = format!("ralph report: {}", page.project);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape(&title)
    );
    summary(&mut html, page);
    charts(&mut html, &page.history.iterations);
    if let Some(tasks) = page.tasks {
        tasks_section(&mut html, tasks);
    }
    iterations(&mut html, page);
    verification(&mut html, page.history);
    tamper_evidence(&mut html, page.history);
    commits(&mut html, page.commits);
    let _ = write!(
        html,
        "<p class=\"muted\">Written by ralph {} at {} from the files in .ralph/.</p>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION"),
        page.generated_at.format("%Y-%m-%d %H:%M:%S UTC")
    );
    html
}

fn summary(html: &mut String, page: &Page<'_>) {
    let history = page.history;
    let last = history.iterations.last();
    let outcome = match page.state {
        _ if page.ending.is_some() => page.ending.map_or_else(String::new, |e| e.0.to_owned()),
        Some(_) if page.running => "running".to_owned(),
        Some(state) => state
            .stop_reason
            .clone()
            .unwrap_or_else(|| "stopped".to_owned()),
        None if last.is_some_and(|r| r.completion_detected) => "completed".to_owned(),
        None => "finished".to_owned(),
    };
    let branch = page
        .branch
        .map_or_else(String::new, |branch| format!(" ({})", escape(branch)));
    let _ = writeln!(
        html,
        "<h1>ralph report: {}{branch}</h1>",
        escape(page.project)
    );
    let prompt = (page.ending.map(|e| e.1)).or(page.state.map(|s| s.prompt.as_str()));
    if let Some(prompt) = prompt {
        let _ = writeln!(
            html,
            "<p>{}</p>",
            escape(prompt.lines().next().unwrap_or(""))
        );
    }
    let numbers = history.iteration_count();
    let mut items = vec![
        ("Outcome", outcome),
        ("Iterations", numbers.to_string()),
        ("Time", long_duration_ms(history.total_duration_ms)),
        ("Tokens", compact_number(history.total_tokens.total())),
        (
            "Cost",
            history
                .total_cost_usd
                .map_or_else(|| "not reported".to_owned(), cost_text),
        ),
        ("Commits", page.commits.len().to_string()),
    ];
    if let Some(first) = history.iterations.first() {
        items.push((
            "Started",
            first.started_at.format("%Y-%m-%d %H:%M UTC").to_string(),
        ));
    }
    html.push_str("<dl class=\"summary\">\n");
    for (name, value) in items {
        let _ = writeln!(
            html,
            "<div><dt>{name}</dt><dd>{}</dd></div>",
            escape(&value)
        );
    }
    html.push_str("</dl>\n");
}

/// A chart's name, the value it draws of a record, and how a value reads.
type Measure = (&'static str, fn(&IterationRecord) -> f64, fn(f64) -> String);

fn charts(html: &mut String, records: &[IterationRecord]) {
    if records.is_empty() {
        return;
    }
    html.push_str("<h2>Per iteration</h2>\n<div class=\"charts\">\n");
    let measures: [Measure; 4] = [
        (
            "Duration",
            |r| r.duration_ms as f64,
            |v| long_duration_ms(v as u64),
        ),
        (
            "Tokens",
            |r| r.tokens.map_or(0, |u| u.total()) as f64,
            |v| compact_number(v as u64),
        ),
        ("Cost", |r| r.cost_usd.unwrap_or(0.0), cost_text),
        (
            "Files changed",
            |r| r.files_modified.len() as f64,
            |v| format!("{v:.0}"),
        ),
    ];
    for (name, value, label) in &measures {
        let values: Vec<(u32, f64)> = records.iter().map(|r| (r.iteration, value(r))).collect();
        chart(html, name, &values, *label);
    }
    html.push_str("</div>\n");
}

/// One bar chart as inline SVG: a bar per record, its value in the bar's tooltip.
fn chart(html: &mut String, name: &str, values: &[(u32, f64)], label: fn(f64) -> String) {
    const WIDTH: f64 = 600.0;
    const HEIGHT: f64 = 150.0;
    const LEFT: f64 = 4.0;
    const BOTTOM: f64 = 18.0;
    let max = values.iter().map(|(_, v)| *v).fold(0.0_f64, f64::max);
    let plot = HEIGHT - BOTTOM;
    let step = (WIDTH - LEFT) / values.len().max(1) as f64;
    let _ = write!(
        html,
        "<figure><figcaption>{name} <span class=\"muted\">(highest {})</span></figcaption>\n\
         <svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"{name} per iteration\">\n",
        escape(&label(max))
    );
    for (at, (iteration, value)) in values.iter().enumerate() {
        let height = if max > 0.0 { value / max * plot } else { 0.0 };
        let _ = writeln!(
            html,
            "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{height:.1}\"><title>iteration {iteration}: {}</title></rect>",
            LEFT + at as f64 * step,
            plot - height,
            (step * 0.8).clamp(0.5, 40.0),
            escape(&label(*value))
        );
    }
    let first = values.first().map_or(0, |(n, _)| *n);
    let last = values.last().map_or(0, |(n, _)| *n);
    let _ = write!(
        html,
        "<line class=\"axis\" x1=\"0\" y1=\"{plot}\" x2=\"{WIDTH}\" y2=\"{plot}\"/>\n\
         <text x=\"{LEFT}\" y=\"{HEIGHT}\">{first}</text>\
         <text x=\"{WIDTH}\" y=\"{HEIGHT}\" text-anchor=\"end\">{last}</text>\n</svg></figure>\n"
    );
}

fn tasks_section(html: &mut String, tasks: &TaskList) {
    let done = tasks.count(TaskStatus::Complete);
    let _ = write!(
        html,
        "<h2>Tasks <span class=\"muted\">{done} of {} done</span></h2>\n<ul class=\"tasks\">\n",
        tasks.tasks.len()
    );
    for task in &tasks.tasks {
        let (mark, class) = match task.status {
            TaskStatus::Complete => ("✅", "ok"),
            TaskStatus::InProgress => ("🔄", ""),
            TaskStatus::Failed => ("❌", "bad"),
            TaskStatus::Todo => ("⏸️", "muted"),
        };
        let id = task
            .id()
            .map_or_else(String::new, |id| format!(" <code>{}</code>", escape(id)));
        let _ = writeln!(
            html,
            "<li class=\"{class}\">{mark} {}. {}{id}</li>",
            task.number,
            escape(&task.text)
        );
    }
    html.push_str("</ul>\n");
}

fn iterations(html: &mut String, page: &Page<'_>) {
    let records = &page.history.iterations;
    let _ = write!(
        html,
        "<h2>Iterations <span class=\"muted\">{} recorded</span></h2>\n<div class=\"table\"><table>\n\
         <thead><tr><th class=\"num\">#</th><th>Started</th><th class=\"num\">Time</th><th>Agent</th>\
         <th>Task</th><th class=\"num\">Exit</th><th class=\"num\">Files</th><th class=\"num\">Tokens</th>\
         <th class=\"num\">Cost</th><th>Outcome</th><th>Log</th></tr></thead>\n<tbody>\n",
        records.len()
    );
    for record in records {
        iteration_row(html, record, page.log_prefix);
    }
    html.push_str("</tbody></table></div>\n");
}

fn iteration_row(html: &mut String, record: &IterationRecord, log_prefix: &str) {
    let agent = match (&record.agent, &record.model) {
        (Some(agent), Some(model)) => format!("{agent} ({model})"),
        (Some(agent), None) => agent.clone(),
        _ => String::new(),
    };
    let mut outcome = Vec::new();
    if record.completion_detected {
        outcome.push("<span class=\"ok\">promise kept</span>".to_owned());
    }
    if let Some(refused) = &record.completion_refused {
        outcome.push(format!("refused: {}", escape(refused)));
    }
    if let Some(refused) = &record.merge_refused {
        outcome.push(format!(
            "<span class=\"bad\">merge refused: {}</span>",
            escape(refused)
        ));
    }
    if record.interrupted {
        outcome.push("interrupted".to_owned());
    }
    if !record.protected_changes.is_empty() {
        outcome.push(format!(
            "<span class=\"bad\">protected files put back: {}</span>",
            escape(&record.protected_changes.join(", "))
        ));
    }
    if let Some(failure) = &record.failure {
        outcome.push(format!(
            "<span class=\"bad\">{}</span>",
            escape(&failure.message)
        ));
    }
    for error in record.errors.iter().take(5) {
        outcome.push(format!("<span class=\"bad\">{}</span>", escape(error)));
    }
    outcome.extend(record.questions.iter().map(question));
    let log = record.log.as_deref().map_or_else(String::new, |log| {
        format!(
            "<a href=\"{}\">log</a>",
            escape(&format!("{log_prefix}{log}"))
        )
    });
    let _ = writeln!(
        html,
        "<tr class=\"iteration\" id=\"iteration-{n}\"><td class=\"num\">{n}</td><td>{}</td><td class=\"num\">{}</td>\
         <td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
         <td class=\"num\">{}</td><td>{}</td><td>{log}</td></tr>",
        record.started_at.format("%m-%d %H:%M:%S"),
        long_duration_ms(record.duration_ms),
        escape(&agent),
        escape(record.task.as_deref().unwrap_or("")),
        record.exit_code,
        record.files_modified.len(),
        record
            .tokens
            .map_or_else(String::new, |u| compact_number(u.total())),
        record.cost_usd.map_or_else(String::new, cost_text),
        outcome.join("<br>"),
        n = record.iteration,
    );
}

/// A question the agent asked, its answer, who gave it and when.
fn question(asked: &crate::storage::questions::Question) -> String {
    use crate::storage::questions::Status;
    let answer = match (asked.status, &asked.answer) {
        (Status::Answered, Some(answer)) => format!(
            "answered by {} at {}: <b>{}</b>",
            escape(&answer.by),
            answer.at.format("%m-%d %H:%M:%S"),
            escape(&answer.text)
        ),
        (Status::TimedOut, _) => "no answer in time: the agent decided itself".to_owned(),
        _ => "withdrawn".to_owned(),
    };
    format!(
        "<span class=\"question\">asked ({}): {} — {answer}</span>",
        escape(&asked.id),
        escape(&asked.question)
    )
}

/// Every check: those of an iteration (in the task's tree; the `--holdout` ones, which the agent
/// never saw, as `holdout`), then those of the merge gate (on a task's work merged with the
/// base), each with its task.
fn verification(html: &mut String, history: &crate::storage::history::History) {
    let of_iterations = (history.iterations.iter()).flat_map(|record| {
        let task = record.task_id.as_deref().or(record.task.as_deref());
        let seen = (record.verification.iter()).map(move |check| (check, "iteration"));
        let hidden = (record.holdout.iter()).map(move |check| (check, "holdout"));
        seen.chain(hidden)
            .map(move |(check, place)| (record.iteration.to_string(), task, place, check))
    });
    let of_gate = (history.gates.iter()).map(|gate| {
        (
            String::new(),
            Some(gate.task.as_str()),
            "merge gate",
            &gate.check,
        )
    });
    let checked: Vec<_> = of_iterations.chain(of_gate).collect();
    if checked.is_empty() {
        return;
    }
    html.push_str("<h2>Verification</h2>\n<div class=\"table\"><table>\n<thead><tr><th class=\"num\">#</th><th>Task</th><th>Where</th><th>Command</th><th>Result</th><th>Output</th></tr></thead>\n<tbody>\n");
    for (iteration, task, place, check) in checked {
        let result = if check.passed {
            "<span class=\"ok\">passed</span>".to_owned()
        } else {
            format!("<span class=\"bad\">{}</span>", escape(&check.outcome()))
        };
        let _ = writeln!(
            html,
            "<tr><td class=\"num\">{iteration}</td><td>{}</td><td>{place}</td><td><code>{}</code></td><td>{result}</td><td><pre>{}</pre></td></tr>",
            escape(task.unwrap_or("")),
            escape(&check.command),
            escape(&check.output_tail)
        );
    }
    html.push_str("</tbody></table></div>\n");
}

/// Per task (or the loop), what the checks the agent could not change came to: the protected
/// files put back, the holdout checks that failed of those run, and whether the completion was
/// judged on the sealed protected files (its checks carry their hash). Shown when any of it
/// happened.
fn tamper_evidence(html: &mut String, history: &crate::storage::history::History) {
    #[derive(Default)]
    struct Evidence {
        put_back: std::collections::BTreeSet<String>,
        holdout_failed: usize,
        holdout_run: usize,
        sealed: Option<String>,
    }
    let mut tasks: std::collections::BTreeMap<String, Evidence> = Default::default();
    for record in &history.iterations {
        let key = (record.task_id.clone().or_else(|| record.task.clone()))
            .unwrap_or_else(|| "the loop".to_owned());
        let evidence = tasks.entry(key).or_default();
        evidence
            .put_back
            .extend(record.protected_changes.iter().cloned());
        evidence.holdout_run += record.holdout.len();
        evidence.holdout_failed += record.holdout.iter().filter(|h| !h.passed).count();
        let accepted = record.completion_detected && record.completion_refused.is_none();
        if accepted
            && let Some(hash) = (record.verification.iter().chain(&record.holdout))
                .find_map(|check| check.protected_tree.clone())
        {
            evidence.sealed = Some(hash);
        }
    }
    tasks.retain(|_, e| !e.put_back.is_empty() || e.holdout_run > 0 || e.sealed.is_some());
    if tasks.is_empty() {
        return;
    }
    html.push_str("<h2>Checks the agent could not change</h2>\n<div class=\"table\"><table>\n<thead><tr><th>Task</th><th>Protected files put back</th><th>Holdout checks failed</th><th>Completion judged on sealed files</th></tr></thead>\n<tbody>\n");
    for (task, evidence) in tasks {
        let put_back: Vec<&str> = evidence.put_back.iter().map(String::as_str).collect();
        let sealed = evidence.sealed.map_or_else(
            || "—".to_owned(),
            |hash| format!("yes (<code>{}</code>)", escape(&hash[..hash.len().min(12)])),
        );
        let _ = writeln!(
            html,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{} of {}</td><td>{sealed}</td></tr>",
            escape(&task),
            escape(&put_back.join(", ")),
            evidence.holdout_failed,
            evidence.holdout_run,
        );
    }
    html.push_str("</tbody></table></div>\n");
}

fn commits(html: &mut String, commits: &[(String, String, String)]) {
    if commits.is_empty() {
        return;
    }
    html.push_str("<h2>Commits</h2>\n<div class=\"table\"><table>\n<thead><tr><th>Commit</th><th>Date</th><th>Subject</th></tr></thead>\n<tbody>\n");
    for (hash, date, subject) in commits {
        let _ = writeln!(
            html,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            escape(hash),
            escape(date),
            escape(subject)
        );
    }
    html.push_str("</tbody></table></div>\n");
}

/// Text made safe for HTML content and attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_for_content_and_attributes() {
        assert_eq!(
            escape(r#"<a href="x">Tom & 'Jerry'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;"
        );
    }
}
