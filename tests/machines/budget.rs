//! `--fleet-budget`: one budget for every worker sharing a remote, reserved before each
//! iteration in a ledger on it.

use std::fs;

use crate::fleet::{finish, machine, machines, start_worker};
use crate::support::TestEnv;

/// Claude Code reporting 0.02 USD per call; no task is ever done.
const SPENDS: &str = r#"#!/bin/sh
echo x >> "$FAKE_AGENT_DIR/calls"
sleep 0.1
echo '{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"working","total_cost_usd":0.02,"usage":{"input_tokens":10,"output_tokens":1}}'
"#;

/// What the histories of `names`' clones say was spent.
fn spent(env: &TestEnv, names: &[&str]) -> f64 {
    names
        .iter()
        .map(|name| {
            // A worker stopped before its first iteration has no history.
            let path = machine(env, name).join(".ralph/ralph-history.json");
            let Ok(text) = fs::read_to_string(path) else {
                return 0.0;
            };
            let history: serde_json::Value = serde_json::from_str(&text).unwrap();
            (history["iterations"].as_array().unwrap().iter())
                .filter_map(|record| record["cost_usd"].as_f64())
                .sum::<f64>()
        })
        .sum()
}

#[test]
fn three_workers_spend_one_budget_together_and_each_ends_with_exit_2() {
    let names = ["m1", "m2", "m3"];
    let env = machines(
        "- [ ] A\n  - id: a\n- [ ] B\n  - id: b\n- [ ] C\n  - id: c\n",
        &names,
    );
    env.write_executable("claude", SPENDS);
    let args = [
        "--agent",
        "claude-code",
        "--fleet-budget",
        "--max-cost",
        "0.10",
    ];
    let workers: Vec<_> = (names.iter())
        .map(|name| start_worker(&env, name, &args))
        .collect();
    for worker in workers {
        let (code, stdout, stderr) = finish(worker);
        assert_eq!(code, Some(2), "{stdout}\n{stderr}");
        let said = format!("{stdout}{stderr}");
        assert!(
            said.contains("max cost ($0.1000) reached for the fleet"),
            "{said}"
        );
        assert!(
            said.contains("see ralph --status --remote origin"),
            "{said}"
        );
    }
    // At most the budget and one reservation per worker.
    let total = spent(&env, &names);
    assert!(total <= 0.10 + 3.0 * 0.02 + 1e-9, "the fleet spent {total}");
    assert!(total >= 0.10 - 1e-9, "the fleet spent {total}");
    let status = env
        .ralph()
        .current_dir(machine(&env, "m1"))
        .args(["--status", "--remote", "origin"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(shown.contains("💰 FLEET BUDGET on origin: $"), "{shown}");
    assert!(shown.contains("left of $0.1000"), "{shown}");
    let json = env
        .ralph()
        .current_dir(machine(&env, "m1"))
        .args(["--status", "--remote", "origin", "--json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let budget = &json["budget"];
    assert!(
        (budget["spent_usd"].as_f64().unwrap() - total).abs() < 1e-6,
        "{budget}"
    );
    assert_eq!(budget["reserved_usd"], 0.0, "no iteration runs: {budget}");
    assert_eq!(budget["workers"].as_array().unwrap().len(), 3, "{budget}");
}
