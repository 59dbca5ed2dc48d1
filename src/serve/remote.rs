//! `--serve --remote NAME`: the fleet's claims and task board on a git remote, fetched at most
//! every few seconds however many pages ask.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long a fetched board is shown before the remote is asked again.
const FRESH: Duration = Duration::from_secs(5);

/// The last board fetched, and when.
#[derive(Default)]
pub(super) struct Cache(Mutex<Option<(Instant, Value)>>);

impl Cache {
    /// The board of `remote` as seen from the clone in `cwd`: `{claims, tasks, left_to_run}`,
    /// or `{error}` when the remote cannot be read.
    pub(super) fn get(&self, cwd: &Path, remote: &str, ttl: Duration) -> Value {
        let mut cached = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, value)) = cached.as_ref()
            && at.elapsed() < FRESH
        {
            return value.clone();
        }
        let value = match crate::fleet::remote_status(cwd, remote, ttl) {
            Ok(board) => json!({
                "remote": board.remote,
                "base": board.base,
                "claims": board.claims,
                "budget": board.budget,
                "tasks": crate::output::report::tasks_report("found", &board.list),
                "left_to_run": board.list.left_to_run(),
            }),
            Err(err) => json!({ "remote": remote, "error": format!("{err:#}") }),
        };
        *cached = Some((Instant::now(), value.clone()));
        value
    }
}
