//! `ralph --mcp`: a Model Context Protocol server on stdio, so another agent (Claude Code,
//! Cursor, …) can read and steer ralph's runs in this repository: JSON-RPC 2.0, one message a
//! line on stdin and stdout, nothing else on stdout (diagnostics go to stderr).
//!
//! Tools: `ralph_status`, `ralph_list_tasks`, `ralph_add_task`, `ralph_add_context`,
//! `ralph_log`, `ralph_plan`, `ralph_start`, `ralph_stop`. A tool that cannot do what it was asked
//! answers with `isError: true` and one line saying why; the server itself never stops on a bad
//! message.

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::config::LogTarget;
use crate::exit::ExitStatus;
use crate::storage::RalphDir;
use protocol::{Incoming, result, tool, tool_json, tool_text};

pub(crate) mod agent_tools;
pub(crate) mod protocol;

/// What `ralph --mcp` is for, told to its clients.
const INSTRUCTIONS: &str = "ralph runs coding agents in a loop until they keep their promise. Read the run with ralph_status, ralph_list_tasks and ralph_log; steer it with ralph_add_task, ralph_add_context, ralph_start and ralph_stop.";

/// Where a started run's output goes, and its prompt (a file, so no prompt is taken for an
/// option), in `.ralph/`.
use crate::storage::{MCP_PROMPT_FILE as PROMPT_FILE, MCP_RUN_LOG as RUN_LOG};

/// Serves until stdin closes.
pub(crate) fn serve(dir: &RalphDir, cwd: &Path) -> anyhow::Result<ExitStatus> {
    let mut server = Server {
        dir: dir.clone(),
        cwd: cwd.to_owned(),
        started: None,
    };
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    // Bytes, not text: a line that is not UTF-8 gets a parse error, and the server goes on.
    for line in stdin.lock().split(b'\n') {
        let Ok(line) = line else { break };
        let line = String::from_utf8_lossy(&line);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(answer) = server.answer(&line) {
            let _ = writeln!(out, "{answer}");
            let _ = out.flush();
        }
    }
    Ok(ExitStatus::Success)
}

struct Server {
    dir: RalphDir,
    cwd: PathBuf,
    /// The run `ralph_start` started last.
    started: Option<Child>,
}

impl Server {
    /// The answer to one message (`None` for a notification).
    fn answer(&mut self, line: &str) -> Option<Value> {
        match protocol::incoming(line, (&tools(), INSTRUCTIONS)) {
            Incoming::Reply(reply) => Some(reply),
            Incoming::Quiet => None,
            Incoming::Call {
                id,
                name,
                arguments,
            } => Some(result(&id, self.call(&name, &arguments))),
        }
    }

    fn call(&mut self, name: &str, arguments: &Value) -> Value {
        if let Err(why) = protocol::check_arguments(&tools(), name, arguments) {
            return tool_text(&why, true);
        }
        let text = |key: &str| arguments.get(key).and_then(Value::as_str).map(str::trim);
        let failed = |err: anyhow::Error| tool_text(&format!("{err:#}"), true);
        match name {
            "ralph_status" => tool_json(
                &serde_json::to_value(crate::commands::status_report(&self.dir))
                    .unwrap_or_default(),
            ),
            "ralph_list_tasks" => {
                // No task file yet: an empty list, said so, not `null`.
                let report = crate::commands::status_report(&self.dir)
                    .tasks
                    .unwrap_or_else(|| {
                        crate::output::report::tasks_report("missing", &Default::default())
                    });
                tool_json(&serde_json::to_value(report).unwrap_or_default())
            }
            "ralph_add_task" => match text("text") {
                None => tool_text(
                    "ralph_add_task needs \"text\": the task's description",
                    true,
                ),
                Some(description) => {
                    match crate::commands::add_task_to(
                        &self.dir,
                        description,
                        (text("id"), text("blocked_by")),
                    ) {
                        Ok((number, unknown)) => {
                            tool_json(&json!({"number": number, "unknown_blockers": unknown}))
                        }
                        Err(err) => failed(err),
                    }
                }
            },
            "ralph_add_context" => match text("text").filter(|t| !t.is_empty()) {
                None => tool_text(
                    "ralph_add_context needs \"text\": the hint for the next prompt",
                    true,
                ),
                Some(hint) => {
                    match crate::commands::add_context_to(&self.dir, hint, text("task")) {
                        Ok(()) => {
                            tool_text("Added: the next iteration's prompt carries it.", false)
                        }
                        Err(err) => failed(err),
                    }
                }
            },
            "ralph_log" => self.log(text("which").unwrap_or("last")),
            "ralph_plan" => match text("spec").filter(|t| !t.is_empty()) {
                None => tool_text("ralph_plan needs \"spec\": what to plan", true),
                Some(spec) => self.plan(spec),
            },
            "ralph_start" => self.start(arguments),
            "ralph_stop" => match crate::commands::stop_running(&self.dir) {
                Ok(pid) => tool_text(
                    &format!(
                        "Stopping the loop (pid {pid}) as Ctrl+C does; ralph --resume goes on."
                    ),
                    false,
                ),
                Err(why) => tool_text(&why, true),
            },
            "ralph_questions" | "ralph_answer" => {
                self.questions(name, (text("id"), text("answer")))
            }
            other => tool_text(
                &format!("no tool named {other}; tools/list names them"),
                true,
            ),
        }
    }

