//! `--sandbox`: every agent ralph runs (and the `--verify` commands that run the agent's code)
//! runs inside a boundary that lets it write its own work tree and little else, see no secret of
//! the user's, and reach only its model's API. See specs/sandbox.md.
//!
//! A loop builds one [`Sandbox`] at its start; [`Sandbox::wrap`] turns each agent command into
//! the command that runs it inside (`bwrap …`, `docker run …`, `sandbox-exec …`, or a wrapper's
//! command line). What the agent may reach on the network goes through a CONNECT proxy in ralph
//! (`proxy.rs`), bridged into the sandbox by `ralph __sandbox-bridge` (`bridge.rs`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::agents::{AgentCommand, AgentSpec};
use crate::error::fail;

pub(crate) mod bridge;
mod bwrap;
mod container;
mod env;
pub(crate) mod hooks;
mod limits;
mod mounts;
mod proxy;
mod seatbelt;

pub(crate) use limits::{
    Bytes, CGROUPS_VARIABLE, Cpus, join_from_env as join_limits, needs_guard_in_front,
};
use proxy::Allow;

/// The `--sandbox` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Backend {
    /// bwrap on Linux, Seatbelt on macOS.
    Auto,
    /// bubblewrap (Linux).
    Bwrap,
    /// sandbox-exec (macOS; experimental).
    Seatbelt,
    Docker,
    Podman,
    /// No sandbox.
    None,
}

/// The `--sandbox-net` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Net {
    /// The agent's API hosts and `--sandbox-allow`, through ralph's proxy.
    Api,
    /// Nothing.
    None,
    /// Everything the host reaches.
    Full,
}

/// What the `--sandbox…` options ask for.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Settings {
    pub(crate) backend: Backend,
    pub(crate) net: Net,
    pub(crate) allow: Vec<String>,
    pub(crate) env: Vec<String>,
    pub(crate) mount: Vec<String>,
    /// `--protect`: read-only in the work tree.
    pub(crate) protect: Vec<String>,
    /// `--holdout`: the files their commands name, and ralph's records of their results, are
    /// hidden from an agent.
    pub(crate) holdout: Vec<String>,
    pub(crate) memory: Option<Bytes>,
    pub(crate) cpus: Option<Cpus>,
    pub(crate) pids: Option<u32>,
    pub(crate) image: Option<String>,
    pub(crate) wrapper: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            backend: Backend::None,
            net: Net::Api,
            allow: Vec::new(),
            env: Vec::new(),
            mount: Vec::new(),
            protect: Vec::new(),
            holdout: Vec::new(),
            memory: None,
            cpus: None,
            pids: None,
            image: None,
            wrapper: None,
        }
    }
}

/// The sandbox a loop's agents run in, once chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Bwrap,
    Seatbelt,
    Docker,
    Podman,
    /// `--sandbox-wrapper`: its command line before the agent's.
    Wrapper,
}

impl Kind {
    /// The program that runs the sandbox and how to install it.
    fn program(self) -> Option<(&'static str, &'static str, &'static str)> {
        match self {
            Self::Bwrap => Some((
                "bwrap",
                "bubblewrap",
                "apt-get install bubblewrap, or dnf install bubblewrap",
            )),
            Self::Seatbelt => Some(("sandbox-exec", "sandbox-exec", "it comes with macOS")),
            Self::Docker => Some((
                "docker",
                "docker",
                "https://docs.docker.com/engine/install/",
            )),
            Self::Podman => Some(("podman", "podman", "apt-get install podman")),
            Self::Wrapper => None,
        }
    }
}

