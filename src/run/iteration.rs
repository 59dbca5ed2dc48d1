//! One iteration, as a straight pipeline: plan → prompt → command → stream → transcript →
//! outcome → decision → record → commit. Each step is a function of a few lines; the rules are
//! in `decision.rs`.

use std::time::{Duration, Instant};

use crate::agents::{AgentCommand, Failure, FailureKind, ToolServer};
use crate::event::{IterationSummary, LoopEvent, Notice};
use crate::git::{Repo, Snapshot};
use crate::output::format;
use crate::promise::Promise;
use crate::storage::context::{self, Injected};
use crate::storage::logs::{self, IterationLog, LOGS_DIR};
use crate::storage::{RalphDir, state};
use crate::stream::{self, EndedBy, RunOptions};
use crate::transcript::Transcript;

use super::asking::{self, Watch};
use super::decision::{self, Decision, Facts, Next, Stop};
use super::fallback::AfterFailure;
use super::plan::{self, Focus, Step};
use super::record::{self, AgentRun};
use super::{Env, Runner};

/// What the iteration starts from.
struct Planned {
    focus: Option<Focus>,
    tasks: Option<Result<Option<String>, String>>,
    context: Injected,
    before: Option<Option<Snapshot>>,
}

/// Runs iteration `iteration` and says what comes next.
pub(super) fn run(runner: &mut Runner<'_>, iteration: u32) -> anyhow::Result<Next> {
    let planned = match plan(runner)? {
        Ok(planned) => planned,
        Err(stop) => return Ok(Next::Stop(stop)),
    };
    let rules = &runner.env.rules;
    runner.env.sink.notice(Notice::IterationHeader {
        iteration,
        min: rules.min_iterations,
        max: rules.max_iterations,
    });
    let step = plan::step_for(&runner.env.steps.rotation, iteration);
    let step = plan::step_with(
        runner.env.config,
        runner.env.cwd,
        step,
        planned.focus.as_ref(),
    )?;
    let (chain, keys, ran) = chain_for(runner, step);
    let step = std::rc::Rc::clone(&chain[ran]);
    let context_text = planned.context.text();
    let prompt = plan::prompt_for(
        runner.env.config,
        (iteration, step.agent.takes_tools()),
        context_text.as_deref(),
        &runner.feedback,
        (
            planned.tasks.as_ref(),
            runner.env.shape.task_loop().map(plan::task_loop),
        ),
    );
    runner.feedback.clear();
    let command = command(runner, &step, &prompt, planned.focus.as_ref())?;
    runner.env.sink.emit(LoopEvent::IterationStarted {
        iteration,
        agent: step.spec.id().to_owned(),
        model: step.model.clone(),
    });
    if runner.env.stop.is_stopping() {
        return Ok(Next::Stop(Stop::Interrupted));
    }
    let task_promise = planned
        .focus
        .as_ref()
        .and_then(|focus| focus.promise.as_deref())
        .map(|text| Promise::new(text, runner.env.config.options.promise_format));
    let mut run = agent_run(
        runner,
        &step,
        &command,
        planned.before.flatten(),
        (planned.focus.as_ref(), task_promise.as_ref()),
    )?;
    super::protected::put_back(runner, &mut run, planned.focus.as_ref())?;
    let mut facts = outcome(runner, iteration, &run, planned.focus.as_ref());
    fallback(runner, (&chain, &keys, ran), &mut facts);
    if facts.verification.is_some()
        || facts.task_verification.is_some()
        || runner.env.config.options.on_iteration.is_some()
    {
        // Commands ralph runs after the scan (verification, the iteration's hook) may change
        // the tree: the commit and the next iteration look again.
        runner.tree.forget();
    }
    let decision = decision::decide(&runner.env.rules, &facts, runner.counters);
    let task_tag = task_promise.map_or_else(|| runner.env.promises.task.tag(), |p| p.tag());
    if decision.record {
        record::iteration(runner, (&step, &task_tag), &run, &facts, &decision)?;
    }
    let focus = planned.focus.as_ref();
    apply(
        runner,
        &facts,
        &decision,
        (focus, &task_tag),
        planned.context,
    )?;
    Ok(decision.next)
}

