//! `--watch`'s screen: the loop's state, the charts, the tasks or workers, the struggle
//! indicators and the agent's last lines, drawn with ratatui from one [`WatchView`].

use chrono::{DateTime, Utc};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Sparkline, Wrap};

use super::format::{fit, long_duration_ms, pad, preview};
use super::messages::{compact_number, cost_text};
use super::report::{StatusReport, TasksReport, WorkerReport};

/// What one screen shows.
pub(crate) struct WatchView {
    pub(crate) report: StatusReport,
    /// The last iterations, oldest first.
    pub(crate) series: Vec<Point>,
    /// The agent's last lines (newest last).
    pub(crate) output: Vec<String>,
    /// Whose output it is (`iteration 3`, `iteration 1, task api`).
    pub(crate) output_of: Option<String>,
    pub(crate) last_activity: Option<DateTime<Utc>>,
    pub(crate) now: DateTime<Utc>,
    /// The run's last events from its journal, as `HH:MM:SS [task] event` (newest last).
    pub(crate) events: Vec<String>,
}

/// One iteration's measures, for the charts.
pub(crate) struct Point {
    pub(crate) iteration: u32,
    pub(crate) tokens: u64,
    pub(crate) cost_usd: f64,
    pub(crate) duration_ms: u64,
    pub(crate) files: usize,
}

/// Styles, or none at all with `NO_COLOR`.
#[derive(Clone, Copy)]
struct Paint {
    colour: bool,
}

impl Paint {
    fn fg(self, colour: Color) -> Style {
        if self.colour {
            Style::new().fg(colour)
        } else {
            Style::new()
        }
    }

    fn bold(self) -> Style {
        if self.colour {
            Style::new().add_modifier(Modifier::BOLD)
        } else {
            Style::new()
        }
    }
}

/// Draws the whole screen.
pub(crate) fn draw(frame: &mut Frame<'_>, view: &WatchView, colour: bool) {
    let paint = Paint { colour };
    let [header, charts, middle, output, footer] = Layout::vertical([
        Constraint::Length(5),
        Constraint::Length(5),
        Constraint::Length(board_height(view)),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(
        Paragraph::new(header_lines(view, paint)).block(Block::bordered().title(" ralph ")),
        header,
    );
    draw_charts(frame, charts, view, paint);
    let [board, struggle] =
        Layout::horizontal([Constraint::Percentage(65), Constraint::Percentage(35)]).areas(middle);
    frame.render_widget(board_widget(view, paint), board);
    frame.render_widget(struggle_widget(view), struggle);
    // The journal's events beside the agent's output, when the terminal is wide enough.
    if output.width >= 100 {
        let [agent, events] =
            Layout::horizontal([Constraint::Percentage(65), Constraint::Percentage(35)])
                .areas(output);
        frame.render_widget(output_widget(view, agent.height), agent);
        frame.render_widget(events_widget(view, events.height), events);
    } else {
        frame.render_widget(output_widget(view, output.height), output);
    }
    frame.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(" q ", paint.bold()),
            Span::raw("quit   (read-only: follows .ralph/ and its event journal)"),
        ])),
        footer,
    );
}

fn header_lines(view: &WatchView, paint: Paint) -> Vec<Line<'static>> {
    let history = &view.report.history;
    let mut first = Vec::new();
    // The second line is short enough for a narrow terminal: the last activity goes there.
    let mut second = vec![format!("{} recorded", iterations(history.iterations))];
    second
        .extend((view.last_activity).map(|at| format!("last activity {} ago", ago(view.now, at))));
    match &view.report.loop_state {
        Some(state) => {
            let colour = match state.state {
                "running" => Color::Green,
                "crashed" => Color::Red,
                _ => Color::Yellow,
            };
            first.push(Span::styled(
                format!("● {}", state.state),
                paint.fg(colour).add_modifier(if paint.colour {
                    Modifier::BOLD
                } else {
                    Modifier::empty()
                }),
            ));
            let max = match state.max_iterations {
                0 => String::new(),
                max => format!(" / {max}"),
            };
            let place = match state.parallel {
                Some(at_once) => format!("parallel run, up to {at_once} tasks at once"),
                None => format!("iteration {}{max}", state.shown_iteration),
            };
            first.push(Span::raw(format!(
                "   {place}   {}{}   elapsed {}",
                state.agent,
                state
                    .model
                    .as_ref()
                    .map_or_else(String::new, |model| format!(" ({model})")),
                long_duration_ms(state.elapsed_ms)
            )));
            if let Some(reason) = &state.stop_reason {
                second.push(format!("stopped: {reason}"));
            }
        }
        None => {
            let ended = if history.recent.last().is_some_and(|r| r.completion_detected) {
                "● completed"
            } else {
                "● finished"
            };
            first.push(Span::styled(ended, paint.fg(Color::Cyan)));
            first.push(Span::raw(format!(
                "   the last run: {} in {}",
                iterations(history.iterations),
                long_duration_ms(history.total_duration_ms)
            )));
        }
    }
    second.push(format!(
        "tokens {}",
        compact_number(history.total_tokens.total())
    ));
    if let Some(cost) = history.total_cost_usd {
        second.push(format!("cost {}", cost_text(cost)));
    }
    let prompt = view
        .report
        .loop_state
        .as_ref()
        .map_or_else(String::new, |state| {
            format!("prompt: {}", preview(&state.prompt, 200))
        });
    vec![
        Line::from(first),
        Line::raw(second.join("   ")),
        Line::raw(prompt),
    ]
}

