//! `--parallel auto`: another task starts only while the machine has room for its agent — its
//! available memory covers the new agent's need beside what the running agents may need (each
//! counted at its full need, whatever it uses yet), and the load average is below the number of
//! cores. At least one task always runs.

use crate::sandbox::Bytes;
use crate::storage::tasks::{self, Task};

use super::Coordinator;

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

impl Coordinator<'_> {
    /// The memory task `task`'s agent may need: its `memory:` property, else `--sandbox-memory`
    /// under a sandbox (the limit is the need), else `--agent-memory`.
    fn need(&self, task: &Task) -> u64 {
        let options = &self.config.options;
        let sandboxed = (options.sandbox != crate::sandbox::Backend::None)
            .then_some(options.sandbox_memory)
            .flatten();
        (task.property(tasks::MEMORY))
            .and_then(|text| Bytes::parse(text).ok())
            .or(sandboxed)
            .unwrap_or(options.agent_memory)
            .0
    }

    /// With `--parallel auto`, whether task `id` waits for room on the machine; said once per
    /// task and reason.
    pub(super) fn waits_for_room(&mut self, id: &str, task: &Task) -> anyhow::Result<bool> {
        if !self.config.options.parallel.auto {
            return Ok(false);
        }
        let Some(machine) = Machine::read() else {
            return Ok(false);
        };
        let list = self.base_list()?;
        let ids = tasks::task_ids(&list);
        let running: Vec<u64> = (list.tasks.iter().zip(&ids))
            .filter(|(_, other)| self.running.contains(*other))
            .map(|(other, _)| self.need(other))
            .collect();
        let Some(why) = held(&running, self.need(task), &machine) else {
            return Ok(false);
        };
        let said = why.split(':').next().unwrap_or_default().to_owned();
        if self.told_room_waits.insert((id.to_owned(), said)) {
            self.sink.notice(crate::event::Notice::RoomWait {
                task: id,
                why: &why,
            });
        }
        self.note_waiting(id, Some(&why));
        Ok(true)
    }

    /// Writes in the run's state that task `id` waits for room, and why (`None`: no more), for
    /// `ralph --status`.
    pub(super) fn note_waiting(&self, id: &str, why: Option<&str>) {
        use crate::storage::{Loaded, state};
        let path = self.dir.state();
        let Loaded::Found(mut saved) = state::load(&path) else {
            return;
        };
        let before = saved.waiting.get(id).cloned();
        match why {
            Some(why) => saved.waiting.insert(id.to_owned(), why.to_owned()),
            None => saved.waiting.remove(id),
        };
        if saved.waiting.get(id) != before.as_ref() {
            // Only what `--status` shows: a failed write loses nothing.
            let _ = state::save_unsynced(&path, &saved);
        }
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
    fn sizes_are_shown_short() {
        assert_eq!(size(G + G / 5), "1.2G");
        assert_eq!(size(2 * G), "2G");
        assert_eq!(size(512 << 20), "512M");
        assert_eq!(size(800 << 10), "800k");
    }
}
