//! The loop: run the agent, look for its promise, record what happened, commit, repeat.
//!
//! Order of one iteration (ralph.ts order, with the reference's bugs fixed): max check, header,
//! context snapshot, git snapshot, prompt, agent run, summary, git snapshot and changed files,
//! history (saved), struggle warning, warnings, completion (which commits and ends the loop),
//! context consumption, auto-commit, next iteration number (saved), pause.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::{DateTime, Utc};

use crate::agents::{self, Agent, AgentKind, CommandRequest};
use crate::config::{LoopFlags, RunConfig};
use crate::exit::ExitStatus;
use crate::git::Repo;
use crate::output::{self, format::plural};
use crate::promise::Promise;
use crate::prompt::{self, PromptInput, TasksView};
use crate::signal::StopFlag;
use crate::storage::history::{self, History, IterationRecord};
use crate::storage::state::{self, LoopState};
use crate::storage::tasks::{self, TaskList};
use crate::storage::{self, Loaded, OPENCODE_CONFIG_FILE, RalphDir, context};
use crate::stream::{self, EndedBy, RunOptions};
use crate::transcript::{DisplayOptions, Transcript};

/// Extra pause after an iteration in which ralph itself failed.
const ERROR_PAUSE: Duration = Duration::from_secs(2);

/// Test and tuning knobs read from the environment.
#[derive(Clone, Debug)]
pub(crate) struct Knobs {
    pub(crate) heartbeat: Duration,
    pub(crate) tool_summary: Duration,
    pub(crate) grace: Duration,
    pub(crate) leak_timeout: Duration,
}

impl Knobs {
    /// Reads `RALPH_HEARTBEAT_MS`, `RALPH_TOOL_SUMMARY_MS`, `RALPH_GRACE_MS`, `RALPH_LEAK_TIMEOUT_MS`.
    pub(crate) fn from_env() -> Self {
        let ms = |name: &str, default: u64| {
            Duration::from_millis(
                std::env::var(name)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(default),
            )
        };
        Self {
            heartbeat: ms("RALPH_HEARTBEAT_MS", 10_000),
            tool_summary: ms("RALPH_TOOL_SUMMARY_MS", 3_000),
            grace: ms("RALPH_GRACE_MS", 3_000),
            leak_timeout: ms("RALPH_LEAK_TIMEOUT_MS", 500),
        }
    }
}

/// Where the loop starts.
pub(crate) enum Start {
    Fresh,
    Resume(Box<LoopState>),
}

/// Starts a new loop, or resumes the saved one.
pub(crate) fn run(
    config: &RunConfig,
    cwd: &Path,
    dir: &RalphDir,
    start: Start,
    stop: &StopFlag,
    knobs: &Knobs,
) -> anyhow::Result<ExitStatus> {
    let binary = match agents::resolve_binary(
        config.agent,
        std::env::var_os(config.agent.binary_variable()),
        std::env::var_os("PATH"),
        cwd,
    ) {
        Ok(binary) => binary,
        Err(message) => {
            output::error(&message);
            return Ok(ExitStatus::Error);
        }
    };
    dir.ensure()?;
    let Some(_lock) = acquire_lock(dir)? else {
        return Ok(ExitStatus::Error);
    };
    let previous = load_state_keeping_corrupt(dir);
    let resumed = match start {
        Start::Resume(saved) => Some(*saved),
        Start::Fresh => {
            if let Some(previous) = previous.filter(|state| state.active) {
                output::crashed_loop(&previous, &dir.state());
                return Ok(ExitStatus::Error);
            }
            None
        }
    };
    let agent = config.agent.agent();
    let mut runner = Runner::new(
        config,
        cwd,
        dir,
        binary,
        agent.as_ref(),
        stop,
        knobs,
        resumed,
    )?;
    runner.run()
}

/// Takes the directory's loop lock, or explains who holds it.
fn acquire_lock(dir: &RalphDir) -> anyhow::Result<Option<File>> {
    let file = dir.open_lock_file(storage::LOCK_FILE)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => {
            let state = state::load(&dir.state()).ok();
            output::loop_already_running(state.as_ref(), &dir.state());
            Ok(None)
        }
        Err(std::fs::TryLockError::Error(err)) => {
            Err(err).with_context(|| format!("failed to lock `{}`", dir.lock().display()))
        }
    }
}

/// Loads the state; a corrupt file is reported and kept aside as `.corrupt`.
fn load_state_keeping_corrupt(dir: &RalphDir) -> Option<LoopState> {
    load_keeping_corrupt(&dir.state(), state::load(&dir.state()))
}

