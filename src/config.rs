//! Turns the parsed command line into a validated [`Config`]: the only consumer of [`Cli`].
//!
//! Commands (`--status`, `--add-task`, …) are chosen by a fixed precedence after the whole
//! command line is parsed, so `ralph --status --tasks` and `ralph --tasks --status` are the same.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agents::{AgentSpec, OutputFormat};
use crate::cli::Cli;
use crate::cli::parse::RotationEntry;
use crate::output::ColorChoice;
use crate::promise::PromiseFormat;
use crate::settings::Settings;
use crate::storage::RalphDir;
use crate::storage::state::{LoopState, SavedOptions};

/// The default completion promise.
pub(crate) const DEFAULT_COMPLETION_PROMISE: &str = "COMPLETE";
/// The default task promise.
pub(crate) const DEFAULT_TASK_PROMISE: &str = "READY_FOR_NEXT_TASK";
/// The default time limit of a verification command.
pub(crate) const DEFAULT_VERIFY_TIMEOUT: Duration = Duration::from_secs(600);
/// The default pause between iterations.
pub(crate) const DEFAULT_PAUSE: Duration = Duration::from_secs(1);

/// What this invocation does.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) cwd: PathBuf,
    pub(crate) ralph_dir: RalphDir,
    pub(crate) mode: Mode,
    /// The loop options given on the command line (for `--resume` and `--config`).
    pub(crate) cli_flags: LoopFlags,
    /// The environment and config-file layers.
    pub(crate) settings: Settings,
    pub(crate) color: ColorChoice,
    pub(crate) color_from_cli: bool,
    pub(crate) json: bool,
}

/// The one thing ralph does this time, in precedence order.
#[derive(Debug)]
pub(crate) enum Mode {
    Completions(clap_complete::Shell),
    Man,
    Init,
    ShowConfig,
    Doctor,
    Status {
        tasks: bool,
    },
    AddContext(String),
    ClearContext,
    ListTasks,
    AddTask {
        description: String,
        id: Option<String>,
        blocked_by: Option<String>,
    },
    RemoveTask(usize),
    Reset,
    Resume,
    DryRun(Box<RunConfig>),
    Run(Box<RunConfig>),
}

/// A usage mistake: printed with a pointer to `--help`, exit 1, nothing touched.
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A [`UsageError`] as an `anyhow` error.
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// Loop options as given in one place (`None` = not given there).
#[derive(Debug, Default, Clone)]
pub(crate) struct LoopFlags {
    /// An agent name: built-in or custom.
    pub(crate) agent: Option<String>,
    pub(crate) rotation: Option<Vec<RotationEntry>>,
    pub(crate) model: Option<String>,
    pub(crate) min_iterations: Option<u32>,
    pub(crate) max_iterations: Option<u32>,
    pub(crate) completion_promise: Option<String>,
    pub(crate) promise_anywhere: Option<bool>,
    pub(crate) promise_format: Option<PromiseFormat>,
    pub(crate) verify: Option<Vec<String>>,
    pub(crate) verify_timeout: Option<Duration>,
    pub(crate) pause: Option<Duration>,
    pub(crate) tasks: Option<bool>,
    pub(crate) task_promise: Option<String>,
    pub(crate) stream: Option<bool>,
    pub(crate) output_format: Option<OutputFormat>,
    pub(crate) verbose_tools: Option<bool>,
    pub(crate) no_plugins: Option<bool>,
    pub(crate) allow_all: Option<bool>,
    pub(crate) commit: Option<bool>,
    pub(crate) agent_args: Option<Vec<String>>,
    pub(crate) limits: LimitFlags,
}

