//! Record: what an iteration did goes into the history, the progress log and the event stream,
//! and what was refused goes into the next prompt.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::millis;
use crate::event::{LoopEvent, Notice};
use crate::model::Verification;
use crate::prompt::{self, Feedback};
use crate::storage::history::{self, IterationRecord, Struggle};
use crate::storage::progress;
use crate::stream::EndedBy;
use crate::transcript::Findings;

use super::Runner;
use super::decision::{self, Claim, Decision, Facts, Refusal};
use super::plan::Step;

/// How the agent's run went.
pub(super) struct AgentRun {
    pub(super) findings: Findings,
    /// The time limit this run had (the task's `timeout`, else `--iteration-timeout`).
    pub(super) run_timeout: Option<Duration>,
    pub(super) exit_code: i32,
    pub(super) ended_by: Option<EndedBy>,
    /// The signal that ended the agent when ralph stopped it.
    pub(super) stop_signal: Option<&'static str>,
    pub(super) started_at: DateTime<Utc>,
    pub(super) elapsed: Duration,
    pub(super) files: Vec<String>,
    /// The iteration's log, relative to `.ralph/`.
    pub(super) log: Option<String>,
    /// The hosts the sandbox refused the agent, with how often.
    pub(super) blocked: std::collections::BTreeMap<String, u32>,
    /// The agent was killed by the sandbox's memory limit.
    pub(super) out_of_memory: bool,
    /// HEAD when the iteration started.
    pub(super) head: Option<String>,
    /// Protected paths the agent changed: put back, left out of `files`.
    pub(super) protected: Vec<String>,
    /// The questions the agent asked (`ralph_ask`), as they ended.
    pub(super) questions: Vec<crate::storage::questions::Question>,
}

/// Records a finished iteration: history (saved), progress log, event, warnings.
pub(super) fn iteration(
    runner: &mut Runner<'_>,
    (step, task_tag): (&Step, &str),
    run: &AgentRun,
    facts: &Facts,
    decision: &Decision,
) -> anyhow::Result<()> {
    let record = record_of(runner, step, run, facts, decision);
    let struggle = if decision.agent_side {
        Struggle::Update {
            files_tracked: runner.env.rules.files_tracked,
        }
    } else {
        Struggle::Skip
    };
    let entry = progress_entry(&record, decision);
    if let Some(task) = runner.env.shape.task_loop() {
        let tokens = record.tokens.map_or(0, |usage| usage.billable());
        let agent = record.agent.as_deref().unwrap_or_default();
        task.shared.add_iteration(agent, record.cost_usd, tokens);
        task.record_in_base(&record)?;
    }
    // The event reaches the journal, which an agent can read: the holdout checks (their commands
    // and output) stay in the history; `holdout_failed` says how many failed.
    let event = LoopEvent::IterationFinished(Box::new(IterationRecord {
        holdout: Vec::new(),
        ..record.clone()
    }));
    runner.history.record(record, struggle);
    history::save(&runner.env.dir.history(), &runner.history)?;
    progress::append(runner.env.dir, &entry.borrowed())?;
    let indicators = &runner.history.struggle_indicators;
    if decision.agent_side && indicators.should_warn(facts.iteration) {
        runner.env.sink.notice(Notice::Struggle {
            no_progress: indicators.no_progress_iterations,
            short: indicators.short_iterations,
        });
    }
    if facts.interrupted {
        runner.env.sink.emit(event);
        return Ok(());
    }
    if facts.exit_code != 0 && facts.failure.is_none() && !facts.legacy_plugin {
        runner.env.sink.notice(Notice::NonzeroExit {
            agent: step.spec.display_name(),
            code: facts.exit_code,
            goes_on: matches!(decision.next, super::decision::Next::Continue { .. }),
        });
    }
    claim_messages(runner, facts, decision, task_tag);
    // Heard once the history is saved: a hook that asks `ralph --status` sees this iteration.
    runner.env.sink.emit(event);
    Ok(())
}

/// The history record of a finished iteration.
fn record_of(
    runner: &Runner<'_>,
    step: &Step,
    run: &AgentRun,
    facts: &Facts,
    decision: &Decision,
) -> IterationRecord {
    let verification: Vec<Verification> = (facts.verification.iter())
        .chain(&facts.task_verification)
        .flatten()
        .cloned()
        .collect();
    let findings = &run.findings;
    let task_loop = runner.env.shape.task_loop();
    IterationRecord {
        iteration: facts.iteration,
        started_at: run.started_at,
        ended_at: crate::model::now(),
        duration_ms: millis(run.elapsed),
        tools_used: findings.tools.clone(),
        files_modified: run.files.clone(),
        exit_code: run.exit_code,
        // A task loop completes with its task's promise.
        completion_detected: facts.completion || (runner.env.rules.task_loop && facts.task_done),
        errors: findings.errors.clone(),
        tokens: findings.usage,
        cost_usd: findings.cost,
        turns: findings.turns,
        session_id: findings.session_id.clone(),
        stop_reason: findings.stop_reason.clone(),
        stop_signal: run.stop_signal.map(str::to_owned),
        failure: facts.failure.clone(),
        task: facts.task.clone(),
        agent: Some(step.spec.id().to_owned()),
        questions: run.questions.clone(),
        model: step.model.clone(),
        verification,
        completion_refused: (decision.refusal.as_ref())
            .filter(|refusal| !matches!(refusal, Refusal::TaskVerification { .. }))
            .map(Refusal::reason),
        log: run.log.clone(),
        task_id: task_loop.map(|task| task.task_id.clone()),
        branch: task_loop.map(super::TaskLoop::branch),
        sandbox_blocked: run.blocked.clone(),
        out_of_memory: run.out_of_memory,
        merge_refused: None,
        protected_changes: run.protected.clone(),
        holdout: facts.holdout.clone().unwrap_or_default(),
        interrupted: facts.interrupted,
    }
}

