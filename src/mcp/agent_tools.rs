//! `ralph __agent-tools`: the MCP server ralph gives each agent it runs, bound to one run, one
//! task and one iteration, so the agent can talk back to its loop: ask a person (`ralph_ask`),
//! add a follow-up task (`ralph_add_task`), leave a note in the progress log (`ralph_note`) and
//! read what is pending for it (`ralph_context`). ralph starts it for the agent through the
//! agent's own way of naming MCP servers; it is never run by hand.
//!
//! Each call runs on a thread of its own, so a `ralph_ask` waiting for a person blocks nothing
//! else; answers share stdout under a lock, one line each.

use std::ffi::OsString;
use std::io::{BufRead as _, Write as _};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::protocol::{self, Incoming, error, result, tool, tool_json, tool_text};
use crate::agents::ToolBinding as Binding;
use crate::storage::questions::{self, Asking, Status};
use crate::storage::{RalphDir, tasks};

pub(crate) use crate::agents::TOOLS_ARG as ARG;

/// What the server is for, told to the agent.
const INSTRUCTIONS: &str = "Tools of the ralph loop that runs you. Call ralph_ask only for a real decision you cannot make from the task, the code and the notes (two designs with real trade-offs, an ambiguous requirement) or for something you lack (a credential, an account); never to ask permission to go on. Add follow-up work with ralph_add_task, record what you learned with ralph_note, and read the hints pending for you with ralph_context.";

/// How often a waiting `ralph_ask` looks for its answer.
const ASK_POLL: Duration = Duration::from_millis(200);

/// Runs the server until stdin closes (the agent is done with it); questions still waiting are
/// withdrawn then.
pub(crate) fn main(args: impl Iterator<Item = OsString>) -> ExitCode {
    let binding = match Binding::parse(args) {
        Ok(binding) => Arc::new(binding),
        Err(why) => {
            crate::output::error(&format!(
                "ralph {ARG}: {why}; ralph starts this server for its agents itself"
            ));
            return ExitCode::from(2);
        }
    };
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let closing = Arc::new(AtomicBool::new(false));
    let send = |out: &Mutex<std::io::Stdout>, message: &Value| {
        let mut out = out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = writeln!(out, "{message}");
        let _ = out.flush();
    };
    let mut calls = Vec::new();
    for line in std::io::stdin().lock().split(b'\n') {
        let Ok(line) = line else { break };
        let line = String::from_utf8_lossy(&line);
        if line.trim().is_empty() {
            continue;
        }
        match protocol::incoming(&line, (&tools(), INSTRUCTIONS)) {
            Incoming::Reply(reply) => send(&out, &reply),
            Incoming::Quiet => {}
            Incoming::Call {
                id,
                name,
                arguments,
            } => {
                let (binding, out, closing) = (binding.clone(), out.clone(), closing.clone());
                calls.push(std::thread::spawn(move || {
                    let answer = match call(&binding, &name, &arguments, &closing) {
                        Ok(value) => result(&id, value),
                        Err(why) => error(&id, -32602, &why),
                    };
                    send(&out, &answer);
                }));
            }
        }
    }
    closing.store(true, Ordering::SeqCst);
    for call in calls {
        let _ = call.join();
    }
    ExitCode::SUCCESS
}

