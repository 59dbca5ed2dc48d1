//! Codex: `codex exec [--model MODEL] [--sandbox workspace-write --skip-git-repo-check] PROMPT`.
//!
//! Codex 0.169 removed `--full-auto` (passing it exits 2). Its `exec` mode never asks for
//! approval, so ralph's `--allow-all` maps to the workspace-write sandbox, plus
//! `--skip-git-repo-check` so a directory that is not a trusted git repository still works.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

use serde_json::Value;

use super::events::{Failure, command_detail, one_line, session_event, str_field, u64_field};
use super::{
    Agent, AgentCommand, AgentEvent, AgentKind, CommandRequest, OutputFormat, Usage, command_from,
    prompt_needs_stdin,
};

pub(super) struct Codex;

static TOOL_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:Tool:|Using|Calling|Running)\s+([A-Za-z0-9_-]+)").expect("valid regex")
});

impl Agent for Codex {
    fn kind(&self) -> Option<AgentKind> {
        Some(AgentKind::Codex)
    }

    fn command(&self, request: &CommandRequest<'_>) -> AgentCommand {
        let mut args = vec!["exec".to_owned()];
        if request.format == OutputFormat::Json {
            args.push("--json".to_owned());
        }
        if let Some(model) = request.model {
            args.extend(["--model".to_owned(), model.to_owned()]);
        }
        if request.allow_all {
            // Inside ralph's sandbox, Codex's own would be a sandbox in a sandbox (which fails
            // as root): Codex documents danger-full-access for runs sandboxed from outside.
            let mode = if request.sandboxed {
                "danger-full-access"
            } else {
                "workspace-write"
            };
            args.extend([
                "--sandbox".to_owned(),
                mode.to_owned(),
                "--skip-git-repo-check".to_owned(),
            ]);
        }
        args.extend(request.extra_args.iter().cloned());
        if let Some(tools) = request.tools {
            // TOML values: a JSON string or list of strings is one.
            let quoted = |value: &serde_json::Value| value.to_string();
            let server = format!("mcp_servers.{}", super::TOOL_SERVER);
            args.extend([
                "-c".to_owned(),
                format!("{server}.command={}", quoted(&tools.command.clone().into())),
                "-c".to_owned(),
                format!("{server}.args={}", quoted(&tools.args.clone().into())),
                // ralph's own tools need no one's approval (none is there to give it).
                "-c".to_owned(),
                format!("{server}.default_tools_approval_mode=\"approve\""),
            ]);
        }
        // `-` tells `codex exec` to read the prompt from stdin.
        args.push(if prompt_needs_stdin(request.prompt) {
            "-".to_owned()
        } else {
            request.prompt.to_owned()
        });
        command_from(request, args, Vec::new())
    }

    fn takes_tools(&self) -> bool {
        true
    }

    fn tool_pattern(&self) -> Option<&regex::Regex> {
        Some(&TOOL_LINE)
    }

    fn parse_event(&self, line: &str) -> Option<Vec<AgentEvent>> {
        let event: Value = serde_json::from_str(line).ok()?;
        let events = match str_field(&event, "type")? {
            "thread.started" => vec![session_event(&event, "thread_id")],
            "turn.started" | "item.started" | "item.updated" => vec![AgentEvent::Quiet],
            "item.completed" => item_events(event.get("item")?),
            "turn.completed" => {
                let usage = event.get("usage").unwrap_or(&Value::Null);
                let cached = u64_field(usage, "cached_input_tokens");
                vec![
                    AgentEvent::Usage(Usage {
                        // OpenAI counts cached tokens inside input_tokens; keep them apart.
                        input: u64_field(usage, "input_tokens").saturating_sub(cached),
                        output: u64_field(usage, "output_tokens"),
                        cache_read: cached,
                        cache_write: u64_field(usage, "cache_write_input_tokens"),
                    }),
                    AgentEvent::Turns(1),
                ]
            }
            "turn.failed" => {
                let message = event
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("Codex reported a failed turn");
                vec![AgentEvent::Failure(Failure::classify(
                    None,
                    message,
                    crate::model::now(),
                ))]
            }
            "error" => vec![AgentEvent::Notice(format!(
                "Codex: {}",
                str_field(&event, "message").unwrap_or("error")
            ))],
            _ => return None,
        };
        Some(events)
    }

    fn reports_cost(&self) -> bool {
        false
    }
}

