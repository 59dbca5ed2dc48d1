//! A git remote as the coordination engine of `--worker`: the base branch holds the task list,
//! `refs/ralph/claims/<task-id>` says who works on what, and every change to those refs is a
//! compare-and-swap push (`--force-with-lease` with the value last seen, or empty for "must not
//! exist"), so two workers can never both win.

use std::path::Path;
use std::process::Output;

use serde::{Deserialize, Serialize};

use super::nearby::{Written, record_commit};
use super::records::{self, RefRecord};
use super::{Repo, check, refs};

/// Where claims live on the remote.
pub(crate) const CLAIMS: &str = "refs/ralph/claims";

/// Where the fleet's shared records live on the remote: its budget ledger (`budget`).
pub(super) const FLEET: &str = "refs/ralph/fleet";

/// The fleet's budget ledger on the remote (`--fleet-budget`).
pub(crate) const LEDGER: &str = "refs/ralph/fleet/budget";

/// What a claim records: who holds the task and when they last said they still do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Claim {
    pub(crate) task: String,
    pub(crate) worker: String,
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) started_at: chrono::DateTime<chrono::Utc>,
    pub(crate) heartbeat_at: chrono::DateTime<chrono::Utc>,
    /// The fingerprint of the task's text when it was claimed: work pushed under the claim is
    /// that text's (absent in claims of an older ralph).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fingerprint: Option<String>,
    /// Given back by its worker (stopped, or failed): free to take at once, and it still says
    /// which text of the task the work pushed under it was made for.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) released: bool,
    /// The fencing token: 1 for a task's first claim, one more at every take-over of it (0 in
    /// claims of an older ralph). Refreshes and releases keep it, so a claim's holder is known
    /// by its token, and a worker whose token is no longer the remote's lost the task.
    #[serde(default)]
    pub(crate) token: u64,
    /// The engine job the worker runs in (a GitHub Actions job, a Slurm array task, a
    /// Kubernetes pod), so a stuck task leads to its job's log; absent for a worker started by
    /// hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) job: Option<Job>,
    /// The task is done and its branch, pushed at this commit, waits to be merged: the worker
    /// merging next lands it along with its own (a merge train).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ready: Option<String>,
}

/// An engine job a worker runs in, as its claims record it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Job {
    /// `github`, `slurm` or `kubernetes`.
    pub(crate) engine: String,
    /// The job's slot: the same for every attempt of it (a re-run, a requeue, a retried pod),
    /// so an attempt knows the claims of the attempts before it as its own (absent when the
    /// engine does not tell one slot from another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) slot: Option<String>,
    /// What a user finds the job by, e.g. `Slurm job 41_2 (node n1)`.
    pub(crate) label: String,
    /// Where its log is, when the engine has an address for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) url: Option<String>,
}

impl Claim {
    /// The fencing token of a claim that takes over `over` (a first claim when `None`).
    pub(crate) fn token_after(over: Option<&SeenClaim>) -> u64 {
        let was = over
            .and_then(|seen| seen.claim.as_ref())
            .map_or(0, |c| c.token);
        was.saturating_add(1)
    }
}

/// A claim as last fetched: the task id, the claim commit, and its record (`None` when the
/// commit holds something ralph cannot read; such a claim is treated as stale).
#[derive(Clone, Debug)]
pub(crate) struct SeenClaim {
    pub(crate) id: String,
    pub(crate) sha: String,
    pub(crate) claim: Option<Claim>,
}

/// The workers' questions on a remote and the claims of their tasks, as
/// [`Repo::questions_now`] fetched them.
#[derive(Debug, Default)]
pub(crate) struct QuestionsNow {
    /// Each question's record commit and its text.
    pub(crate) questions: Vec<(String, String)>,
    pub(crate) claims: Vec<SeenClaim>,
}

/// One ref a push changes: `new` (a commit, or `None` to delete) with the value the remote must
/// still have (`Some("")`: the ref must not exist).
#[derive(Clone)]
pub(crate) struct Update<'a> {
    pub(crate) dst: String,
    pub(crate) new: Option<&'a str>,
    pub(crate) expect: Option<&'a str>,
}

