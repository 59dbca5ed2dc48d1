//! The `--status` dashboard and the `--list-tasks` listing: pure text from loaded data.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::format::{
    boxed, display_width, long_duration, long_duration_ms, pad, plural, preview, ranked_tools,
    stop_point,
};
use crate::agents::AgentKind;
use crate::storage::history::History;
use crate::storage::state::LoopState;
use crate::storage::tasks::TaskList;

/// What `--status` knows about the task file.
pub(crate) enum TasksStatus {
    /// Not shown (no `--tasks`, loop not in tasks mode).
    Hidden,
    Missing,
    Unreadable,
    Found(TaskList),
}

/// Everything the dashboard shows.
pub(crate) struct Dashboard {
    pub(crate) state: Option<LoopState>,
    /// The loop lock is held by a running ralph.
    pub(crate) running: bool,
    /// The loops in `.ralph/worktrees/`.
    pub(crate) workers: Vec<super::report::WorkerReport>,
    pub(crate) context: Vec<crate::storage::context::Where>,
    pub(crate) tasks: TasksStatus,
    /// The history, with only its last records built.
    pub(crate) history: Option<History>,
    /// How many records the history holds.
    pub(crate) history_count: usize,
    pub(crate) now: DateTime<Utc>,
    /// The last line the agent printed in the running iteration (from its log).
    pub(crate) last_line: Option<String>,
}

/// The dashboard's lines.
pub(crate) fn dashboard(data: &Dashboard) -> Vec<String> {
    let mut lines = vec![String::new()];
    lines.extend(boxed(&["Ralph Wiggum Status".to_owned()]));
    lines.push(String::new());
    loop_block(data, &mut lines);
    context_block(&data.context, &mut lines);
    tasks_block(&data.tasks, &mut lines);
    workers_block(&data.workers, data.now, &mut lines);
    if let Some(history) = data.history.as_ref().filter(|h| !h.iterations.is_empty()) {
        history_block(history, data.history_count, &mut lines);
    }
    lines.push(String::new());
    lines
}

/// The pending context; in a run of several loops, where each section went and where it goes.
fn context_block(sections: &[crate::storage::context::Where], lines: &mut Vec<String>) {
    if sections.is_empty() {
        return;
    }
    lines.push(String::new());
    let routed = (sections.iter()).any(|each| each.task.is_some() || !each.given_to.is_empty());
    if !routed {
        lines.push("📝 PENDING CONTEXT (will be injected next iteration):".to_owned());
    } else {
        lines.push("📝 PENDING CONTEXT:".to_owned());
    }
    for section in sections {
        lines.extend(section.text.trim().lines().map(|line| format!("   {line}")));
        if !routed {
            continue;
        }
        let given: Vec<String> = (section.given_to.iter())
            .map(|(task, iteration)| format!("{task} (iteration {iteration})"))
            .collect();
        lines.push(match (&section.task, given.is_empty()) {
            (Some(task), _) => format!("   → for task {task}'s next prompt"),
            (None, true) => "   → for the next prompt of every task loop".to_owned(),
            (None, false) => format!(
                "   → in the prompts of {}; every task loop that starts or iterates later gets it too",
                given.join(", ")
            ),
        });
    }
}