/// The sandbox `options` ask for: `None` without one. A backend that cannot work here is an
/// error naming it and how to get it (exit 1), before anything runs.
pub(crate) fn chosen(options: &Settings) -> anyhow::Result<Option<Kind>> {
    let kind = match (options.backend, &options.wrapper) {
        (Backend::None, None) => return Ok(None),
        (Backend::None, Some(_)) => Kind::Wrapper,
        (_, Some(_)) => {
            return Err(fail(
                "--sandbox-wrapper replaces a sandbox backend: give it or --sandbox, not both",
            )
            .into());
        }
        (Backend::Auto, None) if cfg!(target_os = "macos") => Kind::Seatbelt,
        (Backend::Auto | Backend::Bwrap, None) => Kind::Bwrap,
        (Backend::Seatbelt, None) => Kind::Seatbelt,
        (Backend::Docker, None) => Kind::Docker,
        (Backend::Podman, None) => Kind::Podman,
    };
    if kind == Kind::Seatbelt && !cfg!(target_os = "macos") {
        return Err(
            fail("--sandbox seatbelt works on macOS only; on Linux use --sandbox bwrap").into(),
        );
    }
    if kind == Kind::Bwrap && !cfg!(target_os = "linux") {
        return Err(
            fail("--sandbox bwrap works on Linux only; on macOS use --sandbox seatbelt").into(),
        );
    }
    if let Some((program, name, install)) = kind.program()
        && which::which(program).is_err()
    {
        return Err(fail(format!(
            "--sandbox: {name} is not installed ({install}); or run without --sandbox"
        ))
        .into());
    }
    if matches!(kind, Kind::Docker | Kind::Podman) && options.image.is_none() {
        return Err(fail(format!(
            "--sandbox {}: give the image to run with --sandbox-image IMAGE (one with the agent's CLI installed)",
            kind.program().map_or("", |p| p.0)
        ))
        .into());
    }
    if let Some(wrapper) = &options.wrapper {
        let first = wrapper.split_whitespace().next().unwrap_or_default();
        if which::which(first).is_err() {
            return Err(fail(format!(
                "--sandbox-wrapper: '{first}' is not a program on PATH; install it or give its full path"
            ))
            .into());
        }
    }
    mounts::parse_all(&options.mount).map_err(fail)?;
    Allow::parse(&options.allow).map_err(fail)?;
    Ok(Some(kind))
}

/// For `--doctor`: each backend, and whether it works here (`Ok`: what runs it) or why not.
pub(crate) fn backends_here() -> Vec<(&'static str, Result<String, String>)> {
    let mut found = Vec::new();
    for kind in [Kind::Bwrap, Kind::Seatbelt, Kind::Docker, Kind::Podman] {
        let Some((program, name, install)) = kind.program() else {
            continue;
        };
        let works = match which::which(program) {
            Err(_) if kind == Kind::Seatbelt && !cfg!(target_os = "macos") => {
                Err("macOS only".to_owned())
            }
            Err(_) => Err(format!("not installed ({install})")),
            Ok(path) if kind == Kind::Bwrap => bwrap_runs(&path),
            Ok(path) if kind == Kind::Docker => docker_answers(&path),
            Ok(path) => Ok(path.display().to_string()),
        };
        found.push((name, works));
    }
    found
}

/// Whether docker's daemon answers.
fn docker_answers(path: &Path) -> Result<String, String> {
    let mut probe = std::process::Command::new(path);
    probe
        .args(["version", "--format", "{{.Server.Version}}"])
        .stdin(std::process::Stdio::null());
    match output_with_deadline(&mut probe, std::time::Duration::from_secs(10)) {
        Ok(output) if output.status.success() => Ok(path.display().to_string()),
        _ => Err("installed, but its daemon does not answer (start dockerd)".to_owned()),
    }
}

/// Whether bwrap can make the namespaces ralph asks for.
fn bwrap_runs(path: &Path) -> Result<String, String> {
    let mut probe = std::process::Command::new(path);
    probe
        .args([
            "--ro-bind",
            "/",
            "/",
            "--unshare-all",
            "--cap-drop",
            "ALL",
            "--",
            "true",
        ])
        .stdin(std::process::Stdio::null());
    let output = output_with_deadline(&mut probe, std::time::Duration::from_secs(10))
        .map_err(|err| err.to_string())?;
    if output.status.success() {
        return Ok(path.display().to_string());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    Err(format!(
        "installed but cannot make a sandbox here ({})",
        said.lines().next().unwrap_or("no reason given").trim()
    ))
}

/// Where a loop's agents run, as the sandbox sees it.
pub(crate) struct Place<'a> {
    /// The top of the work tree the agent works in (a task's own worktree under `--parallel`).
    pub(crate) work: &'a Path,
    /// The repository's shared git directory (objects, refs), when there is a repository.
    pub(crate) git_dir: Option<PathBuf>,
    /// A `core.hooksPath` folder, when one is set.
    pub(crate) hooks_path: Option<PathBuf>,
    /// The run's `.ralph/` (its private caches live in `.ralph/sandbox/`).
    pub(crate) home: &'a Path,
    /// The loop's own `.ralph/` (in the work tree, below its top when ralph runs in a folder).
    pub(crate) ralph: PathBuf,
    /// An agent runs in it, so the two files it writes in `.ralph/` are writable (made when
    /// missing); false for a merge's hooks and a gate's checks, which get `.ralph/` read-only
    /// and find the tree as it was (a file made there would stand in a merge's way).
    pub(crate) agent: bool,
}

