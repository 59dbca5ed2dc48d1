use super::*;

const PRD: &str = r#"{
  "project": "Shop",
  "branchName": "ralph/shop",
  "userStories": [
    {"id": "US-003", "title": "Checkout", "description": "Pay for the cart",
     "acceptanceCriteria": ["Card payments work", "Typecheck passes"], "priority": 3, "passes": false, "notes": ""},
    {"id": "US-001", "title": "Catalogue", "description": "List products", "priority": 1, "passes": true},
    {"id": "US-004", "title": "Receipts", "priority": 4, "passes": false, "owner": "sam"},
    {"id": "US-002", "title": "Cart", "description": "Add to cart\nand remove", "priority": 2, "passes": true}
  ]
}"#;

#[test]
fn a_prd_imports_in_priority_order_with_boxes_success_lines_and_every_field() {
    let imported = convert(PRD).unwrap();
    assert_eq!(imported.format, "prd.json");
    assert_eq!(
        imported.blocks,
        [
            "- [x] Catalogue\n  - id: US-001\n  - description: List products\n  - priority: 1\n",
            "- [x] Cart\n  - id: US-002\n  - description: Add to cart and remove\n  - priority: 2\n",
            "- [ ] Checkout\n  - id: US-003\n  - success: Card payments work; Typecheck passes\n  - description: Pay for the cart\n  - priority: 3\n",
            "- [ ] Receipts\n  - id: US-004\n  - owner: sam\n  - priority: 4\n",
        ]
    );
    assert_eq!(
        imported.note.as_deref(),
        Some("<!-- From prd.json: branch_name: ralph/shop; project: Shop -->")
    );
    let merged = merge(None, &imported);
    assert_eq!((merged.added, merged.skipped), (4, 0));
    let first = merged.content;
    let list = TaskList::parse(&String::from_utf8_lossy(&first));
    assert_eq!(list.tasks.len(), 4);
    assert_eq!(
        list.tasks[2].success(),
        Some("Card payments work; Typecheck passes")
    );
    // A second import adds nothing and changes nothing.
    let second = merge(Some(&first), &imported);
    assert_eq!((second.added, second.skipped), (0, 4));
    assert_eq!(second.content, first);
}

#[test]
fn a_tasks_json_imports_with_blockers_the_tasks_mode_honours() {
    let json = r##"[
      {"id": "#1", "content": "Implement the endpoint", "status": "completed", "activeForm": "Implementing"},
      {"id": "#2", "content": "Write its tests", "status": "in_progress", "activeForm": "Writing", "blockedBy": ["#1"]},
      {"id": "#3", "content": "Document it", "status": "pending", "activeForm": "Documenting", "blockedBy": ["#2", "#1"]}
    ]"##;
    let imported = convert(json).unwrap();
    assert_eq!(imported.format, "tasks.json");
    assert_eq!(
        imported.blocks[2],
        "- [ ] Document it\n  - id: 3\n  - blocked_by: 2, 1\n  - active_form: Documenting\n"
    );
    let merged = merge(Some(b"# Ralph Tasks\n\n- [ ] Existing task\n"), &imported);
    assert_eq!(merged.added, 3);
    let content = merged.content;
    let list = TaskList::parse(&String::from_utf8_lossy(&content));
    assert_eq!(
        list.tasks[0].text, "Existing task",
        "existing tasks stay first"
    );
    assert_eq!(list.tasks[1].status, tasks::TaskStatus::Complete);
    assert_eq!(list.tasks[2].status, tasks::TaskStatus::InProgress);
    assert_eq!(
        list.blockers(&list.tasks[3]),
        ["2"],
        "#1 is done, #2 is not"
    );
    // Under "todos" too.
    let wrapped = format!("{{\"todos\": {json}}}");
    assert_eq!(convert(&wrapped).unwrap().blocks, imported.blocks);
}

#[test]
fn a_roadmap_imports_its_tasks_as_written() {
    let roadmap = "# Roadmap\n\n## Tasks\n\n### Phase 1\n\n- [ ] **task-001**: Implement user authentication with tests\n  - ralph: true\n  - max_iterations: 30\n  - completion_promise: AUTH_FEATURE_COMPLETE\n  - timeout: 60min\n  - success: All tests pass, coverage > 80%\n  - cli: codex\n\nSome prose.\n\n- [ ] **fix-001**: Fix race condition in user service\n  - ralph: true\n  - cli: claude\n";
    let imported = convert(roadmap).unwrap();
    assert_eq!(imported.format, "markdown");
    assert_eq!(imported.blocks.len(), 2);
    assert!(
        imported.blocks[0].ends_with("  - cli: codex\n"),
        "{}",
        imported.blocks[0]
    );
    let merged = merge(None, &imported);
    assert_eq!(merged.added, 2);
    let content = merged.content;
    let list = TaskList::parse(&String::from_utf8_lossy(&content));
    assert_eq!(list.tasks[0].id(), Some("task-001"));
    assert_eq!(list.tasks[0].agent(), Some("codex"));
    assert_eq!(list.tasks[0].attempt_limit(), Some(30));
    assert_eq!(list.tasks[0].promise(), Some("AUTH_FEATURE_COMPLETE"));
    assert_eq!(list.tasks[1].id(), Some("fix-001"));
}

