//! `--worker`: one task at a time from the task list on a git remote's base branch, shared by
//! any number of workers on any machines, with no server but the remote.
//!
//! A worker fetches, picks the first ready task nobody holds, and claims it by creating
//! `refs/ralph/claims/<id>` on the remote with a compare-and-swap push; a lost race means another
//! worker has it. It runs the task's loop in `.ralph/worktrees/<id>` on branch `ralph/<id>`
//! (pushed after every commit), refreshing the claim every `--claim-heartbeat`. When the task is
//! done it merges the branch into a fresh copy of the base (task marked `[x]` in the merge commit)
//! and pushes the base and the claim's deletion together, all or nothing, each with a lease: if
//! another worker merged first it merges again; if its claim was taken over it pushes nothing.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::config::RunConfig;
use crate::error::fail;
use crate::event::{LoopEvent, Notice};
use crate::exit::ExitStatus;
use crate::git::{Claim, Repo, SeenClaim};
use crate::signal::StopFlag;
use crate::storage::identity::fingerprint;
use crate::storage::tasks::Task;
use crate::storage::{self, RalphDir, progress, state};

use super::base;
use super::base::Outcome;
use super::parallel::MERGE_TRIES;
use crate::run::decision::Stop;
use crate::run::sink::{Place, Scope, Sink};
use crate::run::{Knobs, Shared, TaskLoop, plan, planner, preflight, sandboxed, start, wait};
use pick::{Pick, is_stale, pick_spread};

/// This machine's name, as claims record it.
fn hostname() -> String {
    nix::unistd::gethostname().ok().map_or_else(
        || "unknown".to_owned(),
        |h| h.to_string_lossy().into_owned(),
    )
}

/// Merges tried before a base that keeps moving is given up on.
const PUSH_TRIES: u32 = 20;

/// How one task ended for this worker.
enum TaskEnd {
    Merged,
    Failed,
    /// Its claim was taken over, or the task left the list: someone else's now.
    LetGo,
    /// A budget or a stop request: the worker stops.
    Ended(Stop),
}

/// One worker's run, to its end.
struct Session<'a> {
    site: Site,
    config: &'a RunConfig,
    dir: &'a RalphDir,
    stop: &'a StopFlag,
    knobs: &'a Knobs,
    shared: Arc<Shared>,
    /// Where the worker's own events go (each task's loop has its own sink).
    sink: Sink,
    /// `host-pid`, as claims name their worker.
    me: String,
    host: String,
    /// The engine job the worker runs in, recorded in its claims.
    job: Option<crate::git::Job>,
    skip: BTreeSet<String>,
    /// The tasks other workers held when this one found nothing left to take (it ends then,
    /// unless `--wait`).
    held_elsewhere: Vec<String>,
    failed: usize,
    /// Claim races lost in a row: the next pick spreads over the free tasks.
    lost_races: usize,
    /// The other workers whose live claims this one saw while it waited for a merge train:
    /// they look for their next tasks when it does, so its next pick is its place among them.
    peers: Vec<String>,
    /// The tasks whose claim races this worker lost since its last fetch: held by others, so
    /// the next pick is made without fetching again.
    just_lost: BTreeSet<String>,
    /// The base and the claims were fetched a moment ago (a merge train was waited for): the
    /// next pick is made without fetching again.
    fresh: bool,
    /// The worker said it waits for another worker's plan.
    told_plan_waits: bool,
    /// The worker said it waits for room on the machine (`--agent-memory`).
    told_room: bool,
    /// The agents run with every permission and no sandbox: said when the first task starts.
    warn_unsandboxed: bool,
    /// The task whose loop a stop request ended (its claim released), if one did: a stop
    /// between tasks leaves none.
    stopped_in: Option<String>,
    /// The removal of the last task's worktree, while it runs on a thread of its own.
    removing: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Runs `ralph --worker`.
