//! `--sandbox seatbelt` (macOS, experimental): an SBPL profile for `sandbox-exec` with the same
//! policy as bwrap's mounts — writes only in the work tree, the git directory and ralph's private
//! folders, minus the git config and hooks and ralph's own files; the user's secrets unreadable;
//! no network but ralph's proxy on loopback (Seatbelt cannot tell hosts apart).

use std::fmt::Write as _;

use super::Net;
use super::bwrap::{Mount, Mounts};

/// Folders under `$HOME` whose reading is denied.
const SECRETS: &[&str] = &[
    ".ssh",
    ".aws",
    ".config/gh",
    ".netrc",
    ".npmrc",
    ".docker",
    ".kube",
    ".gnupg",
];

/// The profile's text.
pub(super) fn profile(mounts: &Mounts, net: Net) -> String {
    let quoted = |path: &std::path::Path| format!("{:?}", path.to_string_lossy());
    let mut text = String::from("(version 1)\n(allow default)\n(deny file-write*)\n");
    let _ = writeln!(
        text,
        "(allow file-write* (subpath \"/private/tmp\") (subpath \"/private/var/folders\"))"
    );
    for mount in &mounts.list {
        match mount {
            Mount::Bind {
                path,
                writable: true,
            } => {
                let _ = writeln!(text, "(allow file-write* (subpath {}))", quoted(path));
            }
            Mount::BindAt { from, .. } => {
                let _ = writeln!(text, "(allow file-write* (subpath {}))", quoted(from));
            }
            _ => {}
        }
    }
    // Read-only inside what is writable: deny again, after the allows.
    for mount in &mounts.list {
        if let Mount::Bind { path, writable: false } = mount
            && mounts.list.iter().any(|m| matches!(m, Mount::Bind { path: p, writable: true } if path.starts_with(p) && path != p))
        {
            let _ = writeln!(text, "(deny file-write* (subpath {}))", quoted(path));
        }
    }
    for mount in &mounts.list {
        if let Mount::Bind {
            path,
            writable: true,
        } = mount
            && path
                .parent()
                .is_some_and(|dir| dir.ends_with(crate::storage::RALPH_DIR))
        {
            let _ = writeln!(text, "(allow file-write* (literal {}))", quoted(path));
        }
    }
    for secret in SECRETS {
        let _ = writeln!(
            text,
            "(deny file-read* (subpath {}))",
            quoted(&mounts.home.join(secret))
        );
    }
    match net {
        Net::Full => {}
        Net::None => text.push_str("(deny network*)\n"),
        // Seatbelt cannot tell hosts apart: only loopback, where a local model or a proxy
        // listens.
        Net::Api => text.push_str(
            "(deny network*)\n(allow network-outbound (remote unix-socket))\n(allow network-outbound (remote tcp \"localhost:*\"))\n",
        ),
    }
    text
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn the_profile_allows_writes_in_the_tree_only_and_denies_secrets_and_the_network() {
        let mounts = Mounts {
            list: vec![
                Mount::Tmpfs("/tmp".into()),
                Mount::Bind {
                    path: "/w".into(),
                    writable: true,
                },
                Mount::Bind {
                    path: "/w/.git/hooks".into(),
                    writable: false,
                },
                Mount::Bind {
                    path: "/w/.ralph".into(),
                    writable: false,
                },
                Mount::Bind {
                    path: "/w/.ralph/progress.md".into(),
                    writable: true,
                },
            ],
            work: PathBuf::from("/w"),
            home: PathBuf::from("/Users/u"),
        };
        let text = profile(&mounts, Net::None);
        let at = |line: &str| {
            text.find(line)
                .unwrap_or_else(|| panic!("{line} in\n{text}"))
        };
        assert!(at("(deny file-write*)\n") < at("(allow file-write* (subpath \"/w\"))"));
        assert!(
            at("(allow file-write* (subpath \"/w\"))")
                < at("(deny file-write* (subpath \"/w/.git/hooks\"))")
        );
        assert!(
            at("(deny file-write* (subpath \"/w/.ralph\"))")
                < at("(allow file-write* (literal \"/w/.ralph/progress.md\"))")
        );
        at("(deny file-read* (subpath \"/Users/u/.ssh\"))");
        assert!(text.ends_with("(deny network*)\n"));
        assert!(!profile(&mounts, Net::Full).contains("network"));
    }
}
