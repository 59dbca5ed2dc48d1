//! How a loop starts and ends: the lock, the saved state, `--resume`, `--reset`, the commit of an
//! iteration, and the end of the loop.

use std::path::Path;
use std::time::Instant;

use crate::agents::AgentKind;
use crate::config::{RotationStep, RunConfig};
use crate::error::fail;
use crate::event::{Ending, LoopEvent, Notice, RunEnd, Summary};
use crate::exit::ExitStatus;
use crate::git::{Repo, Tree};
use crate::options;
use crate::promise::Promise;
use crate::signal::StopFlag;
use crate::storage::history::{self, History};
use crate::storage::state::{self, LoopState};
use crate::storage::{self, Loaded, RalphDir, progress, tasks};

use super::claim::{Start, claim, load_keeping_corrupt, stop_leftover_agent};
use super::decision::{Counters, Rules, Stop};
use super::preflight::{OwnMerge, refuse_operation_underway};
use super::sink::{Place, Scope, Sink};
use super::{Env, Knobs, Promises, Runner, Shape, TaskLoop, plan};

/// Starts a new loop, or resumes the saved one.
pub(crate) fn run(
    config: &RunConfig,
    cwd: &Path,
    dir: &RalphDir,
    start: Start,
    stop: &StopFlag,
    knobs: &Knobs,
) -> anyhow::Result<ExitStatus> {
    let steps = plan::steps(config, cwd).map_err(fail)?;
    // The planner and the sandbox are checked before the planning call (a paid one).
    let checks = |place: &Place<'_>, _: &Sink, _: bool| {
        if let Some(repo) = place.repo {
            refuse_operation_underway(repo, OwnMerge::Refused)?;
        }
        super::planner::check_planner(config, cwd, dir)?;
        super::sandboxed::sandbox_for(config, (cwd, true), place.repo, dir, steps.all())
    };
    let super::Opened {
        repo,
        sink,
        lock: _lock,
        resumed,
        sandbox,
        planning,
        refined,
    } = super::open(config, (cwd, dir), start, (stop, knobs), &checks)?;
    // With --refine, the prompt the user took is the run's.
    let config = refined.as_ref().unwrap_or(config);
    let repo = super::sandboxed::with_hooks(repo, sandbox.as_ref());
    let env = Env {
        config,
        cwd,
        dir,
        stop,
        knobs,
        repo,
        steps,
        rules: Rules::new(&config.options, knobs.error_pause, false),
        promises: Promises::new(&config.options),
        shape: Shape::Single,
        sink,
        sandbox,
    };
    let mut runner = Runner::new(env, resumed)?;
    // The planning calls are the run's: their cost counts toward its budgets.
    planning
        .into_iter()
        .for_each(|call| runner.history.add_call(call));
    let result = runner.run();
    if let Err(err) = &result {
        runner.record_own_failure(err);
    }
    result
}

/// The state a loop saves as it starts (or resumes).
pub(crate) fn new_state(config: &RunConfig, resumed: Option<&LoopState>) -> LoopState {
    let (iteration, started_at, runtime_ms) = resumed
        .map_or((1, crate::model::now(), 0), |saved| {
            (saved.iteration.max(1), saved.started_at, saved.runtime_ms)
        });
    let o = &config.options;
    LoopState {
        active: true,
        iteration,
        min_iterations: o.min_iterations,
        max_iterations: o.max_iterations,
        completion_promise: o.completion_promise.clone(),
        tasks_mode: o.tasks,
        task_promise: o.task_promise.clone(),
        prompt: config.prompt.clone(),
        started_at,
        model: o.model.clone().unwrap_or_default(),
        agent: config.agent.id().to_owned(),
        pid: Some(std::process::id()),
        host: nix::unistd::gethostname()
            .ok()
            .map(|name| name.to_string_lossy().into_owned()),
        stopped_at: None,
        runtime_ms,
        spent_cost_usd: resumed.and_then(|saved| saved.spent_cost_usd),
        spent_tokens: resumed.map_or(0, |saved| saved.spent_tokens),
        stalled: resumed.map_or(0, |saved| saved.stalled),
        iterations_before: resumed.map_or(0, |saved| saved.iterations_before),
        agent_group: None,
        task_attempts: resumed
            .map(|saved| saved.task_attempts.clone())
            .unwrap_or_default(),
        stop_reason: None,
        stop_kind: None,
        prompt_file: config.prompt_file.as_ref().map(|p| p.display().to_string()),
        options: Some(options::saved_options(o)),
        dirty_at_start: resumed
            .map(|saved| saved.dirty_at_start.clone())
            .unwrap_or_default(),
        worker: None,
        waiting: std::collections::BTreeMap::new(),
    }
}

