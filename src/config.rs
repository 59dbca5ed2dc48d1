//! Turns the parsed command line into a validated [`Config`]: the only consumer of [`Cli`].
//!
//! Commands (`--status`, `--add-task`, …) are chosen by a fixed precedence after the whole
//! command line is parsed, so `ralph --status --tasks` and `ralph --tasks --status` are the same.
//! Loop options come from layers (command line, environment, config files; `--resume` adds the
//! saved loop) resolved by `options.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::agents::AgentSpec;
use crate::agents::custom::CustomAgentDef;
use crate::cli::{Cli, CommandArgs};
use crate::error::{Error, fail, usage};
use crate::options::{Layer, LoopOptions, Raw, Source};
use crate::output::ColorChoice;
use crate::settings::Settings;
use crate::storage::RalphDir;

mod modes;
mod validate;

use modes::{loop_mode, plan_mode, resume_mode, serve_mode, worker_mode};

/// What this invocation does.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) cwd: PathBuf,
    pub(crate) ralph_dir: RalphDir,
    pub(crate) mode: Mode,
    /// The loop options given on the command line (for `--resume`, `--config` and `--doctor`).
    pub(crate) cli_layer: Layer,
    /// The environment and config-file layers.
    pub(crate) settings: Settings,
    pub(crate) color: ColorChoice,
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
    /// `--mcp`: a Model Context Protocol server on stdio.
    Mcp,
    Status {
        tasks: bool,
        /// `--status --remote NAME`: the claims and the task board on that remote.
        remote: Option<String>,
    },
    /// `--answer ID TEXT [--remote NAME]`: a person's answer to an agent's question.
    Answer {
        id: String,
        text: String,
        remote: Option<String>,
    },
    /// `--watch`: the live dashboard.
    Watch,
    /// `--report [FILE]`: the HTML report (`.ralph/report.html` when `None`).
    Report(Option<std::path::PathBuf>),
    /// `--log [N|TASK[/N]]`: which iteration's log.
    Log {
        which: LogTarget,
        raw: bool,
        follow: bool,
    },
    /// `--add-context TEXT [--task ID]`.
    AddContext {
        text: String,
        task: Option<String>,
    },
    ClearContext,
    ListTasks,
    AddTask {
        description: String,
        id: Option<String>,
        blocked_by: Option<String>,
        /// The task's own properties (`agent`, `model`, `success`, …) as `key: value` lines.
        properties: Vec<(&'static str, String)>,
    },
    RemoveTask(usize),
    /// `--import FILE…`: task lists added to the task file, in order.
    Import(Vec<std::path::PathBuf>),
    /// `--export json`: the task list as JSON.
    Export,
    Reset,
    Resume,
    /// `--resume --worktree NAME [--merge]`: the loop interrupted in that worktree goes on.
    ResumeInWorktree {
        name: String,
        merge: bool,
    },
    DryRun(Box<RunConfig>),
    /// `--plan`: the prompt planned into the task list, shown, nothing committed or run.
    Plan(Box<RunConfig>),
    /// `--dry-run --worker`: what the worker would take and its first task's loop.
    WorkerDryRun {
        config: Box<RunConfig>,
        remote: String,
        base: Option<String>,
    },
    /// A loop of its own: `ralph "…"`, with or without `--tasks`.
    Run(Box<RunConfig>),
    /// `--parallel N`: the task list's tasks, up to N at once, each in its own worktree.
    Parallel(Box<RunConfig>),
    /// `--serve [ADDR]` without a prompt: serve the runs of this repository until Ctrl-C
    /// (`remote`: with `--remote NAME`, that remote's fleet too).
    Serve {
        addr: crate::options::parse::Addr,
        allow_remote: bool,
        remote: Option<String>,
    },
    /// `--worker`: tasks taken from `remote`'s `base` branch (default: its default branch).
    Worker {
        config: Box<RunConfig>,
        remote: String,
        base: Option<String>,
    },
    /// A loop in its own worktree `name`; `merge`: merged into the base when it completes.
    RunInWorktree {
        config: Box<RunConfig>,
        name: String,
        merge: bool,
    },
}

