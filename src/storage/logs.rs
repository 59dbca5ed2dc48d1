//! Iteration logs: everything an agent printed in one iteration, in `.ralph/logs/<NNNN>.jsonl`
//! (a parallel task's in `.ralph/logs/<task-id>/`), one JSON record a line. Records are written
//! in one `write` per chunk the agent's pipe gave (each whole, never a part), as soon as the chunk
//! has been read, so a kill keeps everything up to that moment.
//!
//! Records: `{"t": time, "stream": "ralph", "start": {...}}` first (iteration, agent, format),
//! then `{"t", "stream": "stdout"|"stderr", "line"}` per line, `{"t", "stream": "ralph",
//! "line": "…"}` when the log is cut at its size limit, and `{"t", "stream": "ralph", "end":
//! {"exit_code"}}` last. Logs are not committed (`.ralph/.gitignore`) and only the last
//! `keep_logs` are kept.

use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The folder of logs under `.ralph/`.
pub(crate) const LOGS_DIR: &str = "logs";

/// Longest line kept whole; the rest of a longer line is dropped (noted in the record).
const MAX_LINE: usize = 1 << 20;

/// Records held before they are written, at most.
const BUFFER: usize = 256 * 1024;

/// How an iteration's run is described at the top of its log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Start {
    pub(crate) iteration: u32,
    pub(crate) agent: String,
    /// `json` or `text`: how the agent's stdout is read.
    pub(crate) format: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) task: Option<String>,
    /// The fingerprint of the task's text (`storage::identity`), so the log says which text of
    /// the task it was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) task_fingerprint: Option<String>,
}

/// The last record: how the agent's run ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct End {
    pub(crate) exit_code: i32,
}

/// One line of a log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) t: DateTime<Utc>,
    pub(crate) stream: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) line: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) start: Option<Start>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) end: Option<End>,
}

fn stream_name(stderr: bool) -> &'static str {
    if stderr { "stderr" } else { "stdout" }
}

/// The name of the log of `iteration`'s `attempt` (1 for the first): `0003.jsonl`, then
/// `0003-2.jsonl` for a second run of the same iteration (a provider failure retried, another
/// agent taking it over). A log is never written over.
fn name(iteration: u32, attempt: u32) -> String {
    if attempt <= 1 {
        format!("{iteration:04}.jsonl")
    } else {
        format!("{iteration:04}-{attempt}.jsonl")
    }
}

/// The log of iteration `iteration` in `dir` (`.ralph/logs` or a task's folder in it): its last
/// attempt's, or where the first would be when there is none.
pub(crate) fn path(dir: &Path, iteration: u32) -> PathBuf {
    (numbered(dir).into_iter())
        .rfind(|((number, _), _)| *number == iteration)
        .map_or_else(|| dir.join(name(iteration, 1)), |(_, path)| path)
}

/// The log being written for one iteration.
pub(crate) struct IterationLog {
    file: File,
    written: u64,
    limit: u64,
    cut: bool,
    /// The line being received, per stream (stdout, stderr).
    pending: [String; 2],
    /// Whole records not written yet.
    buffer: Vec<u8>,
    /// The last time stamp, as JSON, and its millisecond (records of one millisecond share it).
    stamp: (i64, String),
}

