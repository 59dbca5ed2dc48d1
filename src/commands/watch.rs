//! `ralph --watch`: a live, read-only dashboard of the loop in `.ralph/` (or of the last run).
//!
//! Everything shown is read from `.ralph/` files, twice a second at most, without taking any
//! lock: the state, the history, the task list, the workers' folders, the newest iteration log
//! and the event journal (its new lines also bring the next read forward). Drawing is
//! `output/watch.rs`'s.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use crate::agents::{AgentEvent, AgentKind};
use crate::error::fail;
use crate::exit::ExitStatus;
use crate::output::watch::{Point, WatchView};
use crate::storage::logs::{self, Tail};
use crate::storage::{RalphDir, history};

/// How often the files are read again.
const REFRESH: Duration = Duration::from_millis(500);

/// How many iterations the charts show.
const CHART_ITERATIONS: usize = 120;

/// How many of the agent's lines are kept for the output pane.
const OUTPUT_LINES: usize = 200;

/// How many of the journal's events are kept for the events pane.
const EVENT_LINES: usize = 100;

/// How often the journal is looked at for new events between reads.
const JOURNAL_POLL: Duration = Duration::from_millis(100);

/// Shows the dashboard until `q`, Esc or Ctrl+C.
pub(crate) fn watch(dir: &RalphDir, colour: bool) -> anyhow::Result<ExitStatus> {
    if !dir.state().exists() && !dir.history().exists() {
        return Err(fail(format!(
            "nothing to watch in {}: no ralph loop runs here and none has run; start one with ralph \"your prompt\", or run ralph --watch in the directory the loop runs in",
            dir.root().display()
        ))
        .into());
    }
    if !std::io::stdout().is_terminal() {
        return Err(fail(
            "--watch draws on a terminal and standard output is not one; for a one-off view use ralph --status (or ralph --status --json)",
        )
        .into());
    }
    let mut terminal = ratatui::try_init().map_err(|err| {
        // Raw mode may be on already.
        ratatui::restore();
        fail(format!("cannot draw on this terminal: {err}"))
    })?;
    let shown = show(&mut terminal, dir, colour);
    ratatui::restore();
    shown.map_err(|err| fail(format!("the dashboard stopped: {err}")).into())
}

/// Draws, then waits for a key, a resize or the next refresh.
fn show(
    terminal: &mut ratatui::DefaultTerminal,
    dir: &RalphDir,
    colour: bool,
) -> std::io::Result<ExitStatus> {
    let mut journal = Journal::new(dir);
    let mut view = read(dir, journal.events());
    let mut next_read = Instant::now() + REFRESH;
    loop {
        terminal.draw(|frame| crate::output::watch::draw(frame, &view, colour))?;
        let wait = next_read
            .saturating_duration_since(Instant::now())
            .min(JOURNAL_POLL);
        if event::poll(wait)? {
            // A resize needs only the redraw at the top of the loop.
            if let Event::Key(key) = event::read()?
                && key.kind == KeyEventKind::Press
                && quits(key.code, key.modifiers)
            {
                return Ok(ExitStatus::Success);
            }
        }
        // Something happened (a new event in the journal), or it is time anyway.
        if journal.take_new() || Instant::now() >= next_read {
            view = read(dir, journal.events());
            next_read = Instant::now() + REFRESH;
        }
    }
}

fn quits(code: KeyCode, modifiers: KeyModifiers) -> bool {
    matches!(code, KeyCode::Char('q' | 'Q') | KeyCode::Esc)
        || (code == KeyCode::Char('c') && modifiers.contains(KeyModifiers::CONTROL))
}

/// The run's event journal, followed: its last events, formatted for the events pane.
struct Journal {
    reader: crate::journal::Reader,
    events: std::collections::VecDeque<String>,
}

impl Journal {
    fn new(dir: &RalphDir) -> Self {
        let mut journal = Self {
            reader: crate::journal::Reader::new(dir.root()),
            events: std::collections::VecDeque::new(),
        };
        journal.take_new();
        journal
    }

    /// Reads the journal's new lines; whether there were any.
    fn take_new(&mut self) -> bool {
        let lines = self.reader.next_lines();
        let any = !lines.is_empty();
        for (_, line) in lines {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            self.events.push_back(event_summary(&event));
            if self.events.len() > EVENT_LINES {
                self.events.pop_front();
            }
        }
        any
    }

    fn events(&self) -> Vec<String> {
        self.events.iter().cloned().collect()
    }
}

/// `12:04:31 [api] iteration_finished` (the time in UTC, as the journal has it).
fn event_summary(event: &serde_json::Value) -> String {
    let time = event["time"].as_str().unwrap_or_default();
    let clock = time.get(11..19).unwrap_or(time);
    let name = event["event"].as_str().unwrap_or("?");
    match event["task"].as_str() {
        Some(task) => format!("{clock} [{task}] {name}"),
        None => format!("{clock} {name}"),
    }
}

