//! `--sandbox-memory`, `--sandbox-cpus`, `--sandbox-pids`: a cgroup of the loop's own (cgroup v2,
//! or v1's memory, pids and cpu hierarchies) where ralph may make one; otherwise the memory and
//! process limits as rlimits, with a warning. The agent's guard joins the cgroup (or sets the
//! rlimits) before it starts the agent, so everything the agent starts is inside.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// The guard's variable naming the cgroups to join (`:`-separated).
pub(crate) const CGROUPS_VARIABLE: &str = "RALPH_SANDBOX_CGROUPS";

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// A size in bytes: `512M`, `2G`, `100k` (powers of 1024, as docker reads them), or bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bytes(pub(crate) u64);

impl Bytes {
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        let bad = || format!("'{text}' is not a size; use e.g. 512M or 2G");
        let (number, scale) = match trimmed.char_indices().last() {
            Some((at, 'k' | 'K')) => (&trimmed[..at], 1u64 << 10),
            Some((at, 'm' | 'M')) => (&trimmed[..at], 1 << 20),
            Some((at, 'g' | 'G')) => (&trimmed[..at], 1 << 30),
            _ => (trimmed, 1),
        };
        let value: u64 = number.parse().map_err(|_| bad())?;
        match value.checked_mul(scale) {
            Some(bytes) if bytes > 0 => Ok(Self(bytes)),
            _ => Err(bad()),
        }
    }

    /// As a config file writes it.
    pub(crate) fn shown(self) -> String {
        for (suffix, scale) in [("G", 1u64 << 30), ("M", 1 << 20), ("k", 1 << 10)] {
            if self.0.is_multiple_of(scale) {
                return format!("{}{suffix}", self.0 / scale);
            }
        }
        self.0.to_string()
    }
}

/// A number of CPUs (`1.5`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Cpus(pub(crate) f64);

impl Cpus {
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        match text.trim().parse::<f64>() {
            Ok(n) if n.is_finite() && n > 0.0 => Ok(Self(n)),
            _ => Err(format!(
                "'{text}' is not a number of CPUs; use e.g. 1 or 1.5"
            )),
        }
    }
}

/// The limits as applied for a loop.
#[derive(Debug, Default)]
pub(super) struct Applied {
    /// The cgroups made for the loop (removed at its end).
    cgroups: Vec<PathBuf>,
    /// The cgroup that counts out-of-memory kills.
    memory: Option<PathBuf>,
    /// What the guard sets instead, when there is no cgroup.
    rlimits: Option<String>,
    /// Said once when the limits could not be applied as asked.
    pub(super) warning: Option<String>,
    oom_seen: Mutex<u64>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Applies `options`' limits for a loop.
pub(super) fn apply(options: &super::Settings) -> Applied {
    apply_at(options, Path::new(CGROUP_ROOT))
}

/// [`apply`] with the cgroup file system at `root`.
fn apply_at(options: &super::Settings, root: &Path) -> Applied {
    let (memory, cpus, pids) = (options.memory, options.cpus, options.pids);
    if memory.is_none() && cpus.is_none() && pids.is_none() {
        return Applied::default();
    }
    let name = format!(
        "ralph-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let settings = Wanted {
        memory: memory.map(|b| b.0),
        cpus: cpus.map(|c| c.0),
        pids,
    };
    let made = if root.join("cgroup.controllers").exists() {
        v2(root, &name, &settings)
    } else {
        v1(root, &name, &settings)
    };
    match made {
        Ok((cgroups, memory)) => Applied {
            cgroups,
            memory,
            ..Applied::default()
        },
        Err(why) => {
            let mut rlimits = Vec::new();
            if let Some(bytes) = settings.memory {
                rlimits.push(format!("as={bytes}"));
            }
            if let Some(n) = settings.pids {
                rlimits.push(format!("nproc={n}"));
            }
            Applied {
                rlimits: Some(rlimits.join(",")),
                warning: Some(format!(
                    "⚠️  --sandbox limits: no cgroup could be made ({why}); the memory limit applies to each process on its own{}",
                    if settings.cpus.is_some() {
                        " and the CPU limit does not apply"
                    } else {
                        ""
                    }
                )),
                ..Applied::default()
            }
        }
    }
}

struct Wanted {
    memory: Option<u64>,
    cpus: Option<f64>,
    pids: Option<u32>,
}

/// One cgroup under the unified hierarchy, beside ralph's own.
fn v2(
    root: &Path,
    name: &str,
    settings: &Wanted,
) -> Result<(Vec<PathBuf>, Option<PathBuf>), String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|err| err.to_string())?;
    let own = own
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .unwrap_or("/");
    let parent = root.join(own.trim_start_matches('/'));
    let parent = parent
        .parent()
        .map_or_else(|| root.to_owned(), Path::to_path_buf);
    let dir = parent.join(name);
    std::fs::create_dir(&dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    let write = |file: &str, value: String| {
        std::fs::write(dir.join(file), value)
            .map_err(|err| format!("{}/{file}: {err}", dir.display()))
    };
    let result = (|| {
        if let Some(bytes) = settings.memory {
            write("memory.max", bytes.to_string())?;
            let _ = write("memory.swap.max", "0".to_owned());
        }
        if let Some(n) = settings.pids {
            write("pids.max", n.to_string())?;
        }
        if let Some(cpus) = settings.cpus {
            write("cpu.max", format!("{} 100000", quota(cpus)))?;
        }
        Ok(())
    })();
    if let Err(why) = result {
        let _ = std::fs::remove_dir(&dir);
        return Err(why);
    }
    Ok((vec![dir.clone()], settings.memory.map(|_| dir)))
}