/// One line per loop in a worktree: `api  🔄 running  iteration 2 / 10 · 1m 5s · active 3s ago ·
/// 1.2k tokens · $0.02`.
fn workers_block(
    workers: &[super::report::WorkerReport],
    now: DateTime<Utc>,
    lines: &mut Vec<String>,
) {
    if workers.is_empty() {
        return;
    }
    lines.push(String::new());
    lines.push(format!("👷 TASK LOOPS ({})", workers.len()));
    let width = workers
        .iter()
        .map(|w| display_width(&w.task))
        .max()
        .unwrap_or(0);
    for worker in workers {
        let icon = match worker.state {
            "running" => "🔄",
            "done" => "✅",
            "crashed" => "💥",
            "failed" => "❌",
            _ => "⏸️",
        };
        let mut parts = Vec::new();
        if worker.iterations > 0 || worker.state != "running" {
            parts.push(plural(u64::from(worker.iterations), "iteration"));
        }
        if let Some(iteration) = worker.shown_iteration {
            let max = worker
                .max_iterations
                .filter(|max| *max > 0)
                .map_or_else(String::new, |max| format!(" / {max}"));
            let agent = (worker.agent.as_deref())
                .filter(|_| worker.state == "running")
                .map_or_else(String::new, |agent| {
                    format!(" ({})", AgentKind::display_name_for(agent))
                });
            parts.push(format!(
                "{} iteration {iteration}{max}{agent}",
                if worker.state == "running" {
                    "in"
                } else {
                    "last"
                }
            ));
        }
        if let Some(ms) = worker.elapsed_ms {
            parts.push(long_duration_ms(ms));
        }
        if let Some(at) = worker.last_activity {
            let ago = (now - at).to_std().unwrap_or(Duration::ZERO);
            parts.push(format!("active {} ago", long_duration(ago)));
        }
        if worker.tokens > 0 {
            parts.push(format!("{} tokens", super::compact_number(worker.tokens)));
        }
        if let Some(cost) = worker.cost_usd {
            parts.push(super::cost_text(cost));
        }
        if let Some(reason) = &worker.stop_reason {
            parts.push(reason.clone());
        }
        lines.push(format!(
            "   {}  {icon} {} {}",
            pad(&worker.task, width),
            pad(worker.state, 8),
            parts.join(" · ")
        ));
    }
}

fn field(label: &str, value: impl std::fmt::Display) -> String {
    format!("   {}{value}", pad(&format!("{label}:"), 14))
}

fn loop_block(data: &Dashboard, lines: &mut Vec<String>) {
    let Some(state) = &data.state else {
        lines.push("⏹️  No active loop".to_owned());
        return;
    };
    if state.parallel() > 0 || state.worker.is_some() {
        run_block(data, state, lines);
        return;
    }
    let max = if state.max_iterations > 0 {
        format!(" / {}", state.max_iterations)
    } else {
        " (unlimited)".to_owned()
    };
    let iteration = state.shown_iteration(data.history.as_ref().and_then(History::last_iteration));
    if state.active && data.running {
        lines.push("🔄 ACTIVE LOOP".to_owned());
    } else if state.active {
        lines.push(format!(
            "💥 STOPPED UNEXPECTEDLY at iteration {iteration} (resume with `ralph --resume`)"
        ));
    } else if state.stopped_after_iteration() {
        let reason = state.stop_reason.as_deref().unwrap_or_default();
        lines.push(format!(
            "⏸️  STOPPED {}: {reason} (resume with `ralph --resume`)",
            stop_point(iteration)
        ));
    } else {
        lines.push(format!(
            "⏸️  INTERRUPTED at iteration {iteration} (resume with `ralph --resume`)"
        ));
    }
    lines.push(field("Iteration", format!("{iteration}{max}")));
    started_and_elapsed(data, state, lines);
    lines.push(field("Promise", &state.completion_promise));
    lines.push(field("Agent", AgentKind::display_name_for(&state.agent)));
    if !state.model.is_empty() {
        lines.push(field("Model", &state.model));
    }
    if state.tasks_mode {
        lines.push(field("Tasks Mode", "ENABLED"));
        lines.push(field("Task Promise", &state.task_promise));
    }
    lines.push(field("Prompt", preview(&state.prompt, 60)));
    if let Some(line) = &data.last_line {
        lines.push(field("Agent said", preview(line, 80)));
    }
}

