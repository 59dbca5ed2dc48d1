//! ralph: run an AI coding agent in a loop until it keeps its promise.
//!
//! `main` only parses the command line, dispatches, and turns the outcome into an exit code.

mod agents;
mod cli;
mod commands;
mod config;
mod dry_run;
mod error;
mod event;
mod exit;
mod fleet;
mod git;
mod guard;
mod hooks;
mod journal;
mod mcp;
mod model;
mod notify;
mod options;
mod otel;
mod output;
mod planning;
mod promise;
mod prompt;
mod protect;
mod report;
mod run;
mod sandbox;
mod serve;
mod settings;
mod setup;
mod signal;
mod storage;
mod stream;
#[cfg(test)]
mod testing;
mod text;
mod transcript;
mod verify;

use std::io::{IsTerminal as _, Read as _};
use std::os::fd::AsFd as _;
use std::os::unix::fs::FileTypeExt as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser as _;

use crate::config::{Config, Mode, PromptInput};
use crate::exit::ExitStatus;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let first = args.next();
    // ralph's own helper processes: the agent's guard, the sandbox's bridge and hooks.
    match first.as_ref().and_then(|first| first.to_str()) {
        Some(guard::ARG) => return guard::main(args),
        Some(guard::BESIDE_ARG) => return guard::beside_main(args),
        Some(sandbox::bridge::ARG) => return sandbox::bridge::main(args),
        Some(sandbox::hooks::ARG) => return sandbox::hooks::main(args),
        Some(mcp::agent_tools::ARG) => return mcp::agent_tools::main(args),
        _ => {}
    }
    // `ralph --version` alone answers before the command line's parser is built (most of
    // ralph's start-up); it prints what clap's version action prints.
    if args.next().is_none() && first.is_some_and(|first| first == "--version" || first == "-v") {
        output::say(&[&format!("ralph {}", env!("CARGO_PKG_VERSION"))]);
        return ExitCode::SUCCESS;
    }
    let cli = match cli::Cli::try_parse_from(cli::task_before_context(std::env::args_os())) {
        Ok(cli) => cli,
        Err(err) => return clap_error(&err).into(),
    };
    match run(cli) {
        Ok(status) => status.into(),
        Err(err) => {
            // Every error is printed here, once.
            let err = error::classify(err);
            if err.usage {
                usage_error(&err.message);
            } else {
                output::error(&err.message);
            }
            err.status.into()
        }
    }
}

fn run(cli: cli::Cli) -> anyhow::Result<ExitStatus> {
    let cwd = std::env::current_dir()
        .map_err(|err| error::fail(format!("cannot use the current directory: {err}")))?;
    let ralph_dir = cwd.join(storage::RALPH_DIR);
    if std::fs::symlink_metadata(&ralph_dir).is_ok() && !ralph_dir.is_dir() {
        return Err(error::fail(format!(
            "{} exists but is not a directory; ralph keeps its state, history and tasks there. Rename or remove that file, then run ralph again",
            ralph_dir.display()
        ))
        .into());
    }
    let settings = settings::Settings::load(&cwd, &|name| std::env::var(name).ok())?;
    let config = Config::from_cli(cli, cwd, &mut Stdin, settings)?;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let running = config.mode.is_loop() || matches!(config.mode, Mode::Plan(_));
    output::configure(config.color, no_color, config.json && running);
    dispatch(config)
}

