//! Everything ralph shows on the terminal. No other module prints.
//!
//! Agent output is written through a large buffer that the loop flushes at every tick, so a
//! chatty agent costs one write per chunk instead of one per line; ralph's own messages flush
//! it first, so the two never interleave out of order. Write errors (a closed pipe, a full disk)
//! are ignored: losing the display must never stop the loop.

mod agents;
mod asking;
pub(crate) use asking::{heartbeat_asking, numbered, terminal_answers};
mod commands;
pub(crate) mod format;
pub(crate) mod html;
#[cfg(test)]
mod human_tests;
mod logs;
mod messages;
mod parallel;
mod remote;
pub(crate) mod report;
pub(crate) mod status;
mod voice;
pub(crate) mod watch;

use std::io::{self, BufWriter, IsTerminal as _, Stdout, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use crate::event::{Ending, LoopEvent, Notice, Reporter, Stamped, WaitReason};

pub(crate) use agents::*;
pub(crate) use commands::*;
pub(crate) use logs::*;
pub(crate) use messages::*;
pub(crate) use parallel::*;
pub(crate) use remote::*;
pub(crate) use voice::Voice;

/// When ralph colours its own messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set.
    #[default]
    Auto,
    Always,
    Never,
}

static COLOR_STDOUT: AtomicBool = AtomicBool::new(false);
static COLOR_STDERR: AtomicBool = AtomicBool::new(false);

/// Sets the colour choice for the rest of the run (`json`: stdout carries JSON lines, never
/// coloured).
pub(crate) fn configure(color: ColorChoice, no_color: bool, json: bool) {
    let decide = |is_terminal: bool| match color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => is_terminal && !no_color,
    };
    COLOR_STDOUT.store(
        decide(io::stdout().is_terminal()) && !json,
        Ordering::Relaxed,
    );
    COLOR_STDERR.store(decide(io::stderr().is_terminal()), Ordering::Relaxed);
}

/// Whether ralph's own messages on stdout are coloured (`--color`, `NO_COLOR`, a terminal).
pub(crate) fn colour_on_stdout() -> bool {
    COLOR_STDOUT.load(Ordering::Relaxed)
}

/// How a message is coloured.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Style {
    Bold,
    Good,
    Warn,
    Bad,
    Dim,
}

