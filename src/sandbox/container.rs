//! `--sandbox docker|podman`: the same mounts, environment and proxy sockets as bwrap, in a
//! container of `--sandbox-image` with no network, a read-only root and no capabilities.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use super::bwrap::{Mount, Mounts};
use super::{Kind, Net, Settings};

/// `run …` up to the image, then the image: the command follows.
pub(super) fn argv(
    kind: Kind,
    options: &Settings,
    mounts: &Mounts,
    vars: &BTreeMap<String, OsString>,
    sockets: &[(PathBuf, PathBuf)],
) -> Vec<OsString> {
    let mut argv: Vec<OsString> = [
        "run",
        "--rm",
        "-i",
        "--read-only",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/run",
    ]
    .map(OsString::from)
    .to_vec();
    if options.net != Net::Full {
        argv.extend(["--network", "none"].map(OsString::from));
    }
    if kind == Kind::Podman {
        argv.extend(["--userns", "keep-id"].map(OsString::from));
    }
    let mut volume = |from: &std::path::Path, to: &std::path::Path, writable: bool| {
        let mut spec = OsString::from(from);
        spec.push(":");
        spec.push(to);
        spec.push(if writable { ":rw" } else { ":ro" });
        argv.extend([OsString::from("-v"), spec]);
    };
    for mount in &mounts.list {
        match mount {
            Mount::Bind { path, writable } => volume(path, path, *writable),
            Mount::BindAt { from, to } => volume(from, to, true),
            // A container has its own /etc and home: nothing of the host's to mask.
            Mount::Mask(_) | Mount::Tmpfs(_) => {}
        }
    }
    for (host, inside) in sockets {
        volume(host, inside, true);
    }
    if let Some(bytes) = options.memory {
        argv.extend([
            OsString::from("--memory"),
            OsString::from(bytes.0.to_string()),
        ]);
    }
    if let Some(cpus) = options.cpus {
        argv.extend([OsString::from("--cpus"), OsString::from(cpus.0.to_string())]);
    }
    if let Some(pids) = options.pids {
        argv.extend([
            OsString::from("--pids-limit"),
            OsString::from(pids.to_string()),
        ]);
    }
    for (name, value) in vars {
        let mut pair = OsString::from(format!("{name}="));
        pair.push(value);
        argv.extend([OsString::from("-e"), pair]);
    }
    argv.extend([OsString::from("-w"), mounts.work.clone().into_os_string()]);
    argv.push(OsString::from(options.image.clone().unwrap_or_default()));
    argv
}
