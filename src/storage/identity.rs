//! A task's identity in a run of several loops. Its id is written into the task file the first
//! time a run sees it, so removing, inserting or reordering tasks never moves an id to another
//! task; and everything a run saves for a task (its worktree's `ralph-task.json`) records the id
//! and a fingerprint of the task's text, so saved work is never applied to a task it was not
//! made for.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::tasks::{self, TaskList};

/// The file in a task loop's `.ralph/` that says which task its work is for.
pub(crate) const TASK_FILE: &str = "ralph-task.json";

/// The task file with an `id` line under each top-level task that has none (the id
/// [`tasks::task_ids`] gives it); `None` when every task has one already.
pub(crate) fn with_ids(content: &[u8]) -> Option<Vec<u8>> {
    let list = TaskList::parse(&String::from_utf8_lossy(content));
    let ids = tasks::task_ids(&list);
    let missing: Vec<(usize, &str)> = (list.tasks.iter())
        .zip(&ids)
        .filter(|(task, _)| task.id().is_none())
        .map(|(task, id)| (task.line, id.as_str()))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(content.len() + missing.len() * 16);
    for (index, line) in content.split_inclusive(|&b| b == b'\n').enumerate() {
        out.extend_from_slice(line);
        if let Some((_, id)) = missing.iter().find(|(at, _)| *at == index) {
            if !line.ends_with(b"\n") {
                out.push(b'\n');
            }
            out.extend_from_slice(format!("  - {}: {id}\n", tasks::ID).as_bytes());
        }
    }
    Some(out)
}

/// A fingerprint of a task's text (its description, trimmed): 16 hex digits, the same on every
/// machine and in every version of ralph (64-bit FNV-1a).
pub(crate) fn fingerprint(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.trim().as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Which task a task loop's saved work is for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Owner {
    pub(crate) id: String,
    pub(crate) text: String,
    pub(crate) fingerprint: String,
}

impl Owner {
    pub(crate) fn of(id: &str, text: &str) -> Self {
        Self {
            id: id.to_owned(),
            text: text.to_owned(),
            fingerprint: fingerprint(text),
        }
    }

    /// The owner recorded in the `.ralph/` directory `dir` of a task loop, if any.
    pub(crate) fn recorded(dir: &Path) -> Option<Self> {
        let bytes = std::fs::read(dir.join(TASK_FILE)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Records this owner in the `.ralph/` directory `dir` of a task loop.
    pub(crate) fn record(&self, dir: &Path) -> anyhow::Result<()> {
        let mut bytes = serde_json::to_vec_pretty(self)?;
        bytes.push(b'\n');
        super::write_atomic(&dir.join(TASK_FILE), &bytes)
    }

    /// Whether work saved for this owner may go on as task `id` with text `text`.
    pub(crate) fn is_for(&self, id: &str, text: &str) -> bool {
        self.id == id && self.fingerprint == fingerprint(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_without_an_id_get_one_line_and_nothing_else_changes() {
        let content = b"# Tasks\n\n- [ ] Write tests\n  - [ ] unit\n- [x] Ship\n  - id: ship\n- [ ] Write tests";
        let updated = String::from_utf8(with_ids(content).unwrap()).unwrap();
        assert_eq!(
            updated,
            "# Tasks\n\n- [ ] Write tests\n  - id: write-tests\n  - [ ] unit\n- [x] Ship\n  - id: ship\n- [ ] Write tests\n  - id: write-tests-2\n"
        );
        assert_eq!(
            with_ids(updated.as_bytes()),
            None,
            "every task has its id now"
        );
        // Removing the first task no longer moves its id to the other.
        let list = TaskList::parse(&updated.replacen(
            "- [ ] Write tests\n  - id: write-tests\n  - [ ] unit\n",
            "",
            1,
        ));
        assert_eq!(tasks::task_ids(&list), ["ship", "write-tests-2"]);
    }

    #[test]
    fn a_fingerprint_is_stable_and_tells_texts_apart() {
        assert_eq!(fingerprint("Write tests"), fingerprint("  Write tests\n"));
        assert_ne!(fingerprint("Write tests"), fingerprint("Write tests!"));
        assert_eq!(fingerprint("").len(), 16);
        let owner = Owner::of("t", "Write tests");
        assert!(owner.is_for("t", "Write tests"));
        assert!(!owner.is_for("t", "Write tests!"));
        assert!(!owner.is_for("u", "Write tests"));
    }
}
