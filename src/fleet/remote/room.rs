//! A `--worker` given `--agent-memory` (or taking a task with `memory:`) claims the task only
//! while the machine has room for its agent beside those the other workers of this user run on it
//! (the rule: `fleet::room`), and says once why it waits; while its agent runs, its need is
//! written where those workers see it.

use crate::event::Notice;
use crate::storage::tasks::{self, Task};

use super::super::room::{Machine, Neighbour, held, need, need_and_source, sandbox_limit};
use super::Session;

impl Session<'_> {
    /// Whether the machine's room is looked at for task `task`: `--agent-memory`,
    /// `--sandbox-memory` under a sandbox, or its `memory:` property.
    fn counts_room(&self, task: &Task) -> bool {
        let options = &self.config.options;
        options.agent_memory.is_some()
            || sandbox_limit(options).is_some()
            || task.property(tasks::MEMORY).is_some()
    }

    /// Whether the worker waits before claiming task `id`: the machine has no room for its
    /// agent now. Said once until a task is claimed.
    pub(super) fn waits_for_room(&mut self, id: &str, task: &Task) -> bool {
        if !self.counts_room(task) {
            return false;
        }
        let Some(machine) = Machine::read() else {
            return false;
        };
        let (needed, need_from) = need_and_source(&self.config.options, task);
        let Some(why) = held(&Neighbour::others(), needed, &machine) else {
            self.told_room = false;
            return false;
        };
        if !std::mem::replace(&mut self.told_room, true) {
            self.sink.notice(Notice::RoomWait {
                task: id,
                why: &why,
                need_from,
            });
        }
        true
    }

    /// This worker's agent among the machine's while it runs task `task` (when room counts).
    pub(super) fn enter_room(&self, task: &Task) -> Option<Neighbour> {
        self.counts_room(task)
            .then(|| Neighbour::enter(need(&self.config.options, task)))
            .flatten()
    }
}