/// One step of `--rotation`, or one agent of `--fallback`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RotationStep {
    pub(crate) agent: AgentSpec,
    pub(crate) model: Option<String>,
}

impl RotationStep {
    /// `Codex`, or `Codex (gpt-5)` with a model of its own.
    pub(crate) fn label(&self) -> String {
        match &self.model {
            Some(model) => format!("{} ({model})", self.agent.display_name()),
            None => self.agent.display_name().to_owned(),
        }
    }
}

/// A loop's resolved settings.
#[derive(Debug, Clone)]
pub(crate) struct RunConfig {
    pub(crate) prompt: String,
    pub(crate) prompt_file: Option<PathBuf>,
    /// The agent named by `options.agent`, resolved.
    pub(crate) agent: AgentSpec,
    /// Agents and models to cycle through, one per iteration (empty: `agent` and `model` always).
    pub(crate) rotation: Vec<RotationStep>,
    /// Agents that take an iteration when the current one is out of quota.
    pub(crate) fallback: Vec<RotationStep>,
    pub(crate) options: LoopOptions,
    /// The custom agents the config files define (a task may name one).
    pub(crate) custom_agents: BTreeMap<String, CustomAgentDef>,
    /// `--json`: stdout carries the run's events as JSON lines, and nothing else.
    pub(crate) json: bool,
    /// `--replan`: plan the prompt again over a list that has tasks (the done ones kept).
    pub(crate) replan: bool,
    /// `--refine`: restate the prompt as a spec first; `yes`: take it without asking.
    pub(crate) refine: bool,
    pub(crate) yes: bool,
}

/// Which iteration `--log` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LogTarget {
    /// The run's last iteration (of any of its task loops).
    Last,
    /// Iteration N of the loop.
    Iteration(u32),
    /// A task loop's last iteration (`None`) or its N-th, in a run of several loops.
    Task(String, Option<u32>),
}

impl LogTarget {
    /// `last`, `N`, `TASK` or `TASK/N`.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text == "last" {
            return Ok(Self::Last);
        }
        if let Ok(number) = text.parse::<u32>() {
            return Ok(Self::Iteration(number));
        }
        let (task, number) = match text.rsplit_once('/') {
            Some((task, number)) => {
                let number = number.parse::<u32>().map_err(|_| {
                    format!("--log {text}: after the task's id and `/` comes an iteration number (1, 2, …), not '{number}'")
                })?;
                (task, Some(number))
            }
            None => (text, None),
        };
        if task.is_empty() || task.chars().any(char::is_whitespace) {
            return Err(format!(
                "--log needs an iteration number (1, 2, …), a task's id or TASK/N, not '{text}'; see ralph --status"
            ));
        }
        Ok(Self::Task(task.to_owned(), number))
    }
}

/// Where the prompt text can come from besides the command line.
pub(crate) trait PromptInput {
    /// Piped stdin, if any; `has_words` says whether prompt words were also given.
    fn piped_stdin(&mut self, has_words: bool) -> Result<Option<String>, Error>;
}

