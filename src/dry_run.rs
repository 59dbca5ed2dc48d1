//! `--dry-run`: what a run would do, shown without running it: the agent's command, where it
//! runs, its environment and the prompt of iteration 1; for `--parallel`, the tasks that would
//! start and the first task loop; for `--worker`, the task it would take. Starts nothing and
//! writes nothing.

use std::path::Path;

use crate::agents::{AgentSpec, CommandRequest, OPENCODE_CONFIG_ENV};
use crate::config::{RotationStep, RunConfig};
use crate::exit::ExitStatus;
use crate::git::Repo;
use crate::output;
use crate::prompt::TaskLoop;
use crate::storage::tasks::{self, Task, TaskList};
use crate::storage::{self, RalphDir};

/// `--dry-run`'s line naming the `--fallback` agents, if any.
fn fallback_line(config: &RunConfig) -> Option<String> {
    if config.fallback.is_empty() {
        return None;
    }
    let names: Vec<String> = config.fallback.iter().map(RotationStep::label).collect();
    Some(format!(
        "Fallback:     {} (when the agent is out of quota for over {})",
        names.join(", "),
        output::format::long_duration(config.options.fallback_after)
    ))
}

/// `--dry-run`: the command, environment and prompt of iteration 1; with `--parallel`, the tasks
/// that would start and the first one's loop. Starts nothing and writes nothing.
pub(crate) fn dry_run(config: &RunConfig, dir: &RalphDir, cwd: &Path) -> ExitStatus {
    let mut lines = dry_run_heading();
    if let Some(planning) = crate::run::planning_preview(config, cwd, dir) {
        if config.options.parallel.max > 0 {
            base_of(cwd);
        }
        lines.extend(planning_lines(planning));
    } else if config.options.parallel.max > 0 {
        lines.extend(parallel_lines(config, dir, cwd));
    } else {
        let context = crate::storage::context::pending(&dir.context())
            .ok()
            .flatten()
            .map(|pending| pending.text());
        let tools = takes_tools(config, None);
        let prompt =
            crate::run::iteration_prompt(config, dir, 1, tools, (context.as_deref(), &[]), None);
        lines.extend(loop_lines(
            config,
            None,
            (cwd, cwd, dir),
            &prompt,
            "of iteration 1",
        ));
    }
    output::say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
    ExitStatus::Success
}

/// `--dry-run --worker`: where the worker would take tasks from, the first task it would take
/// (from the base as last fetched: nothing is fetched), and that task's loop.
pub(crate) fn worker_dry_run(
    config: &RunConfig,
    dir: &RalphDir,
    cwd: &Path,
    (remote, base): (&str, Option<&str>),
) -> ExitStatus {
    let mut lines = dry_run_heading();
    lines.extend(worker_lines(config, dir, cwd, (remote, base)));
    output::say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
    ExitStatus::Success
}

/// The repository a `--parallel` run would merge into and its branch (`HEAD` when detached),
/// with a warning when the run would stop there.
fn base_of(cwd: &Path) -> (Option<Repo>, String) {
    let repo = Repo::discover(cwd);
    let base = repo.as_ref().and_then(Repo::current_branch);
    match (&repo, &base) {
        (None, _) => output::warn(&[
            "⚠️  --parallel runs every task in a git worktree, and this is not a git repository: the run would stop here (run `git init` and commit first)",
        ]),
        (Some(_), None) => output::warn(&[
            "⚠️  --parallel merges into the checked-out branch, and HEAD is detached: the run would stop here (check out a branch first)",
        ]),
        _ => {}
    }
    (repo, base.unwrap_or_else(|| "HEAD".to_owned()))
}

/// The planning step a run with a spec and no task list takes first: the planner, what comes of
/// its answer, and the planning prompt (the tasks depend on the answer: none is shown).
fn planning_lines(planning: Result<(String, String), String>) -> Vec<String> {
    let (planner, prompt) = match planning {
        Ok(planning) => planning,
        Err(why) => {
            output::warn(&[&format!("⚠️  the planning call could not run: {why}")]);
            return Vec::new();
        }
    };
    let mut lines = vec![
        format!(
            "Would plan:   the task list is empty, so {planner} is asked first for a task graph of the prompt (one call; a plan that is not right is sent back once), written to .ralph/ralph-tasks.md and committed as `Ralph: plan — N tasks`; then its tasks run"
        ),
        String::new(),
        "Planning prompt:".to_owned(),
    ];
    lines.extend(prompt.lines().map(str::to_owned));
    lines
}

fn dry_run_heading() -> Vec<String> {
    vec![
        "# Dry run: nothing is started and no file is written.".to_owned(),
        String::new(),
    ]
}

