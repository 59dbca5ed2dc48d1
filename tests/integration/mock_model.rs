//! A scripted mock model server for the end-to-end tests with the real agent CLIs.
//!
//! It owns a 127.0.0.1 listener on a free port and answers, with streaming (SSE) responses, the
//! three wire protocols the agents speak:
//!
//! - Anthropic Messages, `POST /v1/messages[?beta=true]` (Claude Code),
//! - OpenAI Responses, `POST /v1/responses` (Codex with a custom provider, `wire_api = "responses"`),
//! - OpenAI Chat Completions, `POST /v1/chat/completions` (OpenCode via `@ai-sdk/openai-compatible`,
//!   Qwen Code, pi, Copilot CLI, Droid),
//! - Gemini API, `POST /v1beta/models/MODEL:streamGenerateContent?alt=sse` (Gemini CLI; see
//!   `mock_model/gemini.rs`).
//!
//! `HEAD` and `GET` requests (Claude's connectivity probe `HEAD /`, model lists) get a 200.
//!
//! Each test scripts the conversation with a queue of [`Turn`]s: every *conversation* request (one
//! that offers tools) consumes the next turn. *Side* requests (no tools offered, such as OpenCode's
//! title generation, or Qwen's memory extraction) get a short text answer and leave the script
//! alone. A tool call that writes a file picks its tool and argument names from the tools the
//! request offers (`mock_model/tools.rs`), since every CLI names them differently. When the script is
//! exhausted the model answers "nothing more to do". Every request is recorded for assertions.
//!
//! Every response carries usage numbers (100 input and 20 output tokens) so the CLIs report tokens
//! and cost. HTTP errors carry `retry-after-ms: 0` so that clients that retry do it at once
//! (except for Qwen Code, which backs off longer when it sees it); 429 and 503 also carry
//! `retry-after: 1`.
//!
//! The server stops when dropped or after its lifetime (120 s by default), whichever comes first.
//! Request handling never panics: a malformed request gets a 400 and is listed in
//! [`MockModel::errors`].

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod gemini;
mod tools;

/// Input tokens reported for every model response.
pub(crate) const INPUT_TOKENS: u64 = 100;
/// Output tokens reported for every model response.
pub(crate) const OUTPUT_TOKENS: u64 = 20;

/// How long a server lives unless dropped earlier (its test drops it): a safety net only. It
/// counts from the server's start, before its test waits for one of the real CLIs' slots (which
/// is not part of the run's deadline), so it outlasts that wait and the deadline together.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(600);
/// The answer to conversation requests once the script is exhausted.
const EXHAUSTED_TEXT: &str = "nothing more to do";
/// The answer to side requests (title generation and the like).
const SIDE_TEXT: &str = "Mock session";

/// One scripted answer of the model.
#[derive(Clone, Debug)]
pub(crate) enum Turn {
    /// Answer with one tool call that writes `content` to `path` (use an absolute path), choosing
    /// the tool from those the request offers: `Write` (Claude), `write` (OpenCode),
    /// `exec_command` with a shell command (Codex), or a `bash`/`Bash`/`shell` tool.
    WriteFile { path: String, content: String },
    /// Answer with this text and stop.
    Text(String),
    /// Answer with a call of the tool `name` (an MCP tool as the CLI names it, e.g.
    /// `mcp__ralph__ralph_status`) with these arguments.
    CallTool { name: String, arguments: Value },
    /// Respond once with this HTTP status and a JSON error body.
    HttpError(u16),
    /// Respond with this HTTP status to this and every later conversation request (the turn is
    /// never consumed), so that the CLIs' own retries fail too.
    HttpErrorForever(u16),
    /// Respond with this HTTP status to every conversation request until `marker` exists (a hook
    /// of ralph's creates it after the failed iteration), then go on with the next turn: the
    /// CLI's own retries fail, ralph's retry succeeds.
    HttpErrorUntil {
        status: u16,
        marker: std::path::PathBuf,
    },
}

/// Which protocol a request used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    Anthropic,
    Responses,
    ChatCompletions,
    /// Gemini API `streamGenerateContent` (SSE) or `generateContent` (one JSON reply).
    Gemini {
        stream: bool,
    },
    /// `HEAD`/`GET` probes and unknown paths.
    Other,
}

