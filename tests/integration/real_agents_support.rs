//! Helpers for the end-to-end tests with the real agent CLIs: where the installed CLIs are
//! (`tests/e2e/install-agents.sh`), the hermetic environment that points each CLI at the mock
//! model server (temporary `HOME`, `CODEX_HOME`, OpenCode's inline config), direct CLI commands for
//! recording fixtures, and the assertions on ralph's history that depend on the agents' JSON
//! event streams.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::mock_model::MockModel;
use crate::support::run_with_deadline;

/// How many real CLIs run at once. Each start of one is seconds of CPU (a Kilo Code run is about
/// seven), so the suite's sixteen test threads running them all together on a two-core machine
/// made each run take minutes; the rest of the suite goes on beside them.
const AGENT_SLOTS: usize = 4;

/// The real CLIs running now, out of [`AGENT_SLOTS`].
static RUNNING: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// Runs `command` (a real CLI, or ralph driving one) to its end or `limit`, once one of the
/// [`AGENT_SLOTS`] is free; the wait for the slot is not part of `limit`.
pub(crate) fn run_agent_with_deadline(command: &mut Command, limit: Duration) -> Output {
    let (running, freed) = &RUNNING;
    {
        let mut count = running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while *count >= AGENT_SLOTS {
            count = freed
                .wait(count)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        *count += 1;
    }
    /// Gives the slot back, also when the run panics.
    struct Slot;
    impl Drop for Slot {
        fn drop(&mut self) {
            let (running, freed) = &RUNNING;
            *running
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) -= 1;
            freed.notify_one();
        }
    }
    let _slot = Slot;
    run_with_deadline(command, limit)
}

/// The environment variable holding the API key the mock provider expects (any value works).
const MOCK_KEY_VAR: &str = "RALPH_MOCK_API_KEY";
const MOCK_KEY: &str = "sk-mock";

/// One of the real agent CLIs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Agent {
    Claude,
    Codex,
    OpenCode,
    Gemini,
    Qwen,
    Pi,
    Copilot,
    Droid,
    KiloCode,
    Cline,
    Aider,
}

impl Agent {
    /// Every agent, the first three first.
    pub(crate) const ALL: [Self; 11] = [
        Self::Claude,
        Self::Codex,
        Self::OpenCode,
        Self::Gemini,
        Self::Qwen,
        Self::Pi,
        Self::Copilot,
        Self::Droid,
        Self::KiloCode,
        Self::Cline,
        Self::Aider,
    ];

