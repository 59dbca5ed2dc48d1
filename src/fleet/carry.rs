//! At a task's merge, the notes and tasks its agent added on its branch join the base, for
//! `--parallel` and `--worker` alike (the rule: `storage::carry`).

use crate::git::{FileAt, Repo};
use crate::storage::carry::{self, Carried};
use crate::storage::{self, RalphDir, progress, tasks};

/// Run while `branch` is merged into the base at `onto` (`HEAD` in the base's work tree), with
/// the base's versions of ralph's own files in `dir`: appends what the branch added to the
/// progress log (under task `id`) and to the task list. Never fails: what could not be carried
/// is in `problems`.
pub(super) fn into_base(
    repo: &Repo,
    dir: &RalphDir,
    (branch, onto): (&str, &str),
    id: &str,
) -> Carried {
    let merge_base = repo.merge_base(onto, branch);
    into_base_from(
        (repo, &mut |wanted| repo.files_at(wanted)),
        dir,
        (branch, onto, merge_base),
        id,
        None,
    )
}

/// The merge bases of a merge train's branches, each `(tip, onto, wanted)`: `tip` merged onto
/// `onto`, a commit of the train made on `start`; every branch the train merged is given, so
/// that commits one shares with another are seen, and only the `wanted` bases are found (one
/// `git rev-list` for them all where it tells; `git merge-base` for the others).
pub(super) fn merge_bases(
    repo: &Repo,
    start: &str,
    on: &[(&str, &str, bool)],
) -> Vec<Option<String>> {
    let tips: Vec<&str> = on.iter().map(|(tip, _, _)| *tip).collect();
    let forks = repo.fork_points(start, &tips);
    (forks.into_iter().zip(on))
        .map(|(fork, (tip, onto, wanted))| {
            (*wanted)
                .then(|| fork.or_else(|| repo.merge_base(onto, tip)))
                .flatten()
        })
        .collect()
}

/// Reads files `(rev, path)` of the repository, as [`Repo::files_at`] does.
pub(super) type ReadFiles<'a> = &'a mut dyn FnMut(&[(&str, &str)]) -> Result<Vec<FileAt>, String>;