pub(crate) fn worker(
    config: &RunConfig,
    cwd: &Path,
    dir: &RalphDir,
    (remote, base): (&str, Option<&str>),
    stop: &StopFlag,
    knobs: &Knobs,
) -> anyhow::Result<ExitStatus> {
    let site = Site::connect(cwd, remote, base)?;
    preflight::refuse_operation_underway(&site.repo, preflight::OwnMerge::Refused)?;
    // An agent that is not there is refused before the planning call a spec may need.
    plan::steps(config, cwd).map_err(fail)?;
    planner::check_planner(config, cwd, dir)?;
    dir.ensure()?;
    // One worker per clone: its worktrees and branches are its own.
    let _lock = storage::lock::loop_lock(dir, knobs.lock_wait)?.ok_or_else(|| {
        fail("another ralph runs in this clone; start each worker in its own clone (git clone URL)")
    })?;
    dir.ignore_own_dirs()?;
    let host = hostname();
    let me = format!("{host}-{}", std::process::id());
    let job = job::detect(&|name| std::env::var(name).ok(), &host);
    let place = Place {
        cwd,
        dir,
        repo: Some(&site.repo),
        home: dir,
    };
    let sink = Sink::for_run(config, &place, None, Scope::Run);
    let unsandboxed = matches!(
        sandboxed::check_fleet_sandbox(config, cwd, Some(&site.repo), dir)?,
        Err(true)
    );
    // The worker's own state in its clone, so `--status` there shows it while it runs.
    let mut state = start::new_state(config, None);
    state.worker = Some(format!("{me} on {}/{}", site.remote, site.base));
    state::save(&dir.state(), &state)?;
    sink.emit(LoopEvent::WorkerStarted {
        worker: me.clone(),
        remote: site.remote.clone(),
        base: site.base.clone(),
        job: job.as_ref().map(|job| job.label.clone()),
    });
    let mut session = Session {
        shared: Arc::new(budget::shared(config, (&site.repo, &site.remote), &me)),
        sink,
        site,
        config,
        dir,
        stop,
        knobs,
        job,
        me,
        host,
        skip: BTreeSet::new(),
        held_elsewhere: Vec::new(),
        failed: 0,
        lost_races: 0,
        peers: Vec::new(),
        just_lost: BTreeSet::new(),
        fresh: false,
        told_plan_waits: false,
        told_room: false,
        warn_unsandboxed: unsandboxed,
        stopped_in: None,
        removing: std::sync::Mutex::new(None),
    };
    let ended = session.run();
    session.end(ended)
}