fn dispatch(config: Config) -> anyhow::Result<ExitStatus> {
    let Config {
        cwd,
        ralph_dir,
        mode,
        cli_layer,
        settings,
        color: _,
        json,
    } = config;
    let knobs = run::Knobs::from_env();
    match mode {
        Mode::Completions(shell) => Ok(setup::completions(shell)),
        Mode::Man => setup::man(),
        Mode::Init => setup::init(&ralph_dir, &cwd),
        Mode::ShowConfig => setup::show_config(&settings, &cli_layer),
        Mode::Doctor => Ok(setup::doctor(&settings, &cli_layer, &ralph_dir, &cwd)),
        Mode::Mcp => mcp::serve(&ralph_dir, &cwd),
        Mode::Status {
            remote: Some(remote),
            ..
        } => commands::remote_status(&cwd, &remote, claim_ttl(&settings, &cli_layer)?, json),
        Mode::Status { tasks, .. } => Ok(commands::status(&ralph_dir, tasks, json)),
        Mode::Watch => commands::watch(&ralph_dir, output::colour_on_stdout()),
        Mode::Answer { id, text, remote } => answer(
            (&ralph_dir, &cwd),
            (&id, &text, remote.as_deref()),
            (&settings, &cli_layer, json),
        ),
        Mode::Report(file) => commands::report(&ralph_dir, &cwd, file.as_deref()),
        Mode::Log { which, raw, follow } => {
            let style = log_style(json, raw, &settings, &cli_layer);
            commands::show_log(&ralph_dir, &which, style, follow)
        }
        Mode::Reset => commands::reset(&ralph_dir, &knobs),
        list @ (Mode::AddContext { .. }
        | Mode::ClearContext
        | Mode::ListTasks
        | Mode::AddTask { .. }
        | Mode::RemoveTask(_)
        | Mode::Import(_)
        | Mode::Export) => task_list_command(list, &ralph_dir, json),
        Mode::DryRun(config) => Ok(dry_run::dry_run(&config, &ralph_dir, &cwd)),
        Mode::Serve {
            addr,
            allow_remote,
            remote,
        } => {
            let ttl = claim_ttl(&settings, &cli_layer)?;
            serve_beside((&addr, allow_remote), (ralph_dir, cwd, remote), ttl)
        }
        Mode::Plan(mut config) => {
            config.json = json;
            run::plan_only(&config, &cwd, &ralph_dir, &knobs)
        }
        Mode::WorkerDryRun {
            config,
            remote,
            base,
        } => {
            let place = (remote.as_str(), base.as_deref());
            Ok(dry_run::worker_dry_run(&config, &ralph_dir, &cwd, place))
        }
        loops if loops.is_loop() => (Loops {
            cwd: &cwd,
            ralph_dir: &ralph_dir,
            cli_layer: &cli_layer,
            settings: &settings,
            json,
            knobs: &knobs,
        })
        .start(loops),
        // Every mode is one of those above.
        _ => Ok(ExitStatus::Success),
    }
}

/// `--serve ADDR` beside no loop: the page of the run in `dir` (or of the workers on `remote`).
fn serve_beside(
    (addr, allow_remote): (&options::parse::Addr, bool),
    (dir, cwd, remote): (storage::RalphDir, std::path::PathBuf, Option<String>),
    claim_ttl: Duration,
) -> anyhow::Result<ExitStatus> {
    let site = serve::Site {
        dir,
        cwd,
        remote,
        run: None,
        claim_ttl,
    };
    serve::serve_beside(addr, allow_remote, site, &signal::StopFlag::install()?)
}

/// `--answer ID TEXT [--remote NAME]` (a worker's question waits while its task's claim is
/// younger than `--claim-ttl`).
fn answer(
    (dir, cwd): (&storage::RalphDir, &std::path::Path),
    (id, text, remote): (&str, &str, Option<&str>),
    (settings, cli, json): (&settings::Settings, &options::Layer, bool),
) -> anyhow::Result<ExitStatus> {
    let remote =
        (remote.map(|name| claim_ttl(settings, cli).map(|ttl| (name, ttl)))).transpose()?;
    commands::answer(dir, cwd, (id, text), remote, json)
}

/// The commands that read or edit the context and the task list.
fn task_list_command(
    mode: Mode,
    ralph_dir: &storage::RalphDir,
    json: bool,
) -> anyhow::Result<ExitStatus> {
    match mode {
        Mode::AddContext { text, task } => commands::add_context(ralph_dir, &text, task.as_deref()),
        Mode::ClearContext => commands::clear_context(ralph_dir),
        Mode::ListTasks => commands::list_tasks(ralph_dir, json),
        Mode::AddTask {
            description,
            id,
            blocked_by,
            properties,
        } => {
            let place = (id.as_deref(), blocked_by.as_deref());
            commands::add_task(ralph_dir, &description, place, &properties)
        }
        Mode::RemoveTask(number) => commands::remove_task(ralph_dir, number),
        Mode::Import(files) => commands::import(ralph_dir, &files),
        Mode::Export => commands::list_tasks(ralph_dir, true),
        // `dispatch` sends only the commands above here.
        _ => Ok(ExitStatus::Error),
    }
}