/// A loop's sandbox: how each agent command is wrapped.
pub(crate) struct Sandbox {
    kind: Kind,
    options: Settings,
    mounts: bwrap::Mounts,
    proxy: Option<Arc<proxy::Proxy>>,
    limits: limits::Applied,
    /// A private folder, writable inside, for files the agent writes for ralph (usage reports).
    files: tempfile::TempDir,
    /// ralph runs as root (secrets are masked, and agents are told `IS_SANDBOX=1`).
    root: bool,
}

impl Sandbox {
    /// The sandbox of a loop run at `place` (`None` when `options` ask for none).
    pub(crate) fn for_loop(options: &Settings, place: &Place<'_>) -> anyhow::Result<Option<Self>> {
        let Some(kind) = chosen(options)? else {
            return Ok(None);
        };
        let root = nix::unistd::geteuid().is_root();
        let mounts = bwrap::Mounts::plan(options, place, root).map_err(fail)?;
        let proxy = if options.net == Net::Api && kind != Kind::Wrapper {
            let allow = Allow::parse(&options.allow).map_err(fail)?;
            Some(Arc::new(proxy::Proxy::start(allow).map_err(|err| {
                fail(format!(
                    "--sandbox: ralph's network proxy could not start: {err}"
                ))
            })?))
        } else {
            None
        };
        let limits = limits::apply(options);
        let files = tempfile::Builder::new()
            .prefix("ralph-sandbox")
            .tempdir()
            .map_err(|err| {
                fail(format!(
                    "--sandbox: a private folder could not be made: {err}"
                ))
            })?;
        Ok(Some(Self {
            kind,
            options: options.clone(),
            mounts,
            proxy,
            limits,
            files,
            root,
        }))
    }

    /// Where an agent in this sandbox writes a file named `name` for ralph (the folder is
    /// writable inside; a file there may be replaced, as atomic writes do).
    pub(crate) fn private_file(&self, name: &str) -> PathBuf {
        self.files.path().join(name)
    }

    /// The folder ralph's git commands in `repo` take their hooks from, so that the
    /// repository's hooks run inside this sandbox (`None`: the repository has none, or the
    /// backend is not bwrap, whose hooks run as they always did).
    pub(crate) fn hooks_for(&self, repo: &crate::git::Repo) -> Option<PathBuf> {
        if self.kind != Kind::Bwrap {
            return None;
        }
        let real = repo
            .hooks_path()
            .unwrap_or_else(|| repo.git_common_dir().join("hooks"));
        let dir = self.files.path().join("hooks");
        hooks::prepare(&real, &dir, &|command| self.wrap(command, None))
    }

    /// What the limits could not be applied as asked (one warning line), if anything.
    pub(crate) fn limits_warning(&self) -> Option<&str> {
        self.limits.warning.as_deref()
    }

    /// The command that runs `command` (the agent `agent`'s) inside the sandbox.
    /// `agent`: whose keys and API hosts it gets (`None`: a command of ralph's, none).
    pub(crate) fn wrap(&self, command: &AgentCommand, agent: Option<&AgentSpec>) -> AgentCommand {
        self.wrap_writing(command, agent, &[])
    }

