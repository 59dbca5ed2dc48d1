//! Records ralph keeps in refs (claims, questions, the budget ledger), and the records last
//! read under each prefix of each repository, with the refs they were read at.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A record ralph keeps in a ref: the ref, its commit, and the commit's message.
#[derive(Clone)]
pub(super) struct RefRecord {
    pub(super) name: String,
    pub(super) sha: String,
    pub(super) text: String,
}

/// Each entry: a repository's shared git directory and a prefix, the refs under it (by name
/// and commit) when last read, and their records. A handful: a worker reads its claims, its
/// fleet's questions and its ledger.
type Entry = ((PathBuf, String), Vec<(String, String)>, Vec<RefRecord>);
static MEMO: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
const KEPT: usize = 8;

/// The records under `prefix` of `common`, when they were last read at exactly `refs`.
pub(super) fn get(
    (common, prefix): (&Path, &str),
    refs: &[(String, String)],
) -> Option<Vec<RefRecord>> {
    let memo = MEMO.lock().ok()?;
    (memo.iter())
        .find(|((dir, under), at, _)| dir == common && under == prefix && at == refs)
        .map(|(_, _, records)| records.clone())
}

/// Keeps `records`, read under `prefix` of `common` while its refs were `refs`, when they
/// are those refs' records (no ref moved between the two readings).
pub(super) fn put(key: (PathBuf, String), refs: Vec<(String, String)>, records: &[RefRecord]) {
    let same = refs.len() == records.len()
        && (refs.iter().zip(records))
            .all(|((name, sha), record)| *name == record.name && *sha == record.sha);
    let Ok(mut memo) = MEMO.lock() else {
        return;
    };
    memo.retain(|(each, _, _)| *each != key);
    if !same {
        return;
    }
    if memo.len() >= KEPT {
        memo.remove(0);
    }
    memo.push((key, refs, records.to_vec()));
}