    /// `ralph_questions`, and `ralph_answer` (question `id`, `answer`).
    fn questions(&self, name: &str, (id, answer): (Option<&str>, Option<&str>)) -> Value {
        use crate::storage::questions;
        if name == "ralph_questions" {
            let homes = crate::git::question_homes(&self.dir);
            return tool_json(&json!({"questions": questions::all_in(&homes)}));
        }
        let (id, answer) = (id.unwrap_or_default(), answer.unwrap_or_default());
        match questions::answer_in(&crate::git::question_homes(&self.dir), id, answer, "mcp") {
            Ok(Ok(question)) => tool_json(&serde_json::to_value(question).unwrap_or_default()),
            Ok(Err(refused)) => tool_text(&refused.to_string(), true),
            Err(err) => tool_text(&format!("{err:#}"), true),
        }
    }

    fn log(&self, which: &str) -> Value {
        let Ok(target) = LogTarget::parse(which) else {
            return tool_text("name a log as last, N, TASK or TASK/N", true);
        };
        if let LogTarget::Task(task, _) = &target
            && !crate::storage::tasks::is_ref_safe(task)
        {
            return tool_text("a task id is letters, digits, - and _", true);
        }
        match crate::commands::log::find(&self.dir, &target) {
            Ok(path) => {
                let records = std::fs::read_to_string(&path).unwrap_or_default();
                let lines: Vec<String> = records
                    .lines()
                    .filter_map(|line| {
                        serde_json::from_str::<crate::storage::logs::Record>(line).ok()
                    })
                    .filter_map(|record| record.line)
                    .collect();
                tool_text(&lines.join("\n"), false)
            }
            Err(err) => tool_text(&format!("{err:#}"), true),
        }
    }

    /// `ralph --plan --prompt-file SPEC`, run to its end; what it printed. (The spec goes in a
    /// file, so that one starting with `-` is not taken for an option.)
    fn plan(&self, spec: &str) -> Value {
        if let Err(err) = self.dir.ensure() {
            return tool_text(&format!("{err:#}"), true);
        }
        let file = self.dir.root().join(PROMPT_FILE);
        if let Err(err) = std::fs::write(&file, spec) {
            return tool_text(&format!("cannot write {}: {err}", file.display()), true);
        }
        let output = self
            .ralph()
            .arg("--plan")
            .arg("--prompt-file")
            .arg(&file)
            .stdin(Stdio::null())
            .output();
        match output {
            Ok(output) => {
                let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
                text.push_str(&String::from_utf8_lossy(&output.stderr));
                tool_text(text.trim(), !output.status.success())
            }
            Err(err) => tool_text(&format!("ralph --plan could not start: {err}"), true),
        }
    }

