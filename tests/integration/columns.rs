//! Columns by display width: CJK text and emoji line up and are cut by terminal columns, and a
//! stopped loop names the last iteration that ran.

use std::fs;

use unicode_width::UnicodeWidthStr as _;

use crate::support::TestEnv;

/// The terminal columns before `icon` on `line`.
fn column_of(line: &str, icon: &str) -> usize {
    let at = line
        .find(icon)
        .unwrap_or_else(|| panic!("{icon} in {line:?}"));
    line[..at].width()
}

const TASKS: &str = "# Tasks\n\n\
- [ ] 构建用户登录接口\n  - [x] 设计数据库表\n  - [ ] 写测试 🧪\n\
- [x] Write the README\n\
- [/] 修复 🐛 in the parser\n  - agent: codex\n\
- [ ] 四\n- [ ] five\n- [ ] 六六六\n- [ ] seven ✨\n- [ ] 八\n- [ ] nine\n\
- [ ] 第十个任务：部署到生产环境\n";

#[test]
fn list_tasks_and_status_line_up_cjk_and_emoji_tasks() {
    let env = TestEnv::new();
    fs::create_dir_all(env.work().join(".ralph")).unwrap();
    fs::write(env.ralph_file("ralph-tasks.md"), TASKS).unwrap();
    let listed = env.run(&["--list-tasks"]);
    listed.assert_code(0);
    let status = env.run(&["--status", "--tasks"]);
    status.assert_code(0);
    for (text, indent) in [(listed.stdout(), 0), (status.stdout(), 3)] {
        let tasks: Vec<&str> = text
            .lines()
            .filter(|line| {
                let rest = line.trim_start();
                rest.starts_with(|c: char| c.is_ascii_digit()) && rest.contains(". ")
            })
            .collect();
        assert_eq!(tasks.len(), 10, "{text}");
        // `N.` is padded to the width of `10. `: every icon starts in one column…
        for line in &tasks {
            let icon = ["⏸️", "✅", "🔄"]
                .into_iter()
                .find(|icon| line.contains(icon))
                .unwrap();
            assert_eq!(column_of(line, icon), indent + 4, "{line:?} in\n{text}");
        }
        assert!(text.contains(&format!("{}1.  ⏸️ 构建用户登录接口\n", " ".repeat(indent))));
        assert!(text.contains(&format!(
            "{}10. ⏸️ 第十个任务：部署到生产环境\n",
            " ".repeat(indent)
        )));
        // …and subtasks and settings start under their task's icon.
        for under in ["✅ 设计数据库表", "⏸️ 写测试 🧪", "agent: codex"] {
            let line = text.lines().find(|line| line.contains(under)).unwrap();
            assert_eq!(column_of(line, under), indent + 4, "{line:?} in\n{text}");
        }
    }
}

#[test]
fn status_cuts_a_cjk_prompt_by_columns_and_names_the_last_iteration_at_the_limit() {
    let env = TestEnv::new();
    // 54 characters, 108 columns.
    let prompt = "实现用户认证".repeat(9);
    env.run_loop(&[&prompt, "--max-iterations", "3"])
        .assert_code(2);
    assert_eq!(env.agent_calls(), 3);
    let run = env.run(&["--status"]);
    run.assert_code(0);
    let text = run.stdout();
    let line = text
        .lines()
        .find(|line| line.trim_start().starts_with("Prompt:"))
        .unwrap();
    // 60 columns at most: 29 wide characters (58) and the ellipsis.
    let shown: String = prompt.chars().take(29).collect();
    assert_eq!(line, format!("   Prompt:       {shown}…"), "{text}");
    assert_eq!(line.width(), 3 + 14 + 59);
    assert!(text.contains("   Iteration:    3 / 3\n"), "{text}");
    assert!(
        text.contains("⏸️  STOPPED after iteration 3: max iterations (3) reached"),
        "{text}"
    );
    assert!(
        !text.contains("4 / 3") && !text.contains("iteration 4"),
        "{text}"
    );
    let doctor = env.run(&["--doctor"]).stdout();
    assert!(
        doctor.contains("a loop stopped after iteration 3 (max iterations (3) reached)"),
        "{doctor}"
    );
}

#[test]
fn status_cuts_an_ascii_prompt_at_60_columns() {
    let env = TestEnv::new();
    let prompt = "x".repeat(100);
    env.run_loop(&[&prompt, "--max-iterations", "1"])
        .assert_code(2);
    let text = env.run(&["--status"]).stdout();
    assert!(
        text.contains(&format!("   Prompt:       {}…\n", "x".repeat(59))),
        "{text}"
    );
    assert!(text.contains("   Iteration:    1 / 1\n"), "{text}");
}
