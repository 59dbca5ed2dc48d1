//! What several agents in one run print: the switch to a fallback agent, and each agent's share.

use std::collections::BTreeMap;

use super::format::plural;
use super::{Voice, compact_number, cost_text};
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
            if let Some(cost) = super::format::spent(share.cost_usd, share.tokens.total()) {
                line.push_str(&format!(" · {}", cost_text(cost)));
            }
            line
        })
        .collect()
}

/// Why a fallback agent takes over.
pub(crate) fn fallback_switch(out: &Voice, to: &str, why: &str) {
    out.warn(&[&format!("↪ {why}. {to} takes this iteration.")]);
}

/// `--fallback`: every agent is out of quota.
pub(crate) fn fallback_all_limited(out: &Voice, until: Option<chrono::DateTime<chrono::Utc>>) {
    let line = match until {
        Some(until) => format!(
            "⏳ Every agent is out of quota; the iteration waits for the first reset, at {} UTC.",
            until.format("%H:%M")
        ),
        None => "⏳ Every agent is out of quota, and the first limit to end gave no reset time; the iteration is retried after the usual backoff (at most --retry-max-wait).".to_owned(),
    };
    out.warn(&[&line]);
}
