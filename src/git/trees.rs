//! Trees read and written through two git processes kept open while a merge train is made
//! (`cat-file --batch` and `mktree -z --batch`): a rider's merge sets ralph's own files over the
//! merged tree and asks which paths it changes, and doing both through them costs no process
//! of its own, where a throwaway index and a `git diff` cost four.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use super::worktree::FileAt;
use super::{EMPTY_TREE, Repo};

/// One entry of a tree: its mode (`100644`, `40000`…), its name, its object.
#[derive(Clone, PartialEq, Eq)]
struct Entry {
    mode: String,
    oid: String,
}

impl Entry {
    fn is_tree(&self) -> bool {
        self.mode == "40000"
    }
}

/// A tree's entries by name.
type Listing = BTreeMap<Vec<u8>, Entry>;

/// A change to a tree: a path's parts (below the tree) and its blob, or none to remove it.
type Edit<'a> = (&'a [&'a [u8]], Option<&'a str>);

/// A git process spoken to line by line.
struct Talk {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Talk {
    fn open(repo: &Repo, args: &[&str]) -> Result<Self, String> {
        let mut child = (repo.command(args))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|err| format!("git {} could not run: {err}", args[0]))?;
        let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("git {} has no pipes", args[0]));
        };
        Ok(Self {
            child,
            input,
            output: BufReader::new(output),
        })
    }

    fn line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        match self.output.read_line(&mut line) {
            Ok(0) | Err(_) => Err("git stopped answering".to_owned()),
            Ok(_) => Ok(line.trim_end_matches('\n').to_owned()),
        }
    }
}

