//! `--agent-memory` for workers: a worker claims a task only while the machine has room for its
//! agent beside the agents other workers run on it.

use std::fs;
use std::time::Duration;

use crate::fleet::{finish, machine, machines, start_worker_with};

#[test]
fn a_second_worker_waits_for_room_on_the_machine_and_says_why() {
    // Room for one agent, not for two.
    let need = (crate::support::available_memory() / 10 * 6).to_string();
    let env = machines(
        "- [ ] One\n  - id: one\n- [ ] Two\n  - id: two\n",
        &["m1", "m2"],
    );
    // Each agent says it runs, then waits for the test's `go` (30 s at most).
    let hold = r#"touch "$dir/running-$machine"
i=0; while [ ! -f "$dir/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
"#;
    fs::write(env.agent_dir().join("script"), hold).unwrap();
    // The load of a machine running many tests at once is not what this test is about.
    let vars = [("RALPH_MAX_LOAD", "1000")];
    let args = ["--agent-memory", need.as_str(), "--wait"];
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
    let list = crate::workers::remote_tasks(&env);
    assert_eq!(list.matches("- [x]").count(), 2, "{list}");
}
