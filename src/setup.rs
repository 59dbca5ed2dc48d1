//! Commands that set ralph up or explain it: `--init`, `--config`, `--doctor`, `--completions`,
//! `--man` (and `--dry-run`, in `dry_run.rs`). None of them runs an agent's work or changes loop files.

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::CommandFactory as _;

use crate::agents::{AgentKind, AgentSpec};
use crate::cli::Cli;
use crate::config::RunConfig;
use crate::error::fail;
use crate::exit::ExitStatus;
use crate::git::Repo;
use crate::options::{self, Layer, LoopOptions};
use crate::output::{self, format};
use crate::settings::Settings;
use crate::storage::state::{self};
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
    check_sandbox(settings, cli, &mut checks);
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

/// Which sandbox backends work here; the one the configuration chooses must.
fn check_sandbox(settings: &Settings, cli: &Layer, checks: &mut Vec<Check>) {
    let settings = LoopOptions::resolve(&settings.stack(&[cli]))
        .map(|options| options.sandbox())
        .unwrap_or_default();
    match crate::sandbox::chosen(&settings) {
        Ok(Some(_)) => checks.push(Check::pass("the configured --sandbox can run here")),
        Ok(None) => {}
        Err(err) => checks.push(Check::fail(format!("{err:#}"))),
    }
    for (name, works) in crate::sandbox::backends_here() {
        checks.push(Check::note(match works {
            Ok(path) => format!("sandbox backend {name}: works ({path})"),
            Err(why) => format!("sandbox backend {name}: {why}"),
        }));
    }
}

fn check_git(cwd: &Path, checks: &mut Vec<Check>) {
    let Some(version) = version_of(Path::new("git"), cwd) else {
        checks.push(Check::fail("git is not installed: install it (Debian: apt-get install git); ralph needs it to detect changes and commit"));
        return;
    };
    checks.push(Check::pass(format!("git is installed ({version})")));
    match Repo::discover(cwd) {
        Some(repo) => {
            checks.push(Check::pass(format!(
                "{} is a git repository",
                repo.root().display()
            )));
            check_repository(&repo, checks);
        }
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

/// Whether ralph can commit in the repository: git can write there, and no operation of the
/// user's is under way (ralph refuses to start then).
fn check_repository(repo: &Repo, checks: &mut Vec<Check>) {
    match repo.writable() {
        Ok(()) => checks.push(Check::pass("the repository can be written")),
        Err((dir, err)) => checks.push(Check::fail(format!(
            "{} cannot be written ({err}), so ralph cannot commit: make it writable (chmod -R u+w {}) or run ralph as its owner",
            dir.display(),
            dir.display()
        ))),
    }
    if let Some(underway) = repo.underway() {
        checks.push(Check::fail(format!(
            "{underway}; a loop refuses to start until then"
        )));
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
    for preset in &crate::agents::presets::PRESETS {
        if spec.id() != preset.name {
            specs.push(AgentSpec::Custom(Box::new(preset.definition())));
        }
    }
    for (index, candidate) in specs.iter().enumerate() {
        let required = index == 0;
        let name = candidate.display_name();
        match candidate.find_binary(&|name| std::env::var_os(name), cwd) {
            Ok(binary) if candidate.kind() == Some(AgentKind::Codex) => {
                check_codex_bwrap(&binary, checks);
                checks.push(found_check(name, &binary, cwd, required));
            }
            Ok(binary) => checks.push(found_check(name, &binary, cwd, required)),
            Err(message) if required => checks.push(Check::fail(format!(
                "{name} (the agent ralph will run): {message}"
            ))),
            Err(_) => {
                let hint = candidate.install_hint().map(|hint| format!(": {hint}"));
                let untested = crate::agents::presets::find(candidate.id())
                    .and_then(|preset| preset.untested)
                    .map(|why| format!(" (not tested with ralph: {why})"));
                checks.push(Check::note(format!(
                    "{name} is not installed (only needed for --agent {}){}{}",
                    candidate.id(),
                    hint.unwrap_or_default(),
                    untested.unwrap_or_default()
                )));
            }
        }
    }
}

/// An agent found at `binary`: it answers `--version` (a failure when it is the one ralph runs).
fn found_check(name: &str, binary: &Path, cwd: &Path, required: bool) -> Check {
    match version_of(binary, cwd) {
        Some(version) => Check::pass(format!("{name}: {} ({version})", binary.display())),
        None if required => Check::fail(format!(
            "{name}: {} does not answer `--version` within 10 s; check that it runs",
            binary.display()
        )),
        None => Check::note(format!(
            "{name}: {} does not answer `--version`",
            binary.display()
        )),
    }
}

/// Whether Codex's own sandbox (`--sandbox workspace-write`, without ralph's) has a bubblewrap
/// it can use.
fn check_codex_bwrap(binary: &Path, checks: &mut Vec<Check>) {
    use crate::agents::CodexBwrap;
    match crate::agents::codex_bwrap_for(binary, std::env::var_os("PATH").as_deref()) {
        CodexBwrap::Fine => {}
        CodexBwrap::Shipped {
            system,
            version,
            folder,
        } => checks.push(Check::note(format!(
            "Codex's sandbox needs bubblewrap 0.9 or newer and {} is {version}: ralph runs Codex with the bwrap it ships ({}) first on its PATH",
            system.display(),
            folder.display()
        ))),
        CodexBwrap::Unusable { system, version } => checks.push(Check::fail(format!(
            "Codex's sandbox needs bubblewrap 0.9 or newer and {} is {version}, and Codex ships none that ralph can find: install bubblewrap 0.9 or newer first on PATH, or run Codex under ralph's --sandbox",
            system.display()
        ))),
    }
}

/// Each line of the task file ralph reads otherwise than it is written, a failed check.
fn check_task_lines(dir: &RalphDir, checks: &mut Vec<Check>) {
    if let Ok(Some(content)) = crate::storage::read_text(&dir.tasks()) {
        for problem in crate::storage::tasks::problems(&content) {
            checks.push(Check::fail(format!(
                "{} {problem}: fix the line",
                dir.tasks().display()
            )));
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
    let writable = tempfile::Builder::new()
        .prefix(".tmp-doctor")
        .tempfile_in(dir.root());
    match writable {
        Ok(_) => checks.push(Check::pass(format!(
            "{} can be written",
            dir.root().display()
        ))),
        Err(err) => checks.push(Check::fail(format!(
            "{} cannot be written ({err}): make it writable (chmod u+w {})",
            dir.root().display(),
            dir.root().display()
        ))),
    }
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
    check_task_lines(dir, checks);
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
