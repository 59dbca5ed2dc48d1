//! ralph's network proxy for `--sandbox-net api`: a CONNECT (and plain HTTP) proxy on a Unix
//! socket, bound into the sandbox, that lets through only the hosts on its allowlist and counts
//! the others; and plain forwards of loopback ports (a local model) through sockets of their own.
//! It tunnels bytes: no TLS is ended here.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::{BufRead as _, BufReader, Read, Write as _};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The port the bridge listens on inside the sandbox for the proxy.
pub(super) const INSIDE_PORT: u16 = 3128;

/// Where the sockets are inside the sandbox.
const INSIDE_DIR: &str = "/run/ralph";

/// The presets of `--sandbox-allow`.
const PRESETS: &[(&str, &[&str])] = &[
    ("@npm", &["registry.npmjs.org", "registry.yarnpkg.com"]),
    ("@pypi", &["pypi.org", "files.pythonhosted.org"]),
    (
        "@crates",
        &[
            "crates.io",
            "index.crates.io",
            "static.crates.io",
            "static.rust-lang.org",
        ],
    ),
    (
        "@github",
        &[
            "github.com",
            "api.github.com",
            "codeload.github.com",
            "objects.githubusercontent.com",
            "raw.githubusercontent.com",
        ],
    ),
];

/// The hosts a sandboxed agent may reach: `HOST` (port 443 or 80) or `HOST:PORT`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Allow {
    entries: BTreeSet<(String, Option<u16>)>,
}

impl Allow {
    /// `--sandbox-allow` values: hosts, `HOST:PORT`, presets.
    pub(crate) fn parse(items: &[String]) -> Result<Self, String> {
        let mut allow = Self::default();
        for item in items {
            let item = item.trim();
            if item.starts_with('@') {
                let (_, hosts) =
                    PRESETS
                        .iter()
                        .find(|(name, _)| *name == item)
                        .ok_or_else(|| {
                            let names: Vec<&str> = PRESETS.iter().map(|(name, _)| *name).collect();
                            format!(
                                "--sandbox-allow: no preset '{item}'; the presets are {}",
                                names.join(" ")
                            )
                        })?;
                allow.add(hosts);
                continue;
            }
            let (host, port) = match item.rsplit_once(':') {
                Some((host, port)) => {
                    let port = port.parse::<u16>().map_err(|_| {
                        format!("--sandbox-allow '{item}': the port must be a number, as in example.com:8443")
                    })?;
                    (host, Some(port))
                }
                None => (item, None),
            };
            if host.is_empty() || host.contains(['/', ' ']) {
                return Err(format!(
                    "--sandbox-allow '{item}' is not a host; give HOST or HOST:PORT, e.g. crates.io"
                ));
            }
            allow.entries.insert((host.to_ascii_lowercase(), port));
        }
        Ok(allow)
    }

    fn add(&mut self, hosts: &[&str]) {
        self.entries
            .extend(hosts.iter().map(|host| ((*host).to_owned(), None)));
    }

    /// Whether `host:port` may be reached: a listed host without a port allows 443 and 80.
    pub(crate) fn allows(&self, host: &str, port: u16) -> bool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        self.entries.iter().any(|(listed, listed_port)| {
            *listed == host
                && match listed_port {
                    Some(p) => *p == port,
                    None => port == 443 || port == 80,
                }
        })
    }
}

/// The running proxy: its socket, its allowlist, what it refused.
pub(super) struct Proxy {
    dir: tempfile::TempDir,
    allow: Arc<Mutex<Allow>>,
    blocked: Arc<Mutex<BTreeMap<String, u32>>>,
    forwards: Mutex<BTreeSet<u16>>,
    /// Set when the proxy goes: its listening threads end at their next connection (which the
    /// drop makes).
    closed: Arc<AtomicBool>,
}