/// A run of task loops, `--parallel` or a `--worker`: its own state (each task loop's is in the
/// task loops' block).
fn run_block(data: &Dashboard, state: &LoopState, lines: &mut Vec<String>) {
    let (what, running, mut again) = match &state.worker {
        Some(worker) => (
            "WORKER",
            format!("🛰️  WORKER {worker}"),
            "start it again with `ralph --worker`",
        ),
        None => (
            "PARALLEL RUN",
            format!("🔄 PARALLEL RUN: up to {} tasks at once", state.parallel()),
            "resume with `ralph --resume`",
        ),
    };
    let reason = state.stop_reason.as_deref().unwrap_or("stopped");
    if reason.contains("ralph --") {
        // The reason says how to go on already.
        again = "";
    }
    let again = if again.is_empty() {
        String::new()
    } else {
        format!(" ({again})")
    };
    lines.push(if state.active && data.running {
        running
    } else if state.active {
        format!("💥 {what} STOPPED UNEXPECTEDLY{again}")
    } else {
        format!("⏸️  {what} STOPPED: {reason}{again}")
    });
    started_and_elapsed(data, state, lines);
    lines.push(field("Agent", AgentKind::display_name_for(&state.agent)));
    if state.max_iterations > 0 {
        lines.push(field(
            "Per task",
            format!(
                "at most {}",
                plural(u64::from(state.max_iterations), "iteration")
            ),
        ));
    }
    lines.push(field("Prompt", preview(&state.prompt, 60)));
    if state.active {
        for (task, why) in &state.waiting {
            lines.push(field("Waits", format!("{task}: {why}")));
        }
    }
}

/// When the loop started, and how long it has run (until it stopped).
fn started_and_elapsed(data: &Dashboard, state: &LoopState, lines: &mut Vec<String>) {
    lines.push(field(
        "Started",
        state
            .started_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    ));
    let until = if state.active {
        data.now
    } else {
        state.stopped_at.unwrap_or(data.now)
    };
    let elapsed = (until - state.started_at)
        .to_std()
        .unwrap_or(Duration::ZERO);
    lines.push(field("Elapsed", long_duration(elapsed)));
}

fn tasks_block(tasks: &TasksStatus, lines: &mut Vec<String>) {
    let list = match tasks {
        TasksStatus::Hidden => return,
        TasksStatus::Missing => {
            lines.push(String::new());
            lines.push("📋 CURRENT TASKS: (no tasks file found)".to_owned());
            return;
        }
        TasksStatus::Unreadable => {
            lines.push(String::new());
            lines.push("📋 CURRENT TASKS: (error reading tasks)".to_owned());
            return;
        }
        TasksStatus::Found(list) if list.is_empty() => {
            lines.push(String::new());
            lines.push("📋 CURRENT TASKS: (no tasks found)".to_owned());
            return;
        }
        TasksStatus::Found(list) => list,
    };
    lines.push(String::new());
    lines.push("📋 CURRENT TASKS:".to_owned());
    lines.extend(numbered_tasks(list, "   "));
    use crate::storage::tasks::TaskStatus;
    lines.push(String::new());
    lines.push(format!(
        "   Progress: {}/{} complete, {} in progress",
        list.count(TaskStatus::Complete),
        list.tasks.len(),
        list.count(TaskStatus::InProgress)
    ));
}

fn history_block(history: &History, count: usize, lines: &mut Vec<String>) {
    lines.push(String::new());
    lines.push(format!(
        "📊 HISTORY ({})",
        plural(count as u64, "iteration")
    ));
    lines.push(format!(
        "   Total time:   {}",
        long_duration_ms(history.total_duration_ms)
    ));
    if history.total_tokens.total() > 0 {
        lines.push(format!(
            "   Tokens:       {}",
            super::tokens_text(&history.total_tokens)
        ));
    }
    if let Some(cost) = history.total_cost_usd {
        lines.push(format!("   Cost:         {}", super::cost_text(cost)));
    }
    let shares = super::agent_shares(&history.agents);
    if !shares.is_empty() {
        lines.push("   By agent:".to_owned());
        lines.extend(shares.iter().map(|share| format!("     {share}")));
    }
    lines.push(String::new());
    lines.push("   Recent iterations:".to_owned());
    let start = history.iterations.len().saturating_sub(5);
    lines.extend(history.iterations[start..].iter().map(record_line));
    struggle_block(&history.struggle_indicators, lines);
}

