//! The remote a worker takes tasks from: its base branch, the task list on it, its claims; and
//! `--status --remote`.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use crate::error::fail;
use crate::git::{RemoteHeads, Repo};
use crate::output::ClaimLine;
use crate::storage;
use crate::storage::questions::Question;
use crate::storage::tasks::{self, TaskList};

use super::super::base;
use super::is_stale;

/// The remote, its base branch, and where the task list is.
pub(super) struct Site {
    pub(super) repo: Repo,
    pub(super) remote: String,
    pub(super) base: String,
    /// The task list's path, repository-relative.
    tasks_path: String,
    /// This git merges by plumbing (`merge-tree --write-tree`), with no checkout.
    pub(super) merges_trees: bool,
    /// The base's last read task list and the commit it was read at: a worker polling a base
    /// that did not move reads no file again.
    last_list: Mutex<Option<(String, Vec<u8>)>>,
    /// The remote's git directory, when it is a repository on this machine's file system.
    local: Option<std::path::PathBuf>,
}

impl Site {
    pub(super) fn connect(cwd: &Path, remote: &str, base: Option<&str>) -> anyhow::Result<Self> {
        let repo = Repo::discover(cwd).ok_or_else(|| {
            fail("a worker runs in a clone of the shared repository, and this is not a git repository; clone it first (git clone URL)")
        })?;
        let Some(url) = repo.remote_url(remote) else {
            return Err(no_such_remote(&repo, remote).into());
        };
        let local = repo.local_remote((remote, Some(&url)));
        let heads = (repo.remote_heads((remote, local.as_deref())))
            .map_err(|why| unreachable_remote(remote, &why))?;
        let base = choose_base(&repo, remote, base, &heads)?;
        let tasks_path = format!(
            "{}{}/{}",
            repo.prefix(),
            storage::RALPH_DIR,
            storage::TASKS_FILE
        );
        Ok(Self {
            merges_trees: repo.merges_trees(),
            remote: remote.to_owned(),
            base,
            tasks_path,
            last_list: Mutex::default(),
            local,
            repo,
        })
    }

    /// At a worker's start, the remote's claims read there when a fetch would bring nothing
    /// else: the remote is on this machine, its base is the one this clone last fetched, and
    /// neither has a task branch.
    pub(super) fn claims_unfetched(&self) -> Option<Vec<crate::git::SeenClaim>> {
        let dir = self.local.as_deref()?;
        let base = format!("refs/heads/{}", self.base);
        let fetched = self.repo.resolve(&self.base_ref())?;
        let now = self.refs_now().ok()?;
        let unmoved = (now.iter()).any(|(name, sha)| *name == base && *sha == fetched);
        let tracked = format!("refs/remotes/{}/ralph/", self.remote);
        let no_branch = |dir: &Path, prefix: &str| {
            crate::git::refs_under(dir, prefix).is_some_and(|refs| refs.is_empty())
        };
        let none =
            no_branch(dir, "refs/heads/ralph/") && no_branch(&self.repo.git_common_dir(), &tracked);
        (unmoved && none).then(|| self.repo.claims_in(dir))
    }

    /// The remote's claims now, read there without fetching, when it is on this machine.
    pub(super) fn claims_now(&self) -> Option<Vec<crate::git::SeenClaim>> {
        (self.local.as_deref()).map(|dir| self.repo.claims_in(dir))
    }

    /// Whether the remote is on this machine: a look at its refs reads files, with no process.
    pub(super) fn reads_refs(&self) -> bool {
        self.local.is_some()
    }

    /// The commits of the remote's base and of its claims now, as `(ref, commit)`, fetching
    /// nothing: read from the remote's files when it is on this machine, else listed by `git
    /// ls-remote`.
    pub(super) fn refs_now(&self) -> Result<Vec<(String, String)>, String> {
        (self.repo).base_and_claims_now((&self.remote, self.local.as_deref()), &self.base)
    }

    pub(super) fn fetch(&self) -> anyhow::Result<()> {
        self.repo
            .fetch_work(&self.remote, &self.base)
            .map_err(|why| unreachable_remote(&self.remote, &why).into())
    }

    /// The base as last fetched.
    pub(super) fn base_ref(&self) -> String {
        format!("refs/remotes/{}/{}", self.remote, self.base)
    }

    /// Task `id`'s branch on the remote, as last fetched.
    pub(super) fn task_branch(&self, id: &str) -> String {
        format!("refs/remotes/{}/{}", self.remote, base::branch(id))
    }

    /// The base's name for people: `origin/main`.
    pub(super) fn base_name(&self) -> String {
        format!("{}/{}", self.remote, self.base)
    }

    /// Whether the base as last fetched has no task to do or not (no task list, or one without
    /// a task).
    pub(super) fn has_no_task(&self) -> bool {
        self.read_list().is_none_or(|list| list.is_empty())
    }

    /// The task list of the base as last fetched.
    pub(super) fn list(&self) -> anyhow::Result<TaskList> {
        self.read_list().ok_or_else(|| {
            fail(format!(
                "{} has no {}; add tasks (ralph --add-task \"…\"), commit and push them, then start the workers",
                self.base_name(),
                self.tasks_path
            ))
            .into()
        })
    }

    /// The task list of the base as last fetched (`None` when it has none), read again only
    /// when the base moved.
    fn read_list(&self) -> Option<TaskList> {
        let base = self.base_ref();
        let at = self.repo.resolve(&base);
        let mut last = self
            .last_list
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let (Some(at), Some((read_at, content))) = (&at, last.as_ref())
            && at == read_at
        {
            return Some(TaskList::parse(&String::from_utf8_lossy(content)));
        }
        let content = (self.repo).file_at(at.as_deref().unwrap_or(&base), &self.tasks_path)?;
        let list = TaskList::parse(&String::from_utf8_lossy(&content));
        *last = at.map(|at| (at, content));
        Some(list)
    }

