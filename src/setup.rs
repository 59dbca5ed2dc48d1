//! Commands that set ralph up or explain it: `--init`, `--config`, `--doctor`, `--dry-run`,
//! `--completions`, `--man`. None of them runs an agent's work or changes loop files.

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::CommandFactory as _;

use crate::agents::{AgentKind, AgentSpec, CommandRequest, OPENCODE_CONFIG_ENV};
use crate::cli::Cli;
use crate::config::{RotationStep, RunConfig};
use crate::error::fail;
use crate::exit::ExitStatus;
use crate::git::Repo;
use crate::options::{self, Layer, LoopOptions};
use crate::output::{self, format};
use crate::prompt::TaskLoop;
use crate::settings::Settings;
use crate::storage::state::{self};
use crate::storage::tasks::{self, Task, TaskList, TaskStatus};
use crate::storage::{self, Loaded, RalphDir};

/// `--completions SHELL`.
pub(crate) fn completions(shell: clap_complete::Shell) -> ExitStatus {
    let mut out = output::stdout();
    clap_complete::generate(shell, &mut Cli::command(), "ralph", &mut *out);
    let _ = out.flush();
    ExitStatus::Success
}

/// `--man`.
pub(crate) fn man() -> anyhow::Result<ExitStatus> {
    let mut out = output::stdout();
    clap_mangen::Man::new(Cli::command()).render(&mut *out)?;
    out.flush()?;
    Ok(ExitStatus::Success)
}

/// `--init`: writes a commented `.ralph/config.toml`, never over an existing one.
pub(crate) fn init(dir: &RalphDir, cwd: &Path) -> anyhow::Result<ExitStatus> {
    let path = cwd.join(options::PROJECT_FILE);
    if path.exists() {
        return Err(fail(format!(
            "{} already exists; edit it, or remove it to start from the defaults",
            path.display()
        ))
        .into());
    }
    dir.ensure()?;
    storage::write_atomic(&path, options::init_text().as_bytes())?;
    output::say(&[
        &format!(
            "✅ Wrote {} with every setting commented out.",
            path.display()
        ),
        "   Uncomment what you want; `ralph --config` shows the settings in effect.",
    ]);
    Ok(ExitStatus::Success)
}

