//! What an iteration works on: the agent (or the rotation's step), the task, the prompt.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::agents::{self, Agent, AgentKind, AgentSpec};
use crate::config::{RotationStep, RunConfig};
use crate::event::Notice;
use crate::prompt::{self, PromptInput, TaskLoop, TasksView};
use crate::storage::tasks::{self, TaskList, TaskStatus};
use crate::storage::{self, OPENCODE_CONFIG_FILE, RalphDir};

use super::decision::{self, Stop};

/// One agent (and model) the loop can run, resolved.
pub(crate) struct Step {
    pub(crate) spec: AgentSpec,
    pub(crate) agent: Box<dyn Agent>,
    pub(crate) binary: PathBuf,
    pub(super) model: Option<String>,
    /// Codex run with its own sandbox, where the `bwrap` on `PATH` is too old for it: the one
    /// Codex ships goes first on its `PATH` (see [`agents::CodexBwrap`]).
    pub(crate) codex_bwrap: Option<agents::CodexBwrap>,
}

/// The agents and models of a loop, in order: the rotation, or the one agent.
pub(crate) fn agent_plan(config: &RunConfig) -> Vec<(AgentSpec, Option<String>)> {
    let model = &config.options.model;
    if config.rotation.is_empty() {
        vec![(config.agent.clone(), model.clone())]
    } else {
        config
            .rotation
            .iter()
            .map(|step| with_model(step, model))
            .collect()
    }
}

/// A rotation or fallback entry's agent and model: its own model, else `--model`.
fn with_model(step: &RotationStep, model: &Option<String>) -> (AgentSpec, Option<String>) {
    (
        step.agent.clone(),
        step.model.clone().or_else(|| model.clone()),
    )
}

/// The agents of a loop: its steps (the rotation, or the one agent) and its `--fallback` agents.
pub(crate) struct Steps {
    pub(super) rotation: Vec<Rc<Step>>,
    pub(super) fallback: Vec<Rc<Step>>,
}

impl Steps {
    /// Every step, the rotation's then the fallbacks'.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Step> {
        self.rotation
            .iter()
            .chain(&self.fallback)
            .map(|step| &**step)
    }
}

/// The agent's command line for `prompt` with `step` (its OpenCode configuration written to
/// `dir` when it needs one); `usage_file`: where the agent writes its usage report, if it does.
pub(super) fn agent_command(
    config: &RunConfig,
    (dir, cwd): (&RalphDir, &Path),
    step: &Step,
    prompt: &str,
    (usage_file, tools): (Option<&Path>, Option<&agents::ToolServer>),
) -> anyhow::Result<agents::AgentCommand> {
    let options = &config.options;
    let opencode_config = write_opencode_config(config, dir, &step.spec, (cwd, tools))?;
    let tools_file = match step.agent.config_home() {
        Some(home) => write_tools_home(dir, &step.spec, home, tools)?,
        None => write_cline_settings(dir, &step.spec, tools)?,
    };
    let mut command = step.agent.command(&agents::CommandRequest {
        binary: &step.binary,
        prompt,
        model: step.model.as_deref(),
        allow_all: options.allow_all,
        extra_args: &options.agent_args,
        opencode_config: opencode_config.as_deref(),
        format: step.spec.format(options.output_format),
        usage_file,
        sandboxed: options.sandbox().backend != crate::sandbox::Backend::None,
        tools,
        tools_file: tools_file.as_deref(),
    });
    if let Some(agents::CodexBwrap::Shipped { folder, .. }) = &step.codex_bwrap {
        let mut path = folder.clone().into_os_string();
        if let Some(rest) = std::env::var_os("PATH") {
            path.push(":");
            path.push(rest);
        }
        command.env.push(("PATH".to_owned(), path));
    }
    Ok(command)
}

/// How the agent's output is shown, by `step`'s format.
pub(super) fn display_options(
    config: &RunConfig,
    knobs: &super::Knobs,
    step: &Step,
) -> crate::transcript::DisplayOptions {
    let options = &config.options;
    crate::transcript::DisplayOptions {
        stream: options.stream,
        verbose_tools: options.verbose_tools,
        heartbeat: knobs.heartbeat,
        tool_summary: knobs.tool_summary,
        format: step.spec.format(options.output_format),
    }
}

