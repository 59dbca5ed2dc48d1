//! The loop: run the agent, look for its promise, record what happened, commit, repeat.
//!
//! Order of one iteration (ralph.ts order, with the reference's bugs fixed): max check, header,
//! context snapshot, git snapshot, prompt, agent run, summary, git snapshot and changed files,
//! history (saved), struggle warning, warnings, completion (which commits and ends the loop),
//! context consumption, auto-commit, next iteration number (saved), pause.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::agents::{self, Agent, AgentKind, CommandRequest, Failure, FailureKind};
use crate::config::{LoopFlags, RunConfig, millis};
use crate::exit::ExitStatus;
use crate::git::Repo;
use crate::output::{self, format, format::plural};
use crate::promise::Promise;
use crate::prompt::{self, PromptInput, TasksView};
use crate::signal::StopFlag;
use crate::storage::history::{self, History, IterationRecord, Struggle};
use crate::storage::state::{self, LoopState};
use crate::storage::tasks::{self, TaskList, TaskStatus};
use crate::storage::{self, Loaded, OPENCODE_CONFIG_FILE, RalphDir, context, progress};
use crate::stream::{self, EndedBy, RunOptions};
use crate::transcript::{DisplayOptions, Transcript};

/// Extra pause after an iteration in which ralph itself failed.
const ERROR_PAUSE: Duration = Duration::from_secs(2);
/// Iterations in a row in which ralph itself fails before the loop gives up.
const MAX_OWN_FAILURES: u32 = 3;
/// Iterations in a row in which the agent exits with an error and changes nothing before the
/// loop gives up.
const MAX_FAILED_RUNS: u32 = 5;

/// Test and tuning knobs read from the environment.
#[derive(Clone, Debug)]
pub(crate) struct Knobs {
    pub(crate) heartbeat: Duration,
    pub(crate) tool_summary: Duration,
    pub(crate) grace: Duration,
    pub(crate) leak_timeout: Duration,
    /// First backoff wait before retrying a provider failure.
    pub(crate) retry_base: Duration,
}