impl Proxy {
    /// Starts the proxy on a socket in a private temporary folder (a short path: a socket's path
    /// has a length limit).
    pub(super) fn start(allow: Allow) -> std::io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("ralph-net").tempdir()?;
        let listener = UnixListener::bind(dir.path().join("proxy.sock"))?;
        let proxy = Self {
            dir,
            allow: Arc::new(Mutex::new(allow)),
            blocked: Arc::default(),
            forwards: Mutex::default(),
            closed: Arc::default(),
        };
        let (allow, blocked) = (proxy.allow.clone(), proxy.blocked.clone());
        let closed = proxy.closed.clone();
        std::thread::Builder::new()
            .name("ralph-proxy".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    if closed.load(Ordering::Relaxed) {
                        break;
                    }
                    let (allow, blocked) = (allow.clone(), blocked.clone());
                    let _ = std::thread::Builder::new()
                        .name("ralph-proxy-conn".into())
                        .spawn(move || serve(stream, &allow, &blocked));
                }
            })?;
        Ok(proxy)
    }

    /// Adds an agent's API hosts (`HOST` or `HOST:PORT`) to the allowlist.
    pub(super) fn allow_agent(&self, hosts: &[String]) {
        let mut allow = self.allow.lock().unwrap_or_else(PoisonError::into_inner);
        for host in hosts {
            // An entry that names no host (a custom agent's mistake) is left out, not fatal.
            if let Ok(extra) = Allow::parse(std::slice::from_ref(host)) {
                allow.entries.extend(extra.entries);
            }
        }
    }

    /// Opens a forward for every loopback base URL in `vars` (a local model) and every loopback
    /// `HOST:PORT` allowed: their ports. The hosts of other base URLs join the allowlist.
    pub(super) fn forward_loopback(&self, vars: &BTreeMap<String, OsString>) -> Vec<u16> {
        let allowed: Vec<u16> = (self.allow.lock().unwrap_or_else(PoisonError::into_inner))
            .entries
            .iter()
            .filter(|(host, _)| is_loopback(host))
            .filter_map(|(_, port)| *port)
            .collect();
        let mut ports: Vec<u16> = allowed
            .into_iter()
            .filter(|port| self.open_forward(*port).is_ok())
            .collect();
        for (name, value) in vars {
            if !(name.ends_with("_BASE_URL")
                || name.ends_with("_ENDPOINT")
                || name.ends_with("_HOST"))
            {
                continue;
            }
            let Some((host, port)) = value.to_str().and_then(url_host) else {
                continue;
            };
            if is_loopback(&host) {
                if !ports.contains(&port) && self.open_forward(port).is_ok() {
                    ports.push(port);
                }
            } else {
                let mut allow = self.allow.lock().unwrap_or_else(PoisonError::into_inner);
                allow.entries.insert((host, Some(port)));
            }
        }
        ports
    }

    /// A socket that relays to `127.0.0.1:port` on the host (once per port).
    fn open_forward(&self, port: u16) -> std::io::Result<()> {
        let mut open = self.forwards.lock().unwrap_or_else(PoisonError::into_inner);
        if open.contains(&port) {
            return Ok(());
        }
        let listener = UnixListener::bind(self.dir.path().join(format!("fwd-{port}.sock")))?;
        let closed = self.closed.clone();
        std::thread::Builder::new()
            .name("ralph-forward".into())
            .spawn(move || {
                for inside in listener.incoming().flatten() {
                    if closed.load(Ordering::Relaxed) {
                        break;
                    }
                    // Each connection of its own: an agent keeps several open at once.
                    let _ = std::thread::Builder::new()
                        .name("ralph-forward-conn".into())
                        .spawn(move || {
                            if let Ok(outside) = TcpStream::connect(("127.0.0.1", port)) {
                                relay(inside, outside, Vec::new());
                            }
                        });
                }
            })?;
        open.insert(port);
        Ok(())
    }

    /// The sockets to bind into the sandbox: (host path, path inside).
    pub(super) fn sockets(&self) -> Vec<(PathBuf, PathBuf)> {
        let mut sockets = vec![(
            self.dir.path().join("proxy.sock"),
            Path::new(INSIDE_DIR).join("proxy.sock"),
        )];
        let forwards = self.forwards.lock().unwrap_or_else(PoisonError::into_inner);
        sockets.extend(forwards.iter().map(|port| {
            let name = format!("fwd-{port}.sock");
            (
                self.dir.path().join(&name),
                Path::new(INSIDE_DIR).join(name),
            )
        }));
        sockets
    }

    /// The bridge's arguments: `PORT=SOCKET` for the proxy and each forward.
    pub(super) fn bridge_specs(&self, forwards: &[u16]) -> Vec<String> {
        let mut specs = vec![format!("{INSIDE_PORT}={INSIDE_DIR}/proxy.sock")];
        specs.extend(
            forwards
                .iter()
                .map(|port| format!("{port}={INSIDE_DIR}/fwd-{port}.sock")),
        );
        specs
    }

    /// What was refused since the last call.
    pub(super) fn take_blocked(&self) -> BTreeMap<String, u32> {
        std::mem::take(&mut *self.blocked.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Whether `host` names this machine's loopback.
fn is_loopback(host: &str) -> bool {
    host == "localhost" || host == "::1" || host.starts_with("127.")
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Relaxed);
        // A connection to each socket wakes its listening thread, which then ends.
        for (socket, _) in self.sockets() {
            let _ = UnixStream::connect(socket);
        }
    }
}

