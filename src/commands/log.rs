//! `ralph --log [N] [--raw | --json] [--follow]`: what the agent printed in one iteration.

use std::io::{BufRead as _, BufReader, Seek as _, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::agents::{Agent, AgentKind, OutputFormat};
use crate::config::LogTarget;
use crate::error::fail;
use crate::exit::ExitStatus;
use crate::output::{self, Voice};
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

/// Prints the log `which` names; with `follow`, keeps printing while it grows, until the
/// iteration ends.
pub(crate) fn show(
    dir: &RalphDir,
    which: &LogTarget,
    style: LogStyle,
    follow: bool,
) -> anyhow::Result<ExitStatus> {
    let path = find(dir, which)?;
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

/// The log `which` names: in `.ralph/logs/`, or where the history record of that iteration says
/// (a parallel task's folder, `.ralph/logs/<task>/`).
pub(crate) fn find(dir: &RalphDir, which: &LogTarget) -> anyhow::Result<PathBuf> {
    let history = history::load(&dir.history()).ok();
    let records = history
        .as_ref()
        .map_or(&[][..], |h| h.iterations.as_slice());
    let logged = |record: &&history::IterationRecord| {
        (record.log.as_deref())
            .map(|log| dir.root().join(log))
            .filter(|path| path.exists())
    };
    let found = match which {
        // The newest log written: the run's last iteration, whichever loop ran it.
        LogTarget::Last => newest(dir),
        LogTarget::Iteration(n) => Some(logs::path(&dir.logs(), *n))
            .filter(|path| path.exists())
            .or_else(|| {
                (records.iter().rev())
                    .filter(|record| record.iteration == *n)
                    .find_map(|record| logged(&record))
            }),
        LogTarget::Task(task, n) => {
            let mine = (records.iter().rev())
                .filter(|record| record.task_id.as_deref() == Some(task.as_str()))
                .filter(|record| n.is_none_or(|n| record.iteration == n));
            let recorded = mine.clone().find_map(|record| logged(&record));
            // A running task's newest log is written before its record.
            recorded.or_else(|| match n {
                Some(n) => Some(logs::path(&dir.logs().join(task), *n)).filter(|p| p.exists()),
                None => logs::latest(&dir.logs().join(task)).map(|(_, path)| path),
            })
        }
    };
    found.ok_or_else(|| fail(missing_log(dir, which, records)).into())
}

/// The newest iteration log: the one written last, in `.ralph/logs/` or in a task's folder there
/// (`--parallel`, `--worker`).
fn newest(dir: &RalphDir) -> Option<PathBuf> {
    let folders = std::fs::read_dir(dir.logs())
        .into_iter()
        .flatten()
        .flatten();
    let task_logs = folders
        .filter(|entry| entry.path().is_dir())
        .filter_map(|entry| logs::latest(&entry.path()).map(|(_, path)| path));
    (logs::latest(&dir.logs()).map(|(_, path)| path).into_iter())
        .chain(task_logs)
        .max_by_key(|path| {
            std::fs::metadata(path)
                .and_then(|meta| meta.modified())
                .ok()
        })
}

/// Why there is no such log, and what to do.
fn missing_log(dir: &RalphDir, which: &LogTarget, records: &[history::IterationRecord]) -> String {
    let place = dir.logs().display().to_string();
    match which {
        LogTarget::Last => format!(
            "no iteration has a log in {place} yet; start a loop with ralph \"<prompt>\", or see ralph --status"
        ),
        LogTarget::Iteration(n) => {
            let last = (records.iter())
                .filter(|record| record.task_id.is_none())
                .map(|record| record.iteration)
                .max();
            match last {
                Some(last) if *n > last || *n == 0 => {
                    let ran = if last == 1 {
                        "iteration 1".to_owned()
                    } else {
                        format!("iterations 1–{last}")
                    };
                    format!(
                        "there is no iteration {n}: the loop here ran {ran}; see ralph --status, or --log for the last"
                    )
                }
                _ => format!(
                    "iteration {n} has no log in {place}: only the last `keep_logs` logs are kept, and iterations of ralph before logs existed have none (see ralph --status for the iterations)"
                ),
            }
        }
        LogTarget::Task(task, n) => {
            let mut tasks: Vec<&str> = records
                .iter()
                .filter_map(|r| r.task_id.as_deref())
                .collect();
            tasks.dedup();
            let known = if tasks.is_empty() {
                "no task loop has run here".to_owned()
            } else {
                format!("tasks with logs: {}", tasks.join(", "))
            };
            let what = n.map_or_else(
                || format!("task {task}"),
                |n| format!("iteration {n} of task {task}"),
            );
            format!("{what} has no log in {place} ({known}); use --log TASK or --log TASK/N")
        }
    }
}

/// What the log at `path` shows as `ralph --log` does (the agent's text and tool lines, never
/// its raw events; stderr lines as they are), as text: the `--serve` page's Output panel.
pub(crate) fn shown_text(path: &std::path::Path) -> std::io::Result<String> {
    let content = std::fs::read_to_string(path)?;
    let mut records = content.lines();
    let start = (records.next())
        .and_then(|first| serde_json::from_str::<Record>(first).ok())
        .and_then(|record| record.start);
    let agent = (start.as_ref())
        .and_then(|start| AgentKind::from_id(&start.agent))
        .map(AgentKind::agent);
    // A voice that shows nothing: what the transcript would show on stdout is kept instead.
    let quiet = Voice::for_loop(true, None, false);
    let mut transcript = (View::new(
        LogStyle::Shown {
            verbose_tools: true,
        },
        agent.as_deref(),
        start.as_ref(),
    ))
    .transcript
    .map(|transcript| transcript.keeping_answer().with_voice(quiet));
    let mut shown = String::new();
    let mut taken = 0;
    for record in records.filter_map(|line| serde_json::from_str::<Record>(line).ok()) {
        let Some(line) = record.line.as_deref() else {
            continue;
        };
        match &mut transcript {
            Some(transcript) if record.stream == "stdout" => {
                transcript.on_segment(&Segment {
                    source: Source::Stdout,
                    text: line,
                    starts_line: true,
                    ends_line: true,
                    received: Instant::now(),
                });
                let answer = transcript.answer();
                shown.push_str(answer.get(taken..).unwrap_or(answer));
                taken = answer.len();
            }
            _ => {
                shown.push_str(line);
                shown.push('\n');
            }
        }
    }
    Ok(shown)
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
            _ if stderr => Voice::plain().agent_stderr(line, true),
            _ => Voice::plain().agent_stdout(line, true),
        }
        false
    }

    fn finish(self) {
        if let Some(transcript) = self.transcript {
            transcript.finish();
        }
    }
}
