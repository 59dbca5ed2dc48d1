//! `ralph --reset`: the loop's state, history and context removed (never the task file), and an
//! agent a killed ralph left running stopped.

use crate::exit::ExitStatus;
use crate::fleet::clear_task_worktrees;
use crate::output::{self, Voice};
use crate::run::{Knobs, stop_leftover_agent, take_lock};
use crate::storage::state;
use crate::storage::{self, OPENCODE_CONFIG_FILE, RalphDir, progress};

/// Runs `--reset`.
pub(crate) fn reset(dir: &RalphDir, knobs: &Knobs) -> anyhow::Result<ExitStatus> {
    if !dir.root().exists() {
        output::reset_done(&[]);
        return Ok(ExitStatus::Success);
    }
    let _lock = take_lock(dir, knobs)?;
    if let Some(group) = state::load(&dir.state()).ok().and_then(|s| s.agent_group) {
        stop_leftover_agent(group, knobs.leftover_grace, || {
            output::leftover_agent_stopped(&Voice::plain(), group);
        });
    }
    let mut removed = Vec::new();
    for path in [
        dir.state(),
        dir.history(),
        storage::history::summary::path_for(&dir.history()),
        dir.context(),
        dir.file(storage::context::GIVEN_FILE),
        dir.file(OPENCODE_CONFIG_FILE),
        dir.file(progress::PROGRESS_FILE),
    ] {
        if storage::remove_file(&path)? {
            removed.push(path);
        }
    }
    // No loop works on a task any more: none is in progress.
    storage::tasks::edit(dir, |current| {
        (current.and_then(storage::tasks::with_none_in_progress), ())
    })?;
    output::reset_done(&removed);
    // ralph's task worktrees and the branches whose work is merged go too.
    if let Some(repo) = dir.root().parent().and_then(crate::git::Repo::discover) {
        let swept = clear_task_worktrees(&repo, dir);
        output::swept(&Voice::plain(), &swept.removed, &swept.kept);
    }
    Ok(ExitStatus::Success)
}
