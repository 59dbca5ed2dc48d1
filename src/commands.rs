//! The commands that act and exit: `--status`, `--add-context`, `--clear-context`,
//! `--list-tasks`, `--add-task`, `--remove-task`, `--answer`.
//!
//! Read-only commands never create or change anything on disk (not even `.ralph/`), so they are
//! safe to run in another terminal while a loop works.

mod answer;
pub(crate) mod log;
mod steer;

pub(crate) use answer::answer;

pub(crate) use steer::{add_context_to, add_task_to, add_task_with, stop_running};
mod reset;
mod watch;

pub(crate) use log::{LogStyle, show as show_log};
pub(crate) use reset::reset;
pub(crate) use watch::watch;

use crate::error::fail;
use crate::exit::ExitStatus;
use crate::output::{self, report, status};
use crate::storage::history;
use crate::storage::logs;
use crate::storage::state::{self, LoopState};
use crate::storage::tasks::{self, TaskList};
use crate::storage::{self, Loaded, RalphDir, context};

/// What `--status` and `--watch` read from `.ralph/`.
struct Gathered {
    state: Option<LoopState>,
    history: Option<history::History>,
    history_count: usize,
    context: Option<String>,
    context_sections: Vec<context::Where>,
    tasks: status::TasksStatus,
    running: bool,
    workers: Vec<report::WorkerReport>,
    /// The agents' questions waiting for an answer.
    questions: Vec<storage::questions::Question>,
}

/// Reads everything `--status` shows; `warn`: say so when a file is corrupt.
fn gather(dir: &RalphDir, show_tasks: bool, warn: bool) -> Gathered {
    let state = warn_if_corrupt(&dir.state(), state::load(&dir.state()), warn);
    // Only the last five records are built; the count covers them all.
    let recent = history::load_recent(&dir.history(), 5);
    let (history, history_count) = warn_if_corrupt(&dir.history(), recent, warn)
        .map_or((None, 0), |(history, count)| (Some(history), count));
    let context = context::pending(&dir.context())
        .ok()
        .flatten()
        .map(|pending| pending.text());
    let context_sections = context::whereabouts(dir);
    let tasks_wanted = show_tasks || state.as_ref().is_some_and(|s| s.tasks_mode);
    let tasks = if tasks_wanted {
        match storage::read_text(&dir.tasks()) {
            Ok(Some(content)) => status::TasksStatus::Found(TaskList::parse(&content)),
            Ok(None) => status::TasksStatus::Missing,
            Err(_) => status::TasksStatus::Unreadable,
        }
    } else {
        status::TasksStatus::Hidden
    };
    let running = state.as_ref().is_some_and(|s| s.active) && storage::lock::loop_is_running(dir);
    let workers = workers(dir, history.as_ref());
    Gathered {
        state,
        history,
        history_count,
        context,
        context_sections,
        tasks,
        running,
        workers,
        questions: storage::questions::pending_in(&crate::git::question_homes(dir)),
    }
}

/// `--status` (`json`: the report of `output/report.rs`).
pub(crate) fn status(dir: &RalphDir, show_tasks: bool, json: bool) -> ExitStatus {
    let gathered = gather(dir, show_tasks, true);
    if json {
        report::print(&report_of(gathered));
        return ExitStatus::Success;
    }
    let Gathered {
        state,
        history,
        history_count,
        context: _,
        context_sections,
        tasks,
        running,
        workers,
        questions,
    } = gathered;
    // What the agent of the running iteration said last, from its log.
    let last_line = running
        .then(|| {
            let iteration = state.as_ref()?.iteration;
            logs::last_line(&logs::path(&dir.logs(), iteration))
        })
        .flatten();
    let lines = status::dashboard(&status::Dashboard {
        state,
        running,
        workers,
        context: context_sections,
        tasks,
        last_line,
        history,
        history_count,
        now: crate::model::now(),
    });
    output::say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
    let waiting = status::questions(&questions, crate::model::now(), None);
    output::say(&waiting.iter().map(String::as_str).collect::<Vec<_>>());
    ExitStatus::Success
}