/// Plan: the task (attempt counted), the pending context and the tree as the agent finds them.
fn plan(runner: &mut Runner<'_>) -> anyhow::Result<Result<Planned, Stop>> {
    let env = &runner.env;
    let (focus, tasks) = if let Some(task) = env.shape.task_loop() {
        let plan = plan::task_of_loop(env.dir, &task.task_id)?;
        (plan.focus, Some(plan.content))
    } else if env.rules.tasks {
        match plan::tasks(env.dir, &runner.state.task_attempts, &env.sink)? {
            Ok(plan) => (plan.focus, Some(plan.content)),
            Err(stop) => return Ok(Err(stop)),
        }
    } else {
        (None, None)
    };
    // A retry after a provider failure is not another attempt at the task.
    if let Some(task) = focus.as_ref().filter(|_| runner.counters.retries == 0) {
        let attempts = runner
            .state
            .task_attempts
            .entry(task.key.clone())
            .or_default();
        *attempts = attempts.saturating_add(1);
        runner.save_state_unsynced()?;
    }
    let context = Injected {
        own: context::pending(&runner.env.dir.context())?,
        shared: shared_context(runner),
    };
    let before = (runner.env.repo.as_ref()).map(|repo| repo.current(&mut runner.tree));
    Ok(Ok(Planned {
        focus,
        tasks,
        context,
        before,
    }))
}

/// For a task loop, the run's pending context meant for it (a warning, and none, when it cannot
/// be read: it stays pending for the next iteration).
fn shared_context(runner: &Runner<'_>) -> Vec<context::Section> {
    let Some(task) = runner.env.shape.task_loop() else {
        return Vec::new();
    };
    match context::shared_for(&task.home, &task.task_id) {
        Ok(shared) => {
            if !shared.is_empty() {
                (runner.env.sink).notice(Notice::ContextGiven {
                    hints: shared.len(),
                });
            }
            shared
        }
        Err(err) => {
            (runner.env.sink).notice(Notice::ContextNotGiven(&format!("{err:#}")));
            Vec::new()
        }
    }
}

/// The run's home `.ralph/` (a task loop's run's) and the task the loop works on, if any:
/// where its agent's questions wait, and whose they are.
fn asker(runner: &Runner<'_>, focus: Option<&Focus>) -> (RalphDir, Option<String>) {
    match runner.env.shape.task_loop() {
        Some(task) => (task.home.clone(), Some(task.task_id.clone())),
        None => (runner.env.dir.clone(), focus.map(|focus| focus.key.clone())),
    }
}

/// ralph's tools for this iteration's agent (`ralph __agent-tools`), unless `--no-agent-tools`.
fn tool_server(runner: &Runner<'_>, step: &Step, focus: Option<&Focus>) -> Option<ToolServer> {
    let options = &runner.env.config.options;
    if !options.agent_tools || !step.agent.takes_tools() {
        return None;
    }
    let absolute =
        |dir: &RalphDir| std::path::absolute(dir.root()).unwrap_or_else(|_| dir.root().to_owned());
    let (home, task) = asker(runner, focus);
    let binding = crate::agents::ToolBinding {
        home: absolute(&home),
        dir: absolute(runner.env.dir),
        task,
        iteration: runner.state.iteration,
        ask_timeout: options.ask_timeout,
    };
    binding.server()
}

/// Command: the agent's command line for the prompt.
fn command(
    runner: &Runner<'_>,
    step: &Step,
    prompt: &str,
    focus: Option<&Focus>,
) -> anyhow::Result<AgentCommand> {
    let env = &runner.env;
    let usage_file = match &env.sandbox {
        // The agent replaces the file as it writes it: in a folder it may write.
        Some(sandbox) => sandbox.private_file(&format!("usage-{}.json", runner.state.iteration)),
        None => crate::agents::usage_file_path(runner.state.iteration),
    };
    let tools = tool_server(runner, step, focus);
    let command = plan::agent_command(
        env.config,
        (env.dir, env.cwd),
        step,
        prompt,
        (Some(&usage_file), tools.as_ref()),
    )?;
    Ok(match &env.sandbox {
        Some(sandbox) => sandbox.wrap(&command, Some(&step.spec)),
        None => command,
    })
}

/// The watch on the questions this iteration's agent asks (a worker's wait on its remote too).
fn watch<'a>(runner: &'a Runner<'_>, focus: Option<&Focus>) -> Watch<'a> {
    let env = &runner.env;
    let (home, task) = asker(runner, focus);
    let publish = env.shape.task_loop().and_then(|task| task.publish.as_ref());
    let remote = (env.repo.clone().zip(publish))
        .map(|(repo, publish)| asking::Remote::new(repo, publish.remote.clone()));
    Watch::new(home, (task, runner.state.iteration), &env.sink, remote)
}