/// A cgroup's files to write, and what.
type Files = Vec<(&'static str, String)>;

/// One cgroup per v1 hierarchy a limit needs.
fn v1(
    root: &Path,
    name: &str,
    settings: &Wanted,
) -> Result<(Vec<PathBuf>, Option<PathBuf>), String> {
    let mut made = Vec::new();
    let mut memory = None;
    let wanted: [(&str, Option<Files>); 3] = [
        (
            "memory",
            settings.memory.map(|b| {
                vec![
                    ("memory.limit_in_bytes", b.to_string()),
                    ("memory.memsw.limit_in_bytes", b.to_string()),
                ]
            }),
        ),
        (
            "pids",
            settings.pids.map(|n| vec![("pids.max", n.to_string())]),
        ),
        (
            "cpu",
            settings.cpus.map(|c| {
                vec![
                    ("cpu.cfs_period_us", "100000".to_owned()),
                    ("cpu.cfs_quota_us", quota(c).to_string()),
                ]
            }),
        ),
    ];
    for (hierarchy, files) in wanted {
        let Some(files) = files else { continue };
        let dir = root.join(hierarchy).join(name);
        let done = std::fs::create_dir(&dir).map_err(|err| format!("{}: {err}", dir.display()));
        if let Err(why) = done {
            made.iter()
                .for_each(|d: &PathBuf| drop(std::fs::remove_dir(d)));
            return Err(why);
        }
        made.push(dir.clone());
        for (file, value) in files {
            let written = std::fs::write(dir.join(file), value);
            // Swap accounting may be off: the memory limit alone still holds.
            if written.is_err() && file != "memory.memsw.limit_in_bytes" {
                made.iter().for_each(|d| drop(std::fs::remove_dir(d)));
                return Err(format!("{}/{file} cannot be written", dir.display()));
            }
        }
        if hierarchy == "memory" {
            memory = Some(dir);
        }
    }
    Ok((made, memory))
}

/// The CPU quota per 100 ms period for `cpus` CPUs.
fn quota(cpus: f64) -> u64 {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "clamped"
    )]
    let quota = (cpus.clamp(0.01, 1024.0) * 100_000.0).round() as u64;
    quota.max(1000)
}

impl Applied {
    /// The guard's variable naming the cgroups (or `None`).
    pub(super) fn cgroups_variable(&self) -> Option<std::ffi::OsString> {
        if let Some(rlimits) = &self.rlimits {
            return Some(format!("rlimits:{rlimits}").into());
        }
        (!self.cgroups.is_empty()).then(|| {
            let dirs: Vec<String> = self
                .cgroups
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            dirs.join(":").into()
        })
    }

    /// Out-of-memory kills in the loop's cgroup since the last call (`None` when none).
    pub(super) fn oom_kills_since_last(&self) -> Option<u64> {
        let dir = self.memory.as_ref()?;
        let count = ["memory.events", "memory.oom_control"]
            .iter()
            .find_map(|file| {
                let text = std::fs::read_to_string(dir.join(file)).ok()?;
                text.lines()
                    .find_map(|line| line.strip_prefix("oom_kill ")?.trim().parse::<u64>().ok())
            });
        let count = count.or_else(|| {
            std::fs::read_to_string(dir.join("memory.failcnt"))
                .ok()?
                .trim()
                .parse()
                .ok()
        })?;
        let mut seen = self
            .oom_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let new = count.saturating_sub(*seen);
        *seen = count;
        (new > 0).then_some(new)
    }

