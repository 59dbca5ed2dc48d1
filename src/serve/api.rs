//! The routes of `--serve`: the page, `/api/v1/…` to read a run, and the POSTs that steer it.

use std::io::Read as _;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde_json::{Value, json};
use tiny_http::{Header, Method, Request, Response};

use super::Site;
use crate::config::LogTarget;
use crate::storage;
use crate::storage::tasks::{self, TaskList};

/// The largest request body read.
const MOST_BODY: usize = 64 << 10;

/// The page, its script and styles inlined.
const PAGE: &str = include_str!("page.html");

/// What every request's thread shares.
pub(super) struct Context {
    pub(super) site: Site,
    pub(super) token: String,
    pub(super) port: u16,
    /// Requests must name this server in `Host` (off with `--serve-allow-remote`, where the
    /// machine's names are not known).
    pub(super) check_host: bool,
    pub(super) closing: Arc<AtomicBool>,
    /// Event streams open now: a closing server lets them send their last lines first.
    pub(super) streams: Arc<std::sync::atomic::AtomicUsize>,
    pub(super) remote: super::remote::Cache,
}

type Reply = Response<std::io::Cursor<Vec<u8>>>;

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).unwrap_or_else(|()| {
        Header::from_bytes(&b"X-Invalid"[..], &b"1"[..]).unwrap_or_else(|()| unreachable!())
    })
}

/// A reply of `kind` with `body`, never cached.
fn reply(status: u16, kind: &str, body: Vec<u8>) -> Reply {
    Response::from_data(body)
        .with_status_code(status)
        .with_header(header("Content-Type", kind))
        .with_header(header("Cache-Control", "no-store"))
        .with_header(header("X-Content-Type-Options", "nosniff"))
}

/// A plain-text reply (errors say what was wrong and what to do).
pub(super) fn text(status: u16, message: &str) -> Reply {
    reply(
        status,
        "text/plain; charset=utf-8",
        format!("{message}\n").into_bytes(),
    )
}

fn json_reply(status: u16, value: &Value) -> Reply {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    reply(status, "application/json", body)
}

fn header_value<'r>(request: &'r Request, name: &'static str) -> Option<&'r str> {
    (request.headers().iter())
        .find(|header| header.field.equiv(name))
        .map(|header| header.value.as_str())
}

/// Answers one request.
pub(super) fn handle(context: &Context, mut request: Request) {
    if let Some(refusal) = refused(context, &request) {
        let _ = request.respond(refusal);
        return;
    }
    let url = request.url().to_owned();
    let path = url.split(['?', '#']).next().unwrap_or_default().to_owned();
    let method = request.method().clone();
    if method == Method::Get && path == "/api/v1/events" {
        let last = header_value(&request, "Last-Event-ID")
            .and_then(|id| id.trim().parse::<u64>().ok())
            .or_else(|| query(&url, "after").and_then(|id| id.parse().ok()))
            .unwrap_or(0);
        super::events::stream(context, request, last);
        return;
    }
    let answer = match (method, path.as_str()) {
        (Method::Get, "/") => reply(200, "text/html; charset=utf-8", PAGE.as_bytes().to_vec()),
        (Method::Get, "/api/v1/state") => json_reply(200, &state_of(context)),
        (Method::Get, "/api/v1/tasks") => json_reply(200, &tasks_of(context)),
        (Method::Get, "/api/v1/report") => report(context),
        (Method::Get, log) if log.starts_with("/api/v1/log/") => {
            log_of(context, &log["/api/v1/log/".len()..])
        }
        (Method::Post, route) => match read_body(&mut request) {
            Err(refusal) => refusal,
            Ok(body) => post(context, route, &body),
        },
        (_, route) if route.starts_with("/api/") || route == "/" => text(
            405,
            "method not allowed here; see the README's \"Watch from a browser\"",
        ),
        _ => text(404, "not found; the page is at /, the API under /api/v1/"),
    };
    let _ = request.respond(answer);
}

/// Why a request is refused before it is read: a foreign `Host` or `Origin`, or a POST without
/// the token.
fn refused(context: &Context, request: &Request) -> Option<Reply> {
    let port = context.port;
    if context.check_host {
        let host = header_value(request, "Host").unwrap_or_default();
        let ours = [
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ];
        if !ours.iter().any(|ours| ours.eq_ignore_ascii_case(host)) {
            return Some(text(
                403,
                "this server answers only to its own address (127.0.0.1)",
            ));
        }
    }
    if let Some(origin) = header_value(request, "Origin") {
        let host = header_value(request, "Host").unwrap_or_default();
        if !origin.eq_ignore_ascii_case(&format!("http://{host}")) {
            return Some(text(403, "requests from other sites are refused"));
        }
    }
    if *request.method() != Method::Get {
        let given = header_value(request, "Authorization")
            .and_then(|value| value.strip_prefix("Bearer "))
            .unwrap_or_default()
            .trim();
        if !same(given.as_bytes(), context.token.as_bytes()) {
            return Some(text(
                401,
                "this needs the server's token: send Authorization: Bearer TOKEN (the token is in .ralph/serve.token)",
            ));
        }
    }
    None
}

