//! The loop's messages, one function per message (banner, headers, summaries, boxes, warnings).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::format::{boxed, long_duration_ms, plural, preview, rule, short_duration, tool_summary};
use super::{say, warn};

/// The opening box.
pub(crate) fn banner(agent: &str) {
    let mut lines = vec![String::new()];
    lines.extend(boxed(&[
        "Ralph Wiggum Loop".to_owned(),
        format!("Iterative AI Development with {agent}"),
    ]));
    say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// What the loop is about to do.
pub(crate) struct Summary<'a> {
    pub(crate) prompt: &'a str,
    pub(crate) prompt_file: Option<&'a Path>,
    pub(crate) completion_promise: &'a str,
    pub(crate) task_promise: Option<&'a str>,
    pub(crate) min_iterations: u32,
    pub(crate) max_iterations: u32,
    pub(crate) agent: &'a str,
    pub(crate) model: Option<&'a str>,
    pub(crate) opencode_plugins_disabled: bool,
    pub(crate) allow_all: bool,
    pub(crate) commit: bool,
    pub(crate) resumed_at: Option<u32>,
}

/// The configuration summary printed before the first iteration.
pub(crate) fn config_summary(summary: &Summary<'_>) {
    let mut lines = Vec::new();
    match summary.prompt_file {
        Some(path) => {
            lines.push(format!("Task: {}", path.display()));
            lines.push(format!("Preview: {}", preview(summary.prompt, 80)));
        }
        None => lines.push(format!("Task: {}", preview(summary.prompt, 80))),
    }
    lines.push(format!(
        "Completion promise: {}",
        summary.completion_promise
    ));
    if let Some(task_promise) = summary.task_promise {
        lines.push("Tasks mode: ENABLED".to_owned());
        lines.push(format!("Task promise: {task_promise}"));
    }
    lines.push(format!("Min iterations: {}", summary.min_iterations));
    lines.push(format!(
        "Max iterations: {}",
        max_label(summary.max_iterations)
    ));
    lines.push(format!("Agent: {}", summary.agent));
    if let Some(model) = summary.model {
        lines.push(format!("Model: {model}"));
    }
    if summary.opencode_plugins_disabled {
        lines.push("OpenCode plugins: non-auth plugins disabled".to_owned());
    }
    if summary.allow_all {
        lines.push("Permissions: auto-approve all tools".to_owned());
    }
    lines.push(format!(
        "Auto-commit: {}",
        if summary.commit {
            "after every iteration"
        } else {
            "off"
        }
    ));
    if let Some(iteration) = summary.resumed_at {
        lines.push(format!("Resuming at iteration {iteration}"));
    }
    lines.push(String::new());
    lines.push("Starting loop... (Ctrl+C to stop)".to_owned());
    lines.push(rule('═'));
    say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

fn max_label(max: u32) -> String {
    if max > 0 {
        max.to_string()
    } else {
        "unlimited".to_owned()
    }
}

/// `🔄 Iteration 2 / 10 (min: 3)` and a rule.
pub(crate) fn iteration_header(iteration: u32, min: u32, max: u32) {
    let mut title = format!("🔄 Iteration {iteration}");
    if max > 0 {
        title.push_str(&format!(" / {max}"));
    }
    if min > 1 && iteration < min {
        title.push_str(&format!(" (min: {min})"));
    }
    say(&["", &title, &rule('─')]);
}

/// The block printed after the agent exits.
pub(crate) fn iteration_summary(
    iteration: u32,
    elapsed: Duration,
    tools: &BTreeMap<String, u64>,
    exit_code: i32,
    completion_detected: bool,
) {
    let tools = if tools.is_empty() {
        "none".to_owned()
    } else {
        tool_summary(tools)
    };
    say(&[
        "",
        "Iteration Summary",
        &rule('─'),
        &format!("Iteration: {iteration}"),
        &format!("Elapsed:   {}", short_duration(elapsed)),
        &format!("Tools:     {tools}"),
        &format!("Exit code: {exit_code}"),
        &format!(
            "Completion promise: {}",
            if completion_detected {
                "detected"
            } else {
                "not detected"
            }
        ),
    ]);
}

/// The compact tool line shown while the agent works.
pub(crate) fn tool_progress(tools: &BTreeMap<String, u64>) {
    say(&[&format!("| Tools    {}", tool_summary(tools))]);
}

/// The "still alive" line after a silence.
pub(crate) fn heartbeat(elapsed: Duration, since_activity: Duration) {
    say(&[&format!(
        "⏳ working... elapsed {} · last activity {} ago",
        short_duration(elapsed),
        short_duration(since_activity)
    )]);
}

/// The struggle warning.
pub(crate) fn struggle_warning(no_progress: u32, short: u32) {
    let mut lines = vec![String::new(), "⚠️  Potential struggle detected:".to_owned()];
    if no_progress >= 3 {
        lines.push(format!("   - No file changes in {no_progress} iterations"));
    }
    if short >= 3 {
        lines.push(format!("   - {short} very short iterations"));
    }
    lines.push(
        "   💡 Tip: give the agent a hint from another terminal: ralph --add-context \"your hint here\""
            .to_owned(),
    );
    say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// The agent exited with a non-zero code.
pub(crate) fn nonzero_exit(agent: &str, code: i32) {
    warn(&[
        "",
        &format!("⚠️  {agent} exited with code {code}. Continuing to next iteration."),
    ]);
}

/// The agent finished a task in tasks mode.
pub(crate) fn task_completed(tag: &str, next_iteration: u32) {
    say(&[
        &format!("🔄 Task completion detected: {tag}"),
        &format!("Moving to next task in iteration {next_iteration}..."),
    ]);
}

/// The agent claimed completion too early.
pub(crate) fn completion_deferred(min: u32, next_iteration: u32) {
    say(&[
        &format!("⏳ Completion promise detected, but minimum iterations ({min}) not yet reached."),
        &format!("Continuing to iteration {next_iteration}..."),
    ]);
}

/// The agent claimed completion while tasks remain open.
pub(crate) fn completion_refused_open_tasks(open: &[String]) {
    let mut lines = vec![format!(
        "⏳ Completion promise detected, but {} still open:",
        plural(open.len() as u64, "task is").replace("tasks is", "tasks are")
    )];
    for task in open.iter().take(5) {
        lines.push(format!("   - {task}"));
    }
    if open.len() > 5 {
        lines.push(format!("   … and {} more", open.len() - 5));
    }
    lines.push("Continuing with the next iteration...".to_owned());
    say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// The completion box.
pub(crate) fn completion_box(tag: &str, iterations: u32, total_ms: u64) {
    let mut lines = vec![String::new()];
    lines.extend(boxed(&[
        format!("✅ Completion promise detected: {tag}"),
        format!(
            "Task completed in {}",
            plural(u64::from(iterations), "iteration")
        ),
        format!("Total time: {}", long_duration_ms(total_ms)),
    ]));
    say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// The max-iterations box.
pub(crate) fn max_iterations_box(max: u32, total_ms: u64) {
    let mut lines = vec![String::new()];
    lines.extend(boxed(&[
        format!("Max iterations ({max}) reached. Loop stopped."),
        format!("Total time: {}", long_duration_ms(total_ms)),
    ]));
    say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// The pending context was injected and removed.
pub(crate) fn context_consumed(newer_kept: bool, edited: bool) {
    if edited {
        say(&[
            "📝 Context was used this iteration; the context file was edited meanwhile, so it was kept.",
        ]);
    } else if newer_kept {
        say(&[
            "📝 Context was consumed this iteration (context added since then is kept for the next one)",
        ]);
    } else {
        say(&["📝 Context was consumed this iteration"]);
    }
}

/// An auto-commit succeeded.
pub(crate) fn committed(iteration: u32, hash: &str) {
    say(&[&format!(
        "📝 Auto-committed changes of iteration {iteration} ({hash})"
    )]);
}

/// An auto-commit failed.
pub(crate) fn commit_failed(reason: &str) {
    warn(&[&format!(
        "⚠️  Auto-commit failed: {reason}. The changes stay uncommitted in the working tree."
    )]);
}

/// Ralph itself failed during an iteration.
pub(crate) fn iteration_error(iteration: u32, error: &str) {
    warn(&[&format!("❌ Error in iteration {iteration}: {error}")]);
    say(&["Continuing to next iteration..."]);
}

/// The first stop request arrived.
pub(crate) fn stopping() {
    say(&[
        "",
        "Gracefully stopping Ralph loop... (press Ctrl+C again to stop at once)",
    ]);
}

/// The loop's last line: why it ended.
pub(crate) fn run_ended(reason: &str, iterations: u32, total_ms: u64) {
    say(&[
        "",
        &format!(
            "Loop ended: {reason} · {} · total time {}",
            plural(u64::from(iterations), "iteration"),
            long_duration_ms(total_ms)
        ),
    ]);
}

/// How to pick up an interrupted loop.
pub(crate) fn resume_hint(iteration: u32) {
    say(&[&format!(
        "State kept: resume with `ralph --resume` (continues at iteration {iteration}), or start over with `ralph --reset`."
    )]);
}

/// A ralph file could not be parsed.
pub(crate) fn corrupt_file(path: &Path, reason: &str, copy: Option<&Path>) {
    let kept = copy.map_or_else(String::new, |copy| {
        format!(" A copy was kept at {}.", copy.display())
    });
    warn(&[&format!(
        "⚠️  Ignoring {}: {reason}. Treating it as absent.{kept}",
        path.display()
    )]);
}

/// `--no-plugins` has no effect on this agent.
pub(crate) fn no_plugins_ignored(agent: &str) {
    warn(&[&format!(
        "⚠️  --no-plugins only applies to OpenCode; it has no effect with {agent}."
    )]);
}

/// Tasks mode created the task file.
pub(crate) fn tasks_file_created(path: &Path) {
    say(&[&format!("📋 Created tasks file: {}", path.display())]);
}

/// A task file that could not be read.
pub(crate) fn tasks_file_unreadable(path: &Path, reason: &str) {
    warn(&[&format!(
        "⚠️  Cannot read {}: {reason}. The agent is told so in its prompt.",
        path.display()
    )]);
}

/// OpenCode loaded the obsolete placeholder plugin.
pub(crate) fn legacy_plugin_detected() {
    warn(&[
        "Error: OpenCode loaded the legacy 'ralph-wiggum' placeholder plugin, which does nothing.",
        "Remove it from the \"plugin\" list in your opencode.json, or run ralph with --no-plugins.",
    ]);
}

/// Another ralph holds this directory's loop lock.
pub(crate) fn loop_already_running(
    state: Option<&crate::storage::state::LoopState>,
    state_path: &Path,
) {
    let detail = state.map_or_else(
        || "its state is not written yet".to_owned(),
        |state| {
            let pid = state
                .pid
                .map_or_else(String::new, |pid| format!(", pid {pid}"));
            format!(
                "iteration {}, started {}{pid}",
                state.iteration,
                crate::loop_runner::started_label(state.started_at)
            )
        },
    );
    warn(&[
        &format!("Error: a Ralph loop is already running in this directory ({detail})."),
        "       Stop it with Ctrl+C in its terminal, or wait for it to finish; see it with `ralph --status`.",
        &format!("       State file: {}", state_path.display()),
    ]);
}

/// The state says a loop is active, but nothing holds its lock: it crashed or was killed.
pub(crate) fn crashed_loop(state: &crate::storage::state::LoopState, state_path: &Path) {
    let owner = match (&state.host, state.pid) {
        (Some(host), Some(pid)) => format!(" (pid {pid} on {host})"),
        (None, Some(pid)) => format!(" (pid {pid})"),
        _ => String::new(),
    };
    warn(&[
        &format!(
            "Error: a previous Ralph loop here stopped unexpectedly at iteration {}{owner}, started {}.",
            state.iteration,
            crate::loop_runner::started_label(state.started_at)
        ),
        "       Continue it with `ralph --resume`, or discard it with `ralph --reset` and start again.",
        &format!("       State file: {}", state_path.display()),
    ]);
}

/// `--resume` flags that replace saved options.
pub(crate) fn resume_overrides(changes: &[String]) {
    for change in changes {
        say(&[&format!("↪ Overriding the saved option {change}")]);
    }
}

/// What `--reset` removed.
pub(crate) fn reset_done(removed: &[std::path::PathBuf]) {
    if removed.is_empty() {
        say(&["ℹ️  Nothing to reset: no loop state, history or context here."]);
        return;
    }
    let mut lines = vec!["✅ Reset the loop. Removed:".to_owned()];
    for path in removed {
        lines.push(format!("   {}", path.display()));
    }
    lines.push("The task file, if any, was kept.".to_owned());
    say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// `--add-context` succeeded.
pub(crate) fn context_added(path: &Path, running_iteration: Option<u32>) {
    let when = running_iteration.map_or_else(
        || "It will be used when the next loop starts.".to_owned(),
        |iteration| format!("It will be picked up in iteration {}.", iteration + 1),
    );
    say(&[
        &format!("✅ Context added to {}", path.display()),
        &format!("   {when}"),
    ]);
}

/// `--clear-context` finished.
pub(crate) fn context_cleared(had_content: bool) {
    if had_content {
        say(&["✅ Pending context cleared."]);
    } else {
        say(&["ℹ️  No pending context to clear."]);
    }
}

/// `--list-tasks` without a task file.
pub(crate) fn no_tasks_file(path: &Path) {
    say(&[&format!(
        "No tasks file yet ({}). Add one with: ralph --add-task \"description\"",
        path.display()
    )]);
}

/// `--add-task` succeeded.
pub(crate) fn task_added(description: &str, number: usize) {
    say(&[&format!("✅ Task {number} added: \"{description}\"")]);
}

/// `--remove-task` succeeded.
pub(crate) fn task_removed(number: usize) {
    say(&[&format!("✅ Removed task {number} and its subtasks")]);
}
