//! ralph's tools for the agents it runs: the MCP server `ralph __agent-tools`, bound to one
//! run, task and iteration, as each agent is given it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// ralph's MCP server for the agent of one iteration: the program and its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ToolServer {
    pub(crate) command: String,
    pub(crate) args: Vec<String>,
}

/// The hidden first argument that starts ralph's MCP server for an agent (`ralph __agent-tools`).
pub(crate) const TOOLS_ARG: &str = "__agent-tools";

/// The run, task and iteration the server is bound to.
#[derive(Clone, Debug)]
pub(crate) struct ToolBinding {
    /// The run's `.ralph/` (where questions wait, where `ralph --answer` finds them).
    pub(crate) home: PathBuf,
    /// The loop's `.ralph/` (its task list and progress log: a task's worktree's own).
    pub(crate) dir: PathBuf,
    pub(crate) task: Option<String>,
    pub(crate) iteration: u32,
    pub(crate) ask_timeout: Duration,
}

impl ToolBinding {
    /// The server for this binding: ralph's own program with [`ToolBinding::args`] (`None` when
    /// ralph cannot tell where its program is).
    pub(crate) fn server(&self) -> Option<ToolServer> {
        let exe = std::env::current_exe().ok()?;
        Some(ToolServer {
            command: exe.to_string_lossy().into_owned(),
            args: self.args(),
        })
    }

    /// The arguments that start the server for this binding (after the program).
    pub(crate) fn args(&self) -> Vec<String> {
        let mut args = vec![
            TOOLS_ARG.to_owned(),
            "--home".to_owned(),
            self.home.display().to_string(),
            "--dir".to_owned(),
            self.dir.display().to_string(),
            "--iteration".to_owned(),
            self.iteration.to_string(),
            "--ask-timeout".to_owned(),
            self.ask_timeout.as_millis().to_string(),
        ];
        if let Some(task) = &self.task {
            args.extend(["--task".to_owned(), task.clone()]);
        }
        args
    }

    /// Reads [`Binding::args`] back.
    pub(crate) fn parse(args: impl Iterator<Item = OsString>) -> Result<Self, String> {
        let mut binding = Self {
            home: PathBuf::new(),
            dir: PathBuf::new(),
            task: None,
            iteration: 0,
            ask_timeout: Duration::from_secs(900),
        };
        let mut args = args.map(|arg| arg.to_string_lossy().into_owned());
        while let Some(flag) = args.next() {
            let value = args.next().ok_or(format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--home" => binding.home = value.into(),
                "--dir" => binding.dir = value.into(),
                "--task" => binding.task = Some(value),
                "--iteration" => binding.iteration = value.parse().map_err(|_| "--iteration")?,
                "--ask-timeout" => {
                    let ms = value.parse().map_err(|_| "--ask-timeout")?;
                    binding.ask_timeout = Duration::from_millis(ms);
                }
                other => return Err(format!("unknown argument {other}")),
            }
        }
        if binding.home.as_os_str().is_empty() || binding.dir.as_os_str().is_empty() {
            return Err("--home and --dir are needed".to_owned());
        }
        Ok(binding)
    }
}

/// The name the agents know ralph's MCP server by (Claude Code's tools are `mcp__ralph__…`).
pub(crate) const TOOL_SERVER: &str = "ralph";

impl ToolServer {
    /// `{"mcpServers": {"ralph": {…}}}` with the server's entry (`extra`: fields an agent's
    /// format wants besides the command and its arguments).
    pub(crate) fn mcp_servers_json(&self, extra: &serde_json::Value) -> String {
        let mut server = serde_json::json!({"command": self.command, "args": self.args});
        if let (Some(server), Some(extra)) = (server.as_object_mut(), extra.as_object()) {
            server.extend(extra.clone());
        }
        serde_json::json!({"mcpServers": {TOOL_SERVER: server}}).to_string()
    }
}

/// How an agent that reads MCP servers only from a file of its config folder gets ralph's tools:
/// `variable` points it at a home of ralph's (`.ralph/agent-homes/<agent>`), whose `folder`
/// mirrors the user's (`storage::agent_home`), `file` in it written by `with_tools`.
#[derive(Clone, Copy)]
pub(crate) struct ConfigHome {
    /// The variable naming the home the agent reads its folder from (the user's own, when they
    /// set it, is the folder mirrored; else `HOME`'s).
    pub(crate) variable: &'static str,
    /// The config folder in a home: `.gemini`, `.factory`.
    pub(crate) folder: &'static str,
    /// The file naming its MCP servers: `settings.json`, `mcp.json`.
    pub(crate) file: &'static str,
    /// The file (the user's, if any) with ralph's server added.
    pub(crate) with_tools: fn(&ToolServer, Option<serde_json::Value>) -> serde_json::Value,
}

impl ConfigHome {
    /// The user's config folder, from the environment `var` reads.
    pub(crate) fn users_folder(&self, var: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
        let home = var(self.variable)
            .filter(|value| !value.is_empty())
            .or_else(|| var("HOME"))?;
        Some(PathBuf::from(home).join(self.folder))
    }
}

/// The variable pointing an agent at the home ralph wrote for it (`request.tools_file`), when
/// the request has tools.
pub(super) fn tools_home_env(
    request: &super::CommandRequest<'_>,
    home: &ConfigHome,
) -> Vec<(String, OsString)> {
    (request.tools_file.filter(|_| request.tools.is_some()))
        .map(|path| (home.variable.to_owned(), path.as_os_str().to_owned()))
        .into_iter()
        .collect()
}

/// `settings` (an object, else a new one) with ralph's server as `<servers>.ralph`: `server`
/// (`servers`: the key of the agent's table of MCP servers, `mcpServers` or OpenCode's `mcp`).
pub(crate) fn with_server(
    settings: Option<serde_json::Value>,
    servers: &str,
    server: serde_json::Value,
) -> serde_json::Value {
    let mut settings =
        (settings.filter(serde_json::Value::is_object)).unwrap_or_else(|| serde_json::json!({}));
    if !settings[servers].is_object() {
        settings[servers] = serde_json::json!({});
    }
    settings[servers][TOOL_SERVER] = server;
    settings
}