    /// The executable's name in `node_modules/.bin`.
    pub(crate) fn binary_name(self) -> &'static str {
        match self {
            Self::Claude => "claude",
            Self::Codex => "codex",
            Self::OpenCode => "opencode",
            Self::Gemini => "gemini",
            Self::Qwen => "qwen",
            Self::Pi => "pi",
            Self::Copilot => "copilot",
            Self::Droid => "droid",
            Self::KiloCode => "kilocode",
            Self::Cline => "cline",
            Self::Aider => "aider",
        }
    }

    /// ralph's `--agent` value.
    pub(crate) fn ralph_name(self) -> &'static str {
        match self {
            Self::Claude => "claude-code",
            other => other.binary_name(),
        }
    }

    /// ralph's variable naming the executable.
    fn binary_var(self) -> String {
        let name = match self {
            Self::Claude => "claude",
            other => other.binary_name(),
        };
        format!("RALPH_{}_BINARY", name.to_uppercase())
    }

    /// The `--model` value that selects the mock model.
    pub(crate) fn model(self) -> &'static str {
        match self {
            Self::OpenCode | Self::Pi => "mock/mock-model",
            Self::Droid => "custom:mock-model",
            Self::KiloCode => "mock/mock-model",
            Self::Aider => "openai/mock-model",
            _ => "mock-model",
        }
    }

    /// Arguments ralph passes to the agent after `--`: OpenCode runs without external plugins,
    /// Qwen Code with an OpenAI-compatible endpoint.
    pub(crate) fn extra_args(self) -> &'static [&'static str] {
        match self {
            Self::OpenCode | Self::KiloCode => &["--pure"],
            Self::Qwen => &["--auth-type", "openai"],
            _ => &[],
        }
    }

    /// The `--iteration-timeout` a failing run needs where the CLI retries for minutes and has
    /// no setting to fail fast (Droid retries a 5xx for about 250 s). Qwen Code's start alone
    /// takes over 20 s when the whole suite loads two cores: it gets more, so that it reaches the
    /// mock before the timeout.
    pub(crate) fn failure_timeout(self) -> Option<&'static str> {
        match self {
            Self::Droid => Some("20s"),
            Self::Qwen => Some("45s"),
            _ => None,
        }
    }

    /// The installed executable, if `tests/e2e/install-agents.sh` put it in the cache (the npm
    /// packages' `node_modules/.bin`, or Aider's virtual environment).
    pub(crate) fn installed(self) -> Option<PathBuf> {
        let cache = agent_cache();
        let path = match self {
            Self::Aider => cache.join("python/bin/aider"),
            _ => cache.join("node_modules/.bin").join(self.binary_name()),
        };
        path.is_file().then_some(path)
    }

    /// The installed executable, or `None` after printing one line saying why the test is skipped.
    #[allow(
        clippy::print_stderr,
        reason = "the one line that explains a skipped test"
    )]
    pub(crate) fn installed_or_skip(self) -> Option<PathBuf> {
        let found = self.installed();
        if found.is_none() {
            eprintln!(
                "skipping: {} not installed in {}; run tests/e2e/install-agents.sh",
                self.binary_name(),
                agent_cache().display()
            );
        }
        found
    }
}

/// An executable `tests/e2e/install-agents.sh` put in the cache's `node_modules/.bin` (an ACP
/// adapter), or `None` after one line saying why the test is skipped.
#[allow(
    clippy::print_stderr,
    reason = "the one line that explains a skipped test"
)]
pub(crate) fn installed_program(name: &str) -> Option<PathBuf> {
    let path = agent_cache().join("node_modules/.bin").join(name);
    if path.is_file() {
        return Some(path);
    }
    eprintln!(
        "skipping: {name} not installed in {}; run tests/e2e/install-agents.sh",
        agent_cache().display()
    );
    None
}

/// Where `tests/e2e/install-agents.sh` installs the CLIs.
pub(crate) fn agent_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("RALPH_AGENT_CACHE").filter(|dir| !dir.is_empty()) {
        return PathBuf::from(dir);
    }
    // The same fallback as tests/e2e/install-agents.sh.
    let home = std::env::var_os("HOME").unwrap_or_else(|| OsString::from("/tmp/ralph-no-home"));
    PathBuf::from(home).join(".cache").join("ralph-agents")
}

/// The environment that points one agent CLI at the mock, with its configuration files written
/// under a directory of the test.
pub(crate) struct AgentSetup {
    agent: Agent,
    binary: PathBuf,
    vars: Vec<(String, OsString)>,
    /// Folders the agent reads its configuration from that no variable names (mounted writable
    /// into the sandbox).
    folders: Vec<PathBuf>,
}

/// Options of the agent's configuration that the permission tests change.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SetupOptions {
    /// OpenCode: `"permission": {"edit": "ask"}` instead of allowing edits.
    pub(crate) opencode_edit_ask: bool,
}

/// What an agent's configuration takes from the test: variables, and folders no variable names.
#[derive(Default)]
struct Gathered {
    vars: Vec<(String, OsString)>,
    folders: Vec<PathBuf>,
}

impl Gathered {
    fn set(&mut self, name: &str, value: OsString) {
        self.vars.push((name.to_owned(), value));
    }
}

