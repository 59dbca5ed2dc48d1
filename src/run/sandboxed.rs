//! A loop's sandbox (`--sandbox`, see `src/sandbox/`): made, and its agents checked to start in
//! it, before the loop's first agent runs.

use std::path::Path;

use crate::config::RunConfig;
use crate::error::fail;
use crate::git::Repo;
use crate::storage::RalphDir;

use super::plan;

/// The loop's sandbox (`--sandbox`), its agents checked to start inside it: a backend, a mount
/// or an agent that cannot work is one line, exit 1, before any iteration.
pub(crate) fn sandbox_for<'s>(
    config: &RunConfig,
    (cwd, agent): (&Path, bool),
    repo: Option<&Repo>,
    home: &RalphDir,
    steps: impl IntoIterator<Item = &'s plan::Step>,
) -> anyhow::Result<Option<crate::sandbox::Sandbox>> {
    let settings = config.options.sandbox();
    // Without a sandbox nothing is asked of git (a loop's start costs no process more).
    if crate::sandbox::chosen(&settings)?.is_none() {
        return Ok(None);
    }
    let place = crate::sandbox::Place {
        work: repo.map_or(cwd, Repo::root),
        git_dir: repo.map(Repo::git_common_dir),
        hooks_path: repo.and_then(Repo::hooks_path),
        home: home.root(),
        ralph: cwd.join(crate::storage::RALPH_DIR),
        agent,
    };
    let Some(sandbox) = crate::sandbox::Sandbox::for_loop(&settings, &place)? else {
        return Ok(None);
    };
    if let Some(warning) = sandbox.limits_warning() {
        crate::output::warn(&[warning]);
    }
    for step in steps {
        sandbox
            .preflight(&step.spec, &step.binary)
            .map_err(|why| fail(format!("--sandbox: {why}")))?;
    }
    Ok(Some(sandbox))
}

/// Before a run of several loops (`--parallel`, `--worker`): a sandbox that cannot work is one
/// line, exit 1, before any task starts. The run's sandbox (whose hooks its own commits run), or
/// `Err(true)` when there is none while the agents have every permission (worth a warning once
/// the work begins).
pub(crate) fn check_fleet_sandbox(
    config: &RunConfig,
    cwd: &Path,
    repo: Option<&Repo>,
    dir: &RalphDir,
) -> anyhow::Result<Result<crate::sandbox::Sandbox, bool>> {
    if crate::sandbox::chosen(&config.options.sandbox())?.is_none() {
        return Ok(Err(config.options.allow_all));
    }
    let steps = plan::steps(config, cwd).map_err(fail)?;
    let sandbox = sandbox_for(config, (cwd, true), repo, dir, steps.all())?;
    Ok(sandbox.ok_or(false))
}

/// `repo`, its git commands running the repository's hooks inside `sandbox` (when there is one).
pub(crate) fn with_hooks(
    repo: Option<Repo>,
    sandbox: Option<&crate::sandbox::Sandbox>,
) -> Option<Repo> {
    let repo = repo?;
    let hooks = sandbox.and_then(|sandbox| sandbox.hooks_for(&repo));
    Some(repo.with_hooks(hooks))
}

/// The integration worktree `tree` of a merge, its git commands running the repository's hooks
/// inside a sandbox of its own (when the run has one), and that sandbox, to keep while it merges.
pub(crate) fn merging_in(
    config: &RunConfig,
    tree: Repo,
    home: &RalphDir,
) -> anyhow::Result<(Repo, Option<crate::sandbox::Sandbox>)> {
    let sandbox = sandbox_for(config, (tree.root(), false), Some(&tree), home, [])?;
    let hooks = sandbox
        .as_ref()
        .and_then(|sandbox| sandbox.hooks_for(&tree));
    Ok((tree.with_hooks(hooks), sandbox))
}