/// `text` wrapped in the style's escape codes when colour is on for that stream.
pub(crate) fn paint(style: Style, text: &str, stderr: bool) -> String {
    let on = if stderr { &COLOR_STDERR } else { &COLOR_STDOUT };
    if !on.load(Ordering::Relaxed) || text.is_empty() {
        return text.to_owned();
    }
    let code = match style {
        Style::Bold => "1",
        Style::Good => "1;32",
        Style::Warn => "1;33",
        Style::Bad => "1;31",
        Style::Dim => "2",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// `--json`: every event as one line on stdout, its public object.
pub(crate) struct JsonLines;

impl Reporter for JsonLines {
    fn event(&mut self, event: &Stamped<'_>) {
        let mut out = stdout();
        let _ = writeln!(out, "{}", event.to_value());
        let _ = out.flush();
    }
}

/// The terminal: the human lines of each event and notice, in the loop's voice.
pub(crate) struct Human {
    voice: Voice,
    /// The tool calls the last `| Tools` line of this iteration counted: a `tools` event that
    /// says the same again (the final count) is not shown twice.
    tools_shown: u64,
}

impl Human {
    pub(crate) fn new(voice: Voice) -> Self {
        Self {
            voice,
            tools_shown: 0,
        }
    }
}

impl Reporter for Human {
    fn event(&mut self, stamped: &Stamped<'_>) {
        let out = &self.voice;
        match stamped.event {
            LoopEvent::Tools { tools } => {
                let calls = tools.values().sum();
                if calls != self.tools_shown {
                    self.tools_shown = calls;
                    tool_progress(out, tools);
                }
            }
            LoopEvent::IterationStarted { .. } => self.tools_shown = 0,
            LoopEvent::Verified(result) => verify_finished(out, result),
            LoopEvent::RetryWait {
                iteration,
                retry,
                max_retries,
                kind,
                status,
                seconds_left,
                until_reset,
            } => {
                let wait = RetryWait {
                    iteration: *iteration,
                    attempt: *retry,
                    max_attempts: *max_retries,
                    kind,
                    status: *status,
                    until_reset: *until_reset,
                };
                retry_countdown(out, &wait, std::time::Duration::from_secs(*seconds_left));
            }
            LoopEvent::Fallback { to, reason, .. } => fallback_switch(out, to, reason),
            LoopEvent::RunEnded(end) => run_ended(out, end),
            LoopEvent::PlanCreated { tasks } => plan_created(out, tasks),
            asked @ LoopEvent::QuestionAsked { .. } => asking::asked(out, asked),
            answered @ LoopEvent::QuestionAnswered { .. } => asking::answered(out, answered),
            // Its notice said it.
            LoopEvent::CompletionRefused { .. } => {}
            LoopEvent::RunStarted { .. }
            | LoopEvent::IterationFinished(_)
            | LoopEvent::Completed { .. } => {}
            fleet => parallel::fleet_event(out, fleet),
        }
    }

    /// The notice said it.
    fn told(&mut self, _: &Stamped<'_>) {}

    fn notice(&mut self, notice: &Notice<'_>) {
        let out = &self.voice;
        // A task loop's lines are one per event: what belongs to the run (the banner, boxes,
        // summaries, `--resume` advice) is the run's to say.
        let run_only = out.is_task_loop();
        match notice {
            Notice::Banner { .. } | Notice::ConfigSummary(_) | Notice::IterationSummary(_)
                if run_only => {}
            Notice::ResumeHint { .. } if run_only => {}
            Notice::Banner { agent } => banner(out, agent),
            Notice::ConfigSummary(summary) => config_summary(out, summary),
            Notice::IterationHeader {
                iteration,
                min,
                max,
            } => iteration_header(out, *iteration, *min, *max),
            Notice::IterationSummary(summary) => iteration_summary(out, summary),
            Notice::IterationError { iteration, error } => iteration_error(out, *iteration, error),
            Notice::IterationTimedOut { iteration, why } => {
                iteration_timed_out(out, *iteration, why);
            }
            Notice::CompletionGraceOver { iteration, grace } => {
                completion_grace_over(out, *iteration, *grace);
            }
            Notice::Stopping => stopping(out),
            Notice::Struggle { no_progress, short } => {
                struggle_warning(out, *no_progress, *short);
            }
            Notice::NonzeroExit {
                agent,
                code,
                goes_on,
            } => nonzero_exit(out, agent, *code, *goes_on),
            Notice::TaskCompleted {
                tag,
                next_iteration,
            } => task_completed(out, tag, *next_iteration),
            Notice::CompletionDeferred {
                min,
                next_iteration,
            } => completion_deferred(out, *min, *next_iteration),
            Notice::CompletionRefusedOpenTasks(open) => completion_refused_open_tasks(out, open),
            Notice::CompletionRefusedByChecks { iteration, failed } => {
                completion_refused_by_checks(out, *iteration, failed);
            }
            Notice::TaskVerificationFailed { task } => task_verification_failed(out, task),
            Notice::TaskFailed { task, attempts } => task_failed(out, task, *attempts),
            Notice::ContextGiven { hints } => context_given(out, *hints),
            Notice::ContextNotGiven(why) => context_not_given(out, why),
            Notice::ContextConsumed { newer_kept, edited } => {
                context_consumed(out, *newer_kept, *edited);
            }
            Notice::Committed { iteration, hash } => committed(out, *iteration, hash),
            Notice::InterruptedWorkCommitted(hash) => interrupted_work_committed(out, hash),
            Notice::CommitFailed(reason) => commit_failed(out, reason),
            Notice::ConflictsNotCommitted(files) => conflicts_not_committed(out, files),
            Notice::ProgressCommitted(hash) => progress_committed(out, hash),
            Notice::PushFailed(reason) => push_failed(out, reason),
            Notice::FallbackAllLimited(until) => fallback_all_limited(out, *until),
            Notice::RetryWaitOver => retry_wait_done(out),
            Notice::Ended(ending) => ended(out, ending),
            Notice::ResumeHint {
                iteration,
                limit_reached,
            } => resume_hint(out, *iteration, *limit_reached),
            other => {
                if !start_notice(out, other) {
                    parallel::fleet_notice(out, other);
                }
            }
        }
    }
}

/// The notices of a loop's start (and what it finds of its setup on the way): `false` when
/// `notice` is none of them.
fn start_notice(out: &Voice, notice: &crate::event::Notice<'_>) -> bool {
    match notice {
        Notice::ResumeOverrides(changes) => resume_overrides(out, changes),
        Notice::TasksFileCreated(path) => tasks_file_created(out, path),
        Notice::TaskFileProblems { path, problems } => task_file_problems(out, path, problems),
        Notice::TasksFileUnreadable { path, reason } => {
            tasks_file_unreadable(out, path, reason);
        }
        Notice::LeftoverAgentStopped(group) => leftover_agent_stopped(out, *group),
        Notice::CorruptFile { path, reason, copy } => corrupt_file(out, path, reason, *copy),
        Notice::NoPluginsIgnored { agent } => no_plugins_ignored(out, agent),
        Notice::CodexBwrapShipped {
            system,
            version,
            folder,
        } => codex_bwrap_shipped(out, system, version, folder),
        Notice::MaxCostUnavailable { agent } => max_cost_unavailable(out, agent),
        Notice::MaxStalledUnavailable => max_stalled_unavailable(out),
        Notice::DetachedHead(head) => detached_head(out, head),
        Notice::DirtyAtStart(paths) => dirty_at_start(out, paths),
        Notice::SandboxBlocked { hosts } => sandbox_blocked(out, hosts),
        Notice::OutOfMemory { iteration, limit } => out_of_memory(out, *iteration, limit),
        Notice::Unsandboxed => unsandboxed(out),
        Notice::ProtectedRestored {
            iteration,
            files,
            fails,
        } => protected_restored(out, *iteration, files, *fails),
        Notice::ProtectWithoutGit => out.warn(&[
            "⚠️  --protect needs a git repository to see what the agent changed; nothing is protected here. Run ralph in a repository (git init) to protect paths.",
        ]),
        Notice::HoldoutNotSecret => out.warn(&[
            "⚠️  --holdout checks are hidden from the agent only under --sandbox: without one it can read their files and their results in .ralph/. Add --sandbox to keep them secret.",
        ]),
        Notice::TouchesWait {
            task,
            behind,
            reason: WaitReason::Touches,
        } => out.say(&[&format!(
            "[{task}] ⏳ Waits for {behind}: the two touch the same files (touches:), so they do not run at the same time."
        )]),
        Notice::TouchesWait {
            task,
            behind,
            reason: WaitReason::Conflicted,
        } => out.say(&[&format!(
            "[{task}] ⏳ Waits for {behind}: their changes conflicted earlier in this run, so they do not run at the same time."
        )]),
        Notice::RoomWait {
            task,
            why,
            need_from,
        } => {
            let until = if why.starts_with("waiting for load") {
                "the load average falls below the number of cores".to_owned()
            } else {
                format!("the machine has room (the need is set by {need_from})")
            };
            out.say(&[&format!(
                "[{task}] ⏳ Waits, {why}: it starts when a running agent ends or {until}."
            )]);
        }
        Notice::ProtectMatchesNothing(pattern) => out.warn(&[&format!(
            "⚠️  --protect '{pattern}' matches no file here; globs are relative to the repository's top (e.g. 'tests/**'). Check the pattern."
        )]),
        Notice::LogUnavailable { dir, error } => log_unavailable(out, dir, error),
        _ => return false,
    }
    true
}

/// How a loop's end is told: a box for the run's own loop, one line for a task loop's.
fn ended(out: &Voice, ending: &Ending<'_>) {
    match ending {
        Ending::Completed {
            iterations,
            total_ms,
            ..
        } if out.is_task_loop() => task_loop_done(out, *iterations, *total_ms),
        Ending::Completed {
            tag,
            iterations,
            total_ms,
        } => completion_box(out, tag, *iterations, *total_ms),
        // A task loop's limit is its task's failure: the run says so.
        Ending::MaxIterations { .. } if out.is_task_loop() => {}
        Ending::MaxIterations { max, total_ms } => max_iterations_box(out, *max, *total_ms),
        Ending::Aborted { message } => agent_aborted(out, message),
        Ending::AgentFailed(failure) => agent_failed(out, failure, !out.is_task_loop()),
        Ending::LegacyPlugin => legacy_plugin_detected(out),
        Ending::Blocked(tasks) => tasks_blocked(out, tasks),
        Ending::Other => {}
    }
}

static STDOUT: LazyLock<Mutex<BufWriter<Stdout>>> =
    LazyLock::new(|| Mutex::new(BufWriter::with_capacity(64 * 1024, io::stdout())));

pub(crate) fn stdout() -> MutexGuard<'static, BufWriter<Stdout>> {
    STDOUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes lines to stdout and flushes, as a command does.
pub(crate) fn say(lines: &[&str]) {
    Voice::plain().say(lines);
}

/// Shows the refined prompt and asks whether to use it (`Use this prompt? [Y/n/e] `, no newline).
pub(crate) fn refine_question(spec: &str) {
    let mut lines = vec![
        "📝 The prompt, restated as a spec:".to_owned(),
        String::new(),
    ];
    lines.extend(spec.lines().map(|line| format!("   {line}")));
    lines.push(String::new());
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    say(&lines);
    let mut out = io::stdout().lock();
    let _ = write!(out, "Use this prompt? [Y/n/e] ");
    let _ = out.flush();
}

/// Writes lines to stderr (after flushing stdout, to keep the order), as a command does.
pub(crate) fn warn(lines: &[&str]) {
    Voice::plain().warn(lines);
}

/// Flushes buffered agent output.
pub(crate) fn flush() {
    let _ = stdout().flush();
}

/// Prints an error as one line on stderr: `Error: …`.
pub(crate) fn error(message: &str) {
    warn(&[&format!("{} {message}", paint(Style::Bad, "Error:", true))]);
}