/// OpenCode and Kilo Code (built on it): the configuration itself in a variable, and variables
/// that turn off what the tests cannot reach.
fn configured_by_content(
    agent: Agent,
    mock: &MockModel,
    options: SetupOptions,
    found: &mut Gathered,
) {
    match agent {
        Agent::OpenCode => {
            found.set(
                "OPENCODE_CONFIG_CONTENT",
                opencode_config(mock, options).to_string().into(),
            );
            for name in [
                "OPENCODE_DISABLE_MODELS_FETCH",
                "OPENCODE_DISABLE_AUTOUPDATE",
                "OPENCODE_DISABLE_DEFAULT_PLUGINS",
                "OPENCODE_DISABLE_SHARE",
                "OPENCODE_DISABLE_LSP_DOWNLOAD",
            ] {
                found.set(name, "1".into());
            }
        }
        Agent::KiloCode => {
            // Kilo Code is built on OpenCode: the same configuration, its own variables.
            found.set(
                "KILO_CONFIG_CONTENT",
                opencode_config(mock, options).to_string().into(),
            );
            for name in [
                "KILO_DISABLE_MODELS_FETCH",
                "KILO_DISABLE_AUTOUPDATE",
                "KILO_DISABLE_DEFAULT_PLUGINS",
                "KILO_DISABLE_SHARE",
                "KILO_DISABLE_CODEBASE_INDEXING",
                "KILO_DISABLE_LSP_DOWNLOAD",
                "KILO_DISABLE_SESSION_INGEST",
                "KILO_DISABLE_PRESENCE",
                "KILO_DISABLE_FFF",
                "KILO_DISABLE_EMBEDDED_WEB_UI",
                "KILO_EXPERIMENTAL_DISABLE_FILEWATCHER",
                "KILO_DISABLE_CLAUDE_CODE",
                "KILO_DISABLE_EXTERNAL_SKILLS",
            ] {
                found.set(name, "1".into());
            }
            // No telemetry: its shutdown waits 1.6 s for a host the tests cannot reach.
            found.set("KILO_TELEMETRY_LEVEL", "off".into());
        }
        _ => {}
    }
}

/// The agents configured by files in their `HOME` (settings, providers, models), with a few
/// variables beside.
fn configured_by_files(
    agent: Agent,
    mock: &MockModel,
    (root, home): (&Path, &Path),
    found: &mut Gathered,
) {
    match agent {
        Agent::Gemini => {
            write_json(
                &home.join(".gemini/settings.json"),
                &json!({
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                "privacy": {"usageStatisticsEnabled": false},
                "general": {"maxAttempts": 1}}),
            );
            found.set("GEMINI_API_KEY", MOCK_KEY.into());
            found.set("GOOGLE_GEMINI_BASE_URL", mock.url().into());
            // API errors leave a report in the temporary directory.
            let tmp = root.join("tmp");
            fs::create_dir_all(&tmp).expect("create TMPDIR");
            found.set("TMPDIR", tmp.into_os_string());
        }
        Agent::Qwen => {
            write_json(
                &home.join(".qwen/settings.json"),
                &json!({
                "privacy": {"usageStatisticsEnabled": false},
                // Through ACP, Qwen Code asks the model for a follow-up suggestion after
                // each turn: one more model call per iteration.
                "ui": {"enableFollowupSuggestions": false},
                "memory": {"enableManagedAutoMemory": false, "enableManagedAutoDream": false},
                "model": {"generationConfig": {"maxRetries": 0}}}),
            );
            found.set("OPENAI_API_KEY", MOCK_KEY.into());
            found.set("OPENAI_BASE_URL", format!("{}/v1", mock.url()).into());
        }
        Agent::Pi => {
            write_json(
                &home.join(".pi/agent/models.json"),
                &json!({"providers": {"mock": {
                "baseUrl": format!("{}/v1", mock.url()), "api": "openai-completions",
                "apiKey": MOCK_KEY,
                "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
                "models": [{"id": "mock-model", "contextWindow": 200_000, "maxTokens": 32_000,
                    "cost": {"input": 3, "output": 15, "cacheRead": 0, "cacheWrite": 0}}]}}}),
            );
            write_json(
                &home.join(".pi/agent/settings.json"),
                &json!({"retry": {"enabled": false, "provider": {"maxRetries": 0}}}),
            );
            found.set("PI_OFFLINE", "1".into());
        }
        Agent::Cline => {
            write_json(
                &home.join(".cline/data/settings/providers.json"),
                &json!({"version": 1, "lastUsedProvider": "openai-compatible", "modes": {},
                "providers": {"openai-compatible": {"settings": {
                    "provider": "openai-compatible", "apiKey": MOCK_KEY, "model": "mock-model",
                    "baseUrl": format!("{}/v1", mock.url())},
                    // Without it Cline takes the file for broken and writes its own.
                    "updatedAt": "2026-01-01T00:00:00.000Z", "tokenSource": "manual"}}}),
            );
            // As ralph runs it: no hub daemon outliving the run.
            found.set("CLINE_SESSION_BACKEND_MODE", "local".into());
            found.folders.push(home.join(".cline"));
        }
        Agent::Droid => {
            write_json(
                &home.join(".factory/settings.json"),
                &json!({"customModels": [{
                "model": "mock-model", "displayName": "Mock",
                "baseUrl": format!("{}/v1", mock.url()), "apiKey": MOCK_KEY,
                "provider": "generic-chat-completion-api", "maxOutputTokens": 32_000}]}),
            );
            found.set("FACTORY_AIRGAP_ENABLED", "true".into());
        }
        _ => {}
    }
}

