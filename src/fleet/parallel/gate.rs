//! The merge queue's gate: the run's `--verify` commands run on each task's work merged with the
//! current base (in the integration worktree), and the base moves only when they pass. A failure
//! goes back to the task's agent with the command's output (at most [`GATE_TRIES`] times), then
//! the task is failed (`[!]`, exit 3). A command that cannot run ends the run (exit 1).

use crate::event::{LoopEvent, Notice};
use crate::git::Repo;
use crate::model::Verification;
use crate::storage::context;
use crate::storage::history::GateCheck;
use crate::storage::tasks::{Task, TaskStatus};

use super::super::base::branch;
use super::{Coordinator, Spawner};
use crate::run::decision::Stop;
use crate::run::{sandboxed, sink};

/// How often a task whose merge fails the gate goes back to its agent before it is failed.
pub(in crate::fleet) const GATE_TRIES: u32 = 2;

/// What the gate needs of a run (a `--parallel` coordinator or a `--worker`): its options, its
/// `.ralph/` (whose history records the checks), the history's writer, and its reporters.
pub(in crate::fleet) struct Gate<'g> {
    pub(in crate::fleet) config: &'g crate::config::RunConfig,
    pub(in crate::fleet) home: &'g crate::storage::RalphDir,
    pub(in crate::fleet) shared: &'g crate::run::Shared,
    pub(in crate::fleet) sink: &'g sink::Sink,
}

