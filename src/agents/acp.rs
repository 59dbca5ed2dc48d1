//! ACP, the Agent Client Protocol: ralph as the client of an agent that speaks JSON-RPC 2.0 on
//! its stdin and stdout (one message per line).
//!
//! One prompt turn per iteration, in a process of its own: `initialize` (protocol version 1, no
//! file system and no terminal offered) → `session/new` (the work tree, and ralph's tools as
//! its one MCP server when they are given) →
//! `session/prompt` (the iteration's prompt as one text block). The answer is the text of the
//! `agent_message_chunk` updates; `tool_call` updates are the tools; the prompt's result gives the
//! stop reason and, where the agent reports it, the tokens. The agent's requests are answered:
//! a permission with its "allow once" option (its "reject once" under `--no-allow-all`), anything
//! else with "method not found".
//!
//! [`Client`] is that conversation for one turn: it reads each line the agent prints and says
//! what to write back and what the line told. It never does I/O: the stream runs the process.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use super::events::{AgentEvent, failure_from_message, str_field, u64_field};
use super::{Failure, FailureKind, Usage};

/// The ACP version ralph speaks.
pub(crate) const PROTOCOL_VERSION: u64 = 1;

/// The ids of ralph's three requests (one process per turn: they never repeat).
const INITIALIZE: u64 = 1;
const NEW_SESSION: u64 = 2;
const PROMPT: u64 = 3;

/// JSON-RPC's "method not found".
const METHOD_NOT_FOUND: i64 = -32601;

/// What one turn asks of an ACP agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Turn {
    /// The iteration's prompt.
    pub(crate) prompt: String,
    /// Permission requests are allowed (else rejected).
    pub(crate) allow: bool,
    /// ralph's tools for the agent, given in `session/new` as its MCP server.
    pub(crate) tools: Option<super::ToolServer>,
}

/// Where the turn is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Initializing,
    OpeningSession,
    Prompting,
    /// ralph asked the agent to cancel the prompt.
    Cancelling,
    /// The prompt was answered, or the turn failed: nothing more is sent.
    Over,
}

/// How the turn ended, once it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// The prompt's result came, with this stop reason.
    Answered(String),
    /// The agent answered one of ralph's requests with an error, or printed what is not
    /// JSON-RPC.
    Failed,
}

/// What one line from the agent asks of ralph.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Step {
    /// Messages to write to the agent's stdin, each one line without its line break.
    pub(crate) send: Vec<String>,
    /// What the line told, for the transcript.
    pub(crate) events: Vec<AgentEvent>,
}

/// One turn's conversation.
#[derive(Debug)]
pub(crate) struct Client {
    turn: Turn,
    cwd: String,
    phase: Phase,
    session: Option<String>,
    end: Option<End>,
    /// The tool calls reported so far, by id (an agent reports each one several times, telling
    /// more as it goes).
    tools: BTreeMap<String, ToolCall>,
}

/// What is known of one tool call.
#[derive(Debug, Default)]
struct ToolCall {
    name: Option<String>,
    detail: Option<String>,
    /// It was counted (it ended, or the turn did).
    counted: bool,
}

impl ToolCall {
    /// Takes in what an update tells: its kind (or title) as the name, its first place (or
    /// title) as the detail.
    fn learn(&mut self, update: &Value) {
        if let Some(kind) = str_field(update, "kind").filter(|kind| *kind != "other") {
            self.name = Some(kind.to_owned());
        }
        let title = str_field(update, "title");
        if self.name.is_none() {
            self.name = title
                .and_then(|title| title.split_whitespace().next())
                .map(str::to_owned);
        }
        let place = update["locations"]
            .as_array()
            .and_then(|places| places.first())
            .and_then(|place| str_field(place, "path"));
        if let Some(place) = place {
            self.detail = Some(place.to_owned());
        } else if self.detail.is_none() {
            self.detail = title.map(str::to_owned);
        }
    }