impl LoopFlags {
    /// These flags, with `lower`'s filling the gaps.
    pub(crate) fn or(self, lower: Self) -> Self {
        // No `..`: a new option must be merged here.
        let Self {
            agent,
            rotation,
            model,
            min_iterations,
            max_iterations,
            completion_promise,
            promise_anywhere,
            promise_format,
            verify,
            verify_timeout,
            pause,
            tasks,
            task_promise,
            stream,
            output_format,
            verbose_tools,
            no_plugins,
            allow_all,
            commit,
            agent_args,
            limits,
        } = self;
        let l = lower.limits;
        Self {
            agent: agent.or(lower.agent),
            rotation: rotation.or(lower.rotation),
            model: model.or(lower.model),
            min_iterations: min_iterations.or(lower.min_iterations),
            max_iterations: max_iterations.or(lower.max_iterations),
            completion_promise: completion_promise.or(lower.completion_promise),
            promise_anywhere: promise_anywhere.or(lower.promise_anywhere),
            promise_format: promise_format.or(lower.promise_format),
            verify: verify.or(lower.verify),
            verify_timeout: verify_timeout.or(lower.verify_timeout),
            pause: pause.or(lower.pause),
            tasks: tasks.or(lower.tasks),
            task_promise: task_promise.or(lower.task_promise),
            stream: stream.or(lower.stream),
            output_format: output_format.or(lower.output_format),
            verbose_tools: verbose_tools.or(lower.verbose_tools),
            no_plugins: no_plugins.or(lower.no_plugins),
            allow_all: allow_all.or(lower.allow_all),
            commit: commit.or(lower.commit),
            agent_args: agent_args.or(lower.agent_args),
            limits: LimitFlags {
                iteration_timeout: limits.iteration_timeout.or(l.iteration_timeout),
                idle_timeout: limits.idle_timeout.or(l.idle_timeout),
                max_runtime: limits.max_runtime.or(l.max_runtime),
                max_cost: limits.max_cost.or(l.max_cost),
                max_tokens: limits.max_tokens.or(l.max_tokens),
                max_stalled: limits.max_stalled.or(l.max_stalled),
                abort_promise: limits.abort_promise.or(l.abort_promise),
                max_retries: limits.max_retries.or(l.max_retries),
                retry_max_wait: limits.retry_max_wait.or(l.retry_max_wait),
            },
        }
    }

    /// Whether the setting named `key` (a config-file key) is given here.
    pub(crate) fn is_set(&self, key: &str) -> bool {
        let l = &self.limits;
        match key {
            "agent" => self.agent.is_some(),
            "rotation" => self.rotation.is_some(),
            "model" => self.model.is_some(),
            "min_iterations" => self.min_iterations.is_some(),
            "max_iterations" => self.max_iterations.is_some(),
            "completion_promise" => self.completion_promise.is_some(),
            "promise_anywhere" => self.promise_anywhere.is_some(),
            "promise_format" => self.promise_format.is_some(),
            "verify" => self.verify.is_some(),
            "verify_timeout" => self.verify_timeout.is_some(),
            "pause" => self.pause.is_some(),
            "tasks" => self.tasks.is_some(),
            "task_promise" => self.task_promise.is_some(),
            "stream" => self.stream.is_some(),
            "output_format" => self.output_format.is_some(),
            "verbose_tools" => self.verbose_tools.is_some(),
            "no_plugins" => self.no_plugins.is_some(),
            "allow_all" => self.allow_all.is_some(),
            "commit" => self.commit.is_some(),
            "agent_args" => self.agent_args.is_some(),
            "iteration_timeout" => l.iteration_timeout.is_some(),
            "idle_timeout" => l.idle_timeout.is_some(),
            "max_runtime" => l.max_runtime.is_some(),
            "max_cost" => l.max_cost.is_some(),
            "max_tokens" => l.max_tokens.is_some(),
            "max_stalled" => l.max_stalled.is_some(),
            "abort_promise" => l.abort_promise.is_some(),
            "max_retries" => l.max_retries.is_some(),
            "retry_max_wait" => l.retry_max_wait.is_some(),
            _ => false,
        }
    }
}

