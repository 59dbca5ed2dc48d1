//! The ACP agents ralph knows how to start (`--agent gemini-acp`, …): each a custom agent
//! definition with `protocol = "acp"` that ships with ralph.

use std::collections::BTreeMap;

use super::AgentKind;
use super::custom::{CustomAgentDef, PromptDelivery};

/// An ACP agent ralph knows how to start.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Preset {
    pub(crate) name: &'static str,
    /// The program and the arguments that make it speak ACP.
    pub(crate) command: &'static [&'static str],
    /// Arguments added for `--model` (`{model}` replaced).
    pub(crate) model_args: &'static [&'static str],
    /// Variables set for `--model`, for the agents that read the model from their environment.
    pub(crate) model_env: &'static [(&'static str, &'static str)],
    /// Arguments added with `--allow-all` (beyond granting its permission requests).
    pub(crate) allow_all_args: &'static [&'static str],
    /// The built-in agent whose CLI it is (keys and hosts under `--sandbox`).
    pub(crate) family: Option<AgentKind>,
    /// How to install it.
    pub(crate) install: &'static str,
    /// Why ralph's tests do not drive it through a turn, when they do not.
    pub(crate) untested: Option<&'static str>,
}

/// Every preset, in the order they are listed.
pub(crate) const PRESETS: [Preset; 11] = [
    Preset {
        name: "gemini-acp",
        command: &["gemini", "--acp", "--skip-trust"],
        model_args: &["-m", "{model}"],
        model_env: &[],
        allow_all_args: &[],
        family: Some(AgentKind::Gemini),
        install: "npm install -g @google/gemini-cli",
        untested: None,
    },
    Preset {
        name: "qwen-acp",
        command: &["qwen", "--acp"],
        model_args: &["-m", "{model}"],
        model_env: &[],
        allow_all_args: &[],
        family: Some(AgentKind::Qwen),
        install: "npm install -g @qwen-code/qwen-code",
        untested: None,
    },
    Preset {
        name: "opencode-acp",
        command: &["opencode", "acp"],
        model_args: &[],
        // `opencode acp` has no model option; its configuration has.
        model_env: &[("OPENCODE_CONFIG_CONTENT", r#"{"model":"{model}"}"#)],
        allow_all_args: &[],
        family: Some(AgentKind::OpenCode),
        install: "npm install -g opencode-ai",
        untested: None,
    },
    Preset {
        name: "copilot-acp",
        command: &["copilot", "--acp"],
        model_args: &["--model", "{model}"],
        model_env: &[],
        allow_all_args: &[],
        family: Some(AgentKind::Copilot),
        install: "npm install -g @github/copilot",
        untested: None,
    },
    Preset {
        name: "droid-acp",
        command: &["droid", "exec", "--output-format", "acp"],
        model_args: &["-m", "{model}"],
        model_env: &[],
        allow_all_args: &[],
        family: Some(AgentKind::Droid),
        install: "npm install -g @factory/cli",
        untested: None,
    },
    Preset {
        name: "kilocode-acp",
        command: &["kilocode", "acp"],
        model_args: &[],
        model_env: &[("KILO_CONFIG_CONTENT", r#"{"model":"{model}"}"#)],
        allow_all_args: &[],
        family: Some(AgentKind::KiloCode),
        install: "npm install -g @kilocode/cli",
        untested: None,
    },
    Preset {
        name: "claude-acp",
        command: &["claude-agent-acp"],
        model_args: &[],
        model_env: &[("ANTHROPIC_MODEL", "{model}")],
        allow_all_args: &[],
        family: Some(AgentKind::ClaudeCode),
        install: "npm install -g @zed-industries/claude-agent-acp",
        untested: None,
    },
    Preset {
        name: "codex-acp",
        command: &["codex-acp"],
        model_args: &["-c", "model=\"{model}\""],
        model_env: &[],
        // Its default sandbox does not let a command write the work tree.
        allow_all_args: &["-c", "sandbox_mode=\"workspace-write\""],
        family: Some(AgentKind::Codex),
        install: "npm install -g @zed-industries/codex-acp",
        untested: None,
    },
    Preset {
        name: "cursor-acp",
        command: &["cursor-agent", "acp"],
        model_args: &["--model", "{model}"],
        model_env: &[],
        allow_all_args: &[],
        family: None,
        install: "curl https://cursor.com/install -fsS | bash",
        untested: Some("needs a Cursor account; it cannot be pointed at a local model"),
    },
    Preset {
        name: "goose-acp",
        command: &["goose", "acp"],
        model_args: &[],
        model_env: &[("GOOSE_MODEL", "{model}")],
        allow_all_args: &[],
        family: None,
        install: "see https://block.github.io/goose/docs/getting-started/installation",
        untested: Some("not installable from npm or PyPI here"),
    },
    Preset {
        name: "kiro-acp",
        command: &["kiro-cli", "acp"],
        model_args: &["--model", "{model}"],
        model_env: &[],
        allow_all_args: &[],
        family: None,
        install: "see https://kiro.dev/docs/cli/installation",
        untested: Some("needs a Kiro account; it cannot be pointed at a local model"),
    },
];

/// The preset of this name.
pub(crate) fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|preset| preset.name == name)
}

impl Preset {
    /// The agent definition it stands for: an ACP agent that knows how to pass the model.
    pub(crate) fn definition(&self) -> CustomAgentDef {
        let strings = |words: &[&str]| words.iter().map(|word| (*word).to_owned()).collect();
        CustomAgentDef {
            model_args: strings(self.model_args),
            model_env: (self.model_env.iter())
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect(),
            allow_all_args: strings(self.allow_all_args),
            family: self.family,
            ..acp_definition(self.name, strings(self.command))
        }
    }
}

/// An ACP agent named `name` that runs `command` (the program, then its arguments) and knows
/// nothing else of it (`--agent acp --acp-command …`).
pub(crate) fn acp_definition(name: &str, mut command: Vec<String>) -> CustomAgentDef {
    let program = if command.is_empty() {
        String::new()
    } else {
        command.remove(0)
    };
    CustomAgentDef {
        name: name.to_owned(),
        command: program,
        args: command,
        model_args: Vec::new(),
        model_env: BTreeMap::new(),
        allow_all_args: Vec::new(),
        prompt: PromptDelivery::Acp,
        events: None,
        tool_pattern: None,
        env: BTreeMap::new(),
        sandbox_env: Vec::new(),
        sandbox_hosts: Vec::new(),
        family: None,
        tools_args: Vec::new(),
    }
}
