//! How workers merge into the remote: by git's plumbing (no checkout) in a repository without
//! hooks, through the integration worktree in one whose hooks a merge commit runs; a conflict
//! between two workers' tasks goes back to the later agent either way.

use std::fs;

use crate::fleet::{finish, machine, machines, remote, start_worker};
use crate::support::TestEnv;
use crate::workers::{assert_base_never_rewritten, remote_claims, remote_tasks};

/// The agents' script: each waits until both started (so both branch from the same base), then
/// writes its task's name on the one line of `shared.txt`; an agent that finds the conflict
/// there writes both names.
const SAME_LINE: &str = r#"i=0; while [ "$(grep -c start "$dir/events")" -lt 2 ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
if grep -q '^<<<<<<<' shared.txt; then echo "Left and Right" > shared.txt; else echo "$task" > shared.txt; fi
"#;

/// Two machines whose base holds `shared.txt`, the tasks Left and Right, and [`SAME_LINE`];
/// with `hooks`, each clone has a `commit-msg` hook that logs each commit's subject.
fn two_editing_one_line(hooks: bool) -> TestEnv {
    let env = machines(
        "- [ ] Left\n  - id: l\n- [ ] Right\n  - id: r\n",
        &["m0", "m1", "m2"],
    );
    // The seed clone `m0` adds the shared file to the base.
    let m0 = machine(&env, "m0").to_string_lossy().into_owned();
    fs::write(machine(&env, "m0").join("shared.txt"), "base\n").unwrap();
    env.git(&["-C", &m0, "add", "shared.txt"]);
    env.git(&["-C", &m0, "commit", "-q", "-m", "shared file"]);
    env.git(&["-C", &m0, "push", "-q", "origin", "main"]);
    for name in ["m1", "m2"] {
        let path = machine(&env, name);
        let shown = path.to_string_lossy().into_owned();
        env.git(&["-C", &shown, "pull", "-q", "origin", "main"]);
        if hooks {
            let hook = path.join(".git/hooks/commit-msg");
            let log = env.agent_dir().join("hooked");
            let script = format!("#!/bin/sh\nhead -n 1 \"$1\" >> '{}'\n", log.display());
            fs::write(&hook, script).unwrap();
            let runnable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
            fs::set_permissions(&hook, runnable).unwrap();
        }
    }
    fs::write(env.agent_dir().join("script"), SAME_LINE).unwrap();
    env
}

/// Runs a worker on m1 (with `m1_args` too) and one on m2 on [`two_editing_one_line`]: both
/// tasks land, the later one's agent having resolved the conflict. Both workers' outputs.
fn conflict_resolved(env: &TestEnv, m1_args: &[&str]) -> String {
    let mut m1 = vec!["--max-iterations", "3"];
    m1.extend_from_slice(m1_args);
    let workers = [
        start_worker(env, "m1", &m1),
        start_worker(env, "m2", &["--max-iterations", "3"]),
    ];
    let mut all = String::new();
    for worker in workers {
        let (code, stdout, stderr) = finish(worker);
        all.push_str(&format!("{stdout}\n{stderr}\n"));
        assert_eq!(code, Some(0), "{all}");
    }
    assert!(all.contains("Merge conflict in shared.txt"), "{all}");
    let bare = remote(env);
    let shared = env.git(&["-C", &bare, "show", "main:shared.txt"]);
    assert_eq!(shared.trim(), "Left and Right", "{all}");
    for file in ["Left.txt", "Right.txt"] {
        env.git(&["-C", &bare, "cat-file", "-e", &format!("main:{file}")]);
    }
    let list = remote_tasks(env);
    assert_eq!(list.matches("- [x]").count(), 2, "{list}\n{all}");
    assert_eq!(remote_claims(env), "", "no claim is left");
    // Each task's own merge commit has the base and the task's branch as parents.
    let log = env.git(&["-C", &bare, "log", "--format=%p %s", "main"]);
    let merges: Vec<&str> = (log.lines())
        .filter(|line| line.contains(" Ralph: merge task "))
        .collect();
    assert_eq!(merges.len(), 2, "{log}");
    let hex = |word: &str| word.len() >= 7 && word.bytes().all(|b| b.is_ascii_hexdigit());
    assert!(
        (merges.iter()).all(|line| line.split(' ').take(2).all(hex)),
        "{log}"
    );
    assert_base_never_rewritten(env);
    all
}

#[test]
fn two_workers_conflicting_on_one_line_land_both_the_later_agent_resolving_it() {
    let env = two_editing_one_line(false);
    // Where a merge's checkout would go is taken by a file: merges by plumbing need none.
    for name in ["m1", "m2"] {
        let worktrees = machine(&env, name).join(".ralph/worktrees");
        fs::create_dir_all(&worktrees).unwrap();
        fs::write(worktrees.join(".integrate"), "not a checkout\n").unwrap();
    }
    conflict_resolved(&env, &[]);
    for name in ["m1", "m2"] {
        let blocker = machine(&env, name).join(".ralph/worktrees/.integrate");
        assert_eq!(fs::read_to_string(blocker).unwrap(), "not a checkout\n");
    }
}

/// m1's worker runs sandboxed where bwrap can: its merge commits' hooks run in the sandbox,
/// which lets them write only the fake agent's folder.
#[test]
fn a_repository_with_hooks_merges_in_a_checkout_where_they_run_on_each_merge_commit() {
    let env = two_editing_one_line(true);
    let sandbox = crate::support::sandboxed_agents(&env);
    let mut sandboxed = Vec::new();
    if crate::support::bwrap_can_sandbox() {
        sandboxed.extend(sandbox.iter().map(String::as_str));
    }
    let all = conflict_resolved(&env, &sandboxed);
    let hooked = fs::read_to_string(env.agent_dir().join("hooked")).unwrap_or_default();
    let merges = (hooked.lines())
        .filter(|line| line.starts_with("Ralph: merge task "))
        .count();
    assert!(merges >= 2, "{hooked}\n{all}");
}
