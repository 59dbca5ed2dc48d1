//! `ralph --import FILE` and `ralph --export json`.

use std::fs;

use crate::support::TestEnv;

const PRD: &str = r#"{
  "project": "Shop",
  "userStories": [
    {"id": "US-003", "title": "Checkout", "acceptanceCriteria": ["Card payments work", "Typecheck passes"], "priority": 3, "passes": false},
    {"id": "US-001", "title": "Catalogue", "priority": 1, "passes": true},
    {"id": "US-004", "title": "Receipts", "priority": 4, "passes": false},
    {"id": "US-002", "title": "Cart", "priority": 2, "passes": true}
  ]
}"#;

fn tasks_file(env: &TestEnv) -> String {
    fs::read_to_string(env.ralph_file("ralph-tasks.md")).unwrap_or_default()
}

#[test]
fn a_prd_imports_in_priority_order_once() {
    let env = TestEnv::new();
    fs::write(env.work().join("prd.json"), PRD).unwrap();
    let run = env.run(&["--import", "prd.json"]);
    run.assert_code(0);
    assert!(
        run.stdout()
            .contains("📥 Imported 4 tasks from prd.json (prd.json)"),
        "{}",
        run.stdout()
    );
    assert!(
        run.stdout().contains("4. ⏸️ Receipts"),
        "shown as --list-tasks does: {}",
        run.stdout()
    );
    let content = tasks_file(&env);
    let order: Vec<&str> = content.lines().filter(|l| l.starts_with("- [")).collect();
    assert_eq!(
        order,
        [
            "- [x] Catalogue",
            "- [x] Cart",
            "- [ ] Checkout",
            "- [ ] Receipts"
        ]
    );
    assert!(
        content.contains("  - success: Card payments work; Typecheck passes\n"),
        "{content}"
    );
    assert!(content.contains("  - id: US-003\n"), "{content}");
    let again = env.run(&["--import", "prd.json"]);
    again.assert_code(0);
    assert!(
        again.stdout().contains(
            "Imported 0 tasks from prd.json (prd.json); left out 4 tasks already in the list"
        ),
        "{}",
        again.stdout()
    );
    assert_eq!(
        tasks_file(&env),
        content,
        "the second import changed nothing"
    );
}

#[test]
fn a_tasks_json_imports_blockers_that_the_tasks_mode_honours() {
    let env = TestEnv::new();
    fs::write(
        env.work().join("tasks.json"),
        r##"[
  {"id": "#2", "content": "Second", "status": "pending", "activeForm": "Doing the second", "blockedBy": ["#1"]},
  {"id": "#1", "content": "First", "status": "pending", "activeForm": "Doing the first"}
]"##,
    )
    .unwrap();
    env.run(&["--import", "tasks.json"]).assert_code(0);
    let content = tasks_file(&env);
    assert!(
        content.contains(
            "- [ ] Second\n  - id: 2\n  - blocked_by: 1\n  - active_form: Doing the second\n"
        ),
        "{content}"
    );
    // The first task in the file waits for the second: the loop starts with "First".
    env.run_loop(&["Work", "--tasks", "--max-iterations", "1"])
        .assert_code(2);
    let prompt = env.agent_prompt(1);
    assert!(prompt.contains("NEXT TASK: \"First\""), "{prompt}");
}