impl Config {
    /// Validates the command line. `input` is only consulted when a loop is to run.
    pub(crate) fn from_cli(
        cli: Cli,
        cwd: PathBuf,
        input: &mut dyn PromptInput,
        settings: Settings,
    ) -> Result<Self, Error> {
        // No `..`: a new flag must fail to compile until it is handled here.
        let Cli {
            prompt,
            agent_args,
            commands,
            json,
            help: _,
            version: _,
            prompt_file,
            options,
        } = cli;
        let mut cli_layer = options.layer;
        if !agent_args.is_empty() {
            cli_layer.set("agent_args", Raw::List(agent_args), Source::CommandLine);
        }
        let tasks_flag = matches!(cli_layer.get("tasks"), Some((Raw::Bool(true), _)));
        let serve_flag = cli_layer.get("serve").is_some();
        let (resume, dry_run, plan) = (commands.resume, commands.dry_run, commands.plan);
        let (worktree, merge) = (commands.worktree.clone(), commands.merge);
        let worker = commands.worker_place(serve_flag)?;
        // `--serve` with nothing to run serves what runs here (with `--remote`, its fleet too).
        let serving = (serve_flag && worker.is_none() && !(plan || dry_run || resume))
            .then(|| commands.remote.clone())
            .filter(|_| prompt.is_empty() && prompt_file.is_none());
        let replan_flag = commands.replan;
        let (refine, yes) = (commands.refine, commands.yes);
        if replan_flag && (resume || worker.is_some()) {
            return Err(usage(
                "--replan plans a new spec over this clone's task list; it does not go with --resume or --worker",
            ));
        }
        let task_properties = task_properties(&cli_layer, commands.success.clone());
        let mode = match commands.mode(tasks_flag, task_properties)? {
            Some(mode) => mode,
            None if resume => {
                let new_prompt = !prompt.is_empty() || prompt_file.is_some();
                resume_mode(new_prompt, worktree, merge)?
            }
            None if serving.is_some() => {
                serve_mode(&settings.stack(&[&cli_layer]), serving.clone().flatten())?
            }
            None => {
                let stack = settings.stack(&[&cli_layer]);
                let sources = (prompt, prompt_file);
                let (text, file) =
                    run_prompt(sources, (worker.is_some(), plan), &stack, &cwd, input)?;
                let mut run = Box::new(RunConfig::resolve(text, file, &stack, &settings.agents)?);
                run.replan = replan_flag;
                (run.refine, run.yes) = (refine, yes);
                match worker {
                    _ if plan => plan_mode(run, dry_run || worker.is_some())?,
                    Some((remote, base)) => {
                        worker_mode(run, (remote, base), (worktree.is_some(), dry_run))?
                    }
                    None => loop_mode(run, dry_run, worktree, merge)?,
                }
            }
        };
        let color = LoopOptions::resolve(&settings.stack(&[&cli_layer]))
            .map(|options| options.color)
            .unwrap_or_default();
        Ok(Self {
            ralph_dir: RalphDir::new(&cwd),
            cwd,
            mode,
            cli_layer,
            color,
            settings,
            json,
        })
    }
}

/// `--worker`'s `--remote` and `--base`, as given.
type WorkerPlace = (Option<String>, Option<String>);

impl CommandArgs {
    /// `--worker`'s remote and base, when it is given; `--base` and `--remote` without it are
    /// refused (`--remote` goes with `--status` and `--serve` too).
    fn worker_place(&self, serve: bool) -> Result<Option<WorkerPlace>, Error> {
        if self.worker {
            return Ok(Some((self.remote.clone(), self.base.clone())));
        }
        if self.base.is_some() {
            return Err(usage(
                "--base names the branch a --worker takes tasks from; add --worker",
            ));
        }
        if self.remote.is_some() && !self.status && !serve && self.answer.is_none() {
            return Err(usage(
                "--remote goes with --worker (take tasks from it), --status or --serve (show its claims), or --answer",
            ));
        }
        Ok(None)
    }

