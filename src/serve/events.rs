//! `GET /api/v1/events`: the event journal as Server-Sent Events. Each event's `id:` is its line
//! number in the journal, so a client that reconnects with `Last-Event-ID` gets every line after
//! that one, none twice; a comment every 15 s keeps the connection open through proxies.

use std::io::Write as _;
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Context;
use super::http::{self, text};
use crate::journal::Reader;

/// How often the journal is looked at for new lines.
const POLL: Duration = Duration::from_millis(150);

/// How often an idle stream gets a keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Event streams served at once; more get 503 (a page reconnects by itself).
const MOST_STREAMS: usize = 32;

/// How long a client may take to accept what is written to it.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// The most events a new stream (one that names no last id) gets from before it connected: the
/// journal's last ones, not years of runs.
const REPLAY: u64 = 2000;

/// Streams the journal's lines after line `after` (`None`: its last [`REPLAY`] lines) until the
/// client goes or the server closes.
pub(super) fn stream(context: &Context, mut out: TcpStream, after: Option<u64>) {
    if context.streams.fetch_add(1, Ordering::SeqCst) >= MOST_STREAMS {
        context.streams.fetch_sub(1, Ordering::SeqCst);
        let busy = text(503, "too many event streams; try again later");
        let _ = http::write_reply(&mut out, &busy);
        return;
    }
    let _ = out.set_write_timeout(Some(WRITE_TIMEOUT));
    if http::write_stream_head(&mut out)
        .and_then(|()| out.write_all(b"retry: 2000\n\n"))
        .is_ok()
    {
        send_lines(context, &mut out, after);
    }
    context.streams.fetch_sub(1, Ordering::SeqCst);
}

/// Sends the journal's lines as they come, and once the server closes, the last ones.
fn send_lines(context: &Context, out: &mut TcpStream, after: Option<u64>) {
    let mut reader = Reader::new(context.site.dir.root());
    let mut quiet_since = Instant::now();
    let mut after = after;
    loop {
        let last_round = context.closing.load(Ordering::SeqCst);
        let lines = reader.next_lines();
        let after = *after.get_or_insert_with(|| {
            let known = lines.last().map_or(0, |(number, _)| *number);
            known.saturating_sub(REPLAY)
        });
        let sent = chunk(&lines, after, quiet_since.elapsed());
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

/// What a stream sends next: the events after line `after` of the `lines` the journal gained,
/// or, after `quiet` of silence as long as [`KEEP_ALIVE`], a comment that keeps it open.
fn chunk(lines: &[(u64, String)], after: u64, quiet: Duration) -> String {
    let mut sent = String::new();
    for (number, line) in lines.iter().filter(|(number, _)| *number > after) {
        sent.push_str(&format!("id: {number}\ndata: {line}\n\n"));
    }
    if sent.is_empty() && quiet >= KEEP_ALIVE {
        sent.push_str(": keep-alive\n\n");
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_after_the_last_id_and_a_keep_alive_after_15_quiet_seconds() {
        let lines = vec![
            (4, "{\"event\":\"a\"}".to_owned()),
            (5, "{\"event\":\"b\"}".to_owned()),
        ];
        assert_eq!(
            chunk(&lines, 4, Duration::from_secs(60)),
            "id: 5\ndata: {\"event\":\"b\"}\n\n",
            "only what comes after, and no keep-alive with it"
        );
        assert_eq!(chunk(&[], 5, Duration::from_secs(14)), "");
        assert_eq!(chunk(&[], 5, Duration::from_secs(15)), ": keep-alive\n\n");
    }
}
