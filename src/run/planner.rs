//! The planning call. A run given a spec (`--parallel N` or `--tasks`) and no task list first
//! asks its agent for a plan (`crate::planning`): the plan is checked, sent back once with its
//! problems, written to the task file and committed as `Ralph: plan — N tasks`, then run. Two
//! refused plans end the run (exit 1) with the answers kept in `.ralph/plan-rejected.json`.

use std::path::Path;
use std::time::Duration;

use crate::agents::AgentSpec;
use crate::config::RunConfig;
use crate::error::fail;
use crate::event::{LoopEvent, PlannedTask};
use crate::exit::ExitStatus;
use crate::git::Repo;
use crate::planning::{self, Plan};
use crate::signal::StopFlag;
use crate::storage::history::AgentCall;
use crate::storage::logs::{self, IterationLog};
use crate::storage::tasks::{self, TaskList};
use crate::storage::{self, RalphDir, progress};
use crate::stream::{self, RunOptions};
use crate::transcript::Transcript;

use super::Knobs;
use super::sink::{Place, Scope, Sink};

/// `ralph --plan`: the prompt planned into the task list and shown; nothing is committed and no
/// task runs. A list that has tasks already is left as it is.
pub(crate) fn plan_only(
    config: &RunConfig,
    cwd: &Path,
    dir: &RalphDir,
    knobs: &Knobs,
) -> anyhow::Result<ExitStatus> {
    let existing = storage::read_text(&dir.tasks())?.unwrap_or_default();
    let list = TaskList::parse(&existing);
    if !list.is_empty() && !config.replan {
        return Err(fail(format!(
            "{} has {} task{} already; --plan writes a plan only into an empty list. Add --replan to keep the done tasks and replace the others, or remove them (ralph --remove-task N), then plan again",
            dir.tasks().display(),
            list.tasks.len(),
            plural(list.tasks.len())
        ))
        .into());
    }
    dir.ensure()?;
    let mut config = config.clone();
    config.options.commit = false;
    let repo = Repo::discover(cwd);
    let place = Place {
        cwd,
        dir,
        repo: repo.as_ref(),
        home: dir,
    };
    let sink = Sink::for_run(&config, &place, None, Scope::Run);
    let planner = Planner {
        config: &config,
        cwd,
        repo: repo.as_ref(),
        dir,
        home: dir,
        sink: &sink,
        stop: &StopFlag::default(),
        knobs,
    };
    let (mut calls, refined) = planner.refine_if_asked()?;
    let config = refined.as_ref().unwrap_or(&config);
    calls.extend(Planner { config, ..planner }.plan()?);
    record_calls(dir, calls)?;
    Ok(ExitStatus::Success)
}

/// Adds `calls` to the history in `dir` (as it is: no run resets it after them).
fn record_calls(dir: &RalphDir, calls: Vec<AgentCall>) -> anyhow::Result<()> {
    let path = dir.history();
    let mut history = storage::history::load(&path).ok().unwrap_or_default();
    calls.into_iter().for_each(|call| history.add_call(call));
    storage::history::save(&path, &history)
}

/// The folder of the planning calls' logs under `.ralph/logs/` (`ralph --log plan` shows the
/// last), and their kind in the history.
const PLAN_LOGS: &str = "plan";

use storage::PLANNED_PROMPT_FILE as PROMPT_FILE;