/// Limit options as given on the command line.
#[derive(Debug, Default, Clone)]
pub(crate) struct LimitFlags {
    pub(crate) iteration_timeout: Option<Duration>,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) max_runtime: Option<Duration>,
    pub(crate) max_cost: Option<f64>,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) max_stalled: Option<u32>,
    pub(crate) abort_promise: Option<String>,
    pub(crate) max_retries: Option<u32>,
    pub(crate) retry_max_wait: Option<Duration>,
}

/// The default number of retries in a row after provider-side failures.
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 3;
/// The default longest backoff wait.
pub(crate) const DEFAULT_RETRY_MAX_WAIT: Duration = Duration::from_secs(600);

/// Resolved limits; `None` means no limit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Limits {
    pub(crate) iteration_timeout: Option<Duration>,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) max_runtime: Option<Duration>,
    pub(crate) max_cost: Option<f64>,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) max_stalled: Option<u32>,
    pub(crate) abort_promise: Option<String>,
    pub(crate) max_retries: u32,
    pub(crate) retry_max_wait: Duration,
}

/// One step of `--rotation`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RotationStep {
    pub(crate) agent: AgentSpec,
    pub(crate) model: Option<String>,
}

/// A loop's resolved settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunConfig {
    pub(crate) prompt: String,
    pub(crate) prompt_file: Option<PathBuf>,
    pub(crate) agent: AgentSpec,
    /// Agents and models to cycle through, one per iteration (empty: `agent` and `model` always).
    pub(crate) rotation: Vec<RotationStep>,
    pub(crate) model: Option<String>,
    pub(crate) min_iterations: u32,
    pub(crate) max_iterations: u32,
    pub(crate) completion_promise: String,
    pub(crate) promise_anywhere: bool,
    pub(crate) promise_format: PromiseFormat,
    pub(crate) verify: Vec<String>,
    pub(crate) verify_timeout: Duration,
    pub(crate) pause: Duration,
    pub(crate) tasks: bool,
    pub(crate) task_promise: String,
    pub(crate) stream: bool,
    pub(crate) output_format: OutputFormat,
    pub(crate) verbose_tools: bool,
    pub(crate) no_plugins: bool,
    pub(crate) allow_all: bool,
    pub(crate) commit: bool,
    pub(crate) agent_args: Vec<String>,
    pub(crate) limits: Limits,
}

/// Where the prompt text can come from besides the command line.
pub(crate) trait PromptInput {
    /// Piped stdin, if any; `has_words` says whether prompt words were also given.
    fn piped_stdin(&mut self, has_words: bool) -> anyhow::Result<Option<String>>;
}

