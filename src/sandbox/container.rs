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
            // What the container has of the host is the tree: a mask there (ralph's records, when
            // there are holdout checks) is an empty file over it; the container has its own /etc
            // and home, nothing else of the host's to mask.
            Mount::Mask(path) if path.starts_with(&mounts.work) && path.exists() => {
                volume(std::path::Path::new("/dev/null"), path, false);
            }
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
        argv.extend([OsString::from("-e"), super::env::assignment(name, value)]);
    }
    argv.extend([OsString::from("-w"), mounts.work.clone().into_os_string()]);
    argv.push(OsString::from(options.image.clone().unwrap_or_default()));
    argv
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::{Bytes, Cpus};

    #[test]
    fn a_mask_in_the_tree_is_an_empty_file_over_it_and_one_elsewhere_nothing() {
        let dir = crate::testing::tempdir().unwrap();
        let work = dir.path().to_owned();
        let history = work.join(".ralph/ralph-history.json");
        std::fs::create_dir_all(history.parent().unwrap()).unwrap();
        std::fs::write(&history, "{}").unwrap();
        let mounts = Mounts {
            list: vec![
                Mount::Mask(history.clone()),
                Mount::Mask("/etc/shadow".into()),
            ],
            work: work.clone(),
            home: PathBuf::from("/root"),
        };
        let argv: Vec<String> = argv(
            Kind::Docker,
            &Settings::default(),
            &mounts,
            &BTreeMap::new(),
            &[],
        )
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
        let masked = format!("/dev/null:{}:ro", history.display());
        assert!(argv.contains(&masked), "{argv:?}");
        assert!(!argv.iter().any(|w| w.contains("shadow")), "{argv:?}");
    }

    #[test]
    fn a_container_gets_the_same_mounts_no_network_no_capabilities_and_the_limits() {
        let mounts = Mounts {
            list: vec![
                Mount::Tmpfs("/tmp".into()),
                Mount::Mask("/etc/shadow".into()),
                Mount::Bind {
                    path: "/w".into(),
                    writable: true,
                },
                Mount::Bind {
                    path: "/w/.git/hooks".into(),
                    writable: false,
                },
            ],
            work: PathBuf::from("/w"),
            home: PathBuf::from("/root"),
        };
        let settings = Settings {
            backend: crate::sandbox::Backend::Podman,
            memory: Some(Bytes(64 << 20)),
            cpus: Some(Cpus(1.5)),
            pids: Some(100),
            image: Some("agent-image".into()),
            ..Settings::default()
        };
        let vars = BTreeMap::from([("KEY".to_owned(), OsString::from("v"))]);
        let sockets = [(
            PathBuf::from("/tmp/s/proxy.sock"),
            PathBuf::from("/run/ralph/proxy.sock"),
        )];
        let argv: Vec<String> = argv(Kind::Podman, &settings, &mounts, &vars, &sockets)
            .iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        let has = |needle: &[&str]| argv.windows(needle.len()).any(|w| w == needle);
        for needle in [
            &["--network", "none"][..],
            &["--cap-drop", "ALL"],
            &["--security-opt", "no-new-privileges"],
            &["-v", "/w:/w:rw"],
            &["-v", "/w/.git/hooks:/w/.git/hooks:ro"],
            &["-v", "/tmp/s/proxy.sock:/run/ralph/proxy.sock:rw"],
            &["--memory", "67108864"],
            &["--cpus", "1.5"],
            &["--pids-limit", "100"],
            &["-e", "KEY=v"],
            &["-w", "/w"],
        ] {
            assert!(has(needle), "{needle:?} in {argv:?}");
        }
        assert!(argv.contains(&"--read-only".to_owned()));
        assert_eq!(argv.last().map(String::as_str), Some("agent-image"));
        assert!(
            !argv.iter().any(|w| w.contains("shadow")),
            "a container has its own /etc"
        );
    }
}