/// One request the server received.
#[derive(Clone, Debug)]
pub(crate) struct RecordedRequest {
    pub(crate) method: String,
    /// The request target, query string included (`/v1/messages?beta=true`).
    pub(crate) path: String,
    pub(crate) api: Api,
    /// Whether the request took part in the scripted conversation (it offered tools).
    pub(crate) conversation: bool,
    /// The JSON body, or `Value::Null` when there was none or it was not JSON.
    pub(crate) body: Value,
}

pub(crate) struct Shared {
    turns: Mutex<VecDeque<Turn>>,
    /// Protocols that answer every conversation request with an HTTP status.
    failing: Mutex<Vec<(Api, u16)>>,
    requests: Mutex<Vec<RecordedRequest>>,
    errors: Mutex<Vec<String>>,
    stop: AtomicBool,
    ids: AtomicU64,
}

impl Shared {
    pub(crate) fn next_id(&self, prefix: &str) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}_mock{n:06}")
    }

    fn note_error(&self, message: String) {
        lock(&self.errors).push(message);
    }
}

/// Locks a mutex, ignoring poisoning (a panicking test thread must not hide the records).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running mock model server; stops when dropped.
pub(crate) struct MockModel {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl MockModel {
    /// Starts a server that plays `turns` in order and lives at most 120 s.
    pub(crate) fn start(turns: impl IntoIterator<Item = Turn>) -> Self {
        Self::start_with_lifetime(turns, DEFAULT_LIFETIME)
    }