/// The step of `spec` with `model`: its executable found (from `cwd`, or its variable); for
/// Codex run with its own sandbox, a `bwrap` it can use (else why not, and what to do).
pub(super) fn step(
    config: &RunConfig,
    spec: AgentSpec,
    model: Option<String>,
    cwd: &Path,
) -> Result<Rc<Step>, String> {
    let binary = spec.find_binary(&|name: &str| std::env::var_os(name), cwd)?;
    let own_sandbox = config.options.allow_all
        && config.options.sandbox().backend == crate::sandbox::Backend::None;
    let codex_bwrap = if spec.kind() == Some(agents::AgentKind::Codex) && own_sandbox {
        match agents::codex_bwrap_for(&binary, std::env::var_os("PATH").as_deref()) {
            agents::CodexBwrap::Fine => None,
            agents::CodexBwrap::Unusable { system, version } => {
                return Err(format!(
                    "Codex's own sandbox (--sandbox workspace-write) cannot use {} (bubblewrap {version}; it needs 0.9 or newer), and no bwrap that Codex ships was found beside {}: every file write of the agent would fail. Install bubblewrap 0.9 or newer first on PATH, or run ralph with --sandbox (Codex then runs inside ralph's)",
                    system.display(),
                    binary.display()
                ));
            }
            shipped => Some(shipped),
        }
    } else {
        None
    };
    // A file ralph cannot add its tools to stops the run before any agent starts.
    if let Some(home) = spec
        .agent()
        .config_home()
        .filter(|_| config.options.agent_tools)
    {
        users_own(&spec, home)?;
    }
    Ok(Rc::new(Step {
        agent: spec.agent(),
        spec,
        binary,
        model,
        codex_bwrap,
    }))
}

/// The steps of a loop; every executable is found first, so a missing one stops nothing midway.
pub(crate) fn steps(config: &RunConfig, cwd: &Path) -> Result<Steps, String> {
    let resolve = |(spec, model): (AgentSpec, Option<String>)| step(config, spec, model, cwd);
    let fallback = (config.fallback.iter()).map(|step| with_model(step, &config.options.model));
    Ok(Steps {
        rotation: agent_plan(config)
            .into_iter()
            .map(resolve)
            .collect::<Result<_, String>>()?,
        fallback: fallback.map(resolve).collect::<Result<_, String>>()?,
    })
}

/// The agents that may run an iteration whose own step is `step`, in order: the step, then
/// the fallback agents (without the step's own agent and model).
pub(super) fn chain(step: Rc<Step>, fallback: &[Rc<Step>]) -> Vec<Rc<Step>> {
    let mut chain = vec![step];
    for candidate in fallback {
        if chain.iter().all(|step| step.key() != candidate.key()) {
            chain.push(Rc::clone(candidate));
        }
    }
    chain
}

impl Step {
    /// `agent` or `agent:model`: what tells two steps apart for `--fallback`.
    pub(super) fn key(&self) -> String {
        match &self.model {
            Some(model) => format!("{}:{model}", self.spec.id()),
            None => self.spec.id().to_owned(),
        }
    }
}

/// The step of an iteration: the rotation's, or the one agent.
pub(super) fn step_for(steps: &[Rc<Step>], iteration: u32) -> Rc<Step> {
    let index = usize::try_from(iteration.saturating_sub(1)).unwrap_or(0) % steps.len().max(1);
    Rc::clone(&steps[index.min(steps.len().saturating_sub(1))])
}

/// The task an iteration works on, with the properties that change how it runs.
#[derive(Clone, Debug)]
pub(super) struct Focus {
    pub(super) key: String,
    pub(super) text: String,
    pub(super) verify: Option<String>,
    pub(super) agent: Option<String>,
    pub(super) model: Option<String>,
    pub(super) promise: Option<String>,
    pub(super) timeout: Option<std::time::Duration>,
    /// The task's own protected paths (`protect:`) as the list says now (what it may change is
    /// read once, at the loop's start: `protected::Sealed`).
    pub(super) protect: Vec<String>,
}