    /// The tool event, once.
    fn count(&mut self) -> Option<AgentEvent> {
        if std::mem::replace(&mut self.counted, true) {
            return None;
        }
        Some(AgentEvent::Tool {
            name: self.name.clone().unwrap_or_else(|| "tool".to_owned()),
            detail: self.detail.clone(),
        })
    }
}

impl Client {
    pub(crate) fn new(turn: &Turn, cwd: &Path) -> Self {
        Self {
            turn: turn.clone(),
            // As a path, without a trailing `/` the worktree's may carry.
            cwd: (cwd.components().collect::<std::path::PathBuf>())
                .to_string_lossy()
                .into_owned(),
            phase: Phase::Initializing,
            session: None,
            end: None,
            tools: BTreeMap::new(),
        }
    }

    /// The MCP servers `session/new` gives the agent: ralph's tools, when given.
    fn mcp_servers(&self) -> Value {
        let servers = (self.turn.tools.iter()).map(|tools| {
            json!({"name": super::TOOL_SERVER, "command": tools.command, "args": tools.args, "env": []})
        });
        Value::Array(servers.collect())
    }

    /// The first message: `initialize`.
    pub(crate) fn opening(&self) -> String {
        request(
            INITIALIZE,
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": false, "writeTextFile": false},
                    "terminal": false
                },
                "clientInfo": {"name": "ralph", "version": env!("CARGO_PKG_VERSION")}
            }),
        )
    }

    /// How the turn ended, if it has.
    pub(crate) fn end(&self) -> Option<&End> {
        self.end.as_ref()
    }

    /// Whether nothing more will be sent (the stdin can be closed).
    pub(crate) fn is_over(&self) -> bool {
        self.phase == Phase::Over
    }

    /// Whether ralph asked the agent to cancel.
    pub(crate) fn cancelled(&self) -> bool {
        self.phase == Phase::Cancelling
            || matches!(&self.end, Some(End::Answered(reason)) if reason == "cancelled")
    }

    /// `session/cancel`, when a prompt is being answered (then the turn is cancelling).
    pub(crate) fn cancel(&mut self) -> Option<String> {
        if self.phase != Phase::Prompting {
            return None;
        }
        self.phase = Phase::Cancelling;
        let session = self.session.clone().unwrap_or_default();
        Some(notification(
            "session/cancel",
            json!({"sessionId": session}),
        ))
    }

    /// What the agent printing `line` means: replies to send, events to record.
    pub(crate) fn on_line(&mut self, line: &str) -> Step {
        let mut step = Step::default();
        let line = line.trim();
        if line.is_empty() {
            return step;
        }
        let message = match serde_json::from_str::<Value>(line) {
            Ok(message @ Value::Object(_)) => message,
            _ => {
                if !self.is_over() {
                    let shown: String = line.chars().take(80).collect();
                    self.fail(
                        &mut step,
                        &format!("printed what is not an ACP message: {shown}"),
                        None,
                    );
                }
                return step;
            }
        };
        let id = message.get("id").filter(|id| !id.is_null());
        match (message.get("method").and_then(Value::as_str), id) {
            (Some(method), Some(id)) => step.send.push(self.answer(method, id, &message)),
            (Some("session/update"), None) => {
                self.update(&message["params"]["update"], &mut step.events);
            }
            (Some(_), None) => {}
            (None, Some(id)) => self.response(id.as_u64(), &message, &mut step),
            (None, None) => {}
        }
        step
    }

    /// The reply to a request from the agent.
    fn answer(&self, method: &str, id: &Value, message: &Value) -> String {
        if method != "session/request_permission" {
            return error_reply(
                id,
                METHOD_NOT_FOUND,
                &format!("ralph does not offer {method}"),
            );
        }
        let options = message["params"]["options"].as_array();
        let kinds: &[&str] = if self.phase == Phase::Cancelling {
            &[]
        } else if self.turn.allow {
            &["allow_once", "allow_always"]
        } else {
            &["reject_once", "reject_always"]
        };
        let chosen = kinds.iter().find_map(|kind| {
            options?
                .iter()
                .find(|option| str_field(option, "kind") == Some(kind))
                .and_then(|option| option.get("optionId"))
        });
        let outcome = match chosen {
            Some(option) => json!({"outcome": "selected", "optionId": option}),
            None => json!({"outcome": "cancelled"}),
        };
        reply(id, json!({"outcome": outcome}))
    }

    /// A response to one of ralph's requests.
    fn response(&mut self, id: Option<u64>, message: &Value, step: &mut Step) {
        let Some(id) = id.filter(|id| (INITIALIZE..=PROMPT).contains(id)) else {
            return;
        };
        if let Some(error) = message.get("error") {
            let what = match id {
                INITIALIZE => "refused to start (initialize)",
                NEW_SESSION => "could not open a session",
                _ => "failed the prompt",
            };
            let said = str_field(error, "message").unwrap_or("no message");
            let data = error.get("data").map(compact).unwrap_or_default();
            let detail = format!(
                "{what}: {said}{}",
                if data.is_empty() {
                    String::new()
                } else {
                    format!(" ({data})")
                }
            );
            self.fail(step, &detail, Some(failure_from_message(said).kind));
            return;
        }
        let result = &message["result"];
        match (id, self.phase) {
            (INITIALIZE, Phase::Initializing) => {
                self.phase = Phase::OpeningSession;
                step.send.push(request(
                    NEW_SESSION,
                    "session/new",
                    json!({"cwd": self.cwd, "mcpServers": self.mcp_servers()}),
                ));
            }
            (NEW_SESSION, Phase::OpeningSession) => {
                let Some(session) = str_field(result, "sessionId") else {
                    self.fail(step, "opened a session without an id", None);
                    return;
                };
                self.session = Some(session.to_owned());
                step.events.push(AgentEvent::Session(session.to_owned()));
                self.phase = Phase::Prompting;
                step.send.push(request(
                    PROMPT,
                    "session/prompt",
                    json!({
                        "sessionId": session,
                        "prompt": [{"type": "text", "text": self.turn.prompt}]
                    }),
                ));
            }
            (PROMPT, Phase::Prompting | Phase::Cancelling) => {
                // Tools the agent never said ended still ran.
                step.events
                    .extend(self.tools.values_mut().filter_map(ToolCall::count));
                if let Some(usage) = prompt_usage(result) {
                    step.events.push(AgentEvent::Usage(usage));
                }
                let reason = str_field(result, "stopReason").unwrap_or("end_turn");
                if matches!(reason, "max_tokens" | "max_turn_requests" | "refusal") {
                    step.events.push(AgentEvent::Notice(format!(
                        "the agent ended its turn early: {reason}"
                    )));
                }
                step.events.push(AgentEvent::StopReason(reason.to_owned()));
                self.end = Some(End::Answered(reason.to_owned()));
                self.phase = Phase::Over;
            }
            _ => {}
        }
    }

    /// A `session/update` notification.
    fn update(&mut self, update: &Value, events: &mut Vec<AgentEvent>) {
        match str_field(update, "sessionUpdate") {
            Some("agent_message_chunk") => {
                if let Some(text) = update["content"]
                    .get("text")
                    .and_then(Value::as_str)
                    .filter(|text| !text.is_empty())
                {
                    events.push(AgentEvent::TextPiece(text.to_owned()));
                }
                // Qwen Code reports each model call's tokens here.
                if let Some(usage) = update.get("_meta").and_then(|meta| meta.get("usage")) {
                    events.push(AgentEvent::Usage(camel_usage(usage)));
                }
            }
            Some("tool_call" | "tool_call_update") => {
                let Some(id) = str_field(update, "toolCallId") else {
                    return;
                };
                // Counted when it ends, with all its updates told (a path often comes after
                // the first).
                let call = self.tools.entry(id.to_owned()).or_default();
                call.learn(update);
                let status = str_field(update, "status");
                if matches!(status, Some("completed" | "failed")) {
                    events.extend(call.count());
                }
                if status == Some("failed") {
                    let title = str_field(update, "title").unwrap_or("a tool call");
                    events.push(AgentEvent::ToolError(format!("{title} failed")));
                }
            }
            _ => {}
        }
    }

    fn fail(&mut self, step: &mut Step, what: &str, kind: Option<FailureKind>) {
        self.phase = Phase::Over;
        self.end = Some(End::Failed);
        step.events.push(AgentEvent::Failure(Failure {
            kind: kind.unwrap_or(FailureKind::AgentError),
            status: None,
            message: what.to_owned(),
            retry_at: None,
        }));
    }

    /// What it means that the agent exited (or its output closed) now: a failure unless the
    /// turn ended or ralph stopped it.
    pub(crate) fn exited(&mut self) -> Option<AgentEvent> {
        if self.end.is_some() || self.cancelled() {
            return None;
        }
        let mut step = Step::default();
        let when = match self.phase {
            Phase::Initializing => "before answering initialize",
            Phase::OpeningSession => "before opening a session",
            _ => "before answering the prompt",
        };
        self.fail(&mut step, &format!("exited {when}"), None);
        step.events.pop()
    }
}