    /// Starts a server that plays `turns` in order and stops after `lifetime`.
    pub(crate) fn start_with_lifetime(
        turns: impl IntoIterator<Item = Turn>,
        lifetime: Duration,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the mock model server");
        let addr = listener.local_addr().expect("mock model server address");
        listener
            .set_nonblocking(true)
            .expect("non-blocking mock listener");
        let shared = Arc::new(Shared {
            turns: Mutex::new(turns.into_iter().collect()),
            failing: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
            errors: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            ids: AtomicU64::new(1),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("mock-model".into())
                .spawn(move || accept_loop(&listener, &shared, Instant::now() + lifetime))
                .expect("spawn the mock model server")
        };
        Self {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// Answers every conversation request of protocol `api` with HTTP `status` from now on
    /// (one agent out of quota while another one works).
    pub(crate) fn fail_api(&self, api: Api, status: u16) {
        lock(&self.shared.failing).push((api, status));
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash or `/v1`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in arrival order.
    pub(crate) fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The requests that took part in the scripted conversation.
    pub(crate) fn conversation_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|request| request.conversation)
            .collect()
    }

    /// How many scripted turns have not been played yet.
    pub(crate) fn remaining_turns(&self) -> usize {
        lock(&self.shared.turns).len()
    }

    /// Problems met while serving (malformed requests, I/O errors); empty when all went well.
    pub(crate) fn errors(&self) -> Vec<String> {
        lock(&self.shared.errors).clone()
    }

    /// A one-line summary of the received requests, for assertion messages.
    pub(crate) fn summary(&self) -> String {
        let requests = self.requests();
        let lines: Vec<String> = requests
            .iter()
            .map(|r| {
                let kind = if r.conversation { "conv" } else { "side" };
                format!("{} {} ({kind})", r.method, r.path)
            })
            .collect();
        format!(
            "{} request(s): [{}]; errors: {:?}",
            requests.len(),
            lines.join(", "),
            self.errors()
        )
    }
}

impl Drop for MockModel {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, deadline: Instant) {
    while !shared.stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        match listener.accept() {
            Ok((stream, _)) => {
                let for_thread = Arc::clone(shared);
                let spawned = std::thread::Builder::new()
                    .name("mock-model-conn".into())
                    .spawn(move || {
                        if let Err(error) = serve_connection(stream, &for_thread) {
                            for_thread.note_error(format!("connection: {error}"));
                        }
                    });
                if let Err(error) = spawned {
                    shared.note_error(format!("spawn: {error}"));
                }
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) => {
                shared.note_error(format!("accept: {error}"));
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// A parsed HTTP request.
struct HttpRequest {
    method: String,
    target: String,
    body: Vec<u8>,
    keep_alive: bool,
    user_agent: String,
}

/// Serves requests on one connection until the client closes it or asks to.
fn serve_connection(stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let request = match read_request(&mut reader) {
            Ok(Some(request)) => request,
            Ok(None) => return Ok(()),
            Err(error) if error.kind() == io::ErrorKind::InvalidData => {
                shared.note_error(format!("bad request: {error}"));
                let response =
                    Response::json(400, &json!({"error": {"message": error.to_string()}}));
                return response.write_to(&mut writer, false);
            }
            // A kept-alive connection the client left idle.
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(());
            }
            Err(error) => return Err(error),
        };
        let keep_alive = request.keep_alive;
        let response = respond(&request, shared);
        response.write_to(&mut writer, keep_alive)?;
        if !keep_alive {
            return Ok(());
        }
    }
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

/// Reads one request; `None` when the client closed the connection before sending one.
fn read_request(reader: &mut impl BufRead) -> io::Result<Option<HttpRequest>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid(format!("request line {line:?}")));
    };
    let (method, target) = (method.to_owned(), target.to_owned());
    let mut keep_alive = version != "HTTP/1.0";
    let mut content_length = 0usize;
    let mut chunked = false;
    let mut user_agent = String::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 {
            return Err(invalid("connection closed inside the headers"));
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            return Err(invalid(format!("header {header:?}")));
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => {
                content_length = value
                    .parse()
                    .map_err(|_| invalid(format!("content-length {value:?}")))?;
            }
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            "user-agent" => value.clone_into(&mut user_agent),
            "connection" => match value.to_ascii_lowercase().as_str() {
                "close" => keep_alive = false,
                "keep-alive" => keep_alive = true,
                _ => {}
            },
            _ => {}
        }
    }
    let body = if chunked {
        read_chunked(reader)?
    } else {
        let mut body = vec![0; content_length];
        reader.read_exact(&mut body)?;
        body
    };
    Ok(Some(HttpRequest {
        method,
        target,
        body,
        keep_alive,
        user_agent,
    }))
}

fn read_chunked(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        reader.read_line(&mut size_line)?;
        let size_text = size_line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| invalid(format!("chunk size {size_line:?}")))?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                let mut trailer = String::new();
                if reader.read_line(&mut trailer)? == 0 || trailer.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = String::new();
        reader.read_line(&mut crlf)?;
    }
}

/// A complete HTTP response (SSE bodies are small, so they are built in memory).
struct Response {
    status: u16,
    content_type: &'static str,
    extra_headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    head_only: bool,
}

impl Response {
    fn json(status: u16, value: &Value) -> Self {
        Self {
            status,
            content_type: "application/json",
            extra_headers: Vec::new(),
            body: value.to_string().into_bytes(),
            head_only: false,
        }
    }

    fn sse(body: String) -> Self {
        Self {
            status: 200,
            content_type: "text/event-stream",
            extra_headers: vec![("cache-control", "no-cache".to_owned())],
            body: body.into_bytes(),
            head_only: false,
        }
    }

    fn write_to(&self, writer: &mut impl Write, keep_alive: bool) -> io::Result<()> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: {}\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len(),
            if keep_alive { "keep-alive" } else { "close" },
        );
        for (name, value) in &self.extra_headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        writer.write_all(head.as_bytes())?;
        if !self.head_only {
            writer.write_all(&self.body)?;
        }
        writer.flush()
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Mock Status",
    }
}

fn api_of(method: &str, target: &str) -> Api {
    let path = target.split('?').next().unwrap_or(target);
    match (method, path) {
        ("POST", "/v1/messages") => Api::Anthropic,
        ("POST", "/v1/responses") => Api::Responses,
        ("POST", "/v1/chat/completions") => Api::ChatCompletions,
        ("POST", path) if path.starts_with("/v1beta/models/") => {
            if path.ends_with(":streamGenerateContent") {
                Api::Gemini { stream: true }
            } else if path.ends_with(":generateContent") {
                Api::Gemini { stream: false }
            } else {
                Api::Other
            }
        }
        _ => Api::Other,
    }
}