/// Everything the dashboard shows, read from `.ralph/` now.
fn read(dir: &RalphDir, events: Vec<String>) -> WatchView {
    let report = super::status_report(dir);
    let series = history::load_recent(&dir.history(), CHART_ITERATIONS)
        .ok()
        .map(|(history, _)| {
            history
                .iterations
                .iter()
                .map(|record| Point {
                    iteration: record.iteration,
                    tokens: record.tokens.map_or(0, |usage| usage.total()),
                    cost_usd: record.cost_usd.unwrap_or(0.0),
                    duration_ms: record.duration_ms,
                    files: record.files_modified.len(),
                })
                .collect()
        })
        .unwrap_or_default();
    let log = logs::newest(&dir.logs());
    let last_activity = log
        .as_deref()
        .or(Some(dir.history().as_path()))
        .and_then(|path| {
            std::fs::metadata(path)
                .and_then(|meta| meta.modified())
                .ok()
        })
        .map(chrono::DateTime::<chrono::Utc>::from);
    let tail = log.as_deref().and_then(logs::tail);
    let (output_of, output) = tail.map_or((None, Vec::new()), |tail| {
        let state = if tail.ended { "ended" } else { "running" };
        let title = tail.start.clone().map(|start| match start.task {
            Some(task) => format!("iteration {}, task {task} ({state})", start.iteration),
            None => format!("iteration {} ({state})", start.iteration),
        });
        (title, readable(&tail))
    });
    WatchView {
        report,
        series,
        output,
        output_of,
        last_activity,
        now: crate::model::now(),
        events,
    }
}

/// The agent's last lines as a person reads them: for a JSON event stream, its text, tool
/// calls and errors; plain lines as they are.
fn readable(tail: &Tail) -> Vec<String> {
    let agent = tail
        .start
        .as_ref()
        .filter(|start| start.format == "json")
        .and_then(|start| AgentKind::from_id(&start.agent))
        .map(AgentKind::agent);
    let mut lines = Vec::new();
    for record in &tail.lines {
        let Some(line) = record.line.as_deref() else {
            continue;
        };
        let events = agent
            .as_ref()
            .filter(|_| record.stream == "stdout")
            .and_then(|agent| agent.parse_event(line));
        match events {
            Some(events) => lines.extend(events.into_iter().filter_map(event_line)),
            None => lines.extend(line.lines().map(str::to_owned)),
        }
    }
    let excess = lines.len().saturating_sub(OUTPUT_LINES);
    lines.drain(..excess);
    lines
}

fn event_line(event: AgentEvent) -> Option<String> {
    match event {
        // The final message was streamed as text already.
        AgentEvent::Text(text) | AgentEvent::FinalText(text) => {
            Some(text.trim_end().to_owned()).filter(|text| !text.is_empty())
        }
        AgentEvent::Tool { name, detail } => Some(match detail {
            Some(detail) => format!("| {name} {detail}"),
            None => format!("| {name}"),
        }),
        AgentEvent::ToolError(message) => Some(format!("| tool error: {message}")),
        AgentEvent::Failure(failure) => Some(format!("error: {}", failure.message)),
        AgentEvent::Notice(text) => Some(text),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_summed_up_by_its_time_task_and_name() {
        let event = serde_json::json!({"event": "task_merged", "time": "2026-11-26T01:02:03.456Z", "task": "api"});
        assert_eq!(event_summary(&event), "01:02:03 [api] task_merged");
        let run = serde_json::json!({"event": "run_ended", "time": "2026-11-26T01:02:04Z"});
        assert_eq!(event_summary(&run), "01:02:04 run_ended");
    }

    #[test]
    fn the_journal_keeps_its_last_events_and_says_when_new_ones_came() {
        let dir = crate::testing::tempdir().unwrap();
        let ralph = RalphDir::new(dir.path());
        std::fs::create_dir_all(ralph.root()).unwrap();
        let path = ralph.root().join(crate::storage::JOURNAL_FILE);
        let mut journal = Journal::new(&ralph);
        assert!(!journal.take_new());
        let lines: String = (0..EVENT_LINES + 5)
            .map(|n| format!("{{\"event\":\"e{n}\",\"time\":\"2026-01-01T00:00:00Z\"}}\n"))
            .collect();
        std::fs::write(&path, lines).unwrap();
        assert!(journal.take_new());
        let events = journal.events();
        assert_eq!(events.len(), EVENT_LINES);
        assert_eq!(events.last().map(String::as_str), Some("00:00:00 e104"));
        assert!(!journal.take_new());
    }
}