/// Whether a line is an ACP message (JSON-RPC), which the transcript never shows as text.
pub(crate) fn is_message(line: &str) -> bool {
    serde_json::from_str::<Value>(line).is_ok_and(|value| value.get("jsonrpc").is_some())
}

/// The tokens in a prompt's result: `usage` (OpenCode, Copilot) or Gemini CLI's
/// `_meta.quota.token_count`.
fn prompt_usage(result: &Value) -> Option<Usage> {
    if let Some(usage) = result.get("usage").filter(|usage| usage.is_object()) {
        return Some(camel_usage(usage));
    }
    let count = result.get("_meta")?.get("quota")?.get("token_count")?;
    Some(Usage {
        input: u64_field(count, "input_tokens"),
        output: u64_field(count, "output_tokens"),
        cache_read: 0,
        cache_write: 0,
    })
}

/// ACP's usage object (`inputTokens`, `outputTokens`, `cachedReadTokens`, `cachedWriteTokens`).
fn camel_usage(usage: &Value) -> Usage {
    Usage {
        input: u64_field(usage, "inputTokens"),
        output: u64_field(usage, "outputTokens"),
        cache_read: u64_field(usage, "cachedReadTokens"),
        cache_write: u64_field(usage, "cachedWriteTokens"),
    }
}