/// Text in a request that marks it as a side call even though it offers tools.
const SIDE_MARKERS: [&str; 2] = [
    "You are a title generator",
    // Qwen Code's managed auto-memory, after the turn.
    "memory extraction subagent",
];

/// Text in a request that marks it as the conversation although it offers no tools: Aider edits
/// by answering with the files, its system prompt says so.
const CONVERSATION_MARKER: &str = "Act as an expert software developer";

/// Whether a model request belongs to the scripted conversation: it offers tools (or is Aider's)
/// and is not a side call (title generation, memory extraction).
fn is_conversation(body: &Value) -> bool {
    let text = body.to_string();
    (!tools::offered(body).is_empty() || text.contains(CONVERSATION_MARKER))
        && !SIDE_MARKERS.iter().any(|marker| text.contains(marker))
}

/// The answer to a request that is not a model call: a health check, the model list.
fn not_a_model_call(request: &HttpRequest) -> Response {
    match request.method.as_str() {
        "HEAD" => Response {
            head_only: true,
            ..Response::json(200, &json!({}))
        },
        "GET" => Response::json(
            200,
            &json!({"object": "list", "data": [{"id": "mock-model", "object": "model"}]}),
        ),
        _ => Response::json(
            404,
            &json!({"error": {"message": format!("mock: no route for {}", request.target)}}),
        ),
    }
}

/// The script's next turn for a request of `api` (a side call gets the side text).
fn next_turn(shared: &Shared, api: Api, conversation: bool) -> Turn {
    let failing = lock(&shared.failing)
        .iter()
        .find(|(failing, _)| *failing == api)
        .map(|(_, status)| *status);
    if let Some(status) = failing.filter(|_| conversation) {
        Turn::HttpError(status)
    } else if conversation {
        let mut turns = lock(&shared.turns);
        if let Some(Turn::HttpErrorUntil { marker, .. }) = turns.front()
            && marker.exists()
        {
            turns.pop_front();
        }
        match turns.front() {
            Some(Turn::HttpErrorForever(status) | Turn::HttpErrorUntil { status, .. }) => {
                Turn::HttpError(*status)
            }
            Some(_) => turns
                .pop_front()
                .unwrap_or(Turn::Text(EXHAUSTED_TEXT.into())),
            None => Turn::Text(EXHAUSTED_TEXT.into()),
        }
    } else {
        Turn::Text(SIDE_TEXT.into())
    }
}

fn respond(request: &HttpRequest, shared: &Shared) -> Response {
    let api = api_of(&request.method, &request.target);
    let body: Value = if request.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&request.body).unwrap_or_else(|error| {
            shared.note_error(format!(
                "{} {}: body is not JSON: {error}",
                request.method, request.target
            ));
            Value::Null
        })
    };
    let conversation = api != Api::Other && is_conversation(&body);
    lock(&shared.requests).push(RecordedRequest {
        method: request.method.clone(),
        path: request.target.clone(),
        api,
        conversation,
        body: body.clone(),
    });

    if api == Api::Other {
        return not_a_model_call(request);
    }

    let turn = next_turn(shared, api, conversation);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock-model")
        .to_owned();
    let answer = match turn {
        Turn::HttpError(status)
        | Turn::HttpErrorForever(status)
        | Turn::HttpErrorUntil { status, .. } => {
            return http_error(api, status, &request.user_agent);
        }
        Turn::Text(text) => Answer::Text(text),
        Turn::CallTool { name, arguments } => Answer::Tool { name, arguments },
        Turn::WriteFile { path, content } => tools::write_file_call(&body, &path, &content),
    };
    let sse = match api {
        Api::Anthropic => anthropic_sse(shared, &model, &answer),
        Api::Responses => responses_sse(shared, &model, &answer),
        Api::ChatCompletions => chat_sse(shared, &model, &answer),
        Api::Gemini { stream: true } => gemini::sse(shared, &model, &answer),
        Api::Gemini { stream: false } => {
            return Response::json(200, &gemini::response(shared, &model, &answer));
        }
        // Answered before the script was consulted.
        Api::Other => return Response::json(404, &json!({"error": {"message": "mock: no route"}})),
    };
    Response::sse(sse)
}

