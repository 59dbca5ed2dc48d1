//! Just enough HTTP/1.1 for `--serve`: one request a connection (`Connection: close`), a head of
//! 16 KiB at most, a body only with `Content-Length` and of 64 KiB at most (a larger one is
//! refused before a byte of it is read), and a read timeout, so no client can hold a thread or
//! memory for long.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The largest request head read.
const MOST_HEAD: usize = 16 << 10;

/// The largest request body read.
pub(super) const MOST_BODY: usize = 64 << 10;

/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One request.
#[derive(Debug)]
pub(super) struct Request {
    pub(super) method: String,
    /// The target as sent (`/api/v1/events?after=3`).
    pub(super) url: String,
    headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
}

impl Request {
    /// A header's value (the first, when sent twice), by name in any case.
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        (self.headers.iter())
            .find(|(have, _)| have.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// An answer.
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) kind: &'static str,
    pub(super) body: Vec<u8>,
}

/// A reply of `kind` with `body`.
pub(super) fn reply(status: u16, kind: &'static str, body: Vec<u8>) -> Reply {
    Reply { status, kind, body }
}

/// A plain-text reply (errors say what was wrong and what to do).
pub(super) fn text(status: u16, message: &str) -> Reply {
    reply(
        status,
        "text/plain; charset=utf-8",
        format!("{message}\n").into_bytes(),
    )
}

/// Why no request could be read: answered with this status (`None`: the client went).
pub(super) struct Unreadable(pub(super) Option<(u16, &'static str)>);

/// Reads one request from `stream`.
pub(super) fn read_request(stream: &mut TcpStream) -> Result<Request, Unreadable> {
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let mut head = Vec::new();
    let mut chunk = [0_u8; 4096];
    let end = loop {
        if let Some(at) = find(&head, b"\r\n\r\n") {
            break at;
        }
        if head.len() > MOST_HEAD {
            return Err(Unreadable(Some((431, "the request's head is over 16 KiB"))));
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return Err(Unreadable(None)),
            Ok(read) => head.extend_from_slice(&chunk[..read]),
        }
    };
    let mut body = head.split_off(end + 4);
    let text = String::from_utf8_lossy(&head[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(url), Some(version)) = (first.next(), first.next(), first.next())
    else {
        return Err(Unreadable(Some((400, "not an HTTP request"))));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(Unreadable(Some((505, "only HTTP/1.x is spoken here"))));
    }
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_owned(), value.trim().to_owned()))
        .collect();
    let request = Request {
        method: method.to_owned(),
        url: url.to_owned(),
        headers,
        body: Vec::new(),
    };
    if request.header("Transfer-Encoding").is_some() {
        return Err(Unreadable(Some((
            411,
            "send the body with a Content-Length",
        ))));
    }
    let length = match request.header("Content-Length") {
        None => 0,
        Some(value) => match value.parse::<u64>() {
            Ok(length) => length,
            Err(_) => {
                return Err(Unreadable(Some((
                    400,
                    "a Content-Length that is not a number",
                ))));
            }
        },
    };
    if length > MOST_BODY as u64 {
        return Err(Unreadable(Some((413, "the request's body is over 64 KiB"))));
    }
    let length = usize::try_from(length).unwrap_or(MOST_BODY);
    while body.len() < length {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return Err(Unreadable(None)),
            Ok(read) => body.extend_from_slice(&chunk[..read]),
        }
    }
    body.truncate(length);
    Ok(Request { body, ..request })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

/// The head every answer carries: never cached, never framed, never sniffed.
fn head(status: u16, kind: &str, length: Option<usize>) -> String {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {kind}\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\nContent-Security-Policy: frame-ancestors 'none'\r\nConnection: close\r\n",
        reason(status)
    );
    if let Some(length) = length {
        head.push_str(&format!("Content-Length: {length}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// Writes `reply` and flushes.
pub(super) fn write_reply(stream: &mut TcpStream, reply: &Reply) -> std::io::Result<()> {
    let head = head(reply.status, reply.kind, Some(reply.body.len()));
    stream.write_all(head.as_bytes())?;
    stream.write_all(&reply.body)?;
    stream.flush()
}

/// Writes the head of a stream of events (no length: it ends when the connection does).
pub(super) fn write_stream_head(stream: &mut TcpStream) -> std::io::Result<()> {
    let head = head(200, "text/event-stream", None);
    stream.write_all(head.as_bytes())?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// What the server reads of `sent`, and what it answered when it could not.
    fn read_of(sent: Vec<u8>) -> Result<Request, Option<u16>> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut stream = TcpStream::connect(addr).unwrap();
            let _ = stream.write_all(&sent);
            let _ = stream.shutdown(std::net::Shutdown::Write);
        });
        let (mut stream, _) = listener.accept().unwrap();
        let read = read_request(&mut stream).map_err(|Unreadable(why)| why.map(|(code, _)| code));
        client.join().unwrap();
        read
    }

    #[test]
    fn a_request_is_read_with_its_headers_and_body() {
        let sent = b"POST /api/v1/context?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9\r\ncontent-length: 5\r\n\r\nhello".to_vec();
        let request = read_of(sent).unwrap();
        assert_eq!(
            (request.method.as_str(), request.url.as_str()),
            ("POST", "/api/v1/context?x=1")
        );
        assert_eq!(request.header("HOST"), Some("127.0.0.1:9"));
        assert_eq!(request.body, b"hello");
    }

    #[test]
    fn huge_or_unframed_bodies_and_heads_are_refused_before_they_are_read() {
        let huge = b"POST / HTTP/1.1\r\nContent-Length: 1099511627776\r\n\r\nx".to_vec();
        assert_eq!(read_of(huge).unwrap_err(), Some(413));
        let absurd = b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n".to_vec();
        assert_eq!(read_of(absurd).unwrap_err(), Some(400));
        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec();
        assert_eq!(read_of(chunked).unwrap_err(), Some(411));
        let mut long = b"GET / HTTP/1.1\r\nX-Long: ".to_vec();
        long.extend(std::iter::repeat_n(b'a', 20 << 10));
        assert_eq!(read_of(long).unwrap_err(), Some(431));
        assert_eq!(read_of(b"hello\r\n\r\n".to_vec()).unwrap_err(), Some(400));
        assert_eq!(
            read_of(b"GET / HTTP/1.1\r\n".to_vec()).unwrap_err(),
            None,
            "the client went"
        );
    }
}
