//! `--agent-memory` for workers: a worker claims a task only while the machine has room for its
//! agent beside the agents other workers run on it.

use std::fs;
use std::time::Duration;

use crate::fleet::{finish, machine, machines, start_worker_with};

#[test]
fn a_second_worker_waits_for_room_on_the_machine_and_says_why() {
    second_worker_waits_for_room("--agent-memory", false);
}

/// The same with the agents in the sandbox and `--sandbox-memory` as the need.
#[test]
fn a_sandboxed_worker_takes_its_memory_limit_as_the_need() {
    if crate::support::can_sandbox_agents() {
        second_worker_waits_for_room("--sandbox-memory", true);
    }
}

/// Two workers with `memory` (the flag that sets the need) at 60% of the machine's available
/// memory, their agents `sandboxed` or not: the second waits for the first's agent.
fn second_worker_waits_for_room(memory: &str, sandboxed: bool) {
    // Room for one agent, not for two.
    let need = (crate::support::available_memory() / 10 * 6).to_string();
    let env = machines(
        "- [ ] One\n  - id: one\n- [ ] Two\n  - id: two\n",
        &["m1", "m2"],
    );
    // Each agent says it runs, then waits for the test's `go` (30 s at most); the sandbox's
    // check of the agent (`--version`) does nothing.
    let hold = r#"[ "$1" = --version ] && exit 0
touch "$dir/running-$machine"
i=0; while [ ! -f "$dir/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
"#;
    fs::write(env.agent_dir().join("script"), hold).unwrap();
    // The load of a machine running many tests at once is not what this test is about.
    let vars = [("RALPH_MAX_LOAD", "1000")];
    let sandbox = if sandboxed {
        crate::support::sandboxed_agents(&env)
    } else {
        Vec::new()
    };
    let mut args = vec![memory, need.as_str(), "--wait"];
    args.extend(sandbox.iter().map(String::as_str));
    let first = start_worker_with(&env, "m1", &args, &vars);
    crate::support::wait_for_file(&env.agent_dir().join("running-m1"), Duration::from_secs(30));
    let second = start_worker_with(&env, "m2", &args, &vars);
    // The second worker says why it waits, and claims nothing meanwhile.
    let journal = machine(&env, "m2").join(".ralph/events.jsonl");
    crate::support::wait_for_text(&journal, r#""event":"task_waits_for_room""#);
    let told = fs::read_to_string(&journal).unwrap();
    assert!(told.contains("waiting for memory: "), "{told}");
    assert!(!told.contains("task_claimed"), "{told}");
    assert!(!env.agent_dir().join("running-m2").exists());
    fs::write(env.agent_dir().join("go"), "").unwrap();
    let (code, out, err) = finish(first);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let (code, out, err) = finish(second);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        out.contains("[two] ⏳ Waits, waiting for memory: "),
        "{out}"
    );
    assert!(
        out.contains(&format!("(the need is set by {memory}).")),
        "{out}"
    );
    let list = crate::workers::remote_tasks(&env);
    assert_eq!(list.matches("- [x]").count(), 2, "{list}");
}
