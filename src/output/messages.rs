//! The loop's messages, one function per message (banner, headers, summaries, boxes, warnings).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use super::format::{boxed, long_duration_ms, plural, preview, rule, short_duration, tool_summary};
use super::{say, warn};
use crate::event::RunEnd;

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
    /// `--fallback`'s agents, as `Name` or `Name (model)`.
    pub(crate) fallback: Vec<String>,
    pub(crate) opencode_plugins_disabled: bool,
    pub(crate) allow_all: bool,
    pub(crate) commit: bool,
    /// Whether the working directory is in a git repository (changes tracked, commits made).
    pub(crate) git: bool,
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
    if !summary.fallback.is_empty() {
        lines.push(format!(
            "Fallback when out of quota: {}",
            summary.fallback.join(", ")
        ));
    }
    if summary.opencode_plugins_disabled {
        lines.push("OpenCode plugins: non-auth plugins disabled".to_owned());
    }
    if summary.allow_all {
        lines.push("Permissions: auto-approve all tools".to_owned());
    }
    lines.push(format!(
        "Auto-commit: {}",
        if !summary.git {
            "off (not a git repository: changes are not tracked and nothing is committed)"
        } else if summary.commit {
            "after every iteration that changes files"
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
    let paint_title = |title: String| super::paint(super::Style::Bold, &title, false);
    if max > 0 {
        title.push_str(&format!(" / {max}"));
    }
    if min > 1 && iteration < min {
        title.push_str(&format!(" (min: {min})"));
    }
    say(&["", &paint_title(title), &rule('─')]);
}

/// What the iteration summary shows.
pub(crate) struct IterationSummary<'a> {
    pub(crate) iteration: u32,
    pub(crate) elapsed: Duration,
    pub(crate) tools: &'a BTreeMap<String, u64>,
    pub(crate) exit_code: i32,
    pub(crate) completion_detected: bool,
    pub(crate) usage: Option<crate::agents::Usage>,
    pub(crate) cost: Option<f64>,
    pub(crate) failure: Option<&'a crate::agents::Failure>,
}

/// The block printed after the agent exits.
pub(crate) fn iteration_summary(summary: &IterationSummary<'_>) {
    let tools = if summary.tools.is_empty() {
        "none".to_owned()
    } else {
        tool_summary(summary.tools)
    };
    let mut lines = vec![
        String::new(),
        "Iteration Summary".to_owned(),
        rule('─'),
        format!("Iteration: {}", summary.iteration),
        format!("Elapsed:   {}", short_duration(summary.elapsed)),
        format!("Tools:     {tools}"),
    ];
    if let Some(usage) = summary.usage {
        lines.push(format!("Tokens:    {}", tokens_text(&usage)));
    }
    if let Some(cost) = summary.cost {
        lines.push(format!("Cost:      {}", cost_text(cost)));
    }
    lines.push(format!("Exit code: {}", summary.exit_code));
    if let Some(failure) = summary.failure {
        let status = failure
            .status
            .map_or_else(String::new, |s| format!(" (HTTP {s})"));
        lines.push(format!("Failure:   {}{status}", failure.kind.label()));
    }
    lines.push(format!(
        "Completion promise: {}",
        if summary.completion_detected {
            "detected"
        } else {
            "not detected"
        }
    ));
    say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// `1.2k in · 340 out · 15k cached`.
pub(crate) fn tokens_text(usage: &crate::agents::Usage) -> String {
    let mut text = format!(
        "{} in · {} out",
        compact_number(usage.input),
        compact_number(usage.output)
    );
    let cached = usage.cache_read + usage.cache_write;
    if cached > 0 {
        text.push_str(&format!(" · {} cache", compact_number(cached)));
    }
    text
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

/// The compact tool line shown while the agent works.
pub(crate) fn tool_progress(tools: &BTreeMap<String, u64>) {
    say(&[&super::paint(
        super::Style::Dim,
        &format!("| Tools    {}", tool_summary(tools)),
        false,
    )]);
}

/// The "still alive" line after a silence.
pub(crate) fn heartbeat(elapsed: Duration, since_activity: Duration) {
    say(&[&super::paint(
        super::Style::Dim,
        &format!(
            "⏳ working... elapsed {} · last activity {} ago",
            short_duration(elapsed),
            short_duration(since_activity)
        ),
        false,
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
    let count = if open.len() == 1 {
        "1 task is".to_owned()
    } else {
        format!("{} tasks are", open.len())
    };
    let mut lines = vec![format!(
        "⏳ Completion promise detected, but {count} still open:"
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
        super::paint(
            super::Style::Good,
            &format!("✅ Completion promise detected: {tag}"),
            false,
        ),
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

/// ralph's own files were committed at the end of the loop.
pub(crate) fn progress_committed(hash: &str) {
    say(&[&format!(
        "📝 Committed ralph's progress log and task file ({hash})"
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

/// The loop's last line: why it ended, and what it took; then each agent's share.
pub(crate) fn run_ended(end: &RunEnd) {
    let shown = format!("Loop ended: {}", run_summary(end));
    say(&["", &super::paint(super::Style::Bold, &shown, false)]);
    for share in super::agent_shares(&end.agents) {
        say(&[&format!("   {share}")]);
    }
}

/// What follows `Loop ended: `: the reason, iterations, time, tokens and cost.
pub(crate) fn run_summary(end: &RunEnd) -> String {
    let mut line = format!(
        "{} · {} · total time {}",
        end.reason,
        plural(u64::from(end.iterations), "iteration"),
        long_duration_ms(end.total_duration_ms)
    );
    if let Some(tokens) = end.tokens {
        line.push_str(&format!(" · {} tokens", compact_number(tokens.total())));
    }
    if let Some(cost) = end.cost_usd {
        line.push_str(&format!(" · {}", cost_text(cost)));
    }
    line
}

/// How to pick up a loop that stopped before completing.
pub(crate) fn resume_hint(iteration: u32, limit_reached: bool) {
    let how = if limit_reached {
        "raise the limit and go on with `ralph --resume --max-iterations N`".to_owned()
    } else {
        format!("go on with `ralph --resume` (continues at iteration {iteration})")
    };
    say(&[&format!(
        "State kept: {how}, or start over with `ralph --reset`."
    )]);
}

/// `--max-cost` cannot work with this agent.
pub(crate) fn max_cost_unavailable(agent: &str) {
    warn(&[&format!(
        "⚠️  --max-cost has no effect: {agent} does not report what a run costs. Use --max-tokens instead."
    )]);
}

/// An iteration hit `--iteration-timeout` or `--idle-timeout`.
pub(crate) fn iteration_timed_out(iteration: u32, why: &str) {
    warn(&[&format!(
        "⏱️  Iteration {iteration} timed out ({why}); the agent and everything it started were stopped."
    )]);
}

/// The agent printed the abort promise.
pub(crate) fn agent_aborted(message: &str) {
    let mut lines = vec![
        String::new(),
        "🛑 The agent says it cannot go on:".to_owned(),
    ];
    for line in message
        .lines()
        .rev()
        .take(10)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        lines.push(format!("   {line}"));
    }
    say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// The agent failed in a way retrying does not fix (or retries ran out): what to do about it.
/// The failure itself was already shown, when the agent reported it.
pub(crate) fn agent_failed(failure: &crate::agents::Failure) {
    let hint = match failure.kind {
        crate::agents::FailureKind::Auth => {
            "Check the agent's credentials (log in again, or set its API key)."
        }
        crate::agents::FailureKind::ModelNotFound => "Check the model name given with --model.",
        _ => "Check the provider's status, then continue with `ralph --resume`.",
    };
    warn(&["", hint]);
}

/// What a wait before a retry is about.
pub(crate) struct RetryWait<'a> {
    pub(crate) iteration: u32,
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    pub(crate) failure: &'a crate::agents::Failure,
    pub(crate) until_reset: bool,
}

/// Whether stdout is a terminal (the countdown then updates in place).
pub(crate) fn is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stdout())
}

/// The retry countdown: in place on a terminal, one line at a time otherwise.
pub(crate) fn retry_countdown(wait: &RetryWait<'_>, left: Duration) {
    let status = wait
        .failure
        .status
        .map_or_else(String::new, |s| format!(" (HTTP {s})"));
    let why = if wait.until_reset {
        "until the limit resets"
    } else {
        "backing off"
    };
    let text = format!(
        "⏳ {}{status}: retrying iteration {} in {} ({why}; retry {} of {}, Ctrl+C to stop)",
        wait.failure.kind.label(),
        wait.iteration,
        short_duration(left),
        wait.attempt,
        wait.max_attempts
    );
    if super::is_json() {
        return;
    }
    if super::is_worker() {
        // Several workers share the terminal: a plain line each, prefixed with the task.
        say(&[&text]);
        return;
    }
    let mut out = super::stdout();
    if is_terminal() {
        let _ = write!(out, "\r\x1b[2K{text}");
    } else {
        let _ = writeln!(out, "{text}");
    }
    let _ = out.flush();
}

/// Ends an in-place countdown line.
pub(crate) fn retry_wait_done() {
    if is_terminal() && !super::is_json() && !super::is_worker() {
        say(&[""]);
    }
}

/// `--no-plugins` has no effect on this agent.
pub(crate) fn no_plugins_ignored(agent: &str) {
    warn(&[&format!(
        "⚠️  --no-plugins only applies to OpenCode; it has no effect with {agent}."
    )]);
}

/// OpenCode loaded the obsolete placeholder plugin.
pub(crate) fn legacy_plugin_detected() {
    warn(&[
        "Error: OpenCode loaded the legacy 'ralph-wiggum' placeholder plugin, which does nothing.",
        "Remove it from the \"plugin\" list in your opencode.json, or run ralph with --no-plugins.",
    ]);
}

/// One line describing an agent failure.
pub(crate) fn failure_line(agent: &str, failure: &crate::agents::Failure) -> String {
    let status = failure
        .status
        .map_or_else(String::new, |status| format!(" (HTTP {status})"));
    format!(
        "❌ {agent} failed: {}{status}: {}",
        failure.kind.label(),
        crate::agents::events::one_line(&failure.message, 200)
    )
}

/// In tasks mode, every open task is failed or blocked.
pub(crate) fn tasks_blocked(tasks: &[String]) {
    let mut lines = vec![
        String::new(),
        "⛔ No task can be started: every open task has failed or waits for one that cannot finish."
            .to_owned(),
    ];
    lines.extend(tasks.iter().map(|task| format!("   {task}")));
    lines
        .push("Fix or edit .ralph/ralph-tasks.md, then continue with `ralph --resume`.".to_owned());
    say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// A verification command starts.
pub(crate) fn verify_started(command: &str) {
    say(&[&format!("🔎 Verifying: {command}")]);
}

/// A piece of a verification command's output, indented so it never reads as the agent's.
pub(crate) fn verify_output(text: &str, starts_line: bool, ends_line: bool) {
    super::command_output("   │ ", text, (starts_line, ends_line));
}

/// A verification command finished.
pub(crate) fn verify_finished(result: &crate::model::Verification) {
    if result.passed {
        say(&[&format!("   ✅ passed: {}", result.command)]);
    } else {
        say(&[&format!(
            "   ❌ failed ({}): {}",
            result.outcome(),
            result.command
        )]);
    }
}

/// The agent's completion claim was refused by a verification command.
pub(crate) fn completion_refused_by_verification(iteration: u32) {
    say(&[
        &format!("⛔ Completion refused: verification failed after iteration {iteration}."),
        "Continuing; the next prompt shows the agent what failed.",
    ]);
}

/// A task's own verification failed; the task goes back to in progress.
pub(crate) fn task_verification_failed(task: &str) {
    say(&[&format!(
        "⛔ Task \"{task}\" is not accepted: its verify command failed. It is marked [/] again."
    )]);
}

/// A task ran out of attempts.
pub(crate) fn task_failed(task: &str, attempts: u32) {
    say(&[&format!(
        "❌ Task \"{task}\" failed after {attempts} attempts; it is marked [!] and the next task is taken."
    )]);
}

/// `--max-stalled` needs git to see changes.
pub(crate) fn max_stalled_unavailable() {
    warn(&[
        "⚠️  --max-stalled has no effect here: this is not a git repository, so ralph cannot see which files change.",
    ]);
}