impl IterationLog {
    /// Starts the log of `start.iteration` in `dir` (created if needed), cut at `limit` bytes,
    /// in a file of its own (a log written before for the same iteration stays): the log and its
    /// file name.
    pub(crate) fn create(dir: &Path, start: Start, limit: u64) -> std::io::Result<(Self, String)> {
        use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
        // Private, as ralph's runtime files are: what an agent printed may hold secrets.
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let mut attempt = 1;
        let (file, file_name) = loop {
            let file_name = name(start.iteration, attempt);
            let created = (fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600))
            .open(dir.join(&file_name));
            match created {
                Ok(file) => break (file, file_name),
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => attempt += 1,
                Err(err) => return Err(err),
            }
        };
        let mut log = Self {
            file,
            written: 0,
            limit,
            cut: false,
            pending: [String::new(), String::new()],
            buffer: Vec::with_capacity(BUFFER),
            stamp: (i64::MIN, String::new()),
        };
        log.stamp_now();
        log.write(&Record {
            t: crate::model::now(),
            stream: "ralph".to_owned(),
            line: None,
            start: Some(start),
            end: None,
        });
        Ok((log, file_name))
    }

    /// A piece of the agent's output; the line is written when it ends.
    pub(crate) fn segment(&mut self, stderr: bool, text: &str, ends_line: bool) {
        let index = usize::from(stderr);
        if self.cut {
            return;
        }
        if ends_line && self.pending[index].is_empty() && text.len() <= MAX_LINE {
            // A whole line in one piece (the usual case): no copy.
            self.line(stream_name(stderr), text);
            return;
        }
        let pending = &mut self.pending[index];
        if pending.len() < MAX_LINE {
            let room = MAX_LINE - pending.len();
            let mut end = text.len().min(room);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            pending.push_str(&text[..end]);
        }
        if ends_line {
            let line = std::mem::take(&mut self.pending[index]);
            self.line(stream_name(stderr), &line);
        }
    }

    /// Whole lines at once (without their line breaks): a record each, with one time stamp.
    pub(crate) fn lines<'t>(&mut self, stderr: bool, lines: impl Iterator<Item = &'t str>) {
        if self.cut {
            return;
        }
        let stream = stream_name(stderr);
        for line in lines {
            self.line(stream, line);
        }
    }

    /// Writes what is left of unfinished lines, then the end record.
    pub(crate) fn end(&mut self, exit_code: i32) {
        for (index, stream) in ["stdout", "stderr"].into_iter().enumerate() {
            let line = std::mem::take(&mut self.pending[index]);
            if !line.is_empty() {
                self.stamp_now();
                self.line(stream, &line);
            }
        }
        self.write(&Record {
            t: crate::model::now(),
            stream: "ralph".to_owned(),
            line: None,
            start: None,
            end: Some(End { exit_code }),
        });
        self.flush();
    }

    /// Writes the records held, in one `write`.
    pub(crate) fn flush(&mut self) {
        if !self.buffer.is_empty() {
            if self.file.write_all(&self.buffer).is_ok() {
                self.written += self.buffer.len() as u64;
            }
            self.buffer.clear();
        }
    }

    /// Takes the time for the line records that follow: the time their chunk was read (the
    /// JSON text is made once a millisecond).
    pub(crate) fn stamp_now(&mut self) {
        let now = crate::model::now();
        if self.stamp.0 != now.timestamp_millis() {
            let json = serde_json::to_string(&now).unwrap_or_default();
            self.stamp = (now.timestamp_millis(), json);
        }
    }

    /// One line's record, with the time of the last [`Self::stamp_now`].
    fn line(&mut self, stream: &str, line: &str) {
        if self.cut {
            return;
        }
        if self.written + (self.buffer.len() + line.len()) as u64 > self.limit {
            self.cut = true;
            let note = format!(
                "log cut at {} bytes (log_max_size): the rest of this iteration's output is not kept",
                self.limit
            );
            self.write(&Record {
                t: crate::model::now(),
                stream: "ralph".to_owned(),
                line: Some(note),
                start: None,
                end: None,
            });
            return;
        }
        // The record as `Record` writes it, without building one: `{"t":…,"stream":…,"line":…}`.
        let start = self.buffer.len();
        self.buffer.extend_from_slice(b"{\"t\":");
        self.buffer.extend_from_slice(self.stamp.1.as_bytes());
        self.buffer.extend_from_slice(b",\"stream\":\"");
        self.buffer.extend_from_slice(stream.as_bytes());
        self.buffer.extend_from_slice(b"\",\"line\":");
        // No early exit: the test of every byte is one vector loop.
        let escapes = line.bytes().fold(false, |found, byte| {
            found | (byte < 0x20) | (byte == b'"') | (byte == b'\\')
        });
        if !escapes {
            // Nothing to escape (the usual line): copied as it is.
            self.buffer.push(b'"');
            self.buffer.extend_from_slice(line.as_bytes());
            self.buffer.push(b'"');
        } else if serde_json::to_writer(&mut self.buffer, line).is_err() {
            self.buffer.truncate(start);
            return;
        }
        self.buffer.extend_from_slice(b"}\n");
        self.keep_bounded();
    }

    /// One record, added whole to the records held.
    fn write(&mut self, record: &Record) {
        let start = self.buffer.len();
        if serde_json::to_writer(&mut self.buffer, record).is_ok() {
            self.buffer.push(b'\n');
        } else {
            // Never a part of a record.
            self.buffer.truncate(start);
        }
        self.keep_bounded();
    }

    fn keep_bounded(&mut self) {
        if self.buffer.len() >= BUFFER {
            self.flush();
        }
    }
}

