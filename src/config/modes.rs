//! Which run a command line asks for, once its prompt and settings are known: a `--worker`, a
//! `--plan`, `--serve` alone, or a loop (shown, in its own worktree, or here).

use super::{LoopOptions, Mode, RunConfig};
use crate::error::{Error, usage};

/// `--worker` (or, with `--dry-run`, what it would do): checked against the options it cannot
/// go with.
pub(super) fn worker_mode(
    mut run: Box<RunConfig>,
    (remote, base): (Option<String>, Option<String>),
    (worktree, dry_run): (bool, bool),
) -> Result<Mode, Error> {
    if worktree || run.options.parallel.max > 0 {
        return Err(usage(
            "--worker runs one task at a time in its own worktree; drop --worktree and --parallel (start more workers instead)",
        ));
    }
    if !run.options.commit {
        return Err(usage(
            "--worker merges each task's commits into the base, so it needs auto-commit: drop --no-commit",
        ));
    }
    if run.options.claim_ttl <= run.options.claim_heartbeat {
        return Err(usage(
            "--claim-ttl must be longer than --claim-heartbeat, or other workers would take over tasks that are still worked on",
        ));
    }
    run.options.tasks = true;
    let remote = remote.unwrap_or_else(|| "origin".to_owned());
    Ok(if dry_run {
        Mode::WorkerDryRun {
            config: run,
            remote,
            base,
        }
    } else {
        Mode::Worker {
            config: run,
            remote,
            base,
        }
    })
}

/// `--serve [ADDR]` alone: the address and whether it may be beyond loopback, from the settings.
pub(super) fn serve_mode(
    stack: &[&crate::options::Layer],
    remote: Option<String>,
) -> Result<Mode, Error> {
    let options = LoopOptions::resolve(stack).map_err(usage)?;
    let addr = options.serve.unwrap_or_else(|| {
        crate::options::parse::Addr(crate::options::parse::DEFAULT_ADDR.to_owned())
    });
    Ok(Mode::Serve {
        addr,
        allow_remote: options.serve_allow_remote,
        remote,
    })
}

/// `--plan`: the prompt planned into the task list, nothing run (refused with `--dry-run` and
/// `--worker`, which have runs of their own to show or share).
pub(super) fn plan_mode(run: Box<RunConfig>, with_another: bool) -> Result<Mode, Error> {
    if with_another {
        return Err(usage(
            "--plan writes a plan and exits; it does not go with --dry-run or --worker (plan first, then start the workers)",
        ));
    }
    Ok(Mode::Plan(run))
}

/// How the loop runs: shown (`--dry-run`), in its own worktree (`--worktree NAME`), or here.
pub(super) fn loop_mode(
    run: Box<RunConfig>,
    dry_run: bool,
    worktree: Option<String>,
    merge: bool,
) -> Result<Mode, Error> {
    Ok(match worktree {
        _ if dry_run => Mode::DryRun(run),
        Some(name) => {
            worktree_name(&name)?;
            if run.options.parallel.max > 0 {
                return Err(usage(
                    "--worktree runs one loop; --parallel gives every task its own worktree already",
                ));
            }
            if merge && !run.options.commit {
                return Err(usage(
                    "--merge merges the loop's commits, so it needs auto-commit: drop --no-commit",
                ));
            }
            Mode::RunInWorktree {
                config: run,
                name,
                merge,
            }
        }
        None => Mode::of_loop(run),
    })
}

impl Mode {
    /// Whether this runs loops (a loop, a `--parallel` run, a `--worktree` loop, a `--worker`,
    /// `--resume`), rather than a command.
    pub(crate) fn is_loop(&self) -> bool {
        matches!(
            self,
            Self::Run(_)
                | Self::Parallel(_)
                | Self::Resume
                | Self::ResumeInWorktree { .. }
                | Self::RunInWorktree { .. }
                | Self::Worker { .. }
        )
    }

    /// A loop here, as its settings (given now, or saved by the run `--resume` goes on with)
    /// shape it: a loop of its own, or a `--parallel` run of the task list.
    pub(crate) fn of_loop(run: Box<RunConfig>) -> Self {
        if run.options.parallel.max > 0 {
            Self::Parallel(run)
        } else {
            Self::Run(run)
        }
    }
}

/// `--resume`: the saved loop goes on, here or in the worktree `--worktree` names (refused
/// with a new prompt).
pub(super) fn resume_mode(
    new_prompt: bool,
    worktree: Option<String>,
    merge: bool,
) -> Result<Mode, Error> {
    if new_prompt {
        return Err(usage(
            "--resume continues the saved prompt; do not give a new one",
        ));
    }
    Ok(match worktree {
        Some(name) => {
            worktree_name(&name)?;
            Mode::ResumeInWorktree { name, merge }
        }
        None => Mode::Resume,
    })
}

/// Refuses a `--worktree` name that is not ref-safe.
fn worktree_name(name: &str) -> Result<(), Error> {
    if crate::storage::tasks::is_ref_safe(name) {
        return Ok(());
    }
    Err(usage(format!(
        "--worktree needs a name of {}; '{name}' is not one",
        crate::storage::tasks::ID_RULE
    )))
}
