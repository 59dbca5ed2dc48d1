//! Adding imported task blocks after the existing tasks: an exact duplicate (the same id and
//! text, or the same text without an id) is left out; a task whose id another task has already
//! gets a new one (`1` → `1-2`), and the imported tasks it blocks wait for the new id.

use std::collections::{BTreeMap, BTreeSet};

use super::Imported;
use crate::storage::tasks::{self, TaskList};

/// What an import does to the task file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Merged {
    /// The task file's new content.
    pub(crate) content: Vec<u8>,
    pub(crate) added: usize,
    /// Tasks left out as already in the list.
    pub(crate) skipped: usize,
    /// Each id that was taken and the new id its imported task got, in import order.
    pub(crate) renamed: Vec<(String, String)>,
}

/// A task the list has, or the import has added: its id and its text.
struct Known {
    id: Option<String>,
    text: String,
}

impl Known {
    /// Whether a task with `id` and `text` is this one again: the same text, and the same id or
    /// the one an earlier import gave it instead (`id-2`…).
    fn is(&self, id: Option<&str>, text: &str) -> bool {
        match (id, self.id.as_deref()) {
            (Some(id), Some(own)) => self.text == text && (own == id || is_renamed(own, id)),
            (Some(_), None) => false,
            (None, own) => own.unwrap_or(&self.text) == text,
        }
    }
}

/// Whether `own` is `id-N`, a new id [`merge`] gives.
fn is_renamed(own: &str, id: &str) -> bool {
    own.strip_prefix(id)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The task file's content with the imported tasks added to `current` (`None`: no file yet).
pub(crate) fn merge(current: Option<&[u8]>, imported: &Imported) -> Merged {
    let existing = current
        .map(|bytes| TaskList::parse(&String::from_utf8_lossy(bytes)))
        .unwrap_or_default();
    let mut known: Vec<Known> = (existing.tasks.iter())
        .map(|task| Known {
            id: task.id().map(str::to_owned),
            text: task.description().to_owned(),
        })
        .collect();
    let tasks: Vec<_> = (imported.blocks.iter())
        .filter_map(|block| Some((block, TaskList::parse(block).tasks.into_iter().next()?)))
        .collect();
    // No new id may be one the list or the import uses.
    let mut taken: BTreeSet<String> = (known.iter().filter_map(|task| task.id.clone()))
        .chain(
            tasks
                .iter()
                .filter_map(|(_, task)| task.id().map(str::to_owned)),
        )
        .collect();
    let mut renamed = Vec::new();
    // An imported id → the new id of the first imported task that had it.
    let mut new_ids: BTreeMap<String, String> = BTreeMap::new();
    let mut seen_ids = BTreeSet::new();
    let (mut added, mut skipped) = (Vec::new(), 0);
    for (block, task) in tasks {
        let id = task.id();
        if let Some(same) = known.iter().find(|other| other.is(id, task.description())) {
            skipped += 1;
            if let Some(id) = id
                && seen_ids.insert(id.to_owned())
                && let Some(own) = same.id.as_deref().filter(|own| *own != id)
            {
                new_ids.insert(id.to_owned(), own.to_owned());
            }
            continue;
        }
        let mut block = block.clone();
        let mut final_id = id.map(str::to_owned);
        if let Some(id) = id {
            let first = seen_ids.insert(id.to_owned());
            if known.iter().any(|other| other.id.as_deref() == Some(id)) {
                let fresh = fresh_id(id, &taken);
                taken.insert(fresh.clone());
                block = with_id(&block, &fresh);
                if first {
                    new_ids.insert(id.to_owned(), fresh.clone());
                }
                renamed.push((id.to_owned(), fresh.clone()));
                final_id = Some(fresh);
            }
        }
        known.push(Known {
            id: final_id,
            text: task.description().to_owned(),
        });
        added.push(block);
    }
    let mut content = tasks::appendable(current);
    if !added.is_empty() {
        if let Some(note) = &imported.note {
            content.extend_from_slice(format!("{note}\n").as_bytes());
        }
        for block in &added {
            content.extend_from_slice(with_blockers(block, &new_ids).as_bytes());
        }
    }
    Merged {
        content,
        added: added.len(),
        skipped,
        renamed,
    }
}

/// `id-2`, `id-3`… the first that is not `taken`.
fn fresh_id(id: &str, taken: &BTreeSet<String>) -> String {
    (2..)
        .map(|n| format!("{id}-{n}"))
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or_else(|| id.to_owned())
}

/// Whether a line of a task's block is its `key` property.
fn is_property(line: &str, key: &str) -> bool {
    tasks::property(line.trim_start()).is_some_and(|(k, _)| k == key)
}

/// A task block with `id` as its id: its `id` lines replaced by one right under the task line
/// (an `id` property wins over a `**id**:` prefix of the text).
fn with_id(block: &str, id: &str) -> String {
    let mut out = String::with_capacity(block.len() + id.len() + 8);
    for (at, line) in block.split_inclusive('\n').enumerate() {
        if at > 0 && is_property(line, tasks::ID) {
            continue;
        }
        out.push_str(line);
        if at == 0 {
            out.push_str(&format!("  - {}: {id}\n", tasks::ID));
        }
    }
    out
}

/// A task block whose `blocked_by` ids are renamed as `new_ids` says.
fn with_blockers(block: &str, new_ids: &BTreeMap<String, String>) -> String {
    if new_ids.is_empty() {
        return block.to_owned();
    }
    let mut out = String::with_capacity(block.len() + 16);
    for line in block.split_inclusive('\n') {
        if !is_property(line, tasks::BLOCKED_BY) {
            out.push_str(line);
            continue;
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        let (_, ids) = line.split_once(':').unwrap_or_default();
        let ids: Vec<&str> = (ids.split(','))
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .collect();
        if !ids.iter().any(|id| new_ids.contains_key(*id)) {
            out.push_str(line);
            continue;
        }
        let ids: Vec<&str> = (ids.into_iter())
            .map(|id| new_ids.get(id).map_or(id, String::as_str))
            .collect();
        out.push_str(&format!(
            "{indent}- {}: {}\n",
            tasks::BLOCKED_BY,
            ids.join(", ")
        ));
    }
    out
}