/// One recent iteration: `🔄 #3: 1m 2s | Edit:2 Bash:1 | $0.02 | rate limit`; a completion
/// refused (by its checks — holdout ones by their count —, or by the merge gate) is
/// `⛔ … | refused: …`, an interrupted one `⏹️`; protected files the agent changed end it with
/// `| protected files put back: …`.
fn record_line(record: &crate::storage::history::IterationRecord) -> String {
    let refused = (record.merge_refused.as_ref())
        .map(|why| format!("merge refused: {why}"))
        .or_else(|| (record.completion_refused.as_ref()).map(|why| format!("refused: {why}")));
    let icon = if record.interrupted {
        "⏹️"
    } else if refused.is_some() {
        "⛔"
    } else if record.completion_detected {
        "✅"
    } else if record.exit_code != 0 {
        "❌"
    } else {
        "🔄"
    };
    let tools: Vec<String> = ranked_tools(&record.tools_used)
        .into_iter()
        .take(3)
        .map(|(name, count)| format!("{name}:{count}"))
        .collect();
    let tools = if tools.is_empty() {
        "no tools".to_owned()
    } else {
        tools.join(" ")
    };
    // A task loop's iteration is named as `--log` takes it: `TASK/N`.
    let which = match &record.task_id {
        Some(task) => format!("{task}/{}", record.iteration),
        None => format!("#{}", record.iteration),
    };
    let mut line = format!(
        "   {icon} {which}: {} | {tools}",
        long_duration_ms(record.duration_ms)
    );
    if let Some(cost) = record.cost_usd {
        line.push_str(&format!(" | {}", super::cost_text(cost)));
    }
    if let Some(failure) = &record.failure {
        line.push_str(&format!(" | {}", failure.kind.label()));
    }
    if record.interrupted {
        line.push_str(" | interrupted");
    }
    if let Some(refused) = refused {
        line.push_str(&format!(" | {refused}"));
    }
    if !record.protected_changes.is_empty() {
        line.push_str(&format!(
            " | protected files put back: {}",
            record.protected_changes.join(", ")
        ));
    }
    line
}

/// The struggle indicators, when they are notable.
fn struggle_block(struggle: &crate::storage::history::StruggleIndicators, lines: &mut Vec<String>) {
    if struggle.is_notable() {
        lines.push(String::new());
        lines.push("⚠️  STRUGGLE INDICATORS:".to_owned());
        if struggle.no_progress_iterations >= 3 {
            lines.push(format!(
                "   - No file changes in {} iterations",
                struggle.no_progress_iterations
            ));
        }
        if struggle.short_iterations >= 3 {
            lines.push(format!(
                "   - {} very short iterations (< 30s)",
                struggle.short_iterations
            ));
        }
        let mut repeated: Vec<(&String, &u32)> = struggle
            .repeated_errors
            .iter()
            .filter(|(_, count)| **count >= 2)
            .collect();
        repeated.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (error, count) in repeated.into_iter().take(3) {
            lines.push(format!(
                "   - Same error {count}x: \"{}\"",
                preview(error, 50)
            ));
        }
        lines.push(String::new());
        lines.push("   💡 Consider using: ralph --add-context \"your hint here\"".to_owned());
    }
}

/// The `--list-tasks` lines.
pub(crate) fn task_list(list: &TaskList) -> Vec<String> {
    if list.is_empty() {
        return vec!["No tasks found.".to_owned()];
    }
    let mut lines = vec!["Current tasks:".to_owned()];
    lines.extend(numbered_tasks(list, ""));
    lines
}

/// ` (blocked by: db, cfg (failed))` for a todo task that cannot start yet.
fn blocked_note(list: &TaskList, task: &crate::storage::tasks::Task) -> String {
    if task.status != crate::storage::tasks::TaskStatus::Todo {
        return String::new();
    }
    let blockers = list.blockers(task);
    if blockers.is_empty() {
        String::new()
    } else {
        format!(" (blocked by: {})", blockers.join(", "))
    }
}