/// What the model says in one response.
pub(crate) enum Answer {
    Text(String),
    /// A tool call: the tool's name and its JSON arguments.
    Tool {
        name: String,
        arguments: Value,
    },
}

fn http_error(api: Api, status: u16, user_agent: &str) -> Response {
    let message = format!("mock: scripted failure {status}");
    let body = match api {
        Api::Anthropic => {
            json!({"type": "error", "error": {"type": "api_error", "message": message}})
        }
        Api::Gemini { .. } => gemini::error(status, &message),
        _ => json!({"error": {"message": message, "type": "server_error", "code": null}}),
    };
    let mut extra_headers = Vec::new();
    // Qwen Code takes `retry-after-ms: 0` as no answer and backs off for over a minute; with
    // `retry-after: 1` alone it waits a second.
    if !user_agent.starts_with("QwenCode") {
        extra_headers.push(("retry-after-ms", "0".to_owned()));
    }
    if matches!(status, 429 | 503) {
        extra_headers.push(("retry-after", "1".to_owned()));
    }
    Response {
        extra_headers,
        ..Response::json(status, &body)
    }
}

pub(crate) fn sse_event(out: &mut String, event: Option<&str>, data: &Value) {
    if let Some(event) = event {
        out.push_str("event: ");
        out.push_str(event);
        out.push('\n');
    }
    out.push_str("data: ");
    out.push_str(&data.to_string());
    out.push_str("\n\n");
}

/// Anthropic Messages streaming events.
fn anthropic_sse(shared: &Shared, model: &str, answer: &Answer) -> String {
    let mut out = String::new();
    let id = shared.next_id("msg");
    sse_event(
        &mut out,
        Some("message_start"),
        &json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}),
    );
    let stop_reason = match answer {
        Answer::Text(text) => {
            sse_event(
                &mut out,
                Some("content_block_start"),
                &json!({"type": "content_block_start", "index": 0,
                        "content_block": {"type": "text", "text": ""}}),
            );
            sse_event(
                &mut out,
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": 0,
                        "delta": {"type": "text_delta", "text": text}}),
            );
            sse_event(
                &mut out,
                Some("content_block_stop"),
                &json!({"type": "content_block_stop", "index": 0}),
            );
            "end_turn"
        }
        Answer::Tool { name, arguments } => {
            sse_event(
                &mut out,
                Some("content_block_start"),
                &json!({"type": "content_block_start", "index": 0, "content_block": {
                    "type": "tool_use", "id": shared.next_id("toolu"), "name": name, "input": {}}}),
            );
            sse_event(
                &mut out,
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": 0,
                        "delta": {"type": "input_json_delta", "partial_json": arguments.to_string()}}),
            );
            sse_event(
                &mut out,
                Some("content_block_stop"),
                &json!({"type": "content_block_stop", "index": 0}),
            );
            "tool_use"
        }
    };
    sse_event(
        &mut out,
        Some("message_delta"),
        &json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS,
                          "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}),
    );
    sse_event(
        &mut out,
        Some("message_stop"),
        &json!({"type": "message_stop"}),
    );
    out
}

