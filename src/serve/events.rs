//! `GET /api/v1/events`: the event journal as Server-Sent Events. Each event's `id:` is its line
//! number in the journal, so a client that reconnects with `Last-Event-ID` gets every line after
//! that one, none twice; a comment every 15 s keeps the connection open through proxies.

use std::io::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tiny_http::Request;

use super::api::Context;
use crate::journal::Reader;

/// How often the journal is looked at for new lines.
const POLL: Duration = Duration::from_millis(150);

/// How often an idle stream gets a keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Streams the journal's lines after line `after` until the client goes or the server closes.
pub(super) fn stream(context: &Context, request: Request, after: u64) {
    // The head is written by hand: tiny_http buffers a streamed body, and events must leave at
    // once.
    let mut out = request.into_writer();
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nX-Accel-Buffering: no\r\nConnection: close\r\n\r\nretry: 2000\n\n";
    if out
        .write_all(head.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        return;
    }
    context.streams.fetch_add(1, Ordering::SeqCst);
    send_lines(context, &mut out, after);
    context.streams.fetch_sub(1, Ordering::SeqCst);
}

/// Sends the journal's lines as they come, and once the server closes, the last ones.
fn send_lines(context: &Context, out: &mut Box<dyn std::io::Write + Send>, after: u64) {
    let mut reader = Reader::new(context.site.dir.root());
    let mut quiet_since = Instant::now();
    loop {
        let last_round = context.closing.load(Ordering::SeqCst);
        let lines = reader.next_lines();
        let mut sent = String::new();
        for (number, line) in lines.into_iter().filter(|(number, _)| *number > after) {
            sent.push_str(&format!("id: {number}\ndata: {line}\n\n"));
        }
        if sent.is_empty() && quiet_since.elapsed() >= KEEP_ALIVE {
            sent.push_str(": keep-alive\n\n");
        }
        if !sent.is_empty() {
            quiet_since = Instant::now();
            if out
                .write_all(sent.as_bytes())
                .and_then(|()| out.flush())
                .is_err()
            {
                return;
            }
        }
        if last_round {
            return;
        }
        std::thread::sleep(POLL);
    }
}