/// The host and port of an `http(s)://host[:port]/…` URL.
fn url_host(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let default = if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        80
    };
    split_host_port(authority, default)
}

/// `host[:port]` (`[v6]:port` too), the port `default` when none is given.
fn split_host_port(authority: &str, default: u16) -> Option<(String, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = after
            .strip_prefix(':')
            .map_or(Some(default), |p| p.parse().ok())?;
        return Some((host.to_ascii_lowercase(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host.to_ascii_lowercase(), port.parse().ok()?)),
        None => Some((authority.to_ascii_lowercase(), default)),
    }
}

/// Serves one connection from inside the sandbox.
fn serve(stream: UnixStream, allow: &Mutex<Allow>, blocked: &Mutex<BTreeMap<String, u32>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(reader_stream) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(reader_stream);
    let mut head = Vec::new();
    let mut line = String::new();
    // The request line and headers, up to the blank line (64 KiB at most).
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        head.extend_from_slice(line.as_bytes());
        if line == "\r\n" || line == "\n" || head.len() > 65_536 {
            break;
        }
    }
    let text = String::from_utf8_lossy(&head);
    let mut words = text.split_whitespace();
    let (method, target) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    let connect = method.eq_ignore_ascii_case("CONNECT");
    let Some((host, port)) = (if connect {
        split_host_port(target, 443)
    } else {
        url_host(target)
    }) else {
        let _ = (&stream).write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    let allowed = allow
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .allows(&host, port);
    if !allowed {
        *blocked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(format!("{host}:{port}"))
            .or_default() += 1;
        let body = format!(
            "ralph's sandbox does not let the agent reach {host}:{port}; the user can allow it with --sandbox-allow {}\n",
            crate::model::sandbox_allow_value(&format!("{host}:{port}"))
        );
        let _ = (&stream).write_all(
            format!("HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes(),
        );
        return;
    }
    let Ok(upstream) = TcpStream::connect((host.as_str(), port)) else {
        let _ = (&stream).write_all(
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        return;
    };
    let _ = stream.set_read_timeout(None);
    // What the reader took beyond the head goes on first.
    let pending = reader.buffer().to_vec();
    if connect {
        if (&stream)
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .is_err()
        {
            return;
        }
        relay(stream, upstream, pending);
    } else {
        let mut first = head;
        first.extend(pending);
        relay(stream, upstream, first);
    }
}

/// Copies both ways until either side closes; `first` goes to `outside` before the rest.
fn relay(inside: UnixStream, mut outside: TcpStream, first: Vec<u8>) {
    if !first.is_empty() && outside.write_all(&first).is_err() {
        return;
    }
    let (Ok(mut inside_r), Ok(mut outside_w)) = (inside.try_clone(), outside.try_clone()) else {
        return;
    };
    let up = std::thread::Builder::new()
        .name("ralph-relay".into())
        .spawn(move || {
            let _ = std::io::copy(&mut inside_r, &mut outside_w);
            let _ = outside_w.shutdown(Shutdown::Write);
        });
    let mut inside_w = inside;
    let _ = copy_then_close(&mut outside, &mut inside_w);
    if let Ok(up) = up {
        let _ = up.join();
    }
}

fn copy_then_close(from: &mut impl Read, to: &mut UnixStream) -> std::io::Result<u64> {
    let copied = std::io::copy(from, to);
    let _ = to.shutdown(Shutdown::Write);
    copied
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_presets_and_ports_are_matched() {
        let allow =
            Allow::parse(&["crates.io".into(), "127.0.0.1:8080".into(), "@pypi".into()]).unwrap();
        assert!(allow.allows("crates.io", 443) && allow.allows("CRATES.IO", 80));
        assert!(!allow.allows("crates.io", 22) && !allow.allows("evil.crates.io", 443));
        assert!(allow.allows("127.0.0.1", 8080) && !allow.allows("127.0.0.1", 8081));
        assert!(allow.allows("files.pythonhosted.org", 443));
        assert!(
            Allow::parse(&["@nope".into()])
                .unwrap_err()
                .contains("the presets are @npm @pypi @crates @github")
        );
        assert!(Allow::parse(&["a.com:http".into()]).is_err());
        assert!(Allow::parse(&["http://a.com/x".into()]).is_err());
    }

    #[test]
    fn urls_name_their_host_and_port() {
        assert_eq!(
            url_host("https://api.anthropic.com/v1"),
            Some(("api.anthropic.com".into(), 443))
        );
        assert_eq!(
            url_host("http://127.0.0.1:9000"),
            Some(("127.0.0.1".into(), 9000))
        );
        assert_eq!(url_host("http://[::1]:9/x"), Some(("::1".into(), 9)));
        assert_eq!(url_host("localhost:9"), None);
    }

    #[test]
    fn a_forward_serves_connections_side_by_side() {
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = upstream.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for mut stream in upstream.incoming().flatten() {
                std::thread::spawn(move || {
                    let _ = stream.write_all(b"hi");
                    // Held open, as a streaming answer is.
                    std::thread::sleep(Duration::from_secs(30));
                });
            }
        });
        let proxy = Proxy::start(Allow::default()).unwrap();
        let vars = BTreeMap::from([(
            "X_BASE_URL".to_owned(),
            OsString::from(format!("http://127.0.0.1:{port}")),
        )]);
        assert_eq!(proxy.forward_loopback(&vars), [port]);
        let socket = proxy.dir.path().join(format!("fwd-{port}.sock"));
        let greet = || {
            let mut stream = UnixStream::connect(&socket).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut said = [0u8; 2];
            stream.read_exact(&mut said).unwrap();
            assert_eq!(&said, b"hi");
            stream
        };
        // The first stays open while the second is served.
        let _first = greet();
        let _second = greet();
    }

    #[test]
    fn the_proxy_tunnels_to_a_listed_host_and_refuses_and_counts_the_rest() {
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = upstream.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for mut stream in upstream.incoming().flatten() {
                let _ = stream.write_all(b"hello from upstream");
            }
        });
        let proxy = Proxy::start(Allow::parse(&[format!("127.0.0.1:{port}")]).unwrap()).unwrap();
        let socket = proxy.sockets()[0].0.clone();
        let ask = |target: &str| {
            let mut stream = UnixStream::connect(&socket).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            stream
                .write_all(
                    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes(),
                )
                .unwrap();
            let mut said = String::new();
            let _ = stream.read_to_string(&mut said);
            said
        };
        let said = ask(&format!("127.0.0.1:{port}"));
        assert!(said.starts_with("HTTP/1.1 200"), "{said}");
        assert!(said.ends_with("hello from upstream"), "{said}");
        let refused = ask("crates.io:443");
        assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
        ask("crates.io:443");
        assert_eq!(
            proxy.take_blocked(),
            BTreeMap::from([("crates.io:443".to_owned(), 2)])
        );
        assert!(proxy.take_blocked().is_empty());
    }
}
