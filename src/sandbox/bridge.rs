//! `ralph __sandbox-bridge PORT=SOCKET… -- PROGRAM ARGS…`, run inside the sandbox: listens on
//! `127.0.0.1:PORT` for each pair and relays every connection to the Unix socket ralph bound in
//! (its proxy, or a forward to a local model), then runs the agent and exits as it exits. The
//! sandbox has no network of its own: this is the only way out, and it leads to ralph.

use std::ffi::OsString;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::{Command, ExitCode};

/// The hidden first argument that turns `ralph` into the bridge.
pub(crate) const ARG: &str = "__sandbox-bridge";

/// Runs the bridge: `args` are what follows [`ARG`].
pub(crate) fn main(args: impl Iterator<Item = OsString>) -> ExitCode {
    let mut args = args.peekable();
    let mut pairs = Vec::new();
    for arg in args.by_ref() {
        if arg == "--" {
            break;
        }
        let Some((port, socket)) = arg.to_str().and_then(|a| a.split_once('=')) else {
            crate::output::error(&format!(
                "ralph's sandbox bridge: bad argument {}",
                arg.to_string_lossy()
            ));
            return ExitCode::from(2);
        };
        let Ok(port) = port.parse::<u16>() else {
            return ExitCode::from(2);
        };
        pairs.push((port, socket.to_owned()));
    }
    for (port, socket) in pairs {
        let listener = match TcpListener::bind(("127.0.0.1", port)) {
            Ok(listener) => listener,
            Err(err) => {
                crate::output::error(&format!(
                    "ralph's sandbox bridge cannot listen on 127.0.0.1:{port}: {err}"
                ));
                return ExitCode::from(1);
            }
        };
        let _ = std::thread::Builder::new()
            .name("ralph-bridge".into())
            .spawn(move || {
                for inside in listener.incoming().flatten() {
                    let socket = socket.clone();
                    let _ = std::thread::Builder::new()
                        .name("ralph-bridge-conn".into())
                        .spawn(move || relay(inside, &socket));
                }
            });
    }
    let Some(program) = args.next() else {
        return ExitCode::from(2);
    };
    match Command::new(&program).args(args).status() {
        Ok(status) => ExitCode::from(u8::try_from(crate::model::exit_code(status)).unwrap_or(1)),
        Err(err) => {
            crate::output::error(&format!(
                "failed to start `{}`: {err}",
                program.to_string_lossy()
            ));
            ExitCode::from(127)
        }
    }
}

/// Relays one connection both ways.
fn relay(inside: TcpStream, socket: &str) {
    let Ok(outside) = UnixStream::connect(socket) else {
        return;
    };
    let (Ok(mut inside_r), Ok(mut outside_w)) = (inside.try_clone(), outside.try_clone()) else {
        return;
    };
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut inside_r, &mut outside_w);
        let _ = outside_w.shutdown(Shutdown::Write);
    });
    let (mut outside_r, mut inside_w) = (outside, inside);
    let _ = std::io::copy(&mut outside_r, &mut inside_w);
    let _ = inside_w.shutdown(Shutdown::Write);
    let _ = up.join();
}