impl Drop for IterationLog {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The logs in `dir` (files named `NNNN.jsonl` or `NNNN-A.jsonl`) with their iteration numbers
/// and attempts, oldest first.
fn numbered(dir: &Path) -> Vec<((u32, u32), PathBuf)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut logs: Vec<((u32, u32), PathBuf)> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let stem = name.strip_suffix(".jsonl")?;
            let (number, attempt) = match stem.split_once('-') {
                Some((number, attempt)) => (number.parse().ok()?, attempt.parse().ok()?),
                None => (stem.parse().ok()?, 1),
            };
            Some(((number, attempt), entry.path()))
        })
        .collect();
    logs.sort();
    logs
}

/// Removes the oldest logs in `dir` beyond the newest `keep`.
pub(crate) fn prune(dir: &Path, keep: u32) {
    let logs = numbered(dir);
    let excess = logs.len().saturating_sub(keep as usize);
    for (_, path) in logs.into_iter().take(excess) {
        let _ = fs::remove_file(path);
    }
}

/// The newest log in `dir` (by iteration number, then attempt).
pub(crate) fn latest(dir: &Path) -> Option<(u32, PathBuf)> {
    numbered(dir)
        .pop()
        .map(|((number, _), path)| (number, path))
}

/// The last line the agent printed, from the end of a log being written.
pub(crate) fn last_line(path: &Path) -> Option<String> {
    tail(path)?
        .lines
        .into_iter()
        .rev()
        .filter(|record| record.stream != "ralph")
        .find_map(|record| record.line.filter(|line| !line.trim().is_empty()))
}

/// The end of a log: its start record and the records of its last 64 KiB, in order.
pub(crate) struct Tail {
    pub(crate) start: Option<Start>,
    pub(crate) lines: Vec<Record>,
    /// The iteration has ended (its end record is there).
    pub(crate) ended: bool,
}

/// Reads the start and the end of a log being written, without reading the whole file.
pub(crate) fn tail(path: &Path) -> Option<Tail> {
    use std::io::{BufRead as _, BufReader, Read as _, Seek as _, SeekFrom};
    let mut file = File::open(path).ok()?;
    let mut first = String::new();
    BufReader::new(&mut file)
        .take(64 * 1024)
        .read_line(&mut first)
        .ok()?;
    let start = serde_json::from_str::<Record>(&first)
        .ok()
        .and_then(|record| record.start);
    let size = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(size.saturating_sub(64 * 1024)))
        .ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    // A cut first line does not parse and is skipped, like a half-written last one.
    let records: Vec<Record> = String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|line| serde_json::from_str::<Record>(line).ok())
        .collect();
    let ended = records.last().is_some_and(|record| record.end.is_some());
    let lines = records
        .into_iter()
        .filter(|record| record.line.is_some())
        .collect();
    Some(Tail {
        start,
        lines,
        ended,
    })
}