impl Gate<'_> {
    /// Runs the run's `--verify` commands in `tree` (task `id`'s work merged with the base),
    /// records each check in the history (`gates`): the check that failed, if one did.
    pub(in crate::fleet) fn check(
        &self,
        id: &str,
        tree: &Repo,
        stop: &crate::signal::StopFlag,
    ) -> Option<Verification> {
        self.merge_check(id, tree)
            .or_else(|| self.run_checks(id, tree, stop))
    }

    /// The checks of one merge, the HEAD of `tree` (task `id`'s branch merged): a merge whose
    /// files hold conflict blocks never lands (a merge the agent was handed and left unresolved,
    /// or one a kill cut short), nor one that changes a protected path its task may not change.
    pub(in crate::fleet) fn merge_check(&self, id: &str, tree: &Repo) -> Option<Verification> {
        let dir = crate::storage::RalphDir::new(&tree.root().join(tree.prefix()));
        self.merge_check_of(id, tree, ("HEAD^1", "HEAD"), &dir)
    }

    /// [`Gate::merge_check`] of the merge commit `merge` (made on `parent`) in `repo`, task
    /// `id`'s `protect:` read from the task list in `dir`: the merge need not be checked out.
    pub(in crate::fleet) fn merge_check_of(
        &self,
        id: &str,
        repo: &Repo,
        (parent, merge): (&str, &str),
        dir: &crate::storage::RalphDir,
    ) -> Option<Verification> {
        let merged = repo.changed_since(parent, merge);
        self.merged_check(
            id,
            &mut |wanted| repo.files_at(wanted),
            (merge, &merged),
            dir,
        )
    }

    /// [`Gate::merge_check_of`] of a merge (a commit or tree) whose changed files are `merged`.
    pub(in crate::fleet) fn merged_check(
        &self,
        id: &str,
        read: crate::fleet::carry::ReadFiles<'_>,
        (merge, merged): (&str, &[String]),
        dir: &crate::storage::RalphDir,
    ) -> Option<Verification> {
        let wanted: Vec<(&str, &str)> =
            (merged.iter()).map(|file| (merge, file.as_str())).collect();
        let files = read(&wanted).unwrap_or_default();
        let read = |file: &str| {
            let at = merged.iter().position(|each| each == file)?;
            files.get(at)?.clone().ok().flatten()
        };
        let failed = crate::verify::no_conflict_blocks(merged, &read)
            .or_else(|| self.protected_changes(id, dir, merged))?;
        self.record(id, std::slice::from_ref(&failed));
        Some(failed)
    }

    /// Whether the run has commands to check a merge with (`--verify`, `--holdout`).
    pub(in crate::fleet) fn has_checks(&self) -> bool {
        let options = &self.config.options;
        !options.verify.is_empty() || !options.holdout.is_empty()
    }

    /// The run's `--verify` commands, then its `--holdout` checks, in `tree` (recorded for
    /// `id`: a task, or the tasks of a merge train): the check that failed, if one did.
    pub(in crate::fleet) fn run_checks(
        &self,
        id: &str,
        tree: &Repo,
        stop: &crate::signal::StopFlag,
    ) -> Option<Verification> {
        if !self.has_checks() {
            return None;
        }
        let commands = &self.config.options.verify;
        let holdout = &self.config.options.holdout;
        let hash = tree.work_tree_hash();
        // The commands run the agents' code: in the run's sandbox (around the integration
        // worktree) when it has one. One that cannot be made fails the check.
        let sandbox = match sandboxed::sandbox_for(
            self.config,
            (tree.root(), false),
            Some(tree),
            self.home,
            [],
        ) {
            Ok(sandbox) => sandbox,
            Err(err) => {
                return Some(Verification {
                    command: commands.join(" && "),
                    output_tail: format!("{err:#}"),
                    ..Verification::default()
                });
            }
        };
        let run = |commands: &[String], told: &dyn Fn(&Verification)| {
            crate::verify::run_all(
                commands,
                (tree.root(), hash.as_deref(), sandbox.as_ref()),
                (
                    self.config.options.verify_timeout,
                    self.config.options.kill_grace,
                ),
                stop,
                self.sink.voice(),
                told,
            )
        };
        let results = run(commands, &|result| {
            self.sink.emit(LoopEvent::Verified(result.clone()));
        });
        self.record(id, &results);
        if let Some(failed) = results.into_iter().find(|result| !result.passed) {
            return Some(failed);
        }
        // The holdout checks, quietly: the user's history has them whole; the refusal, which
        // goes to the agent and the event stream, says what --holdout-feedback lets it.
        let hidden = run(holdout, &|_| {});
        self.record(id, &hidden);
        crate::verify::holdout_refusal(&hidden, &self.config.options.holdout_feedback)
    }

    /// The failed check of a merge of task `id` that changes (`merged`) protected paths the task
    /// may not change: the run's `--protect` and the task's own `protect:`, less its
    /// `may_change:` (read from the merged task list, in `dir`).
    fn protected_changes(
        &self,
        id: &str,
        dir: &crate::storage::RalphDir,
        merged: &[String],
    ) -> Option<Verification> {
        let list = crate::storage::read_text(&dir.tasks())
            .ok()
            .flatten()
            .unwrap_or_default();
        let task = super::super::base::find(&crate::storage::tasks::TaskList::parse(&list), id);
        let (own, may_change) = task
            .as_ref()
            .map(crate::protect::of_task)
            .unwrap_or_default();
        let mut protect = self.config.options.protect.clone();
        protect.extend(own);
        let protection = crate::protect::Protection::new(&protect, &may_change).ok()??;
        crate::verify::no_protected_changes(&protection, merged)
    }

    /// Records the checks of task `id`'s merge in the history (`gates`).
    fn record(&self, id: &str, results: &[Verification]) {
        let at = crate::model::now();
        let recorded = self.shared.edit_history(self.home, |history| {
            for check in results {
                history.gates.push(GateCheck {
                    task: id.to_owned(),
                    at,
                    check: check.clone(),
                });
            }
        });
        if let Err(err) = recorded {
            self.sink.notice(Notice::TaskNotRecorded {
                task: id,
                status: "its merge check",
                why: &format!("{err:#}"),
            });
        }
    }

    /// Task `id`'s work merged with `base` failed `check` (the `tries`-th time): the
    /// `merge_refused` event, and the refusal written on the task's last iteration in the run's
    /// history, where `--status` and the report show it.
    pub(in crate::fleet) fn refused(&self, id: &str, base: &str, check: &Verification, tries: u32) {
        self.sink.emit(LoopEvent::MergeRefused {
            task: id.to_owned(),
            base: base.to_owned(),
            command: check.command.clone(),
            exit_code: check.exit_code,
            output_tail: check.output_tail.clone(),
            tries,
            most: GATE_TRIES,
            sent_back: tries <= GATE_TRIES,
        });
        let why = refusal(base, check);
        let recorded = self.shared.edit_history(self.home, |history| {
            let last = (history.iterations.iter_mut().rev())
                .find(|record| record.task_id.as_deref() == Some(id));
            if let Some(record) = last {
                record.merge_refused = Some(why);
            }
        });
        if let Err(err) = recorded {
            self.sink.notice(Notice::TaskNotRecorded {
                task: id,
                status: "its refused merge",
                why: &format!("{err:#}"),
            });
        }
    }
}

