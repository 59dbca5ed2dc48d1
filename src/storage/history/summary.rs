//! A small summary kept beside the history (`ralph-history.summary.json`): the totals, the
//! struggle indicators, the record count and the last records. `--status`, `--watch` and the
//! workers' rows read it instead of the whole history, so they cost the same after 10 iterations
//! or 10,000. The history file itself keeps its format (ralph.ts and the gem read it).
//!
//! The summary names the history's length when both were written; a history of another length
//! (written by another program, or a crash between the two writes) is read whole instead.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{History, IterationRecord, StruggleIndicators};
use crate::agents::Usage;

/// The summary's name, in `.ralph/`.
pub(crate) const SUMMARY_FILE: &str = "ralph-history.summary.json";

/// How many of the last records the summary holds (the most any reader asks for).
pub(crate) const RECENT: usize = 120;

#[derive(Debug, Serialize, Deserialize)]
struct Summary {
    /// The history file's length in bytes when this summary was written.
    history_bytes: u64,
    /// How many records the history holds.
    count: usize,
    total_duration_ms: u64,
    struggle_indicators: StruggleIndicators,
    total_tokens: Usage,
    total_turns: u32,
    total_cost_usd: Option<f64>,
    #[serde(default)]
    agents: std::collections::BTreeMap<String, super::AgentShare>,
    /// The last records, oldest first.
    recent: Vec<IterationRecord>,
}

/// The summary beside `history`.
pub(crate) fn path_for(history: &Path) -> PathBuf {
    history.with_file_name(SUMMARY_FILE)
}

/// The summary of `history`, whose file is `history_bytes` long.
pub(crate) fn write(
    history_path: &Path,
    history: &History,
    history_bytes: u64,
) -> anyhow::Result<()> {
    let count = history.iterations.len();
    let summary = Summary {
        history_bytes,
        count,
        total_duration_ms: history.total_duration_ms,
        struggle_indicators: history.struggle_indicators.clone(),
        total_tokens: history.total_tokens,
        total_turns: history.total_turns,
        total_cost_usd: history.total_cost_usd,
        agents: history.agents.clone(),
        recent: history.iterations[count.saturating_sub(RECENT)..].to_vec(),
    };
    let bytes = serde_json::to_vec(&summary)?;
    crate::storage::write_atomic_unsynced(&path_for(history_path), &bytes)
}

/// The history's totals and its last `keep` records (≤ [`RECENT`]) with the record count, from
/// the summary; `None` when there is none or it does not match the history file.
pub(crate) fn read(history_path: &Path, keep: usize) -> Option<(History, usize)> {
    if keep > RECENT {
        return None;
    }
    let length = std::fs::metadata(history_path).ok()?.len();
    let bytes = std::fs::read(path_for(history_path)).ok()?;
    let summary: Summary = serde_json::from_slice(&bytes).ok()?;
    if summary.history_bytes != length {
        return None;
    }
    let recent = summary.recent;
    let iterations = recent[recent.len().saturating_sub(keep)..].to_vec();
    Some((
        History {
            iterations,
            total_duration_ms: summary.total_duration_ms,
            struggle_indicators: summary.struggle_indicators,
            total_tokens: summary.total_tokens,
            total_turns: summary.total_turns,
            total_cost_usd: summary.total_cost_usd,
            agents: summary.agents,
            // A recent view: the gate checks are read with the whole history only.
            gates: Vec::new(),
            calls: Vec::new(),
        },
        summary.count,
    ))
}