fn load_keeping_corrupt<T>(path: &Path, loaded: Loaded<T>) -> Option<T> {
    match loaded {
        Loaded::Found(value) => Some(value),
        Loaded::Missing => None,
        Loaded::Corrupt(reason) => {
            let copy = storage::keep_corrupt_copy(path).ok();
            output::corrupt_file(path, &reason, copy.as_deref());
            None
        }
    }
}

/// Runs `--resume`: the saved loop with flags given now overriding its options.
pub(crate) fn resume(
    flags: &LoopFlags,
    cwd: &Path,
    dir: &RalphDir,
    stop: &StopFlag,
    knobs: &Knobs,
) -> anyhow::Result<ExitStatus> {
    let saved = match state::load(&dir.state()) {
        Loaded::Found(saved) => saved,
        Loaded::Missing => {
            output::error(&format!(
                "there is no loop to resume here ({} does not exist). Start one with: ralph \"<prompt>\"",
                dir.state().display()
            ));
            return Ok(ExitStatus::Error);
        }
        Loaded::Corrupt(reason) => {
            output::error(&format!(
                "cannot resume: {} is unreadable ({reason}). Start over with: ralph --reset",
                dir.state().display()
            ));
            return Ok(ExitStatus::Error);
        }
    };
    let prompt_file = saved
        .options
        .as_ref()
        .and_then(|options| options.prompt_file.clone())
        .map(PathBuf::from);
    let config = RunConfig::resolve(saved.prompt.clone(), prompt_file, flags, Some(&saved))?;
    output::resume_overrides(&overrides(flags, &saved, &config));
    run(
        &config,
        cwd,
        dir,
        Start::Resume(Box::new(saved)),
        stop,
        knobs,
    )
}

/// Human-readable `--flag: saved → new` lines for the flags that change a saved option.
fn overrides(flags: &LoopFlags, saved: &LoopState, config: &RunConfig) -> Vec<String> {
    let before = RunConfig::resolve(
        saved.prompt.clone(),
        config.prompt_file.clone(),
        &LoopFlags::default(),
        Some(saved),
    );
    let Ok(before) = before else {
        return Vec::new();
    };
    let mut changes = Vec::new();
    let mut note = |flag: &str, given: bool, old: String, new: String| {
        if given && old != new {
            changes.push(format!("{flag}: {old} → {new}"));
        }
    };
    note(
        "--agent",
        flags.agent.is_some(),
        before.agent.id().into(),
        config.agent.id().into(),
    );
    note(
        "--model",
        flags.model.is_some(),
        before.model.clone().unwrap_or_default(),
        config.model.clone().unwrap_or_default(),
    );
    note(
        "--min-iterations",
        flags.min_iterations.is_some(),
        before.min_iterations.to_string(),
        config.min_iterations.to_string(),
    );
    note(
        "--max-iterations",
        flags.max_iterations.is_some(),
        before.max_iterations.to_string(),
        config.max_iterations.to_string(),
    );
    note(
        "--completion-promise",
        flags.completion_promise.is_some(),
        before.completion_promise.clone(),
        config.completion_promise.clone(),
    );
    note(
        "--task-promise",
        flags.task_promise.is_some(),
        before.task_promise.clone(),
        config.task_promise.clone(),
    );
    note(
        "--tasks",
        flags.tasks.is_some(),
        before.tasks.to_string(),
        config.tasks.to_string(),
    );
    note(
        "--stream",
        flags.stream.is_some(),
        before.stream.to_string(),
        config.stream.to_string(),
    );
    note(
        "--commit",
        flags.commit.is_some(),
        before.commit.to_string(),
        config.commit.to_string(),
    );
    note(
        "--allow-all",
        flags.allow_all.is_some(),
        before.allow_all.to_string(),
        config.allow_all.to_string(),
    );
    note(
        "--pause",
        flags.pause.is_some(),
        format!("{:?}", before.pause),
        format!("{:?}", config.pause),
    );
    changes
}

/// Removes the loop's state, history and context (never the task file).
pub(crate) fn reset(dir: &RalphDir) -> anyhow::Result<ExitStatus> {
    if !dir.root().exists() {
        output::reset_done(&[]);
        return Ok(ExitStatus::Success);
    }
    let Some(_lock) = acquire_lock(dir)? else {
        return Ok(ExitStatus::Error);
    };
    let mut removed = Vec::new();
    for path in [
        dir.state(),
        dir.history(),
        dir.context(),
        dir.file(OPENCODE_CONFIG_FILE),
    ] {
        if storage::remove_file(&path)? {
            removed.push(path);
        }
    }
    output::reset_done(&removed);
    Ok(ExitStatus::Success)
}

