//! `--serve [ADDR]`: the runs of this repository on the wire — a small synchronous HTTP server
//! (one thread for connections, one per request) beside a loop started elsewhere, or inside a
//! run. It reads what the run leaves in `.ralph/` (its state, task list, logs and event journal),
//! so it never slows or blocks the loop, and it keeps working from run to run.
//!
//! Security: every POST needs `Authorization: Bearer TOKEN` (a random token written to
//! `.ralph/serve.token`, mode 0600, and printed once); a request whose `Origin` is not the
//! server's own gets 403, and on loopback so does one whose `Host` is not (no page of another
//! site can reach it, even through a name that resolves to 127.0.0.1); a non-loopback address
//! needs `--serve-allow-remote`; bodies are limited to 64 KiB; `/api` reads only `.ralph/`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;

use crate::error::fail;
use crate::signal::StopFlag;
use crate::storage::RalphDir;

mod api;
mod events;
mod http;
mod remote;

/// What every request's thread shares.
struct Context {
    site: Site,
    token: String,
    port: u16,
    /// `--serve-allow-remote`: `Host` may also name this machine by an address or its name.
    remote_allowed: bool,
    closing: Arc<AtomicBool>,
    /// Event streams open now: a closing server lets them send their last lines first.
    streams: Arc<std::sync::atomic::AtomicUsize>,
    remote: remote::Cache,
}

pub(crate) use crate::storage::SERVE_TOKEN_FILE as TOKEN_FILE;

/// Connections served at once; more get 503.
const MOST_CONNECTIONS: usize = 64;

pub(crate) use crate::options::parse::Addr;

/// What a server serves, and how it stops a run.
pub(crate) struct Site {
    pub(crate) dir: RalphDir,
    pub(crate) cwd: PathBuf,
    /// `--remote NAME`: the fleet's claims on that remote, in the state and on the page.
    pub(crate) remote: Option<String>,
    /// The run this server is part of (`ralph "…" --serve`): a stop request stops it directly.
    pub(crate) run: Option<StopFlag>,
    /// `--claim-ttl`: when a claim on the remote shows as stale.
    pub(crate) claim_ttl: std::time::Duration,
}

/// A running server; dropping it stops it.
pub(crate) struct Server {
    wake: std::net::SocketAddr,
    closing: Arc<AtomicBool>,
    streams: Arc<AtomicUsize>,
    accept: Option<JoinHandle<()>>,
    /// The page's address, token included.
    pub(crate) url: String,
    /// `.ralph/serve.token` and what this server wrote there: removed when it stops.
    token_file: (std::path::PathBuf, String),
}

impl Server {
    /// Listens on `addr` (a non-loopback one only with `allow_remote`), writes a new token, and
    /// serves `site` on a thread of its own until dropped.
    pub(crate) fn start(addr: &Addr, allow_remote: bool, site: Site) -> anyhow::Result<Self> {
        let wanted = addr
            .resolved()
            .ok_or_else(|| fail(format!("--serve: cannot resolve {}", addr.0)))?;
        if !wanted.ip().is_loopback() && !allow_remote {
            return Err(fail(format!(
                "--serve {} listens beyond this machine, where anyone who can reach it may read your runs; add --serve-allow-remote if that is what you want, or serve on 127.0.0.1",
                addr.0
            ))
            .into());
        }
        let listener = std::net::TcpListener::bind(wanted).map_err(|err| {
            fail(format!(
                "--serve: cannot listen on {wanted}: {err}; choose another port (--serve 127.0.0.1:PORT)"
            ))
        })?;
        let bound = listener.local_addr()?;
        let token = new_token()?;
        site.dir.ensure()?;
        write_token(&site.dir, &token)?;
        let token_file = (site.dir.root().join(TOKEN_FILE), format!("{token}\n"));
        let shown_host = if bound.ip().is_unspecified() {
            "127.0.0.1".to_owned()
        } else {
            bound.ip().to_string()
        };
        let url = format!("http://{shown_host}:{}/#token={token}", bound.port());
        crate::notify::serving(&url);
        let closing = Arc::new(AtomicBool::new(false));
        let streams = Arc::new(AtomicUsize::new(0));
        let context = Arc::new(Context {
            streams: Arc::clone(&streams),
            site,
            token,
            port: bound.port(),
            remote_allowed: allow_remote,
            closing: Arc::clone(&closing),
            remote: remote::Cache::default(),
        });
        let accept = {
            let closing = Arc::clone(&closing);
            std::thread::Builder::new()
                .name("serve".to_owned())
                .spawn(move || accept(&listener, &closing, &context))?
        };
        // Where a connection wakes the accepting thread when the server closes.
        let wake = if bound.ip().is_unspecified() {
            std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), bound.port())
        } else {
            bound
        };
        Ok(Self {
            wake,
            closing,
            streams,
            accept: Some(accept),
            url,
            token_file,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect_timeout(&self.wake, std::time::Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        // The event streams send what the journal got last (a run's end), then close.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while self.streams.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // The token is no use once the server is gone (one another server wrote since is kept).
        let (path, written) = &self.token_file;
        if std::fs::read_to_string(path).is_ok_and(|now| &now == written) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Counts one open connection while it lives (a panic in its thread included).
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Takes connections until the server closes; each on a thread of its own.
fn accept(listener: &std::net::TcpListener, closing: &AtomicBool, context: &Arc<Context>) {
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if closing.load(Ordering::SeqCst) {
            break;
        }
        let Ok(mut stream) = stream else { continue };
        if open.load(Ordering::SeqCst) >= MOST_CONNECTIONS {
            let busy = http::text(503, "too many connections; try again later");
            let _ = http::write_reply(&mut stream, &busy);
            continue;
        }
        open.fetch_add(1, Ordering::SeqCst);
        let guard = Open(Arc::clone(&open));
        let context = Arc::clone(context);
        let _ = std::thread::Builder::new()
            .name("serve-request".to_owned())
            .spawn(move || {
                let _guard = guard;
                api::serve(&context, stream);
            });
    }
}

/// 32 random bytes, as hex.
fn new_token() -> anyhow::Result<String> {
    crate::model::random_hex(32)
        .map_err(|err| fail(format!("--serve: no random token could be made: {err}")).into())
}

/// Writes the token to `.ralph/serve.token`, readable by the user alone.
fn write_token(dir: &RalphDir, token: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = dir.root().join(TOKEN_FILE);
    // A file left by another server (or another user's umask) is replaced, never reused.
    let _ = std::fs::remove_file(&path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|err| fail(format!("--serve: cannot write {}: {err}", path.display())))?;
    file.write_all(format!("{token}\n").as_bytes())?;
    Ok(())
}

/// `ralph --serve` beside a loop: serves until Ctrl-C.
pub(crate) fn serve_beside(
    addr: &Addr,
    allow_remote: bool,
    site: Site,
    stop: &StopFlag,
) -> anyhow::Result<crate::exit::ExitStatus> {
    let root = site.dir.root().to_owned();
    let server = Server::start(addr, allow_remote, site)?;
    crate::output::serving(&server.url, &root.join(TOKEN_FILE), true);
    while !stop.is_stopping() {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drop(server);
    crate::output::serve_stopped();
    Ok(crate::exit::ExitStatus::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_hex() {
        let (one, two) = (new_token().unwrap(), new_token().unwrap());
        assert_eq!(one.len(), 64);
        assert!(one.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(one, two);
    }
}
