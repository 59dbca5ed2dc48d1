//! The event journal `.ralph/events.jsonl`: every event of every loop of every run in this
//! `.ralph/` (a single loop, a `--parallel` run and each of its task loops, a `--worker` and its
//! tasks), one JSON object a line, the same objects as `--json` prints, appended as they happen.
//! `--serve` streams it; it is rotated by size, the older half kept as `events.1.jsonl`.
//!
//! Each line is one `write` on a file opened for appending, so the lines of loops writing at
//! once (threads of one run, or runs side by side) never mix. A writer whose file was rotated
//! under it opens the new one before its next line.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::event::{Reporter, Stamped};
use crate::storage::RalphDir;

use crate::storage::{
    JOURNAL_FILE as FILE, JOURNAL_LOCK_FILE as LOCK_FILE, OLD_JOURNAL_FILE as OLD_FILE,
};

/// The size past which the journal is rotated.
const LIMIT: u64 = 32 << 20;

/// Appends a run's events to the journal (a reporter of every loop's sink).
pub(crate) struct Journal {
    path: PathBuf,
    old: PathBuf,
    lock: PathBuf,
    limit: u64,
    /// The open journal and its inode.
    file: Option<(File, u64)>,
}

impl Journal {
    /// The journal of the run whose files are in `dir`.
    pub(crate) fn new(dir: &RalphDir) -> Self {
        Self::at(dir.root(), LIMIT)
    }

    fn at(root: &Path, limit: u64) -> Self {
        Self {
            path: root.join(FILE),
            old: root.join(OLD_FILE),
            lock: root.join(LOCK_FILE),
            limit,
            file: None,
        }
    }

    /// Appends one line; the journal never stops a run, so a failure is only skipped.
    pub(crate) fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        let on_disk = fs::metadata(&self.path).ok().map(|meta| meta.ino());
        if self.file.as_ref().map(|(_, ino)| *ino) != on_disk || on_disk.is_none() {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&self.path)?;
            let ino = file.metadata()?.ino();
            self.file = Some((file, ino));
        }
        let Some((file, _)) = self.file.as_mut() else {
            return Ok(());
        };
        // One write: the line lands whole, after everything appended before it.
        let written = file.write(line)?;
        if written < line.len() {
            file.write_all(&line[written..])?;
        }
        if file.metadata()?.len() > self.limit {
            self.rotate()?;
        }
        Ok(())
    }

    /// Moves the journal to `events.1.jsonl` (replacing the one before), under a lock so that two
    /// writers past the limit at once rotate it once.
    fn rotate(&mut self) -> std::io::Result<()> {
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&self.lock)?;
        lock.lock()?;
        if fs::metadata(&self.path).is_ok_and(|meta| meta.len() > self.limit) {
            fs::rename(&self.path, &self.old)?;
        }
        self.file = None;
        Ok(())
    }
}

impl Reporter for Journal {
    fn event(&mut self, event: &Stamped<'_>) {
        let mut line = event.to_value().to_string();
        line.push('\n');
        let _ = self.append(line.as_bytes());
    }
}

/// Reads the journal from its first line on (the rotated file's, then the journal's), numbering
/// the lines from 1 and following the journal through its rotations.
pub(crate) struct Reader {
    path: PathBuf,
    old: PathBuf,
    /// The file being read, its inode, and how far into it.
    file: Option<(File, u64, u64)>,
    /// The number of the last whole line read.
    line: u64,
    /// A line read only in part (its writer had not finished it).
    partial: Vec<u8>,
    /// The rotated file has been read (or there was none).
    past_old: bool,
}

impl Reader {
    /// A reader of the journal in `dir`, at its start.
    pub(crate) fn new(root: &Path) -> Self {
        Self {
            path: root.join(FILE),
            old: root.join(OLD_FILE),
            file: None,
            line: 0,
            partial: Vec::new(),
            past_old: false,
        }
    }

