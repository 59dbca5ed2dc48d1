//! Workers given a spec and a base without tasks: exactly one of them plans. It claims the plan
//! as a task is claimed (a compare-and-swap on `refs/ralph/claims/ralph-plan`), plans in its
//! integration worktree at the fetched base, and pushes the plan's commit to the base together
//! with the claim's deletion (one atomic push): the base only moves forward. The others wait for
//! the plan, or take the claim over when it goes stale.

use crate::error::fail;
use crate::event::Notice;
use crate::git::Pushed;
use crate::storage::RalphDir;

use super::Session;
use super::pick::is_stale;
use super::site::unreachable_remote;
use crate::run::planner::Planner;
use crate::run::wait;

/// The claim that says who plans.
pub(super) const PLAN_CLAIM: &str = "ralph-plan";

impl Session<'_> {
    /// When the fetched base has no task: plans (if this worker wins the plan's claim) or waits
    /// for the worker that does. `true` when the worker should look at the remote again.
    pub(super) fn plan_if_empty(&mut self) -> anyhow::Result<bool> {
        if !self.site.has_no_task() {
            return Ok(false);
        }
        self.settle_removal();
        let claims = self.site.repo.seen_claims(&self.site.remote);
        let held = claims.iter().find(|seen| seen.id == PLAN_CLAIM);
        let (now, ttl) = (crate::model::now(), self.config.options.claim_ttl);
        if let Some(seen) = held.filter(|seen| !is_stale(seen, now, ttl)) {
            if !self.told_plan_waits {
                self.told_plan_waits = true;
                let by = seen
                    .claim
                    .as_ref()
                    .map_or("another worker", |c| c.worker.as_str());
                self.sink.notice(Notice::WaitingForPlan { by });
            }
            wait::pause(self.stop, self.knobs.worker_poll);
            return Ok(true);
        }
        let claim = self.new_claim(PLAN_CLAIM, None, held);
        let expect = held.map_or("", |seen| seen.sha.as_str());
        let pushed = (self.site.repo.push_claim(&self.site.remote, &claim, expect))
            .map_err(|why| unreachable_remote(&self.site.remote, &why))?;
        let Some(sha) = pushed else {
            // Another worker claimed the plan first: look again.
            return Ok(true);
        };
        // A worker that planned since this one's fetch deleted its claim with the plan's push,
        // so the claim was free again: the base is looked at once more before planning.
        let planned = self.site.fetch().map(|()| !self.site.has_no_task());
        if !matches!(planned, Ok(false)) {
            self.drop_claim(PLAN_CLAIM, &sha);
            return planned.map(|_| true);
        }
        if let Err(err) = self.plan_and_push(&sha) {
            self.drop_claim(PLAN_CLAIM, &sha);
            return Err(err);
        }
        Ok(true)
    }

    /// Plans at the fetched base in the integration worktree and pushes the plan to the base,
    /// with the plan's claim (`claim`) deleted, in one atomic push.
    fn plan_and_push(&mut self, claim: &str) -> anyhow::Result<()> {
        let repo = &self.site.repo;
        let base_sha = (repo.resolve(&self.site.base_ref()))
            .ok_or_else(|| fail(format!("{} is gone", self.site.base_name())))?;
        let path = self.dir.integration_worktree();
        let tree = repo.detached_worktree(&path, &base_sha).map_err(fail)?;
        let cwd = path.join(repo.prefix());
        let tree_dir = RalphDir::new(&cwd);
        // A base that never had ralph's folder gets it (with its `.gitignore`) in the plan's commit.
        tree_dir.ensure()?;
        // The worktree seen from where ralph's folder is in it (the plan's paths are relative).
        let here = tree.clone().seen_from(&cwd);
        let planner = Planner {
            config: self.config,
            cwd: &cwd,
            repo: here.as_ref(),
            dir: &tree_dir,
            home: self.dir,
            sink: &self.sink,
            stop: self.stop,
            knobs: self.knobs,
        };
        let calls = planner.plan()?;
        for call in &calls {
            let tokens = call.tokens.map_or(0, |tokens| tokens.billable());
            self.shared.add(call.cost_usd, tokens);
        }
        // The calls are this worker's: its history (and so its report and totals) has them.
        self.shared.edit_history(self.dir, |history| {
            calls.into_iter().for_each(|call| history.add_call(call));
        })?;
        let head = (tree.resolve("HEAD")).ok_or_else(|| fail("the plan's commit is missing"))?;
        match self.push_base(&head, &base_sha, (PLAN_CLAIM, claim, &[]), false)? {
            Pushed::Done => Ok(()),
            Pushed::Moved => Err(fail(format!(
                "{} moved while this worker planned; start the worker again to plan on the new base",
                self.site.base_name()
            ))
            .into()),
        }
    }
}