/// Compares in a time that does not depend on where the two differ.
fn same(given: &[u8], token: &[u8]) -> bool {
    given.len() == token.len()
        && given
            .iter()
            .zip(token)
            .fold(0_u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

fn query<'u>(url: &'u str, name: &str) -> Option<&'u str> {
    let (_, query) = url.split_once('?')?;
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

fn read_body(request: &mut Request) -> Result<Value, Reply> {
    let mut body = Vec::new();
    let read = request
        .as_reader()
        .take(MOST_BODY as u64 + 1)
        .read_to_end(&mut body);
    if read.is_err() {
        return Err(text(400, "the request's body could not be read"));
    }
    if body.len() > MOST_BODY {
        return Err(text(413, "the request's body is over 64 KiB"));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&body).map_err(|err| {
        text(
            400,
            &format!("the body is not JSON ({err}); send e.g. {{\"text\": \"…\"}}"),
        )
    })
}

/// `GET /api/v1/state`: what `--status --json` prints, and with `--remote` the fleet's claims.
pub(super) fn state_of(context: &Context) -> Value {
    let report = crate::commands::status_report(&context.site.dir);
    let mut value = serde_json::to_value(&report).unwrap_or(Value::Null);
    if let (Some(remote), Value::Object(fields)) = (&context.site.remote, &mut value) {
        fields.insert(
            "remote".to_owned(),
            context
                .remote
                .get(&context.site.cwd, remote, context.site.claim_ttl),
        );
    }
    value
}

fn tasks_of(context: &Context) -> Value {
    let content = storage::read_text(&context.site.dir.tasks()).ok().flatten();
    let (file, list) = match content {
        Some(text) => ("found", TaskList::parse(&text)),
        None => ("missing", TaskList::default()),
    };
    serde_json::to_value(crate::output::report::tasks_report(file, &list)).unwrap_or(Value::Null)
}

fn report(context: &Context) -> Reply {
    let dir = &context.site.dir;
    let repo = crate::git::Repo::discover(&context.site.cwd);
    let to = crate::report::destination(dir, None);
    match crate::report::page(dir, repo.as_ref(), &to, None) {
        Some(page) => reply(200, "text/html; charset=utf-8", page.into_bytes()),
        None => text(404, "nothing to report yet: no loop has run here"),
    }
}

/// `GET /api/v1/log/TASK[/N]` (or `N`, or `last`): the records of that iteration's log.
fn log_of(context: &Context, which: &str) -> Reply {
    let which = if which.is_empty() { "last" } else { which };
    let Ok(target) = LogTarget::parse(which) else {
        return text(
            400,
            "name a log as N, TASK or TASK/N (task ids are letters, digits, - and _)",
        );
    };
    // Only ids that cannot leave `.ralph/logs/`.
    if let LogTarget::Task(task, _) = &target
        && !tasks::is_ref_safe(task)
    {
        return text(400, "a task id is letters, digits, - and _");
    }
    match crate::commands::log::find(&context.site.dir, &target) {
        Ok(path) => match std::fs::read(&path) {
            Ok(bytes) => reply(200, "application/x-ndjson", bytes),
            Err(_) => text(404, "that iteration's log cannot be read"),
        },
        Err(err) => text(404, &format!("{err:#}")),
    }
}

fn post(context: &Context, route: &str, body: &Value) -> Reply {
    let field = |name: &str| body.get(name).and_then(Value::as_str).map(str::trim);
    match route {
        "/api/v1/context" => {
            let Some(text_given) = field("text").filter(|text| !text.is_empty()) else {
                return text(
                    400,
                    "send {\"text\": \"your hint\"} (and \"task\": \"ID\" for one task's loop)",
                );
            };
            match crate::commands::add_context_to(&context.site.dir, text_given, field("task")) {
                Ok(()) => json_reply(200, &json!({"added": true, "task": field("task")})),
                Err(err) => text(400, &format!("{err:#}")),
            }
        }
        "/api/v1/tasks" => {
            let Some(description) = field("text") else {
                return text(
                    400,
                    "send {\"text\": \"the task\"} (and \"id\", \"blocked_by\": \"a,b\")",
                );
            };
            let blocked = field("blocked_by");
            match crate::commands::add_task_to(
                &context.site.dir,
                description,
                (field("id"), blocked),
            ) {
                Ok((number, unknown)) => {
                    json_reply(201, &json!({"number": number, "unknown_blockers": unknown}))
                }
                Err(err) => text(400, &format!("{err:#}")),
            }
        }
        "/api/v1/stop" => stop(context),
        _ => text(
            404,
            "no such action; POST to /api/v1/context, /api/v1/tasks or /api/v1/stop",
        ),
    }
}

/// `POST /api/v1/stop`: the run stops as on Ctrl-C (exit 130, resumable).
fn stop(context: &Context) -> Reply {
    if let Some(run) = &context.site.run {
        run.request();
        return json_reply(202, &json!({"stopping": std::process::id()}));
    }
    match crate::commands::stop_running(&context.site.dir) {
        Ok(pid) => json_reply(202, &json!({"stopping": pid})),
        Err(why) => text(409, &why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abd", b"abc"));
        assert!(!same(b"ab", b"abc"));
        assert!(!same(b"", b"abc"));
    }

    #[test]
    fn a_query_value_is_found_by_name() {
        assert_eq!(query("/api/v1/events?after=12", "after"), Some("12"));
        assert_eq!(query("/x?a=1&after=3", "after"), Some("3"));
        assert_eq!(query("/x", "after"), None);
    }
}