    /// The lines appended since the last call, each with its number.
    pub(crate) fn next_lines(&mut self) -> Vec<(u64, String)> {
        let mut lines = Vec::new();
        if !self.past_old {
            self.past_old = true;
            if let Ok(file) = File::open(&self.old) {
                let mut text = Vec::new();
                let _ = { file }.read_to_end(&mut text);
                self.take_lines(&text, &mut lines);
                self.partial.clear();
            }
        }
        loop {
            let on_disk = fs::metadata(&self.path).ok().map(|meta| meta.ino());
            let reading = self.file.as_ref().map(|(_, ino, _)| *ino);
            if reading.is_none() {
                let Some(opened) = File::open(&self.path).ok() else {
                    return lines;
                };
                let ino = opened.metadata().map(|meta| meta.ino()).unwrap_or_default();
                self.file = Some((opened, ino, 0));
            }
            let Some((file, _, offset)) = self.file.as_mut() else {
                return lines;
            };
            let mut text = Vec::new();
            let _ = file.seek(SeekFrom::Start(*offset));
            let _ = file.read_to_end(&mut text);
            *offset += text.len() as u64;
            self.take_lines(&text, &mut lines);
            // Rotated meanwhile: what the old file got is read; go on with the new one.
            if on_disk.is_some() && on_disk != reading && reading.is_some() {
                self.file = None;
                self.partial.clear();
                continue;
            }
            return lines;
        }
    }

    fn take_lines(&mut self, text: &[u8], lines: &mut Vec<(u64, String)>) {
        self.partial.extend_from_slice(text);
        // Whole lines are taken by index, and the buffer shortened once.
        let mut start = 0;
        while let Some(end) = memchr::memchr(b'\n', &self.partial[start..]) {
            self.line += 1;
            let line = &self.partial[start..start + end];
            lines.push((self.line, String::from_utf8_lossy(line).into_owned()));
            start += end + 1;
        }
        self.partial.drain(..start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::LoopEvent;

    fn stamped(event: &LoopEvent) -> Stamped<'_> {
        Stamped {
            time: crate::model::now(),
            task: Some("t1"),
            event,
        }
    }

    fn claimed(reason: &str) -> LoopEvent {
        LoopEvent::WorkerEnded {
            reason: reason.to_owned(),
            exit_code: 0,
        }
    }

    #[test]
    fn events_are_appended_as_numbered_json_lines_and_read_as_they_come() {
        let dir = crate::testing::tempdir().unwrap();
        let mut journal = Journal::at(dir.path(), LIMIT);
        let mut reader = Reader::new(dir.path());
        assert!(reader.next_lines().is_empty(), "no journal yet");
        journal.event(&stamped(&claimed("a")));
        journal.event(&stamped(&claimed("b")));
        let lines = reader.next_lines();
        assert_eq!(lines.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 2]);
        let first: serde_json::Value = serde_json::from_str(&lines[0].1).unwrap();
        assert_eq!(
            (&first["event"], &first["reason"]),
            (&"worker_ended".into(), &"a".into())
        );
        assert_eq!(first["task"], "t1");
        assert!(reader.next_lines().is_empty());
        journal.event(&stamped(&claimed("c")));
        assert_eq!(reader.next_lines()[0].0, 3);
        let mode = fs::metadata(dir.path().join(FILE)).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn a_half_written_line_waits_for_its_end() {
        let dir = crate::testing::tempdir().unwrap();
        let path = dir.path().join(FILE);
        fs::write(&path, "{\"a\":1}\n{\"b\"").unwrap();
        let mut reader = Reader::new(dir.path());
        assert_eq!(reader.next_lines().len(), 1);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b":2}\n").unwrap();
        assert_eq!(reader.next_lines(), [(2, "{\"b\":2}".to_owned())]);
    }

    #[test]
    fn rotation_keeps_the_old_half_and_a_reader_loses_and_repeats_nothing() {
        let dir = crate::testing::tempdir().unwrap();
        // Rotated past 600 bytes: every few events.
        let mut one = Journal::at(dir.path(), 600);
        let mut two = Journal::at(dir.path(), 600);
        let mut reader = Reader::new(dir.path());
        let mut seen = Vec::new();
        for round in 0..40 {
            let writer = if round % 2 == 0 { &mut one } else { &mut two };
            writer.event(&stamped(&claimed(&format!("task-{round}"))));
            seen.extend(reader.next_lines());
        }
        let tasks: Vec<String> = seen
            .iter()
            .map(|(_, line)| {
                let value: serde_json::Value = serde_json::from_str(line).unwrap();
                value["reason"].to_string()
            })
            .collect();
        assert_eq!(tasks.len(), 40, "{seen:?}");
        let expected: Vec<String> = (0..40).map(|round| format!("\"task-{round}\"")).collect();
        assert_eq!(tasks, expected);
        let numbers: Vec<u64> = seen.iter().map(|(n, _)| *n).collect();
        assert_eq!(numbers, (1..=40).collect::<Vec<u64>>());
        assert!(dir.path().join(OLD_FILE).exists());
        assert!(fs::metadata(dir.path().join(FILE)).unwrap().len() <= 600 + 200);
    }
}
