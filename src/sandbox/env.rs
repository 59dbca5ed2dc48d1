//! What a sandboxed agent's environment holds: a few general variables, the agent's own key and
//! base-URL variables, what ralph sets for it, the `--sandbox-env` extras; nothing else
//! (`GITHUB_TOKEN`, `AWS_*`, `SSH_AUTH_SOCK` stay out).

use std::collections::BTreeMap;
use std::ffi::OsString;

use crate::agents::{AgentKind, AgentSpec};

/// Passed to every agent.
const GENERAL: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "TERM",
    "TZ",
    "USER",
    "LOGNAME",
    "COLORTERM",
    "NO_COLOR",
];

/// An agent's variables (names, or prefixes when they end in `*`) and the API hosts it needs.
pub(super) struct Table {
    pub(super) names: Vec<String>,
    pub(super) hosts: Vec<String>,
}

/// The variables and hosts of `agent`.
pub(super) fn table(agent: Option<&AgentSpec>) -> Table {
    let kind = match agent {
        Some(AgentSpec::Builtin(kind)) => Some(*kind),
        Some(AgentSpec::Custom(def)) => def.events.or(def.family),
        None => None,
    };
    let mut table = Table {
        names: Vec::new(),
        hosts: Vec::new(),
    };
    let add = |into: &mut Vec<String>, list: &[&str]| {
        into.extend(list.iter().map(|item| (*item).to_owned()));
    };
    if let Some(&(_, names, hosts, providers)) = ACCESS.iter().find(|entry| Some(entry.0) == kind) {
        add(&mut table.names, names);
        add(&mut table.hosts, hosts);
        if providers {
            add(&mut table.names, PROVIDER_KEYS);
            add(&mut table.hosts, PROVIDER_HOSTS);
        }
    }
    // A custom agent names its own (`sandbox_env`, `sandbox_hosts` in `[agents.NAME]`).
    if let Some(AgentSpec::Custom(def)) = agent {
        table.names.extend(def.sandbox_env.iter().cloned());
        table.hosts.extend(def.sandbox_hosts.iter().cloned());
    }
    table
}

/// The keys and API hosts of the model providers that the CLIs which speak to any of them
/// (OpenCode, Kilo Code, Cline, Crush, Aider) may need.
const PROVIDER_KEYS: &[&str] = &[
    "ANTHROPIC_*",
    "OPENAI_*",
    "OPENROUTER_*",
    "GEMINI_*",
    "GOOGLE_*",
    "GROQ_*",
    "XAI_*",
    "DEEPSEEK_*",
    "MISTRAL_*",
];
const PROVIDER_HOSTS: &[&str] = &[
    "api.anthropic.com",
    "api.openai.com",
    "openrouter.ai",
    "generativelanguage.googleapis.com",
];

/// Per built-in agent: its own variables (names, or prefixes ending in `*`), its API hosts, and
/// whether it also gets every provider's ([`PROVIDER_KEYS`], [`PROVIDER_HOSTS`]).
#[rustfmt::skip]
const ACCESS: [(AgentKind, &[&str], &[&str], bool); 13] = [
    (AgentKind::ClaudeCode, &["ANTHROPIC_*", "CLAUDE_*", "DISABLE_*"],
        &["api.anthropic.com", "statsig.anthropic.com", "console.anthropic.com"], false),
    (AgentKind::Codex, &["OPENAI_*", "CODEX_*"],
        &["api.openai.com", "chatgpt.com", "auth.openai.com"], false),
    (AgentKind::OpenCode, &["OPENCODE*"], &["models.dev", "opencode.ai"], true),
    (AgentKind::Gemini, &["GEMINI_*", "GOOGLE_*"], &["generativelanguage.googleapis.com",
        "oauth2.googleapis.com", "cloudcode-pa.googleapis.com"], false),
    (AgentKind::Qwen, &["QWEN_*", "OPENAI_*", "DASHSCOPE_*"],
        &["dashscope.aliyuncs.com", "chat.qwen.ai"], false),
    (AgentKind::Pi, &["PI_*", "ANTHROPIC_*", "OPENAI_*", "GEMINI_*"],
        &["api.anthropic.com", "api.openai.com"], false),
    (AgentKind::Copilot, &["COPILOT_*"],
        &["api.githubcopilot.com", "api.github.com", "github.com"], false),
    (AgentKind::Droid, &["FACTORY_*"], &["api.factory.ai", "app.factory.ai"], false),
    (AgentKind::KiloCode, &["KILO_*"], &["api.kilo.ai", "kilo.ai", "models.dev"], true),
    (AgentKind::Cline, &["CLINE_*"], &["api.cline.bot"], true),
    (AgentKind::Crush, &["CRUSH_*"], &["catwalk.charm.sh"], true),
    (AgentKind::Aider, &["AIDER_*"], &[], true),
    (AgentKind::Vibe, &["MISTRAL_*", "VIBE_*"], &["api.mistral.ai"], false),
];

