//! Why a claim of completion was refused: for the record, the event stream and the next prompt.

use crate::model::Verification;
use crate::output::format::plural;

/// Why a claim was refused, for the record and the next prompt.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Refusal {
    OpenTasks(Vec<String>),
    Verification(Vec<Verification>),
    TaskVerification {
        task: String,
        failed: Vec<Verification>,
    },
    /// `--holdout` checks failed (`total` ran): the agent learns only what
    /// `--holdout-feedback` lets it.
    Holdout {
        failed: Vec<Verification>,
        total: usize,
    },
}

impl Refusal {
    /// The `completion_refused` event of a claim refused in `iteration`.
    pub(crate) fn event(&self, iteration: u32) -> crate::event::LoopEvent {
        let commands = |failed: &[Verification]| failed.iter().map(|v| v.command.clone()).collect();
        let (open_tasks, failed_checks, task_text) = match self {
            Self::OpenTasks(open) => (open.clone(), Vec::new(), None),
            Self::Verification(failed) => (Vec::new(), commands(failed), None),
            Self::TaskVerification { task, failed } => {
                (Vec::new(), commands(failed), Some(task.clone()))
            }
            // Its commands stay out of the journal, which an agent can read.
            Self::Holdout { failed, total } => {
                return crate::event::LoopEvent::HoldoutFailed {
                    iteration,
                    failed: failed.len(),
                    total: *total,
                };
            }
        };
        crate::event::LoopEvent::CompletionRefused {
            iteration,
            open_tasks,
            failed_checks,
            task_text,
        }
    }

    /// The short reason the history and progress log record.
    pub(crate) fn reason(&self) -> String {
        match self {
            Self::OpenTasks(open) => format!("{} still open", plural(open.len() as u64, "task")),
            Self::Verification(failed) => failed.first().map_or_else(
                || "verification failed".to_owned(),
                |first| {
                    format!(
                        "verification failed: `{}` ({})",
                        first.command,
                        first.outcome()
                    )
                },
            ),
            Self::TaskVerification { failed, .. } => failed.first().map_or_else(
                || "the task's verify command failed".to_owned(),
                |first| format!("`{}` failed", first.command),
            ),
            // The progress log, which the agent reads, has this reason: no command.
            Self::Holdout { failed, total } => {
                format!("{} of {total} holdout checks failed", failed.len())
            }
        }
    }
}
