//! `--tasks --parallel N`: up to N ready tasks at once, each in its own git worktree on its own
//! branch, each running its own loop; finished tasks are merged into the base branch one at a
//! time, in the order they finish.
//!
//! The coordinator (this module, on the main thread) owns the base work tree: it creates and
//! removes worktrees, merges, and writes the base's task file. Workers (scoped threads) only run
//! their loop in their worktree; they share the global budgets through [`Shared`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;

use crate::config::RunConfig;
use crate::error::fail;
use crate::event::{LoopEvent, NotStarted, Notice, ParallelEnd};
use crate::exit::ExitStatus;
use crate::git::Repo;
use crate::model::StopKind;
use crate::signal::StopFlag;
use crate::storage::history::{self, History};
use crate::storage::identity;
use crate::storage::tasks::{self, Task, TaskList, TaskStatus};
use crate::storage::{self, RalphDir};
use crate::storage::{progress, state};

use super::base::{Outcome, base_branch, branch, mark, outcome, own_files};
use crate::run::decision::Stop;
use crate::run::sink::{Place, Sink};
use crate::run::{Knobs, Shared, TaskLoop, plan, planner, sandboxed, start};

pub(super) mod gate;
mod merge;
mod ready;
mod room;
mod train;
mod worktrees;

/// Tries at resolving a merge conflict before a task is given up.
pub(super) const MERGE_TRIES: u32 = 2;

/// Runs the task list in parallel.
pub(crate) fn run(
    config: &RunConfig,
    cwd: &Path,
    dir: &RalphDir,
    start: crate::run::Start,
    stop: &StopFlag,
    knobs: &Knobs,
) -> anyhow::Result<ExitStatus> {
    let checks = |place: &Place<'_>, sink: &Sink, resumed: bool| {
        check_before_planning(config, place, sink, resumed)?;
        let sandbox = sandboxed::check_fleet_sandbox(config, cwd, place.repo, dir)?;
        if matches!(sandbox, Err(true)) {
            sink.notice(Notice::Unsandboxed);
        }
        Ok(sandbox)
    };
    let crate::run::Opened {
        repo: found,
        sink,
        lock: _lock,
        resumed,
        sandbox,
        planning,
        refined,
    } = crate::run::open(config, (cwd, dir), start, (stop, knobs), &checks)?;
    // The run's own commits (the task list, the progress log) run the repository's hooks inside.
    let hooked = sandboxed::with_hooks(found, sandbox.as_ref().ok());
    // With --refine, the prompt the user took is the run's.
    let config = refined.as_ref().unwrap_or(config);
    nothing_to_run(dir)?;
    crate::run::tell_task_file_problems(dir, &sink);
    let (repo, base) = prepare(hooked, dir, "--parallel", &sink)?;
    let pool = super::pool::Pool::new(&repo, dir, config.options.keep_build_cache);
    // What a killed run left of tasks merged since: their worktrees and branches.
    tell_swept(&sink, &super::base::sweep(&repo, dir));
    let (mut state, shared) = open_records(config, dir, resumed.as_ref(), planning)?;
    let mut run = Coordinator {
        config,
        dir,
        repo,
        base,
        shared: Arc::clone(&shared),
        sink,
        running: BTreeSet::new(),
        started: BTreeSet::new(),
        merge_tries: BTreeMap::new(),
        merged: Vec::new(),
        not_carried: Vec::new(),
        failed: Vec::new(),
        blocked: BTreeSet::new(),
        gate_tries: BTreeMap::new(),
        told_touch_waits: BTreeSet::new(),
        learned: ready::Learned::default(),
        told_room_waits: BTreeSet::new(),
        integration_clean_at: None,
        ended: None,
        pool,
    };
    run.sink.notice(Notice::ParallelStarted {
        at_once: config.options.parallel.max,
        base: &run.base,
    });
    std::thread::scope(|scope| {
        let (sender, receiver) = mpsc::channel();
        let spawner = Spawner {
            scope,
            stop,
            knobs,
            sender,
        };
        run.schedule(&spawner, &receiver)
    })?;
    if stop.is_stopping() {
        run.ended.get_or_insert(Stop::Interrupted);
    }
    let (status, reason, kind) = run.finish();
    shared.save_into(&mut state);
    record_end(dir, state, status, (reason, kind))?;
    Ok(status)
}