impl Focus {
    fn of(task: &tasks::Task) -> Self {
        let owned = |value: Option<&str>| value.map(str::to_owned);
        Self {
            key: task.key().to_owned(),
            text: task.text.clone(),
            verify: owned(task.property(tasks::VERIFY)),
            agent: owned(task.agent()),
            model: owned(task.model()),
            promise: owned(task.promise()),
            timeout: task.timeout(),
            protect: crate::protect::list(task.property(tasks::PROTECT)),
        }
    }
}

/// The step of an iteration on `focus`: the loop's, unless the task names its own agent or model.
pub(super) fn step_with(
    config: &RunConfig,
    cwd: &Path,
    step: Rc<Step>,
    focus: Option<&Focus>,
) -> anyhow::Result<Rc<Step>> {
    let Some(focus) = focus.filter(|f| f.agent.is_some() || f.model.is_some()) else {
        return Ok(step);
    };
    let spec = match &focus.agent {
        Some(name) => AgentSpec::resolve(name, &config.custom_agents)
            .map_err(|why| anyhow::anyhow!("task \"{}\": {why}", focus.text))?,
        None => step.spec.clone(),
    };
    let model = focus.model.clone().or_else(|| step.model.clone());
    self::step(config, spec, model, cwd)
        .map_err(|why| anyhow::anyhow!("task \"{}\": {why}", focus.text))
}

/// The task file as an iteration starts: read once, under the task file's lock.
pub(super) struct TaskPlan {
    pub(super) focus: Option<Focus>,
    /// The file's text for the prompt (`Err`: it cannot be read).
    pub(super) content: Result<Option<String>, String>,
}

/// Reads the task file once: the stop when no open task can start; otherwise tasks past their
/// `max_attempts` are marked `[!]` and the task to work on is chosen.
pub(super) fn tasks(
    dir: &RalphDir,
    attempts: &BTreeMap<String, u32>,
    sink: &super::sink::Sink,
) -> anyhow::Result<Result<TaskPlan, Stop>> {
    let chosen = tasks::edit(dir, |current| {
        let Some(content) = current else {
            return (None, (Vec::new(), Ok((None, None))));
        };
        let list = TaskList::parse(&String::from_utf8_lossy(content));
        if let Some(stop) = decision::tasks_blocked(&list) {
            return (None, (Vec::new(), Err(stop)));
        }
        let (updated, focus, failed) = mark_and_choose(content, attempts);
        let text = String::from_utf8_lossy(&updated).into_owned();
        // Marking the last startable tasks failed can leave nothing to start.
        let blocked = decision::tasks_blocked(&TaskList::parse(&text));
        let plan = match blocked {
            Some(stop) if focus.is_none() => Err(stop),
            _ => Ok((focus, Some(text))),
        };
        (Some(updated), (failed, plan))
    });
    let (failed, plan) = match chosen {
        Ok(chosen) => chosen,
        Err(err) => {
            let why = format!("{err:#}");
            sink.notice(Notice::TasksFileUnreadable {
                path: &dir.tasks(),
                reason: &why,
            });
            return Ok(Ok(TaskPlan {
                focus: None,
                content: Err(why),
            }));
        }
    };
    for (task, attempts) in failed {
        sink.notice(Notice::TaskFailed {
            task: &task,
            attempts,
        });
    }
    Ok(plan.map(|(focus, content)| TaskPlan {
        focus,
        content: Ok(content),
    }))
}

/// A task loop's task, from the task file of its worktree (whatever its box says there).
pub(super) fn task_of_loop(dir: &RalphDir, task_id: &str) -> anyhow::Result<TaskPlan> {
    let content = storage::read_text(&dir.tasks())?;
    let list = TaskList::parse(content.as_deref().unwrap_or_default());
    let focus = tasks::task_ids(&list)
        .iter()
        .position(|id| id == task_id)
        .map(|index| Focus::of(&list.tasks[index]));
    anyhow::ensure!(
        focus.is_some(),
        "task {task_id} is not in {}",
        dir.tasks().display()
    );
    Ok(TaskPlan {
        focus,
        content: Ok(content),
    })
}

