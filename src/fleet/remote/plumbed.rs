//! A worker's merge made by git's plumbing, when git can and the repository has no hook a merge
//! commit would run: the task's branch (and its riders') merged into the fetched base by
//! `merge-tree`, ralph's own files (the task list, the progress log) made in a folder of their
//! own and set over the merged tree, each commit made by `commit-tree`. Nothing is checked out,
//! so a merge whose push lost a race costs one fetch and a few processes.

use std::path::{Path, PathBuf};

use crate::error::fail;
use crate::git::{Repo, TreeMerge, Trees};
use crate::storage::RalphDir;
use crate::storage::tasks::TaskStatus;

use super::super::{base, carry};
use super::integrate::Train;
use super::train::Rider;
use super::{Integrated, Session};

/// ralph's own files as a merge commit has them: each path with its blob (`None`: no such file).
type OwnBlobs = Vec<(String, Option<String>)>;

/// ralph's own files of the merge being made, in a folder of their own (removed when dropped).
struct Scratch {
    root: PathBuf,
    dir: RalphDir,
    /// Their paths, repository-relative.
    paths: Vec<String>,
}

impl Scratch {
    /// The folder, emptied, for ralph's own files (`paths`) of a repository whose run is in
    /// `prefix`.
    fn new(root: PathBuf, prefix: &str, paths: Vec<String>) -> anyhow::Result<Self> {
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root)
            .map_err(|err| fail(format!("{} could not be made: {err}", root.display())))?;
        let dir = RalphDir::new(&root.join(prefix));
        Ok(Self { root, dir, paths })
    }

    /// The conflicts of a merge in files other than ralph's own (those are made here).
    fn real(&self, conflicts: &[String]) -> Vec<String> {
        (conflicts.iter())
            .filter(|path| !self.paths.contains(path))
            .cloned()
            .collect()
    }

    /// Writes each of ralph's own files as the first of `revs` that has it.
    fn lay_out(&self, repo: &Repo, revs: &[&str]) -> Result<(), String> {
        let wanted: Vec<(&str, &str)> = (self.paths.iter())
            .flat_map(|path| revs.iter().map(move |rev| (*rev, path.as_str())))
            .collect();
        let mut files = repo.files_at(&wanted)?.into_iter();
        for path in &self.paths {
            let versions: Vec<_> = files.by_ref().take(revs.len()).collect();
            let found = versions.into_iter().find_map(|version| version.transpose());
            if let Some(content) = found.transpose()? {
                let file = self.root.join(path);
                if let Some(folder) = file.parent() {
                    std::fs::create_dir_all(folder).map_err(|err| err.to_string())?;
                }
                std::fs::write(&file, content).map_err(|err| err.to_string())?;
            }
        }
        Ok(())
    }

    /// ralph's own files as they are here, written as blobs.
    fn blobs(&self, repo: &Repo) -> Result<OwnBlobs, String> {
        let files: Vec<PathBuf> = self.paths.iter().map(|path| self.root.join(path)).collect();
        let present: Vec<&Path> = (files.iter().map(PathBuf::as_path))
            .filter(|file| file.is_file())
            .collect();
        let mut ids = repo.write_blobs(&present)?.into_iter();
        Ok((self.paths.iter().zip(&files))
            .map(|(path, file)| (path.clone(), file.is_file().then(|| ids.next()).flatten()))
            .collect())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Session<'_> {
    /// Whether this worker merges by plumbing: git can, and no hook of the repository would
    /// run for a merge commit (one made by `git commit` runs them, in the run's sandbox).
    pub(super) fn plumbs(&self) -> bool {
        self.site.merges_trees && !self.site.repo.has_hooks()
    }

    /// Task `id`'s branch merged into the base at `base_sha` as a merge commit (`message`),
    /// the task marked done and its notes and tasks carried; with the riders' branches merged
    /// after it, unless `alone`. How the merge ended when it cannot go to the remote.
    pub(super) fn plumbed_train(
        &self,
        id: &str,
        base_sha: &str,
        message: &str,
        alone: bool,
    ) -> anyhow::Result<Result<Train, Integrated>> {
        let repo = &self.site.repo;
        let branch = base::branch(id);
        let failed = |why: String| fail(format!("merging task {id} failed: {why}"));
        let tip = (repo.resolve(&format!("refs/heads/{branch}")))
            .ok_or_else(|| failed(format!("its branch {branch} is gone")))?;
        let merged = merge_trees(repo, base_sha, &tip).map_err(failed)?;
        let root = self.dir.integration_scratch("own");
        let scratch = Scratch::new(root, repo.prefix(), self.own_files(repo))?;
        let real = scratch.real(&merged.conflicts);
        if !real.is_empty() {
            return Ok(Err(Integrated::Conflict(real)));
        }
        // ralph's own files as the base has them (the branch's, for one the base has not),
        // then what the branch added to them, and the task marked done.
        scratch.lay_out(repo, &[base_sha, &tip]).map_err(failed)?;
        let carried = carry::into_base(repo, &scratch.dir, (&branch, base_sha), id);
        base::mark(&scratch.dir, id, TaskStatus::Complete, None).map_err(failed)?;
        let own = scratch.blobs(repo).map_err(failed)?;
        let mut trees = Trees::open(repo).map_err(failed)?;
        let parents = [base_sha, tip.as_str()];
        let made = commit_merge((repo, &mut trees), &merged.tree, &own, &parents, message);
        let commit = made.map_err(failed)?;
        let gate = self.gate();
        if let Some(check) = gate.merge_check_of(id, repo, (base_sha, &commit), &scratch.dir) {
            return Ok(Err(Integrated::GateFailed(check)));
        }
        let hash = (commit.get(..crate::git::SHORT_HASH))
            .unwrap_or(&commit)
            .to_owned();
        let riders = if alone {
            Vec::new()
        } else {
            self.riders(id, &self.site.list()?)
        };
        let (mut head, mut riders) =
            self.plumbed_riders((&scratch, &mut trees), (commit, &own), riders);
        // Tasks that became ready while this train was made board it too: one push for both.
        let late = if alone {
            Vec::new()
        } else {
            self.late_riders(id, &riders)?
        };
        if !late.is_empty()
            && let Ok(own) = scratch.blobs(repo)
        {
            let (last, more) =
                self.plumbed_riders((&scratch, &mut trees), (head.clone(), &own), late);
            head = last;
            riders.extend(more);
        }
        Ok(Ok(Train {
            head,
            hash,
            carried,
            riders,
        }))
    }

    /// Merges each rider in turn after `start` (this worker's own merge, whose own files are
    /// `own`), one merge commit each with ralph's own files kept; then one commit carries their
    /// notes and tasks and marks them done. A rider that conflicts or fails its merge's own
    /// checks is left to its worker. The train's last commit, and the riders it merged.
    fn plumbed_riders(
        &self,
        (scratch, trees): (&Scratch, &mut Trees),
        (start, own): (String, &OwnBlobs),
        riders: Vec<Rider>,
    ) -> (String, Vec<Rider>) {
        let repo = &self.site.repo;
        let mut head = start.clone();
        let mut merged = Vec::new();
        for rider in riders {
            let Ok(tree) = merge_trees(repo, &head, &rider.commit) else {
                continue;
            };
            if !scratch.real(&tree.conflicts).is_empty() {
                continue;
            }
            // What the rider brings: ralph's own files are kept as the train has them.
            let Ok(changed) = trees.changed(&head, &tree.tree) else {
                continue;
            };
            let (own_touched, changed): (Vec<String>, Vec<String>) =
                (changed.into_iter()).partition(|path| scratch.paths.contains(path));
            // Its own worker meets a refusal and tells its agent.
            let read = &mut |wanted: &[(&str, &str)]| trees.files_at(wanted);
            let check =
                (self.gate()).merged_check(&rider.id, read, (&tree.tree, &changed), &scratch.dir);
            if check.is_some() {
                continue;
            }
            let message = format!("Ralph: merge task {} — {}", rider.id, rider.text);
            let parents = [head.as_str(), rider.commit.as_str()];
            let commit = if own_touched.is_empty() {
                repo.commit_tree(&tree.tree, &parents, &message)
            } else {
                commit_merge((repo, trees), &tree.tree, own, &parents, &message)
            };
            let Ok(commit) = commit else {
                continue;
            };
            let before = std::mem::replace(&mut head, commit);
            merged.push((rider, before, !own_touched.is_empty()));
        }
        if merged.is_empty() {
            return (start, Vec::new());
        }
        // A branch that left ralph's own files as they were has no notes or tasks to carry.
        let on: Vec<(&str, &str, bool)> = (merged.iter())
            .map(|(rider, before, own_touched)| {
                (rider.commit.as_str(), before.as_str(), *own_touched)
            })
            .collect();
        let mut bases = carry::merge_bases(repo, &start, &on).into_iter();
        let mut riders = Vec::new();
        for (mut rider, before, own_touched) in merged {
            let merge_base = bases.next().flatten();
            if own_touched {
                let on = (rider.commit.as_str(), before.as_str(), merge_base);
                let read = &mut |wanted: &[(&str, &str)]| trees.files_at(wanted);
                rider.carried = carry::into_base_after((repo, read), &scratch.dir, on, &rider.id);
            }
            if base::mark(&scratch.dir, &rider.id, TaskStatus::Complete, None).is_err() {
                return (start, Vec::new());
            }
            riders.push(rider);
        }
        let ids: Vec<&str> = riders.iter().map(|rider| rider.id.as_str()).collect();
        let message = format!("Ralph: tasks {} merged", ids.join(", "));
        let tree = format!("{head}^{{tree}}");
        let own = scratch.blobs(repo);
        match own.and_then(|own| commit_merge((repo, trees), &tree, &own, &[&head], &message)) {
            Ok(last) => (last, riders),
            Err(_) => (start, Vec::new()),
        }
    }

    /// Other workers' tasks that became ready while this worker made its train (`aboard`):
    /// looked for without fetching (`Site::refs_now`), fetched only when a claim moved since the
    /// last fetch.
    fn late_riders(&self, id: &str, aboard: &[Rider]) -> anyhow::Result<Vec<Rider>> {
        let Ok(now) = self.site.refs_now() else {
            return Ok(Vec::new());
        };
        let moved = !self.claims_since_fetch(&now).is_empty();
        let room = super::train::RIDERS_MAX.saturating_sub(aboard.len());
        if !moved || room == 0 {
            return Ok(Vec::new());
        }
        self.site.fetch()?;
        let list = self.site.list()?;
        let aboard = |rider: &Rider| aboard.iter().any(|each| each.id == rider.id);
        Ok((self.riders(id, &list).into_iter())
            .filter(|rider| !aboard(rider))
            .take(room)
            .collect())
    }
}

/// [`Repo::merge_trees`], which [`Session::plumbs`] made sure this git can do.
fn merge_trees(repo: &Repo, ours: &str, theirs: &str) -> Result<TreeMerge, String> {
    repo.merge_trees(ours, theirs)?
        .ok_or_else(|| "this git cannot merge without a checkout (git 2.38 or newer can)".into())
}

/// A commit of `tree` with ralph's own files set to `own`, on `parents`: its id.
fn commit_merge(
    (repo, trees): (&Repo, &mut Trees),
    tree: &str,
    own: &OwnBlobs,
    parents: &[&str],
    message: &str,
) -> Result<String, String> {
    let files: Vec<(&str, Option<&str>)> = (own.iter())
        .map(|(path, blob)| (path.as_str(), blob.as_deref()))
        .collect();
    let tree = trees.with_files(tree, &files)?;
    repo.commit_tree(&tree, parents, message)
}