/// Everything that can refuse the run, checked before the planning call (a paid one that commits
/// its plan): the agents, the planner, and when a plan is to be made the repository and its tree
/// (without one, `prepare` checks the base after mending a killed run's merge).
fn check_before_planning(
    config: &RunConfig,
    place: &Place<'_>,
    sink: &Sink,
    resumed: bool,
) -> anyhow::Result<()> {
    let steps = plan::steps(config, place.cwd).map_err(fail)?;
    crate::run::tell_codex_bwrap(steps.all(), sink);
    planner::check_planner(config, place.cwd, place.dir)?;
    if !resumed && planner::needed(config, place.dir) {
        super::base::check_base(place.repo.cloned(), place.dir, "--parallel")?;
    }
    Ok(())
}

/// The run's own state (so `--status` sees it and `--resume` can continue it) and history
/// (every iteration of every task loop; a resumed run adds to them), and the budgets its loops
/// share, which the planning calls spent from already.
fn open_records(
    config: &RunConfig,
    dir: &RalphDir,
    resumed: Option<&state::LoopState>,
    planning: Vec<crate::storage::history::AgentCall>,
) -> anyhow::Result<(state::LoopState, Arc<Shared>)> {
    let state = start::new_state(config, resumed);
    state::save(&dir.state(), &state)?;
    if resumed.is_none() {
        history::save(&dir.history(), &History::default())?;
    }
    let shared = Arc::new(Shared::resumed(&state));
    for call in &planning {
        shared.add(
            call.cost_usd,
            call.tokens.map_or(0, |tokens| tokens.billable()),
        );
    }
    if !planning.is_empty() {
        shared.edit_history(dir, |history| {
            planning.into_iter().for_each(|c| history.add_call(c))
        })?;
    }
    Ok((state, shared))
}

/// The run's state at its end: gone when every task is done (with the hints that reached a
/// prompt), else kept, stopped, with why (for `--status` and `--resume`).
fn record_end(
    dir: &RalphDir,
    mut state: state::LoopState,
    status: ExitStatus,
    (reason, kind): (String, StopKind),
) -> anyhow::Result<()> {
    if status == ExitStatus::Success {
        crate::storage::context::settle(dir)?;
        return storage::remove_file(&dir.state()).map(drop);
    }
    state.active = false;
    state.stopped_at = Some(crate::model::now());
    state.stop_reason = Some(reason);
    state.stop_kind = Some(kind);
    state::save(&dir.state(), &state)
}

/// Says what a sweep removed and kept, if anything.
fn tell_swept(sink: &Sink, swept: &super::base::Swept) {
    if !swept.removed.is_empty() || !swept.kept.is_empty() {
        sink.notice(Notice::Swept {
            removed: &swept.removed,
            kept: &swept.kept,
        });
    }
}

/// A run needs a task list with a task in it: without one there is nothing to run in parallel.
fn nothing_to_run(dir: &RalphDir) -> anyhow::Result<()> {
    let content = storage::read_text(&dir.tasks())?.unwrap_or_default();
    if TaskList::parse(&content).is_empty() {
        return Err(fail(format!(
            "there is no task in {}, so --parallel has nothing to run; add tasks with `ralph --add-task \"…\"` (or `--import FILE`), then run again",
            dir.tasks().display()
        ))
        .into());
    }
    Ok(())
}

/// Checks that the base can host task loops: a git repository, a branch checked out, nothing
/// uncommitted but ralph's own files (which are committed first, so the task loops see them).
fn prepare(
    found: Option<Repo>,
    dir: &RalphDir,
    flag: &str,
    sink: &Sink,
) -> anyhow::Result<(Repo, String)> {
    let (repo, base) = base_branch(found, dir, flag)?;
    let own = own_files(
        &repo,
        &[
            storage::TASKS_FILE,
            storage::GITIGNORE_FILE,
            progress::PROGRESS_FILE,
        ],
    );
    let own: Vec<&str> = own.iter().map(String::as_str).collect();
    // A merge a killed ralph left half done is undone; its task's branch is kept and merged again.
    // The task list and progress log go back to the base's commit too: the merge had marked the
    // task done there, and its work is not in the base yet.
    if repo.abort_unfinished_merge("ralph/") {
        repo.restore_from_head(&own);
        sink.notice(Notice::UnfinishedMergeUndone);
    }
    if let Some(task) = super::base::finish_landing(&repo, dir).map_err(fail)? {
        sink.notice(Notice::LandingFinished { task: &task });
    }
    // Every task gets its id written down, so no change to the list moves an id to another task.
    storage::tasks::edit(dir, |current| (current.and_then(identity::with_ids), ()))?;
    super::base::refuse_dirty(&repo, &own, flag)?;
    repo.commit_paths(&own, "Ralph: task list").map_err(fail)?;
    Ok((repo, base))
}