/// What `--status --json` reports; `--watch` draws it (tasks shown when the file exists).
pub(crate) fn status_report(dir: &RalphDir) -> report::StatusReport {
    report_of(gather(dir, dir.tasks().exists(), false))
}

fn report_of(gathered: Gathered) -> report::StatusReport {
    report::StatusReport {
        schema: report::SCHEMA,
        loop_state: gathered.state.as_ref().map(|s| {
            let last = gathered
                .history
                .as_ref()
                .and_then(history::History::last_iteration);
            report::loop_report(s, gathered.running, last, crate::model::now())
        }),
        pending_context: gathered.context,
        pending_context_sections: gathered.context_sections,
        tasks: tasks_of(&gathered.tasks),
        history: report::history_report(gathered.history.as_ref(), gathered.history_count),
        workers: gathered.workers,
        questions: gathered.questions,
    }
}

fn tasks_of(tasks: &status::TasksStatus) -> Option<report::TasksReport> {
    match tasks {
        status::TasksStatus::Hidden => None,
        status::TasksStatus::Missing => Some(report::tasks_report("missing", &TaskList::default())),
        status::TasksStatus::Unreadable => {
            Some(report::tasks_report("unreadable", &TaskList::default()))
        }
        status::TasksStatus::Found(list) => Some(report::tasks_report("found", list)),
    }
}

/// The task loops of a run: each loop in `.ralph/worktrees/` (its own `.ralph/` state and
/// history), then each task the base's history records whose worktree is gone (merged, failed
/// or stopped), from its records there.
fn workers(dir: &RalphDir, recent: Option<&history::History>) -> Vec<report::WorkerReport> {
    let mut workers = worktree_loops(dir);
    // The whole history is read only when its last records are a run's task loops': a long
    // history of a single loop costs `--status` nothing more.
    let of_tasks = recent.is_some_and(|h| h.iterations.iter().any(|r| r.task_id.is_some()));
    if !of_tasks {
        return workers;
    }
    let Some(history) = history::load(&dir.history()).ok() else {
        return workers;
    };
    let list = storage::read_text(&dir.tasks())
        .ok()
        .flatten()
        .map(|content| TaskList::parse(&content))
        .unwrap_or_default();
    let ids = tasks::task_ids(&list);
    let mut recorded: Vec<&str> = Vec::new();
    for record in &history.iterations {
        if let Some(id) = record.task_id.as_deref()
            && !recorded.contains(&id)
            && !workers.iter().any(|worker| worker.task == id)
        {
            recorded.push(id);
        }
    }
    for id in recorded {
        let status = (ids.iter().position(|each| each == id)).map(|index| list.tasks[index].status);
        workers.push(task_from_history(id, &history, status));
    }
    workers.sort_by(|a, b| a.task.cmp(&b.task));
    workers
}

/// A task of a run whose worktree is gone, as the base's history records it.
fn task_from_history(
    id: &str,
    history: &history::History,
    status: Option<tasks::TaskStatus>,
) -> report::WorkerReport {
    let records: Vec<&history::IterationRecord> = (history.iterations.iter())
        .filter(|record| record.task_id.as_deref() == Some(id))
        .collect();
    let last = records.last();
    let cost: Vec<f64> = records.iter().filter_map(|r| r.cost_usd).collect();
    report::WorkerReport {
        task: id.to_owned(),
        branch: last
            .and_then(|r| r.branch.clone())
            .unwrap_or_else(|| format!("ralph/{id}")),
        state: match status {
            Some(tasks::TaskStatus::Complete) => "done",
            Some(tasks::TaskStatus::Failed) => "failed",
            _ => "stopped",
        },
        iteration: last.map(|r| r.iteration),
        shown_iteration: last.map(|r| r.iteration),
        max_iterations: None,
        elapsed_ms: Some(records.iter().map(|r| r.duration_ms).sum()),
        last_activity: last.map(|r| r.ended_at),
        tokens: records
            .iter()
            .filter_map(|r| r.tokens)
            .map(|usage| usage.total())
            .sum(),
        cost_usd: (!cost.is_empty()).then(|| cost.iter().sum()),
        stop_reason: None,
        iterations: u32::try_from(records.len()).unwrap_or(u32::MAX),
        agent: last.and_then(|r| r.agent.clone()),
    }
}