/// Stream and transcript: runs the agent, shows its output, and finds what it said and did.
fn agent_run(
    runner: &mut Runner<'_>,
    step: &Step,
    command: &AgentCommand,
    before: Option<Snapshot>,
    (focus, task_promise): (Option<&Focus>, Option<&Promise>),
) -> anyhow::Result<AgentRun> {
    let (env, options) = (&runner.env, &runner.env.config.options);
    let (started_at, started) = (crate::model::now(), Instant::now());
    let task_promise = task_promise.unwrap_or(&env.promises.task);
    let mut promises = vec![&env.promises.completion, task_promise];
    promises.extend(env.promises.abort.as_ref());
    let (log, log_name) = open_log(runner, step, focus);
    let transcript = Transcript::new(
        step.agent.as_ref(),
        plan::display_options(env.config, env.knobs, step),
        promises,
        options.promise_anywhere,
    )?
    .with_log(log)
    .with_voice(env.sink.voice().clone())
    .on_tools(|tools| {
        env.sink.emit(LoopEvent::Tools {
            tools: tools.clone(),
        });
    })
    .on_spawn({
        // Recorded so that `--resume` or `--reset` after a killed ralph can stop this agent.
        let mut state = runner.state.clone();
        let path = env.dir.state();
        move |group| {
            state.agent_group = Some(group);
            let _ = state::save_unsynced(&path, &state);
        }
    });
    let watch = std::rc::Rc::new(std::cell::RefCell::new(watch(runner, focus)));
    let looking = std::rc::Rc::clone(&watch);
    let mut transcript = transcript.on_asking(move |now| looking.borrow_mut().look(now));
    let run_options = run_options(env, focus);
    let run_timeout = run_options.run_timeout;
    let outcome = stream::run(command, env.cwd, &run_options, env.stop, &mut transcript);
    let questions = watch.borrow_mut().finish();
    let mut outcome = outcome?;
    let graced = outcome.ended_by == Some(EndedBy::CompletionGrace);
    if graced {
        // The promise was said: the agent's work is done, whatever ending it took to stop it.
        outcome.exit_code = 0;
        outcome.ended_by = None;
    }
    if outcome.ended_by.is_none() {
        transcript.agent_exited(outcome.exit_code, usage_report(command).as_deref());
    }
    transcript.end_log(outcome.exit_code);
    let findings = transcript.finish();
    if graced {
        env.sink.notice(Notice::CompletionGraceOver {
            iteration: runner.state.iteration,
            grace: options.completion_grace,
        });
    }
    let (head, files) = changed(env.repo.as_ref(), &mut runner.tree, before);
    runner.announced_stop |= findings.stop_announced;
    let (blocked, out_of_memory) = sandbox_findings(env, runner.state.iteration, outcome.exit_code);
    Ok(AgentRun {
        findings,
        run_timeout,
        exit_code: outcome.exit_code,
        ended_by: outcome.ended_by,
        stop_signal: outcome.stop_signal,
        started_at,
        elapsed: started.elapsed(),
        files,
        log: log_name,
        blocked,
        out_of_memory,
        head,
        protected: Vec::new(),
        questions,
    })
}

/// HEAD when the iteration started (its scan `before`), and the paths changed since.
fn changed(
    repo: Option<&Repo>,
    tree: &mut crate::git::Tree,
    before: Option<Snapshot>,
) -> (Option<String>, Vec<String>) {
    let (Some(repo), Some(before)) = (repo, before) else {
        return (None, Vec::new());
    };
    let files = (repo.scan(tree))
        .map(|after| repo.changed_files(&before, &after))
        .unwrap_or_default();
    (before.head().map(str::to_owned), files)
}

/// What the sandbox saw of the iteration's agent (exited with `exit_code`), said as it is found:
/// the hosts it refused, and whether the memory limit killed the agent.
fn sandbox_findings(
    env: &super::Env<'_>,
    iteration: u32,
    exit_code: i32,
) -> (std::collections::BTreeMap<String, u32>, bool) {
    let Some(sandbox) = &env.sandbox else {
        return Default::default();
    };
    let blocked = sandbox.take_blocked();
    if !blocked.is_empty() {
        env.sink.notice(Notice::SandboxBlocked { hosts: &blocked });
    }
    let limit = sandbox.out_of_memory(exit_code);
    if let Some(limit) = &limit {
        env.sink.notice(Notice::OutOfMemory { iteration, limit });
    }
    (blocked, limit.is_some())
}