fn draw_charts(frame: &mut Frame<'_>, area: Rect, view: &WatchView, paint: Paint) {
    let areas = Layout::horizontal([Constraint::Ratio(1, 4); 4]).split(area);
    let width = usize::from(area.width / 4).saturating_sub(2).max(1);
    let recent = &view.series[view.series.len().saturating_sub(width)..];
    let first = recent.first().map_or(0, |point| point.iteration);
    let last = recent.last().map_or(0, |point| point.iteration);
    let range = match recent.len() {
        0 => String::new(),
        1 => format!(" {first}"),
        _ => format!(" {first}–{last}"),
    };
    let charts: [(&str, Vec<u64>, Color); 4] = [
        (
            "tokens",
            recent.iter().map(|p| p.tokens).collect(),
            Color::Blue,
        ),
        (
            "cost",
            // In hundredths of a cent: bars need whole numbers.
            recent
                .iter()
                .map(|p| (p.cost_usd.max(0.0) * 10_000.0).round() as u64)
                .collect(),
            Color::Magenta,
        ),
        (
            "duration",
            recent.iter().map(|p| p.duration_ms).collect(),
            Color::Green,
        ),
        (
            "files",
            recent.iter().map(|p| p.files as u64).collect(),
            Color::Yellow,
        ),
    ];
    for ((name, data, colour), area) in charts.into_iter().zip(areas.iter()) {
        let title = chart_title(name, "duration", &range, area.width);
        frame.render_widget(
            Sparkline::default()
                .block(Block::bordered().title(title))
                .data(&data)
                .style(paint.fg(colour)),
            *area,
        );
    }
}

/// The title of chart `name`, `width` columns wide, in the longest form in which the longest
/// name (`longest`) leaves a piece of the top border on each side, so the four charts match:
/// ` tokens / iteration 1–9 `, ` tokens 1–9 `, ` tokens `.
fn chart_title(name: &str, longest: &str, range: &str, width: u16) -> String {
    let room = usize::from(width).saturating_sub(4);
    let forms = |name: &str| {
        [
            format!(" {name} / iteration{range} "),
            format!(" {name}{range} "),
            format!(" {name} "),
        ]
    };
    forms(longest)
        .iter()
        .position(|title| title.chars().count() <= room)
        .map(|form| forms(name)[form].clone())
        .unwrap_or_default()
}

/// Rows for the tasks or workers board: all of them, within reason.
fn board_height(view: &WatchView) -> u16 {
    let rows = if view.report.workers.is_empty() {
        view.report
            .tasks
            .as_ref()
            .map_or(1, |tasks| tasks.tasks.len())
    } else {
        view.report.workers.len() + 1
    };
    u16::try_from(rows.clamp(3, 12) + 2).unwrap_or(14)
}

fn board_widget(view: &WatchView, paint: Paint) -> Paragraph<'static> {
    if !view.report.workers.is_empty() {
        return workers_widget(&view.report.workers, view.now);
    }
    match &view.report.tasks {
        Some(tasks) if tasks.file == "found" => tasks_widget(tasks, paint),
        _ => Paragraph::new("no task list (tasks mode is off)")
            .block(Block::bordered().title(" tasks ")),
    }
}

fn tasks_widget(tasks: &TasksReport, paint: Paint) -> Paragraph<'static> {
    let lines: Vec<Line<'static>> = tasks
        .tasks
        .iter()
        .map(|task| {
            let (mark, colour) = match task.status {
                "complete" => ("[x]", Color::Green),
                "in_progress" => ("[/]", Color::Yellow),
                "failed" => ("[!]", Color::Red),
                _ => ("[ ]", Color::Reset),
            };
            let waiting = if task.waiting_for.is_empty() {
                String::new()
            } else {
                format!("  (waits for {})", task.waiting_for.join(", "))
            };
            Line::from(vec![
                Span::styled(mark, paint.fg(colour)),
                Span::raw(format!(" {}. {}{waiting}", task.number, task.text)),
            ])
        })
        .collect();
    let title = format!(
        " tasks {}/{} done{} ",
        tasks.complete,
        tasks.total,
        if tasks.failed > 0 {
            format!(", {} failed", tasks.failed)
        } else {
            String::new()
        }
    );
    Paragraph::new(lines).block(Block::bordered().title(title))
}