/// The most recently written log under `dir`: its own logs and those of the task folders in it.
pub(crate) fn newest(dir: &Path) -> Option<PathBuf> {
    let folders = fs::read_dir(dir).ok()?.flatten().map(|entry| entry.path());
    let candidates = std::iter::once(dir.to_owned())
        .chain(folders.filter(|path| path.is_dir()))
        .filter_map(|folder| latest(&folder).map(|(_, path)| path));
    candidates.max_by_key(|path| fs::metadata(path).and_then(|meta| meta.modified()).ok())
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead as _, BufReader};

    use super::*;

    /// The records of a log (unreadable lines skipped: a kill may cut the last one short).
    fn read(path: &Path) -> std::io::Result<Vec<Record>> {
        let file = File::open(path)?;
        Ok(BufReader::new(file)
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| serde_json::from_str(&line).ok())
            .collect())
    }

    fn start(iteration: u32) -> Start {
        Start {
            iteration,
            agent: "opencode".to_owned(),
            format: "text".to_owned(),
            task: None,
            task_fingerprint: None,
        }
    }

    #[test]
    fn lines_are_recorded_with_their_stream_and_an_end() {
        let dir = crate::testing::tempdir().unwrap();
        let mut log = IterationLog::create(dir.path(), start(7), 1_000_000)
            .unwrap()
            .0;
        log.segment(false, "hello ", false);
        log.segment(false, "world", true);
        log.segment(true, "oops", true);
        log.lines(false, ["a \"quoted\"\tline", "", "plain"].into_iter());
        log.segment(false, "unfinished", false);
        log.end(3);
        let records = read(&path(dir.path(), 7)).unwrap();
        assert_eq!(records[0].start, Some(start(7)));
        let lines: Vec<(&str, &str)> = records
            .iter()
            .filter_map(|r| Some((r.stream.as_str(), r.line.as_deref()?)))
            .collect();
        assert_eq!(
            lines,
            [
                ("stdout", "hello world"),
                ("stderr", "oops"),
                ("stdout", "a \"quoted\"\tline"),
                ("stdout", ""),
                ("stdout", "plain"),
                ("stdout", "unfinished")
            ]
        );
        assert_eq!(records.last().unwrap().end, Some(End { exit_code: 3 }));
        assert_eq!(
            last_line(&path(dir.path(), 7)).as_deref(),
            Some("unfinished")
        );
    }

    #[test]
    fn a_log_is_cut_at_its_limit_with_a_note() {
        let dir = crate::testing::tempdir().unwrap();
        let mut log = IterationLog::create(dir.path(), start(1), 300).unwrap().0;
        for n in 0..100 {
            log.segment(false, &format!("line {n}"), true);
        }
        log.end(0);
        let records = read(&path(dir.path(), 1)).unwrap();
        let size = fs::metadata(path(dir.path(), 1)).unwrap().len();
        assert!(size < 600, "{size}");
        assert!(records.iter().any(|r| {
            r.line
                .as_deref()
                .is_some_and(|l| l.starts_with("log cut at 300 bytes"))
        }));
        assert!(records.last().unwrap().end.is_some());
    }

    #[test]
    fn only_the_newest_logs_are_kept() {
        let dir = crate::testing::tempdir().unwrap();
        for n in 1..=12 {
            IterationLog::create(dir.path(), start(n), 1000).unwrap();
        }
        prune(dir.path(), 5);
        let mut left: Vec<u32> = fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy()[..4].parse().unwrap())
            .collect();
        left.sort_unstable();
        assert_eq!(left, [8, 9, 10, 11, 12]);
        assert_eq!(latest(dir.path()).unwrap().0, 12);
    }

    #[test]
    fn a_second_run_of_an_iteration_gets_a_log_of_its_own() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = crate::testing::tempdir().unwrap();
        let dir = tmp.path().join("logs/task");
        let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
        let (mut first, name) = IterationLog::create(&dir, start(3), 1000).unwrap();
        assert_eq!((mode(&dir), mode(&tmp.path().join("logs"))), (0o700, 0o700));
        assert_eq!(
            mode(&dir.join(&name)),
            0o600,
            "private, as every runtime file"
        );
        first.lines(false, ["first run"].into_iter());
        first.flush();
        assert_eq!(name, "0003.jsonl");
        let (_, name) = IterationLog::create(&dir, start(3), 1000).unwrap();
        assert_eq!(name, "0003-2.jsonl");
        let kept = fs::read_to_string(dir.join("0003.jsonl")).unwrap();
        assert!(kept.contains("first run"), "{kept}");
        assert_eq!(path(&dir, 3), dir.join("0003-2.jsonl"));
        assert_eq!(path(&dir, 4), dir.join("0004.jsonl"));
        let (_, name) = IterationLog::create(&dir, start(10), 1000).unwrap();
        assert_eq!(name, "0010.jsonl");
        assert_eq!(latest(&dir).unwrap().1, dir.join("0010.jsonl"));
        prune(&dir, 2);
        assert!(!dir.join("0003.jsonl").exists());
        assert!(dir.join("0003-2.jsonl").exists());
    }
}