/// How an all-or-nothing push went.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    Done,
    /// A ref had moved on the remote (another worker was first); nothing was changed.
    Moved,
}

/// What the remote says of its branches.
#[derive(Debug, Default)]
pub(crate) struct RemoteHeads {
    pub(crate) branches: Vec<String>,
    /// The branch its HEAD points to (`None` when it names none).
    pub(crate) default: Option<String>,
}

impl Repo {
    /// Runs git with no terminal prompt (a worker runs unattended).
    pub(super) fn remote_run(&self, args: &[&str]) -> std::io::Result<Output> {
        self.command(args).env("GIT_TERMINAL_PROMPT", "0").output()
    }

    /// Whether this clone has a remote `name`.
    pub(crate) fn has_remote(&self, name: &str) -> bool {
        self.remote_url(name).is_some()
    }

    /// The address of remote `name` (`None` when there is no such remote).
    pub(crate) fn remote_url(&self, name: &str) -> Option<String> {
        let output = self.run(&["remote", "get-url", name]).ok()?;
        (output.status.success()).then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// The remote's branches (task branches included) and its default branch (what its HEAD
    /// points to, when it says), asked in one call.
    /// A remote on this machine (`local`: its git directory) is read from its files.
    pub(crate) fn remote_heads(
        &self,
        (remote, local): (&str, Option<&Path>),
    ) -> Result<RemoteHeads, String> {
        if let Some(heads) = local.and_then(heads_in) {
            return Ok(heads);
        }
        let output = check(
            self.remote_run(&["ls-remote", "--symref", remote, "HEAD", "refs/heads/*"]),
            &format!("git ls-remote {remote}"),
        )?;
        let text = String::from_utf8_lossy(&output.stdout);
        let mut heads = RemoteHeads::default();
        for line in text.lines() {
            if let Some(symref) = line.strip_prefix("ref: refs/heads/") {
                if symref.ends_with("\tHEAD") {
                    heads.default = symref.split('\t').next().map(str::to_owned);
                }
            } else if let Some(name) =
                (line.split('\t').nth(1)).and_then(|name| name.strip_prefix("refs/heads/"))
            {
                heads.branches.push(name.to_owned());
            }
        }
        Ok(heads)
    }

    /// Fetches the base branch, the task branches and every claim (what is gone from the
    /// remote is forgotten).
    pub(crate) fn fetch_work(&self, remote: &str, base: &str) -> Result<(), String> {
        let tasks_spec = format!("+refs/heads/ralph/*:refs/remotes/{remote}/ralph/*");
        self.fetch_specs(remote, &[base_spec(remote, base), tasks_spec])
    }

    /// Fetches the base, every claim and the fleet's records: what a worker waiting for a merge
    /// looks at.
    pub(crate) fn fetch_base_fleet(&self, remote: &str, base: &str) -> Result<(), String> {
        self.fetch_specs(remote, &[base_spec(remote, base)])
    }

    /// The commits of `remote`'s base `base` and of its claims now, each as `(ref, commit)` in
    /// the remote's order, by one `git ls-remote` that fetches nothing: a waiting worker looks at
    /// them often, and fetches only when they moved.
    /// A remote on this machine (`local`: its git directory) is read from its files.
    pub(crate) fn base_and_claims_now(
        &self,
        (remote, local): (&str, Option<&Path>),
        base: &str,
    ) -> Result<Vec<(String, String)>, String> {
        let base_ref = format!("refs/heads/{base}");
        let listed = local.and_then(|dir| refs::listed(dir, &[&base_ref], &format!("{CLAIMS}/")));
        if let Some(listed) = listed {
            return Ok(listed);
        }
        let claims = format!("{CLAIMS}/*");
        let output = check(
            self.remote_run(&["ls-remote", "--refs", remote, &base_ref, &claims]),
            &format!("git ls-remote {remote}"),
        )?;
        let text = String::from_utf8_lossy(&output.stdout);
        Ok((text.lines())
            .filter_map(|line| line.split_once('\t'))
            .filter(|(_, name)| *name == base_ref || name.starts_with(CLAIMS))
            .map(|(sha, name)| (name.to_owned(), sha.to_owned()))
            .collect())
    }

    /// Fetches every claim and the fleet's records (its budget ledger), nothing else.
    pub(crate) fn fetch_fleet(&self, remote: &str) -> Result<(), String> {
        self.fetch_specs(remote, &[])
    }

    /// The fleet's budget ledger last fetched from `remote`: its commit and its text (`None`
    /// when the remote has none).
    pub(crate) fn seen_ledger(&self, remote: &str) -> Option<(String, String)> {
        let name = format!("{}/budget", fleet_seen(remote));
        let record = self.records_under(&name).into_iter().next()?;
        Some((record.sha, record.text))
    }

    /// The agents' questions of `--worker`s last fetched from `remote`: each one's record
    /// commit and its text (`refs/ralph/fleet/questions/<id>` there).
    pub(crate) fn seen_questions(&self, remote: &str) -> Vec<(String, String)> {
        let records = self.records_under(&format!("{}/questions/", fleet_seen(remote)));
        records
            .into_iter()
            .map(|record| (record.sha, record.text))
            .collect()
    }

    /// The questions of `--worker`s on `remote` now (each one's record commit and its text), and
    /// the claims of their tasks, fetched together into refs of this process's own (removed
    /// after), so that a worker fetching in this clone at the same moment never meets a ref it
    /// is updating.
    pub(crate) fn questions_now(&self, remote: &str) -> Result<QuestionsNow, String> {
        let prefix = format!("refs/ralph/answering-{}/", std::process::id());
        let questions = format!("+{FLEET}/questions/*:{prefix}q/*");
        let claims = format!("+{CLAIMS}/*:{prefix}c/*");
        let fetched = self.remote_run(&["fetch", "-q", "--no-tags", remote, &questions, &claims]);
        let fetched = check(fetched, &format!("git fetch {remote}"));
        let records = self.records_under(&prefix);
        for record in &records {
            let _ = self.run(&["update-ref", "-d", &record.name]);
        }
        fetched?;
        let mut now = QuestionsNow::default();
        for record in records {
            let Some(name) = record.name.strip_prefix(&prefix) else {
                continue;
            };
            if name.starts_with("q/") {
                now.questions.push((record.sha, record.text));
            } else if let Some(id) = name.strip_prefix("c/") {
                now.claims.push(SeenClaim {
                    id: id.to_owned(),
                    claim: serde_json::from_str(&record.text).ok(),
                    sha: record.sha,
                });
            }
        }
        Ok(now)
    }

    /// The refs under `prefix` (or the ref of that name), each with its commit and the
    /// commit's message: the records ralph keeps in refs (claims, the ledger, questions).
    fn records_under(&self, prefix: &str) -> Vec<RefRecord> {
        self.records_in(None, prefix)
    }

    /// [`Repo::records_under`] of this repository, or of the one whose git directory is `at`.
    fn records_in(&self, at: Option<&Path>, prefix: &str) -> Vec<RefRecord> {
        // A worker reads the claims many times between two fetches: while the refs are those
        // of the last reading (each record a commit, whose message never changes), so are the
        // records.
        let common = at.map_or_else(|| self.common_dir(), Path::to_path_buf);
        let listed = refs::listed(&common, &[], prefix);
        match &listed {
            Some(refs) if refs.is_empty() => return Vec::new(),
            Some(refs) => {
                if let Some(records) = records::get((&common, prefix), refs) {
                    return records;
                }
            }
            None => {}
        }
        let records = self.records_read(at, prefix);
        if let Some(refs) = listed {
            records::put((common, prefix.to_owned()), refs, &records);
        }
        records
    }

    /// [`Repo::records_in`] by `git for-each-ref`.
    fn records_read(&self, at: Option<&Path>, prefix: &str) -> Vec<RefRecord> {
        let dir = at.map(|dir| format!("--git-dir={}", dir.display()));
        let mut args: Vec<&str> = dir.iter().map(String::as_str).collect();
        args.extend([
            "for-each-ref",
            "--format=%(refname)%00%(objectname)%00%(contents)%00",
            prefix,
        ]);
        let Ok(output) = self.run(&args) else {
            return Vec::new();
        };
        let text = String::from_utf8_lossy(&output.stdout);
        let fields: Vec<&str> = text.split('\0').map(str::trim).collect();
        (fields.chunks_exact(3))
            .map(|record| RefRecord {
                name: record[0].to_owned(),
                sha: record[1].to_owned(),
                text: record[2].to_owned(),
            })
            .collect()
    }

    /// Writes `message` as the commit of ref `dst` on the remote if the ref there is still
    /// `expect` (empty: it must not exist). `Ok(Some(commit))` when it took; `Ok(None)` when
    /// another worker was first.
    pub(crate) fn push_record(
        &self,
        remote: &str,
        dst: &str,
        message: &str,
        expect: &str,
    ) -> Result<Option<String>, String> {
        self.push_record_with(remote, (dst, message, expect), &[])
    }

    /// [`Repo::push_record`] with `also` updated in the same all-or-nothing push.
    fn push_record_with(
        &self,
        remote: &str,
        (dst, message, expect): (&str, &str, &str),
        also: &[Update<'_>],
    ) -> Result<Option<String>, String> {
        let written = if also.is_empty() {
            self.write_record_into(remote, (dst, message, expect))
        } else {
            self.write_record_with_updates_into(remote, (dst, message, expect), also)
        };
        match written {
            Written::Done(commit) => return Ok(Some(commit)),
            Written::Moved => return Ok(None),
            Written::Push => {}
        }
        let commit = record_commit(self.root(), &[], message)?;
        let mut updates = vec![Update {
            dst: dst.to_owned(),
            new: Some(&commit),
            expect: Some(expect),
        }];
        updates.extend_from_slice(also);
        // Not straight into the remote: that was tried above.
        Ok(match self.push_by_git(remote, &updates)? {
            Pushed::Done => Some(commit),
            Pushed::Moved => None,
        })
    }

    /// The commit `rev` names, if it exists.
    pub(crate) fn resolve(&self, rev: &str) -> Option<String> {
        if rev == "HEAD"
            && let Some(oid) = self.head_oid()
        {
            return Some(oid);
        }
        // Branches and remote-tracking branches name commits: their files say which.
        if rev.starts_with("refs/heads/") || rev.starts_with("refs/remotes/") {
            match self.read_ref(rev) {
                refs::Read::Found(oid) => return Some(oid),
                refs::Read::Absent => return None,
                refs::Read::Unknown => {}
            }
        }
        let output = self
            .run(&[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{rev}^{{commit}}"),
            ])
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// The content of `path` (repository-relative) at `rev`; `None` when it has no such file.
    pub(crate) fn file_at(&self, rev: &str, path: &str) -> Option<Vec<u8>> {
        let output = self.run(&["show", &format!("{rev}:{path}")]).ok()?;
        output.status.success().then_some(output.stdout)
    }

    /// The claims last fetched from `remote`.
    pub(crate) fn seen_claims(&self, remote: &str) -> Vec<SeenClaim> {
        let prefix = seen_prefix(remote);
        claims_of(self.records_under(prefix.trim_end_matches('*')), &prefix)
    }

    /// The claims of the repository on this machine whose git directory is `dir` (a remote
    /// read without fetching).
    pub(crate) fn claims_in(&self, dir: &Path) -> Vec<SeenClaim> {
        let prefix = format!("{CLAIMS}/");
        claims_of(self.records_in(Some(dir), &prefix), &prefix)
    }

    /// Writes `claim` for task `id` on the remote if the claim there is still `expect` (empty:
    /// no claim yet). `Ok(Some(commit))` when it took; `Ok(None)` when another worker was first.
    pub(crate) fn push_claim(
        &self,
        remote: &str,
        claim: &Claim,
        expect: &str,
    ) -> Result<Option<String>, String> {
        let message = serde_json::to_string(claim).map_err(|err| err.to_string())?;
        self.push_record(remote, &claim_ref(&claim.task), &message, expect)
    }

    /// [`Repo::push_claim`] with local branch `branch` pushed along, in one all-or-nothing
    /// push: a finished task's last commits go with its claim marked ready.
    pub(crate) fn push_claim_and_branch(
        &self,
        remote: &str,
        (claim, expect): (&Claim, &str),
        branch: &str,
    ) -> Result<Option<String>, String> {
        let message = serde_json::to_string(claim).map_err(|err| err.to_string())?;
        let local = format!("refs/heads/{branch}");
        let also = [Update {
            dst: local.clone(),
            new: Some(&local),
            expect: None,
        }];
        let dst = claim_ref(&claim.task);
        self.push_record_with(remote, (&dst, &message, expect), &also)
    }

    /// A worktree at `path` with `rev` checked out on a detached HEAD (created, or reset there
    /// with anything left in it discarded).
    pub(crate) fn detached_worktree(
        &self,
        path: &std::path::Path,
        rev: &str,
    ) -> Result<Self, String> {
        if path.join(".git").exists() {
            let tree = Self::linked_worktree(path).ok_or("the integration worktree is broken")?;
            tree.abort_unfinished_merge("");
            check(
                tree.run(&["checkout", "-q", "-f", "--detach", rev]),
                "git checkout",
            )?;
            check(tree.run(&["clean", "-q", "-f", "-d"]), "git clean")?;
            return Ok(tree);
        }
        let shown = path.to_string_lossy().into_owned();
        self.add_worktree_pruned(&["worktree", "add", "-q", "-f", "--detach", &shown, rev])?;
        Self::linked_worktree(path)
            .ok_or_else(|| "the integration worktree was not created".to_owned())
    }

    /// Deletes a remote-tracking ref (`refs/remotes/…`) the next fetch would prune anyway.
    pub(crate) fn delete_remote_tracking(&self, name: &str) -> Result<(), String> {
        check(self.run(&["update-ref", "-d", name]), "git update-ref -d").map(drop)
    }

    /// Pushes `branch` to the remote only while the claim ref (`claim`: its name and the commit
    /// it must still have there) is unchanged, in one atomic push.
    pub(crate) fn push_branch_fenced(
        &self,
        remote: &str,
        branch: &str,
        (claim, sha): (&str, &str),
    ) -> Result<Pushed, String> {
        let local = format!("refs/heads/{branch}");
        self.push(
            remote,
            &[
                Update {
                    dst: local.clone(),
                    new: Some(&local),
                    expect: None,
                },
                Update {
                    dst: claim.to_owned(),
                    new: Some(sha),
                    expect: Some(sha),
                },
            ],
        )
    }

    /// Changes every ref of `updates` on the remote, or none of them (`--atomic`), each only
    /// if it still has its expected value.
    pub(crate) fn push(&self, remote: &str, updates: &[Update<'_>]) -> Result<Pushed, String> {
        // At a remote on this machine, straight into it when a push would do nothing more.
        match self.write_updates_into(remote, updates) {
            Written::Done(_) => Ok(Pushed::Done),
            Written::Moved => Ok(Pushed::Moved),
            Written::Push => self.push_by_git(remote, updates),
        }
    }

    /// [`Repo::push`] by `git push`.
    fn push_by_git(&self, remote: &str, updates: &[Update<'_>]) -> Result<Pushed, String> {
        let mut args = vec![
            "push".to_owned(),
            "--porcelain".to_owned(),
            "--atomic".to_owned(),
            "--no-verify".to_owned(),
        ];
        for update in updates {
            if let Some(expect) = update.expect {
                args.push(format!("--force-with-lease={}:{expect}", update.dst));
            }
        }
        args.push(remote.to_owned());
        for update in updates {
            args.push(format!("{}:{}", update.new.unwrap_or(""), update.dst));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = self
            .remote_run(&args)
            .map_err(|err| format!("git push could not run: {err}"))?;
        if output.status.success() {
            return Ok(Pushed::Done);
        }
        let report = String::from_utf8_lossy(&output.stdout);
        if push_lost_a_race(&report, &String::from_utf8_lossy(&output.stderr)) {
            return Ok(Pushed::Moved);
        }
        check(Ok(output), &format!("git push {remote}")).map(|_| Pushed::Done)
    }
}

/// Where the claims of `remote` are kept locally once fetched.
pub(super) fn seen_prefix(remote: &str) -> String {
    format!("refs/ralph/seen/{remote}/*")
}

/// Where the fleet's records of `remote` are kept locally once fetched.
pub(super) fn fleet_seen(remote: &str) -> String {
    format!("refs/ralph/fleet-seen/{remote}")
}

/// The remote ref of question `id` of a `--worker`'s agent.
pub(crate) fn question_ref(id: &str) -> String {
    format!("{FLEET}/questions/{id}")
}

/// The remote ref of task `id`'s claim.
pub(crate) fn claim_ref(id: &str) -> String {
    format!("{CLAIMS}/{id}")
}

/// Whether a failed push says a ref had moved rather than that the remote refused or could not
/// be reached: in the porcelain report (`report`: a lease that no longer held, a ref that exists
/// already, a push that is not a fast-forward, all found before sending), or in the remote's
/// messages (`messages`: another worker's update got in between when the remote locked the ref).
fn push_lost_a_race(report: &str, messages: &str) -> bool {
    let rejected = report
        .lines()
        .filter(|line| line.starts_with('!'))
        .any(|line| {
            [
                "stale info",
                "fetch first",
                "non-fast-forward",
                "already exists",
            ]
            .iter()
            .any(|reason| line.contains(reason))
        });
    // Two pushes of one ref at the same instant: the loser finds the ref's lock file taken, the
    // ref made or moved, or (a lease on a ref another worker deleted meanwhile) the ref gone.
    let overtaken = messages.lines().any(|line| {
        line.contains("cannot lock ref")
            && (line.contains("reference already exists")
                || line.contains("but expected")
                || line.contains("unable to resolve reference")
                || line.contains(".lock': File exists"))
    });
    rejected || overtaken
}

/// What the files of the repository whose git directory is `dir` say of its branches, as `git
/// ls-remote --symref` would: its HEAD's branch only when that branch exists.
fn heads_in(dir: &Path) -> Option<RemoteHeads> {
    let head = std::fs::read_to_string(dir.join("HEAD")).ok()?;
    let listed = refs::listed(dir, &[], "refs/heads/")?;
    let branches: Vec<String> = (listed.into_iter())
        .filter_map(|(name, _)| name.strip_prefix("refs/heads/").map(str::to_owned))
        .collect();
    let default = (head.trim_end().strip_prefix("ref: refs/heads/"))
        .filter(|name| branches.iter().any(|branch| branch == name))
        .map(str::to_owned);
    Some(RemoteHeads { branches, default })
}

/// The claims of `records`, each named by its ref below `prefix`.
fn claims_of(records: Vec<RefRecord>, prefix: &str) -> Vec<SeenClaim> {
    let prefix = prefix.trim_end_matches('*');
    (records.into_iter())
        .filter_map(|record| {
            Some(SeenClaim {
                id: record.name.strip_prefix(prefix)?.to_owned(),
                claim: serde_json::from_str(&record.text).ok(),
                sha: record.sha,
            })
        })
        .collect()
}

/// The refspec that fetches the base `base` of `remote` to its remote-tracking ref.
fn base_spec(remote: &str, base: &str) -> String {
    format!("+refs/heads/{base}:refs/remotes/{remote}/{base}")
}

#[cfg(test)]
mod tests {
    use super::super::tests::repo;
    use super::push_lost_a_race;

    #[test]
    fn a_remote_on_this_machine_is_found_by_its_address_and_read_as_git_reads_it() {
        let Some((_dir, repo)) = repo() else { return };
        let bare = repo.root().join("remote.git");
        let init = repo.run(&["init", "-q", "--bare", "-b", "trunk", "remote.git"]);
        assert!(init.is_ok_and(|output| output.status.success()));
        let path = bare.display().to_string();
        for url in [
            path.clone(),
            format!("file://{path}"),
            "remote.git".to_owned(),
        ] {
            assert_eq!(repo.local_git_dir(&url).as_deref(), Some(&*bare), "{url}");
        }
        // A work tree's repository is its `.git`.
        assert_eq!(
            repo.local_git_dir(".").as_deref(),
            Some(&*repo.common_dir())
        );
        for url in [
            "git@host:owner/repo.git",
            "https://host/repo.git",
            "nothing-here",
        ] {
            assert_eq!(repo.local_git_dir(url), None, "{url}");
        }
        assert!(repo.run(&["remote", "add", "origin", &path]).is_ok());
        assert!(
            repo.run(&["push", "-q", "origin", "HEAD:refs/heads/trunk"])
                .is_ok()
        );
        assert!(
            repo.run(&["push", "-q", "origin", "HEAD:refs/heads/ralph/t1"])
                .is_ok()
        );
        let asked = repo.remote_heads(("origin", None)).unwrap();
        let read = repo.remote_heads(("origin", Some(&bare))).unwrap();
        assert_eq!(
            (&read.branches, &read.default),
            (&asked.branches, &asked.default)
        );
        assert_eq!(read.default.as_deref(), Some("trunk"));
        let claim = super::claim_ref("t1");
        assert!(
            repo.run(&["push", "-q", "origin", &format!("HEAD:{claim}")])
                .is_ok()
        );
        let asked = repo.base_and_claims_now(("origin", None), "trunk").unwrap();
        let read = repo
            .base_and_claims_now(("origin", Some(&bare)), "trunk")
            .unwrap();
        assert_eq!(read, asked);
        assert_eq!(read.len(), 2);
    }

    #[test]
    fn records_read_again_follow_their_refs() {
        let Some((_dir, repo)) = repo() else { return };
        let prefix = "refs/ralph/seen/origin/";
        let commit =
            |message: &str| super::super::nearby::record_commit(repo.root(), &[], message).unwrap();
        let texts = || -> Vec<String> {
            (repo.records_under(prefix).into_iter())
                .map(|record| record.text)
                .collect()
        };
        assert!(texts().is_empty());
        let name = format!("{prefix}t1");
        assert!(repo.run(&["update-ref", &name, &commit("one")]).is_ok());
        assert_eq!(texts(), ["one"]);
        assert_eq!(texts(), ["one"], "read again, unchanged");
        assert!(repo.run(&["update-ref", &name, &commit("two")]).is_ok());
        assert_eq!(texts(), ["two"]);
        assert!(repo.run(&["pack-refs", "--all"]).is_ok());
        assert_eq!(texts(), ["two"], "packed");
        assert!(repo.run(&["update-ref", "-d", &name]).is_ok());
        assert!(texts().is_empty());
    }

    #[test]
    fn a_moved_ref_is_told_from_a_refusal() {
        let moved =
            "To /srv/repo.git\n!\tabc:refs/ralph/claims/t1\t[rejected] (stale info)\nDone\n";
        assert!(push_lost_a_race(moved, ""));
        let ff = "!\trefs/heads/main:refs/heads/main\t[rejected] (non-fast-forward)\n";
        assert!(push_lost_a_race(ff, ""));
        let failed = "!\tabc:refs/ralph/claims/a\t[remote rejected] (failed to update ref)\n";
        let locked =
            "remote: error: cannot lock ref 'refs/ralph/claims/a': reference already exists\n";
        assert!(push_lost_a_race(failed, locked));
        let moved_on =
            "remote: error: cannot lock ref 'refs/heads/main': is at 1234 but expected 5678\n";
        assert!(push_lost_a_race(failed, moved_on));
        let racing = "remote: error: cannot lock ref 'refs/heads/main': Unable to create '/srv/r.git/refs/heads/main.lock': File exists.\n";
        assert!(push_lost_a_race(failed, racing));
        let deleted = "remote: error: cannot lock ref 'refs/ralph/claims/b': unable to resolve reference 'refs/ralph/claims/b'\n";
        assert!(push_lost_a_race(failed, deleted));
        let refused =
            "!\tabc:refs/ralph/claims/t1\t[remote rejected] (pre-receive hook declined)\n";
        assert!(!push_lost_a_race(refused, "remote: pushes are closed\n"));
        assert!(!push_lost_a_race(
            "",
            "fatal: '/nowhere' does not appear to be a git repository\n"
        ));
    }
}
