//! A loop that goes on: `--resume` (the saved loop, with the options given now), and what a
//! resumed loop finds when it starts — an iteration recorded but not moved past, one ralph was
//! killed in (a log and no record), the work an interrupted iteration left in a task's worktree —
//! and the iteration it runs first.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::RunConfig;
use crate::error::fail;
use crate::event::Notice;
use crate::options::{self, Layer};
use crate::settings::Settings;
use crate::storage::history::{self, History};
use crate::storage::state;
use crate::storage::{self, Loaded, RalphDir};

use super::Runner;
use super::claim::Start;
use super::record::iteration_commit_message;

/// `--resume`: the saved loop's settings, with options given now over its saved ones, and how
/// it starts again.
pub(crate) fn resume(
    cli_layer: &Layer,
    settings: &Settings,
    dir: &RalphDir,
    json: bool,
) -> anyhow::Result<(RunConfig, Start)> {
    let saved = match state::load(&dir.state()) {
        Loaded::Found(saved) => saved,
        Loaded::Missing => {
            return Err(fail(format!(
                "there is no loop to resume here ({} does not exist). Start one with: ralph \"<prompt>\"",
                dir.state().display()
            ))
            .into());
        }
        Loaded::Corrupt(reason) => {
            return Err(fail(format!(
                "cannot resume: {} is unreadable ({reason}). Start over with: ralph --reset",
                dir.state().display()
            ))
            .into());
        }
    };
    if let Some(worker) = &saved.worker {
        return Err(fail(format!(
            "the loop here was the --worker {worker}, which is not resumed: start it again with `ralph --worker` (it goes on with the remote's tasks)"
        ))
        .into());
    }
    let saved_layer = options::saved_layer(&saved);
    let prompt_file = saved.prompt_file.clone().map(PathBuf::from);
    let resolve = |above: &[&Layer]| {
        RunConfig::resolve(
            saved.prompt.clone(),
            prompt_file.clone(),
            &settings.stack(above),
            &settings.agents,
        )
    };
    let mut config = resolve(&[cli_layer, &saved_layer])?;
    config.json = json;
    let overrides = resolve(&[&saved_layer])
        .map(|before| options::changes(&before.options, &config.options))
        .unwrap_or_default();
    let start = Start::Resume {
        saved: Box::new(saved),
        overrides,
    };
    Ok((config, start))
}

impl Runner<'_> {
    /// A task loop's worktree is the loop's own: what is uncommitted there when it starts is its
    /// agent's work from an iteration a kill or a stop cut short, committed now so the task's
    /// branch has it (an agent that writes the same again would otherwise leave it out).
    pub(super) fn commit_interrupted_work(&mut self) {
        if self
            .env
            .shape
            .task_loop()
            .is_none_or(|task| task.laid_clean)
            || !self.env.config.options.commit
            || self.conflicts_unresolved()
        {
            return;
        }
        match self.commit_work(INTERRUPTED_COMMIT) {
            Some(Ok(Some(hash))) => self
                .env
                .sink
                .notice(Notice::InterruptedWorkCommitted(&hash)),
            Some(Err(reason)) => self.env.sink.notice(Notice::CommitFailed(&reason)),
            Some(Ok(None)) | None => {}
        }
    }

    /// On `--resume`: an iteration the history records but the state never moved past (ralph
    /// was killed while it committed) is not run again. Its commit is made now unless it was
    /// made already, and the loop goes on with the next iteration. An iteration recorded as a
    /// provider failure is the exception: it is retried, as it would have been.
    pub(super) fn settle_recorded_iteration(&mut self) -> anyhow::Result<()> {
        self.record_killed_iteration()?;
        let Some(last) = self.history.iterations.last() else {
            return Ok(());
        };
        if next_iteration(&self.history, self.state.iteration) == self.state.iteration {
            return Ok(());
        }
        let iteration = last.iteration;
        // An interrupted iteration's work is committed with the next one's.
        if !last.interrupted
            && let Some(repo) = &self.env.repo
            && self.env.config.options.commit
            && !last.files_modified.is_empty()
        {
            repo.wait_for_index(Duration::from_secs(60));
            if repo.head_subject().as_deref() != Some(iteration_commit_message(iteration).as_str())
            {
                self.commit(iteration, false);
            }
        }
        self.state.iteration = iteration.saturating_add(1);
        self.save_state()
    }

    /// On `--resume` after ralph was killed in an iteration: the iteration it ran has a log but
    /// no record. It is recorded as interrupted, so its number and its log are not used again.
    fn record_killed_iteration(&mut self) -> anyhow::Result<()> {
        let iteration = self.state.iteration;
        if (self.history.iterations.iter()).any(|record| record.iteration >= iteration) {
            return Ok(());
        }
        let (dir, folder) = match self.env.shape.task_loop() {
            Some(task) => (
                task.logs(),
                format!("{}/{}/", storage::logs::LOGS_DIR, task.task_id),
            ),
            None => (self.env.dir.logs(), format!("{}/", storage::logs::LOGS_DIR)),
        };
        let log = storage::logs::path(&dir, iteration);
        let written = (std::fs::metadata(&log).and_then(|meta| meta.modified()))
            .map(chrono::DateTime::<chrono::Utc>::from);
        // A log of this loop's (an earlier loop's may have the same number).
        let (Some(start), Ok(began)) = (storage::logs::tail(&log), written) else {
            return Ok(());
        };
        if began < self.state.started_at {
            return Ok(());
        }
        let task_loop = self.env.shape.task_loop();
        let record = history::IterationRecord {
            iteration,
            started_at: began,
            ended_at: began,
            exit_code: -1,
            errors: vec!["ralph stopped during this iteration".to_owned()],
            agent: start.start.map(|start| start.agent),
            log: log.file_name().map(|name| folder + &name.to_string_lossy()),
            task_id: task_loop.map(|task| task.task_id.clone()),
            branch: task_loop.map(super::TaskLoop::branch),
            interrupted: true,
            ..history::IterationRecord::default()
        };
        if let Some(task) = task_loop {
            task.record_in_base(&record)?;
        }
        self.history.record(record, history::Struggle::Skip);
        history::save(&self.env.dir.history(), &self.history)
    }
}

/// The iteration a resumed loop runs first, its state saying `iteration`: the next after the last
/// recorded one when that is `iteration` (it ended, or was interrupted, before the state moved
/// on), unless it was a provider failure, which is retried.
pub(super) fn next_iteration(history: &History, iteration: u32) -> u32 {
    let Some(last) = history.iterations.last() else {
        return iteration;
    };
    let retried = (last.failure.as_ref()).is_some_and(|f| super::decision::is_retried(f.kind));
    if last.iteration < iteration || retried {
        iteration
    } else {
        last.iteration.saturating_add(1)
    }
}

/// The message of the commit of a task loop's work that an interrupted iteration left.
const INTERRUPTED_COMMIT: &str = "Ralph: work of an interrupted iteration";