/// Why a merge was refused, in a few words: `` `sh check.sh` failed on the work merged with
/// master (exit 1)``.
pub(in crate::fleet) fn refusal(base: &str, check: &Verification) -> String {
    let how = check
        .exit_code
        .map_or_else(|| "timed out".to_owned(), |code| format!("exit {code}"));
    format!(
        "`{}` failed on the work merged with {base} ({how})",
        check.command
    )
}

/// Why task `id` is failed after its merge failed the gate [`GATE_TRIES`] times.
pub(in crate::fleet) fn given_up(base: &str, check: &Verification, id: &str) -> String {
    format!(
        "its work merged with {base} failed the run's check `{}` {GATE_TRIES} times; branch {} is kept",
        check.command,
        branch(id)
    )
}

/// What a task's agent is told when its merge failed the gate: the command, how it ended, and
/// the end of its output.
pub(in crate::fleet) fn feedback(base: &str, check: &Verification) -> String {
    let code = check.exit_code.map_or_else(
        || " (it timed out)".to_owned(),
        |code| format!(" (exit {code})"),
    );
    format!(
        "Your task's work, merged with {base}, fails the run's check `{command}`{code}, so it was not merged. {base} is now merged into your branch: make the check pass here, then end with the task's promise again. The end of its output:\n\n```\n{tail}\n```",
        command = check.command,
        tail = check.output_tail,
    )
}

impl<'a> Coordinator<'a> {
    /// Runs the gate on task `id`'s merge in `tree` (see [`check`]): the check that failed, if
    /// one did.
    pub(super) fn gate<'s>(
        &self,
        id: &str,
        tree: &Repo,
        spawner: &Spawner<'s, '_>,
    ) -> Option<Verification>
    where
        'a: 's,
    {
        self.gate_of().check(id, tree, spawner.stop)
    }

    pub(super) fn gate_of(&self) -> Gate<'_> {
        Gate {
            config: self.config,
            home: self.dir,
            shared: &self.shared,
            sink: &self.sink,
        }
    }

    /// Task `id`'s merge failed the gate with `check`: its agent gets the base merged into its
    /// branch and the command's output in its next prompt, or, after [`GATE_TRIES`] times, the
    /// task is failed with its branch kept. A command that cannot run at all ends the run.
    pub(super) fn send_back<'s>(
        &mut self,
        id: &str,
        task: &Task,
        check: &Verification,
        spawner: &Spawner<'s, '_>,
    ) -> anyhow::Result<()>
    where
        'a: 's,
    {
        if check.could_not_run() {
            self.ended.get_or_insert(Stop::Unverified(check.clone()));
            self.remove(id, false);
            return Ok(());
        }
        let tries = self.gate_tries.entry(id.to_owned()).or_default();
        *tries += 1;
        let tries = *tries;
        self.gate_of().refused(id, &self.base, check, tries);
        if tries > GATE_TRIES {
            let why = given_up(&self.base, check, id);
            self.give_up(id, &why);
            return Ok(());
        }
        // The task's note says why it runs again.
        let note = format!(
            "merge refused: {}; sent back to its agent ({tries} of {GATE_TRIES})",
            refusal(&self.base, check)
        );
        if let Err(why) =
            super::super::base::mark(self.dir, id, TaskStatus::InProgress, Some(&note))
        {
            self.sink.notice(Notice::TaskNotRecorded {
                task: id,
                status: "its refused merge",
                why: &why,
            });
        }
        let text = feedback(&self.base, check);
        context::append(self.dir, &text, Some(id), crate::model::now())?;
        let conflicts = self.merge_base_into_task(id)?;
        self.start(spawner, (id, task), conflicts)
    }
}