    /// `ralph PROMPT ARGS…` in the background, its output in `.ralph/mcp-run.log`.
    fn start(&mut self, arguments: &Value) -> Value {
        let Some(prompt) = arguments
            .get("prompt")
            .and_then(Value::as_str)
            .filter(|p| !p.trim().is_empty())
        else {
            return tool_text(
                "ralph_start needs \"prompt\": what the agent should do",
                true,
            );
        };
        let extra: Vec<String> = match arguments.get("args") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            Some(_) => {
                return tool_text(
                    "\"args\" is a list of ralph's options as strings, e.g. [\"--parallel\", \"2\"]",
                    true,
                );
            }
        };
        if let Some(child) = self.started.as_mut()
            && child.try_wait().ok().flatten().is_none()
        {
            return tool_text(
                &format!(
                    "a run started here is still going (pid {}); ralph_stop it first, or wait",
                    child.id()
                ),
                true,
            );
        }
        if crate::storage::lock::loop_is_running(&self.dir) {
            return tool_text(
                "a loop already runs in this repository; ralph_stop it first, or wait for it",
                true,
            );
        }
        // Checked as `ralph` would check them, before anything is started or written.
        if let Err(why) = self.check_run(prompt, &extra) {
            return tool_text(&format!("ralph_start: {why}; nothing was started"), true);
        }
        match self.spawn_run(prompt, &extra) {
            Ok((child, log)) => {
                let pid = child.id();
                self.started = Some(child);
                tool_json(&json!({"pid": pid, "log": log.display().to_string()}))
            }
            Err(why) => tool_text(&why, true),
        }
    }

    /// Whether `ralph ARGS --prompt-file …` is a command line ralph takes: its options parsed and
    /// resolved as a start would (an unknown flag, a bad value, options that do not go together).
    fn check_run(&self, prompt: &str, extra: &[String]) -> Result<(), String> {
        // The prompt goes in a file of the check's own: nothing of this repository is written.
        let mut prompt_file = tempfile::NamedTempFile::new().map_err(|err| err.to_string())?;
        std::io::Write::write_all(&mut prompt_file, prompt.as_bytes())
            .map_err(|err| err.to_string())?;
        let args = (std::iter::once("ralph".into()))
            .chain(extra.iter().map(Into::into))
            .chain([
                "--prompt-file".into(),
                prompt_file.path().as_os_str().to_owned(),
            ]);
        let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(
            crate::cli::task_before_context(args),
        )
        .map_err(|err| {
            let rendered = err.render().to_string();
            rendered
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ")
                .to_owned()
        })?;
        let settings = crate::settings::Settings::load(&self.cwd, &|name| std::env::var(name).ok())
            .map_err(|err| format!("{err:#}"))?;
        let mut no_input = NoInput;
        crate::config::Config::from_cli(cli, self.cwd.clone(), &mut no_input, settings)
            .map(drop)
            .map_err(|err| err.message)
    }

    /// Starts `ralph ARGS --prompt-file .ralph/mcp-prompt.md` in a process group of its own, its
    /// output in `.ralph/mcp-run.log`.
    fn spawn_run(&self, prompt: &str, extra: &[String]) -> Result<(Child, PathBuf), String> {
        use std::os::unix::process::CommandExt as _;
        self.dir.ensure().map_err(|err| format!("{err:#}"))?;
        let prompt_file = self.dir.root().join(PROMPT_FILE);
        std::fs::write(&prompt_file, prompt)
            .map_err(|err| format!("cannot write {}: {err}", prompt_file.display()))?;
        let log = self.dir.root().join(RUN_LOG);
        let cannot = |err: std::io::Error| format!("cannot write {}: {err}", log.display());
        // Every start's output follows the ones before, under a line saying which it is.
        let mut file = (std::fs::OpenOptions::new().create(true).append(true))
            .open(&log)
            .map_err(cannot)?;
        let heading = format!(
            "--- ralph_start at {}: ralph {} --prompt-file {} ---\n",
            crate::model::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            extra.join(" "),
            prompt_file.display()
        );
        std::io::Write::write_all(&mut file, heading.as_bytes()).map_err(cannot)?;
        let err_file = file.try_clone().map_err(cannot)?;
        let child = self
            .ralph()
            .args(extra)
            .arg("--prompt-file")
            .arg(&prompt_file)
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err_file)
            // Its own process group: a Ctrl+C meant for the MCP client does not reach it.
            .process_group(0)
            .spawn()
            .map_err(|err| format!("ralph could not start: {err}"))?;
        Ok((child, log))
    }

    fn ralph(&self) -> Command {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("ralph"));
        let mut command = Command::new(exe);
        command.current_dir(&self.cwd);
        command
    }
}

/// A check's stdin: never piped.
struct NoInput;

impl crate::config::PromptInput for NoInput {
    fn piped_stdin(&mut self, _has_words: bool) -> Result<Option<String>, crate::error::Error> {
        Ok(None)
    }
}

/// `arguments` against tool `name`'s `inputSchema` (as `tools/list` gives it): an object, its
/// required properties there, no other property, each of the type its schema says. The reason
/// when they are not, in one line.
#[cfg(test)]
const TOOLS: [&str; 10] = [
    "ralph_status",
    "ralph_list_tasks",
    "ralph_add_task",
    "ralph_add_context",
    "ralph_log",
    "ralph_plan",
    "ralph_start",
    "ralph_stop",
    "ralph_questions",
    "ralph_answer",
];