/// What starting a loop needs besides its mode.
struct Loops<'a> {
    cwd: &'a std::path::Path,
    ralph_dir: &'a storage::RalphDir,
    cli_layer: &'a options::Layer,
    settings: &'a settings::Settings,
    json: bool,
    knobs: &'a run::Knobs,
}

impl Loops<'_> {
    /// Runs a loop, a parallel run, a `--worktree` loop, a `--worker` or `--resume`, with the
    /// signal handling a loop needs.
    fn start(&self, mode: Mode) -> anyhow::Result<ExitStatus> {
        let stop = signal::StopFlag::install()?;
        let _server = self.server(&mode, &stop);
        self.launch(mode, &stop)
    }

    /// `serve = "…"` (or `--serve`) with a run: the server, which lives as long as the run (one
    /// that cannot start never keeps the run from starting).
    fn server(&self, mode: &Mode, stop: &signal::StopFlag) -> Option<serve::Server> {
        let options =
            options::LoopOptions::resolve(&self.settings.stack(&[self.cli_layer])).ok()?;
        let addr = options.serve.as_ref()?;
        // A worker's server shows its remote's fleet too.
        let remote = match mode {
            Mode::Worker { remote, .. } => Some(remote.clone()),
            _ => None,
        };
        let site = serve::Site {
            dir: self.ralph_dir.clone(),
            cwd: self.cwd.to_owned(),
            remote,
            run: Some(stop.clone()),
            claim_ttl: options.claim_ttl,
        };
        match serve::Server::start(addr, options.serve_allow_remote, site) {
            Ok(server) => {
                let token = self.ralph_dir.root().join(serve::TOKEN_FILE);
                output::serving(&server.url, &token, false);
                Some(server)
            }
            Err(err) => {
                output::serve_failed(&format!("{err:#}"));
                None
            }
        }
    }

    /// The run `mode` asks for: a loop of its own, a `--parallel` run (either one started, or
    /// resumed as its saved settings shape it), a `--worktree` loop or a `--worker`.
    fn launch(&self, mode: Mode, stop: &signal::StopFlag) -> anyhow::Result<ExitStatus> {
        let Self {
            cwd,
            ralph_dir,
            knobs,
            json,
            ..
        } = *self;
        let (mode, start) = match mode {
            Mode::Resume => {
                let (config, start) = run::resume(self.cli_layer, self.settings, ralph_dir, json)?;
                (Mode::of_loop(Box::new(config)), start)
            }
            mode => (mode, run::Start::Fresh),
        };
        match mode {
            Mode::RunInWorktree {
                mut config,
                name,
                merge,
            } => {
                config.json = json;
                let place = (cwd, ralph_dir);
                fleet::in_worktree(
                    &config,
                    place,
                    (&name, merge),
                    run::Start::Fresh,
                    stop,
                    knobs,
                )
            }
            Mode::ResumeInWorktree { name, merge } => {
                let worktree_dir = fleet::worktree_home(cwd, ralph_dir, &name)?;
                let (config, start) =
                    run::resume(self.cli_layer, self.settings, &worktree_dir, json)?;
                fleet::in_worktree(
                    &config,
                    (cwd, ralph_dir),
                    (&name, merge),
                    start,
                    stop,
                    knobs,
                )
            }
            Mode::Worker {
                mut config,
                remote,
                base,
            } => {
                config.json = json;
                let place = (remote.as_str(), base.as_deref());
                fleet::worker(&config, cwd, ralph_dir, place, stop, knobs)
            }
            Mode::Run(mut config) => {
                config.json = json;
                run::run(&config, cwd, ralph_dir, start, stop, knobs)
            }
            Mode::Parallel(mut config) => {
                config.json = json;
                fleet::run_parallel(&config, cwd, ralph_dir, start, stop, knobs)
            }
            // Every other mode is a command, dispatched before a loop is ever started.
            _ => Ok(ExitStatus::Success),
        }
    }
}

