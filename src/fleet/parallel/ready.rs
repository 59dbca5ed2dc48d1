//! What a parallel run starts next: the ready tasks (to do, their blockers done in the base, not
//! running, failed or waiting to merge), less those whose `touches:` overlap a running task's —
//! declared, or learnt from this run's conflicts.

use std::collections::{BTreeMap, BTreeSet};

use crate::event::Notice;
use crate::storage::tasks::{self, Task};

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
                task.status.is_to_do()
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
        let mine = self.learned.touches(id, task);
        if self.running.is_empty() {
            return Ok(false);
        }
        let list = self.base_list()?;
        let ids = tasks::task_ids(&list);
        let behind = (list.tasks.iter().zip(&ids))
            .filter(|(_, other)| self.running.contains(*other))
            .find(|(other, other_id)| {
                self.learned.apart(id, other_id)
                    || crate::protect::overlap(&mine, &self.learned.touches(other_id, other))
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

/// What a run learns from its merge conflicts: a pair of tasks that conflicted is not run side by
/// side again, and the files that conflicted become implicit `touches` of the tasks that changed
/// them.
#[derive(Debug, Default)]
pub(super) struct Learned {
    /// The files each merged task's merge changed in the base.
    landed: BTreeMap<String, Vec<String>>,
    /// Implicit `touches`, by task.
    touches: BTreeMap<String, BTreeSet<String>>,
    /// Pairs of tasks that conflicted, each pair in order.
    apart: BTreeSet<(String, String)>,
}

impl Learned {
    /// Task `id` was merged; its merge changed `files` in the base.
    pub(super) fn landed(&mut self, id: &str, files: Vec<String>) {
        self.landed.insert(id.to_owned(), files);
    }

    /// Task `id`'s merge conflicted in `files`: with every merged task that changed one of them.
    pub(super) fn conflicted(&mut self, id: &str, files: &[String]) {
        let with: Vec<String> = (self.landed.iter())
            .filter(|(other, changed)| {
                other.as_str() != id && changed.iter().any(|file| files.contains(file))
            })
            .map(|(other, _)| other.clone())
            .collect();
        for task in with.iter().map(String::as_str).chain([id]) {
            let touched = self.touches.entry(task.to_owned()).or_default();
            touched.extend(files.iter().cloned());
        }
        for other in with {
            self.apart.insert(ordered(id, &other));
        }
    }

    /// Whether tasks `a` and `b` conflicted in this run.
    pub(super) fn apart(&self, a: &str, b: &str) -> bool {
        self.apart.contains(&ordered(a, b))
    }

    /// What task `id` touches: its `touches:` and what it learnt.
    pub(super) fn touches(&self, id: &str, task: &Task) -> Vec<String> {
        let mut all = crate::protect::list(task.property(tasks::TOUCHES));
        all.extend(self.touches.get(id).into_iter().flatten().cloned());
        all
    }
}

fn ordered(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_owned(), b.to_owned())
    } else {
        (b.to_owned(), a.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(touches: Option<&str>) -> Task {
        let line = touches.map_or_else(String::new, |t| format!("\n  - touches: {t}"));
        let list = tasks::TaskList::parse(&format!("- [ ] Some task{line}\n"));
        list.tasks[0].clone()
    }

    #[test]
    fn tasks_that_conflicted_stay_apart_and_the_files_become_their_touches() {
        let mut learned = Learned::default();
        learned.landed("api", vec!["src/api.rs".to_owned(), "README.md".to_owned()]);
        learned.landed("docs", vec!["docs/index.md".to_owned()]);
        learned.conflicted("users", &["src/api.rs".to_owned()]);
        assert!(learned.apart("users", "api") && learned.apart("api", "users"));
        assert!(
            !learned.apart("users", "docs"),
            "docs changed none of the files"
        );
        assert_eq!(learned.touches("users", &task(None)), ["src/api.rs"]);
        assert_eq!(
            learned.touches("api", &task(Some("src/**"))),
            ["src/**", "src/api.rs"]
        );
        assert!(learned.touches("docs", &task(None)).is_empty());
    }
}