/// One tool call: its result, or why its input was refused (an error of the request).
fn call(
    binding: &Binding,
    name: &str,
    arguments: &Value,
    closing: &AtomicBool,
) -> Result<Value, String> {
    protocol::check_arguments(&tools(), name, arguments)?;
    let text = |key: &str| arguments.get(key).and_then(Value::as_str).map(str::trim);
    let (home, dir) = (RalphDir::at(&binding.home), RalphDir::at(&binding.dir));
    match name {
        "ralph_ask" => {
            let options = (arguments
                .get("options")
                .and_then(Value::as_array)
                .into_iter()
                .flatten())
            .filter_map(Value::as_str)
            .map(|option| option.trim().to_owned())
            .filter(|option| !option.is_empty())
            .collect();
            let asking = Asking {
                task: binding.task.clone(),
                iteration: binding.iteration,
                question: text("question").unwrap_or_default().to_owned(),
                options,
                urgency: text("urgency").map(str::to_owned),
            };
            if asking.question.is_empty() {
                return Err(
                    "ralph_ask needs \"question\": what you need a person to decide".to_owned(),
                );
            }
            Ok(ask(&home, asking, binding.ask_timeout, closing))
        }
        "ralph_add_task" => add_task(
            &dir,
            text("text").unwrap_or_default(),
            text("blocked_by"),
            text("touches"),
        ),
        "ralph_note" => {
            let note = text("text").unwrap_or_default();
            if note.is_empty() {
                return Err("ralph_note needs \"text\": the note for the progress log".to_owned());
            }
            crate::storage::progress::note(&dir, binding.task.as_deref(), binding.iteration, note)
                .map_err(|err| format!("{err:#}"))?;
            Ok(tool_text("Noted in the progress log.", false))
        }
        "ralph_context" => Ok(tool_json(&context(binding, &home, &dir))),
        other => Err(format!("no tool named {other}; tools/list names them")),
    }
}

/// Asks a person and waits for the answer, until `timeout` or until the server closes.
fn ask(home: &RalphDir, asking: Asking, timeout: Duration, closing: &AtomicBool) -> Value {
    let (asked, _waiting) = match questions::ask(home, asking, timeout) {
        Ok(asked) => asked,
        Err(err) => {
            return tool_text(
                &format!(
                    "the question could not be asked: {err:#}; decide yourself and say what you chose"
                ),
                true,
            );
        }
    };
    let deadline = Instant::now() + timeout;
    loop {
        let now = questions::load(home, &asked.id);
        match now.as_ref().map(|question| question.status) {
            Some(Status::Answered) => break,
            Some(Status::Cancelled) | None => {
                return tool_text(
                    "the question was withdrawn: the run is stopping; finish what you can and stop",
                    false,
                );
            }
            Some(Status::TimedOut) => return timed_out(timeout),
            Some(Status::Pending) => {}
        }
        let gone = closing.load(Ordering::SeqCst);
        if gone || Instant::now() >= deadline {
            let status = if gone {
                Status::Cancelled
            } else {
                Status::TimedOut
            };
            match questions::close(home, &asked.id, status) {
                Ok(Some(question)) if question.status == Status::Answered => break,
                _ if gone => return tool_text("the question was withdrawn", false),
                _ => return timed_out(timeout),
            }
        }
        std::thread::sleep(ASK_POLL);
    }
    let answered = questions::load(home, &asked.id).and_then(|question| question.answer);
    let text = answered.map_or_else(String::new, |answer| answer.text);
    tool_text(&format!("A person answered: {text}"), false)
}

/// What `ralph_ask` says when nobody answered in time.
fn timed_out(timeout: Duration) -> Value {
    let after = crate::output::format::compact_duration(timeout);
    tool_text(
        &format!("no answer in {after}: decide yourself and say what you chose"),
        false,
    )
}