/// Marks the tasks past their attempt limit (`max_attempts`, `max_iterations`, `ralph: false`)
/// failed, then chooses the task to work on.
fn mark_and_choose(
    content: &[u8],
    attempts: &BTreeMap<String, u32>,
) -> (Vec<u8>, Option<Focus>, Vec<(String, u32)>) {
    let mut content = content.to_vec();
    let mut failed = Vec::new();
    loop {
        let list = TaskList::parse(&String::from_utf8_lossy(&content));
        let Some(task) = list.focus() else {
            return (content, None, failed);
        };
        let used = attempts.get(task.key()).copied().unwrap_or(0);
        if let Some(max) = task.attempt_limit()
            && used >= max
        {
            let note = format!("failed after {used} attempts (limit: {max}), marked by ralph");
            if let Some(updated) =
                tasks::set_status(&content, task.number, TaskStatus::Failed, Some(&note))
            {
                failed.push((task.text.clone(), used));
                content = updated;
                continue;
            }
        }
        return (content, Some(Focus::of(task)), failed);
    }
}

/// Marks a task `[/]` again after its verification failed.
pub(super) fn reopen_task(dir: &RalphDir, focus: &Focus) -> anyhow::Result<()> {
    let reopened = |content: &[u8]| {
        let list = TaskList::parse(&String::from_utf8_lossy(content));
        let task = list.tasks.iter().find(|task| task.key() == focus.key)?;
        tasks::set_status(content, task.number, TaskStatus::InProgress, None)
    };
    tasks::edit(dir, |current| (current.and_then(reopened), ()))
}

/// The prompt of iteration `iteration` as `--dry-run` shows it (reads the task file). With
/// `task_loop`, the prompt of that task's loop, from the task file it would find in its worktree.
pub(crate) fn iteration_prompt(
    config: &RunConfig,
    dir: &RalphDir,
    iteration: u32,
    tools: bool,
    (context, feedback): (Option<&str>, &[String]),
    task_loop: Option<(TaskLoop<'_>, &str)>,
) -> String {
    if let Some((task_loop, content)) = task_loop {
        let content = Ok(Some(content.to_owned()));
        return prompt_for(
            config,
            (iteration, tools),
            context,
            feedback,
            (Some(&content), Some(task_loop)),
        );
    }
    // A file that cannot be read is said in the prompt itself.
    let content = (config.options.tasks)
        .then(|| storage::read_text(&dir.tasks()).map_err(|err| err.to_string()));
    prompt_for(
        config,
        (iteration, tools),
        context,
        feedback,
        (content.as_ref(), None),
    )
}

/// A task loop, as its prompt describes it.
pub(super) fn task_loop(task: &super::TaskLoop) -> TaskLoop<'_> {
    TaskLoop {
        id: &task.task_id,
        base: &task.base,
        alongside: &task.alongside,
    }
}

/// The prompt of an iteration, from the task file's content as read for it; a task loop's
/// (`--parallel`, `--worker`) is written for its one task.
pub(super) fn prompt_for(
    config: &RunConfig,
    (iteration, tools): (u32, bool),
    context: Option<&str>,
    feedback: &[String],
    (tasks, task_loop): (
        Option<&Result<Option<String>, String>>,
        Option<TaskLoop<'_>>,
    ),
) -> String {
    let list = match tasks {
        Some(Ok(Some(content))) => TaskList::parse(content),
        _ => TaskList::default(),
    };
    let view = tasks.map(|read| match read {
        Ok(Some(content)) => TasksView::Found {
            content,
            list: &list,
        },
        Ok(None) => TasksView::Missing,
        Err(_) => TasksView::Unreadable,
    });
    let o = &config.options;
    prompt::build(&PromptInput {
        iteration,
        min_iterations: o.min_iterations,
        max_iterations: o.max_iterations,
        completion_promise: &o.completion_promise,
        task_promise: &o.task_promise,
        abort_promise: o.abort_promise.as_deref(),
        task: &config.prompt,
        context,
        tasks: view,
        feedback,
        task_loop,
        ask_timeout: (o.agent_tools && tools).then_some(o.ask_timeout),
    })
}