/// How `--log` prints: `--json` records, `--raw` lines, or as shown (`--verbose-tools` in effect).
fn log_style(
    json: bool,
    raw: bool,
    settings: &settings::Settings,
    cli: &options::Layer,
) -> commands::LogStyle {
    match (json, raw) {
        (true, _) => commands::LogStyle::Json,
        (false, true) => commands::LogStyle::Raw,
        (false, false) => commands::LogStyle::Shown {
            verbose_tools: options::LoopOptions::resolve(&settings.stack(&[cli]))
                .is_ok_and(|options| options.verbose_tools),
        },
    }
}

/// The `--claim-ttl` in effect (for `--status --remote`, which runs no loop).
fn claim_ttl(settings: &settings::Settings, cli: &options::Layer) -> anyhow::Result<Duration> {
    let options = options::LoopOptions::resolve(&settings.stack(&[cli])).map_err(error::fail)?;
    Ok(options.claim_ttl)
}

/// Help and version go to stdout with exit 0; every other parse error is a usage error.
fn clap_error(err: &clap::Error) -> ExitStatus {
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = err.print();
        return ExitStatus::Success;
    }
    let rendered = err.render().to_string();
    let message: Vec<&str> = rendered
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let mut message = message.join(" ");
    if err.kind() == ErrorKind::InvalidValue && message.contains("'--sandbox [<BACKEND>]'") {
        // `ralph --sandbox "prompt"`: the prompt was taken for the backend.
        message.push_str(
            "; --sandbox takes an optional backend, so put the prompt before it (ralph \"…\" --sandbox) or name one (--sandbox auto)",
        );
    }
    usage_error(message.strip_prefix("error: ").unwrap_or(&message));
    ExitStatus::Error
}

fn usage_error(message: &str) {
    output::warn(&[
        &format!("Error: {message}"),
        "Run 'ralph --help' for available options",
    ]);
}

/// The process's stdin, read only when it is a pipe, a socket or a file.
struct Stdin;

impl PromptInput for Stdin {
    fn piped_stdin(&mut self, has_words: bool) -> Result<Option<String>, error::Error> {
        let stdin = std::io::stdin();
        if stdin.is_terminal() {
            return Ok(None);
        }
        // A closed or invalid stdin simply has nothing to offer.
        let Ok(fd) = stdin.as_fd().try_clone_to_owned() else {
            return Ok(None);
        };
        let file = std::fs::File::from(fd);
        let Ok(meta) = file.metadata() else {
            return Ok(None);
        };
        let kind = meta.file_type();
        let is_stream = kind.is_fifo() || kind.is_socket();
        if !(is_stream || kind.is_file()) {
            // A terminal, /dev/null or another device: never wait on it.
            return Ok(None);
        }
        let wait = model::env_millis("RALPH_STDIN_WAIT_MS", 1_000);
        if is_stream && has_words && !ready_soon(&file, wait) {
            // Some runners hand over a pipe that never closes; with a prompt on the command
            // line there is no reason to wait for it — but say so.
            output::warn(&[
                "⚠️  stdin is a pipe but nothing arrived within 1s; using only the prompt words.",
                "   To combine them, make sure the piped command writes at once, or use --prompt-file.",
            ]);
            return Ok(None);
        }
        let mut bytes = Vec::new();
        (&file)
            .read_to_end(&mut bytes)
            .map_err(|err| error::fail(format!("failed to read the prompt from stdin: {err}")))?;
        let text = config::prompt_text(&bytes, "the prompt read from stdin");
        Ok((!text.trim().is_empty()).then_some(text))
    }
}

fn ready_soon(file: &std::fs::File, timeout: Duration) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(file.as_fd(), PollFlags::POLLIN)];
    let timeout = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
    matches!(poll(&mut fds, timeout), Ok(n) if n > 0)
}
