//! Rough edges a new user meets: task ids in any script, remotes named by URL or without the
//! branch, notification URLs checked at start, and the wording of the end lines and errors.

use crate::support::TestEnv;

#[test]
fn task_ids_keep_the_letters_of_every_script() {
    let env = TestEnv::new();
    for task in ["实现用户认证", "编写文档", "Ünïcödé façade — naïve café"] {
        env.run(&["--add-task", task]).assert_code(0);
    }
    env.git(&["add", "-A"]);
    env.git(&["commit", "-qm", "tasks"]);
    let run = env.run(&["x", "--dry-run", "--parallel", "3"]);
    run.assert_code(0);
    let stdout = run.stdout();
    for id in ["实现用户认证", "编写文档", "ünïcödé-façade-naïve-café"] {
        assert!(
            stdout.contains(&format!("in .ralph/worktrees/{id} on branch ralph/{id}")),
            "{id}: {stdout}"
        );
    }
    let refused = env.run(&["x", "--worktree", ".integrate"]);
    refused.assert_code(1);
    let stderr = refused.stderr();
    assert!(
        stderr.contains("not starting with '-' or '.'")
            && stderr.contains("'.integrate' is not one"),
        "{stderr}"
    );
}