    /// Removes the loop's cgroups (those still holding a process stay).
    pub(super) fn remove(&self) {
        for dir in &self.cgroups {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Whether an agent run with the variables `env` needs a guard in front of it, to join the
/// sandbox's cgroups or set its rlimits before the agent starts.
pub(crate) fn needs_guard_in_front(env: &[(String, std::ffi::OsString)]) -> bool {
    env.iter().any(|(key, _)| key == CGROUPS_VARIABLE)
}

/// In the agent's guard, before it starts the agent: joins the cgroups, or sets the rlimits, that
/// ralph named in the guard's environment.
pub(crate) fn join_from_env() {
    let Some(value) = std::env::var_os(CGROUPS_VARIABLE) else {
        return;
    };
    let value = value.to_string_lossy().into_owned();
    if let Some(rlimits) = value.strip_prefix("rlimits:") {
        set_rlimits(rlimits);
        return;
    }
    let pid = std::process::id().to_string();
    for dir in value.split(':') {
        let _ = std::fs::write(Path::new(dir).join("cgroup.procs"), &pid);
    }
}

fn set_rlimits(spec: &str) {
    use nix::sys::resource::{Resource, setrlimit};
    for item in spec.split(',') {
        let Some((name, value)) = item.split_once('=') else {
            continue;
        };
        let Ok(value) = value.parse::<u64>() else {
            continue;
        };
        let resource = match name {
            "as" => Resource::RLIMIT_AS,
            "nproc" => Resource::RLIMIT_NPROC,
            _ => continue,
        };
        let _ = setrlimit(resource, value, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_docker_reads_them() {
        assert_eq!(Bytes::parse("64M"), Ok(Bytes(64 << 20)));
        assert_eq!(Bytes::parse("2g"), Ok(Bytes(2 << 30)));
        assert_eq!(Bytes::parse("1000"), Ok(Bytes(1000)));
        assert!(Bytes::parse("lots").is_err() && Bytes::parse("0").is_err());
        assert_eq!(Bytes(64 << 20).shown(), "64M");
        assert_eq!(Bytes(1000).shown(), "1000");
        assert_eq!(quota(1.5), 150_000);
    }

    fn limited() -> super::super::Settings {
        super::super::Settings {
            memory: Some(Bytes(64 << 20)),
            pids: Some(50),
            ..super::super::Settings::default()
        }
    }

    #[test]
    fn a_cgroup_of_v2_or_v1_is_made_where_one_can_be_else_rlimits_with_a_warning() {
        let v2 = crate::testing::tempdir().unwrap();
        std::fs::write(v2.path().join("cgroup.controllers"), "memory pids\n").unwrap();
        let applied = apply_at(&limited(), v2.path());
        let dirs = applied
            .cgroups_variable()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(!dirs.contains(':') && dirs.contains("/ralph-"), "{dirs}");
        let made = Path::new(&dirs);
        assert_eq!(
            std::fs::read_to_string(made.join("memory.max")).unwrap(),
            "67108864"
        );
        assert_eq!(
            std::fs::read_to_string(made.join("pids.max")).unwrap(),
            "50"
        );
        assert!(applied.warning.is_none());

        let v1 = crate::testing::tempdir().unwrap();
        for hierarchy in ["memory", "pids", "cpu"] {
            std::fs::create_dir(v1.path().join(hierarchy)).unwrap();
        }
        let applied = apply_at(&limited(), v1.path());
        let dirs = applied
            .cgroups_variable()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let dirs: Vec<&str> = dirs.split(':').collect();
        assert_eq!(dirs.len(), 2, "memory and pids: {dirs:?}");
        let memory = Path::new(dirs[0]).join("memory.limit_in_bytes");
        assert_eq!(std::fs::read_to_string(memory).unwrap(), "67108864");

        let none = crate::testing::tempdir().unwrap();
        let applied = apply_at(&limited(), none.path());
        let variable = applied
            .cgroups_variable()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert_eq!(variable, "rlimits:as=67108864,nproc=50");
        assert!(
            applied
                .warning
                .as_deref()
                .unwrap()
                .contains("no cgroup could be made")
        );
    }

    #[test]
    fn no_limit_asked_applies_nothing() {
        let applied = apply(&super::super::Settings::default());
        assert!(applied.cgroups_variable().is_none() && applied.warning.is_none());
    }
}
