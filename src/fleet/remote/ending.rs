//! How a worker's run ends: its exit status and why, told when it stops.

use crate::exit::ExitStatus;
use crate::output::format;
use crate::run::decision::Stop;
use crate::storage::tasks::TaskStatus;

use super::{Session, budget};

impl Session<'_> {
    /// Ends the worker's run (`ended`: how [`Session::run`] ended): its state and integration
    /// worktree go, its context is settled when every task is done, and `worker_ended` says why.
    pub(super) fn end(&self, ended: anyhow::Result<Option<Stop>>) -> anyhow::Result<ExitStatus> {
        // The worker is not resumed (it is started again), so its state goes with it, and so
        // does the worktree its merges were made in.
        self.settle_removal();
        super::super::pool::clear(&self.site.repo, self.dir);
        crate::storage::remove_file(&self.dir.state())?;
        let (status, reason) = self.outcome(ended?.as_ref());
        if status == ExitStatus::Success {
            // Every task is done: the hints that reached a prompt are used up.
            crate::storage::context::settle(self.dir)?;
        }
        self.sink.emit(crate::event::LoopEvent::WorkerEnded {
            reason,
            exit_code: status.code(),
        });
        Ok(status)
    }

    /// The exit status and why: 0 when every task is done, 3 when some failed or are left.
    pub(super) fn outcome(&self, ended: Option<&Stop>) -> (ExitStatus, String) {
        if let Some(stop) = ended {
            let reason = match stop {
                Stop::Interrupted => match &self.stopped_in {
                    Some(id) => format!("interrupted in task {id}; its claim is released and what was committed is pushed, so any worker (this one again: ralph --worker) goes on with it"),
                    None => "interrupted between tasks; this worker holds no claim and every task it finished is merged (ralph --worker starts it again)".to_owned(),
                },
                stop @ (Stop::MaxCost(_) | Stop::MaxTokens(_) | Stop::MaxRuntime(_))
                    if self.config.options.fleet_budget =>
                {
                    let (repo, remote) = (&self.site.repo, &self.site.remote);
                    let spent = budget::spent_by(repo, remote, self.config.options.claim_ttl);
                    format!("{} for the fleet{spent}", stop.reason(0))
                }
                stop => stop.reason(0),
            };
            return (stop.status(), reason);
        }
        let list = self.site.list().unwrap_or_default();
        let open = list
            .tasks
            .iter()
            .filter(|task| task.status != TaskStatus::Complete)
            .count();
        if open == 0 {
            return (
                ExitStatus::Success,
                format!("every task on {} is done", self.site.base_name()),
            );
        }
        if !self.held_elsewhere.is_empty() && self.failed == 0 {
            return (
                ExitStatus::Success,
                format!(
                    "no task is left that this worker can take: other workers hold {} (and take the tasks that wait for them); start it with --wait to wait for them instead",
                    self.held_elsewhere.join(", ")
                ),
            );
        }
        (
            ExitStatus::Stopped,
            format!(
                "{} not done on {} ({} failed here); none is left that this worker could take",
                format::plural(open as u64, "task"),
                self.site.base_name(),
                self.failed
            ),
        )
    }
}