    /// [`Self::wrap`], with the files `writable` (made when missing) writable inside besides.
    pub(crate) fn wrap_writing(
        &self,
        command: &AgentCommand,
        agent: Option<&AgentSpec>,
        writable: &[&Path],
    ) -> AgentCommand {
        let table = env::table(agent);
        if let Some(proxy) = &self.proxy {
            proxy.allow_agent(&table.hosts);
        }
        let mut vars = env::filtered(
            std::env::vars_os(),
            &command.env,
            &table.names,
            &self.options.env,
        );
        if self.root {
            vars.insert("IS_SANDBOX".to_owned(), OsString::from("1"));
        }
        let forwards = self.proxy.as_ref().map(|proxy| {
            let forwards = proxy.forward_loopback(&vars);
            env::point_at_proxy(&mut vars, proxy::INSIDE_PORT);
            forwards
        });
        let inner = self.inner_argv(command, forwards.as_deref());
        let (program, args) = self.outer(&vars, inner, writable.iter().copied());
        let mut guard_env = Vec::new();
        if let Some(cgroups) = self.limits.cgroups_variable() {
            guard_env.push((limits::CGROUPS_VARIABLE.to_owned(), cgroups));
        }
        // bwrap stays inside as its pid 1, whose environment the agent can read: it starts with
        // the agent's own (a container's or Seatbelt's program is not visible inside).
        let clear_env = self.kind == Kind::Bwrap;
        if clear_env {
            guard_env.extend(vars);
        }
        if self.kind == Kind::Wrapper {
            // A wrapper decides what it passes in: it gets ralph's environment, as the agent did.
            guard_env.extend(command.env.iter().cloned());
        }
        AgentCommand {
            program,
            args,
            env: guard_env,
            clear_env,
            stdin: command.stdin.clone(),
            usage_file: command.usage_file.clone(),
            acp: command.acp.clone(),
        }
    }

    /// The sandbox's own program and arguments around `inner` (`vars`: the environment inside;
    /// `files`: files made writable inside).
    fn outer<'f>(
        &self,
        vars: &BTreeMap<String, OsString>,
        inner: Vec<OsString>,
        files: impl Iterator<Item = &'f Path>,
    ) -> (PathBuf, Vec<OsString>) {
        match self.kind {
            Kind::Bwrap => {
                let sockets = self.proxy.as_ref().map(|p| p.sockets()).unwrap_or_default();
                let private = self.files.path();
                let extra = (files.flat_map(touch)).chain([
                    "--bind".into(),
                    private.into(),
                    private.into(),
                ]);
                let argv = self.mounts.argv(self.options.net, vars, &sockets, extra);
                (PathBuf::from("bwrap"), [argv, inner].concat())
            }
            Kind::Docker | Kind::Podman => {
                // The private folder goes in with the proxy's sockets, at its own path.
                let mut sockets = self.proxy.as_ref().map(|p| p.sockets()).unwrap_or_default();
                let private = self.files.path().to_owned();
                sockets.push((private.clone(), private));
                let argv = container::argv(self.kind, &self.options, &self.mounts, vars, &sockets);
                (
                    PathBuf::from(self.kind.program().map_or("docker", |p| p.0)),
                    [argv, inner].concat(),
                )
            }
            Kind::Seatbelt => {
                let profile = seatbelt::profile(&self.mounts, self.options.net);
                let mut argv: Vec<OsString> =
                    vec!["-p".into(), profile.into(), "env".into(), "-i".into()];
                argv.extend(vars.iter().map(|(k, v)| env::assignment(k, v)));
                (PathBuf::from("sandbox-exec"), [argv, inner].concat())
            }
            Kind::Wrapper => {
                let wrapper = self.options.wrapper.as_deref().unwrap_or_default();
                let mut words = wrapper.split_whitespace().map(OsString::from);
                let program = words.next().unwrap_or_default();
                (PathBuf::from(program), words.chain(inner).collect())
            }
        }
    }

    /// The agent's own argv, behind ralph's bridge when the proxy is on.
    fn inner_argv(&self, command: &AgentCommand, forwards: Option<&[u16]>) -> Vec<OsString> {
        let mut inner: Vec<OsString> = Vec::new();
        // Only bwrap takes `--` before the command.
        if self.kind == Kind::Bwrap {
            inner.push("--".into());
        }
        if let (Some(proxy), Some(forwards), Ok(ralph)) =
            (&self.proxy, forwards, std::env::current_exe())
            && self.kind != Kind::Seatbelt
        {
            inner.push(ralph.into_os_string());
            inner.push(bridge::ARG.into());
            inner.extend(proxy.bridge_specs(forwards).into_iter().map(OsString::from));
            inner.push("--".into());
        }
        inner.push(command.program.clone().into_os_string());
        inner.extend(command.args.iter().cloned());
        inner
    }

    /// The hosts the proxy refused since the last call, with how often: the iteration's.
    pub(crate) fn take_blocked(&self) -> BTreeMap<String, u32> {
        self.proxy
            .as_ref()
            .map(|proxy| proxy.take_blocked())
            .unwrap_or_default()
    }

    /// The memory limit as given (`64M`), when it killed the agent that just exited with
    /// `exit_code`.
    pub(crate) fn out_of_memory(&self, exit_code: i32) -> Option<String> {
        let limit = self.options.memory?;
        let killed = exit_code == 137 || exit_code == 9;
        // The cgroup's count says so; without a cgroup, a kill under an address-space limit is
        // the likeliest cause.
        let counted = self.limits.oom_kills_since_last().is_some();
        (killed
            && (counted
                || self
                    .limits
                    .cgroups_variable()
                    .is_none_or(|v| v.to_string_lossy().starts_with("rlimits:"))))
        .then(|| limit.shown())
    }

    /// Runs `argv` (a program and its arguments) through the sandbox, to see that it starts:
    /// `Err` with what went wrong, in one line, naming the path.
    pub(crate) fn preflight(&self, agent: &AgentSpec, binary: &Path) -> Result<(), String> {
        let probe = |argv: Vec<OsString>| {
            let command = AgentCommand {
                program: PathBuf::from(&argv[0]),
                args: argv[1..].to_vec(),
                env: Vec::new(),
                clear_env: false,
                stdin: None,
                usage_file: None,
                acp: None,
            };
            self.wrap(&command, Some(agent))
        };
        // The agent's version inside; only when that fails, `true` inside tells whether the
        // sandbox itself is what fails (one sandbox started in the usual case, not two).
        let version = probe(vec![binary.as_os_str().to_owned(), "--version".into()]);
        if preflight_one(&version, binary, false) == Ok(true) {
            return Ok(());
        }
        preflight_one(&probe(vec![OsString::from("true")]), binary, true)?;
        preflight_one(&version, binary, false).map(drop)
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.limits.remove();
    }
}

