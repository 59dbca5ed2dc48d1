//! What a run in this checkout opens before its loops start, in one order for every shape: the
//! repository around it, the sink its events go to, the loop lock (and the saved state it
//! resumes), the checks that can refuse it before a paid call (its shape's, which make its
//! sandbox), and the planning step when there is no task list (with `--refine`, the prompt the
//! user took). A loop of its own (also in a `--worktree`) and a `--parallel` run open this way;
//! a `--worker` reaches its remote before anything and holds its clone's lock its own way
//! (`fleet/remote.rs`).

use std::path::Path;

use crate::config::RunConfig;
use crate::git::Repo;
use crate::signal::StopFlag;
use crate::storage::RalphDir;
use crate::storage::history::AgentCall;
use crate::storage::state::LoopState;

use super::Knobs;
use super::claim::{Start, claim};
use super::planner;
use super::sink::{Place, Scope, Sink};

/// What a run opened: keep `lock` for as long as it runs.
pub(crate) struct Opened<S> {
    pub(crate) repo: Option<Repo>,
    pub(crate) sink: Sink,
    pub(crate) lock: std::fs::File,
    /// The saved state a resumed run goes on from.
    pub(crate) resumed: Option<LoopState>,
    /// What the shape's checks made: its sandbox.
    pub(crate) sandbox: S,
    /// The planning calls made: the run's, they count toward its budgets.
    pub(crate) planning: Vec<AgentCall>,
    /// With `--refine`: the run's settings with the prompt the user took.
    pub(crate) refined: Option<RunConfig>,
}

/// A shape's checks before the planning call, given where the run is, its sink and whether it
/// resumes: they may refuse the run, and make its sandbox.
pub(crate) type Checks<'f, S> = &'f dyn Fn(&Place<'_>, &Sink, bool) -> anyhow::Result<S>;

/// Opens the run of `config` in `cwd` (its files in `dir`), started or resumed as `start` says.
pub(crate) fn open<S>(
    config: &RunConfig,
    (cwd, dir): (&Path, &RalphDir),
    start: Start,
    (stop, knobs): (&StopFlag, &Knobs),
    checks: Checks<'_, S>,
) -> anyhow::Result<Opened<S>> {
    let repo = Repo::discover(cwd);
    let place = Place {
        cwd,
        dir,
        repo: repo.as_ref(),
        home: dir,
    };
    let sink = Sink::for_run(config, &place, None, Scope::Run);
    let (lock, resumed) = claim(dir, start, knobs, &sink)?;
    let sandbox = checks(&place, &sink, resumed.is_some())?;
    let (planning, refined) =
        planner::plan_first(config, &place, &sink, (stop, knobs), resumed.is_some())?;
    Ok(Opened {
        repo,
        sink,
        lock,
        resumed,
        sandbox,
        planning,
        refined,
    })
}
