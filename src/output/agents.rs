//! What several agents in one run print: the switch to a fallback agent, and each agent's share.

use std::collections::BTreeMap;

use super::format::{plural, short_duration};
use super::{compact_number, cost_text, warn};
use crate::storage::history::AgentShare;

/// One line per agent when several ran: `Claude Code: 2 iterations · 1.2k tokens · $0.0100`.
pub(crate) fn agent_shares(agents: &BTreeMap<String, AgentShare>) -> Vec<String> {
    if agents.len() < 2 {
        return Vec::new();
    }
    agents
        .iter()
        .map(|(id, share)| {
            let mut line = format!(
                "{}: {}",
                crate::agents::AgentKind::display_name_for(id),
                plural(u64::from(share.iterations), "iteration")
            );
            if share.tokens.total() > 0 {
                line.push_str(&format!(
                    " · {} tokens",
                    compact_number(share.tokens.total())
                ));
            }
            if let Some(cost) = share.cost_usd {
                line.push_str(&format!(" · {}", cost_text(cost)));
            }
            line
        })
        .collect()
}

/// `--fallback`: why another agent takes the iteration when `from` is out of quota (`until`: its
/// reset time, if it gave one).
pub(crate) fn fallback_limited(from: &str, until: Option<chrono::DateTime<chrono::Utc>>) -> String {
    match until {
        Some(until) => {
            let left = (until - crate::model::now()).to_std().unwrap_or_default();
            format!(
                "{from} is out of quota until {} UTC (in {})",
                until.format("%H:%M"),
                short_duration(left)
            )
        }
        None => format!("{from} is out of quota and gave no reset time"),
    }
}

/// `--fallback`: why another agent takes over when a fallback agent's credentials failed.
pub(crate) fn fallback_auth_failed(from: &str) -> String {
    format!("{from}'s credentials failed; it is skipped as a fallback for the rest of this run")
}

/// Why a fallback agent takes over.
pub(crate) fn fallback_switch(to: &str, why: &str) {
    warn(&[&format!("↪ {why}. {to} takes this iteration.")]);
}

/// `--fallback`: every agent is out of quota.
pub(crate) fn fallback_all_limited(until: chrono::DateTime<chrono::Utc>) {
    warn(&[&format!(
        "⏳ Every agent is out of quota; the iteration waits for the first reset, at {} UTC.",
        until.format("%H:%M")
    )]);
}