/// Makes sure `path` exists (an empty file) so that it can be mounted: the mounts of it.
fn touch(path: &Path) -> Vec<OsString> {
    if !path.exists() {
        let _ = std::fs::write(path, b"");
    }
    vec!["--bind".into(), path.into(), path.into()]
}

/// Runs one preflight command with a deadline: `sandbox_only`, the sandbox's own `true`, which
/// must pass; else the agent's `--version`, which must at least start. `Ok(true)` when it exited
/// 0, `Ok(false)` when the agent ran and failed (a `--version` it does not know).
fn preflight_one(
    command: &AgentCommand,
    binary: &Path,
    sandbox_only: bool,
) -> Result<bool, String> {
    let mut process = std::process::Command::new(&command.program);
    process
        .args(&command.args)
        .stdin(std::process::Stdio::null());
    command.set_env(&mut process);
    let output =
        output_with_deadline(&mut process, std::time::Duration::from_secs(60)).map_err(|err| {
            format!(
                "the sandbox ({}) could not start: {err}",
                command.program.display()
            )
        })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let said = stderr
        .lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or_default()
        .trim()
        .to_owned();
    if output.status.success() {
        return Ok(true);
    }
    if said.contains("execvp") || said.contains("No such file") {
        return Err(format!(
            "the agent's program {} cannot be seen inside the sandbox ({said}); mount its folder with --sandbox-mount {}",
            binary.display(),
            binary
                .parent()
                .map_or_else(String::new, |p| p.display().to_string())
        ));
    }
    if sandbox_only || said.starts_with("bwrap:") {
        let said = if said.is_empty() {
            "it exited with an error, saying nothing"
        } else {
            &said
        };
        return Err(format!("the sandbox cannot start here: {said}"));
    }
    // The agent ran: a `--version` it does not know is its own business.
    Ok(false)
}

/// Runs `process` to its end, its output captured; ended after `limit`.
fn output_with_deadline(
    process: &mut std::process::Command,
    limit: std::time::Duration,
) -> std::io::Result<std::process::Output> {
    let child = process
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(0));
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(limit) {
        Ok(output) => output,
        Err(_) => {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            Err(std::io::Error::other(format!(
                "it did not end within {} s",
                limit.as_secs()
            )))
        }
    }
}