/// Runs one task loop of a run in its worktree (`cwd`), to its stop.
pub(crate) fn run_task_loop(
    config: &RunConfig,
    cwd: &Path,
    task: TaskLoop,
    stop: &StopFlag,
    knobs: &Knobs,
) -> anyhow::Result<Stop> {
    let dir = RalphDir::new(cwd);
    let steps = plan::steps(config, cwd).map_err(fail)?;
    // A task loop of an interrupted run goes on where it stopped, in the same worktree.
    let start = match state::load(&dir.state()) {
        Loaded::Found(saved) => Start::Resume {
            saved: Box::new(saved),
            overrides: Vec::new(),
        },
        _ => Start::Fresh,
    };
    // The task's worktree is ralph's own: opened from its files, git is not asked.
    let repo = Repo::linked_worktree(&task.home.worktree(&task.task_id))
        .and_then(|worktree| worktree.seen_from(cwd))
        .or_else(|| Repo::discover(cwd));
    let place = Place {
        cwd,
        dir: &dir,
        repo: repo.as_ref(),
        home: &task.home,
    };
    let sink = Sink::for_run(config, &place, Some(task.task_id.clone()), Scope::Task);
    let (_lock, resumed) = claim(&dir, start, knobs, &sink)?;
    let mut rules = Rules::new(&config.options, knobs.error_pause, false);
    rules.task_loop = true;
    // A task started again (sent back by the merge gate, its loop over) goes on counting from
    // its last recorded iteration, with the limits it had: no number, and no log, is used twice.
    let before = match &resumed {
        Some(saved) => saved.iterations_before,
        None => (history::load(&task.home.history()).ok())
            .and_then(|run| run.last_iteration_of(&task.task_id))
            .unwrap_or(0),
    };
    rules.min_iterations = rules.min_iterations.saturating_add(before);
    if rules.max_iterations > 0 {
        rules.max_iterations = rules.max_iterations.saturating_add(before);
    }
    // The run checked its agents start in a sandbox (`check_fleet_sandbox`): no preflight again.
    let sandbox =
        super::sandboxed::sandbox_for(config, (cwd, true), repo.as_ref(), &task.home, [])?;
    let repo = super::sandboxed::with_hooks(repo, sandbox.as_ref());
    let env = Env {
        config,
        cwd,
        dir: &dir,
        stop,
        knobs,
        repo,
        steps,
        rules,
        promises: Promises::new(&config.options),
        shape: Shape::Task(task),
        sink,
        sandbox,
    };
    let fresh = resumed.is_none();
    let mut runner = Runner::new(env, resumed)?;
    if fresh {
        runner.state.iteration = runner.state.iteration.saturating_add(before);
        runner.state.iterations_before = before;
    }
    let result = runner.run_loop();
    match result {
        Ok(stop) => {
            runner.finish(&stop)?;
            Ok(stop)
        }
        Err(err) => {
            runner.record_own_failure(&err);
            Err(err)
        }
    }
}

impl Promises {
    pub(super) fn new(options: &options::LoopOptions) -> Self {
        let format = options.promise_format;
        Self {
            completion: Promise::new(&options.completion_promise, format),
            task: Promise::new(&options.task_promise, format),
            abort: options
                .abort_promise
                .as_deref()
                .map(|text| Promise::new(text, format)),
        }
    }
}

