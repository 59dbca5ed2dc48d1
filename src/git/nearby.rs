//! Records written straight into a remote on this machine (a path, or a `file://` address, as
//! on a cluster's shared disk): a claim is a commit with no files, so writing it takes two git
//! processes in the remote's folder rather than a push's six on both sides. Only a remote whose
//! pushes would do nothing more is written so: no hook, no `receive.*` or `transfer.*` setting,
//! no `core.hooksPath`. Pushes of commits (a task branch with its claim, a landing on the base)
//! are made so too at a bare remote, their new loose objects copied in first
//! (`write_updates_into`). Anything else (or a write that fails) goes by `git push`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

mod fetch;

use super::{EMPTY_TREE, Repo, Update, check, fed, git_command, refs};

/// A ref change made straight in a remote: its name, new value (empty: deleted) and old value
/// (empty: it must not exist).
type Move = (String, String, String);

/// Each clone's shared git directory and remote name, with the remote's git directory when it
/// is on this machine (`LOCAL`), and when records can be written into it (`WRITABLE`). Asked
/// once per remote and process.
type Entry = ((PathBuf, String), Option<PathBuf>);
static LOCAL: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
static WRITABLE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
/// The same, when objects can be copied into it too (`COPYABLE`).
static COPYABLE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
/// The same, when this clone has no setting that keeps it from fetching by reading the remote
/// (`FETCH_PLAIN`, filled in with `LOCAL`).
static FETCH_PLAIN: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

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
        let key = (self.common_dir(), name.to_owned());
        remembered(&LOCAL, key.clone(), || {
            let url = match url {
                Some(url) => url.to_owned(),
                None => self.remote_url(name)?,
            };
            let dir = self.local_git_dir(&url)?;
            // With the settings that keep this clone from fetching by reading the remote
            // (`fetch::fetch_nearby`), asked by the same process.
            let remote = format!(r"remote\.{}\.", regex::escape(name));
            let pattern = format!(
                r"^({remote}(uploadpack|receivepack|promisor|partialclonefilter)$|extensions\.|fetch\.fsck|transfer\.fsck)"
            );
            let own = self.run(&["config", "--get-regexp", &pattern]).ok()?;
            // `git config` exits with 1 when no setting matches.
            if own.status.code() != Some(1) && !own.status.success() {
                return None;
            }
            // Each line is a setting's name (its variable in lower case), then its value.
            let settings = String::from_utf8_lossy(&own.stdout);
            let programs = ["uploadpack", "receivepack"].map(|var| format!("remote.{name}.{var}"));
            let own_programs = (settings.lines())
                .filter_map(|line| line.split(' ').next())
                .any(|setting| programs.iter().any(|program| program == setting));
            if own_programs {
                return None;
            }
            let plain = settings.trim().is_empty() && !self.common_dir().join("shallow").exists();
            if let Ok(mut known) = FETCH_PLAIN.lock() {
                known.push((key.clone(), plain.then(|| dir.clone())));
            }
            Some(dir)
        })
    }

    /// The git directory of `remote` when records can be written straight into it.
    fn writable_remote(&self, remote: &str) -> Option<PathBuf> {
        remembered(&WRITABLE, (self.common_dir(), remote.to_owned()), || {
            (self.local_remote((remote, None))).filter(|dir| pushes_do_nothing_more(self, dir))
        })
    }

    /// The git directory of `remote` when its refs may be changed straight in it as a push
    /// would, this clone's objects copied into it as they are: writable, a bare repository (a
    /// push to a work tree's branch is refused), with SHA-1 names as this clone's, and no
    /// `core.sharedRepository` (whose permissions git would set and a copy would not).
    fn copyable_remote(&self, remote: &str) -> Option<PathBuf> {
        remembered(&COPYABLE, (self.common_dir(), remote.to_owned()), || {
            let dir = self.writable_remote(remote)?;
            let at = format!("--git-dir={}", dir.display());
            let pattern = r"^(core\.bare|core\.sharedrepository|extensions\.objectformat)$";
            let mut settings = git_command(self.root(), &[&at, "config", "--get-regexp", pattern]);
            let plain = (settings.output()).is_ok_and(|output| {
                output.status.success()
                    && String::from_utf8_lossy(&output.stdout).trim() == "core.bare true"
            });
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
        self.record_into(&dir, Some((dst, message, expect)), &[])
    }

    /// [`Repo::write_record_into`] with the ref changes `also` (as a push's) made in the same
    /// all-or-nothing change: see [`Repo::write_updates_into`].
    pub(super) fn write_record_with_updates_into(
        &self,
        remote: &str,
        record: (&str, &str, &str),
        also: &[Update<'_>],
    ) -> Written {
        let Some(dir) = self.copyable_remote(remote) else {
            return Written::Push;
        };
        let (dst, _, expect) = record;
        if ref_in(&dir, dst).is_some_and(|now| now != expect) {
            return Written::Moved;
        }
        match self.moves_into(&dir, also) {
            Ok(moves) => self.record_into(&dir, Some(record), &moves),
            Err(written) => written,
        }
    }

    /// Makes the ref changes `updates` (as [`Repo::push`] takes them) straight in `remote` when
    /// it is on this machine and a push into it would change nothing more than its refs: the
    /// objects of the new values that the remote's branches do not reach are copied in as the
    /// loose object files they are (a file named by its content: all a push does with it), then
    /// every ref changes in one `update-ref --stdin` transaction, each from its expected value
    /// (a branch with none only forward, as a push's). [`Written::Push`] when that cannot be
    /// done so: an object this clone keeps in a pack, a branch that would not move forward.
    pub(super) fn write_updates_into(&self, remote: &str, updates: &[Update<'_>]) -> Written {
        let Some(dir) = self.copyable_remote(remote) else {
            return Written::Push;
        };
        let moves = match self.moves_into(&dir, updates) {
            Ok(moves) => moves,
            Err(written) => return written,
        };
        let written = self.record_into(&dir, None, &moves);
        if matches!(written, Written::Done(_)) {
            // As after a push: the remote packs its loose objects once there are many.
            let at = format!("--git-dir={}", dir.display());
            let _ = git_command(self.root(), &[&at, "gc", "--auto", "--quiet"]).output();
        }
        written
    }

    /// The ref changes of `updates` as `(name, new, old)` (empty new: delete; empty old: must
    /// not exist) for the repository whose git directory is `dir`, their new objects copied in;
    /// `Err` with how it went otherwise: a ref no longer as expected ([`Written::Moved`]), or
    /// one that only a push can change ([`Written::Push`]).
    fn moves_into(&self, dir: &Path, updates: &[Update<'_>]) -> Result<Vec<Move>, Written> {
        let names: Vec<&str> = updates.iter().map(|update| update.dst.as_str()).collect();
        let Some(now) = refs::listed(dir, &names, "refs/heads/") else {
            return Err(Written::Push);
        };
        let current = |name: &str| {
            (now.iter().find(|(each, _)| each == name))
                .map_or(String::new(), |(_, sha)| sha.clone())
        };
        let mut moves = Vec::new();
        for update in updates {
            let here = current(&update.dst);
            let new = match update.new {
                Some(source) => self.resolve(source).ok_or(Written::Push)?,
                None => String::new(),
            };
            let old = match update.expect {
                Some(expect) if expect != here => return Err(Written::Moved),
                Some(expect) => expect.to_owned(),
                // A deletion of what is not there, or a branch that would not move forward.
                None if new.is_empty() && here.is_empty() => return Err(Written::Push),
                None if !new.is_empty() && !here.is_empty() && !self.is_ancestor(&here, &new) => {
                    return Err(Written::Push);
                }
                None => here,
            };
            if new.is_empty() && old.is_empty() {
                return Err(Written::Push);
            }
            moves.push((update.dst.clone(), new, old));
        }
        let tips: Vec<&str> = now
            .iter()
            .filter(|(name, _)| name.starts_with("refs/heads/"))
            .map(|(_, sha)| sha.as_str())
            .collect();
        let wanted: Vec<&str> = (moves.iter())
            .map(|(_, new, _)| new.as_str())
            .filter(|new| !new.is_empty())
            .collect();
        if !self.copy_objects_into(dir, &wanted, &tips) {
            return Err(Written::Push);
        }
        Ok(moves)
    }

    /// Writes the record (`dst`, `message`, `expect`), when given, into the repository whose git
    /// directory is `dir`, with the ref changes `moves` in the same transaction.
    fn record_into(
        &self,
        dir: &Path,
        record: Option<(&str, &str, &str)>,
        moves: &[Move],
    ) -> Written {
        let at = format!("--git-dir={}", dir.display());
        let mut command = String::new();
        let mut made = String::new();
        if let Some((dst, message, expect)) = record {
            // git takes the empty tree a record is made on as there without its object, but
            // its `fsck` does not: written once, so the remote checks whole.
            let (folder, name) = EMPTY_TREE.split_at(2);
            if !dir.join("objects").join(folder).join(name).exists() {
                let _ = fed(git_command(self.root(), &[&at, "mktree"]), b"");
            }
            let Ok(commit) = record_commit(self.root(), &[&at], message) else {
                return Written::Push;
            };
            command.push_str(&transaction_line(dst, &commit, expect));
            made = commit;
        }
        for (name, new, old) in moves {
            command.push_str(&transaction_line(name, new, old));
        }
        let updated = fed(
            git_command(self.root(), &[&at, "update-ref", "--stdin"]),
            command.as_bytes(),
        );
        if updated.is_ok_and(|output| output.status.success()) {
            return Written::Done(made);
        }
        // Refused: because another worker moved a ref, or for a reason a push may not have.
        let expected = (record.map(|(dst, _, expect)| (dst, expect)).into_iter()).chain(
            moves
                .iter()
                .map(|(name, _, old)| (name.as_str(), old.as_str())),
        );
        let moved = expected
            .into_iter()
            .any(|(name, old)| ref_in(dir, name).is_some_and(|now| now != old));
        if moved { Written::Moved } else { Written::Push }
    }

    /// Copies into the repository whose git directory is `dir` every object reachable from the
    /// commits `wanted` that its commits `tips` do not reach: `false` when one is not a loose
    /// object here (a push must send it) or cannot be copied.
    fn copy_objects_into(&self, dir: &Path, wanted: &[&str], tips: &[&str]) -> bool {
        copy_reachable(self.root(), (&self.common_dir(), dir), wanted, tips)
    }
}

/// Copies from the repository whose git directory is `from` into the one at `to` every object
/// reachable from the commits `wanted` that the commits `known` do not reach, as `from` lists
/// them (`git rev-list --objects`, run in `root`): `false` when one is not a loose object
/// there or cannot be copied.
fn copy_reachable(
    root: &Path,
    (from, to): (&Path, &Path),
    wanted: &[&str],
    known: &[&str],
) -> bool {
    let mut input = String::new();
    for sha in wanted {
        input.push_str(sha);
        input.push('\n');
    }
    for sha in known {
        input.push('^');
        input.push_str(sha);
        input.push('\n');
    }
    let at = format!("--git-dir={}", from.display());
    let args = [
        at.as_str(),
        "rev-list",
        "--objects",
        "--no-object-names",
        "--ignore-missing",
        "--stdin",
    ];
    let listed = fed(git_command(root, &args), input.as_bytes());
    let Some(listed) = listed
        .ok()
        .filter(|output| output.status.success())
        .map(|output| output.stdout)
    else {
        return false;
    };
    let (from, to) = (from.join("objects"), to.join("objects"));
    String::from_utf8_lossy(&listed)
        .lines()
        .all(|oid| copy_object(&from, &to, oid.trim()).is_ok())
}

/// One line of an `update-ref --stdin` transaction: ref `name` to `new` (empty: deleted) from
/// `old` (empty: it must not exist).
fn transaction_line(name: &str, new: &str, old: &str) -> String {
    match (new.is_empty(), old.is_empty()) {
        (true, _) => format!("delete {name} {old}\n"),
        (false, true) => format!("create {name} {new}\n"),
        (false, false) => format!("update {name} {new} {old}\n"),
    }
}

/// Copies the loose object `oid` from the objects folder `from` into `to` unless `to` has it
/// loose already. A loose object is never changed once written, so both repositories may share
/// its file, as `git clone` of a local repository does: a hard link, which makes no new file
/// (on a file system that has just deleted many, making one costs more than the copy). Where
/// that cannot be (another file system, a file this user may not link), a copy written beside
/// its place and linked there, so it appears whole or not at all.
fn copy_object(from: &Path, to: &Path, oid: &str) -> std::io::Result<()> {
    if oid.len() < 3 || !oid.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(std::io::Error::other("not an object name"));
    }
    let (folder, name) = oid.split_at(2);
    let target = to.join(folder).join(name);
    if target.exists() {
        return Ok(());
    }
    let source = from.join(folder).join(name);
    std::fs::create_dir_all(to.join(folder))?;
    match std::fs::hard_link(&source, &target) {
        Ok(()) => return Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(_) => {}
    }
    let bytes = std::fs::read(&source)?;
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
    match refs::read_in(&[], dir, name) {
        refs::Read::Found(oid) => Some(oid),
        refs::Read::Absent => Some(String::new()),
        refs::Read::Unknown => None,
    }
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
    let pattern = r"^(receive\.|transfer\.|uploadpack\.|core\.hookspath$)";
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

    /// Local branch `name` pushed to the same name, as a push would take it.
    fn branch_update(name: &str) -> [Update<'_>; 1] {
        [Update {
            dst: name.to_owned(),
            new: Some(name),
            expect: None,
        }]
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
        let Written::Done(record) = repo.write_record_with_updates_into(
            "origin",
            (claim, "ready", ""),
            &branch_update(branch),
        ) else {
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
        let written = repo.write_record_with_updates_into(
            "origin",
            (claim, "again", &record),
            &branch_update(branch),
        );
        assert!(matches!(written, Written::Done(_)));
        assert_eq!(ref_in(&remote, branch), Some(second));
        git_ok(&repo, &[&at, "fsck", "--strict", "--no-dangling"]);
        // A branch that would not move forward, or objects kept in a pack, go by push.
        let now = ref_in(&remote, claim).unwrap();
        git_ok(&repo, &["reset", "-q", "--hard", &first]);
        commit_file(&repo, "other.txt");
        let diverged = repo.write_record_with_updates_into(
            "origin",
            (claim, "no", &now),
            &branch_update(branch),
        );
        assert!(matches!(diverged, Written::Push));
        git_ok(&repo, &["checkout", "-q", "-b", "ralph/t2"]);
        commit_file(&repo, "three.txt");
        git_ok(&repo, &["repack", "-a", "-d", "-q"]);
        git_ok(&repo, &["prune-packed"]);
        let claim2 = "refs/ralph/claims/t2";
        let in_pack = repo.write_record_with_updates_into(
            "origin",
            (claim2, "p", ""),
            &branch_update("refs/heads/ralph/t2"),
        );
        assert!(matches!(in_pack, Written::Push));
        assert_eq!(ref_in(&remote, claim), Some(now), "nothing was changed");
        assert_eq!(ref_in(&remote, claim2).as_deref(), Some(""));
    }

    #[test]
    fn a_shared_remote_or_one_with_a_work_tree_gets_its_branches_by_push() {
        let Some((_dir, repo)) = super::super::tests::repo() else {
            return;
        };
        let remote = remote_of(&repo);
        let at = format!("--git-dir={}", remote.display());
        git_ok(&repo, &[&at, "config", "core.sharedRepository", "group"]);
        git_ok(&repo, &["checkout", "-q", "-b", "ralph/t1"]);
        commit_file(&repo, "one.txt");
        let record = ("refs/ralph/claims/t1", "ready", "");
        let written = repo.write_record_with_updates_into(
            "origin",
            record,
            &branch_update("refs/heads/ralph/t1"),
        );
        assert!(matches!(written, Written::Push));
        assert!(
            repo.writable_remote("origin").is_some(),
            "records alone still are written"
        );
        // A repository with a work tree: its branches change only by push.
        git_ok(&repo, &["init", "-q", "plain"]);
        let url = repo.root().join("plain").display().to_string();
        git_ok(&repo, &["remote", "add", "plain", &url]);
        assert!(repo.writable_remote("plain").is_some());
        assert_eq!(repo.copyable_remote("plain"), None);
        assert_eq!(repo.copyable_remote("origin"), None);
    }

    /// A landing as `push` makes it: the base forward from what it was, a claim and a branch
    /// deleted, all at once; a lease that no longer holds changes nothing.
    #[test]
    fn a_landing_is_made_straight_in_a_remote_on_this_machine_all_at_once() {
        let Some((_dir, repo)) = super::super::tests::repo() else {
            return;
        };
        let remote = remote_of(&repo);
        let at = format!("--git-dir={}", remote.display());
        git_ok(
            &repo,
            &[
                "push",
                "-q",
                "origin",
                "HEAD:refs/heads/main",
                "HEAD:refs/heads/ralph/t1",
            ],
        );
        let base = git_ok(&repo, &["rev-parse", "HEAD"]);
        let claim = repo
            .push_record("origin", "refs/ralph/claims/t1", "c", "")
            .unwrap()
            .unwrap();
        let head = commit_file(&repo, "merged.txt");
        fn landing<'a>(head: &'a str, claim: &'a str, expect: &'a str) -> [Update<'a>; 3] {
            let update = |dst: &str, new, expect| Update {
                dst: dst.to_owned(),
                new,
                expect,
            };
            [
                update("refs/heads/main", Some(head), Some(expect)),
                update("refs/ralph/claims/t1", None, Some(claim)),
                update("refs/heads/ralph/t1", None, None),
            ]
        }
        let stale = "0123456789abcdef0123456789abcdef01234567";
        assert!(matches!(
            repo.write_updates_into("origin", &landing(&head, &claim, stale)),
            Written::Moved
        ));
        assert_eq!(ref_in(&remote, "refs/heads/main"), Some(base.clone()));
        let landed = repo.write_updates_into("origin", &landing(&head, &claim, &base));
        assert!(matches!(landed, Written::Done(_)));
        assert_eq!(ref_in(&remote, "refs/heads/main"), Some(head.clone()));
        assert_eq!(ref_in(&remote, "refs/ralph/claims/t1").as_deref(), Some(""));
        assert_eq!(ref_in(&remote, "refs/heads/ralph/t1").as_deref(), Some(""));
        git_ok(&repo, &[&at, "fsck", "--strict", "--no-dangling"]);
    }

    #[test]
    fn a_fetch_from_a_bare_remote_here_reads_it_as_git_fetch_would_and_leaves_packs_to_git() {
        let Some((_dir, repo)) = super::super::tests::repo() else {
            return;
        };
        let remote = remote_of(&repo);
        let at = format!("--git-dir={}", remote.display());
        git_ok(&repo, &["push", "-q", "origin", "HEAD:refs/heads/main"]);
        git_ok(&repo, &[&at, "symbolic-ref", "HEAD", "refs/heads/main"]);
        let url = remote.display().to_string();
        git_ok(&repo, &["clone", "-q", &url, "other"]);
        let other = Repo::discover(&repo.root().join("other")).unwrap();
        let specs = [
            "+refs/heads/main:refs/remotes/origin/main".to_owned(),
            "+refs/heads/ralph/*:refs/remotes/origin/ralph/*".to_owned(),
            "+refs/ralph/claims/*:refs/ralph/seen/origin/*".to_owned(),
        ];
        let refs_of = |clone: &Repo| {
            git_ok(
                clone,
                &["for-each-ref", "--format=%(refname) %(objectname)"],
            )
        };
        // Nothing moved: nothing changes.
        let before = refs_of(&other);
        assert!(other.fetch_nearby("origin", &specs));
        assert_eq!(refs_of(&other), before);
        // A new commit of main, a task branch (loose objects there, as a small push leaves
        // them) and a claim written into the remote.
        let main = commit_file(&repo, "c.txt");
        git_ok(&repo, &["push", "-q", "origin", "HEAD:refs/heads/main"]);
        git_ok(&repo, &["checkout", "-q", "-b", "ralph/t1"]);
        let task = commit_file(&repo, "d.txt");
        git_ok(&repo, &["push", "-q", "origin", "ralph/t1"]);
        let claim = (repo.push_record("origin", "refs/ralph/claims/t1", "mine", ""))
            .unwrap()
            .unwrap();
        assert!(other.fetch_nearby("origin", &specs));
        let fetched = |name: &str| git_ok(&other, &["rev-parse", "--verify", "-q", name]);
        assert_eq!(fetched("refs/remotes/origin/main"), main);
        assert_eq!(fetched("refs/remotes/origin/ralph/t1"), task);
        assert_eq!(fetched("refs/ralph/seen/origin/t1"), claim);
        git_ok(&other, &["fsck", "--strict", "--no-dangling"]);
        // A loose object is shared with the remote, not copied: no new file.
        let inode = |dir: &Path| {
            let (folder, name) = task.split_at(2);
            use std::os::unix::fs::MetadataExt as _;
            std::fs::metadata(dir.join("objects").join(folder).join(name)).map(|meta| meta.ino())
        };
        assert_eq!(
            inode(&other.git_common_dir()).unwrap(),
            inode(&remote).unwrap()
        );
        // `git fetch --prune` of the same specs finds nothing left to do.
        let nearby = refs_of(&other);
        let mut fetch = vec!["fetch", "-q", "--prune", "--no-tags", "origin"];
        fetch.extend(specs.iter().map(String::as_str));
        git_ok(&other, &fetch);
        assert_eq!(refs_of(&other), nearby);
        // Gone from the remote: pruned here.
        git_ok(&repo, &[&at, "update-ref", "-d", "refs/ralph/claims/t1"]);
        git_ok(&repo, &[&at, "update-ref", "-d", "refs/heads/ralph/t1"]);
        assert!(other.fetch_nearby("origin", &specs));
        let left = refs_of(&other);
        assert!(!left.contains("refs/ralph/seen/origin/t1"), "{left}");
        assert!(!left.contains("refs/remotes/origin/ralph/t1"), "{left}");
        // An object the remote keeps in a pack is left to git fetch, and nothing changes.
        git_ok(&repo, &["checkout", "-q", "-"]);
        commit_file(&repo, "e.txt");
        git_ok(&repo, &["push", "-q", "origin", "HEAD:refs/heads/main"]);
        git_ok(&repo, &[&at, "gc", "-q"]);
        assert!(!other.fetch_nearby("origin", &specs));
        assert_eq!(refs_of(&other), left);
        // A base the remote does not have is for git fetch to say.
        let missing = ["+refs/heads/nothing:refs/remotes/origin/nothing".to_owned()];
        assert!(!other.fetch_nearby("origin", &missing));
        // A clone that checks what it fetches, or a shallow one, fetches by git.
        for (name, extra) in [
            ("checking", "--config=fetch.fsckObjects=true"),
            ("shallow", "--depth=1"),
        ] {
            let dst = format!("file://{url}");
            git_ok(&repo, &["clone", "-q", extra, &dst, name]);
            let clone = Repo::discover(&repo.root().join(name)).unwrap();
            assert!(clone.local_remote(("origin", None)).is_some(), "{name}");
            assert!(!clone.fetch_nearby("origin", &specs), "{name}");
        }
    }

    #[test]
    #[allow(clippy::print_stderr)] // it says why it skipped
    fn an_object_that_cannot_be_linked_is_copied_whole() {
        use std::os::unix::fs::MetadataExt as _;
        // Two file systems: a link between them cannot be made.
        let shm = Path::new("/dev/shm");
        let (Ok(from), Ok(to)) = (
            tempfile::Builder::new().tempdir_in("/tmp"),
            tempfile::Builder::new().tempdir_in(shm),
        ) else {
            eprintln!("skipped: no /dev/shm to copy an object to");
            return;
        };
        let device = |dir: &Path| std::fs::metadata(dir).map(|meta| meta.dev()).ok();
        if device(from.path()) == device(to.path()) {
            eprintln!("skipped: /tmp and /dev/shm are one file system here");
            return;
        }
        let oid = "ab".to_owned() + &"c".repeat(38);
        std::fs::create_dir_all(from.path().join("ab")).unwrap();
        std::fs::write(from.path().join("ab").join(&oid[2..]), b"object").unwrap();
        copy_object(from.path(), to.path(), &oid).unwrap();
        let copied = to.path().join("ab").join(&oid[2..]);
        assert_eq!(std::fs::read(&copied).unwrap(), b"object");
        assert!(std::fs::metadata(&copied).unwrap().permissions().readonly());
        // Nothing is left beside it.
        assert_eq!(std::fs::read_dir(to.path().join("ab")).unwrap().count(), 1);
    }

    #[test]
    fn commits_in_a_tasks_worktree_leave_gits_housekeeping_to_the_clone() {
        let Some((_dir, repo)) = super::super::tests::repo() else {
            return;
        };
        assert!(repo.commit_settings().is_empty());
        git_ok(&repo, &["worktree", "add", "-q", "-b", "ralph/t1", "wt"]);
        let task = Repo::discover(&repo.root().join("wt")).unwrap();
        assert_eq!(task.commit_settings(), ["-c", "maintenance.auto=false"]);
    }
}