fn compact(value: &Value) -> String {
    let text = match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    text.chars().take(200).collect()
}

fn request(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

fn notification(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}

fn reply(id: &Value, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

fn error_reply(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(allow: bool) -> Client {
        let turn = Turn {
            prompt: "create the file, then say COMPLETE".to_owned(),
            allow,
            tools: None,
        };
        Client::new(&turn, Path::new("/work"))
    }

    /// What replaying a recorded turn gives: every event, and every message ralph sent.
    struct Replay {
        events: Vec<AgentEvent>,
        sent: Vec<Value>,
        recorded: Vec<Value>,
        client: Client,
    }

    /// Replays `tests/fixtures/acp/acp-NAME-turn.jsonl`, a turn of a real agent with another
    /// client: the agent's lines go to ralph's client (the responses renumbered from that
    /// client's ids, 0 to 2, to ralph's, 1 to 3).
    fn replay(name: &str) -> Replay {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/acp")
            .join(format!("acp-{name}-turn.jsonl"));
        let mut replay = Replay {
            events: Vec::new(),
            sent: vec![serde_json::from_str(&client(true).opening()).unwrap()],
            recorded: Vec::new(),
            client: client(true),
        };
        for line in std::fs::read_to_string(path).unwrap().lines() {
            let record: Value = serde_json::from_str(line).unwrap();
            let mut message = record["msg"].clone();
            if record["dir"] == ">" {
                replay.recorded.push(message);
                continue;
            }
            if message.get("method").is_none()
                && let Some(id) = message["id"].as_u64()
            {
                message["id"] = json!(id + 1);
            }
            let step = replay.client.on_line(&message.to_string());
            replay.events.extend(step.events);
            replay
                .sent
                .extend(step.send.iter().map(|m| serde_json::from_str(m).unwrap()));
        }
        replay
    }

    fn answer(events: &[AgentEvent]) -> String {
        events
            .iter()
            .filter_map(|event| match event {
                AgentEvent::TextPiece(text) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    fn tokens(events: &[AgentEvent]) -> (u64, u64) {
        events
            .iter()
            .fold((0, 0), |(input, output), event| match event {
                AgentEvent::Usage(usage) => (input + usage.input, output + usage.output),
                _ => (input, output),
            })
    }

    /// Five real agents' turns: ralph sends what their client sent (its own ids aside), joins
    /// the answer, counts the one tool, reads the tokens where reported and keeps the stop
    /// reason.
    #[test]
    fn recorded_turns_of_five_agents() {
        let cases = [
            ("gemini", Some((200, 40))),
            ("qwen", Some((200, 40))),
            ("copilot", Some((200, 40))),
            ("droid", None),
            ("opencode", Some((100, 20))),
        ];
        for (name, usage) in cases {
            let replay = replay(name);
            assert_eq!(replay.sent.len(), replay.recorded.len(), "{name}");
            for (sent, recorded) in replay.sent.iter().zip(&replay.recorded) {
                assert_eq!(sent["method"], recorded["method"], "{name}: {sent}");
                if sent.get("method").is_none() {
                    // A reply to the agent: the same answer to the same request.
                    assert_eq!(sent["id"], recorded["id"], "{name}");
                    assert_eq!(sent["result"], recorded["result"], "{name}: {sent}");
                    assert_eq!(sent["error"]["code"], recorded["error"]["code"], "{name}");
                }
            }
            assert_eq!(replay.sent[1]["params"]["cwd"], "/work", "{name}");
            let text = answer(&replay.events);
            assert!(
                text.ends_with("Done. <promise>COMPLETE</promise>"),
                "{name}: {text}"
            );
            let tools: Vec<&AgentEvent> = (replay.events.iter())
                .filter(|event| matches!(event, AgentEvent::Tool { .. }))
                .collect();
            assert_eq!(tools.len(), 1, "{name}: {tools:?}");
            assert!(
                matches!(tools[0], AgentEvent::Tool { name, detail: Some(detail) } if name == "edit" && detail.contains("mock_output.txt")),
                "{name}: {tools:?}"
            );
            match usage {
                Some(expected) => assert_eq!(tokens(&replay.events), expected, "{name}"),
                None => assert!(
                    !replay
                        .events
                        .iter()
                        .any(|e| matches!(e, AgentEvent::Usage(_)))
                ),
            }
            assert!(
                replay
                    .events
                    .contains(&AgentEvent::StopReason("end_turn".to_owned()))
            );
            assert!(
                replay
                    .events
                    .iter()
                    .any(|e| matches!(e, AgentEvent::Session(id) if !id.is_empty()))
            );
            assert!(
                !replay
                    .events
                    .iter()
                    .any(|e| matches!(e, AgentEvent::Failure(_))),
                "{name}"
            );
            assert_eq!(
                replay.client.end(),
                Some(&End::Answered("end_turn".to_owned()))
            );
            assert!(replay.client.is_over());
        }
    }

    fn opened(allow: bool) -> Client {
        let mut client = client(allow);
        client.on_line(r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}"#);
        let step = client.on_line(r#"{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s1"}}"#);
        assert!(step.send[0].contains("session/prompt"));
        client
    }

    const PERMISSION: &str = r#"{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"sessionId":"s1","options":[{"optionId":"a2","kind":"allow_always"},{"optionId":"a1","kind":"allow_once"},{"optionId":"r1","kind":"reject_once"}]}}"#;

    #[test]
    fn permissions_are_allowed_once_or_rejected_once_and_other_requests_refused() {
        let mut allowing = opened(true);
        let step = allowing.on_line(PERMISSION);
        assert_eq!(
            step.send,
            [
                r#"{"id":7,"jsonrpc":"2.0","result":{"outcome":{"optionId":"a1","outcome":"selected"}}}"#
            ]
        );
        let mut rejecting = opened(false);
        let step = rejecting.on_line(PERMISSION);
        assert!(
            step.send[0].contains(r#""optionId":"r1""#),
            "{:?}",
            step.send
        );
        let step = rejecting
            .on_line(r#"{"jsonrpc":"2.0","id":"x","method":"fs/read_text_file","params":{}}"#);
        let reply: Value = serde_json::from_str(&step.send[0]).unwrap();
        assert_eq!(reply["id"], "x");
        assert_eq!(reply["error"]["code"], METHOD_NOT_FOUND);
        assert!(!rejecting.is_over(), "the turn goes on");
    }

    #[test]
    fn a_cancel_is_sent_once_a_prompt_runs_and_its_answer_ends_the_turn_quietly() {
        let mut starting = client(true);
        assert_eq!(
            starting.cancel(),
            None,
            "nothing to cancel before the prompt"
        );
        let mut client = opened(true);
        let cancel: Value = serde_json::from_str(&client.cancel().unwrap()).unwrap();
        assert_eq!(cancel["method"], "session/cancel");
        assert_eq!(cancel["params"]["sessionId"], "s1");
        assert_eq!(client.cancel(), None);
        // A permission asked while cancelling is cancelled.
        assert!(client.on_line(PERMISSION).send[0].contains(r#""outcome":"cancelled""#));
        let step =
            client.on_line(r#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled"}}"#);
        assert!(
            step.events
                .contains(&AgentEvent::StopReason("cancelled".to_owned()))
        );
        assert!(client.is_over() && client.cancelled());
        assert_eq!(client.exited(), None);
    }

    #[test]
    fn what_goes_wrong_is_one_failure() {
        let failure = |events: &[AgentEvent]| {
            events.iter().find_map(|event| match event {
                AgentEvent::Failure(failure) => Some(failure.clone()),
                _ => None,
            })
        };
        // The agent exits at each step.
        let mut early = client(true);
        let gone = early.exited().unwrap();
        assert!(
            matches!(&gone, AgentEvent::Failure(f) if f.message == "exited before answering initialize"),
            "{gone:?}"
        );
        let mut prompting = opened(true);
        assert!(
            matches!(prompting.exited(), Some(AgentEvent::Failure(f)) if f.message == "exited before answering the prompt")
        );
        // An error answer, classified from its message.
        let mut limited = opened(true);
        let step = limited.on_line(
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"429 Too Many Requests"}}"#,
        );
        let failed = failure(&step.events).unwrap();
        assert_eq!(failed.kind, FailureKind::RateLimit);
        assert_eq!(failed.message, "failed the prompt: 429 Too Many Requests");
        assert!(limited.is_over());
        assert_eq!(limited.exited(), None, "one failure, not two");
        // A line that is not JSON-RPC.
        let mut noisy = opened(true);
        let step = noisy.on_line("Loading extensions…");
        assert!(
            failure(&step.events)
                .unwrap()
                .message
                .contains("not an ACP message: Loading extensions…")
        );
        assert!(noisy.is_over());
    }

    #[test]
    fn a_long_notification_is_read_and_passed_over() {
        let mut client = opened(true);
        let big = format!(
            r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s1","update":{{"sessionUpdate":"available_commands_update","availableCommands":[{{"name":"x","description":"{}"}}]}}}}}}"#,
            "d".repeat(600 * 1024)
        );
        assert_eq!(client.on_line(&big), Step::default());
        assert!(is_message(&big));
        assert!(!is_message("plain text"));
    }
}
