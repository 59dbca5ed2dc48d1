//! Telling the world: the hooks (`on_iteration`, `on_complete`, `on_stop`) and `--notify`, for a
//! loop and for a parallel run's end.

use std::path::Path;

use serde_json::Value;

use crate::config::RunConfig;
use crate::git::Repo;
use crate::hooks::{self, When};
use crate::notify;

use super::Runner;

/// Where a run happens: its settings, its repository, its working directory.
pub(super) struct Place<'a> {
    pub(super) config: &'a RunConfig,
    pub(super) repo: Option<&'a Repo>,
    pub(super) cwd: &'a Path,
}

impl Runner<'_> {
    pub(super) fn place(&self) -> Place<'_> {
        Place {
            config: self.env.config,
            repo: self.env.repo.as_ref(),
            cwd: self.env.cwd,
        }
    }
}

impl Place<'_> {
    /// After an iteration: `on_iteration`, and with `--notify-each` a message.
    pub(super) fn iteration_ended(&self, iteration: u32, text: String, event: Value) {
        self.hook(When::Iteration, &event);
        if self.config.options.notify_each {
            self.notify(&format!("ralph iteration {iteration}"), text, event);
        }
    }

    /// At the run's end: `on_complete` or `on_stop`, then `--notify`.
    pub(super) fn loop_ended(&self, completed: bool, summary: String, event: Value) {
        let (when, title) = if completed {
            (When::Complete, "ralph completed")
        } else {
            (When::Stop, "ralph stopped")
        };
        self.hook(when, &event);
        self.notify(title, summary, event);
    }

    /// Runs the hook set for `when`, if any, from the repository's top.
    fn hook(&self, when: When, event: &Value) {
        let o = &self.config.options;
        let command = match when {
            When::Iteration => &o.on_iteration,
            When::Complete => &o.on_complete,
            When::Stop => &o.on_stop,
        };
        if let Some(command) = command.as_deref().filter(|c| !c.trim().is_empty()) {
            let dir = self.repo.map_or(self.cwd, Repo::root);
            hooks::run(when, command, event, dir, o.hook_timeout);
        }
    }

    /// Sends `--notify` messages: `text` with the repository and branch, `event`'s facts.
    fn notify(&self, title: &str, text: String, mut event: Value) {
        let o = &self.config.options;
        if o.notify.is_empty() {
            return;
        }
        let top = self.repo.map_or(self.cwd, Repo::root);
        let repository = top
            .file_name()
            .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
        let branch = self.repo.and_then(Repo::current_branch);
        if let Some(map) = event.as_object_mut() {
            map.insert("repository".to_owned(), repository.clone().into());
            map.insert("branch".to_owned(), branch.clone().into());
        }
        let place = match &branch {
            Some(branch) => format!("{repository} ({branch})"),
            None => repository,
        };
        let note = notify::Note {
            title: title.to_owned(),
            text: format!("{text} — {place}"),
            fields: event,
        };
        notify::send(&o.notify, &o.notify_format, &note);
    }
}