impl Config {
    /// Validates the command line. `input` is only consulted when a loop is to run.
    pub(crate) fn from_cli(
        cli: Cli,
        cwd: PathBuf,
        input: &mut dyn PromptInput,
        settings: Settings,
    ) -> anyhow::Result<Self> {
        // No `..`: a new flag must fail to compile until it is handled here.
        let Cli {
            prompt,
            agent_args,
            status,
            add_context,
            clear_context,
            list_tasks,
            add_task,
            id,
            blocked_by,
            remove_task,
            resume,
            reset,
            init,
            config,
            doctor,
            dry_run,
            completions,
            man,
            json,
            color,
            rotation,
            help: _,
            version: _,
            prompt_file,
            iteration_timeout,
            idle_timeout,
            max_runtime,
            max_cost,
            max_tokens,
            max_stalled,
            abort_promise,
            max_retries,
            retry_max_wait,
            agent,
            model,
            min_iterations,
            max_iterations,
            completion_promise,
            promise_format,
            verify,
            verify_timeout,
            promise_anywhere,
            pause,
            tasks,
            task_promise,
            stream,
            no_stream,
            output_format,
            verbose_tools,
            no_plugins,
            allow_all,
            no_allow_all,
            commit,
            no_commit,
        } = cli;
        let ralph_dir = RalphDir::new(&cwd);
        let flags = LoopFlags {
            agent,
            rotation: rotation.map(|rotation| rotation.0),
            model: model.filter(|m| !m.trim().is_empty()),
            min_iterations,
            max_iterations,
            completion_promise,
            promise_anywhere: promise_anywhere.then_some(true),
            promise_format,
            verify: (!verify.is_empty()).then_some(verify),
            verify_timeout,
            pause,
            tasks: tasks.then_some(true),
            task_promise,
            stream: switch(stream, no_stream),
            output_format,
            verbose_tools: verbose_tools.then_some(true),
            no_plugins: no_plugins.then_some(true),
            allow_all: switch(allow_all, no_allow_all),
            commit: switch(commit, no_commit),
            agent_args: (!agent_args.is_empty()).then_some(agent_args),
            limits: LimitFlags {
                iteration_timeout,
                idle_timeout,
                max_runtime,
                max_cost,
                max_tokens,
                max_stalled,
                abort_promise,
                max_retries,
                retry_max_wait,
            },
        };
        let mode = if let Some(shell) = completions {
            Mode::Completions(shell)
        } else if man {
            Mode::Man
        } else if init {
            Mode::Init
        } else if config {
            Mode::ShowConfig
        } else if doctor {
            Mode::Doctor
        } else if status {
            Mode::Status { tasks }
        } else if let Some(text) = add_context {
            if text.trim().is_empty() {
                return Err(usage(
                    "--add-context needs some text: ralph --add-context \"your hint\"",
                ));
            }
            Mode::AddContext(text)
        } else if clear_context {
            Mode::ClearContext
        } else if list_tasks {
            Mode::ListTasks
        } else if let Some(description) = add_task {
            Mode::AddTask {
                description,
                id,
                blocked_by,
            }
        } else if let Some(number) = remove_task {
            let number = number.trim().parse::<usize>().map_err(|_| {
                usage(format!("--remove-task needs a task number (1, 2, …), not '{number}'; see ralph --list-tasks"))
            })?;
            Mode::RemoveTask(number)
        } else if reset {
            Mode::Reset
        } else if resume {
            if !prompt.is_empty() || prompt_file.is_some() {
                return Err(usage(
                    "--resume continues the saved prompt; do not give a new one",
                ));
            }
            Mode::Resume
        } else {
            let (text, file) = resolve_prompt(prompt, prompt_file, &cwd, input)?;
            let merged = settings.merged(flags.clone());
            let run = Box::new(RunConfig::resolve(text, file, &merged, None, &settings)?);
            if dry_run {
                Mode::DryRun(run)
            } else {
                Mode::Run(run)
            }
        };
        let color_from_cli = color.is_some();
        Ok(Self {
            cwd,
            ralph_dir,
            mode,
            cli_flags: flags,
            color: settings.color(color),
            color_from_cli,
            settings,
            json,
        })
    }
}

fn switch(on: bool, off: bool) -> Option<bool> {
    if off {
        Some(false)
    } else if on {
        Some(true)
    } else {
        None
    }
}