/// The task's own settings, one line: `agent: codex · model: m · promise: DONE · timeout: 1h ·
/// max iterations: 30 · single attempt · success: …`.
fn task_details(task: &crate::storage::tasks::Task) -> Option<String> {
    use crate::storage::tasks::MAX_ITERATIONS;
    let mut parts: Vec<String> = Vec::new();
    let mut add = |label: &str, value: Option<&str>| {
        if let Some(value) = value {
            parts.push(format!("{label}: {value}"));
        }
    };
    add("agent", task.agent());
    add("model", task.model());
    add("promise", task.promise());
    add("timeout", task.property(crate::storage::tasks::TIMEOUT));
    add("max iterations", task.property(MAX_ITERATIONS));
    add("success", task.success());
    if task.attempt_limit() == Some(1) && task.property(MAX_ITERATIONS) != Some("1") {
        parts.push("single attempt".to_owned());
    }
    (!parts.is_empty()).then(|| parts.join(" · "))
}

/// `N. <icon> text (blocked by: …)` per task and `   <icon> text` per subtask, after `indent`.
/// The numbers are padded to one width, so every task's icon and text start in one column, and
/// its settings and subtasks start under its icon.
fn numbered_tasks(list: &TaskList, indent: &str) -> Vec<String> {
    let column = list
        .tasks
        .iter()
        .map(|task| display_width(&format!("{}. ", task.number)))
        .max()
        .unwrap_or(0);
    let under = format!("{indent}{}", pad("", column));
    let mut lines = Vec::new();
    for task in &list.tasks {
        lines.push(format!(
            "{indent}{}{} {}{}",
            pad(&format!("{}.", task.number), column),
            task.status.icon(),
            task.text,
            blocked_note(list, task)
        ));
        if let Some(details) = task_details(task) {
            lines.push(format!("{under}{details}"));
        }
        for subtask in &task.subtasks {
            lines.push(format!("{under}{} {}", subtask.status.icon(), subtask.text));
        }
    }
    lines
}

/// The questions waiting for an answer, for `--status` (of `remote`'s workers, with
/// `--remote`): each with how to answer it.
pub(crate) fn questions(
    waiting: &[crate::storage::questions::Question],
    now: chrono::DateTime<chrono::Utc>,
    remote: Option<&str>,
) -> Vec<String> {
    let on = remote.map_or_else(String::new, |remote| format!(" --remote {remote}"));
    let mut lines = Vec::new();
    for question in waiting {
        let of =
            (question.task.as_deref()).map_or_else(String::new, |task| format!("task {task}, "));
        let asked = super::format::compact_duration(question.waited(now));
        lines.push(format!(
            "❓ Question {} ({of}iteration {}, waiting {asked}): {}",
            question.id, question.iteration, question.question
        ));
        lines.extend(super::numbered(&question.options).map(|option| format!("   {option}")));
        lines.push(format!(
            "   Answer with: ralph --answer {} \"…\"{on}",
            question.id
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::storage::context::Where;

    fn section(text: &str, task: Option<&str>, given: &[(&str, u32)]) -> Where {
        Where {
            text: text.to_owned(),
            task: task.map(str::to_owned),
            given_to: (given.iter())
                .map(|(task, iteration)| ((*task).to_owned(), *iteration))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn pending_context_says_where_each_hint_went_in_a_run_of_several_loops() {
        let mut lines = Vec::new();
        super::context_block(
            &[
                section(
                    "## Context added at T\nUSE SQLITE",
                    None,
                    &[("a", 2), ("b", 1)],
                ),
                section("## Context added at U for task c\nC ONLY", Some("c"), &[]),
                section("## Context added at V\nLATER", None, &[]),
            ],
            &mut lines,
        );
        assert_eq!(
            lines,
            [
                "",
                "📝 PENDING CONTEXT:",
                "   ## Context added at T",
                "   USE SQLITE",
                "   → in the prompts of a (iteration 2), b (iteration 1); every task loop that starts or iterates later gets it too",
                "   ## Context added at U for task c",
                "   C ONLY",
                "   → for task c's next prompt",
                "   ## Context added at V",
                "   LATER",
                "   → for the next prompt of every task loop",
            ]
        );
        let mut lines = Vec::new();
        super::context_block(
            &[section("## Context added at V\nLATER", None, &[])],
            &mut lines,
        );
        assert_eq!(
            lines,
            [
                "",
                "📝 PENDING CONTEXT (will be injected next iteration):",
                "   ## Context added at V",
                "   LATER"
            ]
        );
    }
}