impl<'a> Runner<'a> {
    pub(super) fn new(mut env: Env<'a>, resumed: Option<LoopState>) -> anyhow::Result<Self> {
        let config = env.config;
        env.rules.files_tracked = env.repo.is_some();
        if let Some(group) = resumed.as_ref().and_then(|saved| saved.agent_group) {
            stop_leftover_agent(group, env.knobs.leftover_grace, || {
                env.sink.notice(Notice::LeftoverAgentStopped(group));
            });
        }
        let state = new_state(config, resumed.as_ref());
        let earlier_runtime_ms = state.runtime_ms;
        // Read the old history even for a fresh loop, so a corrupt one is kept aside before the
        // new loop replaces it.
        let previous = load_keeping_corrupt(
            &env.dir.history(),
            history::load(&env.dir.history()),
            &env.sink,
        )?;
        let history = if resumed.is_some() {
            previous.unwrap_or_default()
        } else {
            History::default()
        };
        // A merge of the base left unfinished in the task's worktree (a kill cut it short, maybe
        // before git wrote `MERGE_HEAD`) is the agent's to finish, as one just made is.
        if let (Shape::Task(task), Some(repo)) = (&mut env.shape, &env.repo)
            && !task.laid_clean
        {
            for path in repo.unfinished_merge_conflicts() {
                if !task.conflicts.contains(&path) {
                    task.conflicts.push(path);
                }
            }
        }
        let feedback = env
            .shape
            .task_loop()
            .filter(|task| !task.conflicts.is_empty())
            .map(|task| crate::prompt::merge_conflicts(&task.base, &task.conflicts))
            .into_iter()
            .collect();
        // A task loop's task is read from the run's list (its worktree's is the agent's to edit).
        let sealed = super::protected::Sealed::read(
            env.shape.task_loop().map_or(env.dir, |task| &task.home),
        );
        Ok(Self {
            counters: Counters {
                stalled: state.stalled,
                ..Counters::default()
            },
            env,
            state,
            history,
            feedback,
            announced_stop: false,
            resumed: resumed.is_some(),
            session_started: Instant::now(),
            earlier_runtime_ms,
            tree: Tree::default(),
            limits: super::fallback::Limits::default(),
            sealed,
        })
    }

    /// Warnings, the banner, the saved state, the task file, the summary: the loop is on.
    pub(super) fn start(&mut self) -> anyhow::Result<()> {
        let config = self.env.config;
        let o = &config.options;
        for step in self
            .env
            .steps
            .rotation
            .iter()
            .chain(&self.env.steps.fallback)
        {
            let agent = step.spec.display_name();
            if o.no_plugins && step.spec.kind() != Some(AgentKind::OpenCode) {
                self.env.sink.notice(Notice::NoPluginsIgnored { agent });
            }
            if o.max_cost.is_some() && !step.agent.reports_cost() {
                self.env.sink.notice(Notice::MaxCostUnavailable { agent });
            }
        }
        if self.env.shape.task_loop().is_none() {
            super::tell_codex_bwrap(self.env.steps.all(), &self.env.sink);
        }
        if o.max_stalled.is_some() && self.env.repo.is_none() {
            self.env.sink.notice(Notice::MaxStalledUnavailable);
        }
        self.look_at_repository();
        self.env.sink.notice(Notice::Banner {
            agent: config.agent.display_name(),
        });
        if self.env.shape.task_loop().is_none() {
            // The iteration logs are never committed (a `.gitignore` of an older ralph lacks it).
            self.env.dir.ignore_own_dirs()?;
        }
        if self.resumed {
            self.settle_recorded_iteration()?;
        }
        // What a killed ralph left of the agent's changes to protected paths is never committed.
        let left_by_a_kill =
            self.resumed || (self.env.shape.task_loop()).is_some_and(|task| !task.laid_clean);
        if left_by_a_kill {
            super::protected::put_back_left(self)?;
        }
        self.commit_interrupted_work();
        self.save_state()?;
        if o.tasks {
            let created = tasks::edit(self.env.dir, |current| match current {
                Some(_) => (None, false),
                None => (Some(tasks::new_file_content().into_bytes()), true),
            })?;
            if created {
                self.env
                    .sink
                    .notice(Notice::TasksFileCreated(&self.env.dir.tasks()));
            } else if self.env.shape.task_loop().is_none() {
                super::tell_task_file_problems(self.env.dir, &self.env.sink);
            }
        }
        history::save(&self.env.dir.history(), &self.history)?;
        self.announce_start();
        Ok(())
    }