/// The loops in `.ralph/worktrees/`: each worktree's own `.ralph/` state and history.
fn worktree_loops(dir: &RalphDir) -> Vec<report::WorkerReport> {
    let now = crate::model::now();
    (crate::git::worktree_homes(dir).into_iter())
        .map(|(id, own)| worker(&id, &own, now))
        .collect()
}

fn worker(id: &str, dir: &RalphDir, now: chrono::DateTime<chrono::Utc>) -> report::WorkerReport {
    let state = state::load(&dir.state()).ok();
    let (history, count) = history::load_recent(&dir.history(), 1)
        .ok()
        .map_or((None, 0), |(history, count)| (Some(history), count));
    let last_activity = std::fs::metadata(dir.history())
        .and_then(|meta| meta.modified())
        .ok()
        .map(chrono::DateTime::<chrono::Utc>::from);
    let last = history.as_ref().and_then(history::History::last_iteration);
    let loop_report = state.as_ref().map(|s| {
        let running = s.active && storage::lock::loop_is_running(dir);
        report::loop_report(s, running, last, now)
    });
    report::WorkerReport {
        task: id.to_owned(),
        branch: format!("ralph/{id}"),
        state: loop_report.as_ref().map_or("done", |r| r.state),
        iteration: loop_report.as_ref().map(|r| r.iteration),
        shown_iteration: loop_report.as_ref().map(|r| r.shown_iteration),
        max_iterations: loop_report.as_ref().map(|r| r.max_iterations),
        elapsed_ms: loop_report.as_ref().map(|r| r.elapsed_ms),
        last_activity,
        tokens: history.as_ref().map_or(0, |h| h.total_tokens.total()),
        cost_usd: history.as_ref().and_then(|h| h.total_cost_usd),
        iterations: u32::try_from(count).unwrap_or(u32::MAX),
        agent: loop_report
            .as_ref()
            .map(|r| r.agent.clone())
            .or_else(|| history.as_ref()?.iterations.last()?.agent.clone()),
        stop_reason: loop_report.and_then(|r| r.stop_reason),
    }
}

fn warn_if_corrupt<T>(path: &std::path::Path, loaded: Loaded<T>, warn: bool) -> Option<T> {
    match loaded {
        Loaded::Corrupt(reason) => {
            if !warn {
                return None;
            }
            output::corrupt_file(&output::Voice::plain(), path, &reason, None);
            None
        }
        other => other.ok(),
    }
}

/// `--status --remote NAME`: every claim on the remote, and the base's task board (`ttl`: the
/// `--claim-ttl` after which a claim shows as stale).
pub(crate) fn remote_status(
    cwd: &std::path::Path,
    remote: &str,
    ttl: std::time::Duration,
    json: bool,
) -> anyhow::Result<ExitStatus> {
    let seen = crate::fleet::remote_status(cwd, remote, ttl)?;
    if json {
        report::print(&report::RemoteReport {
            schema: report::SCHEMA,
            remote: &seen.remote,
            base: &seen.base,
            claims: &seen.claims,
            budget: seen.budget.as_ref(),
            tasks: report::tasks_report("found", &seen.list),
            left_to_run: seen.list.left_to_run(),
            questions: &seen.questions,
        });
        return Ok(ExitStatus::Success);
    }
    // One line per task of the base: its box, id and description.
    let board: Vec<output::BoardLine> = (seen.list.tasks.iter())
        .zip(tasks::task_ids(&seen.list))
        .map(|(task, id)| output::BoardLine {
            icon: task.status.icon(),
            id,
            text: task.text.clone(),
        })
        .collect();
    let shown = (&seen.claims[..], seen.budget.as_ref());
    output::remote_status(&seen.remote, &seen.base, shown, seen.now, &board);
    let waiting = status::questions(&seen.questions, seen.now, Some(&seen.remote));
    output::say(&waiting.iter().map(String::as_str).collect::<Vec<_>>());
    Ok(ExitStatus::Success)
}