struct Coordinator<'a> {
    config: &'a RunConfig,
    dir: &'a RalphDir,
    repo: Repo,
    base: String,
    shared: Arc<Shared>,
    /// Where the run's own events go (each task loop has its own sink).
    sink: Sink,
    /// Ids of the tasks whose loop runs.
    running: BTreeSet<String>,
    /// Ids of the tasks started in this run.
    started: BTreeSet<String>,
    /// Merge conflicts so far, per task.
    merge_tries: BTreeMap<String, u32>,
    /// Ids of the tasks merged in this run.
    merged: Vec<String>,
    /// Ids of the merged tasks whose notes or added tasks could not be carried into the base.
    not_carried: Vec<String>,
    /// Ids of the tasks that failed in this run.
    failed: Vec<String>,
    /// Done tasks whose merge waits for the user: they have uncommitted changes in the base to
    /// files the task changed.
    blocked: BTreeSet<String>,
    /// How often each task's merge failed the run's `--verify` gate.
    /// Tasks that said they wait for a running task whose `touches` overlap theirs.
    told_touch_waits: BTreeSet<String>,
    /// What this run learnt from conflicts: the files each task's merge changed in the base, and
    /// the files that conflicted, as implicit `touches` of the tasks that changed them.
    learned: ready::Learned,
    /// Tasks that said they wait for room on the machine, and for what (`--parallel auto`).
    told_room_waits: BTreeSet<(String, String)>,
    gate_tries: BTreeMap<String, u32>,
    /// The commit the integration worktree was left at by the last merge landed, when nothing
    /// ran in it since (no gate): the next merge from there needs no checkout and no clean.
    integration_clean_at: Option<String>,
    /// Why the run ended early, if it did.
    ended: Option<Stop>,
    /// Worktrees of finished tasks, parked for the next ones.
    pool: super::pool::Pool,
}

/// A task loop's end: its task id and how it stopped.
type WorkerEnd = (String, anyhow::Result<Stop>);

/// What starting a task loop's thread needs: the scope it runs in, what it shares with the run, and
/// where it reports its end.
struct Spawner<'s, 'e> {
    scope: &'s std::thread::Scope<'s, 'e>,
    stop: &'s StopFlag,
    knobs: &'s Knobs,
    sender: mpsc::Sender<WorkerEnd>,
}

