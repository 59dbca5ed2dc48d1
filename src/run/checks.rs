//! The checks a claim of completion is judged by, run when the claim needs them: the task list
//! (open tasks), the run's `--verify` and a task's own `verify`, the `--holdout` checks (quietly,
//! after the visible ones passed), and the conflict markers a task loop must leave none of. Their
//! results become the iteration's facts; `decision.rs` judges them.

use crate::event::LoopEvent;
use crate::git::Repo;
use crate::model::Verification;
use crate::storage::tasks::TaskList;

use super::Runner;
use super::decision::{self, Facts};
use super::plan::Focus;

/// Runs what the agent's claims in `facts` need, and records the results there.
pub(super) fn judge(runner: &Runner<'_>, facts: &mut Facts, focus: Option<&Focus>) {
    let env = &runner.env;
    if facts.completion && env.rules.tasks {
        match open_tasks(env.dir) {
            Ok(open) => facts.open_tasks = open,
            Err(why) => facts.tasks_unreadable = Some(why),
        }
    }
    let mut verify = env.config.options.verify.clone();
    if env.rules.task_loop {
        // A task loop's task is done only when its own verify passes too.
        verify.extend(focus.and_then(|task| task.verify.clone()));
    }
    let acceptable = decision::claim(&env.rules, facts) == decision::Claim::Acceptable;
    if acceptable && !verify.is_empty() {
        let mut results = verify_all(runner, &verify);
        super::protected::seal(runner, &mut results);
        facts.verification = Some(results);
    }
    let verified = (facts.verification.iter().flatten()).all(|result| result.passed);
    let holdout = &env.config.options.holdout;
    if acceptable && verified && !holdout.is_empty() {
        let mut results = holdout_all(runner, holdout);
        super::protected::seal(runner, &mut results);
        facts.holdout = Some(results);
    }
    if acceptable && let Some(task) = env.shape.task_loop() {
        // A merge conflict counts as resolved only when no conflict marker is left.
        let root = env.repo.as_ref().map_or(env.cwd, Repo::root);
        let left = crate::verify::conflict_markers(root, &task.conflicts);
        if !left.is_empty() {
            facts.verification.get_or_insert_with(Vec::new).extend(left);
        }
    } else if facts.task_done && !facts.completion && !env.rules.task_loop {
        let command = focus.and_then(|task| task.verify.clone());
        facts.task_verification = command.map(|command| verify_all(runner, &[command]));
    }
}

/// The top-level tasks not `[x]` once the agent is done (`Err`: the file cannot be read).
fn open_tasks(dir: &crate::storage::RalphDir) -> Result<Vec<String>, String> {
    let content = crate::storage::read_text(&dir.tasks())
        .map_err(|err| err.to_string())?
        .unwrap_or_default();
    let list = TaskList::parse(&content);
    if list.all_complete() {
        return Ok(Vec::new());
    }
    Ok(list
        .open()
        .map(|task| format!("{}. {}", task.number, task.text))
        .collect())
}

/// Runs verification commands from the repository's top directory, in the loop's sandbox, each
/// result a `verified` event.
fn verify_all(runner: &Runner<'_>, commands: &[String]) -> Vec<Verification> {
    let env = &runner.env;
    run_checks(runner, commands, env.sandbox.as_ref(), &|result| {
        env.sink.emit(LoopEvent::Verified(result.clone()));
    })
}

/// Runs the `--holdout` checks as verification commands, but quietly: no `verified` event (the
/// journal is readable by an agent), their results kept for the history.
fn holdout_all(runner: &Runner<'_>, commands: &[String]) -> Vec<Verification> {
    let env = &runner.env;
    // They run the agent's code: in a sandbox of checks when the loop has one (the agent's hides
    // their files from it); one that cannot be made fails them, as it fails a gate's.
    let sandbox = match &env.sandbox {
        Some(_) => match super::sandboxed::sandbox_for(
            env.config,
            (env.cwd, false),
            env.repo.as_ref(),
            env.dir,
            [],
        ) {
            Ok(sandbox) => sandbox,
            Err(err) => {
                return (commands.iter())
                    .map(|command| Verification {
                        command: command.clone(),
                        output_tail: format!("{err:#}"),
                        ..Verification::default()
                    })
                    .collect();
            }
        },
        None => None,
    };
    run_checks(runner, commands, sandbox.as_ref(), &|_| {})
}

/// Runs `commands` from the repository's top directory in `sandbox`, `told` of each result.
fn run_checks(
    runner: &Runner<'_>,
    commands: &[String],
    sandbox: Option<&crate::sandbox::Sandbox>,
    told: &dyn Fn(&Verification),
) -> Vec<Verification> {
    let env = &runner.env;
    let dir = env.repo.as_ref().map_or(env.cwd, Repo::root);
    let tree = env.repo.as_ref().and_then(Repo::work_tree_hash);
    crate::verify::run_all(
        commands,
        (dir, tree.as_deref(), sandbox),
        (
            env.config.options.verify_timeout,
            env.config.options.kill_grace,
        ),
        env.stop,
        env.sink.voice(),
        told,
    )
}