/// `--config`: every setting in effect and where it comes from.
pub(crate) fn show_config(settings: &Settings, cli: &Layer) -> anyhow::Result<ExitStatus> {
    let stack = settings.stack(&[cli]);
    let config = RunConfig::resolve("(prompt)".to_owned(), None, &stack, &settings.agents)?;
    let mut lines = vec![
        "# Settings in effect (command line > environment > project > user > defaults)".to_owned(),
    ];
    if settings.files.is_empty() {
        lines.push(format!(
            "# No config file found (project: {}; user: {}).",
            options::PROJECT_FILE,
            options::user_file(&|name| std::env::var(name).ok())
                .map_or_else(|| "none".to_owned(), |p| p.display().to_string())
        ));
    } else {
        for file in &settings.files {
            lines.push(format!("# Read {}", file.display()));
        }
    }
    let values: Vec<(&str, String)> = config
        .options
        .values()
        .into_iter()
        .map(|(key, raw)| (key, raw.shown()))
        .collect();
    let width = values
        .iter()
        .map(|(key, value)| key.len() + value.len())
        .max()
        .unwrap_or(0)
        + 3;
    for (key, value) in values {
        let source = crate::settings::source_of(&stack, key);
        let pad = width.saturating_sub(key.len() + value.len());
        lines.push(format!("{key} = {value}{}# {source}", " ".repeat(pad)));
    }
    for (name, agent) in &settings.agents {
        lines.push(format!("# custom agent `{name}`: {}", agent.command));
    }
    output::say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
    Ok(ExitStatus::Success)
}

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
    if config.options.parallel > 0 {
        lines.extend(parallel_lines(config, dir, cwd));
    } else {
        let context = crate::storage::context::pending(&dir.context())
            .ok()
            .flatten()
            .map(|pending| pending.text());
        let prompt = crate::run::iteration_prompt(config, dir, 1, (context.as_deref(), &[]), None);
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

fn dry_run_heading() -> Vec<String> {
    vec![
        "# Dry run: nothing is started and no file is written.".to_owned(),
        String::new(),
    ]
}

/// The tasks a `--parallel` run would start (the ready ones, in file order, up to N), where each
/// works and how it is merged, then the first task's loop.
fn parallel_lines(config: &RunConfig, dir: &RalphDir, cwd: &Path) -> Vec<String> {
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
    let base = base.unwrap_or_else(|| "HEAD".to_owned());
    let content = storage::read_text(&dir.tasks()).unwrap_or_else(|err| {
        output::tasks_file_unreadable(&output::Voice::plain(), &dir.tasks(), &err.to_string());
        None
    });
    let content = content.unwrap_or_default();
    let list = TaskList::parse(&content);
    let limit = config.options.parallel;
    let mut lines = vec![format!(
        "Parallel:     up to {limit} tasks at once, each in its own git worktree on its own branch; when a task's loop completes, its branch is merged into {base} (the task marked [x] there) and the next ready task starts"
    )];
    if list.is_empty() {
        output::warn(&[&format!(
            "⚠️  there is no task in {}, so --parallel has nothing to run; add tasks with `ralph --add-task \"…\"` (or `--import FILE`)",
            dir.tasks().display()
        )]);
        return lines;
    }
    let ids = tasks::task_ids(&list);
    let open = |task: &Task| matches!(task.status, TaskStatus::Todo | TaskStatus::InProgress);
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
    let task_loop = TaskLoop { id, base: &base };
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
    if !repo.has_remote(remote) {
        return stop(format!(
            "this clone has no git remote named '{remote}' (git remote add {remote} URL, or --remote NAME)"
        ));
    }
    let base = match base {
        Some(base) => base.to_owned(),
        None => match repo.remote_default_branch(remote) {
            Ok(base) => base,
            Err(why) => return stop(format!("cannot use the git remote '{remote}': {why}")),
        },
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
        matches!(task.status, TaskStatus::Todo | TaskStatus::InProgress)
            && list.blockers(task).is_empty()
            && !claimed.contains(id)
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
    let task_loop = TaskLoop { id, base: &base };
    lines.extend(task_loop_lines(
        config,
        (task, task_loop, &content),
        cwd,
        &within(&worktree, repo.prefix()),
    ));
    lines
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
    let mut config = config.clone();
    config.options.tasks = true;
    config.options.parallel = 0;
    if let Some(limit) = task.attempt_limit() {
        config.options.max_iterations = limit;
    }
    // A task loop has the worktree's own `.ralph/`: the base's pending context is not its own.
    let prompt = crate::run::iteration_prompt(
        &config,
        &RalphDir::new(run_in),
        1,
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
    let opencode = crate::run::opencode_config_for(config, &spec, cwd);
    let config_path = run_dir.file(storage::OPENCODE_CONFIG_FILE);
    let absolute = std::path::absolute(&config_path).unwrap_or(config_path);
    let command = spec.agent().command(&CommandRequest {
        binary: &binary,
        prompt,
        model: model.as_deref(),
        allow_all: config.options.allow_all,
        extra_args: &config.options.agent_args,
        opencode_config: opencode.as_ref().map(|_| absolute.as_path()),
        format: spec.format(config.options.output_format),
        usage_file: Some(&crate::agents::usage_file_path(1)),
    });
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

/// One `--doctor` line.
struct Check {
    ok: bool,
    /// Informational only: never makes the doctor fail.
    optional: bool,
    text: String,
}

impl Check {
    fn pass(text: impl Into<String>) -> Self {
        Self {
            ok: true,
            optional: false,
            text: text.into(),
        }
    }
    fn fail(text: impl Into<String>) -> Self {
        Self {
            ok: false,
            optional: false,
            text: text.into(),
        }
    }
    fn note(text: impl Into<String>) -> Self {
        Self {
            ok: true,
            optional: true,
            text: text.into(),
        }
    }
}

/// `--doctor`: checks git, the agents and `.ralph/`, one line each with what to do.
pub(crate) fn doctor(settings: &Settings, cli: &Layer, dir: &RalphDir, cwd: &Path) -> ExitStatus {
    let mut checks = Vec::new();
    check_git(cwd, &mut checks);
    check_agents(settings, cli, cwd, &mut checks);
    check_ralph_dir(dir, &mut checks);
    let mut lines = vec!["ralph doctor".to_owned()];
    for check in &checks {
        let icon = match (check.ok, check.optional) {
            (true, false) => "✅",
            (true, true) => "➖",
            (false, _) => "❌",
        };
        lines.push(format!("{icon} {}", check.text));
    }
    let failed = checks.iter().filter(|check| !check.ok).count();
    lines.push(String::new());
    lines.push(if failed == 0 {
        "All checks passed.".to_owned()
    } else {
        format!("{} to fix.", format::plural(failed as u64, "problem"))
    });
    output::say(&lines.iter().map(String::as_str).collect::<Vec<_>>());
    if failed == 0 {
        ExitStatus::Success
    } else {
        ExitStatus::Error
    }
}

fn check_git(cwd: &Path, checks: &mut Vec<Check>) {
    let Some(version) = version_of(Path::new("git"), cwd) else {
        checks.push(Check::fail("git is not installed: install it (Debian: apt-get install git); ralph needs it to detect changes and commit"));
        return;
    };
    checks.push(Check::pass(format!("git is installed ({version})")));
    match Repo::discover(cwd) {
        Some(repo) => checks.push(Check::pass(format!(
            "{} is a git repository",
            repo.root().display()
        ))),
        None => {
            checks.push(Check::fail(format!(
                "{} is not in a git repository: run `git init` there, or ralph cannot commit iterations or see what changed",
                cwd.display()
            )));
            return;
        }
    }
    let identity = Command::new("git")
        .args(["var", "GIT_COMMITTER_IDENT"])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output();
    match identity {
        Ok(output) if output.status.success() => {
            let ident = String::from_utf8_lossy(&output.stdout);
            let who = ident.rsplitn(3, ' ').nth(2).unwrap_or("").trim().to_owned();
            checks.push(Check::pass(format!("git identity: {who}")));
        }
        _ => checks.push(Check::fail(
            "git has no identity, so auto-commits fail: run git config --global user.name \"Your Name\" and git config --global user.email you@example.com",
        )),
    }
}

fn check_agents(settings: &Settings, cli: &Layer, cwd: &Path, checks: &mut Vec<Check>) {
    let chosen = LoopOptions::resolve(&settings.stack(&[cli]))
        .map(|options| options.agent.0)
        .unwrap_or_else(|_| "opencode".to_owned());
    let spec = match AgentSpec::resolve(&chosen, &settings.agents) {
        Ok(spec) => spec,
        Err(message) => {
            checks.push(Check::fail(message));
            return;
        }
    };
    let mut specs = vec![spec.clone()];
    for kind in AgentKind::ALL {
        if spec.kind() != Some(kind) {
            specs.push(AgentSpec::Builtin(kind));
        }
    }
    for (index, candidate) in specs.iter().enumerate() {
        let required = index == 0;
        let name = candidate.display_name();
        match candidate.find_binary(&|name| std::env::var_os(name), cwd) {
            Ok(binary) => match version_of(&binary, cwd) {
                Some(version) => checks.push(Check::pass(format!(
                    "{name}: {} ({version})",
                    binary.display()
                ))),
                None if required => checks.push(Check::fail(format!(
                    "{name}: {} does not answer `--version` within 10 s; check that it runs",
                    binary.display()
                ))),
                None => checks.push(Check::note(format!(
                    "{name}: {} does not answer `--version`",
                    binary.display()
                ))),
            },
            Err(message) if required => checks.push(Check::fail(format!(
                "{name} (the agent ralph will run): {message}"
            ))),
            Err(_) => checks.push(Check::note(format!(
                "{name} is not installed (only needed for --agent {})",
                candidate.id()
            ))),
        }
    }
}

fn check_ralph_dir(dir: &RalphDir, checks: &mut Vec<Check>) {
    use std::os::unix::fs::PermissionsExt as _;
    let Ok(meta) = std::fs::metadata(dir.root()) else {
        checks.push(Check::note(format!(
            "{} does not exist yet (it is created when a loop starts)",
            dir.root().display()
        )));
        return;
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 == 0 {
        checks.push(Check::pass(format!(
            "{} is private (mode {mode:o})",
            dir.root().display()
        )));
    } else {
        checks.push(Check::fail(format!(
            "{} can be read by other users (mode {mode:o}): run chmod 700 {}",
            dir.root().display(),
            dir.root().display()
        )));
    }
    let corrupt = |path: &Path, reason: &str| {
        Check::fail(format!(
            "{} is corrupt ({reason}): fix it, or run `ralph --reset` to start over",
            path.display()
        ))
    };
    let saved = state::load(&dir.state());
    if let Loaded::Corrupt(reason) = &saved {
        checks.push(corrupt(&dir.state(), reason));
    }
    let history = crate::storage::history::load(&dir.history());
    if let Loaded::Corrupt(reason) = &history {
        checks.push(corrupt(&dir.history(), reason));
    }
    if let Loaded::Found(saved) = saved {
        let iteration = saved.shown_iteration(history.ok().and_then(|h| h.last_iteration()));
        let running = crate::storage::lock::loop_is_running(dir);
        if saved.active && running {
            checks.push(Check::pass(format!(
                "a loop is running here (iteration {iteration})"
            )));
        } else if saved.active {
            checks.push(Check::fail(format!(
                "a loop stopped unexpectedly at iteration {iteration} (stale lock): run `ralph --resume` to continue or `ralph --reset` to discard it"
            )));
        } else if saved.stopped_after_iteration() {
            checks.push(Check::note(format!(
                "a loop stopped {} ({}) and can be resumed (`ralph --resume`)",
                format::stop_point(iteration),
                saved.stop_reason.as_deref().unwrap_or_default()
            )));
        } else {
            checks.push(Check::note(format!(
                "a loop interrupted at iteration {iteration} can be resumed (`ralph --resume`)"
            )));
        }
    }
}

/// The first line of `program --version`, if it answers within 10 s.
fn version_of(program: &Path, cwd: &Path) -> Option<String> {
    // Output to a file, not a pipe: a child that keeps a pipe open cannot make the doctor hang.
    let mut capture = tempfile::tempfile().ok()?;
    // Some CLIs (pi) print their version on stderr.
    let mut capture_err = tempfile::tempfile().ok()?;
    let mut child = Command::new(program)
        .arg("--version")
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(capture.try_clone().ok()?))
        .stderr(Stdio::from(capture_err.try_clone().ok()?))
        .process_group(0)
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let status = child.wait().ok()?;
    if !status.success() {
        return None;
    }
    let first_line = |file: &mut std::fs::File| {
        let mut bytes = Vec::new();
        std::io::Seek::seek(file, std::io::SeekFrom::Start(0)).ok()?;
        std::io::Read::read_to_end(file, &mut bytes).ok()?;
        let text = String::from_utf8_lossy(&bytes);
        Some(text.lines().next().unwrap_or("").trim().to_owned()).filter(|v| !v.is_empty())
    };
    first_line(&mut capture)
        .or_else(|| first_line(&mut capture_err))
        .or(Some("version unknown".to_owned()))
}