impl<'a> Coordinator<'a> {
    /// Starts ready tasks up to the limit, and handles each task loop's end, until nothing runs.
    fn schedule<'s>(
        &mut self,
        spawner: &Spawner<'s, '_>,
        receiver: &mpsc::Receiver<WorkerEnd>,
    ) -> anyhow::Result<()>
    where
        'a: 's,
    {
        let stop = spawner.stop;
        loop {
            let mut held = false;
            if self.ended.is_none() && !stop.is_stopping() {
                let ready = self.ready()?;
                self.lay_ahead(&ready);
                for (id, task) in ready {
                    if self.running.len() >= self.config.options.parallel.max as usize {
                        break;
                    }
                    if self.waits_for_touches(&id, &task)? {
                        continue;
                    }
                    // The tasks after it wait too: they start in the list's order.
                    if self.waits_for_room(&id, &task)? {
                        held = true;
                        break;
                    }
                    let conflicts = pending_conflicts(&self.dir.worktree(&id));
                    if let Err(err) = self.start(spawner, (&id, &task), conflicts) {
                        self.give_up(&id, &format!("it could not start: {err:#}"));
                    }
                }
            }
            // Merges wait for the user only while the run goes on (a stop or a limit leaves them
            // to the next run).
            let waiting = !self.blocked.is_empty() && !stop.is_stopping() && self.ended.is_none();
            if self.running.is_empty() && !waiting {
                return Ok(());
            }
            let next = if waiting || held {
                // Merges wait for the user's edits in the base, a task for room on the machine:
                // look again every second.
                match receiver.recv_timeout(std::time::Duration::from_secs(1)) {
                    Ok(end) => Some(end),
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if waiting {
                            self.retry_blocked(spawner);
                        }
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => None,
                }
            } else {
                receiver.recv().ok()
            };
            let Some(first) = next else {
                return Ok(());
            };
            let ready = self.take_ends(first, receiver, stop);
            let landing = ready.clone();
            if let Err(err) = self.land_ready(ready, spawner) {
                for id in landing {
                    if !self.merged.contains(&id) && !self.running.contains(&id) {
                        self.give_up(&id, &format!("{err:#}"));
                    }
                }
            }
        }
    }

    /// Takes in the end of a task loop (`first`) and every other that ended meanwhile: the done
    /// tasks, to land together.
    fn take_ends(
        &mut self,
        first: WorkerEnd,
        receiver: &mpsc::Receiver<WorkerEnd>,
        stop: &StopFlag,
    ) -> Vec<String> {
        let mut ready = Vec::new();
        let mut end = Some(first);
        while let Some((id, result)) = end {
            self.running.remove(&id);
            match outcome(result) {
                // Once the run is ending, a finished task is merged by the next run.
                Outcome::Done if self.ended.is_some() || stop.is_stopping() => {}
                Outcome::Done => ready.push(id),
                Outcome::Failed(why) => self.give_up(&id, &why),
                Outcome::Ended(stop) => {
                    self.ended.get_or_insert(stop);
                }
            }
            end = receiver.try_recv().ok();
        }
        ready
    }

    fn base_list(&self) -> anyhow::Result<TaskList> {
        let content = storage::read_text(&self.dir.tasks())?.unwrap_or_default();
        Ok(TaskList::parse(&content))
    }

    /// Creates (or reuses) the task's worktree and starts its loop.
    fn start<'s>(
        &mut self,
        spawner: &Spawner<'s, '_>,
        (id, task): (&str, &Task),
        conflicts: Vec<String>,
    ) -> anyhow::Result<()>
    where
        'a: 's,
    {
        let conflicts = if self.set_aside_if_stale(id, task)? {
            Vec::new()
        } else {
            conflicts
        };
        let (path, laid_clean) = self.lay_worktree(id)?;
        let branch = branch(id);
        let cwd = path.join(self.repo.prefix());
        // The work made in this worktree and branch is for this task, and only for it.
        super::base::bind(&self.repo, id, task, &cwd)?;
        let config = self.config.for_task(task);
        let task_loop = TaskLoop {
            alongside: (self.running.iter())
                .filter(|other| *other != id)
                .cloned()
                .collect(),
            task_id: id.to_owned(),
            shared: Arc::clone(&self.shared),
            base: self.base.clone(),
            conflicts,
            publish: None,
            home: self.dir.clone(),
            laid_clean,
        };
        self.sink.emit(LoopEvent::TaskStarted {
            task: id.to_owned(),
            description: task.text.clone(),
            branch,
        });
        self.running.insert(id.to_owned());
        if self.config.options.parallel.auto {
            self.note_waiting(id, None);
        }
        self.started.insert(id.to_owned());
        // The base's list shows the task in progress while its loop runs (`--status`).
        if let Err(why) = mark(self.dir, id, TaskStatus::InProgress, None) {
            self.sink.notice(Notice::TaskNotRecorded {
                task: id,
                status: "in progress [/]",
                why: &why,
            });
        }
        let sender = spawner.sender.clone();
        let (stop, knobs) = (spawner.stop, spawner.knobs);
        let id = id.to_owned();
        spawner.scope.spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                start::run_task_loop(&config, &cwd, task_loop, stop, knobs)
            }))
            .unwrap_or_else(|_| {
                Err(anyhow::anyhow!(
                    "the task's loop stopped on an internal error"
                ))
            });
            let _ = sender.send((id, result));
        });
        Ok(())
    }

    /// Marks a task failed in the base (with why), and removes its worktree; its branch is kept.
    fn give_up(&mut self, id: &str, why: &str) {
        self.record_failure(id, why);
        self.remove(id, false);
    }

    /// Marks a task failed in the base (with why), its worktree and branch left as they are.
    fn record_failure(&mut self, id: &str, why: &str) {
        self.sink.emit(LoopEvent::TaskFailed {
            task: id.to_owned(),
            reason: why.to_owned(),
        });
        let own = self.own_files();
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        let recorded = mark(self.dir, id, TaskStatus::Failed, Some(why)).and_then(|()| {
            self.repo
                .commit_paths(&own[..1], &format!("Ralph: task {id} failed"))
                .map(drop)
        });
        if let Err(why) = recorded {
            self.sink.notice(Notice::TaskNotRecorded {
                task: id,
                status: "failed [!]",
                why: &why,
            });
        }
        self.failed.push(id.to_owned());
    }

    /// ralph's own files in the base, repository-relative: the task list first.
    fn own_files(&self) -> Vec<String> {
        own_files(&self.repo, &[storage::TASKS_FILE, progress::PROGRESS_FILE])
    }

    /// The run's end: the exit status and why; the `parallel_ended` event with its totals.
    fn finish(&self) -> (ExitStatus, String, StopKind) {
        let list = self.base_list().unwrap_or_default();
        let open = list
            .tasks
            .iter()
            .filter(|task| task.status != TaskStatus::Complete)
            .count();
        let status = match &self.ended {
            Some(stop) => stop.status(),
            None if open == 0 => ExitStatus::Success,
            None => ExitStatus::Stopped,
        };
        let stop = match &self.ended {
            Some(stop) => stop.kind(),
            None if open == 0 => StopKind::Completed,
            None => StopKind::Blocked,
        };
        let reason = match &self.ended {
            Some(Stop::Interrupted) => {
                "interrupted; `ralph --resume` goes on with every unfinished task".to_owned()
            }
            Some(stop) => stop.reason(0),
            // Nothing was left to run: a new spec is planned over the list with --replan.
            None if self.started.is_empty() && open == 0 => {
                "every task of the list was done already; to plan a new spec over it, run again with --replan".to_owned()
            }
            None if self.started.is_empty() => {
                "no task is left that can run; fix or remove the failed ones, or plan a new spec with --replan".to_owned()
            }
            None if open == 0 => "every task is done and merged".to_owned(),
            None => "not every task is done".to_owned(),
        };
        tell_swept(&self.sink, &super::base::sweep(&self.repo, self.dir));
        // The worktree the merges were made in is the run's own, and so are the parked ones.
        super::pool::clear(&self.repo, self.dir);
        // No task loop runs any more: the list marks none in progress, and is committed so the
        // checkout is left clean (a resumed run marks them again).
        let interrupted = (list.tasks.iter().zip(tasks::task_ids(&list)))
            .filter(|(task, id)| {
                task.status.is_to_do() && self.started.contains(id) && !self.failed.contains(id)
            })
            .count();
        self.leave_list_clean();
        let spent = self.shared.spent();
        let not_started = self.never_started(&list);
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        self.sink.emit(LoopEvent::ParallelEnded(ParallelEnd {
            reason: reason.clone(),
            exit_code: status.code(),
            tasks_done: count(self.merged.len()),
            // Failed in this run or an earlier one: each is marked `[!]` in the list.
            tasks_failed: count(
                (list.tasks.iter())
                    .filter(|task| task.status == TaskStatus::Failed)
                    .count(),
            ),
            tasks_not_started: count(not_started.len()),
            tasks_interrupted: count(interrupted),
            iterations: self.shared.iterations(),
            total_duration_ms: crate::config::millis(spent.runtime),
            tokens: spent.tokens,
            cost_usd: spent.cost,
            not_started,
            not_carried: self.not_carried.clone(),
        }));
        (status, reason, stop)
    }

    /// Marks no task in progress in the base's list, and commits ralph's own files if they
    /// changed (a failure only warns: the run's end is told anyway).
    fn leave_list_clean(&self) {
        let unmarked = tasks::edit(self.dir, |current| {
            (current.and_then(tasks::with_none_in_progress), ())
        });
        let own = self.own_files();
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        let committed = unmarked
            .map_err(|err| format!("{err:#}"))
            .and_then(|()| self.repo.commit_paths(&own, "Ralph: task list"));
        if let Err(why) = committed {
            self.sink.notice(Notice::CommitFailed(&why));
        }
    }

    /// The open tasks this run never started, each with why: what it waits for, its failure,
    /// or the stop that came first.
    fn never_started(&self, list: &TaskList) -> Vec<NotStarted> {
        let ids = tasks::task_ids(list);
        list.tasks
            .iter()
            .zip(ids)
            .filter(|(task, id)| task.status.is_to_do() && !self.started.contains(id))
            .map(|(task, id)| {
                let blockers = list.blockers(task);
                let why = if !blockers.is_empty() {
                    format!("waits for {}", blockers.join(", "))
                } else if let Some(stop) = &self.ended {
                    format!("the run stopped first ({})", stop.reason(0))
                } else {
                    "it was not ready when the run ended".to_owned()
                };
                NotStarted { task: id, why }
            })
            .collect()
    }
}

/// The conflicts a reused worktree still has (a merge of the base in it that was not finished).
fn pending_conflicts(path: &Path) -> Vec<String> {
    Repo::linked_worktree(path)
        .map(|worktree| worktree.unfinished_merge_conflicts())
        .unwrap_or_default()
}