/// How one iteration ended, for the loop's decision.
enum Next {
    Continue { pause: Duration },
    Finished(ExitStatus),
}

struct Runner<'a> {
    config: &'a RunConfig,
    cwd: &'a Path,
    dir: &'a RalphDir,
    binary: PathBuf,
    agent: &'a dyn Agent,
    stop: &'a StopFlag,
    knobs: &'a Knobs,
    repo: Option<Repo>,
    state: LoopState,
    history: History,
    completion: Promise,
    task: Promise,
    refused_open_tasks: Vec<String>,
    announced_stop: bool,
    resumed: bool,
}

impl<'a> Runner<'a> {
    #[expect(
        clippy::too_many_arguments,
        reason = "one-time construction from the loop's inputs"
    )]
    fn new(
        config: &'a RunConfig,
        cwd: &'a Path,
        dir: &'a RalphDir,
        binary: PathBuf,
        agent: &'a dyn Agent,
        stop: &'a StopFlag,
        knobs: &'a Knobs,
        resumed: Option<LoopState>,
    ) -> anyhow::Result<Self> {
        let now = storage::now();
        let resumed_flag = resumed.is_some();
        let (iteration, started_at) = resumed
            .as_ref()
            .map_or((1, now), |saved| (saved.iteration.max(1), saved.started_at));
        let state = LoopState {
            active: true,
            iteration,
            min_iterations: config.min_iterations,
            max_iterations: config.max_iterations,
            completion_promise: config.completion_promise.clone(),
            tasks_mode: config.tasks,
            task_promise: config.task_promise.clone(),
            prompt: config.prompt.clone(),
            started_at,
            model: config.model.clone().unwrap_or_default(),
            agent: config.agent.id().to_owned(),
            pid: Some(std::process::id()),
            host: nix::unistd::gethostname()
                .ok()
                .map(|name| name.to_string_lossy().into_owned()),
            stopped_at: None,
            options: Some(config.saved_options()),
        };
        // Read the old history even for a fresh loop, so a corrupt one is kept aside before the
        // new loop replaces it.
        let previous = load_keeping_corrupt(&dir.history(), history::load(&dir.history()));
        let history = if resumed_flag {
            previous.unwrap_or_default()
        } else {
            History::default()
        };
        Ok(Self {
            config,
            cwd,
            dir,
            binary,
            agent,
            stop,
            knobs,
            repo: Repo::discover(cwd),
            state,
            history,
            completion: Promise::new(&config.completion_promise),
            task: Promise::new(&config.task_promise),
            refused_open_tasks: Vec::new(),
            announced_stop: false,
            resumed: resumed_flag,
        })
    }

    fn run(&mut self) -> anyhow::Result<ExitStatus> {
        let config = self.config;
        let display_name = config.agent.display_name();
        if config.no_plugins && config.agent != AgentKind::OpenCode {
            output::no_plugins_ignored(display_name);
        }
        output::banner(display_name);
        state::save(&self.dir.state(), &self.state)?;
        if config.tasks && !self.dir.tasks().exists() {
            storage::write_atomic(&self.dir.tasks(), tasks::new_file_content().as_bytes())?;
            output::tasks_file_created(&self.dir.tasks());
        }
        history::save(&self.dir.history(), &self.history)?;
        output::config_summary(&output::Summary {
            prompt: &config.prompt,
            prompt_file: config.prompt_file.as_deref(),
            completion_promise: &config.completion_promise,
            task_promise: config.tasks.then_some(config.task_promise.as_str()),
            min_iterations: config.min_iterations,
            max_iterations: config.max_iterations,
            agent: display_name,
            model: config.model.as_deref(),
            opencode_plugins_disabled: config.no_plugins && config.agent == AgentKind::OpenCode,
            allow_all: config.allow_all,
            commit: config.commit,
            resumed_at: self.resumed.then_some(self.state.iteration),
        });

        loop {
            if self.stop.is_stopping() {
                return self.interrupted();
            }
            let iteration = self.state.iteration;
            if config.max_iterations > 0 && iteration > config.max_iterations {
                output::max_iterations_box(config.max_iterations, self.history.total_duration_ms);
                storage::remove_file(&self.dir.state())?;
                output::run_ended(
                    &format!("max iterations ({}) reached", config.max_iterations),
                    config.max_iterations,
                    self.history.total_duration_ms,
                );
                return Ok(ExitStatus::LimitReached);
            }
            output::iteration_header(iteration, config.min_iterations, config.max_iterations);
            let next = match self.iteration(iteration) {
                Ok(next) => next,
                Err(err) => self.record_failure(iteration, &err)?,
            };
            match next {
                Next::Finished(status) => return Ok(status),
                Next::Continue { pause } => {
                    self.state.iteration = iteration + 1;
                    state::save(&self.dir.state(), &self.state)?;
                    self.pause(pause);
                }
            }
        }
    }

    fn iteration(&mut self, iteration: u32) -> anyhow::Result<Next> {
        let config = self.config;
        let context_at_start = context::pending(&self.dir.context())?;
        let before = self.repo.as_ref().map(Repo::snapshot);
        let prompt = self.build_prompt(iteration, context_at_start.as_deref());
        let opencode_config = self.write_opencode_config()?;
        let command = self.agent.command(&CommandRequest {
            binary: &self.binary,
            prompt: &prompt,
            model: config.model.as_deref(),
            allow_all: config.allow_all,
            extra_args: &config.agent_args,
            opencode_config: opencode_config.as_deref(),
        });

        let started_at = storage::now();
        let started = Instant::now();
        let promises = vec![&self.completion, &self.task];
        let mut transcript = Transcript::new(
            self.agent,
            DisplayOptions {
                stream: config.stream,
                verbose_tools: config.verbose_tools,
                heartbeat: self.knobs.heartbeat,
                tool_summary: self.knobs.tool_summary,
            },
            promises,
            config.promise_anywhere,
        )?;
        let options = RunOptions {
            grace: self.knobs.grace,
            leak_timeout: self.knobs.leak_timeout,
            tick: Duration::from_millis(100),
            run_timeout: None,
            idle_timeout: None,
        };
        let outcome = stream::run(&command, self.cwd, &options, self.stop, &mut transcript)?;
        let findings = transcript.finish();
        let elapsed = started.elapsed();
        if outcome.ended_by == Some(EndedBy::User) {
            return Ok(Next::Finished(self.interrupted()?));
        }
        let completion_detected = findings.promises[0];
        let task_detected = config.tasks && findings.promises[1];

        output::iteration_summary(
            iteration,
            elapsed,
            &findings.tools,
            outcome.exit_code,
            completion_detected,
        );
        let files_modified = match (&self.repo, before) {
            (Some(repo), Some(before)) => repo.changed_files(&before, &repo.snapshot()),
            _ => Vec::new(),
        };
        let record = IterationRecord {
            iteration,
            started_at,
            ended_at: storage::now(),
            duration_ms: millis(elapsed),
            tools_used: findings.tools.clone(),
            files_modified,
            exit_code: outcome.exit_code,
            completion_detected,
            errors: findings.errors.clone(),
        };
        self.history.record(record, true);
        history::save(&self.dir.history(), &self.history)?;
        let struggle = &self.history.struggle_indicators;
        if struggle.should_warn(iteration) {
            output::struggle_warning(struggle.no_progress_iterations, struggle.short_iterations);
        }
        if findings.legacy_plugin {
            output::legacy_plugin_detected();
            storage::remove_file(&self.dir.state())?;
            return Ok(Next::Finished(ExitStatus::Error));
        }
        if outcome.exit_code != 0 {
            output::nonzero_exit(config.agent.display_name(), outcome.exit_code);
        }
        if task_detected && !completion_detected {
            output::task_completed(&self.task.tag(), iteration + 1);
        }

        self.refused_open_tasks.clear();
        if completion_detected {
            if iteration < config.min_iterations {
                output::completion_deferred(config.min_iterations, iteration + 1);
            } else if let Some(open) = self.open_tasks() {
                output::completion_refused_open_tasks(&open);
                self.refused_open_tasks = open;
            } else {
                self.commit(iteration);
                return Ok(Next::Finished(self.completed(iteration)?));
            }
        }
        if let Some(injected) = context_at_start {
            let consumed = context::consume(self.dir, &injected)?;
            output::context_consumed(
                consumed == context::Consumed::NewerKept,
                consumed == context::Consumed::EditedKept,
            );
        }
        self.commit(iteration);
        Ok(Next::Continue {
            pause: config.pause,
        })
    }

    /// In tasks mode, the open tasks that forbid completion (`None` when completion may go on).
    fn open_tasks(&self) -> Option<Vec<String>> {
        if !self.config.tasks {
            return None;
        }
        let content = storage::read_text(&self.dir.tasks())
            .ok()
            .flatten()
            .unwrap_or_default();
        let list = TaskList::parse(&content);
        if list.all_complete() {
            return None;
        }
        let open: Vec<String> = list
            .open()
            .map(|task| format!("{}. {}", task.number, task.text))
            .collect();
        if open.is_empty() {
            // No tasks at all: nothing to hold completion back.
            return None;
        }
        Some(open)
    }

    fn build_prompt(&self, iteration: u32, context: Option<&str>) -> String {
        let config = self.config;
        let tasks_content;
        let list;
        let tasks = if config.tasks {
            match storage::read_text(&self.dir.tasks()) {
                Ok(Some(content)) => {
                    tasks_content = content;
                    list = TaskList::parse(&tasks_content);
                    Some(TasksView::Found {
                        content: &tasks_content,
                        list: &list,
                    })
                }
                Ok(None) => Some(TasksView::Missing),
                Err(err) => {
                    output::tasks_file_unreadable(&self.dir.tasks(), &err.to_string());
                    Some(TasksView::Unreadable)
                }
            }
        } else {
            None
        };
        prompt::build(&PromptInput {
            iteration,
            min_iterations: config.min_iterations,
            max_iterations: config.max_iterations,
            completion_promise: &config.completion_promise,
            task_promise: &config.task_promise,
            task: &config.prompt,
            context,
            tasks,
            refused_open_tasks: &self.refused_open_tasks,
        })
    }

    fn write_opencode_config(&self) -> anyhow::Result<Option<PathBuf>> {
        if self.config.agent != AgentKind::OpenCode {
            return Ok(None);
        }
        let config_home = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")));
        let sources = agents::OpenCodeConfigSources {
            config_home: config_home.as_deref(),
            cwd: self.cwd,
        };
        let Some(value) =
            agents::opencode_config(&sources, self.config.no_plugins, self.config.allow_all)
        else {
            return Ok(None);
        };
        let path = self.dir.file(OPENCODE_CONFIG_FILE);
        storage::write_json(&path, &value)?;
        Ok(Some(std::path::absolute(&path)?))
    }

    fn commit(&self, iteration: u32) {
        if !self.config.commit {
            return;
        }
        let Some(repo) = &self.repo else { return };
        match repo.commit_all(&format!("Ralph iteration {iteration}: work in progress")) {
            Ok(Some(hash)) => output::committed(iteration, &hash),
            Ok(None) => {}
            Err(reason) => output::commit_failed(&reason),
        }
    }

    fn completed(&mut self, iteration: u32) -> anyhow::Result<ExitStatus> {
        let total = self.history.total_duration_ms;
        output::completion_box(&self.completion.tag(), iteration, total);
        storage::remove_file(&self.dir.state())?;
        storage::remove_file(&self.dir.context())?;
        output::run_ended(
            &format!("completed in {}", plural(u64::from(iteration), "iteration")),
            iteration,
            total,
        );
        Ok(ExitStatus::Success)
    }

    /// Records an iteration in which ralph itself failed, and carries on.
    fn record_failure(&mut self, iteration: u32, err: &anyhow::Error) -> anyhow::Result<Next> {
        let message = format!("{err:#}");
        output::iteration_error(iteration, &message);
        let now = storage::now();
        self.history.record(
            IterationRecord {
                iteration,
                started_at: now,
                ended_at: now,
                exit_code: -1,
                errors: vec![message.chars().take(200).collect()],
                ..IterationRecord::default()
            },
            false,
        );
        history::save(&self.dir.history(), &self.history)?;
        Ok(Next::Continue {
            pause: ERROR_PAUSE.max(self.config.pause),
        })
    }

    fn interrupted(&mut self) -> anyhow::Result<ExitStatus> {
        self.announce_stop();
        let iteration = self.state.iteration;
        self.state.active = false;
        self.state.stopped_at = Some(storage::now());
        state::save(&self.dir.state(), &self.state)?;
        let finished = u32::try_from(self.history.iterations.len()).unwrap_or(u32::MAX);
        output::resume_hint(iteration);
        output::run_ended(
            &format!("interrupted at iteration {iteration}"),
            finished,
            self.history.total_duration_ms,
        );
        Ok(ExitStatus::Interrupted)
    }

    fn announce_stop(&mut self) {
        if !self.announced_stop {
            self.announced_stop = true;
            output::stopping();
        }
    }

    /// Sleeps between iterations, waking early on a stop request.
    fn pause(&self, duration: Duration) {
        let deadline = Instant::now() + duration;
        while !self.stop.is_stopping() {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// When the loop started, for messages.
pub(crate) fn started_label(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