/// `--add-context TEXT` (`--task ID`: for that task's loop alone, an id of the task list).
pub(crate) fn add_context(
    dir: &RalphDir,
    text: &str,
    task: Option<&str>,
) -> anyhow::Result<ExitStatus> {
    add_context_to(dir, text, task)?;
    output::context_added(&dir.context(), context_readers(dir), task.map(str::trim));
    Ok(ExitStatus::Success)
}

/// `id` when the task list has a task with that id; else the refusal, naming the known ids.
pub(super) fn known_task<'a>(dir: &RalphDir, id: &'a str) -> anyhow::Result<&'a str> {
    let content = storage::read_text(&dir.tasks())?.unwrap_or_default();
    let ids = tasks::task_ids(&TaskList::parse(&content));
    if ids.iter().any(|each| each == id) {
        return Ok(id);
    }
    let known = if ids.is_empty() {
        "it has no tasks".to_owned()
    } else {
        format!("its tasks: {}", ids.join(", "))
    };
    Err(fail(format!(
        "--task {id}: there is no task '{id}' in {} ({known})",
        dir.tasks().display()
    ))
    .into())
}

/// Who reads the context added now: a loop running here (a single one, or a run of several
/// whose task loops each get it: `--parallel`, `--worker`), or the next loop to start.
fn context_readers(dir: &RalphDir) -> output::ContextReaders {
    if !storage::lock::loop_is_running(dir) {
        return output::ContextReaders::NextLoop;
    }
    let single = (state::load(&dir.state()).ok())
        .is_some_and(|s| s.active && s.parallel() == 0 && s.worker.is_none());
    if single {
        output::ContextReaders::OneLoop
    } else {
        output::ContextReaders::TaskLoops
    }
}

/// `--clear-context`.
pub(crate) fn clear_context(dir: &RalphDir) -> anyhow::Result<ExitStatus> {
    let had_content = context::clear(dir)?;
    output::context_cleared(had_content);
    Ok(ExitStatus::Success)
}

/// `--list-tasks` (`json`: the tasks report of `output/report.rs`).
pub(crate) fn list_tasks(dir: &RalphDir, json: bool) -> anyhow::Result<ExitStatus> {
    if json {
        let report = match storage::read_text(&dir.tasks()) {
            Ok(Some(content)) => report::tasks_report("found", &TaskList::parse(&content)),
            Ok(None) => report::tasks_report("missing", &TaskList::default()),
            Err(_) => report::tasks_report("unreadable", &TaskList::default()),
        };
        report::print(&report);
        return Ok(ExitStatus::Success);
    }
    match storage::read_text(&dir.tasks()) {
        Ok(Some(content)) => {
            let lines = status::task_list(&TaskList::parse(&content));
            output::say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
            let problems = tasks::problems(&content);
            if !problems.is_empty() {
                output::task_file_problems(&output::Voice::plain(), &dir.tasks(), &problems);
            }
            Ok(ExitStatus::Success)
        }
        Ok(None) => {
            output::no_tasks_file(&dir.tasks());
            Ok(ExitStatus::Success)
        }
        Err(err) => Err(fail(format!("cannot read {}: {err}", dir.tasks().display())).into()),
    }
}

