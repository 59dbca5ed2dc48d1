//! Records written straight into a remote on this machine (a path, or a `file://` address, as
//! on a cluster's shared disk): a claim is a commit with no files, so writing it takes two git
//! processes in the remote's folder rather than a push's six on both sides. Only a remote whose
//! pushes would do nothing more is written so: no hook, no `receive.*` or `transfer.*` setting,
//! no `core.hooksPath`. A task branch written with its claim has its new loose objects copied
//! in first (`copy_objects_into`). Anything else (or a write that fails) goes by `git push`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{EMPTY_TREE, Repo, check, fed, git_command, refs};

/// Each clone's shared git directory and remote name, with the remote's git directory when it
/// is on this machine (`LOCAL`), and when records can be written into it (`WRITABLE`). Asked
/// once per remote and process.
type Entry = ((PathBuf, String), Option<PathBuf>);
static LOCAL: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
static WRITABLE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
/// The same, when objects can be copied into it too (`COPYABLE`).
static COPYABLE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// What `memo` says of `key`, or else what `find` says (then kept).
fn remembered(
    memo: &Mutex<Vec<Entry>>,
    key: (PathBuf, String),
    find: impl FnOnce() -> Option<PathBuf>,
) -> Option<PathBuf> {
    if let Some((_, dir)) = (memo.lock().ok()?.iter()).find(|(each, _)| *each == key) {
        return dir.clone();
    }
    let dir = find();
    if let Ok(mut known) = memo.lock() {
        known.push((key, dir.clone()));
    }
    dir
}

/// How a record written into the remote went.
pub(super) enum Written {
    /// The ref now names the record's commit.
    Done(String),
    /// The ref was no longer what it was expected to be: nothing was changed.
    Moved,
    /// It could not be written so: a push has to.
    Push,
}

impl Repo {
    /// The git directory of the repository at `url` when it is one on this machine's file
    /// system (a path, or a `file://` address), as on a cluster's shared disk: its refs can be
    /// read from its files rather than asked of it by a process on each side.
    pub(super) fn local_git_dir(&self, url: &str) -> Option<PathBuf> {
        let path = match url.strip_prefix("file://") {
            Some(path) => PathBuf::from(path),
            // `host:path` is an ssh address unless a `/` comes before the `:`.
            None if url.contains("://") => return None,
            None if url
                .split('/')
                .next()
                .is_some_and(|first| first.contains(':')) =>
            {
                return None;
            }
            None => self.root.join(url),
        };
        let bare = path.join("HEAD").is_file() && path.join("refs").is_dir();
        let dir = if bare { path } else { path.join(".git") };
        let plain = dir.join("HEAD").is_file() && dir.join("refs").is_dir();
        (plain && !dir.join("commondir").exists()).then_some(dir)
    }

    /// The git directory of remote `name` when it is a repository on this machine reached by
    /// git's own programs (no `remote.<name>.uploadpack` or `receivepack` of its own); `url`:
    /// its address, when known already.
    pub(crate) fn local_remote(&self, (name, url): (&str, Option<&str>)) -> Option<PathBuf> {
        remembered(&LOCAL, (self.common_dir(), name.to_owned()), || {
            let url = match url {
                Some(url) => url.to_owned(),
                None => self.remote_url(name)?,
            };
            let dir = self.local_git_dir(&url)?;
            let pattern = format!(
                r"^remote\.{}\.(uploadpack|receivepack)$",
                regex::escape(name)
            );
            let own = self.run(&["config", "--get-regexp", &pattern]).ok()?;
            // `git config` exits with 1 when no setting matches.
            (own.status.code() == Some(1)).then_some(dir)
        })
    }

    /// The git directory of `remote` when records can be written straight into it.
    fn writable_remote(&self, remote: &str) -> Option<PathBuf> {
        remembered(&WRITABLE, (self.common_dir(), remote.to_owned()), || {
            (self.local_remote((remote, None))).filter(|dir| pushes_do_nothing_more(self, dir))
        })
    }