    fn announce_start(&self) {
        let config = self.env.config;
        let o = &config.options;
        self.env.sink.notice(Notice::ConfigSummary(&Summary {
            prompt: &config.prompt,
            prompt_file: config.prompt_file.as_deref(),
            completion_promise: &o.completion_promise,
            task_promise: o.tasks.then_some(o.task_promise.as_str()),
            min_iterations: o.min_iterations,
            max_iterations: o.max_iterations,
            agent: config.agent.display_name(),
            model: o.model.as_deref(),
            fallback: config.fallback.iter().map(RotationStep::label).collect(),
            opencode_plugins_disabled: o.no_plugins
                && config.agent.kind() == Some(AgentKind::OpenCode),
            allow_all: o.allow_all,
            commit: o.commit,
            git: self.env.repo.is_some(),
            resumed_at: self.resumed.then_some(self.state.iteration),
        }));
        let steps = &self.env.steps;
        self.env.sink.emit(LoopEvent::RunStarted {
            agent: config.agent.id().to_owned(),
            model: o.model.clone(),
            rotation: (steps.rotation.iter())
                .map(|step| step.spec.id().to_owned())
                .collect(),
            fallback: steps.fallback.iter().map(|step| step.key()).collect(),
            min_iterations: o.min_iterations,
            max_iterations: o.max_iterations,
            tasks: o.tasks,
            iteration: self.state.iteration,
            resumed: self.resumed,
        });
    }

    /// Ends the loop: completion removes the state, every other stop keeps it for `--resume`.
    pub(super) fn finish(&mut self, stop: &Stop) -> anyhow::Result<ExitStatus> {
        self.commit_own_files();
        let total = self.history.total_duration_ms;
        let reason = stop.reason(self.state.iteration);
        if let Stop::Completed { iteration } = stop {
            self.env.sink.emit(LoopEvent::Completed {
                iteration: *iteration,
            });
            self.env.sink.notice(Notice::Ended(Ending::Completed {
                tag: &self.env.promises.completion.tag(),
                iterations: *iteration,
                total_ms: total,
            }));
            storage::remove_file(&self.env.dir.state())?;
            storage::remove_file(&self.env.dir.context())?;
        } else {
            if matches!(stop, Stop::Interrupted) {
                self.announce_stop();
            }
            self.env.sink.notice(Notice::Ended(ending(stop, total)));
            self.state.active = false;
            self.state.stopped_at = Some(crate::model::now());
            self.state.stop_reason = Some(reason.clone());
            self.state.stop_kind = Some(stop.kind());
            self.save_state()?;
            self.env.sink.notice(Notice::ResumeHint {
                iteration: super::resume::next_iteration(&self.history, self.state.iteration),
                limit_reached: matches!(stop, Stop::MaxIterations(_)),
            });
        }
        self.env.sink.emit(LoopEvent::RunEnded(RunEnd {
            reason,
            stop: stop.kind(),
            exit_code: stop.status().code(),
            iterations: u32::try_from(self.history.iteration_count()).unwrap_or(u32::MAX),
            // Wall time over all sessions: agent runs, verification, waits and pauses.
            total_duration_ms: crate::config::millis(self.runtime()),
            tokens: (self.history.total_tokens.total() > 0).then_some(self.history.total_tokens),
            cost_usd: self.history.total_cost_usd,
            agents: self.history.agents.clone(),
        }));
        Ok(stop.status())
    }

    /// Commits the agent's work of an iteration, with ralph's own files riding along. `last`:
    /// the loop ends with its task done, and a `--worker` pushes the task's branch itself, in
    /// the one push that marks its claim ready to merge.
    pub(super) fn commit(&mut self, iteration: u32, last: bool) {
        if !self.env.config.options.commit || self.conflicts_unresolved() {
            return;
        }
        match self.commit_work(&super::record::iteration_commit_message(iteration)) {
            Some(Ok(Some(hash))) => {
                self.env.sink.notice(Notice::Committed {
                    iteration,
                    hash: &hash,
                });
                if !last {
                    self.publish();
                }
            }
            Some(Err(reason)) => self.env.sink.notice(Notice::CommitFailed(&reason)),
            Some(Ok(None)) | None => {}
        }
    }

