//! `--worktree NAME [--merge]`: an ordinary loop in `.ralph/worktrees/NAME` on branch
//! `ralph/NAME`. With `--merge`, a completed loop's branch is merged into the base and its
//! worktree removed; otherwise the branch is left for review.

use std::path::Path;

use crate::config::RunConfig;
use crate::error::fail;
use crate::event::{LoopEvent, Notice};
use crate::exit::ExitStatus;
use crate::git::{Merge, Repo};
use crate::output::format;
use crate::signal::StopFlag;
use crate::storage::{self, RalphDir, progress};

use super::base::{base_branch, branch, own_files};
use crate::run::sink::{Place, Scope, Sink};
use crate::run::{Knobs, Start, start};

/// Runs `--worktree NAME` (`merge`: `--merge`), afresh or resumed (`start`), from `cwd`, whose
/// ralph folder is `dir`.
pub(crate) fn in_worktree(
    config: &RunConfig,
    (cwd, dir): (&Path, &RalphDir),
    (name, merge): (&str, bool),
    start: Start,
    stop: &StopFlag,
    knobs: &Knobs,
) -> anyhow::Result<ExitStatus> {
    let (repo, base) = base_branch(Repo::discover(cwd), dir, "--worktree")?;
    let path = dir.worktree(name);
    repo.add_worktree(&path, &branch(name), &base)
        .map_err(fail)?;
    let worktree_cwd = path.join(repo.prefix());
    let place = Place {
        cwd,
        dir,
        repo: Some(&repo),
        home: dir,
    };
    // The loop in the worktree has its own sink; this one tells what happens around it.
    let sink = Sink::for_run(config, &place, None, Scope::Task);
    sink.notice(Notice::WorktreeLoop {
        name,
        branch: &branch(name),
    });
    let worktree_dir = RalphDir::new(&worktree_cwd);
    if matches!(start, Start::Fresh) {
        refuse_unfinished(&worktree_dir, (cwd, &path), (name, merge), knobs)?;
    }
    let status = start::run(config, &worktree_cwd, &worktree_dir, start, stop, knobs)?;
    if status != ExitStatus::Success {
        return Ok(status);
    }
    if !merge {
        sink.notice(Notice::WorktreeLeft {
            name,
            branch: &branch(name),
            base: &base,
        });
        return Ok(status);
    }
    let hash = merge_into_base(&repo, &base, name, &config.prompt)?;
    // The loop's records outlive its worktree: its history, logs and events join the base's.
    if let Err(err) = keep_records(&worktree_dir, dir, name) {
        sink.notice(Notice::TaskNotRecorded {
            task: name,
            status: "the worktree loop's history and logs",
            why: &format!("{err:#}"),
        });
    }
    sink.emit(LoopEvent::WorktreeMerged {
        name: name.to_owned(),
        into: base,
        commit: hash,
    });
    repo.remove_worktree(&path, &branch(name), true);
    Ok(status)
}

/// The ralph folder of worktree `name`'s loop (`dir`'s worktree `name`), for `--resume
/// --worktree NAME`: refused when there is no such worktree.
pub(crate) fn worktree_home(cwd: &Path, dir: &RalphDir, name: &str) -> anyhow::Result<RalphDir> {
    let repo = Repo::discover(cwd)
        .ok_or_else(|| fail("--worktree runs in a git repository, and this is not one"))?;
    let path = dir.worktree(name);
    if !path.join(".git").exists() {
        return Err(fail(format!(
            "there is no --worktree {name} loop to resume ({} does not exist); start one with: ralph \"<prompt>\" --worktree {name}",
            path.display()
        ))
        .into());
    }
    Ok(RalphDir::new(&path.join(repo.prefix())))
}

