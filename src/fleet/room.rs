//! Room on the machine for one more agent: its available memory covers the new agent's need
//! beside what the running agents may need (each counted at its full need, whatever it uses yet),
//! and the load average is below the number of cores. At least one agent always runs. A
//! `--parallel auto` run counts its own task loops; `--worker`s given `--agent-memory` count the
//! agents of every worker of this user on the machine, each of which writes its need in a file of
//! a shared folder while its agent runs ([`Neighbour`]).

use std::path::PathBuf;

use crate::options::LoopOptions;
use crate::sandbox::Bytes;
use crate::storage::tasks::{self, Task};

/// What an agent needs without `--agent-memory`, with `--parallel auto`.
const AGENT_MEMORY: u64 = 2 << 30;

/// The memory task `task`'s agent may need: its `memory:` property, else `--sandbox-memory`
/// under a sandbox (the limit is the need), else `--agent-memory`, else 2G.
pub(super) fn need(options: &LoopOptions, task: &Task) -> u64 {
    need_and_source(options, task).0
}

/// [`need`], and what set it, as a waiting task's line names it.
pub(super) fn need_and_source(options: &LoopOptions, task: &Task) -> (u64, &'static str) {
    let sandboxed = sandbox_limit(options);
    let own = (task.property(tasks::MEMORY)).and_then(|text| Bytes::parse(text).ok());
    let (need, source) = if let Some(own) = own {
        (Some(own), "the task's memory: property")
    } else if let Some(limit) = sandboxed {
        (Some(limit), "--sandbox-memory")
    } else {
        (options.agent_memory, "--agent-memory")
    };
    (need.map_or(AGENT_MEMORY, |bytes| bytes.0), source)
}

/// `--sandbox-memory`, when the agents run in a sandbox (without one it limits nothing).
pub(super) fn sandbox_limit(options: &LoopOptions) -> Option<Bytes> {
    (options.sandbox != crate::sandbox::Backend::None)
        .then_some(options.sandbox_memory)
        .flatten()
}

/// What the machine has, as read from `/proc`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Machine {
    /// `MemAvailable`, in bytes.
    pub(super) available: u64,
    /// The load average over the last minute.
    pub(super) load: f64,
    /// The load at which no more task starts: the number of cores (`RALPH_MAX_LOAD` overrides).
    pub(super) max_load: f64,
}

impl Machine {
    /// The machine now; `None` where `/proc` does not say (then nothing holds a task back).
    pub(super) fn read() -> Option<Self> {
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
        let available = meminfo
            .lines()
            .find_map(|line| line.strip_prefix("MemAvailable:"))
            .and_then(|rest| rest.trim().strip_suffix("kB"))
            .and_then(|kb| kb.trim().parse::<u64>().ok())?
            .saturating_mul(1024);
        let loadavg = std::fs::read_to_string("/proc/loadavg").ok()?;
        let load = loadavg.split_whitespace().next()?.parse().ok()?;
        #[expect(clippy::cast_precision_loss, reason = "a count of cores")]
        let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        let max_load = std::env::var("RALPH_MAX_LOAD")
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(cores);
        Some(Self {
            available,
            load,
            max_load,
        })
    }
}

/// Why a task that needs `need` bytes waits, beside running tasks that need `running`; `None`
/// when it may start.
pub(super) fn held(running: &[u64], need: u64, machine: &Machine) -> Option<String> {
    if running.is_empty() {
        return None;
    }
    let promised = running
        .iter()
        .fold(0u64, |sum, one| sum.saturating_add(*one));
    let free = machine.available.saturating_sub(promised);
    if free < need {
        return Some(format!(
            "waiting for memory: {} free, {} needed",
            size(free),
            size(need)
        ));
    }
    if machine.load >= machine.max_load {
        return Some(format!(
            "waiting for load: load average {:.1} with {:.0} cores",
            machine.load, machine.max_load
        ));
    }
    None
}

/// `1.2G`, `512M`, `800k`.
fn size(bytes: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "shown to one decimal")]
    let value = bytes as f64;
    for (suffix, scale) in [("G", f64::from(1u32 << 30)), ("M", f64::from(1u32 << 20))] {
        if value >= scale {
            let shown = format!("{:.1}", value / scale);
            return format!("{}{suffix}", shown.trim_end_matches(".0"));
        }
    }
    format!("{}k", bytes / 1024)
}