    /// The command to run, first by precedence; `None` when a loop is to run (or resume).
    /// `tasks_flag`: `--tasks` was given (`--status --tasks` shows the task list).
    fn mode(
        self,
        tasks_flag: bool,
        properties: Vec<(&'static str, String)>,
    ) -> Result<Option<Mode>, Error> {
        Ok(Some(if let Some(shell) = self.completions {
            Mode::Completions(shell)
        } else if self.man {
            Mode::Man
        } else if self.init {
            Mode::Init
        } else if self.config {
            Mode::ShowConfig
        } else if self.doctor {
            Mode::Doctor
        } else if self.mcp {
            Mode::Mcp
        } else if self.status {
            Mode::Status {
                tasks: tasks_flag,
                remote: self.remote,
            }
        } else if self.watch {
            Mode::Watch
        } else if let Some(file) = self.report {
            Mode::Report(file)
        } else if let Some(mut answer) = self.answer {
            let text = answer.pop().unwrap_or_default();
            Mode::Answer {
                id: answer.pop().unwrap_or_default(),
                text,
                remote: self.remote,
            }
        } else if let Some(which) = self.log {
            Mode::Log {
                which: LogTarget::parse(&which).map_err(usage)?,
                raw: self.raw,
                follow: self.follow,
            }
        } else if let Some(text) = self.add_context {
            if text.trim().is_empty() {
                return Err(usage(
                    "--add-context needs some text: ralph --add-context \"your hint\"",
                ));
            }
            Mode::AddContext {
                text,
                task: self.task,
            }
        } else if self.clear_context {
            Mode::ClearContext
        } else if self.list_tasks {
            Mode::ListTasks
        } else if self.export.is_some() {
            Mode::Export
        } else if let Some(description) = self.add_task {
            Mode::AddTask {
                description,
                id: self.id,
                blocked_by: self.blocked_by,
                properties,
            }
        } else if let Some(number) = self.remove_task {
            let number = number.trim().parse::<usize>().map_err(|_| {
                usage(format!("--remove-task needs a task number (1, 2, …), not '{number}'; see ralph --list-tasks"))
            })?;
            Mode::RemoveTask(number)
        } else if !self.import.is_empty() {
            Mode::Import(self.import)
        } else if self.reset {
            Mode::Reset
        } else {
            return Ok(None);
        }))
    }
}

/// The goal a `--worker` gives its agents when none is given: each works on its task.
pub(crate) const WORKER_PROMPT: &str = "Complete the tasks of this project's task list.";

/// The options given with `--add-task` that become the task's own properties.
fn task_properties(cli: &Layer, success: Option<String>) -> Vec<(&'static str, String)> {
    use crate::storage::tasks;
    let mut properties = Vec::new();
    for (option, property) in [
        ("agent", tasks::AGENT),
        ("model", tasks::MODEL),
        ("max_iterations", tasks::MAX_ITERATIONS),
        ("completion_promise", tasks::PROMISE),
        ("iteration_timeout", tasks::TIMEOUT),
        ("verify", tasks::VERIFY),
    ] {
        match cli.get(option) {
            Some((Raw::Text(value), _)) => properties.push((property, value.clone())),
            Some((Raw::List(values), _)) => {
                properties.extend(values.last().map(|value| (property, value.clone())));
            }
            _ => {}
        }
    }
    properties.extend(success.map(|text| (tasks::SUCCESS, text)));
    properties
}

/// The custom agents, with `--agent acp`'s when `--acp-command` names one.
fn with_acp_command(
    agents: &BTreeMap<String, CustomAgentDef>,
    command: Option<&str>,
) -> Result<BTreeMap<String, CustomAgentDef>, Error> {
    let mut agents = agents.clone();
    if let Some(command) = command {
        let words = crate::agents::command_words(command)
            .map_err(|why| usage(format!("--acp-command: {why}; give the command that starts the ACP agent, e.g. --acp-command \"gemini --acp\"")))?;
        let definition = crate::agents::presets::acp_definition(crate::agents::ACP_AGENT, words);
        agents.insert(crate::agents::ACP_AGENT.to_owned(), definition);
    }
    Ok(agents)
}

impl RunConfig {
    /// Resolves the options from `layers` (highest first) over the defaults, and validates.
    pub(crate) fn resolve(
        prompt: String,
        prompt_file: Option<PathBuf>,
        layers: &[&Layer],
        agents: &BTreeMap<String, CustomAgentDef>,
    ) -> Result<Self, Error> {
        let mut options = LoopOptions::resolve(layers).map_err(usage)?;
        // Parallel tasks are tasks.
        options.tasks |= options.parallel.max > 0;
        let agents = &with_acp_command(agents, options.acp_command.as_deref())?;
        let agent = AgentSpec::resolve(&options.agent.0, agents).map_err(usage)?;
        let steps = |list: &[crate::options::parse::RotationEntry]| {
            list.iter()
                .map(|entry| {
                    Ok(RotationStep {
                        agent: AgentSpec::resolve(&entry.agent, agents).map_err(usage)?,
                        model: entry.model.clone(),
                    })
                })
                .collect::<Result<Vec<_>, Error>>()
        };
        let rotation = steps(&options.rotation.0)?;
        let fallback = steps(&options.fallback.0)?;
        let config = Self {
            prompt,
            prompt_file,
            agent,
            rotation,
            fallback,
            options,
            custom_agents: agents.clone(),
            json: false,
            replan: false,
            refine: false,
            yes: false,
        };
        config.validate()?;
        Ok(config)
    }
}

/// A duration in whole milliseconds (saturating), as the state and history store them.
pub(crate) fn millis(duration: std::time::Duration) -> u64 {
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
) -> Result<(String, Option<PathBuf>), Error> {
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

/// The prompt of a run, from its `sources` (words, a prompt file) and stdin: a worker given none
/// has the workers' own; a run of the task list given none, the prompt its plan was made from.
fn run_prompt(
    (words, prompt_file): (Vec<String>, Option<PathBuf>),
    (worker, plan): (bool, bool),
    stack: &[&crate::options::Layer],
    cwd: &Path,
    input: &mut dyn PromptInput,
) -> Result<(String, Option<PathBuf>), Error> {
    let given = !words.is_empty() || prompt_file.is_some();
    if worker && !given {
        // A worker's prompt is its task; the words, if given, are the shared goal.
        return Ok((WORKER_PROMPT.to_owned(), None));
    }
    match resolve_prompt(words, prompt_file, cwd, input) {
        Err(err) if !given && !plan => planned_prompt(stack, cwd).ok_or(err),
        resolved => resolved,
    }
}

/// A run of the task list (`--parallel`, `--tasks`) given no prompt: the prompt its plan was
/// made from (`.ralph/prompt.md`, written by `--plan` and a run that planned first), if there is
/// one, as if it were given with `--prompt-file`.
fn planned_prompt(
    stack: &[&crate::options::Layer],
    cwd: &Path,
) -> Option<(String, Option<PathBuf>)> {
    let options = LoopOptions::resolve(stack).ok()?;
    if options.parallel.max == 0 && !options.tasks {
        return None;
    }
    let path = PathBuf::from(crate::storage::RALPH_DIR).join(crate::storage::PLANNED_PROMPT_FILE);
    let text = read_prompt_file(&path, cwd).ok()?;
    (!text.trim().is_empty()).then_some((text, Some(path)))
}

/// A prompt with a NUL byte cannot be passed to an agent: refuse it before anything starts.
fn refuse_nul(text: &str, source: &str) -> Result<(), Error> {
    match text.find('\0') {
        Some(at) => Err(fail(format!(
            "{source} contains a NUL byte (at byte {at}), which no agent can be given; remove it and run ralph again"
        ))),
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

fn read_prompt_file(path: &Path, cwd: &Path) -> Result<String, Error> {
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

impl RunConfig {
    /// A task loop's settings (of a `--parallel` run, a `--worker`, and as `--dry-run` shows
    /// them): the run's, for one task of the list, with the task's own iteration limit.
    pub(crate) fn for_task(&self, task: &crate::storage::tasks::Task) -> Self {
        let mut config = self.clone();
        config.options.tasks = true;
        config.options.parallel = crate::options::parse::Parallel::default();
        if let Some(limit) = task.attempt_limit() {
            config.options.max_iterations = limit;
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;
    use std::time::Duration;

    struct NoStdin;
    impl PromptInput for NoStdin {
        fn piped_stdin(&mut self, _: bool) -> Result<Option<String>, Error> {
            Ok(None)
        }
    }

    struct Piped(&'static str);
    impl PromptInput for Piped {
        fn piped_stdin(&mut self, _: bool) -> Result<Option<String>, Error> {
            Ok(Some(self.0.to_owned()))
        }
    }

    fn config_with(args: &[&str], input: &mut dyn PromptInput) -> anyhow::Result<Config> {
        let cli = Cli::try_parse_from(std::iter::once("ralph").chain(args.iter().copied()))?;
        Ok(Config::from_cli(
            cli,
            std::env::temp_dir(),
            input,
            Settings::default(),
        )?)
    }

    fn run_config(args: &[&str]) -> RunConfig {
        match config_with(args, &mut NoStdin).unwrap().mode {
            Mode::Run(config) => *config,
            other => panic!("expected a run, got {other:?}"),
        }
    }

    /// Every flag of a loop, at once.
    const EVERY_FLAG: &[&str] = &[
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

    /// Every flag at once: a flag whose clap definition and field type disagree would panic here.
    #[test]
    fn every_flag_parses() {
        let args = EVERY_FLAG.iter().copied();
        let cli = Cli::try_parse_from(std::iter::once("ralph").chain(args)).unwrap();
        let error = Config::from_cli(cli, std::env::temp_dir(), &mut NoStdin, Settings::default());
        // /dev/null is not a regular file: the prompt file check runs after every flag was read.
        assert!(error.unwrap_err().to_string().contains("not a file"));
    }

    #[test]
    fn every_command_parses() {
        for command in [
            &["--status", "--json"][..],
            &["--list-tasks"],
            &["--add-context", "x"],
            &["--add-context", "x", "--task", "a"],
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
        assert_eq!(config.options.agent.0, "opencode");
        assert_eq!(
            (config.options.min_iterations, config.options.max_iterations),
            (1, 0)
        );
        assert_eq!(config.options.completion_promise, "COMPLETE");
        assert_eq!(config.options.task_promise, "READY_FOR_NEXT_TASK");
        assert!(config.options.stream && config.options.allow_all && config.options.commit);
        assert!(
            !config.options.tasks && !config.options.verbose_tools && !config.options.no_plugins
        );
        assert_eq!(config.options.pause, Duration::from_secs(1));
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
        assert!(!config.options.stream && !config.options.commit && !config.options.allow_all);
        assert_eq!(config.options.agent_args, ["--flag", "v"]);
        let config = run_config(&["x", "--no-commit", "--commit"]);
        assert!(config.options.commit, "the last of a pair wins");
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
    fn settings_that_would_only_fail_later_are_refused_at_start() {
        let refused = |args: &[&str]| {
            config_with(args, &mut NoStdin)
                .map(drop)
                .unwrap_err()
                .to_string()
        };
        assert!(refused(&["x", "--notify", "notaurl"]).contains("'notaurl' is not an http://"));
        assert!(
            refused(&["x", "--notify", "https://ok.example", "--notify", "ftp://x"])
                .contains("'ftp://x'")
        );
        assert!(refused(&["x", "--keep-logs", "0"]).contains("at least 1"));
        assert!(
            refused(&["x", "--agent", "codex", "--fallback", "claude-code,codex"])
                .contains("--fallback codex is the --agent itself")
        );
        for fine in [
            &[
                "x",
                "--notify",
                "http://127.0.0.1:9/hook",
                "--keep-logs",
                "1",
            ][..],
            &[
                "x",
                "--agent",
                "codex",
                "--model",
                "a",
                "--fallback",
                "codex:b",
            ],
            &["x", "--rotation", "codex,opencode", "--fallback", "codex"],
            &["x", "--tasks", "--fallback", "opencode"],
        ] {
            assert!(config_with(fine, &mut NoStdin).is_ok(), "{fine:?}");
        }
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