    /// The git directory of `remote` when this clone's objects can be copied into it as they
    /// are: writable, with SHA-1 names as this clone's, and no `core.sharedRepository` (whose
    /// permissions git would set and a copy would not).
    fn copyable_remote(&self, remote: &str) -> Option<PathBuf> {
        remembered(&COPYABLE, (self.common_dir(), remote.to_owned()), || {
            let dir = self.writable_remote(remote)?;
            let at = format!("--git-dir={}", dir.display());
            let pattern = r"^(core\.sharedrepository|extensions\.objectformat)$";
            let mut settings = git_command(self.root(), &[&at, "config", "--get-regexp", pattern]);
            let plain = (settings.output())
                .is_ok_and(|output| output.status.code() == Some(1) && output.stdout.is_empty());
            let sha1 = self.resolve("HEAD").is_some_and(|oid| oid.len() == 40);
            (plain && sha1).then_some(dir)
        })
    }

    /// Writes `message` as the commit of ref `dst` in `remote` when it is on this machine,
    /// if the ref there is still `expect` (empty: it must not exist).
    pub(super) fn write_record_into(
        &self,
        remote: &str,
        (dst, message, expect): (&str, &str, &str),
    ) -> Written {
        let Some(dir) = self.writable_remote(remote) else {
            return Written::Push;
        };
        // A ref that moved already is a lost race, told without a process.
        if ref_in(&dir, dst).is_some_and(|now| now != expect) {
            return Written::Moved;
        }
        self.record_into(&dir, (dst, message, expect), &[])
    }

    /// [`Repo::write_record_into`] with the local branches `branches` (full names,
    /// `refs/heads/…`) set to the same names in the remote in the same all-or-nothing change,
    /// once the objects of theirs that the remote's branches do not reach are copied into it. A
    /// loose object is a file named by its content, so copying it is all a push would do with
    /// it. A branch there may only move forward, as a push's would. Anything else (an object
    /// this clone keeps in a pack, a branch that would not move forward) goes by push.
    pub(super) fn write_record_with_branches_into(
        &self,
        remote: &str,
        record: (&str, &str, &str),
        branches: &[&str],
    ) -> Written {
        let Some(dir) = self.copyable_remote(remote) else {
            return Written::Push;
        };
        let (dst, _, expect) = record;
        if ref_in(&dir, dst).is_some_and(|now| now != expect) {
            return Written::Moved;
        }
        let Some(heads) = refs::listed(&dir, &[], "refs/heads/") else {
            return Written::Push;
        };
        let mut moves = Vec::new();
        for branch in branches {
            let Some(new) = self.resolve(branch) else {
                return Written::Push;
            };
            let old = (heads.iter().find(|(name, _)| name == branch))
                .map(|(_, sha)| sha.clone())
                .unwrap_or_default();
            let forward = old.is_empty() || old == new || self.is_ancestor(&old, &new);
            if !forward {
                return Written::Push;
            }
            moves.push(((*branch).to_owned(), new, old));
        }
        let tips: Vec<&str> = heads.iter().map(|(_, sha)| sha.as_str()).collect();
        let wanted: Vec<&str> = moves.iter().map(|(_, new, _)| new.as_str()).collect();
        if !self.copy_objects_into(&dir, &wanted, &tips) {
            return Written::Push;
        }
        self.record_into(&dir, record, &moves)
    }

    /// Writes the record (`dst`, `message`, `expect`) into the repository whose git directory
    /// is `dir`, with the refs `moves` (name, new value, old value or empty) in the same
    /// transaction.
    fn record_into(
        &self,
        dir: &Path,
        (dst, message, expect): (&str, &str, &str),
        moves: &[(String, String, String)],
    ) -> Written {
        let at = format!("--git-dir={}", dir.display());
        // git takes the empty tree a record is made on as there without its object, but its
        // `fsck` does not: written once, so the remote checks whole.
        let (folder, name) = EMPTY_TREE.split_at(2);
        if !dir.join("objects").join(folder).join(name).exists() {
            let _ = fed(git_command(self.root(), &[&at, "mktree"]), b"");
        }
        let made = record_commit(self.root(), &[&at], message);
        let Ok(commit) = made else {
            return Written::Push;
        };
        let line = |name: &str, new: &str, old: &str| {
            if old.is_empty() {
                format!("create {name} {new}\n")
            } else {
                format!("update {name} {new} {old}\n")
            }
        };
        let mut command = line(dst, &commit, expect);
        for (name, new, old) in moves {
            command.push_str(&line(name, new, old));
        }
        let updated = fed(
            git_command(self.root(), &[&at, "update-ref", "--stdin"]),
            command.as_bytes(),
        );
        if updated.is_ok_and(|output| output.status.success()) {
            return Written::Done(commit);
        }
        // Refused: because another worker moved the ref, or for a reason a push may not have.
        match ref_in(dir, dst) {
            Some(now) if now != expect => Written::Moved,
            _ => Written::Push,
        }
    }

