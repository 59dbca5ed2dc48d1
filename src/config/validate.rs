//! The checks a loop's resolved settings must pass before anything starts.

use super::RunConfig;
use crate::error::{Error, usage};

impl RunConfig {
    /// Refuses settings that cannot work together, or that would only fail later (a
    /// notification URL at the end of the night), as usage errors.
    pub(super) fn validate(&self) -> Result<(), Error> {
        let o = &self.options;
        if o.max_iterations > 0 && o.min_iterations > o.max_iterations {
            return Err(usage(format!(
                "--min-iterations ({}) is greater than --max-iterations ({}); the loop could never complete",
                o.min_iterations, o.max_iterations
            )));
        }
        if o.parallel.max > 0 && !o.commit {
            return Err(usage(
                "--parallel merges each task's commits, so it needs auto-commit: drop --no-commit (or commit = false)",
            ));
        }
        if o.commit_dirty && !o.commit {
            return Err(usage(
                "--commit-dirty commits your uncommitted changes with the agent's, and --no-commit commits nothing: drop one of them",
            ));
        }
        if o.holdout.iter().any(|command| command.trim().is_empty()) {
            return Err(usage(
                "--holdout needs a command, e.g. --holdout \"sh ~/checks/hidden.sh\"",
            ));
        }
        if !matches!(o.holdout_feedback.as_str(), "count" | "names" | "full") {
            return Err(usage(format!(
                "--holdout-feedback must be count, names or full, not '{}'",
                o.holdout_feedback
            )));
        }
        if o.verify.iter().any(|command| command.trim().is_empty()) {
            return Err(usage(
                "--verify needs a command, e.g. --verify \"cargo test\"",
            ));
        }
        let abort = o.abort_promise.clone().unwrap_or_else(|| "x".to_owned());
        for (flag, text) in [
            ("--completion-promise", &o.completion_promise),
            ("--task-promise", &o.task_promise),
            ("--abort-promise", &abort),
        ] {
            if text.trim().is_empty() || text.contains('\n') {
                return Err(usage(format!(
                    "{flag} must be a non-empty single line of text"
                )));
            }
        }
        if o.keep_logs == 0 {
            return Err(usage(
                "--keep-logs must be at least 1: the log of the iteration that runs is always kept",
            ));
        }
        crate::protect::check(&o.protect, "--protect").map_err(usage)?;
        if !matches!(o.protect_mode.as_str(), "restore" | "fail") {
            return Err(usage(format!(
                "--protect-mode must be restore or fail, not '{}'",
                o.protect_mode
            )));
        }
        for setting in &o.on_event {
            crate::hooks::parse_on_event(setting).map_err(usage)?;
        }
        for url in &o.notify {
            crate::notify::check_url(url).map_err(usage)?;
        }
        if let Some(endpoint) = &o.otel {
            crate::notify::check_http_url("--otel", endpoint, "http://localhost:4318")
                .map_err(usage)?;
        }
        self.check_fallback()
    }

    /// A `--fallback` agent that is the `--agent` itself (same model) could never take over:
    /// refused when nothing else (a rotation, a task's own agent) can make it another one.
    fn check_fallback(&self) -> Result<(), Error> {
        if !self.rotation.is_empty() || self.options.tasks {
            return Ok(());
        }
        let own = self.options.model.as_deref();
        match self.fallback.iter().find(|step| {
            step.agent == self.agent && (step.model.is_none() || step.model.as_deref() == own)
        }) {
            Some(step) => Err(usage(format!(
                "--fallback {} is the --agent itself; a fallback agent takes over when the agent is out of quota, so name other agents (or another model of it, {}:MODEL)",
                step.agent.id(),
                step.agent.id()
            ))),
            None => Ok(()),
        }
    }
}