#[test]
fn a_roadmap_imports_with_its_properties_after_the_existing_tasks() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(
        env.ralph_file("ralph-tasks.md"),
        "# Ralph Tasks\n\n- [ ] Mine\n",
    )
    .unwrap();
    fs::write(
        env.work().join("roadmap.md"),
        "# Roadmap\n\n## Tasks\n\n- [ ] **feat-001**: Add password reset functionality\n  - ralph: true\n  - max_iterations: 25\n  - completion_promise: PASSWORD_RESET_COMPLETE\n  - timeout: 45min\n  - success: POST /api/reset-password sends email, token expires in 24h, has integration tests\n  - cli: codex\n\n- [ ] **fix-001**: Fix race condition in user service\n  - ralph: true\n  - cli: codex\n",
    )
    .unwrap();
    let run = env.run(&["--import", "roadmap.md"]);
    run.assert_code(0);
    assert!(
        run.stdout()
            .contains("Imported 2 tasks from roadmap.md (markdown)"),
        "{}",
        run.stdout()
    );
    let content = tasks_file(&env);
    assert!(
        content.starts_with("# Ralph Tasks\n\n- [ ] Mine\n- [ ] **feat-001**: Add password reset"),
        "{content}"
    );
    assert!(
        content.contains("  - completion_promise: PASSWORD_RESET_COMPLETE\n  - timeout: 45min\n"),
        "{content}"
    );
    let listed: serde_json::Value =
        serde_json::from_str(&env.run(&["--export", "json"]).stdout()).unwrap();
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|task| task["id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids, ["", "feat-001", "fix-001"]);
    // The id is its own field: the text does not repeat it.
    assert_eq!(
        listed["tasks"][1]["text"], "Add password reset functionality",
        "{listed}"
    );
    assert_eq!(
        listed,
        serde_json::from_str::<serde_json::Value>(&env.run(&["--list-tasks", "--json"]).stdout())
            .unwrap()
    );
}

#[test]
fn broken_empty_or_a_directory_is_one_line_exit_1_and_the_list_untouched() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    let before = "# Ralph Tasks\n\n- [ ] Keep me\n";
    fs::write(env.ralph_file("ralph-tasks.md"), before).unwrap();
    fs::write(
        env.work().join("broken.json"),
        "{\"userStories\": [\n  {\"title\": \"x\",}\n]}",
    )
    .unwrap();
    fs::write(env.work().join("empty.json"), "").unwrap();
    fs::create_dir_all(env.work().join("adir")).unwrap();
    for (file, expected) in [
        (
            "broken.json",
            "cannot import broken.json: it is not valid JSON (line 2, column ",
        ),
        (
            "empty.json",
            "cannot import empty.json: it is empty; expected a prd.json",
        ),
        ("adir", "cannot import adir: it is a directory"),
        ("missing.json", "cannot import missing.json: "),
    ] {
        let run = env.run(&["--import", file]);
        run.assert_code(1);
        let stderr = run.stderr();
        assert!(stderr.contains(expected), "{file}: {stderr}");
        assert_eq!(
            stderr
                .lines()
                .filter(|l| l.contains("cannot import"))
                .count(),
            1,
            "{stderr}"
        );
        assert_eq!(tasks_file(&env), before, "{file}");
    }
}

/// The `tasks` of an export, without what depends on the list around them. A task's id is its
/// own field; whether the file wrote it as an `id:` line or a roadmap's `**id**:` prefix (which
/// an import back writes as an `id:` line) is left out of its properties.
fn exported_tasks(env: &TestEnv) -> serde_json::Value {
    let run = env.run(&["--export", "json"]);
    run.assert_code(0);
    let mut listed: serde_json::Value = serde_json::from_str(&run.stdout()).unwrap();
    for task in listed["tasks"].as_array_mut().unwrap() {
        task["properties"]
            .as_array_mut()
            .unwrap()
            .retain(|property| property["key"] != "id");
    }
    listed["tasks"].clone()
}