impl AgentSetup {
    /// Writes the agent's configuration under `root` (which must exist) for the `mock` server.
    pub(crate) fn new(agent: Agent, binary: &Path, mock: &MockModel, root: &Path) -> Self {
        Self::with_options(agent, binary, mock, root, SetupOptions::default())
    }

    pub(crate) fn with_options(
        agent: Agent,
        binary: &Path,
        mock: &MockModel,
        root: &Path,
        options: SetupOptions,
    ) -> Self {
        // The `HOME` of the test environment and of the recorded runs.
        let home = root.join("home");
        let mut found = Gathered::default();
        match agent {
            Agent::Claude => {
                found.set("ANTHROPIC_BASE_URL", mock.url().into());
                found.set("ANTHROPIC_API_KEY", MOCK_KEY.into());
                // `--dangerously-skip-permissions` refuses to run as root without it.
                found.set("IS_SANDBOX", "1".into());
                found.set("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into());
                found.set("CLAUDE_CODE_MAX_RETRIES", "0".into());
                found.set("DISABLE_AUTOUPDATER", "1".into());
                found.set("DISABLE_TELEMETRY", "1".into());
                found.set("DISABLE_ERROR_REPORTING", "1".into());
            }
            Agent::Codex => {
                // Codex's workspace-write sandbox runs the first bwrap on PATH, and an older
                // one (Debian 12's 0.8) lacks options it passes: the tool's writes then fail
                // without a word. The bwrap Codex ships goes first on the test's PATH.
                if let Some(bundled) = codex_bwrap(binary) {
                    let _ = std::os::unix::fs::symlink(bundled, root.join("bin/bwrap"));
                }
                let codex_home = root.join("codex-home");
                fs::create_dir_all(&codex_home).expect("create CODEX_HOME");
                fs::write(codex_home.join("config.toml"), codex_config(mock))
                    .expect("write codex config.toml");
                found.set("CODEX_HOME", codex_home.into_os_string());
                found.set(MOCK_KEY_VAR, MOCK_KEY.into());
            }
            Agent::Copilot => {
                found.set(
                    "COPILOT_PROVIDER_BASE_URL",
                    format!("{}/v1", mock.url()).into(),
                );
                found.set("COPILOT_PROVIDER_API_KEY", MOCK_KEY.into());
                found.set("COPILOT_MODEL", "mock-model".into());
                found.set("COPILOT_OFFLINE", "true".into());
                // The CLI unpacks about 235 MB there on its first run: share it between tests.
                found.set(
                    "XDG_CACHE_HOME",
                    agent_cache().join("xdg-cache").into_os_string(),
                );
            }
            Agent::Aider => {
                found.set("OPENAI_API_BASE", format!("{}/v1", mock.url()).into());
                found.set("OPENAI_API_KEY", MOCK_KEY.into());
            }
            Agent::OpenCode | Agent::KiloCode => {
                configured_by_content(agent, mock, options, &mut found)
            }
            _ => configured_by_files(agent, mock, (root, &home), &mut found),
        }
        Self {
            agent,
            binary: binary.to_owned(),
            vars: found.vars,
            folders: found.folders,
        }
    }

    /// Adds the agent's variables and ralph's binary variable to a ralph command.
    pub(crate) fn apply_to_ralph(&self, command: &mut Command) {
        command.env(self.agent.binary_var(), &self.binary);
        for (name, value) in &self.vars {
            command.env(name, value);
        }
    }

    /// ralph's `--sandbox bwrap` arguments for this agent against `mock`: its variables passed
    /// in, the folders they name mounted writable, the mock model's port allowed.
    pub(crate) fn sandbox_args(&self, mock: &MockModel) -> Vec<String> {
        let port = mock.url().rsplit(':').next().unwrap_or_default().to_owned();
        let mut args = vec![
            "--sandbox".to_owned(),
            "bwrap".to_owned(),
            "--sandbox-allow".to_owned(),
            format!("127.0.0.1:{port}"),
        ];
        for (name, value) in &self.vars {
            args.extend(["--sandbox-env".to_owned(), name.clone()]);
            let path = Path::new(value);
            if path.is_absolute() && path.is_dir() {
                args.extend([
                    "--sandbox-mount".to_owned(),
                    format!("{}:rw", path.display()),
                ]);
            }
        }
        for folder in &self.folders {
            args.extend([
                "--sandbox-mount".to_owned(),
                format!("{}:rw", folder.display()),
            ]);
        }
        args
    }

    /// The CLI itself with `args`, run in `cwd` with a clean environment and `home` as `HOME`.
    pub(crate) fn direct(&self, cwd: &Path, home: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .current_dir(cwd)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", home)
            .env("NO_COLOR", "1")
            .env("TERM", "dumb")
            .args(args)
            .stdin(std::process::Stdio::null());
        for (name, value) in &self.vars {
            command.env(name, value);
        }
        command
    }
}

/// Writes a JSON configuration file, creating its directory.
fn write_json(path: &Path, value: &Value) {
    fs::create_dir_all(path.parent().expect("a directory")).expect("create the config directory");
    fs::write(path, value.to_string()).expect("write the config file");
}

/// The bwrap Codex ships (`@openai/codex-*/vendor/*/codex-resources/bwrap` in the same
/// `node_modules`), when there is one.
fn codex_bwrap(binary: &Path) -> Option<PathBuf> {
    let node_modules = binary
        .ancestors()
        .find(|dir| dir.ends_with("node_modules"))?;
    for package in fs::read_dir(node_modules.join("@openai")).ok()?.flatten() {
        for target in fs::read_dir(package.path().join("vendor"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let bwrap = target.path().join("codex-resources/bwrap");
            if bwrap.is_file() {
                return Some(bwrap);
            }
        }
    }
    None
}

/// Codex's `config.toml`: a custom provider on the Responses API that fails fast.
fn codex_config(mock: &MockModel) -> String {
    format!(
        r#"model = "mock-model"
model_provider = "mock"
approval_policy = "never"

[model_providers.mock]
name = "Mock LLM"
base_url = "{url}/v1"
env_key = "{MOCK_KEY_VAR}"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"#,
        url = mock.url()
    )
}

/// OpenCode's inline configuration: the mock provider, with prices so that cost is reported.
fn opencode_config(mock: &MockModel, options: SetupOptions) -> Value {
    let mut config = json!({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"mock": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Mock LLM",
            "options": {"baseURL": format!("{}/v1", mock.url()), "apiKey": MOCK_KEY},
            "models": {"mock-model": {
                "name": "Mock Model",
                "cost": {"input": 3, "output": 15},
                "limit": {"context": 200_000, "output": 32_000}}}}},
        "model": "mock/mock-model",
        "small_model": "mock/mock-model",
        "autoupdate": false,
        "share": "disabled",
    });
    if options.opencode_edit_ask {
        config["permission"] = json!({"edit": "ask"});
    }
    config
}

