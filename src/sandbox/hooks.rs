//! The repository's git hooks, run inside the loop's sandbox when ralph's own git commands run
//! them (its commits run `pre-commit`, `commit-msg`, …): hooks run code the agent may have
//! written. ralph points its git commands at a folder of its own (`-c core.hooksPath=…`) where each
//! of the repository's hooks is a two-line script that runs `ralph __sandbox-hook SPEC ARGS…`;
//! that execs the sandbox's command line (kept in SPEC) around the real hook, with the `GIT_…`
//! variables git set for the hook passed in.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::{Deserialize, Serialize};

use crate::agents::AgentCommand;

/// The hidden first argument that runs a hook inside the sandbox.
pub(crate) const ARG: &str = "__sandbox-hook";

/// How to run one hook inside: the sandbox's program, its arguments up to the `--` before the
/// command, the command, and the sandbox program's whole environment when it must start with
/// no other (`None`: git's).
#[derive(Debug, Serialize, Deserialize)]
struct Spec {
    program: String,
    outer: Vec<String>,
    inner: Vec<String>,
    #[serde(default)]
    env: Option<Vec<(String, String)>>,
}

/// Writes, in `dir`, a script for every hook in `hooks` (the repository's hooks folder) that runs
/// it through `wrap`: `None` when the repository has no hook (nothing to point git at).
pub(super) fn prepare(
    hooks: &Path,
    dir: &Path,
    wrap: &dyn Fn(&AgentCommand) -> AgentCommand,
) -> Option<PathBuf> {
    let ralph = std::env::current_exe().ok()?;
    let mut any = false;
    for entry in std::fs::read_dir(hooks).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let runnable = entry
            .metadata()
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0);
        if !runnable || name.ends_with(".sample") || name.starts_with('.') {
            continue;
        }
        std::fs::create_dir_all(dir).ok()?;
        let hook = AgentCommand {
            program: entry.path(),
            args: Vec::new(),
            env: Vec::new(),
            clear_env: false,
            stdin: None,
            usage_file: None,
            acp: None,
        };
        let wrapped = wrap(&hook);
        let text = |word: &OsString| word.to_string_lossy().into_owned();
        let split = wrapped.args.iter().position(|arg| arg == "--")?;
        let spec = Spec {
            program: wrapped.program.to_string_lossy().into_owned(),
            outer: wrapped.args[..split].iter().map(text).collect(),
            inner: wrapped.args[split + 1..].iter().map(text).collect(),
            env: wrapped.clear_env.then(|| {
                (wrapped.env.iter())
                    .map(|(name, value)| (name.clone(), text(value)))
                    .collect()
            }),
        };
        let spec_path = dir.join(format!(".{name}.json"));
        std::fs::write(&spec_path, serde_json::to_vec(&spec).ok()?).ok()?;
        let script = dir.join(&name);
        let body = format!(
            "#!/bin/sh\nexec {} {ARG} {} \"$@\"\n",
            quoted(&ralph.to_string_lossy()),
            quoted(&spec_path.to_string_lossy())
        );
        std::fs::write(&script, body).ok()?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).ok()?;
        any = true;
    }
    any.then(|| dir.to_owned())
}

/// `text` in single quotes for sh.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Runs a hook inside the sandbox: `args` are what follows [`ARG`] (the spec, then the hook's
/// own arguments).
pub(crate) fn main(mut args: impl Iterator<Item = OsString>) -> ExitCode {
    let spec = args
        .next()
        .and_then(|path| std::fs::read(path).ok())
        .and_then(|bytes| serde_json::from_slice::<Spec>(&bytes).ok());
    let Some(spec) = spec else {
        crate::output::error("ralph's sandboxed hook: its description is missing or unreadable");
        return ExitCode::from(1);
    };
    let mut command = std::process::Command::new(&spec.program);
    command.args(&spec.outer);
    if let Some(env) = &spec.env {
        command
            .env_clear()
            .envs(env.iter().map(|(name, value)| (name, value)));
    }
    for (name, value) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("GIT_") {
            command.arg("--setenv").arg(name).arg(value);
        }
    }
    command.arg("--").args(&spec.inner).args(args);
    let err = command.exec();
    crate::output::error(&format!(
        "ralph's sandboxed hook could not start {}: {err}",
        spec.program
    ));
    ExitCode::from(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_is_made_for_each_runnable_hook_and_none_for_samples() {
        let tmp = crate::testing::tempdir().unwrap();
        let hooks = tmp.path().join("hooks");
        std::fs::create_dir(&hooks).unwrap();
        for (name, mode) in [
            ("pre-commit", 0o755),
            ("commit-msg.sample", 0o755),
            ("post-commit", 0o644),
        ] {
            let path = hooks.join(name);
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let wrap = |command: &AgentCommand| AgentCommand {
            program: "bwrap".into(),
            args: vec![
                "--ro-bind".into(),
                "/".into(),
                "/".into(),
                "--".into(),
                command.program.clone().into(),
            ],
            ..command.clone()
        };
        let dir = tmp.path().join("wrapped");
        assert_eq!(prepare(&hooks, &dir, &wrap), Some(dir.clone()));
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with('.'))
            .collect();
        assert_eq!(names, ["pre-commit"]);
        let spec: Spec =
            serde_json::from_slice(&std::fs::read(dir.join(".pre-commit.json")).unwrap()).unwrap();
        assert_eq!(spec.outer, ["--ro-bind", "/", "/"]);
        assert_eq!(spec.inner, [hooks.join("pre-commit").to_string_lossy()]);
        assert_eq!(quoted("it's"), r"'it'\''s'");
        let empty = tmp.path().join("none");
        std::fs::create_dir(&empty).unwrap();
        assert_eq!(prepare(&empty, &tmp.path().join("w2"), &wrap), None);
    }
}