/// Adds a follow-up task to the loop's task list, its blockers known there.
fn add_task(
    dir: &RalphDir,
    text: &str,
    blocked_by: Option<&str>,
    touches: Option<&str>,
) -> Result<Value, String> {
    if text.is_empty() {
        return Err("ralph_add_task needs \"text\": the task's description".to_owned());
    }
    let list = tasks::TaskList::parse(&std::fs::read_to_string(dir.tasks()).unwrap_or_default());
    let blockers: Vec<&str> = (blocked_by.into_iter().flat_map(|ids| ids.split(',')))
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .collect();
    let unknown: Vec<&str> = blockers
        .iter()
        .copied()
        .filter(|id| list.by_id(id).is_none())
        .collect();
    if !unknown.is_empty() {
        let known: Vec<String> = tasks::task_ids(&list);
        return Err(format!(
            "ralph_add_task: blocked_by names no task of the list: {} (its ids: {})",
            unknown.join(", "),
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ));
    }
    let own: Vec<(&'static str, String)> = touches
        .map(|globs| (tasks::TOUCHES, globs.to_owned()))
        .into_iter()
        .collect();
    let joined = (!blockers.is_empty()).then(|| blockers.join(","));
    let (number, _) = crate::commands::add_task_with(dir, text, (None, joined.as_deref()), &own)
        .map_err(|err| format!("ralph_add_task: {err:#}"))?;
    let list = tasks::TaskList::parse(&std::fs::read_to_string(dir.tasks()).unwrap_or_default());
    let id = tasks::task_ids(&list)
        .get(number.saturating_sub(1))
        .cloned();
    Ok(tool_json(
        &json!({"number": number, "id": id, "blocked_by": blockers, "added_to": dir.tasks().display().to_string()}),
    ))
}

/// The task's state and what is pending for it.
fn context(binding: &Binding, home: &RalphDir, dir: &RalphDir) -> Value {
    let list = tasks::TaskList::parse(&std::fs::read_to_string(dir.tasks()).unwrap_or_default());
    let task = (binding.task.as_deref()).and_then(|id| {
        let ids = tasks::task_ids(&list);
        let index = ids.iter().position(|each| each == id)?;
        let task = &list.tasks[index];
        Some(json!({"id": id, "text": task.text, "status": task.status.name(), "blocked_by": list.blockers(task)}))
    });
    let hints: Vec<String> = match binding.task.as_deref() {
        Some(id) => (crate::storage::context::shared_for(home, id)
            .unwrap_or_default()
            .iter())
        .map(|section| section.text().trim().to_owned())
        .collect(),
        None => (crate::storage::context::pending(&home.context())
            .ok()
            .flatten())
        .map(|pending| pending.text().trim().to_owned())
        .into_iter()
        .collect(),
    };
    let asked: Vec<Value> = (questions::all(home).into_iter())
        .filter(|question| question.task == binding.task)
        .map(|question| json!({"id": question.id, "question": question.question, "status": question.status, "answer": question.answer.map(|answer| answer.text)}))
        .collect();
    json!({
        "task": task,
        "iteration": binding.iteration,
        "pending_hints": hints,
        "questions": asked,
    })
}

/// The tools, as `tools/list` declares them (their names and schemas are the interface).
pub(crate) fn tools() -> Vec<Value> {
    let text = |what: &str| json!({"type": "string", "description": what});
    vec![
        tool(
            "ralph_ask",
            "Asks a person a question and waits for the answer (until the run's --ask-timeout, 15m by default; then decide yourself and say what you chose). Only for a real decision or a missing secret; never to ask permission to continue.",
            json!({
                "question": text("The question, with what you need decided and why"),
                "options": {"type": "array", "items": {"type": "string"}, "description": "The choices, if there are some; the person may answer with one's number"},
                "urgency": {"type": "string", "enum": ["low", "normal", "high"], "description": "How soon it matters: low, normal (default) or high"}
            }),
            &["question"],
        ),
        tool(
            "ralph_add_task",
            "Adds a follow-up task to the task list at once (it runs after this one, or beside it).",
            json!({
                "text": text("The task's description"),
                "blocked_by": text("Ids of tasks of the list it waits for, separated by commas"),
                "touches": text("What it changes, as paths or globs separated by commas (e.g. src/api/**, migrations/)")
            }),
            &["text"],
        ),
        tool(
            "ralph_note",
            "Adds a note to the progress log (what you did, learned or leave for the next iteration).",
            json!({"text": text("The note")}),
            &["text"],
        ),
        tool(
            "ralph_context",
            "Your task and its state, the hints people left for your next prompt, and your questions with their answers.",
            json!({}),
            &[],
        ),
    ]
}

#[cfg(test)]
mod tests {
    /// The server offers its four tools and nothing else (under the sandbox too: the list is
    /// all it has).
    #[test]
    fn the_server_offers_its_four_tools_and_no_other() {
        let names: Vec<String> = (super::tools().iter())
            .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(
            names,
            ["ralph_ask", "ralph_add_task", "ralph_note", "ralph_context"]
        );
    }
}