#[test]
fn an_export_imports_back_with_every_task_setting() {
    let env = TestEnv::new();
    fs::write(
        env.work().join("roadmap.md"),
        "- [ ] **task-001**: Implement auth\n  - max_iterations: 30\n  - completion_promise: AUTH_DONE\n  - timeout: 60min\n  - success: All tests pass\n  - cli: codex\n  - [x] routes\n- [/] Write docs\n  - id: docs\n  - blocked_by: task-001\n  - agent: claude\n  - model: sonnet\n  - promise: DOCS\n  - verify: test -f README\n  - max_attempts: 3\n  - priority: 2\n- [!] Ship\n  - ralph: false\n  - note: failed after 1 attempts\n",
    )
    .unwrap();
    env.run(&["--import", "roadmap.md"]).assert_code(0);
    let tasks = exported_tasks(&env);
    let keys: Vec<&str> = tasks[1]["properties"]
        .as_array()
        .unwrap()
        .iter()
        .map(|property| property["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "blocked_by",
            "agent",
            "model",
            "promise",
            "verify",
            "max_attempts",
            "priority"
        ]
    );
    fs::write(
        env.work().join("tasks-export.json"),
        env.run(&["--export", "json"]).stdout(),
    )
    .unwrap();

    // From a file into a new list, and through a pipe into a third.
    let second = TestEnv::new();
    let file = env.work().join("tasks-export.json");
    let run = second.run(&["--import", file.to_str().unwrap()]);
    run.assert_code(0);
    assert!(
        run.stdout().contains("📥 Imported 3 tasks from "),
        "{}",
        run.stdout()
    );
    assert_eq!(exported_tasks(&second), tasks);
    let third = TestEnv::new();
    let piped = env.run(&["--export", "json"]).stdout();
    let run = third.run_piped(&["--import", "-"], piped.as_bytes(), |_| {});
    run.assert_code(0);
    assert!(
        run.stdout()
            .contains("Imported 3 tasks from standard input (ralph)"),
        "{}",
        run.stdout()
    );
    assert_eq!(exported_tasks(&third), tasks);
    // Into the list it came from: nothing is added.
    let again = env.run(&["--import", "tasks-export.json"]);
    again.assert_code(0);
    assert!(
        again.stdout().contains("Imported 0 tasks"),
        "{}",
        again.stdout()
    );
}

#[test]
fn taken_ids_get_new_ones_and_every_import_flag_counts() {
    let env = TestEnv::new();
    let session = |name: &str, letter: &str| {
        let items: Vec<String> = (1..=3)
            .map(|n| {
                let blocked = if n > 1 {
                    format!(", \"blockedBy\": [\"#{}\"]", n - 1)
                } else {
                    String::new()
                };
                format!("{{\"id\": \"#{n}\", \"content\": \"{letter} {n}\", \"status\": \"pending\"{blocked}}}")
            })
            .collect();
        fs::write(env.work().join(name), format!("[{}]", items.join(","))).unwrap();
    };
    session("tasks.json", "A");
    session("other-session.json", "B");
    let run = env.run(&["--import", "tasks.json", "--import", "other-session.json"]);
    run.assert_code(0);
    let stdout = run.stdout();
    assert!(
        stdout.contains("📥 Imported 3 tasks from tasks.json (tasks.json)\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("📥 Imported 3 tasks from other-session.json (tasks.json); 3 had an id already in use and got a new one: 1 → 1-2, 2 → 2-2, 3 → 3-2"),
        "{stdout}"
    );
    let content = tasks_file(&env);
    assert!(
        content.contains("- [ ] B 3\n  - id: 3-2\n  - blocked_by: 2-2\n"),
        "{content}"
    );
    let again = env.run(&["--import", "other-session.json"]);
    assert!(
        again
            .stdout()
            .contains("Imported 0 tasks from other-session.json (tasks.json); left out 3 tasks already in the list"),
        "{}",
        again.stdout()
    );
    // One file that cannot be imported: none is, and the list is untouched.
    fs::write(env.work().join("bad.json"), "{}").unwrap();
    let refused = env.run(&["--import", "tasks.json", "--import", "bad.json"]);
    refused.assert_code(1);
    assert!(
        refused.stderr().contains("cannot import bad.json"),
        "{}",
        refused.stderr()
    );
    assert_eq!(tasks_file(&env), content);
}
