//! Where a loop's events go: the reporters a run's options ask for, each event stamped with its
//! time and its task.
//!
//! Every loop of a run has its own sink: the run itself (`task: None`), and each task loop of a
//! `--parallel` run or a `--worker` (`task: Some(id)`), so every event says which loop it is of.

use std::path::Path;
use std::sync::Mutex;

use crate::config::RunConfig;
use crate::event::{LoopEvent, Notice, Reporter, Stamped};
use crate::git::Repo;
use crate::hooks::Hooks;
use crate::notify::Notifier;
use crate::output::{Human, JsonLines, Voice};
use crate::report::LiveReport;
use crate::storage::RalphDir;

/// Which loop of a run a sink serves: what its reporters do differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The run itself: a single loop, a `--parallel` coordinator, a `--worker`. Its end runs
    /// `on_complete`/`on_stop` and sends `--notify`; with `report = true` the HTML report follows it.
    Run,
    /// One task's loop inside a run: its iterations are heard, its end belongs to the run.
    Task,
}

/// Where a loop runs: its working directory, its `.ralph/`, its repository, and the `.ralph/` of
/// the run it is part of (its own, but for a task's loop), which keeps the run's event journal.
#[derive(Clone, Copy)]
pub(crate) struct Place<'a> {
    pub(crate) cwd: &'a Path,
    pub(crate) dir: &'a RalphDir,
    pub(crate) repo: Option<&'a Repo>,
    pub(crate) home: &'a RalphDir,
}

/// The reporters of one loop, and the task it works on.
pub(crate) struct Sink {
    task: Option<String>,
    reporters: Vec<Mutex<Box<dyn Reporter>>>,
    /// How the loop's own display (its agent's output, verification output) is shown.
    voice: Voice,
}

impl Sink {
    /// The reporters `config` asks for: the terminal (or JSON lines), hooks, notifications and
    /// the live report. The loop runs in `cwd`, keeps its files in `dir` and commits to `repo`.
    pub(crate) fn for_run(
        config: &RunConfig,
        place: &Place<'_>,
        task: Option<String>,
        scope: Scope,
    ) -> Self {
        let Place {
            cwd,
            dir,
            repo,
            home,
        } = *place;
        let o = &config.options;
        let voice = Voice::for_loop(config.json, task.clone(), o.verbose);
        let mut reporters: Vec<Box<dyn Reporter>> = vec![
            Box::new(Human::new(voice.clone())),
            Box::new(crate::journal::Journal::new(home)),
        ];
        if config.json {
            reporters.push(Box::new(JsonLines));
        }
        // Hooks run, and notifications name, the repository's top (the directory outside one).
        let top = repo.map_or(cwd, Repo::root);
        let ends = scope == Scope::Run;
        if let Some(hooks) = Hooks::new(o, top, ends, voice.clone()) {
            reporters.push(Box::new(hooks));
        }
        if let Some(notifier) = Notifier::new(o, top, repo.cloned(), ends) {
            reporters.push(Box::new(notifier));
        }
        if let Some(otel) = crate::otel::Otel::new(o.otel.as_deref()) {
            reporters.push(Box::new(otel));
        }
        if o.report && ends {
            reporters.push(Box::new(LiveReport::new(
                dir,
                repo.cloned(),
                &config.prompt,
            )));
        }
        Self::with(task, reporters, voice)
    }

    /// A sink with these reporters.
    pub(crate) fn with(
        task: Option<String>,
        reporters: Vec<Box<dyn Reporter>>,
        voice: Voice,
    ) -> Self {
        Self {
            task,
            reporters: reporters.into_iter().map(Mutex::new).collect(),
            voice,
        }
    }

    /// The loop's voice, for what it shows as it happens (its agent's output).
    pub(crate) fn voice(&self) -> &Voice {
        &self.voice
    }

    /// Hands `notice` to every reporter in turn (the terminal renders it), with its event when
    /// it tells what happened to the run.
    pub(crate) fn notice(&self, notice: Notice<'_>) {
        let event = notice.event();
        let stamped = event.as_ref().map(|event| self.stamp(event));
        for reporter in &self.reporters {
            let mut reporter = reporter
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            reporter.notice(&notice);
            if let Some(stamped) = &stamped {
                reporter.told(stamped);
            }
        }
    }

    /// `event`, now, in this sink's loop.
    fn stamp<'a>(&'a self, event: &'a LoopEvent) -> Stamped<'a> {
        Stamped {
            time: crate::model::now(),
            task: self.task.as_deref(),
            event,
        }
    }

    /// Stamps `event` with the time and the task, and hands it to every reporter in turn.
    pub(crate) fn emit(&self, event: LoopEvent) {
        let stamped = self.stamp(&event);
        for reporter in &self.reporters {
            let mut reporter = reporter
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            reporter.event(&stamped);
        }
    }
}

/// A reporter that keeps every event's public object, for tests of what a loop tells.
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct Collected(pub(crate) std::sync::Arc<Mutex<Vec<serde_json::Value>>>);

#[cfg(test)]
impl Collected {
    /// The names of the events heard so far, in order.
    pub(crate) fn names(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|event| event["event"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

#[cfg(test)]
impl Reporter for Collected {
    fn event(&mut self, event: &Stamped<'_>) {
        self.0.lock().unwrap().push(event.to_value());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_sink_stamps_its_task_on_every_event() {
        let heard = Collected::default();
        let sink = Sink::with(
            Some("t2".to_owned()),
            vec![Box::new(heard.clone())],
            Voice::plain(),
        );
        sink.emit(LoopEvent::Completed { iteration: 2 });
        sink.emit(LoopEvent::ClaimLost {
            task: "t2".to_owned(),
        });
        assert_eq!(heard.names(), ["completed", "claim_lost"]);
        let events = heard.0.lock().unwrap();
        assert!(events.iter().all(|event| event["task"] == "t2"));
    }

    #[test]
    fn a_notice_of_what_happened_reaches_every_reporter_and_the_terminal_once() {
        let heard = Collected::default();
        let (voice, shown) = Voice::capturing(false, None, false);
        let sink = Sink::with(
            None,
            vec![Box::new(Human::new(voice.clone())), Box::new(heard.clone())],
            voice,
        );
        sink.notice(Notice::CommitFailed("the pre-commit hook refused"));
        // Advice is only the terminal's.
        sink.notice(Notice::MaxStalledUnavailable);
        assert_eq!(heard.names(), ["commit_failed"]);
        assert_eq!(
            heard.0.lock().unwrap()[0]["reason"],
            "the pre-commit hook refused"
        );
        let shown = shown.lock().unwrap();
        let failed = shown
            .iter()
            .filter(|line| line.contains("Auto-commit failed"));
        assert_eq!(failed.count(), 1, "{shown:?}");
    }
}