    /// Whether commit `old` is `new` or one of its ancestors.
    fn is_ancestor(&self, old: &str, new: &str) -> bool {
        (self.run(&["merge-base", "--is-ancestor", old, new]))
            .is_ok_and(|output| output.status.success())
    }

    /// Copies into the repository whose git directory is `dir` every object reachable from the
    /// commits `wanted` that its commits `tips` do not reach: `false` when one is not a loose
    /// object here (a push must send it) or cannot be copied.
    fn copy_objects_into(&self, dir: &Path, wanted: &[&str], tips: &[&str]) -> bool {
        let mut input = String::new();
        for sha in wanted {
            input.push_str(sha);
            input.push('\n');
        }
        for sha in tips {
            input.push('^');
            input.push_str(sha);
            input.push('\n');
        }
        let args = [
            "rev-list",
            "--objects",
            "--no-object-names",
            "--ignore-missing",
            "--stdin",
        ];
        let listed = fed(git_command(self.root(), &args), input.as_bytes());
        let Ok(listed) = listed
            .map_err(drop)
            .and_then(|output| output.status.success().then_some(output.stdout).ok_or(()))
        else {
            return false;
        };
        let (from, to) = (self.common_dir().join("objects"), dir.join("objects"));
        String::from_utf8_lossy(&listed)
            .lines()
            .all(|oid| copy_object(&from, &to, oid.trim()).is_ok())
    }
}

/// Copies the loose object `oid` from the objects folder `from` into `to` unless `to` has it
/// loose already: written beside its place and linked there, so it appears whole or not at all.
fn copy_object(from: &Path, to: &Path, oid: &str) -> std::io::Result<()> {
    if oid.len() < 3 || !oid.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(std::io::Error::other("not an object name"));
    }
    let (folder, name) = oid.split_at(2);
    let target = to.join(folder).join(name);
    if target.exists() {
        return Ok(());
    }
    let bytes = std::fs::read(from.join(folder).join(name))?;
    std::fs::create_dir_all(to.join(folder))?;
    let scratch = tempfile::Builder::new()
        .prefix("tmp_obj_")
        .tempfile_in(to.join(folder))?;
    std::fs::write(scratch.path(), &bytes)?;
    let mut permissions = std::fs::metadata(scratch.path())?.permissions();
    permissions.set_readonly(true);
    std::fs::set_permissions(scratch.path(), permissions)?;
    match std::fs::hard_link(scratch.path(), &target) {
        Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => Err(err),
        _ => Ok(()),
    }
}

/// The commit ref `name` of the repository whose git directory is `dir` names, read from its
/// files: empty when there is no such ref, `None` when the files cannot tell.
fn ref_in(dir: &Path, name: &str) -> Option<String> {
    let folder = name.rsplit_once('/').map_or("", |(folder, _)| folder);
    let listed = refs::listed(dir, &[name], &format!("{folder}/"))?;
    let found = listed.into_iter().find(|(each, _)| each == name);
    Some(found.map(|(_, sha)| sha).unwrap_or_default())
}