/// `--add-task DESCRIPTION`: appends the task under the task file's lock. A duplicate id, a
/// task blocked by itself and an empty id list are refused; a blocker that does not exist yet
/// is a warning (it may be added next).
pub(crate) fn add_task(
    dir: &RalphDir,
    description: &str,
    place: (Option<&str>, Option<&str>),
    own: &[(&'static str, String)],
) -> anyhow::Result<ExitStatus> {
    let (number, unknown) = steer::add_task_with(dir, description, place, own)?;
    output::task_added(description.trim(), number);
    if !unknown.is_empty() {
        output::unknown_blockers(&unknown);
    }
    Ok(ExitStatus::Success)
}

/// `--remove-task N`, under the task file's lock.
pub(crate) fn remove_task(dir: &RalphDir, number: usize) -> anyhow::Result<ExitStatus> {
    if !dir.tasks().exists() {
        return Err(fail(format!(
            "no tasks file found ({}). Add a task first: ralph --add-task \"description\"",
            dir.tasks().display()
        ))
        .into());
    }
    let outcome = tasks::edit(dir, |current| {
        match tasks::remove_task(current.unwrap_or_default(), number) {
            Ok(updated) => (Some(updated), Ok(())),
            Err(err) => (None, Err(err)),
        }
    })?;
    match outcome {
        Ok(()) => {
            output::task_removed(number);
            Ok(ExitStatus::Success)
        }
        Err(err) => Err(fail(format!("{err}; see the numbers with `ralph --list-tasks`")).into()),
    }
}

/// `--report [FILE]`: the HTML report of the loop here.
pub(crate) fn report(
    dir: &RalphDir,
    cwd: &std::path::Path,
    file: Option<&std::path::Path>,
) -> anyhow::Result<ExitStatus> {
    let to = crate::report::destination(dir, file);
    let nothing = || {
        fail(format!(
            "nothing to report in {}: no ralph loop has run here; run the loop first (ralph \"your prompt\"), or run --report in the directory it ran in",
            dir.root().display()
        ))
    };
    let repo = crate::git::Repo::discover(cwd);
    if to.as_os_str() == "-" {
        let page = crate::report::page(dir, repo.as_ref(), &to, None).ok_or_else(nothing)?;
        output::report_page(&page);
        return Ok(ExitStatus::Success);
    }
    if let Some(parent) =
        (file.and_then(std::path::Path::parent)).filter(|parent| !parent.as_os_str().is_empty())
        && !parent.is_dir()
    {
        return Err(fail(format!(
            "cannot write the report to {}: there is no directory {}; create it, or give another path",
            to.display(),
            parent.display()
        ))
        .into());
    }
    if file.is_none() && (dir.state().exists() || dir.history().exists()) {
        // The page in `.ralph/` is never committed.
        dir.ignore_own_dirs()?;
    }
    if !crate::report::write(dir, repo.as_ref(), &to, None)? {
        return Err(nothing().into());
    }
    output::report_written(&to);
    Ok(ExitStatus::Success)
}

/// `--import FILE…`: task lists appended to the task file in order, under its lock. Every file
/// is read and converted first, so one that cannot be imported leaves the task file untouched.
pub(crate) fn import(dir: &RalphDir, files: &[std::path::PathBuf]) -> anyhow::Result<ExitStatus> {
    let mut read = Vec::with_capacity(files.len());
    for file in files {
        read.push(read_import(file)?);
    }
    dir.ensure()?;
    let merged = tasks::edit(dir, |current| {
        let mut content = current.map(<[u8]>::to_vec);
        let mut results = Vec::with_capacity(read.len());
        for (_, imported) in &read {
            let mut merged = storage::import::merge(content.as_deref(), imported);
            if merged.added > 0 {
                content = Some(std::mem::take(&mut merged.content));
            }
            results.push(merged);
        }
        let changed = results.iter().any(|merged| merged.added > 0);
        (changed.then(|| content.unwrap_or_default()), results)
    })?;
    for ((shown, imported), merged) in read.iter().zip(&merged) {
        output::tasks_imported(
            shown,
            imported.format,
            (merged.added, merged.skipped),
            &merged.renamed,
        );
    }
    list_tasks(dir, false)
}

/// One `--import` file (`-`: standard input), as it is shown and as task blocks.
fn read_import(file: &std::path::Path) -> anyhow::Result<(String, storage::import::Imported)> {
    let stdin = file.as_os_str() == "-";
    let shown = if stdin {
        "standard input".to_owned()
    } else {
        file.display().to_string()
    };
    if file.is_dir() {
        return Err(fail(format!(
            "cannot import {shown}: it is a directory; give the task list file itself (a prd.json, a tasks.json or a markdown roadmap)"
        ))
        .into());
    }
    let bytes = if stdin {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes).map(|_| bytes)
    } else {
        std::fs::read(file)
    };
    let bytes = bytes.map_err(|err| fail(format!("cannot import {shown}: {err}")))?;
    let imported = storage::import::convert(&String::from_utf8_lossy(&bytes))
        .map_err(|why| fail(format!("cannot import {shown}: {why}")))?;
    Ok((shown, imported))
}