/// A worker's entry among the agents of the machine: a file named after its process, holding
/// its agent's need, removed when dropped (a killed worker's is pruned by the others: its process
/// is gone).
pub(super) struct Neighbour(PathBuf);

impl Neighbour {
    /// The folder every worker of this user on this machine shares.
    fn folder() -> PathBuf {
        std::env::temp_dir().join(format!("ralph-agents-{}", nix::unistd::getuid()))
    }

    /// Enters this process's agent, which may need `need` bytes.
    pub(super) fn enter(need: u64) -> Option<Self> {
        let folder = Self::folder();
        std::fs::create_dir_all(&folder).ok()?;
        let path = folder.join(std::process::id().to_string());
        std::fs::write(&path, need.to_string()).ok()?;
        Some(Self(path))
    }

    /// The needs of the agents other live workers of this user run on this machine.
    pub(super) fn others() -> Vec<u64> {
        let Ok(entries) = std::fs::read_dir(Self::folder()) else {
            return Vec::new();
        };
        let me = std::process::id().to_string();
        entries
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name == me {
                    return None;
                }
                let pid: i32 = name.parse().ok()?;
                let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
                if !alive {
                    let _ = std::fs::remove_file(entry.path());
                    return None;
                }
                std::fs::read_to_string(entry.path())
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            })
            .collect()
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    fn machine(available: u64, load: f64) -> Machine {
        Machine {
            available,
            load,
            max_load: 2.0,
        }
    }

    #[test]
    fn a_task_starts_while_memory_covers_it_beside_what_the_running_ones_need() {
        let roomy = machine(5 * G, 0.5);
        assert_eq!(held(&[], 2 * G, &roomy), None, "the first always starts");
        assert_eq!(held(&[2 * G], 2 * G, &roomy), None);
        assert_eq!(
            held(&[2 * G, 2 * G], 2 * G, &roomy).as_deref(),
            Some("waiting for memory: 1G free, 2G needed")
        );
        let tight = machine(2 * G + G / 5, 0.5);
        assert_eq!(
            held(&[G], 2 * G, &tight).as_deref(),
            Some("waiting for memory: 1.2G free, 2G needed")
        );
        // Even the first of a run with too little memory starts: at least one always runs.
        assert_eq!(held(&[], 2 * G, &machine(G, 9.0)), None);
    }

    #[test]
    fn a_task_waits_while_the_load_is_at_the_number_of_cores() {
        assert_eq!(
            held(&[G], G, &machine(8 * G, 2.0)).as_deref(),
            Some("waiting for load: load average 2.0 with 2 cores")
        );
        assert_eq!(held(&[G], G, &machine(8 * G, 1.9)), None);
    }

    #[test]
    fn a_tasks_need_is_its_memory_then_the_sandboxs_limit_then_agent_memory() {
        use crate::sandbox::{Backend, Bytes};
        let task = |memory: Option<&str>| {
            let line = memory.map_or_else(String::new, |m| format!("\n  - memory: {m}"));
            tasks::TaskList::parse(&format!("- [ ] Some task{line}\n")).tasks[0].clone()
        };
        let mut options = LoopOptions::default();
        assert_eq!(need(&options, &task(None)), 2 * G, "the default");
        options.agent_memory = Some(Bytes(3 * G));
        assert_eq!(need(&options, &task(None)), 3 * G);
        options.sandbox_memory = Some(Bytes(G));
        assert_eq!(
            need(&options, &task(None)),
            3 * G,
            "--sandbox-memory limits nothing without a sandbox"
        );
        options.sandbox = Backend::Bwrap;
        assert_eq!(
            need_and_source(&options, &task(None)),
            (G, "--sandbox-memory"),
            "the limit is the need"
        );
        assert_eq!(
            need_and_source(&options, &task(Some("5G"))),
            (5 * G, "the task's memory: property")
        );
    }

    #[test]
    fn sizes_are_shown_short() {
        assert_eq!(size(G + G / 5), "1.2G");
        assert_eq!(size(2 * G), "2G");
        assert_eq!(size(512 << 20), "512M");
        assert_eq!(size(800 << 10), "800k");
    }
}