/// The tasks a `--parallel` run would start (the ready ones, in file order, up to N), where each
/// works and how it is merged, then the first task's loop.
fn parallel_lines(config: &RunConfig, dir: &RalphDir, cwd: &Path) -> Vec<String> {
    let (repo, base) = base_of(cwd);
    let content = storage::read_text(&dir.tasks()).unwrap_or_else(|err| {
        output::tasks_file_unreadable(&output::Voice::plain(), &dir.tasks(), &err.to_string());
        None
    });
    let content = content.unwrap_or_default();
    let list = TaskList::parse(&content);
    let parallel = config.options.parallel;
    let limit = parallel.max;
    let room = if parallel.auto {
        " (as many as memory and load allow)"
    } else {
        ""
    };
    let mut lines = vec![format!(
        "Parallel:     up to {limit} tasks at once{room}, each in its own git worktree on its own branch; when a task's loop completes, its branch is merged into {base} (the task marked [x] there) and the next ready task starts"
    )];
    if list.is_empty() {
        output::warn(&[&format!(
            "⚠️  there is no task in {}, so --parallel has nothing to run; add tasks with `ralph --add-task \"…\"` (or `--import FILE`)",
            dir.tasks().display()
        )]);
        return lines;
    }
    let ids = tasks::task_ids(&list);
    let open = |task: &Task| task.status.is_to_do();
    let ready: Vec<usize> = (0..list.tasks.len())
        .filter(|&at| open(&list.tasks[at]) && list.blockers(&list.tasks[at]).is_empty())
        .take(limit as usize)
        .collect();
    for (nth, &at) in ready.iter().enumerate() {
        let worktree = dir.worktree(&ids[at]);
        lines.push(format!(
            "{:<14}{} \"{}\" in {} on branch {}",
            if nth == 0 { "Would start:" } else { "" },
            ids[at],
            list.tasks[at].text,
            worktree.strip_prefix(cwd).unwrap_or(&worktree).display(),
            tasks::branch_of(&ids[at])
        ));
    }
    let later: Vec<String> = (list.tasks.iter().zip(&ids).enumerate())
        .filter(|(at, (task, _))| open(task) && !ready.contains(at))
        .map(|(_, (task, id))| match list.blockers(task) {
            blockers if blockers.is_empty() => id.clone(),
            blockers => format!("{id} (waits for {})", blockers.join(", ")),
        })
        .collect();
    if !later.is_empty() {
        lines.push(format!("Then:         {}", later.join(", ")));
    }
    let Some(&first) = ready.first() else {
        lines.push(
            "Would start:  nothing: no open task is ready (each waits for another one)".to_owned(),
        );
        return lines;
    };
    let prefix = repo.as_ref().map_or("", Repo::prefix);
    let id = &ids[first];
    // The tasks that would start with it run beside it.
    let alongside: Vec<String> = ready[1..].iter().map(|&at| ids[at].clone()).collect();
    let task_loop = TaskLoop {
        id,
        base: &base,
        alongside: &alongside,
    };
    lines.extend(task_loop_lines(
        config,
        (&list.tasks[first], task_loop, &content),
        cwd,
        &within(&dir.worktree(id), prefix),
    ));
    lines
}

/// Where a `--worker` would take tasks from and the first one it would take, then its loop.
fn worker_lines(
    config: &RunConfig,
    dir: &RalphDir,
    cwd: &Path,
    (remote, base): (&str, Option<&str>),
) -> Vec<String> {
    let stop = |why: String| {
        output::warn(&[&format!("⚠️  {why}: the worker would stop here")]);
        Vec::new()
    };
    let Some(repo) = Repo::discover(cwd) else {
        return stop("a worker runs in a clone of the shared repository, and this is not a git repository (git clone URL)".to_owned());
    };
    let base = match worker_base(&repo, remote, base) {
        Ok(base) => base,
        Err(why) => return stop(why),
    };
    let mut lines = vec![format!(
        "Worker:       takes the tasks of {remote}/{base} one at a time: it claims one on {remote}, works on it in its own git worktree on its own branch (pushed to {remote} after every commit), and when the task's loop completes merges the branch into {base} on {remote} (the task marked [x] there)"
    )];
    let path = format!(
        "{}{}/{}",
        repo.prefix(),
        storage::RALPH_DIR,
        storage::TASKS_FILE
    );
    let fetched = format!("refs/remotes/{remote}/{base}");
    let Some(content) = repo.file_at(&fetched, &path) else {
        lines.push(format!(
            "First task:   unknown: {remote}/{base} as last fetched has no {path} (the worker fetches first; `git fetch {remote}` to see it here)"
        ));
        return lines;
    };
    let content = String::from_utf8_lossy(&content).into_owned();
    let list = TaskList::parse(&content);
    let ids = tasks::task_ids(&list);
    let claimed: Vec<String> = repo
        .seen_claims(remote)
        .into_iter()
        .map(|seen| seen.id)
        .collect();
    let first = (list.tasks.iter().zip(&ids)).position(|(task, id)| {
        task.status.is_to_do() && list.blockers(task).is_empty() && !claimed.contains(id)
    });
    let Some(first) = first else {
        lines.push(format!(
            "First task:   none: no open task of {remote}/{base} (as last fetched) is ready and unclaimed"
        ));
        return lines;
    };
    let (id, task) = (&ids[first], &list.tasks[first]);
    let worktree = dir.worktree(id);
    lines.push(format!(
        "First task:   {id} \"{}\" in {} on branch {} (from {remote}/{base} as last fetched; a claim made since may make it another)",
        task.text,
        worktree.strip_prefix(cwd).unwrap_or(&worktree).display(),
        tasks::branch_of(id)
    ));
    // The tasks other workers hold run beside it.
    let task_loop = TaskLoop {
        id,
        base: &base,
        alongside: &claimed,
    };
    lines.extend(task_loop_lines(
        config,
        (task, task_loop, &content),
        cwd,
        &within(&worktree, repo.prefix()),
    ));
    lines
}