/// How the agent is run: the task's timeout or `--iteration-timeout`, and the other limits.
fn run_options(env: &Env<'_>, focus: Option<&Focus>) -> RunOptions {
    let options = &env.config.options;
    RunOptions {
        grace: options.kill_grace,
        leak_timeout: env.knobs.leak_timeout,
        tick: Duration::from_millis(100),
        run_timeout: focus
            .and_then(|focus| focus.timeout)
            .or(options.iteration_timeout),
        idle_timeout: options.idle_timeout,
        completion_grace: Some(options.completion_grace),
    }
}

/// The usage report the agent wrote, if it writes one (read once: the file is removed).
fn usage_report(command: &AgentCommand) -> Option<String> {
    let path = command.usage_file.as_ref()?;
    let text = std::fs::read_to_string(path).ok();
    let _ = std::fs::remove_file(path);
    text
}

/// The iteration's log (in `.ralph/logs/`, or the task's folder there for a task loop) and its
/// name relative to `.ralph/`; none, with a warning, when it cannot be created.
fn open_log(
    runner: &Runner<'_>,
    step: &Step,
    focus: Option<&Focus>,
) -> (Option<IterationLog>, Option<String>) {
    let env = &runner.env;
    let options = &env.config.options;
    let iteration = runner.state.iteration;
    let (dir, folder) = match env.shape.task_loop() {
        Some(task) => (task.logs(), format!("{LOGS_DIR}/{}/", task.task_id)),
        None => (env.dir.logs(), format!("{LOGS_DIR}/")),
    };
    let start = logs::Start {
        iteration,
        agent: step.spec.id().to_owned(),
        format: step.spec.format(options.output_format).name().to_owned(),
        task: focus.map(|focus| focus.key.clone()),
        task_fingerprint: focus.map(|focus| crate::storage::identity::fingerprint(&focus.text)),
    };
    let limit = options.log_max_size.unwrap_or(u64::MAX);
    match IterationLog::create(&dir, start, limit) {
        Ok((log, name)) => {
            logs::prune(&dir, options.keep_logs.max(1));
            (Some(log), Some(folder + &name))
        }
        Err(err) => {
            env.sink.notice(Notice::LogUnavailable {
                dir: &dir,
                error: &err,
            });
            (None, None)
        }
    }
}

/// Outcome: the facts of the iteration, verification included when a claim needs it.
fn outcome(runner: &Runner<'_>, iteration: u32, run: &AgentRun, focus: Option<&Focus>) -> Facts {
    let env = &runner.env;
    let seen = &run.findings.promises;
    let mut facts = Facts {
        iteration,
        exit_code: run.exit_code,
        interrupted: run.ended_by == Some(EndedBy::User),
        completion: seen.first().copied().unwrap_or(false),
        task_done: env.rules.tasks && seen.get(1).copied().unwrap_or(false),
        abort: seen.get(2).copied().unwrap_or(false),
        failure: timeout_failure(runner, iteration, run).or_else(|| run.findings.failure.clone()),
        switch_agent: false,
        legacy_plugin: run.findings.legacy_plugin,
        files_changed: !run.files.is_empty(),
        open_tasks: Vec::new(),
        tasks_unreadable: None,
        task: focus.map(|task| task.text.clone()),
        final_text: run.findings.final_text.clone(),
        verification: None,
        task_verification: None,
        protected_changes: run.protected.clone(),
        holdout: None,
    };
    if facts.interrupted {
        return facts;
    }
    env.sink.notice(Notice::IterationSummary(&IterationSummary {
        iteration,
        elapsed: run.elapsed,
        tools: &run.findings.tools,
        exit_code: run.exit_code,
        completion_detected: facts.completion,
        usage: run.findings.usage,
        cost: run.findings.cost,
        failure: facts.failure.as_ref(),
    }));
    super::checks::judge(runner, &mut facts, focus);
    facts
}

/// The iteration's chain (its step, then the `--fallback` agents), their keys, and the index of
/// the one that runs: the first not out of quota.
fn chain_for(
    runner: &Runner<'_>,
    step: std::rc::Rc<Step>,
) -> (Vec<std::rc::Rc<Step>>, Vec<String>, usize) {
    let chain = plan::chain(step, &runner.env.steps.fallback);
    let keys: Vec<String> = chain.iter().map(|step| step.key()).collect();
    let ran = runner.limits.pick(&keys, crate::model::now());
    (chain, keys, ran)
}