fn item_events(item: &Value) -> Vec<AgentEvent> {
    let Some(kind) = str_field(item, "type") else {
        return vec![AgentEvent::Quiet];
    };
    match kind {
        "agent_message" => {
            let text = str_field(item, "text").unwrap_or("").to_owned();
            vec![AgentEvent::FinalText(text)]
        }
        "command_execution" => {
            let command = str_field(item, "command").unwrap_or("");
            let mut events = vec![AgentEvent::Tool {
                name: "Shell".to_owned(),
                detail: Some(command_detail(command)),
            }];
            let exit = item.get("exit_code").and_then(Value::as_i64);
            if str_field(item, "status") == Some("failed") || exit.is_some_and(|code| code != 0) {
                events.push(AgentEvent::ToolError(format!(
                    "command failed (exit {}): {}",
                    exit.map_or_else(|| "?".to_owned(), |code| code.to_string()),
                    command_detail(command)
                )));
            }
            events
        }
        "file_change" => item
            .get("changes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|change| AgentEvent::Tool {
                name: match str_field(change, "kind") {
                    Some("add") => "Write",
                    Some("delete") => "Delete",
                    _ => "Edit",
                }
                .to_owned(),
                detail: str_field(change, "path").map(str::to_owned),
            })
            .collect(),
        "mcp_tool_call" => {
            let name = format!(
                "{}.{}",
                str_field(item, "server").unwrap_or("mcp"),
                str_field(item, "tool").unwrap_or("tool")
            );
            let mut events = vec![AgentEvent::Tool { name, detail: None }];
            if let Some(error) = item.get("error").filter(|error| !error.is_null()) {
                events.push(AgentEvent::ToolError(one_line(&error.to_string(), 200)));
            }
            events
        }
        "web_search" => vec![AgentEvent::Tool {
            name: "WebSearch".to_owned(),
            detail: str_field(item, "query").map(str::to_owned),
        }],
        "error" => vec![AgentEvent::Notice(format!(
            "Codex: {}",
            str_field(item, "message").unwrap_or("error")
        ))],
        _ => vec![AgentEvent::Quiet],
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::request;
    use super::*;

    #[test]
    fn argv_for_model_and_permissions() {
        let sandbox = ["--sandbox", "workspace-write", "--skip-git-repo-check"];
        let cases: [(Option<&str>, bool, Vec<&str>); 4] = [
            (None, false, vec!["exec", "go"]),
            (None, true, [&["exec"][..], &sandbox, &["go"]].concat()),
            (Some("gpt-5"), false, vec!["exec", "--model", "gpt-5", "go"]),
            (
                Some("gpt-5"),
                true,
                [&["exec", "--model", "gpt-5"][..], &sandbox, &["go"]].concat(),
            ),
        ];
        for (model, allow_all, expected) in cases {
            let command = Codex.command(&request("go", model, allow_all));
            assert_eq!(command.display_args(), expected);
            assert!(
                !command
                    .display_args()
                    .iter()
                    .any(|arg| arg == "--full-auto")
            );
        }
    }

    #[test]
    fn in_ralphs_sandbox_codex_does_not_nest_its_own() {
        let mut asked = request("go", None, true);
        asked.sandboxed = true;
        let args = Codex.command(&asked).display_args();
        assert_eq!(
            args,
            [
                "exec",
                "--sandbox",
                "danger-full-access",
                "--skip-git-repo-check",
                "go"
            ]
        );
    }

    #[test]
    fn tool_lines_are_recognised() {
        assert_eq!(
            Codex.tool_in_line("Running cargo test").as_deref(),
            Some("cargo")
        );
        assert_eq!(Codex.tool_in_line("plain text"), None);
    }
}

/// The bubblewrap version Codex's own sandbox (`--sandbox workspace-write`) needs at least: it
/// runs bwrap with `--argv0`, which came in 0.9.0. With an older one on `PATH` (Debian 12 has
/// 0.8.0) every file write of the agent fails, and Codex says nothing of it.
const BWRAP_NEEDED: (u32, u32) = (0, 9);

