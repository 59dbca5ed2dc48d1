//! What the commands that steer a run do, saying nothing: shared by `--add-context` and
//! `--add-task` (which then print), `--serve` and `--mcp` (which answer with it).

use crate::error::fail;
use crate::storage::tasks::{self, TaskList};
use crate::storage::{self, RalphDir, context, state};

/// What `--add-context` does, saying nothing (for `--serve` and `--mcp`).
pub(crate) fn add_context_to(dir: &RalphDir, text: &str, task: Option<&str>) -> anyhow::Result<()> {
    let task = task
        .map(|id| super::known_task(dir, id.trim()))
        .transpose()?;
    dir.ensure()?;
    context::append(dir, text.trim_end(), task, crate::model::now())
}

/// Stops the loop running in `dir` as Ctrl+C does (SIGINT to the process its state names, when
/// its loop lock is held): that pid, or why nothing was stopped.
pub(crate) fn stop_running(dir: &RalphDir) -> Result<u32, String> {
    let saved = match state::load(&dir.state()) {
        storage::Loaded::Found(saved) if saved.active => saved,
        _ => return Err("no loop is running here".to_owned()),
    };
    let Some(pid) = saved.pid.filter(|pid| *pid > 1) else {
        return Err("the running loop's state names no process".to_owned());
    };
    if !storage::lock::loop_is_running(dir) {
        return Err("no loop is running here (its state is left from one that stopped)".to_owned());
    }
    let target = i32::try_from(pid).map_err(|_| format!("pid {pid} is not a process id"))?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(target),
        nix::sys::signal::Signal::SIGINT,
    )
    .map_err(|err| format!("the loop (pid {pid}) could not be told to stop: {err}"))?;
    Ok(pid)
}

/// What `--add-task` does, saying nothing: the new task's number and the blockers that are not
/// in the list (yet). For `POST /api/v1/tasks`.
pub(crate) fn add_task_to(
    dir: &RalphDir,
    description: &str,
    place: (Option<&str>, Option<&str>),
) -> anyhow::Result<(usize, Vec<String>)> {
    add_task_with(dir, description, place, &[])
}

/// An id is taken as it is written: one ralph would know by another name (`bad id!`, known as
/// `bad-id`) is refused, as `--id` or in `--blocked-by`.
fn refuse_other_names(id: Option<&str>, blocked_by: Option<&str>) -> anyhow::Result<()> {
    let blockers = (blocked_by.iter()).flat_map(|ids| ids.split(',').map(str::trim));
    let given = (id.iter().map(|id| ("--id", *id))).chain(blockers.map(|id| ("--blocked-by", id)));
    for (flag, given) in given {
        if !given.is_empty() && !tasks::is_ref_safe(given) {
            return Err(fail(format!(
                "{flag}: '{given}' is not a task id; an id is {} (e.g. '{}')",
                tasks::ID_RULE,
                tasks::id_from(given)
            ))
            .into());
        }
    }
    Ok(())
}

pub(crate) fn add_task_with(
    dir: &RalphDir,
    description: &str,
    (id, blocked_by): (Option<&str>, Option<&str>),
    own: &[(&'static str, String)],
) -> anyhow::Result<(usize, Vec<String>)> {
    let description = match tasks::validate_description(description) {
        Ok(description) => description,
        Err(err) => return Err(fail(err.to_string()).into()),
    };
    let id = id.map(str::trim);
    refuse_other_names(id, blocked_by)?;
    let blockers: Vec<&str> = blocked_by
        .map(|ids| {
            ids.split(',')
                .map(str::trim)
                .filter(|id| !id.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if blocked_by.is_some() && blockers.is_empty() {
        return Err(fail(
            "--blocked-by needs task ids separated by commas, e.g. --blocked-by db,api",
        )
        .into());
    }
    let joined = blockers.join(", ");
    let mut properties = Vec::new();
    for (key, value) in [
        (tasks::ID, id),
        (tasks::BLOCKED_BY, blocked_by.map(|_| joined.as_str())),
    ] {
        if let Some(value) = value {
            if let Err(err) = tasks::validate_description(value) {
                return Err(fail(format!("--{}: {err}", key.replace('_', "-"))).into());
            }
            properties.push((key, value.trim()));
        }
    }
    for (key, value) in own {
        if let Err(err) = tasks::validate_description(value) {
            return Err(fail(format!("the task's {key}: {err}")).into());
        }
        properties.push((key, value.trim()));
    }
    if let Some(id) = id
        && blockers.contains(&id)
    {
        return Err(fail(format!(
            "task '{id}' cannot be blocked by itself; remove '{id}' from --blocked-by"
        ))
        .into());
    }
    dir.ensure()?;
    let outcome = tasks::edit(dir, |current| {
        let list = TaskList::parse(&String::from_utf8_lossy(current.unwrap_or_default()));
        if let Some(id) = id
            && let Some(existing) = list.by_id(id)
        {
            let refusal = format!(
                "a task with id '{id}' already exists (task {}: \"{}\"); choose another --id",
                existing.number, existing.text
            );
            return (None, Err(refusal));
        }
        let unknown: Vec<String> = blockers
            .iter()
            .filter(|blocker| list.by_id(blocker).is_none())
            .map(|blocker| (*blocker).to_owned())
            .collect();
        let updated = tasks::add_task(current, description, &properties);
        (Some(updated), Ok((list.tasks.len() + 1, unknown)))
    })?;
    outcome.map_err(|refusal| fail(refusal).into())
}