/// `--fallback`: a usage limit far from its reset, or a fallback agent's failed credentials,
/// hands the iteration to the next agent of the chain; when all are limited, the retry waits
/// for the earliest reset.
fn fallback(
    runner: &mut Runner<'_>,
    (chain, keys, ran): (&[std::rc::Rc<Step>], &[String], usize),
    facts: &mut Facts,
) {
    let Some(failure) = facts.failure.as_mut() else {
        return;
    };
    let after = runner.env.config.options.fallback_after;
    let now = crate::model::now();
    match runner
        .limits
        .after_failure(keys, ran, failure, (now, after))
    {
        AfterFailure::Usual => {}
        AfterFailure::Switch { to, reason } => {
            let (from, to) = (
                chain[ran].spec.display_name(),
                chain[to].spec.display_name(),
            );
            runner.env.sink.emit(LoopEvent::Fallback {
                from: from.to_owned(),
                to: to.to_owned(),
                reason: reason.reason(from),
            });
            facts.switch_agent = true;
        }
        AfterFailure::WaitUntil(until) => {
            runner.env.sink.notice(Notice::FallbackAllLimited(until));
            failure.retry_at = until;
        }
    }
}

/// A time limit as the user gave it: `300ms` below a second (not `0s`), else `1m 30s`.
fn limit(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{}ms", duration.as_millis())
    } else {
        format::long_duration(duration)
    }
}

/// A timeout ralph enforced, as a failure of the iteration.
fn timeout_failure(runner: &Runner<'_>, iteration: u32, run: &AgentRun) -> Option<Failure> {
    let options = &runner.env.config.options;
    let message = match run.ended_by? {
        EndedBy::IdleTimeout => format!(
            "no output for {}",
            limit(options.idle_timeout.unwrap_or_default())
        ),
        EndedBy::RunTimeout => format!(
            "ran longer than {}",
            limit(run.run_timeout.unwrap_or_default())
        ),
        EndedBy::User | EndedBy::CompletionGrace | EndedBy::TurnOver => return None,
    };
    runner.env.sink.notice(Notice::IterationTimedOut {
        iteration,
        why: &message,
    });
    Some(Failure {
        kind: FailureKind::Timeout,
        status: None,
        message,
        retry_at: None,
    })
}

/// Commit and the rest of the decision's effects: messages, the task reopened, the context used
/// up, the counts kept, the reasons for the next prompt.
fn apply(
    runner: &mut Runner<'_>,
    facts: &Facts,
    decision: &Decision,
    (focus, task_tag): (Option<&Focus>, &str),
    context: Injected,
) -> anyhow::Result<()> {
    runner.counters = decision.counters;
    runner.state.stalled = decision.counters.stalled;
    // An interrupted iteration is recorded, and nothing else follows from it: its hints come
    // again in the next one.
    if !decision.record || facts.interrupted {
        return Ok(());
    }
    // The run's hints reached this recorded iteration's prompt, whatever came of it.
    if let Some(task) = runner.env.shape.task_loop()
        && let Err(err) =
            context::given(&task.home, &task.task_id, facts.iteration, &context.shared)
    {
        (runner.env.sink).notice(Notice::ContextNotGiven(&format!("{err:#}")));
    }
    if let (Some(decision::Refusal::TaskVerification { task, .. }), Some(focus)) =
        (&decision.refusal, focus)
    {
        plan::reopen_task(runner.env.dir, focus)?;
        runner
            .env
            .sink
            .notice(Notice::TaskVerificationFailed { task });
    }
    if facts.task_done && !facts.completion && !runner.env.rules.task_loop {
        runner.env.sink.notice(Notice::TaskCompleted {
            tag: task_tag,
            next_iteration: facts.iteration + 1,
        });
    }
    if decision.consume_context
        && let Some(injected) = &context.own
    {
        let consumed = context::consume(runner.env.dir, injected)?;
        runner.env.sink.notice(Notice::ContextConsumed {
            newer_kept: consumed == context::Consumed::NewerKept,
            edited: consumed == context::Consumed::EditedKept,
        });
    }
    if decision.commit {
        let done = matches!(decision.next, Next::Stop(Stop::Completed { .. }));
        runner.commit(facts.iteration, done);
    }
    Ok(())
}