/// A record's commit: `message` on no files, by ralph, made by git run in `dir` with `before`
/// (`--git-dir=…`) before its command.
pub(super) fn record_commit(dir: &Path, before: &[&str], message: &str) -> Result<String, String> {
    let mut args = before.to_vec();
    args.extend(["commit-tree", EMPTY_TREE, "-m", message]);
    let output = check(
        git_command(dir, &args)
            .env("GIT_AUTHOR_NAME", "ralph")
            .env("GIT_AUTHOR_EMAIL", "ralph@localhost")
            .env("GIT_COMMITTER_NAME", "ralph")
            .env("GIT_COMMITTER_EMAIL", "ralph@localhost")
            .output(),
        "git commit-tree",
    )?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Whether a push into the repository at `dir` would do no more than update its refs: it has
/// no hook and no setting that changes what it receives.
fn pushes_do_nothing_more(repo: &Repo, dir: &Path) -> bool {
    let hooks = match std::fs::read_dir(dir.join("hooks")) {
        Ok(entries) => entries
            .map(|entry| entry.map(|entry| entry.file_name()))
            .collect::<Result<Vec<_>, _>>()
            .ok(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Some(Vec::new()),
        Err(_) => None,
    };
    let no_hooks = hooks.is_some_and(|names| {
        (names.iter()).all(|name| name.to_str().is_some_and(|name| name.ends_with(".sample")))
    });
    if !no_hooks {
        return false;
    }
    let at = format!("--git-dir={}", dir.display());
    let pattern = r"^(receive\.|transfer\.|core\.hookspath$)";
    let settings = git_command(repo.root(), &[&at, "config", "--get-regexp", pattern]).output();
    // `git config` exits with 1 when no setting matches.
    settings.is_ok_and(|output| output.status.code() == Some(1) && output.stdout.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bare repository `remote.git` beside `repo`'s work tree, added as its remote `origin`.
    fn remote_of(repo: &Repo) -> PathBuf {
        let dir = repo.root().join("remote.git");
        let made = git_command(repo.root(), &["init", "-q", "--bare", "remote.git"]).output();
        assert!(made.is_ok_and(|output| output.status.success()));
        // No sample hooks: a folder of them alone leaves the remote writable.
        let _ = std::fs::remove_dir_all(dir.join("hooks"));
        std::fs::create_dir_all(dir.join("hooks")).unwrap();
        std::fs::write(dir.join("hooks/pre-receive.sample"), "#!/bin/sh\n").unwrap();
        let url = dir.display().to_string();
        assert!(repo.run(&["remote", "add", "origin", &url]).is_ok());
        dir
    }

    fn remote_ref(dir: &Path, name: &str) -> Option<String> {
        refs::listed(dir, &[name], "refs/ralph/claims/")
            .and_then(|listed| listed.into_iter().find(|(each, _)| each == name))
            .map(|(_, sha)| sha)
    }

    #[test]
    fn a_record_is_written_into_a_remote_on_this_machine_only_while_its_ref_is_as_expected() {
        let Some((_dir, repo)) = super::super::tests::repo() else {
            return;
        };
        let remote = remote_of(&repo);
        assert_eq!(repo.writable_remote("origin").as_deref(), Some(&*remote));
        let name = "refs/ralph/claims/t1";
        let first = repo
            .push_record("origin", name, "one", "")
            .unwrap()
            .unwrap();
        assert_eq!(remote_ref(&remote, name).as_deref(), Some(first.as_str()));
        let at = format!("--git-dir={}", remote.display());
        let message = git_command(repo.root(), &[&at, "log", "-1", "--format=%B", &first])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&message.stdout).trim(), "one");
        // Taken already, or no longer what it was: nothing changes.
        assert_eq!(repo.push_record("origin", name, "two", "").unwrap(), None);
        let other = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(
            repo.push_record("origin", name, "two", other).unwrap(),
            None
        );
        assert_eq!(remote_ref(&remote, name).as_deref(), Some(first.as_str()));
        let second = repo
            .push_record("origin", name, "two", &first)
            .unwrap()
            .unwrap();
        assert_eq!(remote_ref(&remote, name), Some(second));
    }

    #[test]
    fn a_remote_whose_pushes_run_a_hook_or_obey_a_setting_is_pushed_to() {
        let Some((_dir, repo)) = super::super::tests::repo() else {
            return;
        };
        let remote = remote_of(&repo);
        let hook = remote.join("hooks/pre-receive");
        let marker = repo.root().join("hook-ran");
        let script = format!("#!/bin/sh\ntouch '{}'\n", marker.display());
        std::fs::write(&hook, script).unwrap();
        let mut permissions = std::fs::metadata(&hook).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&hook, permissions).unwrap();
        assert_eq!(repo.writable_remote("origin"), None);
        let name = "refs/ralph/claims/t1";
        let made = repo.push_record("origin", name, "one", "").unwrap();
        assert!(made.is_some() && marker.exists(), "the push ran the hook");
        // A setting of what the remote receives.
        std::fs::remove_file(&hook).unwrap();
        let at = format!("--git-dir={}", remote.display());
        let mut set = git_command(repo.root(), &[&at, "config", "receive.denyDeletes", "true"]);
        assert!(set.output().is_ok_and(|output| output.status.success()));
        assert!(!pushes_do_nothing_more(&repo, &remote));
        let mut unset = git_command(
            repo.root(),
            &[&at, "config", "--unset", "receive.denyDeletes"],
        );
        assert!(unset.output().is_ok_and(|output| output.status.success()));
        assert!(pushes_do_nothing_more(&repo, &remote));
    }

    /// Runs git in `repo` (`at`: before the command, `--git-dir=…`), asserting it succeeds; its
    /// output.
    fn git_ok(repo: &Repo, args: &[&str]) -> String {
        let output = git_command(repo.root(), args).output().unwrap();
        assert!(output.status.success(), "git {args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// Commits `file` on the checked-out branch; its commit.
    fn commit_file(repo: &Repo, file: &str) -> String {
        std::fs::write(repo.root().join(file), file).unwrap();
        git_ok(repo, &["add", file]);
        git_ok(repo, &["commit", "-q", "-m", file]);
        git_ok(repo, &["rev-parse", "HEAD"])
    }

    #[test]
    fn a_branch_goes_with_its_record_into_a_remote_on_this_machine_and_only_forward() {
        let Some((_dir, repo)) = super::super::tests::repo() else {
            return;
        };
        let remote = remote_of(&repo);
        let at = format!("--git-dir={}", remote.display());
        git_ok(&repo, &["push", "-q", "origin", "HEAD:refs/heads/main"]);
        git_ok(&repo, &["checkout", "-q", "-b", "ralph/t1"]);
        let branch = "refs/heads/ralph/t1";
        let claim = "refs/ralph/claims/t1";
        let first = commit_file(&repo, "one.txt");
        let Written::Done(record) =
            repo.write_record_with_branches_into("origin", (claim, "ready", ""), &[branch])
        else {
            panic!("not written");
        };
        assert_eq!(ref_in(&remote, branch), Some(first.clone()));
        assert_eq!(ref_in(&remote, claim), Some(record.clone()));
        // Every object is there: the remote checks whole.
        git_ok(&repo, &[&at, "fsck", "--strict", "--no-dangling"]);
        assert_eq!(
            git_ok(&repo, &[&at, "show", &format!("{first}:one.txt")]),
            "one.txt"
        );
        // Forward again, with the record as it is there.
        let second = commit_file(&repo, "two.txt");
        let written =
            repo.write_record_with_branches_into("origin", (claim, "again", &record), &[branch]);
        assert!(matches!(written, Written::Done(_)));
        assert_eq!(ref_in(&remote, branch), Some(second));
        git_ok(&repo, &[&at, "fsck", "--strict", "--no-dangling"]);
        // A branch that would not move forward, or objects kept in a pack, go by push.
        let now = ref_in(&remote, claim).unwrap();
        git_ok(&repo, &["reset", "-q", "--hard", &first]);
        commit_file(&repo, "other.txt");
        let diverged =
            repo.write_record_with_branches_into("origin", (claim, "no", &now), &[branch]);
        assert!(matches!(diverged, Written::Push));
        git_ok(&repo, &["checkout", "-q", "-b", "ralph/t2"]);
        commit_file(&repo, "three.txt");
        git_ok(&repo, &["repack", "-a", "-d", "-q"]);
        git_ok(&repo, &["prune-packed"]);
        let claim2 = "refs/ralph/claims/t2";
        let in_pack = repo.write_record_with_branches_into(
            "origin",
            (claim2, "p", ""),
            &["refs/heads/ralph/t2"],
        );
        assert!(matches!(in_pack, Written::Push));
        assert_eq!(ref_in(&remote, claim), Some(now), "nothing was changed");
        assert_eq!(ref_in(&remote, claim2).as_deref(), Some(""));
    }

    #[test]
    fn a_shared_remote_gets_its_branches_by_push() {
        let Some((_dir, repo)) = super::super::tests::repo() else {
            return;
        };
        let remote = remote_of(&repo);
        let at = format!("--git-dir={}", remote.display());
        git_ok(&repo, &[&at, "config", "core.sharedRepository", "group"]);
        git_ok(&repo, &["checkout", "-q", "-b", "ralph/t1"]);
        commit_file(&repo, "one.txt");
        let record = ("refs/ralph/claims/t1", "ready", "");
        let written =
            repo.write_record_with_branches_into("origin", record, &["refs/heads/ralph/t1"]);
        assert!(matches!(written, Written::Push));
        assert!(
            repo.writable_remote("origin").is_some(),
            "records alone still are written"
        );
    }
}
