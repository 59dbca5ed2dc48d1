//! `--parallel auto`: another task starts only while the machine has room for its agent (the
//! rule: `fleet::room`). Each task's need, the notice, and the run's state that `--status` reads.

use crate::storage::tasks::{self, Task};

use super::super::room::{Machine, held, need, need_and_source};
use super::Coordinator;

impl Coordinator<'_> {
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
            .map(|(other, _)| need(&self.config.options, other))
            .collect();
        let (needed, need_from) = need_and_source(&self.config.options, task);
        let Some(why) = held(&running, needed, &machine) else {
            return Ok(false);
        };
        let said = why.split(':').next().unwrap_or_default().to_owned();
        if self.told_room_waits.insert((id.to_owned(), said)) {
            self.sink.notice(crate::event::Notice::RoomWait {
                task: id,
                why: &why,
                need_from,
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