fn workers_widget(workers: &[WorkerReport], now: DateTime<Utc>) -> Paragraph<'static> {
    let mut lines = vec![Line::raw(format!(
        "{:<20} {:<9} {:>9} {:>10} {:>8} {:>10}",
        "task", "state", "iteration", "tokens", "cost", "active"
    ))];
    for worker in workers {
        let iteration = match (worker.shown_iteration, worker.max_iterations) {
            (Some(i), Some(max)) if max > 0 => format!("{i}/{max}"),
            (Some(i), _) => i.to_string(),
            _ => "-".to_owned(),
        };
        let cost = worker.cost_usd.map_or_else(|| "-".to_owned(), cost_text);
        let active = worker
            .last_activity
            .map_or_else(|| "-".to_owned(), |at| format!("{} ago", ago(now, at)));
        lines.push(Line::raw(format!(
            "{} {:<9} {:>9} {:>10} {:>8} {:>10}",
            pad(&fit(&worker.task, 20), 20),
            worker.state,
            iteration,
            compact_number(worker.tokens),
            cost,
            active
        )));
    }
    Paragraph::new(lines).block(Block::bordered().title(" workers "))
}

fn struggle_widget(view: &WatchView) -> Paragraph<'static> {
    let struggle = &view.report.history.struggle;
    let mut lines = vec![
        Line::raw(format!(
            "no progress: {}",
            super::format::plural(u64::from(struggle.no_progress_iterations), "iteration")
        )),
        Line::raw(format!("short iterations: {}", struggle.short_iterations)),
    ];
    let mut errors: Vec<(&String, &u32)> = struggle.repeated_errors.iter().collect();
    errors.sort_by(|a, b| b.1.cmp(a.1));
    for (error, count) in errors.into_iter().take(5) {
        lines.push(Line::raw(format!("{count}× {}", preview(error, 60))));
    }
    Paragraph::new(lines)
        .wrap(Wrap { trim: true })
        .block(Block::bordered().title(" struggle "))
}

fn output_widget(view: &WatchView, height: u16) -> Paragraph<'static> {
    let rows = usize::from(height.saturating_sub(2));
    let shown = &view.output[view.output.len().saturating_sub(rows)..];
    let title = match &view.output_of {
        Some(of) => format!(" agent output, {of} "),
        None => " agent output ".to_owned(),
    };
    let lines: Vec<Line<'static>> = if shown.is_empty() {
        vec![Line::raw("(nothing yet)")]
    } else {
        shown.iter().map(|line| Line::raw(line.clone())).collect()
    };
    Paragraph::new(lines).block(Block::bordered().title(title))
}

fn events_widget(view: &WatchView, height: u16) -> Paragraph<'static> {
    let rows = usize::from(height.saturating_sub(2));
    let shown = &view.events[view.events.len().saturating_sub(rows)..];
    let lines: Vec<Line<'static>> = if shown.is_empty() {
        vec![Line::raw("(none yet)")]
    } else {
        shown.iter().map(|line| Line::raw(line.clone())).collect()
    };
    Paragraph::new(lines).block(Block::bordered().title(" events "))
}

fn ago(now: DateTime<Utc>, at: DateTime<Utc>) -> String {
    let ms = (now - at).num_milliseconds().max(0);
    long_duration_ms(u64::try_from(ms).unwrap_or(0))
}

fn iterations(count: usize) -> String {
    super::format::plural(count as u64, "iteration")
}

#[cfg(test)]
mod tests {
    use super::chart_title;

    #[test]
    fn a_chart_title_leaves_the_border_its_corners() {
        let title = |name, range, width| chart_title(name, "duration", range, width);
        assert_eq!(title("tokens", " 1–2", 40), " tokens / iteration 1–2 ");
        // 100 columns: four charts of 25, all titled alike.
        assert_eq!(title("tokens", " 1–2", 25), " tokens 1–2 ");
        assert_eq!(title("duration", " 1–2", 25), " duration 1–2 ");
        assert_eq!(title("cost", " 10–19", 15), " cost ");
        assert_eq!(title("duration", " 10–19", 8), "");
        for width in 0..60 {
            let shown = title("duration", " 100–199", width);
            assert!(shown.chars().count() + 4 <= usize::from(width) || shown.is_empty());
        }
    }
}