#[test]
fn what_is_not_a_task_list_is_one_line_saying_where_it_broke() {
    let broken = convert("{\"userStories\": [\n  {\"title\": \"x\",}\n]}").unwrap_err();
    assert!(
        broken.starts_with("it is not valid JSON (line 2, column "),
        "{broken}"
    );
    assert!(broken.contains("expected a prd.json"), "{broken}");
    assert!(
        convert("  \n")
            .unwrap_err()
            .starts_with("it is empty; expected")
    );
    assert!(
        convert("{\"name\": 1}")
            .unwrap_err()
            .starts_with("it is JSON but none of the formats")
    );
    assert!(
        convert("just some notes\n")
            .unwrap_err()
            .starts_with("it has no task in it")
    );
    assert!(
        convert("{\"userStories\": [{\"passes\": true}]}")
            .unwrap_err()
            .contains("has no title")
    );
    // Markdown that starts with a link is markdown; a byte-order mark is no task's business.
    let linked = convert("[![CI](x)](y)\n\n- [ ] First\n").unwrap();
    assert_eq!(linked.blocks, ["- [ ] First\n"]);
    assert_eq!(
        convert("\u{feff}- [ ] First\n").unwrap().blocks,
        ["- [ ] First\n"]
    );
    // Line numbers are the file's own, blank lines before the JSON included.
    assert!(
        convert("\n\n{\"userStories\": [,]}")
            .unwrap_err()
            .contains("(line 3, column ")
    );
    assert_eq!(comment_safe("a --- b -->"), "a - b ->");
    for message in [broken, convert("").unwrap_err()] {
        assert!(!message.contains('\n'), "{message}");
    }
}

#[test]
fn ralph_s_own_export_imports_with_every_property() {
    let export = r#"{"file": "found", "total": 2, "tasks": [
      {"number": 1, "status": "in_progress", "text": "**task-001**: Implement auth", "id": "task-001",
       "blocked_by": [], "waiting_for": [], "subtasks": [{"status": "complete", "text": "routes"}],
       "properties": [{"key": "max_iterations", "value": "30"}, {"key": "cli", "value": "codex"},
                      {"key": "note", "value": "first"}, {"key": "note", "value": "second"}]},
      {"number": 2, "status": "failed", "text": "Docs", "id": "docs", "blocked_by": ["task-001"],
       "waiting_for": ["task-001"], "subtasks": [],
       "properties": [{"key": "id", "value": "docs"}, {"key": "blocked_by", "value": "task-001"},
                      {"key": "ralph", "value": "false"}]}
    ]}"#;
    let imported = convert(export).unwrap();
    assert_eq!(imported.format, "ralph");
    assert_eq!(
        imported.blocks,
        [
            "- [/] **task-001**: Implement auth\n  - max_iterations: 30\n  - cli: codex\n  - note: first\n  - note: second\n  - [x] routes\n",
            "- [!] Docs\n  - id: docs\n  - blocked_by: task-001\n  - ralph: false\n",
        ]
    );
    // An export without `properties` (an older ralph's) keeps its id and blockers.
    let older = r#"{"tasks": [{"status": "todo", "text": "Build", "id": "b", "blocked_by": ["a"]},
      {"status": "todo", "text": "**x-1**: Prefixed", "id": "x-1", "blocked_by": []}]}"#;
    assert_eq!(
        convert(older).unwrap().blocks,
        [
            "- [ ] Build\n  - id: b\n  - blocked_by: a\n",
            "- [ ] **x-1**: Prefixed\n"
        ]
    );
    assert!(
        convert(r#"{"tasks": [{"text": ""}]}"#)
            .unwrap_err()
            .contains("has no \"text\"")
    );
}

#[test]
fn a_taken_id_gets_a_new_one_and_only_exact_duplicates_are_left_out() {
    let mine =
        b"# Ralph Tasks\n\n- [ ] A one\n  - id: 1\n- [ ] A two\n  - id: 2\n  - blocked_by: 1\n";
    let other = convert(
        r##"[{"id": "#1", "content": "B one", "status": "pending"},
            {"id": "#2", "content": "A two", "status": "pending"},
            {"id": "#3", "content": "B three", "status": "pending", "blockedBy": ["#1", "#2", "#9"]},
            {"id": "#1", "content": "B again", "status": "pending"}]"##,
    )
    .unwrap();
    let merged = merge(Some(mine), &other);
    assert_eq!(
        (merged.added, merged.skipped),
        (3, 1),
        "A two is the same task"
    );
    assert_eq!(
        merged.renamed,
        [
            ("1".to_owned(), "1-2".to_owned()),
            ("1".to_owned(), "1-3".to_owned())
        ]
    );
    let content = String::from_utf8(merged.content).unwrap();
    assert!(
        content.ends_with(
            "- [ ] B one\n  - id: 1-2\n- [ ] B three\n  - id: 3\n  - blocked_by: 1-2, 2, 9\n- [ ] B again\n  - id: 1-3\n"
        ),
        "{content}"
    );
    // Imported again: every task is in the list already, under its new id or its own.
    let again = merge(Some(content.as_bytes()), &other);
    assert_eq!((again.added, again.skipped), (0, 4));
    assert!(again.renamed.is_empty());
    // A `**id**:` prefix that is taken: an `id` line wins over it.
    let roadmap =
        convert("- [ ] **1**: Prefixed\n  - id:\n- [ ] Waits\n  - blocked_by: 1\n").unwrap();
    let merged = merge(Some(mine), &roadmap);
    let content = String::from_utf8(merged.content).unwrap();
    assert!(
        content.ends_with("- [ ] **1**: Prefixed\n  - id: 1-2\n- [ ] Waits\n  - blocked_by: 1-2\n"),
        "{content}"
    );
    assert_eq!(TaskList::parse(&content).tasks[2].id(), Some("1-2"));
}
