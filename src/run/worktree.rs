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
use super::sink::{Place, Scope, Sink};
use super::{Knobs, Start, start};

/// Runs `--worktree NAME` (`merge`: `--merge`).
pub(crate) fn in_worktree(
    config: &RunConfig,
    cwd: &Path,
    dir: &RalphDir,
    (name, merge): (&str, bool),
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
    let status = start::run(
        config,
        &worktree_cwd,
        &worktree_dir,
        Start::Fresh,
        stop,
        knobs,
    )?;
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
    sink.emit(LoopEvent::WorktreeMerged {
        name: name.to_owned(),
        into: base,
        commit: hash,
    });
    repo.remove_worktree(&path, &branch(name), true);
    Ok(status)
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
    // The task list and the progress log keep the base's version.
    let kept = own_files(repo, &[tasks, progress]);
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
