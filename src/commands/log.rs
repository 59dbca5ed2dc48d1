//! `ralph --log [N] [--raw | --json] [--follow]`: what the agent printed in one iteration.

use std::io::{BufRead as _, BufReader, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::agents::{Agent, AgentKind, OutputFormat};
use crate::error::fail;
use crate::exit::ExitStatus;
use crate::output;
use crate::storage::logs::{self, Record};
use crate::storage::{self, RalphDir, history};
use crate::stream::{OutputHandler, Segment, Source};
use crate::transcript::{DisplayOptions, Transcript};

/// How `--log` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogStyle {
    /// As it was shown live: agent text, tool lines, errors.
    Shown { verbose_tools: bool },
    /// The agent's lines as it printed them.
    Raw,
    /// The log's records, one JSON object a line.
    Json,
}

/// Prints iteration `iteration`'s log (the newest when `None`); with `follow`, keeps printing
/// while it grows, until the iteration ends.
pub(crate) fn show(
    dir: &RalphDir,
    iteration: Option<u32>,
    style: LogStyle,
    follow: bool,
) -> anyhow::Result<ExitStatus> {
    let path = find(dir, iteration)?;
    let file = std::fs::File::open(&path)
        .map_err(|err| fail(format!("cannot read {}: {err}", path.display())))?;
    let mut reader = BufReader::new(file);
    // The first record names the agent and how its output was read.
    let mut first = String::new();
    let _ = reader.read_line(&mut first);
    let start = serde_json::from_str::<Record>(&first)
        .ok()
        .and_then(|record| record.start);
    let agent = start
        .as_ref()
        .and_then(|start| AgentKind::from_id(&start.agent))
        .map(AgentKind::agent);
    let mut view = View::new(style, agent.as_deref(), start.as_ref());
    view.take(first.trim_end());
    let mut line = String::new();
    let mut quiet_since = Instant::now();
    loop {
        line.clear();
        let read = reader.read_line(&mut line).unwrap_or(0);
        if read > 0 && line.ends_with('\n') {
            quiet_since = Instant::now();
            if view.take(line.trim_end()) {
                break;
            }
            continue;
        }
        // A partial last line is read again once it is whole.
        let _ = reader.seek(SeekFrom::Current(-(read as i64)));
        if !follow || gone_quiet(dir, quiet_since) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    view.finish();
    output::flush();
    Ok(ExitStatus::Success)
}

/// Following a log that no running loop writes any more (ralph was killed): stop after a while.
fn gone_quiet(dir: &RalphDir, since: Instant) -> bool {
    since.elapsed() > Duration::from_secs(2) && !storage::lock::loop_is_running(dir)
}

/// The log of `iteration` (the newest when `None`): in `.ralph/logs/`, or where the history
/// record of that iteration says (a parallel task's folder).
fn find(dir: &RalphDir, iteration: Option<u32>) -> anyhow::Result<PathBuf> {
    let found = match iteration {
        None => logs::latest(&dir.logs()).map(|(_, path)| path),
        Some(n) => Some(logs::path(&dir.logs(), n))
            .filter(|path| path.exists())
            .or_else(|| recorded(dir, n)),
    };
    found.ok_or_else(|| {
        let which = iteration.map_or_else(|| "no iteration".to_owned(), |n| format!("iteration {n}"));
        fail(format!(
            "{which} has no log in {}; logs are written from this version of ralph on, and only the last `keep_logs` are kept (see ralph --status for the iterations)",
            dir.logs().display()
        ))
        .into()
    })
}

fn recorded(dir: &RalphDir, iteration: u32) -> Option<PathBuf> {
    let history = history::load(&dir.history()).ok()?;
    history
        .iterations
        .iter()
        .rev()
        .find(|record| record.iteration == iteration)
        .and_then(|record| record.log.as_deref())
        .map(|log| dir.root().join(log))
        .filter(|path: &PathBuf| Path::exists(path))
}

/// Prints records in one style.
struct View<'a> {
    style: LogStyle,
    /// Shows the agent's lines as they were shown live (a built-in agent's log).
    transcript: Option<Transcript<'a>>,
}

impl<'a> View<'a> {
    fn new(style: LogStyle, agent: Option<&'a dyn Agent>, start: Option<&logs::Start>) -> Self {
        let transcript = match (style, agent, start) {
            (LogStyle::Shown { verbose_tools }, Some(agent), Some(start)) => {
                let format = if start.format == "text" {
                    OutputFormat::Text
                } else {
                    OutputFormat::Json
                };
                let display = DisplayOptions {
                    stream: true,
                    verbose_tools,
                    heartbeat: Duration::from_secs(u64::from(u32::MAX)),
                    tool_summary: Duration::ZERO,
                    format,
                };
                Transcript::new(agent, display, Vec::new(), false).ok()
            }
            _ => None,
        };
        Self { style, transcript }
    }

    /// Prints one record (a line of the log); `true` once the end record is reached.
    fn take(&mut self, text: &str) -> bool {
        if self.style == LogStyle::Json {
            output::say(&[text]);
        }
        let Ok(record) = serde_json::from_str::<Record>(text) else {
            return false;
        };
        if record.end.is_some() {
            return true;
        }
        let Some(line) = record.line.as_deref() else {
            return false;
        };
        let stderr = record.stream == "stderr";
        match (self.style, &mut self.transcript) {
            (LogStyle::Json, _) => {}
            (LogStyle::Shown { .. }, Some(transcript)) if record.stream != "ralph" => {
                transcript.on_segment(&Segment {
                    source: if stderr {
                        Source::Stderr
                    } else {
                        Source::Stdout
                    },
                    text: line,
                    starts_line: true,
                    ends_line: true,
                    received: Instant::now(),
                });
            }
            _ if stderr => output::agent_stderr(line, true),
            _ => output::agent_stdout(line, true),
        }
        false
    }

    fn finish(self) {
        if let Some(transcript) = self.transcript {
            transcript.finish();
        }
    }
}