impl Session<'_> {
    /// Tasks until none is left for this worker; `Some(stop)` when a budget or the user ended it.
    fn run(&mut self) -> anyhow::Result<Option<Stop>> {
        let mut told_waiting = false;
        let mut swept = false;
        loop {
            if self.stop.is_stopping() {
                return Ok(Some(Stop::Interrupted));
            }
            // Right after a lost race the last fetch is fresh but for the claim that was lost.
            let mut read_there = None;
            if self.just_lost.is_empty() && !std::mem::take(&mut self.fresh) {
                read_there = (!swept).then(|| self.site.claims_unfetched()).flatten();
                if read_there.is_none() {
                    self.site.fetch()?;
                }
            }
            if self.config.prompt != crate::config::WORKER_PROMPT && self.plan_if_empty()? {
                continue;
            }
            let list = self.site.list()?;
            let claims =
                read_there.unwrap_or_else(|| self.site.repo.seen_claims(&self.site.remote));
            if !swept {
                swept = true;
                self.sweep_finished(&list, &claims);
            }
            let now = crate::model::now();
            let ttl = self.config.options.claim_ttl;
            let slot = self.job.as_ref().and_then(|job| job.slot.as_deref());
            let spread = self.spread();
            let skip: BTreeSet<String> = self.skip.union(&self.just_lost).cloned().collect();
            let picked = pick_spread(&list, &claims, (now, ttl, slot), &skip, spread);
            if !matches!(picked, Pick::Take { .. }) && !self.just_lost.is_empty() {
                // Nothing else looked free: a fetch tells what the lost tasks' claims hold.
                self.just_lost.clear();
                continue;
            }
            match picked {
                Pick::Take { id, task, over } => {
                    told_waiting = false;
                    if self.waits_for_room(&id, &task) {
                        wait::pause(self.stop, self.knobs.worker_poll);
                        continue;
                    }
                    if let Some(stop) = self.claim_and_run(&id, &task, over.as_deref())? {
                        return Ok(Some(stop));
                    }
                }
                // The tasks left are other workers' (and those that wait for them, which the
                // workers that finish them take next): ending frees this machine, unless `--wait`.
                Pick::Wait { held } if !self.config.options.wait => {
                    self.held_elsewhere = held;
                    // What other workers finished meanwhile leaves no worktree here.
                    self.sweep_finished(&list, &claims);
                    return Ok(None);
                }
                Pick::Wait { held } => {
                    if !told_waiting {
                        self.sink.notice(Notice::WorkerWaiting { held: held.len() });
                        told_waiting = true;
                    }
                    wait::pause(self.stop, self.knobs.worker_poll);
                }
                Pick::Finished => {
                    self.sweep_finished(&list, &claims);
                    return Ok(None);
                }
            }
        }
    }

    /// This worker's new claim of `task` (taking `over` a stale one), made now.
    fn new_claim(
        &self,
        task: &str,
        fingerprint: Option<String>,
        over: Option<&SeenClaim>,
    ) -> Claim {
        let now = crate::model::now();
        Claim {
            task: task.to_owned(),
            worker: self.me.clone(),
            host: self.host.clone(),
            pid: std::process::id(),
            started_at: now,
            heartbeat_at: now,
            fingerprint,
            released: false,
            token: Claim::token_after(over),
            job: self.job.clone(),
            ready: None,
        }
    }

    /// Claims the task (taking `over` a stale claim) and runs it if the claim took.
    fn claim_and_run(
        &mut self,
        id: &str,
        task: &Task,
        over: Option<&SeenClaim>,
    ) -> anyhow::Result<Option<Stop>> {
        let claim = self.new_claim(id, Some(fingerprint(&task.text)), over);
        let expect = over.map_or("", |seen| seen.sha.as_str());
        let pushed = self
            .site
            .repo
            .push_claim(&self.site.remote, &claim, expect)
            .map_err(|why| unreachable_remote(&self.site.remote, &why))?;
        let Some(sha) = pushed else {
            self.sink.notice(Notice::ClaimRaceLost { task: id });
            self.lost_races += 1;
            self.just_lost.insert(id.to_owned());
            self.held_meanwhile();
            return Ok(None);
        };
        self.just_lost.clear();
        if !self.runs_what_it_claimed(id, task, (&sha, over.is_some()))? {
            return Ok(None);
        }
        self.lost_races = 0;
        self.peers.clear();
        let from = over
            .and_then(|seen| seen.claim.as_ref())
            .map(|c| c.worker.as_str());
        let slot = self.job.as_ref().and_then(|job| job.slot.as_deref());
        self.sink.emit(LoopEvent::TaskClaimed {
            task: id.to_owned(),
            description: task.text.clone(),
            taken_over_from: from.map(str::to_owned),
            earlier_attempt: over.is_some_and(|seen| pick::earlier_attempt(seen, slot)),
        });
        // Work a stale claim's worker pushed is this task's only if it was claimed for its text.
        let made_for_another = (over.and_then(|seen| seen.claim.as_ref()))
            .and_then(|claim| claim.fingerprint.as_deref())
            .is_some_and(|was| was != fingerprint(&task.text));
        if made_for_another && let Err(err) = self.set_pushed_work_aside(id) {
            // The claim is given back, so no other worker waits for it to go stale.
            self.release(&claim, &sha);
            return Err(err);
        }
        if std::mem::take(&mut self.warn_unsandboxed) {
            self.sink.notice(Notice::Unsandboxed);
        }
        let mut holder = Holder { claim, sha };
        let _room = self.enter_room(task);
        let ended = self.run_task(&mut holder, task);
        if ended.is_err() {
            // ralph itself failed (a worktree it could not make, a remote gone mid-task): the
            // claim is given back so that no other worker waits for it to go stale.
            self.release(&holder.claim, &holder.sha);
        }
        Ok(match ended? {
            TaskEnd::Merged | TaskEnd::LetGo => None,
            TaskEnd::Failed => {
                self.failed += 1;
                None
            }
            TaskEnd::Ended(stop) => {
                if stop == Stop::Interrupted {
                    self.stopped_in = Some(id.to_owned());
                }
                Some(stop)
            }
        })
    }

    /// The task's loop, then its merge (resolving conflicts, twice at most).
    fn run_task(&mut self, holder: &mut Holder, task: &Task) -> anyhow::Result<TaskEnd> {
        let id = holder.claim.task.clone();
        let (cwd, laid_clean) = self.task_worktree(&id, task)?;
        let mut conflicts = Vec::new();
        let (mut tries, mut gate_tries) = (0, 0);
        loop {
            let (result, lost) = self.work((&cwd, laid_clean), task, holder, conflicts)?;
            if lost {
                return Ok(self.let_go(&id));
            }
            match base::outcome(result) {
                Outcome::Done => {}
                Outcome::Failed(why) => return self.give_up(&id, &why, &holder.sha),
                Outcome::Ended(stop) => {
                    self.release(&holder.claim, &holder.sha);
                    return Ok(TaskEnd::Ended(stop));
                }
            }
            // Another worker merging first lands it along with its own.
            self.mark_ready(holder);
            let mut fetched = false;
            if holder.claim.ready.is_some() {
                let (waited, peers) = self.wait_for_train(&id, &holder.sha)?;
                self.peers = peers;
                match waited {
                    train::Waited::Gone => return self.claim_gone(&id),
                    train::Waited::Merge { fetched: fresh } => fetched = fresh,
                }
            }
            conflicts = loop {
                match self.integrate(&id, task, &holder.sha, std::mem::take(&mut fetched))? {
                    Integrated::Merged => return Ok(TaskEnd::Merged),
                    Integrated::LetGo => return Ok(self.let_go(&id)),
                    // The task goes back to its agent: its branch is no longer ready.
                    _ if !self.unmark_ready(holder) => return self.claim_gone(&id),
                    Integrated::Conflict(files) => {
                        tries += 1;
                        if tries > MERGE_TRIES {
                            let why = format!(
                                "its merge into {} conflicted {MERGE_TRIES} times in {}; branch {} is kept on {}",
                                self.site.base_name(),
                                files.join(", "),
                                base::branch(&id),
                                self.site.remote
                            );
                            return self.give_up(&id, &why, &holder.sha);
                        }
                        self.sink.emit(LoopEvent::MergeConflicted {
                            task: id.clone(),
                            files,
                        });
                        let left = self.merge_base_into(&cwd)?;
                        if !left.is_empty() {
                            break left;
                        }
                    }
                    Integrated::GateFailed(check) => {
                        if let Some(end) = self.gate_failed(&id, &check, holder, &mut gate_tries)? {
                            return Ok(end);
                        }
                        break self.merge_base_into(&cwd)?;
                    }
                }
            };
        }
    }

    /// Runs the task's loop in its worktree (`laid_clean`: laid for it just now) with the claim
    /// kept fresh beside it; `true` when the claim was taken over meanwhile (the loop was
    /// stopped).
    fn work(
        &self,
        (cwd, laid_clean): (&Path, bool),
        task: &Task,
        holder: &mut Holder,
        conflicts: Vec<String>,
    ) -> anyhow::Result<(anyhow::Result<Stop>, bool)> {
        let fence = crate::run::Fence::holding(&holder.sha);
        // The tasks other workers hold now, by their live claims.
        let (now, ttl) = (crate::model::now(), self.config.options.claim_ttl);
        let alongside = (self.site.repo.seen_claims(&self.site.remote).into_iter())
            .filter(|seen| seen.id != holder.claim.task && seen.id != planning::PLAN_CLAIM)
            .filter(|seen| !pick::is_stale(seen, now, ttl))
            .map(|seen| seen.id)
            .collect();
        let task_loop = TaskLoop {
            alongside,
            task_id: holder.claim.task.clone(),
            shared: Arc::clone(&self.shared),
            base: self.site.base_name(),
            conflicts,
            publish: Some(crate::run::Publish {
                remote: self.site.remote.clone(),
                fence: fence.clone(),
            }),
            home: self.dir.clone(),
            laid_clean,
        };
        let config = self.config.for_task(task);
        let task_stop = StopFlag::default();
        task_stop.follow(self.stop);
        let done = AtomicBool::new(false);
        let (result, lost) = std::thread::scope(|scope| {
            let beat = scope.spawn(|| self.heartbeat(holder, (&task_stop, &fence), &done));
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                start::run_task_loop(&config, cwd, task_loop, &task_stop, self.knobs)
            }))
            .unwrap_or_else(|_| {
                Err(anyhow::anyhow!(
                    "the task's loop stopped on an internal error"
                ))
            });
            // Also after a panic, so the heartbeat ends and the claim can go stale.
            done.store(true, Ordering::SeqCst);
            (result, beat.join().unwrap_or(false))
        });
        Ok((result, lost))
    }

    /// Refreshes the claim every `--claim-heartbeat` until `done`, and passes the user's stop
    /// requests on to the task's loop. `true` when the claim was found taken over.
    fn heartbeat(
        &self,
        holder: &mut Holder,
        (task_stop, fence): (&StopFlag, &crate::run::Fence),
        done: &AtomicBool,
    ) -> bool {
        let every = self.config.options.claim_heartbeat;
        let mut last = Instant::now();
        while !done.load(Ordering::SeqCst) {
            task_stop.follow(self.stop);
            std::thread::sleep(Duration::from_millis(50));
            if last.elapsed() < every {
                continue;
            }
            last = Instant::now();
            let mut claim = holder.claim.clone();
            claim.heartbeat_at = crate::model::now();
            // Held while the claim is pushed: the task's branch is pushed before or after.
            let mut held = fence.lock();
            match self
                .site
                .repo
                .push_claim(&self.site.remote, &claim, &holder.sha)
            {
                Ok(Some(sha)) => {
                    *held = Some(sha.clone());
                    holder.sha = sha;
                }
                Ok(None) => {
                    // Taken over: from now on the task's loop pushes nothing.
                    *held = None;
                    task_stop.request();
                    return true;
                }
                // The remote is out of reach for now: the next beat tries again.
                Err(_) => {}
            }
        }
        false
    }

    /// Merges the base into the task's branch in its worktree: the files left in conflict.
    fn merge_base_into(&self, cwd: &Path) -> anyhow::Result<Vec<String>> {
        let tree = Repo::discover(cwd).ok_or_else(|| fail("the task's worktree is gone"))?;
        let own = self.own_files(&tree);
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        tree.merge_base_into_branch(&self.site.base_ref(), &own)
            .map_err(|why| fail(why).into())
    }

    /// The claim was taken over: the task is left to its new owner.
    fn let_go(&mut self, id: &str) -> TaskEnd {
        self.sink.emit(LoopEvent::ClaimLost {
            task: id.to_owned(),
        });
        self.skip.insert(id.to_owned());
        self.site
            .repo
            .remove_worktree(&self.dir.worktree(id), &base::branch(id), false);
        TaskEnd::LetGo
    }

    /// Gives the claim back (if it is still ours) so another worker can go on with the task at
    /// once: it is marked released, not deleted, so it still says which text of the task the
    /// work pushed under it was made for.
    fn release(&self, claim: &Claim, sha: &str) {
        let released = Claim {
            released: true,
            ready: None,
            ..claim.clone()
        };
        let _ = self.site.repo.push_claim(&self.site.remote, &released, sha);
    }

    /// ralph's own files in a work tree of this repository: the task list first.
    fn own_files(&self, tree: &Repo) -> Vec<String> {
        base::own_files(tree, &[storage::TASKS_FILE, progress::PROGRESS_FILE])
    }
}

/// The claim this worker holds: its record and its commit on the remote.
struct Holder {
    claim: Claim,
    sha: String,
}

/// How merging a finished task went.
enum Integrated {
    Merged,
    Conflict(Vec<String>),
    /// A check of the run's `--verify` failed on the merged result: the base did not move.
    GateFailed(crate::model::Verification),
    LetGo,
}

mod budget;
mod claimed;
mod ending;
mod integrate;
mod job;
mod pick;
mod planning;
mod plumbed;
mod room;
mod site;
#[cfg(test)]
mod tests;
mod train;
mod worktrees;

pub(crate) use site::remote_status;

/// Whether task `task` has a claim among `claims` that is not stale at `now` by `ttl`: a worker
/// still works on it (and waits for its questions).
pub(crate) fn claim_live(
    claims: &[SeenClaim],
    task: &str,
    (now, ttl): (chrono::DateTime<chrono::Utc>, Duration),
) -> bool {
    (claims.iter()).any(|seen| seen.id == task && !is_stale(seen, now, ttl))
}
use site::{Site, unreachable_remote};
