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