    /// A task loop handed a merge of the base: whether conflict markers are left in the files it
    /// was handed (said once per commit refused). Nothing is committed then — not over
    /// `MERGE_HEAD`, not a file holding markers — and the agent is told (the completion refused).
    pub(super) fn conflicts_unresolved(&self) -> bool {
        let Some(task) = self
            .env
            .shape
            .task_loop()
            .filter(|t| !t.conflicts.is_empty())
        else {
            return false;
        };
        let root = self.env.repo.as_ref().map_or(self.env.cwd, Repo::root);
        let left: Vec<String> = (crate::verify::marked(root, &task.conflicts).into_iter())
            .cloned()
            .collect();
        if !left.is_empty() {
            self.env.sink.notice(Notice::ConflictsNotCommitted(&left));
        }
        !left.is_empty()
    }

    /// A `--worker`'s task branch goes to the remote after every commit, with its claim
    /// unchanged there (one atomic push): a worker that lost its claim pushes nothing.
    fn publish(&self) {
        let (Some(task), Some(repo)) = (self.env.shape.task_loop(), &self.env.repo) else {
            return;
        };
        let Some(publish) = &task.publish else {
            return;
        };
        // Held while the branch is pushed: the heartbeat refreshes the claim before or after.
        let held = publish.fence.lock();
        let Some(claim) = held.as_deref() else {
            self.env.sink.notice(Notice::ClaimLostNoPush);
            return;
        };
        let id = &task.task_id;
        match repo.push_branch_fenced(
            &publish.remote,
            &task.branch(),
            (&crate::git::claim_ref(id), claim),
        ) {
            Ok(crate::git::Pushed::Done) => {}
            // The claim moved: taken over (the heartbeat will stop the loop).
            Ok(crate::git::Pushed::Moved) => self.env.sink.notice(Notice::ClaimLostNoPush),
            Err(reason) => self.env.sink.notice(Notice::PushFailed(&reason)),
        }
    }

    /// At the end of the loop: ralph's own files (progress log, task file) that no commit of
    /// work took along get one commit, so the tree is not left dirty by ralph.
    fn commit_own_files(&self) {
        if !self.env.config.options.commit {
            return;
        }
        let Some(repo) = &self.env.repo else { return };
        if repo.own_files_committed(&self.tree) {
            return;
        }
        let names = [
            progress::PROGRESS_FILE,
            storage::TASKS_FILE,
            storage::GITIGNORE_FILE,
        ];
        match repo.commit_own_files(&names, OWN_FILES_COMMIT) {
            Ok(Some(hash)) => self.env.sink.notice(Notice::ProgressCommitted(&hash)),
            Ok(None) => {}
            Err(reason) => self.env.sink.notice(Notice::CommitFailed(&reason)),
        }
    }

    /// ralph could not go on (a write failed: the disk is full, a file became a directory):
    /// record the stop in the state while that is still possible, so `--status` tells what
    /// happened instead of reporting a crash. The error itself is printed by `main`.
    fn record_own_failure(&mut self, err: &anyhow::Error) {
        self.state.active = false;
        self.state.agent_group = None;
        self.state.stopped_at = Some(crate::model::now());
        self.state.stop_reason = Some(format!("ralph failed: {err:#}"));
        self.state.stop_kind = Some(crate::model::StopKind::RalphFailed);
        let _ = self.save_state();
    }
}

/// How a stop other than completion is told.
fn ending(stop: &Stop, total_ms: u64) -> Ending<'_> {
    match stop {
        Stop::MaxIterations(max) => Ending::MaxIterations {
            max: *max,
            total_ms,
        },
        Stop::Aborted { message } => Ending::Aborted { message },
        Stop::AgentFailed { failure, .. } => Ending::AgentFailed(failure),
        Stop::LegacyPlugin => Ending::LegacyPlugin,
        Stop::Blocked(tasks) => Ending::Blocked(tasks),
        _ => Ending::Other,
    }
}

/// The message of the commit of ralph's own files at the end of a loop.
const OWN_FILES_COMMIT: &str = "Ralph: progress log";