/// A progress-log section, owned until it is written.
struct ProgressEntry {
    iteration: u32,
    at: DateTime<Utc>,
    task: Option<String>,
    outcome: String,
    files: Vec<String>,
    verification: Vec<String>,
    refusal: Option<String>,
    errors: Vec<String>,
}

impl ProgressEntry {
    fn borrowed(&self) -> progress::Entry<'_> {
        progress::Entry {
            iteration: self.iteration,
            at: Some(self.at),
            task: self.task.as_deref(),
            outcome: self.outcome.clone(),
            files: &self.files,
            verification: self.verification.clone(),
            refusal: self.refusal.as_deref(),
            errors: &self.errors,
        }
    }
}

fn progress_entry(record: &IterationRecord, decision: &Decision) -> ProgressEntry {
    ProgressEntry {
        iteration: record.iteration,
        at: record.ended_at,
        task: record.task.clone(),
        outcome: decision.outcome.clone(),
        files: record.files_modified.clone(),
        verification: record
            .verification
            .iter()
            .map(|v| {
                if v.passed {
                    format!("`{}` passed", v.command)
                } else {
                    format!("`{}` failed ({})", v.command, v.outcome())
                }
            })
            .collect(),
        refusal: record.completion_refused.clone(),
        errors: record.errors.clone(),
    }
}

/// What the agent's claims came to, said to the user, and the reasons for the next prompt.
fn claim_messages(runner: &mut Runner<'_>, facts: &Facts, decision: &Decision, task_tag: &str) {
    let rules = &runner.env.rules;
    let options = &runner.env.config.options;
    if decision::claim(rules, facts) == Claim::Deferred {
        runner.env.sink.notice(Notice::CompletionDeferred {
            min: rules.min_iterations,
            next_iteration: facts.iteration + 1,
        });
    }
    let Some(refusal) = &decision.refusal else {
        return;
    };
    runner.env.sink.emit(refusal.event(facts.iteration));
    // A task loop's claim is its task's promise, unless the agent printed completion.
    let printed = if rules.task_loop && !facts.completion {
        task_tag.to_owned()
    } else {
        format!("<promise>{}</promise>", options.completion_promise)
    };
    let section = match refusal {
        Refusal::OpenTasks(open) => {
            runner
                .env
                .sink
                .notice(Notice::CompletionRefusedOpenTasks(open));
            prompt::feedback(Feedback::OpenTasks {
                promise: &options.completion_promise,
                open,
            })
        }
        Refusal::Verification(failed) => {
            tell_failed_checks(runner, facts.iteration, failed, "");
            prompt::feedback(Feedback::Verification {
                printed: &printed,
                failed,
            })
        }
        Refusal::Holdout { failed, total } => {
            // The user sees which; the agent only what --holdout-feedback lets it.
            tell_failed_checks(runner, facts.iteration, failed, " (holdout)");
            prompt::feedback(Feedback::Holdout {
                printed: &printed,
                failed,
                total: *total,
                tell: &options.holdout_feedback,
            })
        }
        Refusal::TaskVerification { task, failed } => {
            prompt::feedback(Feedback::TaskVerification {
                task,
                task_tag,
                failed,
            })
        }
    };
    runner.feedback.push(section);
}

/// Tells the user which checks refused the claim of `iteration` (each named `` `CMD` `` and
/// `suffix`).
fn tell_failed_checks(runner: &Runner<'_>, iteration: u32, failed: &[Verification], suffix: &str) {
    let checks: Vec<String> = (failed.iter())
        .map(|v| format!("`{}`{suffix}", v.command))
        .collect();
    runner.env.sink.notice(Notice::CompletionRefusedByChecks {
        iteration,
        failed: &checks,
    });
}

/// Records an iteration in which ralph itself failed.
pub(super) fn own_failure(
    runner: &mut Runner<'_>,
    iteration: u32,
    message: &str,
) -> anyhow::Result<()> {
    let now = crate::model::now();
    runner.history.record(
        IterationRecord {
            iteration,
            started_at: now,
            ended_at: now,
            exit_code: -1,
            errors: vec![message.chars().take(200).collect()],
            ..IterationRecord::default()
        },
        Struggle::Skip,
    );
    history::save(&runner.env.dir.history(), &runner.history)
}

/// The message of an iteration's auto-commit.
pub(super) fn iteration_commit_message(iteration: u32) -> String {
    format!("Ralph iteration {iteration}: work in progress")
}