/// Whether `name` is one of `patterns` (a name, or a prefix ending in `*`).
fn listed(name: &str, patterns: &[impl AsRef<str>]) -> bool {
    patterns.iter().any(|pattern| {
        let pattern = pattern.as_ref();
        match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == pattern,
        }
    })
}

/// The environment inside: from `host` the general variables, `LC_*`, the agent's `names` and
/// the `extras`; then what ralph sets for the agent (`set`), over them.
pub(super) fn filtered(
    host: impl Iterator<Item = (OsString, OsString)>,
    set: &[(String, OsString)],
    names: &[String],
    extras: &[String],
) -> BTreeMap<String, OsString> {
    let mut vars: BTreeMap<String, OsString> = host
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value)))
        .filter(|(name, _)| {
            listed(name, GENERAL)
                || name.starts_with("LC_")
                || listed(name, names)
                || extras.iter().any(|extra| extra == name)
        })
        .collect();
    vars.extend(set.iter().cloned());
    vars
}

/// `NAME=VALUE`, as `env` and `docker -e` take a variable.
pub(super) fn assignment(name: &str, value: &std::ffi::OsStr) -> OsString {
    let mut pair = OsString::from(format!("{name}="));
    pair.push(value);
    pair
}

/// Points the agent at ralph's proxy inside the sandbox (`127.0.0.1:PORT`), loopback excepted.
pub(super) fn point_at_proxy(vars: &mut BTreeMap<String, OsString>, port: u16) {
    let proxy = OsString::from(format!("http://127.0.0.1:{port}"));
    for name in [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "https_proxy",
        "http_proxy",
        "ALL_PROXY",
    ] {
        vars.insert(name.to_owned(), proxy.clone());
    }
    for name in ["NO_PROXY", "no_proxy"] {
        vars.insert(name.to_owned(), OsString::from("localhost,127.0.0.1,::1"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_general_variables_the_agents_own_and_the_extras_pass() {
        let host = [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/u"),
            ("LC_ALL", "C.UTF-8"),
            ("ANTHROPIC_API_KEY", "sk-ant"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9"),
            ("OPENAI_API_KEY", "sk-openai"),
            ("GITHUB_TOKEN", "ghp"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("SSH_AUTH_SOCK", "/run/ssh"),
            ("MY_EXTRA", "x"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let claude = table(Some(&AgentSpec::Builtin(AgentKind::ClaudeCode)));
        let set = [("CLAUDE_CODE_X".to_owned(), OsString::from("1"))];
        let vars = filtered(
            host.into_iter(),
            &set,
            &claude.names,
            &["MY_EXTRA".to_owned()],
        );
        let names: Vec<&str> = vars.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_BASE_URL",
                "CLAUDE_CODE_X",
                "HOME",
                "LC_ALL",
                "MY_EXTRA",
                "PATH"
            ]
        );
        assert!(claude.hosts.iter().any(|host| host == "api.anthropic.com"));
        let codex = table(Some(&AgentSpec::Builtin(AgentKind::Codex)));
        assert!(
            listed("OPENAI_API_KEY", &codex.names) && !listed("ANTHROPIC_API_KEY", &codex.names)
        );
    }

    #[test]
    fn a_custom_agent_gets_the_variables_and_hosts_it_names() {
        let text =
            "command = \"mine\"\nsandbox_env = [\"MY_*\"]\nsandbox_hosts = [\"llm.local:8443\"]";
        let parsed = toml::de::DeTable::parse(text).unwrap();
        let value = toml::de::DeValue::Table(parsed.into_inner());
        let def = crate::agents::custom::CustomAgentDef::from_toml("mine", &value).unwrap();
        let agent = AgentSpec::Custom(Box::new(def));
        let mine = table(Some(&agent));
        assert_eq!(mine.hosts, ["llm.local:8443"]);
        let host = [("MY_KEY", "k"), ("OPENAI_API_KEY", "o")]
            .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let vars = filtered(host.into_iter(), &[], &mine.names, &[]);
        assert_eq!(vars.keys().collect::<Vec<_>>(), ["MY_KEY"]);
    }

    #[test]
    fn the_proxy_variables_point_inside_and_spare_loopback() {
        let mut vars = BTreeMap::new();
        point_at_proxy(&mut vars, 3128);
        assert_eq!(vars["HTTPS_PROXY"], "http://127.0.0.1:3128");
        assert_eq!(vars["NO_PROXY"], "localhost,127.0.0.1,::1");
    }
}