    /// Whether the remote still holds `sha` as task `id`'s claim (fetched now).
    pub(super) fn still_ours(&self, id: &str, sha: &str) -> anyhow::Result<bool> {
        self.fetch()?;
        Ok(self
            .repo
            .seen_claims(&self.remote)
            .iter()
            .any(|seen| seen.id == id && seen.sha == sha))
    }
}

/// `--remote` names no remote of this clone: perhaps it is the remote's URL or path.
fn no_such_remote(repo: &Repo, remote: &str) -> crate::error::Error {
    let url = remote.contains(['/', ':', '\\', '@']) || remote.ends_with(".git");
    if !url {
        return fail(format!(
            "this clone has no git remote named '{remote}'; add it (git remote add {remote} URL) or name yours with --remote NAME"
        ));
    }
    let (name, then) = if repo.has_remote("origin") {
        ("shared", "run again with --remote shared")
    } else {
        (
            "origin",
            "run again without --remote (origin is the default)",
        )
    };
    fail(format!(
        "--remote takes the name of one of this clone's git remotes, and '{remote}' looks like a URL or a path; add it as a remote (git remote add {name} {remote}), then {then}"
    ))
}

/// The base branch: `--base`, else the remote's default branch; the remote must have it.
/// `branches`: the remote's branches.
fn choose_base(
    repo: &Repo,
    remote: &str,
    base: Option<&str>,
    heads: &RemoteHeads,
) -> Result<String, crate::error::Error> {
    let branches = &heads.branches;
    let own: Vec<&str> = (branches.iter().map(String::as_str))
        .filter(|branch| !branch.starts_with("ralph/"))
        .collect();
    let here = repo.current_branch().unwrap_or_else(|| "main".to_owned());
    if own.is_empty() {
        return Err(fail(format!(
            "the git remote '{remote}' has no branch yet, so no task list to take tasks from; push yours with the task list on it (git push {remote} {here}), or pass --base BRANCH once it has one"
        )));
    }
    let shown = |list: &[&str]| {
        let mut shown: Vec<String> = list.iter().take(5).map(|b| format!("'{b}'")).collect();
        if list.len() > 5 {
            shown.push(format!("{} more", list.len() - 5));
        }
        shown.join(", ")
    };
    let base = match base {
        Some(base) => base.to_owned(),
        None => heads.default.clone().ok_or_else(|| {
            fail(format!(
                "cannot tell the default branch of the git remote '{remote}' ({remote} names no default branch); pass --base with one of its branches: {}",
                shown(&own)
            ))
        })?,
    };
    if branches.contains(&base) {
        return Ok(base);
    }
    Err(fail(format!(
        "the git remote '{remote}' has no branch '{base}'; push it (git push {remote} {base}), or pass --base with one of its branches: {}",
        shown(&own)
    )))
}

pub(super) fn unreachable_remote(remote: &str, why: &str) -> crate::error::Error {
    fail(format!(
        "cannot use the git remote '{remote}': {why}; check its URL and your access (git remote -v), then start the worker again"
    ))
}

/// `ralph --status --remote NAME`: every claim on the remote, and the base's task board.
/// `ttl`: the `--claim-ttl` after which a claim shows as stale.
pub(crate) fn remote_status(
    cwd: &Path,
    remote: &str,
    ttl: Duration,
) -> anyhow::Result<RemoteBoard> {
    let site = Site::connect(cwd, remote, None)?;
    site.fetch()?;
    let list = site.list()?;
    let now = crate::model::now();
    let claims: Vec<ClaimLine> = site
        .repo
        .seen_claims(remote)
        .into_iter()
        .map(|seen| ClaimLine {
            stale: is_stale(&seen, now, ttl),
            worker: seen.claim.as_ref().map(|c| c.worker.clone()),
            host: seen.claim.as_ref().map(|c| c.host.clone()),
            started_at: seen.claim.as_ref().map(|c| c.started_at),
            heartbeat_at: seen.claim.as_ref().map(|c| c.heartbeat_at),
            job: seen.claim.and_then(|c| c.job),
            task: seen.id,
        })
        .collect();
    // A worker's question waits while its task's claim is live: one a killed worker left stops
    // waiting once the claim is stale (or at its own timeout, if sooner).
    let live = |task: &str| (claims.iter()).any(|claim| claim.task == task && !claim.stale);
    let questions = (site.repo.seen_questions(remote).into_iter())
        .filter_map(|(_, text)| serde_json::from_str::<Question>(&text).ok())
        .filter(|question| question.waits(now) && question.task.as_deref().is_none_or(live))
        .collect();
    Ok(RemoteBoard {
        remote: remote.to_owned(),
        base: site.base.clone(),
        budget: super::budget::seen(&site.repo, remote, ttl),
        questions,
        claims,
        now,
        list,
    })
}

/// What `--status --remote` shows: the claims on the remote, then the base's tasks.
pub(crate) struct RemoteBoard {
    pub(crate) remote: String,
    pub(crate) base: String,
    pub(crate) claims: Vec<ClaimLine>,
    /// The fleet's budget ledger, when its workers keep one (`--fleet-budget`).
    pub(crate) budget: Option<crate::output::FleetBudget>,
    pub(crate) now: chrono::DateTime<chrono::Utc>,
    /// The base's task list.
    pub(crate) list: tasks::TaskList,
    /// The questions the workers' agents wait on.
    pub(crate) questions: Vec<crate::storage::questions::Question>,
}
