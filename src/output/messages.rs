//! The loop's messages, one function per message (banner, headers, summaries, boxes, warnings).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

use super::Voice;
use super::format::{
    boxed, long_duration, long_duration_ms, plural, preview, rule, short_duration, tool_summary,
};
use crate::event::{IterationSummary, RunEnd, Summary};
use crate::model::StopKind;

pub(crate) use super::format::{compact_number, cost_text};

/// The opening box.
pub(crate) fn banner(out: &Voice, agent: &str) {
    let mut lines = vec![String::new()];
    lines.extend(boxed(&[
        "Ralph Wiggum Loop".to_owned(),
        format!("Iterative AI Development with {agent}"),
    ]));
    out.say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// The configuration summary printed before the first iteration.
pub(crate) fn config_summary(out: &Voice, summary: &Summary<'_>) {
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
    out.say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

fn max_label(max: u32) -> String {
    if max > 0 {
        max.to_string()
    } else {
        "unlimited".to_owned()
    }
}

/// `🔄 Iteration 2 / 10 (min: 3)` and a rule.
pub(crate) fn iteration_header(out: &Voice, iteration: u32, min: u32, max: u32) {
    let mut title = format!("🔄 Iteration {iteration}");
    let paint_title = |title: String| super::paint(super::Style::Bold, &title, false);
    if max > 0 {
        title.push_str(&format!(" / {max}"));
    }
    if min > 1 && iteration < min {
        title.push_str(&format!(" (min: {min})"));
    }
    out.say(&["", &paint_title(title), &rule('─')]);
}

/// The block printed after the agent exits.
pub(crate) fn iteration_summary(out: &Voice, summary: &IterationSummary<'_>) {
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
    let tokens = summary.usage.map_or(0, |usage| usage.total());
    if let Some(cost) = super::format::spent(summary.cost, tokens) {
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
    out.say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
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

/// The compact tool line shown while the agent works.
pub(crate) fn tool_progress(out: &Voice, tools: &BTreeMap<String, u64>) {
    out.say(&[&super::paint(
        super::Style::Dim,
        &format!("| Tools    {}", tool_summary(tools)),
        false,
    )]);
}

/// The "still alive" line after a silence.
pub(crate) fn heartbeat(out: &Voice, elapsed: Duration, since_activity: Duration) {
    out.say(&[&super::paint(
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
pub(crate) fn struggle_warning(out: &Voice, no_progress: u32, short: u32) {
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
    out.say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// The agent exited with a non-zero code.
pub(crate) fn nonzero_exit(out: &Voice, agent: &str, code: i32, goes_on: bool) {
    let then = if goes_on {
        " Continuing to next iteration."
    } else {
        ""
    };
    out.warn(&["", &format!("⚠️  {agent} exited with code {code}.{then}")]);
}

/// The agent finished a task in tasks mode.
pub(crate) fn task_completed(out: &Voice, tag: &str, next_iteration: u32) {
    out.say(&[
        &format!("🔄 Task completion detected: {tag}"),
        &format!("Moving to next task in iteration {next_iteration}..."),
    ]);
}

/// The agent claimed completion too early.
pub(crate) fn completion_deferred(out: &Voice, min: u32, next_iteration: u32) {
    out.say(&[
        &format!("⏳ Completion promise detected, but minimum iterations ({min}) not yet reached."),
        &format!("Continuing to iteration {next_iteration}..."),
    ]);
}

/// The agent claimed completion while tasks remain open.
pub(crate) fn completion_refused_open_tasks(out: &Voice, open: &[String]) {
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
    out.say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// The completion box.
pub(crate) fn completion_box(out: &Voice, tag: &str, iterations: u32, total_ms: u64) {
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
    out.say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// The max-iterations box.
pub(crate) fn max_iterations_box(out: &Voice, max: u32, total_ms: u64) {
    let mut lines = vec![String::new()];
    lines.extend(boxed(&[
        format!("Max iterations ({max}) reached. Loop stopped."),
        format!("Total time: {}", long_duration_ms(total_ms)),
    ]));
    out.say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// The pending context was injected and removed.
pub(crate) fn context_consumed(out: &Voice, newer_kept: bool, edited: bool) {
    if edited {
        out.say(&[
            "📝 Context was used this iteration; the context file was edited meanwhile, so it was kept.",
        ]);
    } else if newer_kept {
        out.say(&[
            "📝 Context was consumed this iteration (context added since then is kept for the next one)",
        ]);
    } else {
        out.say(&["📝 Context was consumed this iteration"]);
    }
}

/// An auto-commit succeeded.
pub(crate) fn committed(out: &Voice, iteration: u32, hash: &str) {
    out.say(&[&format!(
        "📝 Auto-committed changes of iteration {iteration} ({hash})"
    )]);
}

/// ralph's own files were committed at the end of the loop.
pub(crate) fn progress_committed(out: &Voice, hash: &str) {
    out.say(&[&format!(
        "📝 Committed ralph's progress log and task file ({hash})"
    )]);
}

/// An auto-commit failed.
pub(crate) fn commit_failed(out: &Voice, reason: &str) {
    out.warn(&[&format!(
        "⚠️  Auto-commit failed: {reason}. The changes stay uncommitted in the working tree."
    )]);
}

/// The merge a task loop was handed is not resolved: its work stays uncommitted.
pub(crate) fn conflicts_not_committed(out: &Voice, files: &[String]) {
    out.warn(&[&format!(
        "⚠️  Not committed: conflict markers are left in {} from the merge of the base; the agent is asked to resolve them, and the work is committed once they are gone.",
        files.join(", ")
    )]);
}

/// The work an interrupted iteration left was committed as its loop started again.
pub(crate) fn interrupted_work_committed(out: &Voice, hash: &str) {
    out.say(&[&format!(
        "📝 Committed the work the interrupted iteration left ({hash}); the loop goes on with the next iteration"
    )]);
}

/// Ralph itself failed during an iteration.
pub(crate) fn iteration_error(out: &Voice, iteration: u32, error: &str) {
    out.warn(&[&format!("❌ Error in iteration {iteration}: {error}")]);
    out.say(&["Continuing to next iteration..."]);
}

/// The first stop request arrived.
pub(crate) fn stopping(out: &Voice) {
    out.say(&[
        "",
        "Gracefully stopping Ralph loop... (press Ctrl+C again to stop at once)",
    ]);
}

/// The loop's last line: why it ended, and what it took; then each agent's share.
pub(crate) fn run_ended(out: &Voice, end: &RunEnd) {
    let shown = format!("Loop ended: {}", run_summary(end));
    out.say(&["", &super::paint(super::Style::Bold, &shown, false)]);
    for share in super::agent_shares(&end.agents) {
        out.say(&[&format!("   {share}")]);
    }
}

/// What follows `Loop ended: `: the reason, iterations, time, tokens and cost.
pub(crate) fn run_summary(end: &RunEnd) -> String {
    // A reason that counts the iterations itself is not followed by the count again.
    let counted = matches!(end.stop, StopKind::Completed | StopKind::MaxIterations);
    let mut line = end.reason.clone();
    if !counted {
        line.push_str(&format!(
            " · {}",
            plural(u64::from(end.iterations), "iteration")
        ));
    }
    line.push_str(&format!(
        " · total time {}",
        long_duration_ms(end.total_duration_ms)
    ));
    if let Some(tokens) = end.tokens {
        line.push_str(&format!(" · {} tokens", compact_number(tokens.total())));
    }
    if let Some(cost) = end.cost_usd {
        line.push_str(&format!(" · {}", cost_text(cost)));
    }
    line
}

/// How to pick up a loop that stopped before completing.
pub(crate) fn resume_hint(out: &Voice, iteration: u32, limit_reached: bool) {
    let how = if limit_reached {
        "raise the limit and go on with `ralph --resume --max-iterations N`".to_owned()
    } else {
        format!("go on with `ralph --resume` (continues at iteration {iteration})")
    };
    out.say(&[&format!(
        "State kept: {how}, or start over with `ralph --reset`."
    )]);
}

/// `--max-cost` cannot work with this agent.
pub(crate) fn max_cost_unavailable(out: &Voice, agent: &str) {
    out.warn(&[&format!(
        "⚠️  --max-cost has no effect: {agent} does not report what a run costs. Use --max-tokens instead."
    )]);
}

/// An iteration hit `--iteration-timeout` or `--idle-timeout`.
pub(crate) fn iteration_timed_out(out: &Voice, iteration: u32, why: &str) {
    out.warn(&[&format!(
        "⏱️  Iteration {iteration} timed out ({why}); the agent and everything it started were stopped."
    )]);
}

/// The agent said its promise and then did not exit.
pub(crate) fn completion_grace_over(out: &Voice, iteration: u32, grace: Duration) {
    out.warn(&[&format!(
        "⏱️  Iteration {iteration}: the agent said its promise but was still running {} later; it and everything it started were stopped, and the iteration counts as completed (--completion-grace sets the wait).",
        long_duration(grace)
    )]);
}

/// The agent printed the abort promise.
pub(crate) fn agent_aborted(out: &Voice, message: &str) {
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
    out.say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// The agent failed in a way retrying does not fix (or retries ran out): what to do about it.
/// The failure itself was already shown, when the agent reported it.
/// `resumable`: the loop is the user's to go on with (`ralph --resume`); a task loop's run says
/// how to go on.
pub(crate) fn agent_failed(out: &Voice, failure: &crate::agents::Failure, resumable: bool) {
    let hint = match failure.kind {
        crate::agents::FailureKind::Auth => {
            "Check the agent's credentials (log in again, or set its API key)."
        }
        crate::agents::FailureKind::ModelNotFound => "Check the model name given with --model.",
        _ if resumable => "Check the provider's status, then continue with `ralph --resume`.",
        _ => "Check the provider's status.",
    };
    out.warn(&["", hint]);
}

/// What a wait before a retry is about.
pub(crate) struct RetryWait<'a> {
    pub(crate) iteration: u32,
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    /// The failure's kind (its label) and HTTP status.
    pub(crate) kind: &'a str,
    pub(crate) status: Option<u16>,
    pub(crate) until_reset: bool,
}

/// The retry countdown: in place on ralph's own terminal, one line at a time otherwise.
pub(crate) fn retry_countdown(out: &Voice, wait: &RetryWait<'_>, left: Duration) {
    let status = wait
        .status
        .map_or_else(String::new, |s| format!(" (HTTP {s})"));
    let why = if wait.until_reset {
        "until the limit resets"
    } else {
        "backing off"
    };
    let text = format!(
        "⏳ {}{status}: retrying iteration {} in {} ({why}; retry {} of {}, Ctrl+C to stop)",
        wait.kind,
        wait.iteration,
        short_duration(left),
        wait.attempt,
        wait.max_attempts
    );
    if !out.in_place() {
        // Several loops may share the terminal (or it is no terminal): a plain line each.
        out.say(&[&text]);
        return;
    }
    let mut stdout = super::stdout();
    let _ = write!(stdout, "\r\x1b[2K{text}");
    let _ = stdout.flush();
}

/// Ends an in-place countdown line.
pub(crate) fn retry_wait_done(out: &Voice) {
    if out.in_place() {
        out.say(&[""]);
    }
}

/// `--no-plugins` has no effect on this agent.
/// Codex runs with the `bwrap` it ships, the one on `PATH` being too old for its sandbox.
pub(crate) fn codex_bwrap_shipped(
    out: &Voice,
    system: &std::path::Path,
    version: &str,
    folder: &std::path::Path,
) {
    out.say(&[&format!(
        "🧱 Codex's sandbox needs bubblewrap 0.9 or newer, and {} is {version}: Codex runs with the bwrap it ships ({}) first on its PATH.",
        system.display(),
        folder.display()
    )]);
}

pub(crate) fn no_plugins_ignored(out: &Voice, agent: &str) {
    out.warn(&[&format!(
        "⚠️  --no-plugins only applies to OpenCode; it has no effect with {agent}."
    )]);
}

/// OpenCode loaded the obsolete placeholder plugin.
pub(crate) fn legacy_plugin_detected(out: &Voice) {
    out.warn(&[
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
pub(crate) fn tasks_blocked(out: &Voice, tasks: &[String]) {
    let mut lines = vec![
        String::new(),
        "⛔ No task can be started: every open task has failed or waits for one that cannot finish."
            .to_owned(),
    ];
    lines.extend(tasks.iter().map(|task| format!("   {task}")));
    lines
        .push("Fix or edit .ralph/ralph-tasks.md, then continue with `ralph --resume`.".to_owned());
    out.say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// A verification command starts.
pub(crate) fn verify_started(out: &Voice, command: &str) {
    out.say(&[&format!("🔎 Verifying: {command}")]);
}

/// A piece of a verification command's output, indented so it never reads as the agent's.
pub(crate) fn verify_output(out: &Voice, text: &str, starts_line: bool, ends_line: bool) {
    out.command_output("   │ ", text, (starts_line, ends_line), false);
}

/// A verification command finished.
pub(crate) fn verify_finished(out: &Voice, result: &crate::model::Verification) {
    if result.passed {
        out.say(&[&format!("   ✅ passed: {}", result.command)]);
    } else {
        out.say(&[&format!(
            "   ❌ failed ({}): {}",
            result.outcome(),
            result.command
        )]);
    }
}

/// The agent's completion claim was refused by checks that failed (verification commands, or
/// conflict markers left in files).
pub(crate) fn completion_refused_by_checks(out: &Voice, iteration: u32, failed: &[String]) {
    out.say(&[
        &format!(
            "⛔ Completion refused after iteration {iteration}: {} failed.",
            failed.join(", ")
        ),
        "Continuing; the next prompt shows the agent what failed.",
    ]);
}

/// A task's own verification failed; the task goes back to in progress.
pub(crate) fn task_verification_failed(out: &Voice, task: &str) {
    out.say(&[&format!(
        "⛔ Task \"{task}\" is not accepted: its verify command failed. It is marked [/] again."
    )]);
}

/// A task ran out of attempts.
pub(crate) fn task_failed(out: &Voice, task: &str, attempts: u32) {
    out.say(&[&format!(
        "❌ Task \"{task}\" failed after {attempts} attempts; it is marked [!] and the next task is taken."
    )]);
}

/// `--max-stalled` needs git to see changes.
pub(crate) fn max_stalled_unavailable(out: &Voice) {
    out.warn(&[
        "⚠️  --max-stalled has no effect here: this is not a git repository, so ralph cannot see which files change.",
    ]);
}

/// The loop starts on a detached HEAD: its commits will be on no branch.
pub(crate) fn detached_head(out: &Voice, head: &str) {
    out.warn(&[&format!(
        "⚠️  HEAD is detached (at {head}): ralph's commits will not be on any branch; check out a branch first (git switch -c <name>) to keep them"
    )]);
}

/// The paths that had uncommitted changes when the loop started (the first ten): ralph leaves
/// them out of its commits.
pub(crate) fn dirty_at_start(out: &Voice, paths: &[String]) {
    const SHOWN: usize = 10;
    let them = if paths.len() == 1 { "it" } else { "them" };
    let mut lines = vec![format!(
        "⚠️  {} had uncommitted changes when the loop started; ralph will not commit {them}, even if the agent changes {them} too (--commit-dirty commits everything):",
        plural(paths.len() as u64, "file")
    )];
    lines.extend(paths.iter().take(SHOWN).map(|path| format!("   {path}")));
    if paths.len() > SHOWN {
        lines.push(format!("   … and {} more", paths.len() - SHOWN));
    }
    out.warn(&lines.iter().map(String::as_str).collect::<Vec<_>>());
}

/// The hosts the sandbox's proxy refused in an iteration, and how to allow them.
pub(crate) fn sandbox_blocked(out: &Voice, hosts: &std::collections::BTreeMap<String, u32>) {
    let shown: Vec<String> = hosts
        .iter()
        .map(|(host, count)| format!("{host} ×{count}"))
        .collect();
    let first = (hosts.keys().next()).map_or("", |host| crate::model::sandbox_allow_value(host));
    out.warn(&[&format!(
        "🚧 blocked: {} — allow with --sandbox-allow {first}",
        shown.join(", ")
    )]);
}

/// The agent was killed by the sandbox's memory limit.
pub(crate) fn out_of_memory(out: &Voice, iteration: u32, limit: &str) {
    out.warn(&[&format!(
        "💥 Iteration {iteration}: the agent ran out of memory: the sandbox allows {limit} (--sandbox-memory); raise it if the work needs more"
    )]);
}

/// An unattended run with every permission and no sandbox.
pub(crate) fn unsandboxed(out: &Voice) {
    out.warn(&[
        "⚠️  The agents run unattended with every permission and no sandbox: they can read your secrets and reach any host; --sandbox keeps each in its own work tree (see the README's Sandbox section)",
    ]);
}

/// The agent changed protected paths: put back, never committed.
pub(crate) fn protected_restored(out: &Voice, iteration: u32, files: &[String], fails: bool) {
    let after = if fails {
        "--protect-mode fail ends the loop"
    } else {
        "the next prompt tells the agent why"
    };
    out.warn(&[&format!(
        "🛡️  Iteration {iteration} changed protected files ({}); they were put back and are not committed: {after}.",
        files.join(", ")
    )]);
}