/// How Codex's own sandbox can get a bubblewrap it can use.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Bwrap {
    /// The first `bwrap` on `PATH` is new enough, or there is none (Codex then takes its own).
    Fine,
    /// The one on `PATH` (`system`, its version) is too old; Codex ships one in `folder`, which
    /// goes first on Codex's `PATH`.
    Shipped {
        system: PathBuf,
        version: String,
        folder: PathBuf,
    },
    /// The one on `PATH` is too old, and Codex ships none that ralph can find.
    Unusable { system: PathBuf, version: String },
}

/// What Codex (run from `binary`) would do for bubblewrap, with `path` its `PATH`.
pub(crate) fn bwrap_for(binary: &Path, path: Option<&std::ffi::OsStr>) -> Bwrap {
    let cwd = std::env::current_dir().unwrap_or_default();
    let Ok(system) = which::which_in("bwrap", path, &cwd) else {
        return Bwrap::Fine;
    };
    let Some(version) = bwrap_version(&system) else {
        return Bwrap::Fine;
    };
    if version_at_least(&version, BWRAP_NEEDED) {
        return Bwrap::Fine;
    }
    match shipped_bwrap(binary) {
        Some(folder) => Bwrap::Shipped {
            system,
            version,
            folder,
        },
        None => Bwrap::Unusable { system, version },
    }
}

/// `bwrap --version`'s number (`0.8.0`), within 5 s.
fn bwrap_version(bwrap: &Path) -> Option<String> {
    let mut child = std::process::Command::new(bwrap)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while child.try_wait().ok()?.is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut said = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take()?, &mut said).ok()?;
    said.split_whitespace()
        .find(|word| word.starts_with(|c: char| c.is_ascii_digit()))
        .map(str::to_owned)
}

/// Whether `version` (`0.8.0`) is `least` (major, minor) or newer.
fn version_at_least(version: &str, least: (u32, u32)) -> bool {
    let mut parts = version
        .split('.')
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    found >= least
}

/// The folder of the `bwrap` Codex ships, found from its executable: beside the native binary
/// (`…/vendor/<triple>/bin/codex` → `…/vendor/<triple>/codex-resources/`), or in the platform
/// package the npm launcher (`…/@openai/codex/bin/codex.js`) runs, nested or beside it.
pub(crate) fn shipped_bwrap(binary: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(binary).ok()?;
    let package = real.parent()?.parent()?;
    let resources = |root: &Path| {
        let folder = root.join("codex-resources");
        folder.join("bwrap").is_file().then_some(folder)
    };
    if let Some(folder) = resources(package) {
        return Some(folder);
    }
    let scopes = [
        package.join("node_modules/@openai"),
        package.parent()?.to_owned(),
    ];
    for scope in scopes {
        let Ok(entries) = std::fs::read_dir(&scope) else {
            continue;
        };
        for entry in entries.flatten() {
            if !entry.file_name().to_string_lossy().starts_with("codex-") {
                continue;
            }
            let Ok(triples) = std::fs::read_dir(entry.path().join("vendor")) else {
                continue;
            };
            if let Some(folder) = triples
                .flatten()
                .find_map(|triple| resources(&triple.path()))
            {
                return Some(folder);
            }
        }
    }
    None
}

#[cfg(test)]
mod bwrap_tests {
    use super::*;

    #[test]
    fn versions_compare_by_major_and_minor() {
        assert!(!version_at_least("0.8.0", BWRAP_NEEDED));
        assert!(version_at_least("0.9.0", BWRAP_NEEDED));
        assert!(version_at_least("0.11.1", BWRAP_NEEDED));
        assert!(version_at_least("1.0", BWRAP_NEEDED));
    }

    #[test]
    fn the_shipped_bwrap_is_found_from_the_launcher_and_from_the_native_binary() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = crate::testing::tempdir().unwrap();
        let openai = dir.path().join("node_modules/@openai");
        let launcher = openai.join("codex/bin/codex.js");
        let resources =
            openai.join("codex-linux-x64/vendor/x86_64-unknown-linux-musl/codex-resources");
        let native = resources.parent().unwrap().join("bin/codex");
        for file in [&launcher, &resources.join("bwrap"), &native] {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let bin = dir.path().join("node_modules/.bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(&launcher, bin.join("codex")).unwrap();
        let found = std::fs::canonicalize(&resources).unwrap();
        assert_eq!(shipped_bwrap(&bin.join("codex")), Some(found.clone()));
        assert_eq!(shipped_bwrap(&native), Some(found));
        assert_eq!(shipped_bwrap(&dir.path().join("nothing")), None);
    }
}