/// [`into_base`] for a branch merged already onto `onto` (a commit before HEAD) whose merge
/// base with it is `merge_base` ([`merge_bases`]), when the base's log is the work tree's (with
/// what the merges before it wrote in it); the files of the commits read by `read` (a merge
/// train's kept reader).
pub(super) fn into_base_after(
    (repo, read): (&Repo, ReadFiles<'_>),
    dir: &RalphDir,
    on: (&str, &str, Option<String>),
    id: &str,
) -> Carried {
    let log = std::fs::read(dir.file(progress::PROGRESS_FILE)).ok();
    into_base_from((repo, read), dir, on, id, Some(log))
}

/// [`into_base`] with the merge base of `branch` and `onto` as given, and the base's log as
/// given (`None`: as HEAD has it).
fn into_base_from(
    (repo, read): (&Repo, ReadFiles<'_>),
    dir: &RalphDir,
    (branch, onto, merge_base): (&str, &str, Option<String>),
    id: &str,
    base_log: Option<Option<Vec<u8>>>,
) -> Carried {
    let paths = super::base::own_files(repo, &[storage::TASKS_FILE, progress::PROGRESS_FILE]);
    let (tasks_path, log_path) = (paths[0].as_str(), paths[1].as_str());
    let mut carried = Carried::default();
    // Every version both need, read by one git process: the branch's, the base's and the merge
    // base's log, then the branch's and the merge base's task list.
    let mut wanted = vec![(branch, log_path), (onto, log_path)];
    wanted.extend(merge_base.as_deref().map(|rev| (rev, log_path)));
    wanted.push((branch, tasks_path));
    wanted.extend(merge_base.as_deref().map(|rev| (rev, tasks_path)));
    let files = match read(&wanted) {
        Ok(files) => files,
        Err(why) => vec![Err(why); wanted.len()],
    };
    let mut files = files.into_iter();
    let mut next = || files.next().unwrap_or(Ok(None));
    let (ours, base) = (next(), next());
    let base = base_log.map_or(base, Ok);
    let before = merge_base.as_ref().map_or(Ok(None), |_| next());
    let logs = (|| Ok::<_, String>((before?, ours?, base?)))();
    match logs.and_then(|logs| notes(dir, logs, id)) {
        Ok(wrote) => carried.notes = wrote,
        Err(why) => carried
            .problems
            .push(format!("its notes in {log_path} ({why})")),
    }
    let ours = next();
    let before = merge_base.as_ref().map_or(Ok(None), |_| next());
    let lists = (|| Ok::<_, String>((before?, ours?)))();
    match lists.and_then(|lists| added_tasks(dir, lists)) {
        Ok(texts) => carried.tasks = texts,
        Err(why) => carried
            .problems
            .push(format!("the tasks it added to {tasks_path} ({why})")),
    }
    carried
}

/// The log as the merge base, the branch and the base have it.
type Logs = (Option<Vec<u8>>, Option<Vec<u8>>, Option<Vec<u8>>);

/// Appends the notes the branch added to the log to the base's: `true` when there were any.
fn notes(dir: &RalphDir, (before, ours, base): Logs, id: &str) -> Result<bool, String> {
    let Some(ours) = ours else {
        return Ok(false);
    };
    let Some(log) = carry::notes(before.as_deref(), &ours, base.as_deref(), id) else {
        return Ok(false);
    };
    storage::write_atomic_shared(&dir.file(progress::PROGRESS_FILE), &log)
        .map_err(|err| format!("{err:#}"))?;
    Ok(true)
}

/// Appends the tasks the branch added to its list (`ours`, `before` at the merge base) to the
/// base's list, under its lock: their descriptions.
fn added_tasks(
    dir: &RalphDir,
    (before, ours): (Option<Vec<u8>>, Option<Vec<u8>>),
) -> Result<Vec<String>, String> {
    let Some(ours) = ours else {
        return Ok(Vec::new());
    };
    tasks::edit(dir, |current| {
        match carry::tasks(before.as_deref(), &ours, current) {
            Some((list, texts)) => (Some(list), texts),
            None => (None, Vec::new()),
        }
    })
    .map_err(|err| format!("{err:#}"))
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::process::Command;

    use super::*;

    /// A repository on `main` with a task list and a progress log, and a branch `ralph/t` from
    /// it on which `change` ran (then committed); `None` without git.
    fn branched(change: impl FnOnce(&std::path::Path)) -> Option<(tempfile::TempDir, Repo)> {
        let tmp = crate::testing::tempdir().unwrap();
        let root = tmp.path();
        let git = |args: &[&str]| {
            Command::new("git")
                .args(args)
                .current_dir(root)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output()
                .is_ok_and(|output| output.status.success())
        };
        if !git(&["init", "-q", "-b", "main"]) {
            return None;
        }
        for (key, value) in [
            ("user.name", "t"),
            ("user.email", "t@example.invalid"),
            ("commit.gpgSign", "false"),
            ("core.hooksPath", "/dev/null"),
        ] {
            assert!(git(&["config", key, value]));
        }
        fs::create_dir(root.join(".ralph")).unwrap();
        fs::write(root.join(".ralph/ralph-tasks.md"), "- [ ] Old\n").unwrap();
        fs::write(root.join(".ralph/progress.md"), "# Log\n").unwrap();
        assert!(git(&["add", "-A"]) && git(&["commit", "-q", "-m", "base"]));
        assert!(git(&["checkout", "-q", "-b", "ralph/t"]));
        change(root);
        assert!(git(&["add", "-A"]) && git(&["commit", "-q", "-m", "work"]));
        assert!(git(&["checkout", "-q", "main"]));
        let repo = Repo::discover(root).unwrap();
        Some((tmp, repo))
    }

    #[test]
    fn notes_and_tasks_of_the_branch_join_the_base() {
        let Some((tmp, repo)) = branched(|root| {
            fs::write(root.join(".ralph/progress.md"), "# Log\nLEARNED\n").unwrap();
            fs::write(root.join(".ralph/ralph-tasks.md"), "- [x] Old\n- [ ] New\n").unwrap();
        }) else {
            return;
        };
        let dir = RalphDir::new(tmp.path());
        let carried = into_base(&repo, &dir, ("ralph/t", "HEAD"), "t");
        assert_eq!(
            carried,
            Carried {
                notes: true,
                tasks: vec!["New".to_owned()],
                problems: Vec::new()
            }
        );
        let log = fs::read_to_string(dir.file(progress::PROGRESS_FILE)).unwrap();
        assert_eq!(
            log,
            "# Log\n\n## Task t — notes from its branch\n\nLEARNED\n"
        );
        let list = fs::read_to_string(dir.tasks()).unwrap();
        assert_eq!(list, "- [ ] Old\n- [ ] New\n");
    }

    #[test]
    fn what_cannot_be_read_is_a_problem_and_the_rest_is_carried() {
        let Some((tmp, repo)) = branched(|root| {
            let log = root.join(".ralph/progress.md");
            fs::remove_file(&log).unwrap();
            fs::create_dir(&log).unwrap();
            fs::write(log.join("notes"), "x\n").unwrap();
            fs::write(root.join(".ralph/ralph-tasks.md"), "- [ ] Old\n- [ ] New\n").unwrap();
        }) else {
            return;
        };
        let dir = RalphDir::new(tmp.path());
        let carried = into_base(&repo, &dir, ("ralph/t", "HEAD"), "t");
        assert!(!carried.notes);
        assert_eq!(carried.tasks, ["New"]);
        assert_eq!(carried.problems.len(), 1, "{:?}", carried.problems);
        assert!(
            carried.problems[0].starts_with("its notes in .ralph/progress.md ("),
            "{:?}",
            carried.problems
        );
        assert_eq!(
            fs::read_to_string(dir.file(progress::PROGRESS_FILE)).unwrap(),
            "# Log\n"
        );
    }
}