/// Whether the user can be asked: stdin and stdout are a terminal.
fn interactive() -> bool {
    use std::io::IsTerminal as _;
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// Plans first when a run must (see [`needed`]; not on `--resume`): the planning calls, for the
/// run's history and budgets.
pub(super) fn plan_first(
    config: &RunConfig,
    place: &Place<'_>,
    sink: &Sink,
    (stop, knobs): (&StopFlag, &Knobs),
    resumed: bool,
) -> anyhow::Result<(Vec<AgentCall>, Option<RunConfig>)> {
    if resumed {
        return Ok((Vec::new(), None));
    }
    let planner = Planner {
        config,
        cwd: place.cwd,
        repo: place.repo,
        dir: place.dir,
        home: place.dir,
        sink,
        stop,
        knobs,
    };
    let (mut calls, refined) = planner.refine_if_asked()?;
    let config = refined.as_ref().unwrap_or(config);
    if needed(config, place.dir) {
        calls.extend(Planner { config, ..planner }.plan()?);
    }
    Ok((calls, refined))
}

/// What `--dry-run` shows of the planning step a run would take first, if it takes one: the
/// planner (its display name) and the planning prompt; `Err`: why the planner cannot run.
pub(crate) fn preview(
    config: &RunConfig,
    cwd: &Path,
    dir: &RalphDir,
) -> Option<Result<(String, String), String>> {
    if !needed(config, dir) {
        return None;
    }
    let (_, done) = if config.replan {
        done_tasks(dir)
    } else {
        (Vec::new(), Vec::new())
    };
    let prompt = planning::prompt(&config.prompt, &done, None);
    Some(planner_step(config, cwd).map(|step| (step.spec.display_name().to_owned(), prompt)))
}

/// Before a run that plans first: the planner must be there (one line, exit 1), or the run is
/// refused before anything is asked of an agent.
pub(crate) fn check_planner(config: &RunConfig, cwd: &Path, dir: &RalphDir) -> anyhow::Result<()> {
    if needed(config, dir) {
        planner_step(config, cwd).map_err(fail)?;
    }
    Ok(())
}

/// The planning call's agent: `--plan-agent`, else the run's first.
fn planner_step(config: &RunConfig, cwd: &Path) -> Result<std::rc::Rc<super::plan::Step>, String> {
    let Some(entry) = config.options.plan_agent.0.first() else {
        let steps = super::plan::steps(config, cwd)?;
        let first = steps.rotation.into_iter().next();
        return first.ok_or_else(|| "no agent to plan with".to_owned());
    };
    let spec = AgentSpec::resolve(&entry.agent, &config.custom_agents)
        .map_err(|why| format!("--plan-agent: {why}"))?;
    super::plan::step(config, spec, entry.model.clone(), cwd)
}

/// Whether the run must plan first: it runs a task list, has a prompt, and the list has no task.
pub(crate) fn needed(config: &RunConfig, dir: &RalphDir) -> bool {
    let options = &config.options;
    let runs_tasks = options.parallel.max > 0 || options.tasks;
    runs_tasks
        && !config.prompt.trim().is_empty()
        && (config.replan
            || storage::read_text(&dir.tasks())
                .ok()
                .flatten()
                .is_none_or(|text| TaskList::parse(&text).is_empty()))
}

/// The tasks done already (`--replan` keeps them): their ids, and `id: text` for the planner.
fn done_tasks(dir: &RalphDir) -> (Vec<String>, Vec<String>) {
    let text = storage::read_text(&dir.tasks())
        .ok()
        .flatten()
        .unwrap_or_default();
    let list = TaskList::parse(&text);
    let ids = tasks::task_ids(&list);
    (list.tasks.iter().zip(ids))
        .filter(|(task, _)| task.status == tasks::TaskStatus::Complete)
        .map(|(task, id)| (id.clone(), format!("{id}: {}", task.text)))
        .unzip()
}

/// Where a run plans: its configuration and folders, what it reports to, and how it is stopped.
pub(crate) struct Planner<'a> {
    pub(crate) config: &'a RunConfig,
    pub(crate) cwd: &'a Path,
    /// The repository around `cwd`, where the plan is committed (none: not committed).
    pub(crate) repo: Option<&'a Repo>,
    /// Where the plan is written (the task list) and the prompt kept.
    pub(crate) dir: &'a RalphDir,
    /// Where the calls are logged and recorded: the run's `.ralph/` (a worker plans in its
    /// integration worktree, whose `.ralph/` goes with it).
    pub(crate) home: &'a RalphDir,
    pub(crate) sink: &'a Sink,
    pub(crate) stop: &'a StopFlag,
    pub(crate) knobs: &'a Knobs,
}