/// OpenAI Responses streaming events.
fn responses_sse(shared: &Shared, model: &str, answer: &Answer) -> String {
    let mut out = String::new();
    let response_id = shared.next_id("resp");
    let response = |status: &str, output: Value| {
        json!({"id": response_id, "object": "response", "model": model, "status": status,
               "output": output})
    };
    sse_event(
        &mut out,
        Some("response.created"),
        &json!({"type": "response.created", "response": response("in_progress", json!([]))}),
    );
    let item = match answer {
        Answer::Text(text) => {
            let item_id = shared.next_id("msg");
            sse_event(
                &mut out,
                Some("response.output_item.added"),
                &json!({"type": "response.output_item.added", "output_index": 0, "item": {
                    "type": "message", "id": item_id, "role": "assistant",
                    "status": "in_progress", "content": []}}),
            );
            sse_event(
                &mut out,
                Some("response.output_text.delta"),
                &json!({"type": "response.output_text.delta", "item_id": item_id,
                        "output_index": 0, "content_index": 0, "delta": text}),
            );
            json!({"type": "message", "id": item_id, "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]})
        }
        Answer::Tool { name, arguments } => {
            let mut call = json!({
                "type": "function_call", "id": shared.next_id("fc"), "call_id": shared.next_id("call"),
                "name": name, "arguments": arguments.to_string(), "status": "completed"});
            // An MCP tool (`mcp__SERVER__TOOL`) is offered in its server's namespace
            // (`mcp__SERVER`): the call names both.
            if let Some((namespace, tool)) = name
                .strip_prefix("mcp__")
                .and_then(|rest| rest.split_once("__"))
            {
                call["namespace"] = json!(format!("mcp__{namespace}"));
                call["name"] = json!(tool);
            }
            call
        }
    };
    sse_event(
        &mut out,
        Some("response.output_item.done"),
        &json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
    );
    let mut completed = response("completed", json!([item]));
    completed["usage"] = json!({
        "input_tokens": INPUT_TOKENS, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS});
    sse_event(
        &mut out,
        Some("response.completed"),
        &json!({"type": "response.completed", "response": completed}),
    );
    out
}

/// OpenAI Chat Completions streaming chunks.
fn chat_sse(shared: &Shared, model: &str, answer: &Answer) -> String {
    let mut out = String::new();
    let id = shared.next_id("chatcmpl");
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let chunk = |choices: Value, usage: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": choices, "usage": usage})
    };
    let (delta, finish_reason) = match answer {
        Answer::Text(text) => (json!({"role": "assistant", "content": text}), "stop"),
        Answer::Tool { name, arguments } => (
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "index": 0, "id": shared.next_id("call"), "type": "function",
                "function": {"name": name, "arguments": arguments.to_string()}}]}),
            "tool_calls",
        ),
    };
    sse_event(
        &mut out,
        None,
        &chunk(
            json!([{"index": 0, "delta": delta, "finish_reason": null}]),
            Value::Null,
        ),
    );
    sse_event(
        &mut out,
        None,
        &chunk(
            json!([{"index": 0, "delta": {}, "finish_reason": finish_reason}]),
            Value::Null,
        ),
    );
    sse_event(
        &mut out,
        None,
        &chunk(
            json!([]),
            json!({"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS,
                   "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS}),
        ),
    );
    out.push_str("data: [DONE]\n\n");
    out
}

/// The server on its own, with raw HTTP requests: no agent CLI needed.
mod tests {
    use std::io::{Read as _, Write as _};
    use std::net::TcpStream;

    use serde_json::{Value, json};

    use super::{Api, MockModel, Turn};

    /// Sends one request (`Connection: close`) and returns the status and the body.
    fn call(mock: &MockModel, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
        let addr = mock.url().trim_start_matches("http://").to_owned();
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let body = body.map(Value::to_string).unwrap_or_default();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nhost: mock\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, body.to_owned())
    }

    /// The `data:` payloads of an SSE body, as JSON (`[DONE]` left out).
    fn events(sse: &str) -> Vec<Value> {
        sse.lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter(|data| *data != "[DONE]")
            .map(|data| serde_json::from_str(data).unwrap())
            .collect()
    }

    fn write_file() -> Turn {
        Turn::WriteFile {
            path: "/w/it's.txt".into(),
            content: "hi\n".into(),
        }
    }

    #[test]
    fn chat_completions_follow_the_script_and_skip_side_requests() {
        let mock = MockModel::start([write_file(), Turn::Text("done".into())]);
        let tools = json!([{"type": "function", "function": {"name": "write"}},
                           {"type": "function", "function": {"name": "bash"}}]);
        let title = json!({"model": "m", "messages": [
            {"role": "system", "content": "You are a title generator. ..."}]});
        let turn = json!({"model": "m", "messages": [], "tools": tools});

        let (status, body) = call(&mock, "POST", "/v1/chat/completions", Some(&title));
        assert_eq!(status, 200);
        assert_eq!(
            events(&body)[0]["choices"][0]["delta"]["content"],
            "Mock session"
        );

        let (_, body) = call(&mock, "POST", "/v1/chat/completions", Some(&turn));
        let chunks = events(&body);
        let call_delta = &chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"];
        assert_eq!(call_delta["name"], "write");
        let arguments: Value =
            serde_json::from_str(call_delta["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(
            arguments,
            json!({"filePath": "/w/it's.txt", "content": "hi\n"})
        );
        assert_eq!(chunks[1]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(chunks[2]["usage"]["prompt_tokens"], 100);

        let (_, body) = call(&mock, "POST", "/v1/chat/completions", Some(&turn));
        assert_eq!(events(&body)[0]["choices"][0]["delta"]["content"], "done");
        let (_, body) = call(&mock, "POST", "/v1/chat/completions", Some(&turn));
        assert_eq!(
            events(&body)[0]["choices"][0]["delta"]["content"],
            "nothing more to do"
        );

        let requests = mock.requests();
        assert_eq!(requests.len(), 4);
        assert!(requests.iter().all(|r| r.api == Api::ChatCompletions));
        assert!(!requests[0].conversation);
        assert_eq!(mock.conversation_requests().len(), 3);
        assert_eq!(requests[1].body["tools"], tools);
        assert_eq!(mock.remaining_turns(), 0);
        assert!(mock.errors().is_empty(), "{:?}", mock.errors());
    }

    #[test]
    fn anthropic_messages_stream_a_tool_call_and_probes_succeed() {
        let mock = MockModel::start([write_file()]);
        let (status, body) = call(&mock, "HEAD", "/", None);
        assert_eq!((status, body.as_str()), (200, ""));
        let request = json!({"model": "claude-x", "messages": [],
                             "tools": [{"name": "Bash"}, {"name": "Write"}]});
        let (status, body) = call(&mock, "POST", "/v1/messages?beta=true", Some(&request));
        assert_eq!(status, 200);
        let events = events(&body);
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(events[0]["message"]["model"], "claude-x");
        assert_eq!(events[1]["content_block"]["name"], "Write");
        let input = events[2]["delta"]["partial_json"].as_str().unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(input).unwrap(),
            json!({"file_path": "/w/it's.txt", "content": "hi\n"})
        );
        assert_eq!(events[4]["delta"]["stop_reason"], "tool_use");
        assert_eq!(events[4]["usage"]["output_tokens"], 20);
        assert_eq!(mock.requests()[1].api, Api::Anthropic);
    }

    #[test]
    fn responses_fail_as_scripted_then_run_a_shell_command() {
        let mock = MockModel::start([Turn::HttpError(503), write_file()]);
        let request = json!({"model": "m", "input": [],
                             "tools": [{"type": "function", "name": "exec_command"}]});
        let (status, body) = call(&mock, "POST", "/v1/responses", Some(&request));
        assert_eq!(status, 503);
        let error: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error["error"]["message"], "mock: scripted failure 503");

        let (_, body) = call(&mock, "POST", "/v1/responses", Some(&request));
        let events = events(&body);
        let done = events
            .iter()
            .find(|e| e["type"] == "response.output_item.done")
            .unwrap();
        assert_eq!(done["item"]["name"], "exec_command");
        let arguments: Value =
            serde_json::from_str(done["item"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(
            arguments["cmd"],
            r"printf '%s' 'hi
' > '/w/it'\''s.txt'"
        );
        let completed = events.last().unwrap();
        assert_eq!(completed["type"], "response.completed");
        assert_eq!(completed["response"]["usage"]["total_tokens"], 120);
    }

    #[test]
    fn a_lasting_error_answers_every_conversation_request() {
        let mock = MockModel::start([Turn::HttpErrorForever(500)]);
        let request = json!({"model": "m", "messages": [], "tools": [{"name": "Write"}]});
        for _ in 0..3 {
            let (status, body) = call(&mock, "POST", "/v1/messages", Some(&request));
            assert_eq!(status, 500);
            assert!(body.contains("api_error"), "{body}");
        }
        assert_eq!(mock.remaining_turns(), 1);
    }
}
