//! The routes of `--serve`: the page, `/api/v1/…` to read a run, and the POSTs that steer it.

use std::net::TcpStream;

use serde_json::{Value, json};

use super::Context;
use super::http::{self, Reply, Request, Unreadable, reply, text};
use crate::config::LogTarget;
use crate::storage;
use crate::storage::tasks::{self, TaskList};

/// The page, its script and styles inlined.
const PAGE: &str = include_str!("page.html");

fn json_reply(status: u16, value: &Value) -> Reply {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    reply(status, "application/json", body)
}

/// Reads one request from the connection and answers it.
pub(super) fn serve(context: &Context, mut stream: TcpStream) {
    let request = match http::read_request(&mut stream) {
        Ok(request) => request,
        Err(Unreadable(Some((status, why)))) => {
            let _ = http::write_reply(&mut stream, &text(status, why));
            return;
        }
        Err(Unreadable(None)) => return,
    };
    if let Some(refusal) = refused(context, &request) {
        let _ = http::write_reply(&mut stream, &refusal);
        return;
    }
    let path = request
        .url
        .split(['?', '#'])
        .next()
        .unwrap_or_default()
        .to_owned();
    if request.method == "GET" && path == "/api/v1/events" {
        let last = request
            .header("Last-Event-ID")
            .and_then(|id| id.trim().parse::<u64>().ok())
            .or_else(|| query(&request.url, "after").and_then(|id| id.parse().ok()));
        super::events::stream(context, stream, last);
        return;
    }
    let answer = route(context, &request, &path);
    let _ = http::write_reply(&mut stream, &answer);
}

/// What may be read (GET), and what changes something (POST, with the token).
const GETS: [&str; 6] = [
    "/",
    "/api/v1/state",
    "/api/v1/questions",
    "/api/v1/tasks",
    "/api/v1/report",
    "/api/v1/events",
];
const POSTS: [&str; 4] = [
    "/api/v1/context",
    "/api/v1/tasks",
    "/api/v1/stop",
    "/api/v1/answers",
];

/// The answer to every request but the event stream.
fn route(context: &Context, request: &Request, path: &str) -> Reply {
    match (request.method.as_str(), path) {
        ("GET", "/") => reply(200, "text/html; charset=utf-8", PAGE.as_bytes().to_vec()),
        ("GET", "/api/v1/state") => json_reply(200, &state_of(context)),
        ("GET", "/api/v1/tasks") => json_reply(200, &tasks_of(context)),
        ("GET", "/api/v1/questions") => json_reply(
            200,
            &json!({"questions": storage::questions::all_in(&crate::git::question_homes(&context.site.dir))}),
        ),
        ("GET", "/api/v1/report") => report(context),
        ("GET", log) if log.starts_with("/api/v1/log/") => log_of(
            context,
            &log["/api/v1/log/".len()..],
            query(&request.url, "view") == Some("shown"),
        ),
        ("POST", route) if POSTS.contains(&route) => match body_of(request) {
            Err(refusal) => refusal,
            Ok(body) => post(context, route, &body),
        },
        (_, route)
            if GETS.contains(&route)
                || POSTS.contains(&route)
                || route.starts_with("/api/v1/log/") =>
        {
            text(
                405,
                "method not allowed here; see the README's \"Watch from a browser\"",
            )
        }
        _ => text(404, "not found; the page is at /, the API under /api/v1/"),
    }
}

/// Whether `host` (a `Host` header) names this server: on its port, `localhost` or a loopback
/// address, and with `--serve-allow-remote` any address literal or this machine's name. A name
/// a DNS server chose (a rebinding attack's) is never one.
fn host_allowed(host: &str, port: u16, remote_allowed: bool) -> bool {
    let (name, given_port) = match host.rsplit_once(':') {
        Some((name, given)) if !name.ends_with(':') => (name, given.parse::<u16>().ok()),
        _ => (host, None),
    };
    if given_port != Some(port) {
        return false;
    }
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    if bare.eq_ignore_ascii_case("localhost") {
        return true;
    }
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        return ip.is_loopback() || remote_allowed;
    }
    remote_allowed
        && nix::unistd::gethostname().is_ok_and(|own| {
            let own = own.to_string_lossy();
            own.eq_ignore_ascii_case(bare)
                || own
                    .split('.')
                    .next()
                    .is_some_and(|short| short.eq_ignore_ascii_case(bare))
        })
}