/// A fresh `--worktree NAME` loop is refused where the worktree's loop (its ralph folder `dir`,
/// the worktree at `path`) was interrupted or crashed: it goes on with `ralph --resume
/// --worktree NAME`, or is discarded in the worktree. A loop running there says so itself.
fn refuse_unfinished(
    dir: &RalphDir,
    (cwd, path): (&Path, &Path),
    (name, merge): (&str, bool),
    knobs: &Knobs,
) -> anyhow::Result<()> {
    if !dir.state().exists() {
        return Ok(());
    }
    let Ok(_lock) = crate::run::take_lock(dir, knobs) else {
        return Ok(());
    };
    let storage::Loaded::Found(previous) = storage::state::load(&dir.state()) else {
        return Ok(());
    };
    let resume = format!(
        "ralph --resume --worktree {name}{}",
        if merge { " --merge" } else { "" }
    );
    let shown = path.strip_prefix(cwd).unwrap_or(path);
    let reset = format!("cd {} && ralph --reset", shown.display());
    let go_on = crate::run::GoOn {
        resume: &resume,
        reset: &reset,
    };
    crate::run::refuse_fresh(Some(&previous), &dir.state(), &go_on)
}

/// A merged worktree loop's records join the base's `.ralph/` before its worktree goes: its
/// iterations (named as `name`'s) in the base's history, its logs under `logs/<name>/`, its
/// events in the base's journal (with `"task": name`). `--status`, `--log NAME`, `--report` and
/// `--serve` keep them.
fn keep_records(worktree: &RalphDir, base: &RalphDir, name: &str) -> anyhow::Result<()> {
    let from = worktree.logs();
    if from.is_dir() {
        let to = base.logs().join(name);
        std::fs::create_dir_all(&to)?;
        for entry in std::fs::read_dir(&from)?.flatten() {
            let target = to.join(entry.file_name());
            if !target.exists() {
                std::fs::rename(entry.path(), target)?;
            }
        }
    }
    if let storage::Loaded::Found(history) = storage::history::load(&worktree.history()) {
        let mut kept = storage::history::load(&base.history())
            .ok()
            .unwrap_or_default();
        kept.absorb(history, name);
        storage::history::save(&base.history(), &kept)?;
    }
    if let Ok(events) = std::fs::read_to_string(worktree.root().join(storage::JOURNAL_FILE)) {
        let mut journal = crate::journal::Journal::new(base);
        for line in events.lines() {
            let Ok(mut event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if let Some(fields) = event.as_object_mut() {
                fields.entry("task").or_insert_with(|| name.into());
            }
            journal.append(format!("{event}\n").as_bytes())?;
        }
    }
    Ok(())
}

/// Merges the loop's branch into `base` (its merge commit's hash); ralph's own files in the base
/// are committed first, or the merge would overwrite them. A conflict keeps the branch for the
/// user to merge.
fn merge_into_base(repo: &Repo, base: &str, name: &str, prompt: &str) -> anyhow::Result<String> {
    let message = format!(
        "Ralph: merge worktree {name} — {}",
        format::preview(prompt, 60)
    );
    let (tasks, progress) = (storage::TASKS_FILE, progress::PROGRESS_FILE);
    let committed = own_files(repo, &[tasks, storage::GITIGNORE_FILE, progress]);
    let committed: Vec<&str> = committed.iter().map(String::as_str).collect();
    repo.commit_paths(
        &committed,
        &format!("Ralph: its own files, before merging worktree {name}"),
    )
    .map_err(fail)?;
    // The task list and the progress log keep the base's version when the base changed them
    // since the loop began (another loop's marks and notes); else the loop's come in with its
    // work (the tasks it marked done).
    let changed_in_base = repo.changed_since(&branch(name), base);
    let kept: Vec<String> = (own_files(repo, &[tasks, progress]).into_iter())
        .filter(|path| changed_in_base.contains(path))
        .collect();
    let kept: Vec<&str> = kept.iter().map(String::as_str).collect();
    match repo
        .merge_branch(&branch(name), &message, (&kept, &[]), &mut || Ok(()))
        .map_err(fail)?
    {
        Merge::Done(hash) => Ok(hash),
        Merge::Conflict(files) => Err(fail(format!(
            "merging {} into {base} conflicts in {}; the branch is kept: merge it yourself (git merge {})",
            branch(name),
            files.join(", "),
            branch(name)
        ))
        .into()),
    }
}