impl Drop for Talk {
    fn drop(&mut self) {
        // Its input closed, the process ends.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The two processes, for one merge train.
pub(crate) struct Trees {
    reader: Talk,
    writer: Talk,
}

impl Trees {
    pub(crate) fn open(repo: &Repo) -> Result<Self, String> {
        Ok(Self {
            reader: Talk::open(repo, &["cat-file", "--batch"])?,
            writer: Talk::open(repo, &["mktree", "-z", "--batch"])?,
        })
    }

    /// Object `name`'s id, type and content.
    fn read(&mut self, name: &str) -> Result<(String, String, Vec<u8>), String> {
        self.ask(name)?
            .ok_or_else(|| format!("git cat-file: no object {name}"))
    }

    /// Object `name`'s id, type and content; `None` when there is no such object.
    fn ask(&mut self, name: &str) -> Result<Option<(String, String, Vec<u8>)>, String> {
        let reader = &mut self.reader;
        (reader.input)
            .write_all(format!("{name}\n").as_bytes())
            .and_then(|()| reader.input.flush())
            .map_err(|err| format!("git cat-file: {err}"))?;
        let header = reader.line()?;
        if header.ends_with(" missing") {
            return Ok(None);
        }
        let mut fields = header.split(' ');
        let (oid, kind, size) = (fields.next(), fields.next(), fields.next());
        let size = size.and_then(|size| size.parse::<usize>().ok());
        let (Some(oid), Some(kind), Some(size)) = (oid, kind, size) else {
            return Err(format!("git cat-file: no object {name} ({header})"));
        };
        // The content, then a newline.
        let mut content = vec![0; size + 1];
        (reader.output)
            .read_exact(&mut content)
            .map_err(|err| format!("git cat-file: {err}"))?;
        content.pop();
        Ok(Some((oid.to_owned(), kind.to_owned(), content)))
    }

    /// The files `(rev, path)` as [`Repo::files_at`] reads them, through the kept reader.
    pub(crate) fn files_at(&mut self, wanted: &[(&str, &str)]) -> Result<Vec<FileAt>, String> {
        let mut files = Vec::with_capacity(wanted.len());
        for (rev, path) in wanted {
            files.push(match self.ask(&format!("{rev}:{path}"))? {
                None => Ok(None),
                Some((_, kind, content)) if kind == "blob" => Ok(Some(content)),
                Some(_) => Err(format!("not a file at {rev}")),
            });
        }
        Ok(files)
    }

    /// The entries of tree `name` (or of a commit's tree); none for `None`.
    fn listing(&mut self, name: Option<&str>) -> Result<Listing, String> {
        let Some(name) = name else {
            return Ok(Listing::new());
        };
        let (oid, kind, content) = self.read(name)?;
        let content = match kind.as_str() {
            "tree" => content,
            "commit" => {
                let tree = (content.strip_prefix(b"tree "))
                    .and_then(|rest| rest.split(|&b| b == b'\n').next())
                    .ok_or_else(|| format!("commit {name} names no tree"))?;
                return self.listing(Some(&String::from_utf8_lossy(tree)));
            }
            _ => return Err(format!("{name} is a {kind}, not a tree")),
        };
        parse(&content, oid.len() / 2)
    }

    /// Writes a tree of `entries`: its id.
    fn write(&mut self, entries: &Listing) -> Result<String, String> {
        let mut text = Vec::new();
        for (name, entry) in entries {
            let kind = match entry.mode.as_str() {
                "40000" => "tree",
                "160000" => "commit",
                _ => "blob",
            };
            text.extend_from_slice(format!("{} {kind} {}\t", entry.mode, entry.oid).as_bytes());
            text.extend_from_slice(name);
            text.push(0);
        }
        text.push(0);
        let writer = &mut self.writer;
        (writer.input)
            .write_all(&text)
            .and_then(|()| writer.input.flush())
            .map_err(|err| format!("git mktree: {err}"))?;
        writer.line()
    }

    /// `tree` (a tree or commit) with each of `files` (repository-relative) set to a blob (mode
    /// 100644), or removed (`None`; a folder left empty goes too): the new tree's id.
    pub(crate) fn with_files(
        &mut self,
        tree: &str,
        files: &[(&str, Option<&str>)],
    ) -> Result<String, String> {
        let edits: Vec<(Vec<&[u8]>, Option<&str>)> = (files.iter())
            .map(|(path, blob)| (path.as_bytes().split(|&b| b == b'/').collect(), *blob))
            .collect();
        let edits: Vec<Edit<'_>> = (edits.iter())
            .map(|(parts, blob)| (parts.as_slice(), *blob))
            .collect();
        Ok(self
            .edit(Some(tree), &edits)?
            .unwrap_or_else(|| EMPTY_TREE.to_owned()))
    }

    /// Tree `tree` (none: an empty one) with `edits` (each a path's parts and a blob or
    /// nothing): its id, or `None` when it is left empty.
    fn edit(&mut self, tree: Option<&str>, edits: &[Edit<'_>]) -> Result<Option<String>, String> {
        let mut entries = self.listing(tree)?;
        let mut below: BTreeMap<&[u8], Vec<Edit<'_>>> = BTreeMap::new();
        for (parts, blob) in edits {
            match parts {
                [] => {}
                [name] => match blob {
                    Some(blob) => {
                        let entry = Entry {
                            mode: "100644".to_owned(),
                            oid: (*blob).to_owned(),
                        };
                        entries.insert(name.to_vec(), entry);
                    }
                    None => {
                        entries.remove(*name);
                    }
                },
                [name, rest @ ..] => below.entry(name).or_default().push((rest, *blob)),
            }
        }
        for (name, edits) in below {
            let inner = (entries.get(name))
                .filter(|entry| entry.is_tree())
                .map(|entry| entry.oid.clone());
            match self.edit(inner.as_deref(), &edits)? {
                Some(oid) => {
                    let mode = "40000".to_owned();
                    entries.insert(name.to_vec(), Entry { mode, oid });
                }
                None => {
                    entries.remove(name);
                }
            }
        }
        if entries.is_empty() {
            return Ok(None);
        }
        self.write(&entries).map(Some)
    }

    /// The paths of files that differ between `from` and `to` (trees or commits), as `git diff
    /// --name-only --no-renames` names them (a mode change included).
    pub(crate) fn changed(&mut self, from: &str, to: &str) -> Result<Vec<String>, String> {
        let mut paths = BTreeSet::new();
        self.compare(Some(from), Some(to), "", &mut paths)?;
        Ok(paths.into_iter().collect())
    }

    fn compare(
        &mut self,
        from: Option<&str>,
        to: Option<&str>,
        prefix: &str,
        paths: &mut BTreeSet<String>,
    ) -> Result<(), String> {
        let (old, new) = (self.listing(from)?, self.listing(to)?);
        let names: BTreeSet<&Vec<u8>> = old.keys().chain(new.keys()).collect();
        for name in names {
            let (was, is) = (old.get(name), new.get(name));
            if was == is {
                continue;
            }
            let path = format!("{prefix}{}", String::from_utf8_lossy(name));
            let tree = |entry: Option<&Entry>| {
                entry
                    .filter(|entry| entry.is_tree())
                    .map(|entry| entry.oid.clone())
            };
            let (was_tree, is_tree) = (tree(was), tree(is));
            if was_tree.is_some() || is_tree.is_some() {
                let inner = format!("{path}/");
                self.compare(was_tree.as_deref(), is_tree.as_deref(), &inner, paths)?;
            }
            // A file on either side (not a folder) differs.
            if was.is_some_and(|entry| !entry.is_tree()) || is.is_some_and(|entry| !entry.is_tree())
            {
                paths.insert(path);
            }
        }
        Ok(())
    }
}

/// A tree object's entries (`<mode> <name>\0<hash>`, each hash `hash_len` bytes).
fn parse(content: &[u8], hash_len: usize) -> Result<Listing, String> {
    let mut entries = Listing::new();
    let mut rest = content;
    while !rest.is_empty() {
        let space = memchr::memchr(b' ', rest).ok_or("a tree entry without a mode")?;
        let nul = memchr::memchr(0, rest).ok_or("a tree entry without a name")?;
        let end = nul + 1 + hash_len;
        if space > nul || rest.len() < end {
            return Err("a tree entry cut short".to_owned());
        }
        let mode = String::from_utf8_lossy(&rest[..space]).into_owned();
        let oid = (rest[nul + 1..end].iter())
            .map(|b| format!("{b:02x}"))
            .collect();
        entries.insert(rest[space + 1..nul].to_vec(), Entry { mode, oid });
        rest = &rest[end..];
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_edited_and_compared_through_kept_processes_agree_with_git() {
        let Some((_dir, repo)) = super::super::tests::repo() else {
            return;
        };
        let blob = |text: &str| {
            let output = super::super::fed(
                repo.command(&["hash-object", "-w", "--stdin"]),
                text.as_bytes(),
            )
            .unwrap();
            String::from_utf8_lossy(&output.stdout).trim().to_owned()
        };
        let (one, two) = (blob("one\n"), blob("two\n"));
        let head = repo.resolve("HEAD").unwrap();
        let mut trees = Trees::open(&repo).unwrap();
        let files = [
            (".ralph/ralph-tasks.md", Some(one.as_str())),
            ("deep/er/file.txt", Some(two.as_str())),
            ("b.txt", None),
        ];
        let edited = trees.with_files(&head, &files).unwrap();
        let git = |args: &[&str]| {
            let output = repo.run(args).unwrap();
            assert!(output.status.success(), "git {args:?}");
            String::from_utf8_lossy(&output.stdout).into_owned()
        };
        let listed = git(&["ls-tree", "-r", "--name-only", &edited]);
        assert_eq!(listed, ".ralph/ralph-tasks.md\na.txt\ndeep/er/file.txt\n");
        let read = repo.files_at(&[(&edited, "deep/er/file.txt")]).unwrap();
        assert_eq!(read[0], Ok(Some(b"two\n".to_vec())));
        // Read through the kept reader as by a process of its own: a file, none, a folder.
        let wanted = [
            (edited.as_str(), "deep/er/file.txt"),
            (edited.as_str(), "no/such.txt"),
            (edited.as_str(), "deep"),
        ];
        let kept = trees.files_at(&wanted).unwrap();
        assert_eq!(kept, repo.files_at(&wanted).unwrap());
        assert_eq!(kept[1], Ok(None));
        assert!(kept[2].is_err());
        // Back again: the folders left empty go.
        let b = blob("b\n");
        let back = [
            (".ralph/ralph-tasks.md", None),
            ("deep/er/file.txt", None),
            ("b.txt", Some(b.as_str())),
        ];
        let head_tree = repo.run(&["rev-parse", "HEAD^{tree}"]).unwrap().stdout;
        let head_tree = String::from_utf8_lossy(&head_tree).trim().to_owned();
        assert_eq!(trees.with_files(&edited, &back).unwrap(), head_tree);
        let mut changed = trees.changed(&head, &edited).unwrap();
        changed.sort();
        let git_says = git(&["diff", "--name-only", "--no-renames", &head, &edited]);
        assert_eq!(changed, git_says.lines().collect::<Vec<_>>());
        assert_eq!(
            changed,
            [".ralph/ralph-tasks.md", "b.txt", "deep/er/file.txt"]
        );
        assert!(trees.changed(&edited, &edited).unwrap().is_empty());
        let moved = trees.changed(&format!("{head}^{{tree}}"), &edited).unwrap();
        assert_eq!(moved, changed, "a tree or its commit alike");
        assert!(trees.changed(&edited, "no-such-tree").is_err());
        assert!(
            trees.changed(&edited, &head_tree).is_ok(),
            "still answering"
        );
    }
}