fn tools() -> Vec<Value> {
    let text = |what: &str| json!({"type": "string", "description": what});
    let mut tools = vec![
        tool(
            "ralph_status",
            "The loop and task loops in this repository: state, iteration, cost, tasks (what `ralph --status --json` prints).",
            json!({}),
            &[],
        ),
        tool(
            "ralph_list_tasks",
            "The task list: each task's status, id, blockers and text.",
            json!({}),
            &[],
        ),
        tool(
            "ralph_add_task",
            "Adds a task to the task list.",
            json!({
                "text": text("The task's description"),
                "id": text("An id for it: letters (of any script), digits, '-', '_' or '.', at most 60, not starting with '-' or '.'"),
                "blocked_by": text("Ids of tasks it waits for, separated by commas")
            }),
            &["text"],
        ),
        tool(
            "ralph_add_context",
            "Adds a hint to the next iteration's prompt (of every loop, or of one task's).",
            json!({
                "text": text("The hint"),
                "task": text("The id of the task whose loop gets it")
            }),
            &["text"],
        ),
        tool(
            "ralph_log",
            "What the agent printed in an iteration.",
            json!({
                "which": text("last (default), N, TASK or TASK/N")
            }),
            &[],
        ),
        tool(
            "ralph_plan",
            "Plans a spec into the task list (`ralph --plan`), without running it.",
            json!({
                "spec": text("The spec, or a path to one")
            }),
            &["spec"],
        ),
        tool(
            "ralph_start",
            "Starts a run in the background; refused while a loop runs here. Returns its pid and the file its output goes to.",
            json!({
                "prompt": text("What the agent should do"),
                "args": {"type": "array", "items": {"type": "string"}, "description": "ralph's options, e.g. [\"--parallel\", \"2\", \"--max-cost\", \"5\"]"}
            }),
            &["prompt"],
        ),
        tool(
            "ralph_stop",
            "Stops the running loop as Ctrl+C does (it can be resumed).",
            json!({}),
            &[],
        ),
    ];
    tools.extend(question_tools());
    tools
}

/// The tools that read and answer the agents' questions.
fn question_tools() -> Vec<Value> {
    let text = |what: &str| json!({"type": "string", "description": what});
    vec![
        tool(
            "ralph_questions",
            "The questions the run's agents asked (ralph_ask): each one's id, task, text, options, status (pending, answered, timed_out, cancelled) and answer.",
            json!({}),
            &[],
        ),
        tool(
            "ralph_answer",
            "Answers a question an agent is waiting on (an option may be given by its number).",
            json!({
                "id": text("The question's id (ralph_questions lists them)"),
                "answer": text("The answer")
            }),
            &["id", "answer"],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> (tempfile::TempDir, Server) {
        let dir = crate::testing::tempdir().unwrap();
        let server = Server {
            dir: RalphDir::new(dir.path()),
            cwd: dir.path().to_owned(),
            started: None,
        };
        (dir, server)
    }

    #[test]
    fn the_handshake_agrees_a_version_and_lists_tools_with_schemas() {
        let (_dir, mut server) = server();
        let init = server
            .answer(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#)
            .unwrap();
        assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
        assert_eq!(init["result"]["serverInfo"]["name"], "ralph");
        let unknown = server
            .answer(r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}"#)
            .unwrap();
        assert_eq!(unknown["result"]["protocolVersion"], protocol::VERSIONS[0]);
        assert!(
            server
                .answer(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
                .is_none()
        );
        let listed = server
            .answer(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#)
            .unwrap();
        let tools = listed["result"]["tools"].as_array().unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(
            names, TOOLS,
            "tools/list and the names calls accept are the same"
        );
        assert!(tools.iter().all(|t| t["inputSchema"]["type"] == "object"));
    }

    #[test]
    fn bad_messages_get_errors_and_the_server_goes_on() {
        let (_dir, mut server) = server();
        assert_eq!(server.answer("{not json").unwrap()["error"]["code"], -32700);
        assert_eq!(server.answer("[1, 2]").unwrap()["error"]["code"], -32600);
        let response = server.answer(r#"{"jsonrpc":"2.0","id":9,"result":{}}"#);
        assert!(response.is_none(), "a response gets no answer");
        assert_eq!(
            server
                .answer(r#"{"jsonrpc":"2.0","id":4,"method":"resources/list"}"#)
                .unwrap()["error"]["code"],
            -32601
        );
        let call = server
            .answer(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"ralph_nothing","arguments":{}}}"#)
            .unwrap();
        assert_eq!(call["error"]["code"], -32602, "{call}");
        let no_text = server
            .answer(r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"ralph_add_task","arguments":{}}}"#)
            .unwrap();
        assert_eq!(no_text["result"]["isError"], true);
        let stop = server
            .answer(
                r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ralph_stop"}}"#,
            )
            .unwrap();
        assert_eq!(stop["result"]["isError"], true, "nothing runs: {stop}");
        assert_eq!(
            server
                .answer(r#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#)
                .unwrap()["result"],
            json!({})
        );
    }
}