impl Knobs {
    /// Reads `RALPH_HEARTBEAT_MS`, `RALPH_TOOL_SUMMARY_MS`, `RALPH_GRACE_MS`,
    /// `RALPH_LEAK_TIMEOUT_MS` and `RALPH_RETRY_BASE_MS`.
    pub(crate) fn from_env() -> Self {
        // Clamped to a day, so no knob can overflow a deadline.
        let ms = |name: &str, default: u64| {
            Duration::from_millis(
                std::env::var(name)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(default)
                    .min(86_400_000),
            )
        };
        Self {
            heartbeat: ms("RALPH_HEARTBEAT_MS", 10_000),
            tool_summary: ms("RALPH_TOOL_SUMMARY_MS", 3_000),
            grace: ms("RALPH_GRACE_MS", 3_000),
            leak_timeout: ms("RALPH_LEAK_TIMEOUT_MS", 500),
            retry_base: ms("RALPH_RETRY_BASE_MS", 15_000),
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
    let steps = match steps(config, cwd) {
        Ok(steps) => steps,
        Err(message) => {
            output::error(&message);
            return Ok(ExitStatus::Error);
        }
    };
    dir.ensure()?;
    let Some(_lock) = acquire_lock(dir)? else {
        return Ok(ExitStatus::Error);
    };
    let previous = load_state_keeping_corrupt(dir)?;
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
    let mut runner = Runner::new(config, cwd, dir, steps, stop, knobs, resumed)?;
    let result = runner.run();
    if let Err(err) = &result {
        runner.record_own_failure(err);
    }
    result
}

/// One agent (and model) the loop can run, resolved.
pub(crate) struct Step {
    pub(crate) spec: agents::AgentSpec,
    pub(crate) agent: Box<dyn Agent>,
    pub(crate) binary: PathBuf,
    pub(crate) model: Option<String>,
}

/// The agents and models of a loop, in order: the rotation, or the one agent.
pub(crate) fn plan(config: &RunConfig) -> Vec<(agents::AgentSpec, Option<String>)> {
    if config.rotation.is_empty() {
        vec![(config.agent.clone(), config.model.clone())]
    } else {
        config
            .rotation
            .iter()
            .map(|step| {
                (
                    step.agent.clone(),
                    step.model.clone().or_else(|| config.model.clone()),
                )
            })
            .collect()
    }
}

/// The prompt of one iteration, from the configuration and the files under `.ralph/`.
pub(crate) fn iteration_prompt(
    config: &RunConfig,
    dir: &RalphDir,
    iteration: u32,
    context: Option<&str>,
    feedback: &[String],
) -> String {
    let tasks_content;
    let list;
    let tasks = if config.tasks {
        match storage::read_text(&dir.tasks()) {
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
                output::tasks_file_unreadable(&dir.tasks(), &err.to_string());
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
        abort_promise: config.limits.abort_promise.as_deref(),
        task: &config.prompt,
        context,
        tasks,
        feedback,
    })
}

/// The OpenCode configuration ralph generates for `--allow-all` / `--no-plugins`, if any.
pub(crate) fn opencode_config_for(
    config: &RunConfig,
    spec: &agents::AgentSpec,
    cwd: &Path,
) -> Option<serde_json::Value> {
    if spec.kind() != Some(AgentKind::OpenCode) {
        return None;
    }
    let config_home = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")));
    let sources = agents::OpenCodeConfigSources {
        config_home: config_home.as_deref(),
        cwd,
    };
    agents::opencode_config(&sources, config.no_plugins, config.allow_all)
}

/// The agents of a loop: the rotation, or the one agent. Every executable is checked first.
pub(crate) fn steps(config: &RunConfig, cwd: &Path) -> Result<Vec<Step>, String> {
    let var = |name: &str| std::env::var_os(name);
    plan(config)
        .into_iter()
        .map(|(spec, model)| {
            let binary = spec.find_binary(&var, cwd)?;
            Ok(Step {
                agent: spec.agent(),
                spec,
                binary,
                model,
            })
        })
        .collect()
}

/// Takes the directory's loop lock, or explains who holds it.
fn acquire_lock(dir: &RalphDir) -> anyhow::Result<Option<File>> {
    let file = dir.open_lock_file(storage::LOCK_FILE)?;
    // `--status` and `--add-context` hold a shared lock for an instant; do not mistake them
    // for a running loop.
    let deadline = Instant::now() + Duration::from_millis(300);
    let mut attempt = file.try_lock();
    while matches!(attempt, Err(std::fs::TryLockError::WouldBlock)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        attempt = file.try_lock();
    }
    match attempt {
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
fn load_state_keeping_corrupt(dir: &RalphDir) -> anyhow::Result<Option<LoopState>> {
    load_keeping_corrupt(&dir.state(), state::load(&dir.state()))
}

/// A corrupt file is reported and copied aside; if the copy fails, ralph stops rather than
/// overwrite the only copy.
fn load_keeping_corrupt<T>(path: &Path, loaded: Loaded<T>) -> anyhow::Result<Option<T>> {
    match loaded {
        Loaded::Found(value) => Ok(Some(value)),
        Loaded::Missing => Ok(None),
        Loaded::Corrupt(reason) => {
            let copy = storage::keep_corrupt_copy(path)?;
            output::corrupt_file(path, &reason, Some(&copy));
            Ok(None)
        }
    }
}

/// Runs `--resume`: the saved loop with flags given now overriding its options.
pub(crate) fn resume(
    flags: &LoopFlags,
    settings: &crate::settings::Settings,
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
    let config = RunConfig::resolve(
        saved.prompt.clone(),
        prompt_file,
        flags,
        Some(&saved),
        settings,
    )?;
    output::resume_overrides(&overrides(&saved, &config, settings));
    run(
        &config,
        cwd,
        dir,
        Start::Resume(Box::new(saved)),
        stop,
        knobs,
    )
}

/// `--flag: saved → new` for every option that flags given with `--resume` change.
fn overrides(
    saved: &LoopState,
    config: &RunConfig,
    settings: &crate::settings::Settings,
) -> Vec<String> {
    let Ok(before) = RunConfig::resolve(
        saved.prompt.clone(),
        config.prompt_file.clone(),
        &LoopFlags::default(),
        Some(saved),
        settings,
    ) else {
        return Vec::new();
    };
    let (old, new) = (option_values(&before), option_values(config));
    old.into_iter()
        .zip(new)
        .filter(|((_, a), (_, b))| a != b)
        .map(|((key, a), (_, b))| format!("--{}: {a} → {b}", key.replace('_', "-")))
        .collect()
}

/// Every option of a loop as `(key, value)`, from the state format (so nothing is left out).
fn option_values(config: &RunConfig) -> Vec<(String, String)> {
    let mut values = vec![
        ("agent".to_owned(), config.agent.id().to_owned()),
        ("model".to_owned(), config.model.clone().unwrap_or_default()),
        (
            "min_iterations".to_owned(),
            config.min_iterations.to_string(),
        ),
        (
            "max_iterations".to_owned(),
            config.max_iterations.to_string(),
        ),
        (
            "completion_promise".to_owned(),
            config.completion_promise.clone(),
        ),
        ("tasks".to_owned(), config.tasks.to_string()),
        ("task_promise".to_owned(), config.task_promise.clone()),
    ];
    if let Ok(serde_json::Value::Object(options)) = serde_json::to_value(config.saved_options()) {
        for (key, value) in options {
            let key = match key.as_str() {
                "plainText" => "output_format".to_owned(),
                "plainPromises" => "promise_format".to_owned(),
                other => other
                    .chars()
                    .flat_map(|c| {
                        if c.is_ascii_uppercase() {
                            vec!['_', c.to_ascii_lowercase()]
                        } else {
                            vec![c]
                        }
                    })
                    .collect::<String>()
                    .trim_end_matches("_ms")
                    .to_owned(),
            };
            let shown = match value {
                serde_json::Value::Null => "none".to_owned(),
                serde_json::Value::String(text) => text,
                other => other.to_string(),
            };
            values.push((key, shown));
        }
    }
    values
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
    // An agent left running by a killed ralph goes with the state that names it.
    if let Some(group) = state::load(&dir.state()).ok().and_then(|s| s.agent_group) {
        stop_leftover_agent(group);
    }
    let mut removed = Vec::new();
    for path in [
        dir.state(),
        dir.history(),
        dir.context(),
        dir.file(OPENCODE_CONFIG_FILE),
        dir.file(progress::PROGRESS_FILE),
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
    /// Go on with the next iteration after a pause.
    Continue { pause: Duration },
    /// The provider failed; run the same iteration again after a wait.
    Retry(Failure),
    /// The loop is over.
    Stop(Stop),
}

/// Why a loop ended.
#[derive(Debug)]
enum Stop {
    Completed {
        iteration: u32,
    },
    MaxIterations(u32),
    MaxRuntime(Duration),
    MaxCost(f64),
    MaxTokens(u64),
    Aborted {
        message: String,
    },
    Stalled(u32),
    AgentFailed {
        failure: Failure,
        retries: u32,
    },
    LegacyPlugin,
    /// ralph itself failed several iterations in a row (the agent cannot start, the disk is full).
    RalphFailed(String),
    /// The agent exited with an error and changed nothing, several iterations in a row.
    AgentKeptFailing {
        exit_code: i32,
        runs: u32,
    },
    /// In tasks mode, no open task can be started.
    Blocked(Vec<String>),
    Interrupted,
}

impl Stop {
    fn status(&self) -> ExitStatus {
        match self {
            Self::Completed { .. } => ExitStatus::Success,
            Self::MaxIterations(_)
            | Self::MaxRuntime(_)
            | Self::MaxCost(_)
            | Self::MaxTokens(_) => ExitStatus::LimitReached,
            Self::Aborted { .. } | Self::Stalled(_) | Self::Blocked(_) => ExitStatus::Stopped,
            Self::AgentFailed { .. }
            | Self::AgentKeptFailing { .. }
            | Self::LegacyPlugin
            | Self::RalphFailed(_) => ExitStatus::Error,
            Self::Interrupted => ExitStatus::Interrupted,
        }
    }

    fn reason(&self, state: &LoopState) -> String {
        match self {
            Self::Completed { iteration } => {
                format!(
                    "completed in {}",
                    plural(u64::from(*iteration), "iteration")
                )
            }
            Self::MaxIterations(max) => format!("max iterations ({max}) reached"),
            Self::MaxRuntime(limit) => {
                format!("max runtime ({}) reached", format::long_duration(*limit))
            }
            Self::MaxCost(limit) => format!("max cost ({}) reached", output::cost_text(*limit)),
            Self::MaxTokens(limit) => {
                format!("max tokens ({}) reached", output::compact_number(*limit))
            }
            Self::Aborted { .. } => format!("the agent gave up at iteration {}", state.iteration),
            Self::Stalled(count) => format!("no file changes in {count} iterations in a row"),
            Self::AgentFailed { failure, retries } if *retries > 0 => format!(
                "the agent kept failing ({}) after {}",
                failure.kind.label(),
                plural(u64::from(*retries), "retry").replace("retrys", "retries")
            ),
            Self::AgentFailed { failure, .. } => {
                format!("the agent failed ({})", failure.kind.label())
            }
            Self::LegacyPlugin => "OpenCode loaded the legacy placeholder plugin".to_owned(),
            Self::AgentKeptFailing { exit_code, runs } => format!(
                "the agent exited with code {exit_code} and changed nothing in {runs} iterations in a row"
            ),
            Self::RalphFailed(error) => {
                format!("ralph failed {MAX_OWN_FAILURES} iterations in a row ({error})")
            }
            Self::Blocked(tasks) => format!(
                "no task can be started ({} failed or blocked)",
                plural(tasks.len() as u64, "task")
            ),
            Self::Interrupted => format!("interrupted at iteration {}", state.iteration),
        }
    }
}

struct Runner<'a> {
    config: &'a RunConfig,
    cwd: &'a Path,
    dir: &'a RalphDir,
    steps: Vec<Rc<Step>>,
    stop: &'a StopFlag,
    knobs: &'a Knobs,
    repo: Option<Repo>,
    state: LoopState,
    history: History,
    completion: Promise,
    task: Promise,
    abort: Option<Promise>,
    /// Sections for the next prompt: why a claim was refused.
    feedback: Vec<String>,
    announced_stop: bool,
    resumed: bool,
    /// When this session started, and the runtime of earlier sessions of a resumed loop.
    session_started: Instant,
    earlier_runtime_ms: u64,
    /// Iterations in a row that changed no files.
    stalled: u32,
    /// Retries in a row of the current iteration.
    retries: u32,
    /// Iterations in a row in which ralph itself failed.
    own_failures: u32,
    /// Iterations in a row in which the agent exited with an error and changed nothing.
    failed_runs: u32,
}

impl<'a> Runner<'a> {
    fn new(
        config: &'a RunConfig,
        cwd: &'a Path,
        dir: &'a RalphDir,
        steps: Vec<Step>,
        stop: &'a StopFlag,
        knobs: &'a Knobs,
        resumed: Option<LoopState>,
    ) -> anyhow::Result<Self> {
        let now = crate::model::now();
        let resumed_flag = resumed.is_some();
        let resumed_stalled = resumed.as_ref().map_or(0, |saved| saved.stalled);
        if let Some(group) = resumed.as_ref().and_then(|saved| saved.agent_group) {
            stop_leftover_agent(group);
        }
        let (iteration, started_at, earlier_runtime_ms) =
            resumed.as_ref().map_or((1, now, 0), |saved| {
                (saved.iteration.max(1), saved.started_at, saved.runtime_ms)
            });
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
            runtime_ms: earlier_runtime_ms,
            stalled: resumed_stalled,
            agent_group: None,
            task_attempts: resumed
                .as_ref()
                .map(|saved| saved.task_attempts.clone())
                .unwrap_or_default(),
            stop_reason: None,
            options: Some(config.saved_options()),
        };
        // Read the old history even for a fresh loop, so a corrupt one is kept aside before the
        // new loop replaces it.
        let previous = load_keeping_corrupt(&dir.history(), history::load(&dir.history()))?;
        let history = if resumed_flag {
            previous.unwrap_or_default()
        } else {
            History::default()
        };
        Ok(Self {
            config,
            cwd,
            dir,
            steps: steps.into_iter().map(Rc::new).collect(),
            stop,
            knobs,
            repo: Repo::discover(cwd),
            state,
            history,
            completion: Promise::new(&config.completion_promise, config.promise_format),
            task: Promise::new(&config.task_promise, config.promise_format),
            abort: config
                .limits
                .abort_promise
                .as_deref()
                .map(|text| Promise::new(text, config.promise_format)),
            feedback: Vec::new(),
            announced_stop: false,
            resumed: resumed_flag,
            session_started: Instant::now(),
            earlier_runtime_ms,
            stalled: resumed_stalled,
            retries: 0,
            own_failures: 0,
            failed_runs: 0,
        })
    }

    fn runtime(&self) -> Duration {
        Duration::from_millis(self.earlier_runtime_ms) + self.session_started.elapsed()
    }

    fn save_state(&mut self) -> anyhow::Result<()> {
        self.state.runtime_ms = millis(self.runtime());
        state::save(&self.dir.state(), &self.state)
    }

    fn run(&mut self) -> anyhow::Result<ExitStatus> {
        let config = self.config;
        let display_name = config.agent.display_name();
        for step in &self.steps {
            let name = step.spec.display_name();
            if config.no_plugins && step.spec.kind() != Some(AgentKind::OpenCode) {
                output::no_plugins_ignored(name);
            }
            if config.limits.max_cost.is_some() && !step.agent.reports_cost() {
                output::max_cost_unavailable(name);
            }
        }
        if config.limits.max_stalled.is_some() && self.repo.is_none() {
            output::max_stalled_unavailable();
        }
        output::banner(display_name);
        if self.resumed {
            self.settle_recorded_iteration()?;
        }
        self.save_state()?;
        if config.tasks {
            let created = tasks::edit(self.dir, |current| match current {
                Some(_) => (None, false),
                None => (Some(tasks::new_file_content().into_bytes()), true),
            })?;
            if created {
                output::tasks_file_created(&self.dir.tasks());
            }
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
            opencode_plugins_disabled: config.no_plugins
                && config.agent.kind() == Some(AgentKind::OpenCode),
            allow_all: config.allow_all,
            commit: config.commit,
            git: self.repo.is_some(),
            resumed_at: self.resumed.then_some(self.state.iteration),
        });

        output::event(
            "run_started",
            serde_json::json!({
                "agent": config.agent.id(),
                "model": config.model,
                "rotation": self.steps.iter().map(|step| step.spec.id().to_owned()).collect::<Vec<_>>(),
                "min_iterations": config.min_iterations,
                "max_iterations": config.max_iterations,
                "tasks": config.tasks,
                "iteration": self.state.iteration,
                "resumed": self.resumed,
            }),
        );
        let stop = loop {
            if self.stop.is_stopping() {
                break Stop::Interrupted;
            }
            let iteration = self.state.iteration;
            if config.max_iterations > 0 && iteration > config.max_iterations {
                break Stop::MaxIterations(config.max_iterations);
            }
            if let Some(stop) = self.budget_exceeded().or_else(|| self.tasks_blocked()) {
                break stop;
            }
            output::iteration_header(iteration, config.min_iterations, config.max_iterations);
            let next = match self.iteration(iteration) {
                Ok(next) => {
                    self.own_failures = 0;
                    next
                }
                Err(err) => {
                    self.own_failures += 1;
                    if self.own_failures >= MAX_OWN_FAILURES {
                        output::iteration_error(iteration, &format!("{err:#}"));
                        break Stop::RalphFailed(format!("{err:#}"));
                    }
                    self.record_failure(iteration, &err)?
                }
            };
            match next {
                Next::Stop(stop) => break stop,
                Next::Continue { pause } => {
                    self.retries = 0;
                    self.state.iteration = iteration.saturating_add(1);
                    self.save_state()?;
                    self.pause(pause);
                }
                Next::Retry(failure) => {
                    self.retries += 1;
                    if self.retries > config.limits.max_retries || failure.kind.is_fatal() {
                        break Stop::AgentFailed {
                            failure,
                            retries: self.retries - 1,
                        };
                    }
                    self.save_state()?;
                    if let Some(stop) = self.wait_before_retry(iteration, &failure) {
                        break stop;
                    }
                }
            }
        };
        self.finish(&stop)
    }

    /// Ends the loop: completion removes the state, every other stop keeps it for `--resume`.
    fn finish(&mut self, stop: &Stop) -> anyhow::Result<ExitStatus> {
        self.commit_own_files();
        let total = self.history.total_duration_ms;
        let reason = stop.reason(&self.state);
        match stop {
            Stop::Completed { iteration } => {
                output::event("completed", serde_json::json!({ "iteration": iteration }));
                output::completion_box(&self.completion.tag(), *iteration, total);
                storage::remove_file(&self.dir.state())?;
                storage::remove_file(&self.dir.context())?;
            }
            other => {
                match other {
                    Stop::MaxIterations(max) => output::max_iterations_box(*max, total),
                    Stop::Interrupted => self.announce_stop(),
                    Stop::Aborted { message } => output::agent_aborted(message),
                    Stop::AgentFailed { failure, .. } => output::agent_failed(failure),
                    Stop::LegacyPlugin => output::legacy_plugin_detected(),
                    Stop::Blocked(tasks) => output::tasks_blocked(tasks),
                    _ => {}
                }
                self.state.active = false;
                self.state.stopped_at = Some(crate::model::now());
                self.state.stop_reason = Some(reason.clone());
                self.save_state()?;
                output::resume_hint(
                    self.state.iteration,
                    matches!(other, Stop::MaxIterations(_)),
                );
            }
        }
        // Retries share their iteration's number: count numbers, not records.
        let mut numbers: Vec<u32> = self
            .history
            .iterations
            .iter()
            .map(|r| r.iteration)
            .collect();
        numbers.dedup();
        let iterations = u32::try_from(numbers.len()).unwrap_or(u32::MAX);
        output::run_ended(&output::RunEnd {
            reason: &reason,
            exit_code: stop.status().code(),
            iterations,
            // Wall time over all sessions: agent runs, verification, waits and pauses.
            total_ms: millis(self.runtime()),
            tokens: (self.history.total_tokens.total() > 0).then_some(self.history.total_tokens),
            cost: self.history.total_cost_usd,
        });
        Ok(stop.status())
    }

    /// The budget the loop has used up, if any (checked between iterations).
    fn budget_exceeded(&self) -> Option<Stop> {
        let limits = &self.config.limits;
        if let Some(limit) = limits.max_runtime
            && self.runtime() >= limit
        {
            return Some(Stop::MaxRuntime(limit));
        }
        if let (Some(limit), Some(cost)) = (limits.max_cost, self.history.total_cost_usd)
            && cost >= limit
        {
            return Some(Stop::MaxCost(limit));
        }
        if let Some(limit) = limits.max_tokens
            && self.history.total_tokens.billable() >= limit
        {
            return Some(Stop::MaxTokens(limit));
        }
        None
    }

    fn iteration(&mut self, iteration: u32) -> anyhow::Result<Next> {
        let config = self.config;
        let focus = if config.tasks {
            self.choose_task()?
        } else {
            None
        };
        // A retry after a provider failure is not another attempt at the task.
        if let Some(task) = focus.as_ref().filter(|_| self.retries == 0) {
            let attempts = self
                .state
                .task_attempts
                .entry(task.key.clone())
                .or_default();
            *attempts = attempts.saturating_add(1);
            self.save_state()?;
        }
        let context_at_start = context::pending(&self.dir.context())?;
        let before = self.repo.as_ref().map(Repo::snapshot);
        let context_text = context_at_start.as_ref().map(context::Pending::text);
        let prompt = self.build_prompt(iteration, context_text.as_deref());
        self.feedback.clear();
        let step = self.step_for(iteration);
        let format = step.spec.format(config.output_format);
        let opencode_config = self.write_opencode_config(&step)?;
        let command = step.agent.command(&CommandRequest {
            binary: &step.binary,
            prompt: &prompt,
            model: step.model.as_deref(),
            allow_all: config.allow_all,
            extra_args: &config.agent_args,
            opencode_config: opencode_config.as_deref(),
            format,
        });
        output::event(
            "iteration_started",
            serde_json::json!({"iteration": iteration, "agent": step.spec.id(), "model": step.model}),
        );

        let started_at = crate::model::now();
        let started = Instant::now();
        let mut promises = vec![&self.completion, &self.task];
        promises.extend(self.abort.as_ref());
        let mut transcript = Transcript::new(
            step.agent.as_ref(),
            DisplayOptions {
                stream: config.stream,
                verbose_tools: config.verbose_tools,
                heartbeat: self.knobs.heartbeat,
                tool_summary: self.knobs.tool_summary,
                format,
            },
            promises,
            config.promise_anywhere,
        )?
        .on_spawn({
            // Recorded so that `--resume` after a killed ralph can stop this agent.
            let mut state = self.state.clone();
            let path = self.dir.state();
            move |group| {
                state.agent_group = Some(group);
                let _ = state::save(&path, &state);
            }
        });
        let options = RunOptions {
            grace: self.knobs.grace,
            leak_timeout: self.knobs.leak_timeout,
            tick: Duration::from_millis(100),
            run_timeout: config.limits.iteration_timeout,
            idle_timeout: config.limits.idle_timeout,
        };
        if self.stop.is_stopping() {
            return Ok(Next::Stop(Stop::Interrupted));
        }
        let outcome = stream::run(&command, self.cwd, &options, self.stop, &mut transcript)?;
        let mut findings = transcript.finish();
        self.announced_stop |= findings.stop_announced;
        let elapsed = started.elapsed();
        match outcome.ended_by {
            Some(EndedBy::User) => return Ok(Next::Stop(Stop::Interrupted)),
            Some(EndedBy::RunTimeout | EndedBy::IdleTimeout) => {
                let message = if outcome.ended_by == Some(EndedBy::IdleTimeout) {
                    format!(
                        "no output for {}",
                        format::long_duration(config.limits.idle_timeout.unwrap_or_default())
                    )
                } else {
                    format!(
                        "ran longer than {}",
                        format::long_duration(config.limits.iteration_timeout.unwrap_or_default())
                    )
                };
                output::iteration_timed_out(iteration, &message);
                findings.failure = Some(Failure {
                    kind: FailureKind::Timeout,
                    status: None,
                    message,
                    retry_at: None,
                });
            }
            None => {}
        }
        let completion_detected = findings.promises[0];
        let task_detected = config.tasks && findings.promises[1];
        let abort_detected = findings.promises.get(2).copied().unwrap_or(false);

        output::iteration_summary(&output::IterationSummary {
            iteration,
            elapsed,
            tools: &findings.tools,
            exit_code: outcome.exit_code,
            completion_detected,
            usage: findings.usage,
            cost: findings.cost,
            failure: findings.failure.as_ref(),
        });
        let files_modified = match (&self.repo, before.flatten()) {
            (Some(repo), Some(before)) => repo
                .snapshot()
                .map(|after| repo.changed_files(&before, &after))
                .unwrap_or_default(),
            _ => Vec::new(),
        };

        // Decide what the agent's claims are worth.
        let mut verification = Vec::new();
        let mut refusal: Option<String> = None;
        let mut completed = false;
        let mut outcome_text = String::from("continued");
        if completion_detected {
            if iteration < config.min_iterations {
                output::completion_deferred(config.min_iterations, iteration + 1);
                outcome_text = format!(
                    "completion deferred (minimum {} iterations)",
                    config.min_iterations
                );
            } else if let Some(open) = self.open_tasks() {
                output::completion_refused_open_tasks(&open);
                let reason = format!("{} still open", plural(open.len() as u64, "task"));
                self.feedback
                    .push(open_tasks_feedback(&config.completion_promise, &open));
                outcome_text = format!("completion refused: {reason}");
                refusal = Some(reason);
            } else if config.verify.is_empty() {
                completed = true;
            } else {
                let results = self.verify(&config.verify);
                let failed: Vec<&crate::verify::Verification> =
                    results.iter().filter(|r| !r.passed).collect();
                if failed.is_empty() {
                    completed = true;
                } else {
                    output::completion_refused_by_verification(iteration);
                    let reason = format!(
                        "verification failed: `{}` ({})",
                        failed[0].command,
                        failed[0].outcome()
                    );
                    self.feedback.push(format!(
                        "## Completion was refused\n\nIn the previous iteration you printed <promise>{}</promise>, \
                         but the verification that must pass first did not:\n\n{}\n\nFix the cause, then claim \
                         completion again.",
                        config.completion_promise,
                        crate::verify::refusal_text(&failed)
                    ));
                    outcome_text = format!("completion refused: {reason}");
                    refusal = Some(reason);
                }
                verification = results;
            }
            if completed {
                outcome_text = "completed".to_owned();
            }
        } else if task_detected {
            let task_name = focus
                .as_ref()
                .map_or("the current task", |task| task.text.as_str());
            outcome_text = format!("task done: {task_name}");
            if let Some(task) = &focus
                && let Some(command) = &task.verify
            {
                let results = self.verify(std::slice::from_ref(command));
                if results.iter().any(|r| !r.passed) {
                    self.reopen_task(task)?;
                    output::task_verification_failed(&task.text);
                    let failed: Vec<&crate::verify::Verification> =
                        results.iter().filter(|r| !r.passed).collect();
                    self.feedback.push(format!(
                        "## The task was not accepted\n\nYou said \"{}\" was done, but its verify command \
                         failed, so it is marked [/] again:\n\n{}\n\nFix it before you print {} again.",
                        task.text,
                        crate::verify::refusal_text(&failed),
                        self.task.tag()
                    ));
                    outcome_text = format!("task not accepted: `{command}` failed");
                }
                verification = results;
            }
        }
        if abort_detected && !completed {
            outcome_text = "the agent gave up (abort promise)".to_owned();
        }
        if let Some(failure) = &findings.failure {
            outcome_text = format!("failed: {}: {}", failure.kind.label(), failure.message);
        }

        let changed_nothing = files_modified.is_empty();
        let record = IterationRecord {
            iteration,
            started_at,
            ended_at: crate::model::now(),
            duration_ms: millis(elapsed),
            tools_used: findings.tools.clone(),
            files_modified,
            exit_code: outcome.exit_code,
            completion_detected,
            errors: findings.errors.clone(),
            tokens: findings.usage,
            cost_usd: findings.cost,
            turns: findings.turns,
            failure: findings.failure.clone(),
            task: focus.as_ref().map(|task| task.text.clone()),
            agent: Some(step.spec.id().to_owned()),
            model: step.model.clone(),
            verification,
            completion_refused: refusal.clone(),
        };
        progress::append(
            self.dir,
            &progress::Entry {
                iteration,
                at: Some(record.ended_at),
                task: record.task.as_deref(),
                outcome: outcome_text,
                files: &record.files_modified,
                verification: record
                    .verification
                    .iter()
                    .map(|v| {
                        format!(
                            "`{}` {}",
                            v.command,
                            if v.passed {
                                "passed".to_owned()
                            } else {
                                format!("failed ({})", v.outcome())
                            }
                        )
                    })
                    .collect(),
                refusal: refusal.as_deref(),
                errors: &record.errors,
            },
        )?;
        output::event(
            "iteration_finished",
            serde_json::to_value(&record).unwrap_or_default(),
        );
        // A provider-side failure says nothing about whether the agent is stuck.
        let agent_side = findings
            .failure
            .as_ref()
            .is_none_or(|f| !f.kind.is_transient());
        let struggle = if agent_side {
            Struggle::Update {
                files_tracked: self.repo.is_some(),
            }
        } else {
            Struggle::Skip
        };
        self.history.record(record, struggle);
        history::save(&self.dir.history(), &self.history)?;
        let struggle = &self.history.struggle_indicators;
        if agent_side && struggle.should_warn(iteration) {
            output::struggle_warning(struggle.no_progress_iterations, struggle.short_iterations);
        }
        if findings.legacy_plugin {
            return Ok(Next::Stop(Stop::LegacyPlugin));
        }
        if outcome.exit_code != 0 && findings.failure.is_none() {
            output::nonzero_exit(step.spec.display_name(), outcome.exit_code);
        }
        if task_detected && !completion_detected {
            output::task_completed(&self.task.tag(), iteration + 1);
        }
        if completed {
            self.commit(iteration, changed_nothing);
            return Ok(Next::Stop(Stop::Completed { iteration }));
        }
        if abort_detected {
            self.commit(iteration, changed_nothing);
            return Ok(Next::Stop(Stop::Aborted {
                message: findings.final_text,
            }));
        }
        if let Some(failure) = findings
            .failure
            .clone()
            .filter(|f| f.kind.is_fatal() || f.kind.is_transient())
        {
            // The provider failed: keep whatever the agent did, but do not spend the iteration.
            self.commit(iteration, changed_nothing);
            return Ok(Next::Retry(failure));
        }
        if let Some(injected) = context_at_start {
            let consumed = context::consume(self.dir, &injected)?;
            output::context_consumed(
                consumed == context::Consumed::NewerKept,
                consumed == context::Consumed::EditedKept,
            );
        }
        self.commit(iteration, changed_nothing);
        // An agent that exits with an error and changes nothing, again and again (it cannot
        // start, its credentials expired in a way it does not report), must not spin all night.
        if outcome.exit_code != 0 && changed_nothing && findings.failure.is_none() {
            self.failed_runs += 1;
            if self.failed_runs >= MAX_FAILED_RUNS {
                return Ok(Next::Stop(Stop::AgentKeptFailing {
                    exit_code: outcome.exit_code,
                    runs: self.failed_runs,
                }));
            }
        } else {
            self.failed_runs = 0;
        }
        if agent_side && self.repo.is_some() {
            self.stalled = if changed_nothing { self.stalled + 1 } else { 0 };
            self.state.stalled = self.stalled;
            if let Some(limit) = config.limits.max_stalled
                && self.stalled >= limit
            {
                return Ok(Next::Stop(Stop::Stalled(self.stalled)));
            }
        }
        let pause = if outcome.exit_code == 0 {
            config.pause
        } else {
            ERROR_PAUSE.max(config.pause)
        };
        Ok(Next::Continue { pause })
    }

    /// Runs verification commands from the repository's top directory.
    fn verify(&self, commands: &[String]) -> Vec<crate::verify::Verification> {
        let dir = self.repo.as_ref().map_or(self.cwd, Repo::root);
        crate::verify::run_all(
            commands,
            dir,
            self.config.verify_timeout,
            self.knobs.grace,
            self.stop,
        )
    }

    /// The task this iteration works on; tasks past their `max_attempts` are marked failed first.
    fn choose_task(&mut self) -> anyhow::Result<Option<Focus>> {
        let attempts = &self.state.task_attempts;
        let (focus, failed) = tasks::edit(self.dir, |current| {
            let Some(content) = current else {
                return (None, (None, Vec::new()));
            };
            let mut content = content.to_vec();
            let mut failed = Vec::new();
            loop {
                let list = TaskList::parse(&String::from_utf8_lossy(&content));
                let Some(task) = list.focus() else {
                    return (Some(content), (None, failed));
                };
                let used = attempts.get(task.key()).copied().unwrap_or(0);
                if let Some(max) = task.max_attempts()
                    && used >= max
                {
                    let note = format!(
                        "failed after {used} attempts (max_attempts: {max}), marked by ralph"
                    );
                    if let Some(updated) =
                        tasks::set_status(&content, task.number, TaskStatus::Failed, Some(&note))
                    {
                        failed.push((task.text.clone(), used));
                        content = updated;
                        continue;
                    }
                }
                let focus = Focus {
                    key: task.key().to_owned(),
                    text: task.text.clone(),
                    verify: task.property(tasks::VERIFY).map(str::to_owned),
                };
                return (Some(content), (Some(focus), failed));
            }
        })?;
        for (text, used) in failed {
            output::task_failed(&text, used);
        }
        Ok(focus)
    }

    /// Marks a task `[/]` again after its verification failed.
    fn reopen_task(&self, focus: &Focus) -> anyhow::Result<()> {
        let reopened = |content: &[u8]| {
            let list = TaskList::parse(&String::from_utf8_lossy(content));
            let task = list.tasks.iter().find(|task| task.key() == focus.key)?;
            tasks::set_status(content, task.number, TaskStatus::InProgress, None)
        };
        tasks::edit(self.dir, |current| (current.and_then(reopened), ()))
    }

    /// Waits before retrying a failed iteration; a stop request or the runtime limit ends it.
    fn wait_before_retry(&mut self, iteration: u32, failure: &Failure) -> Option<Stop> {
        let now = crate::model::now();
        let delay = match failure.retry_at.filter(|at| *at > now) {
            // A second of slack so the limit has really reset.
            Some(at) => (at - now).to_std().unwrap_or_default() + Duration::from_secs(1),
            None => backoff(
                self.knobs.retry_base,
                self.retries,
                self.config.limits.retry_max_wait,
            ),
        };
        if let Some(limit) = self.config.limits.max_runtime
            && self.runtime() + delay >= limit
        {
            return Some(Stop::MaxRuntime(limit));
        }
        let wait = output::RetryWait {
            iteration,
            attempt: self.retries,
            max_attempts: self.config.limits.max_retries,
            failure,
            until_reset: failure.retry_at.is_some(),
        };
        let deadline = Instant::now() + delay;
        let mut last_shown: Option<Instant> = None;
        loop {
            if self.stop.is_stopping() {
                output::retry_wait_done();
                return Some(Stop::Interrupted);
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let every = if output::is_terminal() {
                Duration::from_secs(1)
            } else {
                Duration::from_secs(60)
            };
            if last_shown.is_none_or(|at| now.duration_since(at) >= every) {
                output::retry_countdown(&wait, deadline - now);
                last_shown = Some(now);
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(100)));
        }
        output::retry_wait_done();
        None
    }

    /// In tasks mode, stops the loop when open tasks remain but none can be started.
    fn tasks_blocked(&self) -> Option<Stop> {
        if !self.config.tasks {
            return None;
        }
        let content = storage::read_text(&self.dir.tasks()).ok().flatten()?;
        let list = TaskList::parse(&content);
        if list.is_empty() || list.all_complete() || list.focus().is_some() {
            return None;
        }
        Some(Stop::Blocked(
            list.open()
                .map(|task| {
                    let blockers = list.blockers(task);
                    let why = if task.status == TaskStatus::Failed {
                        " — failed".to_owned()
                    } else if blockers.is_empty() {
                        String::new()
                    } else {
                        format!(" — waits for {}", blockers.join(", "))
                    };
                    format!("{}. {} {}{why}", task.number, task.status.icon(), task.text)
                })
                .collect(),
        ))
    }

    /// In tasks mode, the open tasks that forbid completion (`None` when completion may go on).
    fn open_tasks(&self) -> Option<Vec<String>> {
        if !self.config.tasks {
            return None;
        }
        let content = match storage::read_text(&self.dir.tasks()) {
            Ok(content) => content.unwrap_or_default(),
            // Completion needs every task done; an unreadable list cannot show that.
            Err(err) => return Some(vec![format!("(the task file cannot be read: {err})")]),
        };
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
        iteration_prompt(self.config, self.dir, iteration, context, &self.feedback)
    }

    /// The agent (and model) of an iteration: the rotation's step, or the one agent.
    fn step_for(&self, iteration: u32) -> Rc<Step> {
        let index = usize::try_from(iteration.saturating_sub(1)).unwrap_or(0) % self.steps.len();
        Rc::clone(&self.steps[index])
    }

    fn write_opencode_config(&self, step: &Step) -> anyhow::Result<Option<PathBuf>> {
        let Some(value) = opencode_config_for(self.config, &step.spec, self.cwd) else {
            return Ok(None);
        };
        let path = self.dir.file(OPENCODE_CONFIG_FILE);
        storage::write_json(&path, &value)?;
        Ok(Some(std::path::absolute(&path)?))
    }

    /// Commits the agent's work of an iteration, with ralph's own files riding along; an
    /// iteration whose agent changed nothing makes no commit.
    fn commit(&self, iteration: u32, changed_nothing: bool) {
        if !self.config.commit || changed_nothing {
            return;
        }
        let Some(repo) = &self.repo else { return };
        match repo.commit_all(&iteration_commit_message(iteration)) {
            Ok(Some(hash)) => output::committed(iteration, &hash),
            Ok(None) => {}
            Err(reason) => output::commit_failed(&reason),
        }
    }

    /// At the end of the loop: ralph's own files (progress log, task file) that no commit of
    /// work took along get one commit, so the tree is not left dirty by ralph.
    fn commit_own_files(&self) {
        if !self.config.commit {
            return;
        }
        let Some(repo) = &self.repo else { return };
        let names = [
            progress::PROGRESS_FILE,
            storage::TASKS_FILE,
            storage::GITIGNORE_FILE,
        ];
        match repo.commit_own_files(&names, OWN_FILES_COMMIT) {
            Ok(Some(hash)) => output::progress_committed(&hash),
            Ok(None) => {}
            Err(reason) => output::commit_failed(&reason),
        }
    }

    /// On `--resume`: an iteration the history records but the state never moved past (ralph
    /// was killed while it committed) is not run again. Its commit is made now unless it was
    /// made already, and the loop goes on with the next iteration. An iteration recorded as a
    /// provider failure is the exception: it is retried, as it would have been.
    fn settle_recorded_iteration(&mut self) -> anyhow::Result<()> {
        let Some(last) = self.history.iterations.last() else {
            return Ok(());
        };
        let retried = last
            .failure
            .as_ref()
            .is_some_and(|f| f.kind.is_fatal() || f.kind.is_transient());
        if last.iteration < self.state.iteration || retried {
            return Ok(());
        }
        let iteration = last.iteration;
        let changed_nothing = last.files_modified.is_empty();
        if let Some(repo) = &self.repo
            && self.config.commit
            && !changed_nothing
        {
            repo.wait_for_index(Duration::from_secs(60));
            if repo.head_subject().as_deref() != Some(iteration_commit_message(iteration).as_str())
            {
                self.commit(iteration, changed_nothing);
            }
        }
        self.state.iteration = iteration.saturating_add(1);
        self.save_state()
    }

    /// Records an iteration in which ralph itself failed, and carries on.
    fn record_failure(&mut self, iteration: u32, err: &anyhow::Error) -> anyhow::Result<Next> {
        let message = format!("{err:#}");
        output::iteration_error(iteration, &message);
        let now = crate::model::now();
        self.history.record(
            IterationRecord {
                iteration,
                started_at: now,
                ended_at: now,
                exit_code: -1,
                errors: vec![message.chars().take(200).collect()],
                ..IterationRecord::default()
            },
            Struggle::Skip,
        );
        history::save(&self.dir.history(), &self.history)?;
        Ok(Next::Continue {
            pause: ERROR_PAUSE.max(self.config.pause),
        })
    }

    /// ralph could not go on (a write failed: the disk is full, a file became a directory):
    /// record the stop in the state while that is still possible, so `--status` tells what
    /// happened instead of reporting a crash. The error itself is printed by the caller.
    fn record_own_failure(&mut self, err: &anyhow::Error) {
        self.state.active = false;
        self.state.agent_group = None;
        self.state.stopped_at = Some(crate::model::now());
        self.state.stop_reason = Some(format!("ralph failed: {err:#}"));
        let _ = self.save_state();
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

/// The message of an iteration's auto-commit.
fn iteration_commit_message(iteration: u32) -> String {
    format!("Ralph iteration {iteration}: work in progress")
}

/// The message of the commit of ralph's own files at the end of a loop.
const OWN_FILES_COMMIT: &str = "Ralph: progress log";

/// The task an iteration works on.
#[derive(Debug)]
struct Focus {
    key: String,
    text: String,
    verify: Option<String>,
}

/// The prompt section listing open tasks after a refused completion claim.
fn open_tasks_feedback(promise: &str, open: &[String]) -> String {
    let list: Vec<String> = open.iter().map(|task| format!("- {task}")).collect();
    format!(
        "## Completion was refused\n\nIn the previous iteration you printed <promise>{promise}</promise>, \
         but these tasks are not marked [x] in .ralph/ralph-tasks.md:\n\n{}\n\n\
         Finish them (and mark them [x]) before claiming completion.",
        list.join("\n")
    )
}

/// Stops an agent that outlived a killed ralph (its process group still exists).
fn stop_leftover_agent(group: i32) {
    use nix::sys::signal::{Signal, killpg};
    let pid = nix::unistd::Pid::from_raw(group);
    if group <= 0 || killpg(pid, None).is_err() {
        return;
    }
    output::leftover_agent_stopped(group);
    let _ = killpg(pid, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline && killpg(pid, None).is_ok() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = killpg(pid, Signal::SIGKILL);
}

/// Exponential backoff with ±20 % jitter: `base`, `2·base`, `4·base`… capped at `cap`.
fn backoff(base: Duration, attempt: u32, cap: Duration) -> Duration {
    use std::hash::{BuildHasher as _, Hasher as _};
    let exponent = attempt.saturating_sub(1).min(20);
    let plain = base.saturating_mul(1 << exponent).min(cap);
    // A random-enough factor without a random-number crate: std's per-process hash keys.
    let noise = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    #[expect(clippy::cast_precision_loss, reason = "jitter only")]
    let factor = 0.8 + 0.4 * ((noise % 1000) as f64 / 1000.0);
    plain.mul_f64(factor).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let base = Duration::from_secs(10);
        let cap = Duration::from_secs(60);
        let first = backoff(base, 1, cap);
        assert!(
            first >= Duration::from_secs(8) && first <= Duration::from_secs(12),
            "{first:?}"
        );
        let third = backoff(base, 3, cap);
        assert!(
            third >= Duration::from_secs(32) && third <= Duration::from_secs(48),
            "{third:?}"
        );
        assert!(backoff(base, 10, cap) <= cap);
    }
}