/// Why a request is refused before it is answered: a foreign `Host` or `Origin`, or a change
/// without the token.
fn refused(context: &Context, request: &Request) -> Option<Reply> {
    let host = request.header("Host").unwrap_or_default();
    if !host_allowed(host, context.port, context.remote_allowed) {
        return Some(text(
            403,
            "this server answers only to its own address (127.0.0.1)",
        ));
    }
    if let Some(origin) = request.header("Origin")
        && !origin.eq_ignore_ascii_case(&format!("http://{host}"))
    {
        return Some(text(403, "requests from other sites are refused"));
    }
    // A browser says where a request comes from even when it sends no Origin.
    if request
        .header("Sec-Fetch-Site")
        .is_some_and(|site| site == "cross-site")
    {
        return Some(text(403, "requests from other sites are refused"));
    }
    if request.method != "GET" {
        let given = request
            .header("Authorization")
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

fn body_of(request: &Request) -> Result<Value, Reply> {
    if request.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&request.body).map_err(|err| {
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
fn log_of(context: &Context, which: &str, shown: bool) -> Reply {
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
    let read = |path: &std::path::Path| -> std::io::Result<Reply> {
        Ok(if shown {
            let text = crate::commands::log::shown_text(path)?;
            reply(200, "text/plain; charset=utf-8", text.into_bytes())
        } else {
            reply(200, "application/x-ndjson", std::fs::read(path)?)
        })
    };
    match crate::commands::log::find(&context.site.dir, &target) {
        Ok(path) => {
            read(&path).unwrap_or_else(|_| text(404, "that iteration's log cannot be read"))
        }
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
                Ok((number, unknown)) if unknown.is_empty() => {
                    json_reply(201, &json!({"number": number, "unknown_blockers": unknown}))
                }
                // Added, as the command line adds it: the blocker may be added next. Said, so
                // that a task waiting for nothing that exists is not a surprise at the run's end.
                Ok((number, unknown)) => json_reply(
                    201,
                    &json!({
                        "number": number,
                        "unknown_blockers": unknown,
                        "warning": format!(
                            "the task waits for {}, which the list does not have (yet); it never starts unless a task with that id is added",
                            unknown.join(", ")
                        ),
                    }),
                ),
                Err(err) => text(400, &format!("{err:#}")),
            }
        }
        "/api/v1/stop" => stop(context),
        "/api/v1/answers" => answer(context, field("id"), field("answer")),
        _ => text(
            404,
            "no such action; POST to /api/v1/context, /api/v1/tasks, /api/v1/answers or /api/v1/stop",
        ),
    }
}

/// `POST /api/v1/answers`: a person's answer to an agent's question.
fn answer(context: &Context, id: Option<&str>, given: Option<&str>) -> Reply {
    let (Some(id), Some(given)) = (id, given) else {
        return text(
            400,
            "send {\"id\": \"q…\", \"answer\": \"your answer\"} (an option may be given by its number)",
        );
    };
    use storage::questions::Refused;
    match storage::questions::answer_in(
        &crate::git::question_homes(&context.site.dir),
        id,
        given,
        "page",
    ) {
        Ok(Ok(question)) => json_reply(200, &serde_json::to_value(question).unwrap_or_default()),
        Ok(Err(refused @ Refused::Unknown(_))) => text(404, &refused.to_string()),
        Ok(Err(refused @ Refused::Closed(_))) => text(409, &refused.to_string()),
        Ok(Err(refused)) => text(400, &refused.to_string()),
        Err(err) => text(500, &format!("{err:#}")),
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
    fn only_this_servers_own_names_pass_the_host_check() {
        assert!(host_allowed("127.0.0.1:8765", 8765, false));
        assert!(host_allowed("localhost:8765", 8765, false));
        assert!(host_allowed("[::1]:8765", 8765, false));
        assert!(!host_allowed("127.0.0.1:9999", 8765, false), "another port");
        assert!(!host_allowed("127.0.0.1", 8765, false), "no port");
        assert!(
            !host_allowed("evil.example:8765", 8765, false),
            "a rebound name"
        );
        assert!(
            !host_allowed("192.168.1.5:8765", 8765, false),
            "not loopback"
        );
        // Serving beyond loopback: an address or this machine's name, never another name.
        assert!(host_allowed("192.168.1.5:8765", 8765, true));
        assert!(!host_allowed("evil.example:8765", 8765, true));
        let own = nix::unistd::gethostname()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(host_allowed(&format!("{own}:8765"), 8765, true));
    }

    #[test]
    fn a_query_value_is_found_by_name() {
        assert_eq!(query("/api/v1/events?after=12", "after"), Some("12"));
        assert_eq!(query("/x?a=1&after=3", "after"), Some("3"));
        assert_eq!(query("/x", "after"), None);
    }
}