/// The branch a worker would take tasks from: `base`, else the remote's default; why not, when
/// the worker would stop there.
fn worker_base(repo: &Repo, remote: &str, base: Option<&str>) -> Result<String, String> {
    if !repo.has_remote(remote) {
        return Err(format!(
            "this clone has no git remote named '{remote}' (git remote add {remote} URL, or --remote NAME)"
        ));
    }
    match base {
        Some(base) => Ok(base.to_owned()),
        None => (repo.remote_heads((remote, None)))
            .and_then(|heads| {
                (heads.default).ok_or_else(|| format!("{remote} names no default branch"))
            })
            .map_err(|why| format!("cannot use the git remote '{remote}': {why}")),
    }
}

/// Where a loop runs in a worktree: the directory at `prefix` (where ralph runs, relative to
/// the repository's top) in it.
fn within(worktree: &Path, prefix: &str) -> std::path::PathBuf {
    if prefix.is_empty() {
        worktree.to_path_buf()
    } else {
        worktree.join(prefix)
    }
}

/// A task loop's first iteration (`--parallel`, `--worker`): the loop's settings with the
/// task's own iteration limit, its command in the task's worktree `run_in`, and its prompt.
/// `content`: the task file the loop finds in its worktree.
fn task_loop_lines(
    config: &RunConfig,
    (task, task_loop, content): (&Task, TaskLoop<'_>, &str),
    cwd: &Path,
    run_in: &Path,
) -> Vec<String> {
    let config = config.for_task(task);
    // A task loop has the worktree's own `.ralph/`: the base's pending context is not its own.
    let prompt = crate::run::iteration_prompt(
        &config,
        &RalphDir::new(run_in),
        1,
        takes_tools(&config, Some(task)),
        (None, &[]),
        Some((task_loop, content)),
    );
    let mut lines = vec![
        String::new(),
        format!("# The loop of task {}:", task_loop.id),
    ];
    lines.extend(loop_lines(
        &config,
        Some(task),
        (cwd, run_in, &RalphDir::new(run_in)),
        &prompt,
        &format!("of task {}, iteration 1", task_loop.id),
    ));
    lines
}

/// Whether the loop's first agent (a task's own) gets ralph's tools.
fn takes_tools(config: &RunConfig, task: Option<&Task>) -> bool {
    let steps = crate::run::agent_plan(config);
    let own = (task.and_then(Task::agent))
        .and_then(|name| AgentSpec::resolve(name, &config.custom_agents).ok());
    let spec = own.unwrap_or_else(|| steps[0].0.clone());
    config.options.agent_tools && spec.agent().takes_tools()
}

/// ralph's tools for the loop's first iteration, as its agent would get them (a file the agent
/// reads them from is not written).
fn dry_tools(
    config: &RunConfig,
    spec: &AgentSpec,
    (cwd, run_dir): (&Path, &RalphDir),
    task: Option<&Task>,
) -> Option<crate::agents::ToolServer> {
    if !config.options.agent_tools || !spec.agent().takes_tools() {
        return None;
    }
    let absolute = |path: &Path| std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let binding = crate::agents::ToolBinding {
        home: absolute(RalphDir::new(cwd).root()),
        dir: absolute(run_dir.root()),
        task: task.and_then(|task| task.id().map(str::to_owned)),
        iteration: 1,
        ask_timeout: config.options.ask_timeout,
    };
    binding.server()
}

/// What the file naming MCP servers in the home ralph would give the agent holds.
fn home_line(
    home: crate::agents::ConfigHome,
    tools: &crate::agents::ToolServer,
    (spec, path): (&AgentSpec, &Path),
) -> String {
    let own = crate::run::users_own(spec, home).ok().flatten();
    let written = serde_json::to_string(&(home.with_tools)(tools, own)).unwrap_or_default();
    format!(
        "              ({}/{}/{} would contain: {written}; the rest links to yours)",
        path.display(),
        home.folder,
        home.file
    )
}

/// A loop's first iteration as `--dry-run` shows it: the command (a task's own agent and model
/// replace the loop's), where it runs, how the prompt goes, the environment added, then the
/// prompt. `cwd`: where ralph is (agents and their configuration are found from there);
/// `run_in` and `run_dir`: where the loop would run.
fn loop_lines(
    config: &RunConfig,
    task: Option<&Task>,
    (cwd, run_in, run_dir): (&Path, &Path, &RalphDir),
    prompt: &str,
    which: &str,
) -> Vec<String> {
    let steps = crate::run::agent_plan(config);
    let (mut spec, mut model) = steps[0].clone();
    if let Some(task) = task {
        if let Some(name) = task.agent() {
            match AgentSpec::resolve(name, &config.custom_agents) {
                Ok(own) => spec = own,
                Err(why) => output::warn(&[&format!("⚠️  task \"{}\": {why}", task.text)]),
            }
        }
        if let Some(own) = task.model() {
            model = Some(own.to_owned());
        }
    }
    let binary = spec
        .find_binary(&|name| std::env::var_os(name), cwd)
        .unwrap_or_else(|message| {
            output::warn(&[&format!("⚠️  {message}")]);
            Path::new(match &spec {
                AgentSpec::Builtin(kind) => kind.binary_name(),
                AgentSpec::Custom(definition) => &definition.command,
            })
            .to_path_buf()
        });
    let tools = dry_tools(config, &spec, (cwd, run_dir), task);
    let opencode = crate::run::opencode_config_for(config, &spec, (cwd, tools.as_ref()));
    let config_path = run_dir.file(storage::OPENCODE_CONFIG_FILE);
    let absolute = std::path::absolute(&config_path).unwrap_or(config_path);
    let agent = spec.agent();
    let home = (agent.config_home().zip(tools.as_ref())).map(|(home, tools)| {
        (
            home,
            tools,
            storage::agent_home::home_for(run_dir, spec.id()),
        )
    });
    let command = agent.command(&CommandRequest {
        binary: &binary,
        prompt,
        model: model.as_deref(),
        allow_all: config.options.allow_all,
        extra_args: &config.options.agent_args,
        opencode_config: opencode.as_ref().map(|_| absolute.as_path()),
        format: spec.format(config.options.output_format),
        usage_file: Some(&crate::agents::usage_file_path(1)),
        sandboxed: false,
        tools: tools.as_ref(),
        tools_file: home.as_ref().map(|(_, _, path)| path.as_path()),
    });
    let mut lines = command_lines(&command, prompt, run_in);
    if let Some((home, tools, path)) = &home {
        lines.push(home_line(*home, tools, (&spec, path)));
    }
    if let Some(content) = opencode {
        lines.push(format!(
            "              ({OPENCODE_CONFIG_ENV} would contain: {content})"
        ));
    }
    lines.extend(fallback_line(config));
    lines.push(String::new());
    lines.push(format!(
        "----- PROMPT {which} ({} bytes) -----",
        prompt.len()
    ));
    lines.push(prompt.to_owned());
    lines.push("----- END OF PROMPT -----".to_owned());
    lines
}

/// The agent's command line (the prompt shown as `"$PROMPT"`), where it runs, how the prompt
/// reaches it and the environment added.
fn command_lines(
    command: &crate::agents::AgentCommand,
    prompt: &str,
    run_in: &Path,
) -> Vec<String> {
    let mut lines = Vec::new();
    let shown: Vec<String> = std::iter::once(command.program.display().to_string())
        .chain(command.display_args().into_iter().map(|arg| {
            if arg == prompt {
                "\"$PROMPT\"".to_owned()
            } else {
                shell_quote(&arg)
            }
        }))
        .collect();
    lines.push(format!("Command:      {}", shown.join(" ")));
    lines.push(format!("Directory:    {}", run_in.display()));
    lines.push(format!(
        "Prompt:       {}",
        if command.stdin.is_some() {
            "written to the agent's stdin (it is too long for an argument)"
        } else {
            "the argument shown as \"$PROMPT\""
        }
    ));
    if command.env.is_empty() {
        lines.push("Environment:  (nothing added)".to_owned());
    }
    for (key, value) in &command.env {
        lines.push(format!("Environment:  {key}={}", value.to_string_lossy()));
    }
    lines
}

fn shell_quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c))
    {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}
