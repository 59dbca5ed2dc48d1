//! `--fleet-budget`: one budget for every worker sharing a remote, reserved before each
//! iteration in a ledger on it.

use std::fs;

use crate::fleet::{finish, machine, machines, start_worker};
use crate::support::TestEnv;

/// Claude Code reporting 0.02 USD per call (and noting when it can see the remote); no task is
/// ever done.
const SPENDS: &str = r#"#!/bin/sh
echo x >> "$FAKE_AGENT_DIR/calls"
[ -d "$FAKE_AGENT_DIR/../remote.git" ] && echo x >> "$FAKE_AGENT_DIR/saw-remote"
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
    three_workers_spend_one_budget(false);
}

/// The same with every agent in the sandbox: the ledger is ralph's, outside it.
#[test]
fn three_sandboxed_workers_spend_one_budget_together() {
    if crate::support::can_sandbox_agents() {
        three_workers_spend_one_budget(true);
    }
}

/// Three workers (their agents `sandboxed` or not) share `--fleet-budget --max-cost 0.10`;
/// each iteration costs 0.02.
fn three_workers_spend_one_budget(sandboxed: bool) {
    let names = ["m1", "m2", "m3"];
    let env = machines(
        "- [ ] A\n  - id: a\n- [ ] B\n  - id: b\n- [ ] C\n  - id: c\n",
        &names,
    );
    env.write_executable("claude", SPENDS);
    let sandbox = if sandboxed {
        crate::support::sandboxed_agents(&env)
    } else {
        Vec::new()
    };
    let mut args = vec![
        "--agent",
        "claude-code",
        "--fleet-budget",
        "--max-cost",
        "0.10",
    ];
    args.extend(sandbox.iter().map(String::as_str));
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
    // Blind first iterations count as the fleet's average once one ended: within the budget.
    assert!(total <= 0.10 + 1e-9, "the fleet spent {total}");
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
    // In the sandbox the agents never saw the remote the ledger is on.
    assert_eq!(env.agent_dir().join("saw-remote").exists(), !sandboxed);
}

/// What `ralph --status --remote origin --json` on `name` shows of the fleet's budget, judging
/// claims with the workers' `--claim-ttl`.
fn budget_seen(env: &TestEnv, name: &str, ttl: &str) -> serde_json::Value {
    let status = env
        .ralph()
        .current_dir(machine(env, name))
        .args([
            "--status",
            "--remote",
            "origin",
            "--json",
            "--claim-ttl",
            ttl,
        ])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&status.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&status.stderr)));
    json["budget"].clone()
}

/// Polls [`budget_seen`] until `ready` holds of it (15 s at most).
fn budget_until(
    env: &TestEnv,
    ttl: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let budget = budget_seen(env, "m2", ttl);
        if ready(&budget) {
            return budget;
        }
        assert!(std::time::Instant::now() < deadline, "{budget}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A worker killed (SIGKILL) while its iteration holds a reservation leaves it in the ledger
/// until its claim goes stale; then it no longer counts, and the worker started again in the
/// clone takes the task back and spends what the dead reservation held.
#[test]
fn a_killed_workers_reservation_expires_with_its_claim_and_the_restarted_worker_spends_it() {
    let env = machines("- [ ] Solo\n  - id: solo\n", &["m1", "m2"]);
    // m1's first call hangs once it is running.
    fs::write(
        env.agent_dir().join("script"),
        r#"if [ "$machine" = m1 ] && [ ! -f "$dir/m1-first" ]; then
  touch "$dir/m1-first"; echo ready > "$dir/ready"; sleep 600
fi
"#,
    )
    .unwrap();
    // Room for one reservation of 0.5, not two.
    let budget = ["--fleet-budget", "--max-cost", "0.6", "--reserve", "0.5"];
    let args = [&budget[..], &crate::workers::FAST_CLAIMS].concat();
    let mut first = start_worker(&env, "m1", &args);
    crate::support::wait_for_file(
        &env.agent_dir().join("ready"),
        std::time::Duration::from_secs(30),
    );
    // Judged with a long TTL, the reservation is alive while the claim is.
    let held = budget_seen(&env, "m2", "10m");
    assert_eq!(held["reserved_usd"], 0.5, "{held}");
    first.kill().unwrap();
    first.wait().unwrap();
    let expired = budget_until(&env, "1s", |budget| budget["reserved_usd"] == 0.0);
    assert_eq!(expired["left_usd"], 0.6, "{expired}");

    let (code, stdout, stderr) = finish(start_worker(&env, "m1", &args));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("taken over from"), "{stdout}");
    let tasks = crate::workers::remote_tasks(&env);
    assert!(tasks.contains("- [x] Solo"), "{tasks}");
    let after = budget_seen(&env, "m2", "1s");
    assert_eq!(after["reserved_usd"], 0.0, "{after}");
    assert_eq!(after["workers"].as_array().unwrap().len(), 2, "{after}");
}
