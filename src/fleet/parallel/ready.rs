//! What a parallel run starts next: the ready tasks (to do, their blockers done in the base, not
//! running, failed or waiting to merge), less those whose `touches:` overlap a running task's —
//! declared, or learnt from this run's conflicts.

use std::collections::{BTreeMap, BTreeSet};

use crate::event::{Notice, WaitReason};
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
        if self.running.is_empty() {
            return Ok(false);
        }
        let list = self.base_list()?;
        let ids = tasks::task_ids(&list);
        let behind = (list.tasks.iter().zip(&ids))
            .filter(|(_, other)| self.running.contains(*other))
            .find_map(|(other, other_id)| {
                let reason = self.learned.keeps_apart((id, task), (other_id, other))?;
                Some((other_id.clone(), reason))
            });
        let Some((behind, reason)) = behind else {
            return Ok(false);
        };
        if self.told_touch_waits.insert(id.to_owned()) {
            self.sink.notice(Notice::TouchesWait {
                task: id,
                behind: &behind,
                reason,
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
    fn apart(&self, a: &str, b: &str) -> bool {
        self.apart.contains(&ordered(a, b))
    }

    /// Why tasks `a` and `b` (each an id and its task) may not run side by side, if they may
    /// not: their declared `touches:` overlap, or their changes conflicted in this run.
    pub(super) fn keeps_apart(&self, a: (&str, &Task), b: (&str, &Task)) -> Option<WaitReason> {
        let declared = |task: &Task| crate::protect::list(task.property(tasks::TOUCHES));
        if crate::protect::overlap(&declared(a.1), &declared(b.1)) {
            Some(WaitReason::Touches)
        } else if self.apart(a.0, b.0)
            || crate::protect::overlap(&self.touches(a.0, a.1), &self.touches(b.0, b.1))
        {
            Some(WaitReason::Conflicted)
        } else {
            None
        }
    }

    /// What task `id` touches: its `touches:` and what it learnt.
    fn touches(&self, id: &str, task: &Task) -> Vec<String> {
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

    #[test]
    fn a_wait_says_whether_declared_touches_or_a_conflict_keep_two_tasks_apart() {
        let mut learned = Learned::default();
        let (api, users, docs) = (
            task(Some("src/api/**")),
            task(Some("src/api/users.rs")),
            task(Some("docs/")),
        );
        assert_eq!(
            learned.keeps_apart(("users", &users), ("api", &api)),
            Some(WaitReason::Touches)
        );
        assert_eq!(learned.keeps_apart(("docs", &docs), ("api", &api)), None);
        learned.landed("api", vec!["docs/api.md".to_owned()]);
        learned.conflicted("docs", &["docs/api.md".to_owned()]);
        assert_eq!(
            learned.keeps_apart(("docs", &docs), ("api", &api)),
            Some(WaitReason::Conflicted),
            "paired by their conflict"
        );
        let (plain, readme) = (task(None), task(Some("docs/api.md")));
        assert_eq!(
            learned.keeps_apart(("other", &readme), ("docs", &plain)),
            Some(WaitReason::Conflicted),
            "docs learnt it touches docs/api.md"
        );
        assert_eq!(
            learned.keeps_apart(("other", &plain), ("docs", &plain)),
            None
        );
    }
}
