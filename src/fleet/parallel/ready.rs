//! What a parallel run starts next: the ready tasks (to do, their blockers done in the base, not
//! running, failed or waiting to merge), less those whose `touches:` overlap a running task's.

use crate::event::Notice;
use crate::storage::tasks::{self, Task, TaskStatus};

use super::Coordinator;

impl Coordinator<'_> {
    /// The tasks that can start now: to do, blockers done in the base, not running.
    pub(super) fn ready(&self) -> anyhow::Result<Vec<(String, Task)>> {
        let list = self.base_list()?;
        let ids = tasks::task_ids(&list);
        Ok(list
            .tasks
            .iter()
            .zip(ids)
            .filter(|(task, id)| {
                matches!(task.status, TaskStatus::Todo | TaskStatus::InProgress)
                    && list.blockers(task).is_empty()
                    && !self.running.contains(id)
                    && !self.failed.contains(id)
                    // Done, its merge waiting for the user: not started again.
                    && !self.blocked.contains(id)
            })
            .map(|(task, id)| (id, task.clone()))
            .collect())
    }

    /// Whether task `id` must wait because what it touches (`touches:`) overlaps what a running
    /// task touches; said once per task.
    pub(super) fn waits_for_touches(&mut self, id: &str, task: &Task) -> anyhow::Result<bool> {
        let mine = crate::protect::list(task.property(tasks::TOUCHES));
        if mine.is_empty() || self.running.is_empty() {
            return Ok(false);
        }
        let list = self.base_list()?;
        let ids = tasks::task_ids(&list);
        let behind = (list.tasks.iter().zip(&ids))
            .filter(|(_, other)| self.running.contains(*other))
            .find(|(other, _)| {
                crate::protect::overlap(
                    &mine,
                    &crate::protect::list(other.property(tasks::TOUCHES)),
                )
            })
            .map(|(_, other)| other.clone());
        let Some(behind) = behind else {
            return Ok(false);
        };
        if self.told_touch_waits.insert(id.to_owned()) {
            self.sink.notice(Notice::TouchesWait {
                task: id,
                behind: &behind,
            });
        }
        Ok(true)
    }
}