impl Planner<'_> {
    /// With `--refine`: the refine call, and the run's configuration with the prompt to use.
    fn refine_if_asked(&self) -> anyhow::Result<(Vec<AgentCall>, Option<RunConfig>)> {
        if !self.config.refine {
            return Ok((Vec::new(), None));
        }
        let (prompt, call) = self.refine()?;
        let refined = RunConfig {
            prompt,
            ..self.config.clone()
        };
        Ok((vec![call], Some(refined)))
    }

    /// Plans the spec into the task file and commits it (see the module's doc).
    pub(crate) fn plan(&self) -> anyhow::Result<Vec<AgentCall>> {
        let custom = &self.config.custom_agents;
        let known = |name: &str| AgentSpec::resolve(name, custom).is_ok();
        let mut answers = Vec::new();
        let mut calls = Vec::new();
        let mut problems: Option<Vec<String>> = None;
        let (kept, done) = if self.config.replan {
            done_tasks(self.dir)
        } else {
            (Vec::new(), Vec::new())
        };
        for attempt in 1..=2 {
            let prompt = planning::prompt(&self.config.prompt, &done, problems.as_deref());
            let (answer, call) = self.ask(&prompt, (PLAN_LOGS, attempt))?;
            calls.push(call);
            let checked = planning::find(&answer)
                .ok_or_else(|| {
                    vec![
                        "the answer holds no JSON array of tasks (nor a plan in .ralph/plan.json)"
                            .to_owned(),
                    ]
                })
                .and_then(|value| planning::check(&value, &known, &kept));
            answers.push(answer);
            match checked {
                Ok(plan) => return self.land(&plan).map(|()| calls),
                Err(found) => problems = Some(found),
            }
        }
        // The refused calls cost what they cost: kept with the history there is.
        record_calls(self.home, calls)?;
        let problems = problems.unwrap_or_default();
        let kept = self.home.file(planning::REJECTED_FILE);
        let record = serde_json::json!({ "problems": problems, "answers": answers });
        storage::write_json(&kept, &record)?;
        Err(fail(format!(
            "the agent's plan was refused twice: {}; its answers are in {}. Fix the spec, or write the task list yourself (ralph --add-task), then run again",
            problems.join("; "),
            kept.display()
        ))
        .into())
    }

    /// Runs the agent once on `prompt` (the `attempt`-th call of `kind`, `plan` or `refine`): its
    /// answer (for a plan, the file it wrote wins) and the call's record (its log:
    /// `.ralph/logs/<kind>/`).
    fn ask(
        &self,
        prompt: &str,
        (kind, attempt): (&str, u32),
    ) -> anyhow::Result<(String, AgentCall)> {
        let options = &self.config.options;
        let step = self.step()?;
        let written = self.cwd.join(planning::PLAN_FILE);
        let _ = std::fs::remove_file(&written);
        let place = (self.dir, self.cwd);
        let command = super::plan::agent_command(self.config, place, &step, prompt, (None, None))?;
        // The planning call runs in the loop's sandbox too, with the plan file writable.
        let sandbox = super::sandboxed::sandbox_for(
            self.config,
            (self.cwd, true),
            self.repo,
            self.dir,
            [&*step],
        )?;
        let command = match &sandbox {
            Some(sandbox) => sandbox.wrap_writing(&command, Some(&step.spec), &[&written]),
            None => command,
        };
        let display = super::plan::display_options(self.config, self.knobs, &step);
        let format = display.format;
        let start = logs::Start {
            iteration: attempt,
            agent: step.spec.id().to_owned(),
            format: format.name().to_owned(),
            task: Some(kind.to_owned()),
            task_fingerprint: None,
        };
        let limit = options.log_max_size.unwrap_or(u64::MAX);
        let (log, log_name) = IterationLog::create(&self.home.logs().join(kind), start, limit)
            .ok()
            .unzip();
        let mut transcript = Transcript::new(step.agent.as_ref(), display, Vec::new(), false)?
            .keeping_answer()
            .with_log(log)
            .with_voice(self.voice());
        let run = RunOptions {
            grace: self.config.options.kill_grace,
            leak_timeout: self.knobs.leak_timeout,
            tick: Duration::from_millis(100),
            run_timeout: options.iteration_timeout,
            idle_timeout: options.idle_timeout,
            completion_grace: None,
        };
        let (started_at, started) = (crate::model::now(), std::time::Instant::now());
        let outcome = stream::run(&command, self.cwd, &run, self.stop, &mut transcript)?;
        if self.stop.is_stopping() {
            return Err(fail(format!(
                "stopped during the {kind} call; nothing was written"
            ))
            .into());
        }
        transcript.end_log(outcome.exit_code);
        let answer = transcript.answer().to_owned();
        let findings = transcript.finish();
        let call = AgentCall {
            kind: kind.to_owned(),
            agent: step.spec.id().to_owned(),
            model: step.model.clone(),
            started_at,
            duration_ms: crate::config::millis(started.elapsed()),
            exit_code: outcome.exit_code,
            tokens: findings.usage,
            cost_usd: findings.cost,
            log: log_name.map(|name| format!("{}/{kind}/{name}", logs::LOGS_DIR)),
        };
        let plan = std::fs::read_to_string(&written)
            .ok()
            .filter(|text| kind == PLAN_LOGS && !text.trim().is_empty());
        let _ = std::fs::remove_file(&written);
        Ok((plan.unwrap_or(answer), call))
    }

    /// `--refine`: the agent restates the prompt as a spec; on a terminal (without `--yes`) the
    /// user takes it, keeps the original, or edits it. The prompt to use, saved to
    /// `.ralph/prompt.md`, and the call's record.
    fn refine(&self) -> anyhow::Result<(String, AgentCall)> {
        let original = self.config.prompt.clone();
        let (answer, call) = self.ask(&planning::refine_prompt(&original), ("refine", 1))?;
        let accepted = match planning::refined(&answer) {
            None => original,
            Some(spec) if self.config.yes || self.config.json || !interactive() => spec,
            Some(spec) => self.choose(spec, original)?,
        };
        storage::write_atomic(&self.dir.file(PROMPT_FILE), accepted.as_bytes())?;
        Ok((accepted, call))
    }

    /// Asks `Use this prompt? [Y/n/e]` about `spec`: it, `original`, or `spec` as edited in
    /// `$VISUAL`/`$EDITOR` (vi when neither is set).
    fn choose(&self, spec: String, original: String) -> anyhow::Result<String> {
        crate::output::refine_question(&spec);
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        match line.trim().to_lowercase().as_str() {
            "n" | "no" => Ok(original),
            "e" | "edit" => {
                let path = self.dir.file(PROMPT_FILE);
                storage::write_atomic(&path, spec.as_bytes())?;
                let editor = (std::env::var("VISUAL").ok())
                    .or_else(|| std::env::var("EDITOR").ok())
                    .filter(|editor| !editor.trim().is_empty())
                    .unwrap_or_else(|| "vi".to_owned());
                let status = std::process::Command::new("sh")
                    .args(["-c", &format!("{editor} \"$1\""), "sh"])
                    .arg(&path)
                    .status()
                    .map_err(|err| fail(format!("could not start the editor {editor}: {err}")))?;
                if !status.success() {
                    return Err(fail(format!(
                        "the editor {editor} failed ({status}); the restated prompt is in {}",
                        path.display()
                    ))
                    .into());
                }
                Ok(std::fs::read_to_string(&path)?.trim().to_owned())
            }
            _ => Ok(spec),
        }
    }

    /// The agent that plans: `--plan-agent`'s first, else the run's (the first of a rotation).
    /// The answer is a plan, shown as ralph's own table once it is checked: the agent's output
    /// is left out unless `--verbose` (the log keeps it: `ralph --log plan`).
    fn voice(&self) -> crate::output::Voice {
        if self.config.options.verbose {
            self.sink.voice().clone()
        } else {
            self.sink.voice().without_agent_output()
        }
    }

    fn step(&self) -> anyhow::Result<std::rc::Rc<super::plan::Step>> {
        Ok(planner_step(self.config, self.cwd).map_err(fail)?)
    }

    /// Writes the plan to the task file, commits it, and tells it; the prompt it was made from
    /// is kept in `.ralph/prompt.md`, for a run of the list given no prompt.
    fn land(&self, plan: &Plan) -> anyhow::Result<()> {
        storage::write_atomic(&self.dir.file(PROMPT_FILE), self.config.prompt.as_bytes())?;
        let replan = self.config.replan;
        tasks::edit(self.dir, |current| {
            let mut text = match current {
                Some(bytes) if !bytes.is_empty() => String::from_utf8_lossy(bytes).into_owned(),
                _ => tasks::new_file_content(),
            };
            if replan {
                text = without_open_tasks(&text);
            }
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push('\n');
            text.push_str(&plan.blocks);
            (Some(text.into_bytes()), ())
        })?;
        let count = plan.list.tasks.len();
        if self.config.options.commit
            && let Some(repo) = self.repo
        {
            self.dir.ignore_own_dirs()?;
            let own = super::preflight::own_files(
                repo,
                &[
                    storage::TASKS_FILE,
                    storage::GITIGNORE_FILE,
                    progress::PROGRESS_FILE,
                ],
            );
            let own: Vec<&str> = own.iter().map(String::as_str).collect();
            repo.commit_paths(
                &own,
                &format!("Ralph: plan — {count} task{}", plural(count)),
            )
            .map_err(fail)?;
        }
        let tasks = (plan.list.tasks.iter())
            .map(|task| PlannedTask {
                id: task.id().unwrap_or_default().to_owned(),
                content: task.text.clone(),
                blocked_by: task.blocked_by().into_iter().map(str::to_owned).collect(),
            })
            .collect();
        self.sink.emit(LoopEvent::PlanCreated { tasks });
        Ok(())
    }
}

/// The task file without its tasks that are not done (the last first, so numbers hold).
fn without_open_tasks(text: &str) -> String {
    let list = TaskList::parse(text);
    let mut bytes = text.as_bytes().to_vec();
    for task in list.tasks.iter().rev() {
        if task.status != tasks::TaskStatus::Complete
            && let Ok(kept) = tasks::remove_task(&bytes, task.number)
        {
            bytes = kept;
        }
    }
    String::from_utf8_lossy(&bytes).trim_end().to_owned() + "\n"
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}