/// The OpenCode configuration ralph generates for `--allow-all` / `--no-plugins`, if any.
pub(crate) fn opencode_config_for(
    config: &RunConfig,
    spec: &AgentSpec,
    (cwd, tools): (&Path, Option<&agents::ToolServer>),
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
    let options = &config.options;
    agents::opencode_config(&sources, (options.no_plugins, options.allow_all), tools)
}

/// Writes the OpenCode configuration for a step, and returns its absolute path.
/// Cline's MCP settings with ralph's tools (the user's own kept), written in `.ralph/` when the
/// agent is Cline and has them: the file's path.
fn write_cline_settings(
    dir: &RalphDir,
    spec: &AgentSpec,
    tools: Option<&agents::ToolServer>,
) -> anyhow::Result<Option<PathBuf>> {
    let Some(tools) = tools.filter(|_| spec.kind() == Some(AgentKind::Cline)) else {
        return Ok(None);
    };
    let own = agents::cline_own_mcp_settings(&|name| std::env::var_os(name));
    let own = own.and_then(|path| std::fs::read(path).ok());
    let own = own.and_then(|bytes| serde_json::from_slice(&bytes).ok());
    let path = dir.file(storage::CLINE_MCP_FILE);
    storage::write_json_if_changed(&path, &agents::cline_mcp_settings_with(tools, own))?;
    Ok(Some(std::path::absolute(&path)?))
}

/// The user's own file naming the MCP servers of an agent given its tools through a home of
/// ralph's (`None` when there is none), or why ralph cannot add its server to it.
pub(crate) fn users_own(
    spec: &AgentSpec,
    home: agents::ConfigHome,
) -> Result<Option<serde_json::Value>, String> {
    let Some(users) = home.users_folder(&|name| std::env::var_os(name)) else {
        return Ok(None);
    };
    storage::agent_home::read_own(&users.join(home.file)).map_err(|why| {
        format!(
            "cannot give {} ralph's tools: {why:#}; fix the file, or run with --no-agent-tools",
            spec.display_name()
        )
    })
}

/// For an agent given its tools through a home of ralph's ([`agents::ConfigHome`]):
/// `.ralph/agent-homes/<agent>/`, its config folder mirroring the user's, the file naming MCP
/// servers with ralph's added. The user's file must be JSON (comments allowed).
fn write_tools_home(
    dir: &RalphDir,
    spec: &AgentSpec,
    home: agents::ConfigHome,
    tools: Option<&agents::ToolServer>,
) -> anyhow::Result<Option<PathBuf>> {
    let Some(tools) = tools else {
        return Ok(None);
    };
    let ours = storage::agent_home::home_for(dir, spec.id());
    let folder = ours.join(home.folder);
    let users = home.users_folder(&|name| std::env::var_os(name));
    let own = users_own(spec, home).map_err(crate::error::fail)?;
    if let Some(users) = &users {
        storage::agent_home::mirror(users, &folder, home.file).map_err(|err| {
            crate::error::fail(format!(
                "cannot make {} a home of its own in {}: {err}",
                spec.display_name(),
                ours.display()
            ))
        })?;
    }
    std::fs::create_dir_all(&folder)?;
    storage::write_json_if_changed(&folder.join(home.file), &(home.with_tools)(tools, own))?;
    Ok(Some(ours))
}

pub(super) fn write_opencode_config(
    config: &RunConfig,
    dir: &RalphDir,
    spec: &AgentSpec,
    (cwd, tools): (&Path, Option<&agents::ToolServer>),
) -> anyhow::Result<Option<PathBuf>> {
    let Some(value) = opencode_config_for(config, spec, (cwd, tools)) else {
        return Ok(None);
    };
    let path = dir.file(OPENCODE_CONFIG_FILE);
    storage::write_json_if_changed(&path, &value)?;
    Ok(Some(std::path::absolute(&path)?))
}