impl RunConfig {
    /// Resolves flags over saved settings (for `--resume`) over defaults, and validates.
    pub(crate) fn resolve(
        prompt: String,
        prompt_file: Option<PathBuf>,
        flags: &LoopFlags,
        saved: Option<&LoopState>,
        settings: &Settings,
    ) -> anyhow::Result<Self> {
        let options = saved
            .and_then(|state| state.options.clone())
            .unwrap_or_default();
        let agent_name = flags
            .agent
            .clone()
            .or_else(|| {
                saved
                    .map(|state| state.agent.clone())
                    .filter(|a| !a.is_empty())
            })
            .unwrap_or_else(|| "opencode".to_owned());
        let agent = AgentSpec::resolve(&agent_name, &settings.agents).map_err(usage)?;
        let rotation_entries = match &flags.rotation {
            Some(entries) => entries.clone(),
            None => match options.rotation.as_deref() {
                Some(text) => crate::cli::parse::rotation(text).map_err(usage)?,
                None => Vec::new(),
            },
        };
        let rotation = rotation_entries
            .iter()
            .map(|entry| {
                Ok(RotationStep {
                    agent: AgentSpec::resolve(&entry.agent, &settings.agents).map_err(usage)?,
                    model: entry.model.clone(),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let config = Self {
            prompt,
            prompt_file,
            agent,
            rotation,
            model: flags
                .model
                .clone()
                .or_else(|| saved.map(|s| s.model.clone()).filter(|m| !m.is_empty())),
            min_iterations: flags
                .min_iterations
                .or(saved.map(|s| s.min_iterations))
                .unwrap_or(1),
            max_iterations: flags
                .max_iterations
                .or(saved.map(|s| s.max_iterations))
                .unwrap_or(0),
            completion_promise: flags
                .completion_promise
                .clone()
                .or_else(|| saved.map(|s| s.completion_promise.clone()))
                .unwrap_or_else(|| DEFAULT_COMPLETION_PROMISE.to_owned()),
            promise_anywhere: flags.promise_anywhere.unwrap_or(options.promise_anywhere),
            promise_format: flags.promise_format.unwrap_or(if options.plain_promises {
                PromiseFormat::Plain
            } else {
                PromiseFormat::Xml
            }),
            verify: flags.verify.clone().unwrap_or(options.verify),
            verify_timeout: flags
                .verify_timeout
                .or(ms(options.verify_timeout_ms))
                .unwrap_or(DEFAULT_VERIFY_TIMEOUT),
            pause: flags.pause.unwrap_or_else(|| {
                saved.map_or(DEFAULT_PAUSE, |_| Duration::from_millis(options.pause_ms))
            }),
            tasks: flags.tasks.or(saved.map(|s| s.tasks_mode)).unwrap_or(false),
            task_promise: flags
                .task_promise
                .clone()
                .or_else(|| saved.map(|s| s.task_promise.clone()))
                .unwrap_or_else(|| DEFAULT_TASK_PROMISE.to_owned()),
            stream: flags.stream.unwrap_or(options.stream),
            output_format: flags.output_format.unwrap_or(if options.plain_text {
                OutputFormat::Text
            } else {
                OutputFormat::Json
            }),
            verbose_tools: flags.verbose_tools.unwrap_or(options.verbose_tools),
            no_plugins: flags.no_plugins.unwrap_or(options.no_plugins),
            allow_all: flags.allow_all.unwrap_or(options.allow_all),
            commit: flags.commit.unwrap_or(options.commit),
            agent_args: flags.agent_args.clone().unwrap_or(options.agent_args),
            limits: Limits {
                iteration_timeout: flags
                    .limits
                    .iteration_timeout
                    .or(ms(options.iteration_timeout_ms)),
                idle_timeout: flags.limits.idle_timeout.or(ms(options.idle_timeout_ms)),
                max_runtime: flags.limits.max_runtime.or(ms(options.max_runtime_ms)),
                max_cost: flags.limits.max_cost.or(options.max_cost),
                max_tokens: flags.limits.max_tokens.or(options.max_tokens),
                max_stalled: flags
                    .limits
                    .max_stalled
                    .or(options.max_stalled)
                    .filter(|n| *n > 0),
                abort_promise: flags.limits.abort_promise.clone().or(options.abort_promise),
                max_retries: flags
                    .limits
                    .max_retries
                    .or(options.max_retries)
                    .unwrap_or(DEFAULT_MAX_RETRIES),
                retry_max_wait: flags
                    .limits
                    .retry_max_wait
                    .or(ms(options.retry_max_wait_ms))
                    .unwrap_or(DEFAULT_RETRY_MAX_WAIT),
            },
        };
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> anyhow::Result<()> {
        if self.max_iterations > 0 && self.min_iterations > self.max_iterations {
            return Err(usage(format!(
                "--min-iterations ({}) is greater than --max-iterations ({}); the loop could never complete",
                self.min_iterations, self.max_iterations
            )));
        }
        let abort = self
            .limits
            .abort_promise
            .clone()
            .unwrap_or_else(|| "x".to_owned());
        if self.verify.iter().any(|command| command.trim().is_empty()) {
            return Err(usage(
                "--verify needs a command, e.g. --verify \"cargo test\"",
            ));
        }
        for (flag, text) in [
            ("--completion-promise", &self.completion_promise),
            ("--task-promise", &self.task_promise),
            ("--abort-promise", &abort),
        ] {
            if text.trim().is_empty() || text.contains('\n') {
                return Err(usage(format!(
                    "{flag} must be a non-empty single line of text"
                )));
            }
        }
        Ok(())
    }

    /// The options `--resume` needs beyond the reference's state keys.
    pub(crate) fn saved_options(&self) -> SavedOptions {
        SavedOptions {
            prompt_file: self.prompt_file.as_ref().map(|p| p.display().to_string()),
            stream: self.stream,
            plain_text: self.output_format == OutputFormat::Text,
            rotation: (!self.rotation.is_empty()).then(|| {
                self.rotation
                    .iter()
                    .map(|step| match &step.model {
                        Some(model) => format!("{}:{model}", step.agent.id()),
                        None => step.agent.id().to_owned(),
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            }),
            verbose_tools: self.verbose_tools,
            no_plugins: self.no_plugins,
            allow_all: self.allow_all,
            commit: self.commit,
            promise_anywhere: self.promise_anywhere,
            plain_promises: self.promise_format == PromiseFormat::Plain,
            verify: self.verify.clone(),
            verify_timeout_ms: Some(millis(self.verify_timeout)),
            pause_ms: millis(self.pause),
            agent_args: self.agent_args.clone(),
            iteration_timeout_ms: self.limits.iteration_timeout.map(millis),
            idle_timeout_ms: self.limits.idle_timeout.map(millis),
            max_runtime_ms: self.limits.max_runtime.map(millis),
            max_cost: self.limits.max_cost,
            max_tokens: self.limits.max_tokens,
            max_stalled: self.limits.max_stalled,
            abort_promise: self.limits.abort_promise.clone(),
            max_retries: Some(self.limits.max_retries),
            retry_max_wait_ms: Some(millis(self.limits.retry_max_wait)),
        }
    }
}

fn ms(value: Option<u64>) -> Option<Duration> {
    value.map(Duration::from_millis)
}

/// A duration in whole milliseconds (saturating), as the state and history store them.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The prompt, from every source the user gave, joined by line breaks in this order: the prompt
/// file (`--prompt-file`, or a single argument naming an existing file), piped stdin, then the
/// words. No source is ever dropped.
fn resolve_prompt(
    mut words: Vec<String>,
    mut prompt_file: Option<PathBuf>,
    cwd: &Path,
    input: &mut dyn PromptInput,
) -> anyhow::Result<(String, Option<PathBuf>)> {
    if prompt_file.is_none()
        && let [single] = words.as_slice()
        && !single.trim().is_empty()
        && !single.contains('\n')
        && cwd.join(single).exists()
    {
        prompt_file = Some(PathBuf::from(single));
        words.clear();
    }
    let mut parts = Vec::new();
    if let Some(path) = &prompt_file {
        parts.push(read_prompt_file(path, cwd)?);
    }
    let has_other = prompt_file.is_some() || !words.is_empty();
    if let Some(piped) = input.piped_stdin(has_other)? {
        refuse_nul(&piped, "the prompt read from stdin")?;
        parts.push(piped.trim().to_owned());
    }
    let joined = words.join(" ");
    if !joined.trim().is_empty() {
        parts.push(joined.trim().to_owned());
    }
    let text = parts.join("\n");
    if text.trim().is_empty() {
        return Err(usage(
            "no prompt given. Pass it as words (ralph \"Build a REST API\"), with --prompt-file PATH, or on stdin (cat PROMPT.md | ralph)",
        ));
    }
    Ok((text, prompt_file))
}

/// A prompt with a NUL byte cannot be passed to an agent: refuse it before anything starts.
fn refuse_nul(text: &str, source: &str) -> anyhow::Result<()> {
    match text.find('\0') {
        Some(at) => Err(anyhow::anyhow!(
            "{source} contains a NUL byte (at byte {at}), which no agent can be given; remove it and run ralph again"
        )),
        None => Ok(()),
    }
}

/// Text from bytes; invalid UTF-8 becomes U+FFFD, with one warning naming the source.
pub(crate) fn prompt_text(bytes: &[u8], source: &str) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => {
            crate::output::prompt_not_utf8(source);
            String::from_utf8_lossy(bytes).into_owned()
        }
    }
}

fn read_prompt_file(path: &Path, cwd: &Path) -> anyhow::Result<String> {
    let full = cwd.join(path);
    let shown = path.display();
    let meta = std::fs::metadata(&full).map_err(|err| {
        if err.kind() == std::io::ErrorKind::NotFound {
            usage(format!("prompt file not found: {shown}"))
        } else {
            usage(format!("unable to read prompt file: {shown} ({err})"))
        }
    })?;
    if !meta.is_file() {
        return Err(usage(format!("prompt path is not a file: {shown}")));
    }
    let bytes = std::fs::read(&full)
        .map_err(|err| usage(format!("unable to read prompt file: {shown} ({err})")))?;
    let source = format!("the prompt file {shown}");
    let text = prompt_text(&bytes, &source).trim().to_owned();
    if text.is_empty() {
        return Err(usage(format!("prompt file is empty: {shown}")));
    }
    refuse_nul(&text, &source)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    struct NoStdin;
    impl PromptInput for NoStdin {
        fn piped_stdin(&mut self, _: bool) -> anyhow::Result<Option<String>> {
            Ok(None)
        }
    }

    struct Piped(&'static str);
    impl PromptInput for Piped {
        fn piped_stdin(&mut self, _: bool) -> anyhow::Result<Option<String>> {
            Ok(Some(self.0.to_owned()))
        }
    }

    fn config_with(args: &[&str], input: &mut dyn PromptInput) -> anyhow::Result<Config> {
        let cli = Cli::try_parse_from(std::iter::once("ralph").chain(args.iter().copied()))?;
        Config::from_cli(cli, std::env::temp_dir(), input, Settings::default())
    }

    fn run_config(args: &[&str]) -> RunConfig {
        match config_with(args, &mut NoStdin).unwrap().mode {
            Mode::Run(config) => *config,
            other => panic!("expected a run, got {other:?}"),
        }
    }

    /// Every flag at once: a flag whose clap definition and field type disagree would panic here.
    #[test]
    fn every_flag_parses() {
        let args = [
            "task",
            "--agent",
            "codex",
            "--rotation",
            "claude-code:m,codex",
            "--model",
            "m",
            "--min-iterations",
            "1",
            "--max-iterations",
            "5",
            "--completion-promise",
            "DONE",
            "--promise-format",
            "plain",
            "--promise-anywhere",
            "--pause",
            "2s",
            "--verify",
            "true",
            "--verify",
            "make",
            "--verify-timeout",
            "1m",
            "--tasks",
            "--task-promise",
            "NEXT",
            "--iteration-timeout",
            "1h",
            "--idle-timeout",
            "5m",
            "--max-runtime",
            "8h",
            "--max-cost",
            "3",
            "--max-tokens",
            "1M",
            "--max-stalled",
            "4",
            "--abort-promise",
            "STOP",
            "--max-retries",
            "2",
            "--retry-max-wait",
            "30s",
            "--output-format",
            "text",
            "--no-stream",
            "--verbose-tools",
            "--no-plugins",
            "--no-allow-all",
            "--no-commit",
            "--json",
            "--color",
            "never",
            "--prompt-file",
            "/dev/null",
            "--",
            "--extra",
        ];
        let cli = Cli::try_parse_from(std::iter::once("ralph").chain(args)).unwrap();
        let error = Config::from_cli(cli, std::env::temp_dir(), &mut NoStdin, Settings::default());
        // /dev/null is not a regular file: the prompt file check runs after every flag was read.
        assert!(error.unwrap_err().to_string().contains("not a file"));
        for command in [
            &["--status", "--json"][..],
            &["--list-tasks"],
            &["--add-context", "x"],
            &["--clear-context"],
            &["--add-task", "t", "--id", "a", "--blocked-by", "b"],
            &["--remove-task", "1"],
            &["--reset"],
            &["--resume"],
            &["--init"],
            &["--config"],
            &["--doctor"],
            &["--completions", "bash"],
            &["--man"],
            &["x", "--dry-run"],
        ] {
            assert!(config_with(command, &mut NoStdin).is_ok(), "{command:?}");
        }
    }

    #[test]
    fn defaults_match_the_reference() {
        let config = run_config(&["Build", "an", "API"]);
        assert_eq!(config.prompt, "Build an API");
        assert_eq!(config.agent.id(), "opencode");
        assert_eq!((config.min_iterations, config.max_iterations), (1, 0));
        assert_eq!(config.completion_promise, "COMPLETE");
        assert_eq!(config.task_promise, "READY_FOR_NEXT_TASK");
        assert!(config.stream && config.allow_all && config.commit);
        assert!(!config.tasks && !config.verbose_tools && !config.no_plugins);
        assert_eq!(config.pause, Duration::from_secs(1));
    }

    #[test]
    fn negated_switches_and_agent_args() {
        let config = run_config(&[
            "x",
            "--no-stream",
            "--no-commit",
            "--no-allow-all",
            "--",
            "--flag",
            "v",
        ]);
        assert!(!config.stream && !config.commit && !config.allow_all);
        assert_eq!(config.agent_args, ["--flag", "v"]);
        let config = run_config(&["x", "--no-commit", "--commit"]);
        assert!(config.commit, "the last of a pair wins");
    }

    #[test]
    fn commands_win_by_fixed_precedence() {
        for args in [&["--status", "--tasks"][..], &["--tasks", "--status"]] {
            assert!(matches!(
                config_with(args, &mut NoStdin).unwrap().mode,
                Mode::Status { tasks: true, .. }
            ));
        }
        let mode = config_with(&["--list-tasks", "--status"], &mut NoStdin)
            .unwrap()
            .mode;
        assert!(matches!(mode, Mode::Status { tasks: false, .. }));
    }

    #[test]
    fn min_above_max_is_refused() {
        let error = config_with(
            &["x", "--min-iterations", "5", "--max-iterations", "3"],
            &mut NoStdin,
        )
        .unwrap_err();
        assert!(error.to_string().contains("(5)") && error.to_string().contains("(3)"));
        assert!(config_with(&["x", "--min-iterations", "5"], &mut NoStdin).is_ok());
    }

    #[test]
    fn stdin_comes_first_then_the_words() {
        let config = config_with(&["extra", "words"], &mut Piped("from stdin\n")).unwrap();
        let Mode::Run(run) = config.mode else {
            panic!()
        };
        assert_eq!(run.prompt, "from stdin\nextra words");
        assert!(
            config_with(&[""], &mut NoStdin)
                .unwrap_err()
                .to_string()
                .contains("no prompt given")
        );
        assert!(
            config_with(&[], &mut NoStdin)
                .unwrap_err()
                .to_string()
                .contains("no prompt given")
        );
    }
}