/// The iterations of `.ralph/ralph-history.json`.
pub(crate) fn history_iterations(history: &Value) -> Vec<Value> {
    history["iterations"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Assertions on what ralph learns from the agents' JSON event streams about an iteration in
/// which the mock wrote a file with a tool: the tool counted in `tools_used`, a non-zero count in
/// `tokens`, the agent's `session_id`, and, for the agents that report one, a positive `cost_usd`.
///
/// Kept in one place so the field and tool names can follow ralph's history format.
#[track_caller]
pub(crate) fn assert_structured_findings(record: &Value, agent: Agent) {
    // The names ralph gives the mock's write: Claude's `Write` tool, OpenCode's `write` tool and
    // Codex's `command_execution` item (the mock writes with a shell command there).
    let write_tool = match agent {
        Agent::Claude | Agent::OpenCode | Agent::Pi => "Write",
        Agent::Codex => "Shell",
        Agent::Gemini | Agent::Qwen => "Write_file",
        Agent::Copilot | Agent::Droid => "Create",
        Agent::KiloCode => "Write",
        Agent::Cline => "Editor",
        Agent::Aider => "edit",
    };
    let tools = record["tools_used"].as_object();
    let wrote = tools.is_some_and(|tools| {
        tools
            .keys()
            .any(|name| name.eq_ignore_ascii_case(write_tool))
    });
    assert!(
        wrote,
        "{agent:?}: tools_used has no {write_tool:?} entry: {record:#}"
    );
    assert!(
        count_tokens(&record["tokens"]) > 0,
        "{agent:?}: no tokens recorded: {record:#}"
    );
    // Aider has no session id to report.
    assert!(
        agent == Agent::Aider
            || record["session_id"]
                .as_str()
                .is_some_and(|id| !id.is_empty()),
        "{agent:?}: no session id recorded: {record:#}"
    );
    if matches!(
        agent,
        Agent::Claude | Agent::OpenCode | Agent::Pi | Agent::KiloCode
    ) {
        assert!(
            record["cost_usd"].as_f64().is_some_and(|cost| cost > 0.0),
            "{agent:?}: no cost recorded: {record:#}"
        );
    }
}

/// Assertion on what ralph learns from the agents' JSON event streams about an iteration in
/// which the model failed with HTTP 500: a `failure` is recorded.
///
/// Kept in one place so the field name can follow ralph's history format.
#[track_caller]
pub(crate) fn assert_failure_recorded(record: &Value, agent: Agent) {
    assert!(
        !record["failure"].is_null(),
        "{agent:?}: no failure recorded: {record:#}"
    );
}

/// The sum of the numbers in a `tokens` value (a number or an object of numbers, nested).
fn count_tokens(value: &Value) -> u64 {
    match value {
        Value::Number(number) => number.as_u64().unwrap_or(0),
        Value::Object(map) => map.values().map(count_tokens).sum(),
        _ => 0,
    }
}
