//! Questions an agent asks its loop through `ralph_ask`, one JSON file each under
//! `.ralph/questions/` of the run's home: written pending by the agent's tool server
//! (`ralph __agent-tools`), answered by whoever answers first (`ralph --answer`, the `--serve`
//! page, `ralph --mcp`, the terminal), closed when the asker stops waiting. Every change is made
//! under one lock, so a question is answered once.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::RalphDir;

/// The folder, under `.ralph/`.
pub(crate) const QUESTIONS_DIR: &str = "questions";
/// Held while a question is changed: in the folder, so that a sandboxed agent's tool server,
/// which may write there alone, can take it too.
const LOCK_FILE: &str = "questions/.lock";

/// Where a question stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    Pending,
    Answered,
    /// Nobody answered before the asker's `--ask-timeout`.
    TimedOut,
    /// The run stopped (or the agent went away) while it waited.
    Cancelled,
}

/// One question and, once given, its answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Question {
    pub(crate) id: String,
    /// The task whose loop asked (`None` for a loop without tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) task: Option<String>,
    pub(crate) iteration: u32,
    pub(crate) question: String,
    /// The choices offered; an answer may give one by its number (1, 2, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) options: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) urgency: Option<String>,
    pub(crate) asked_at: DateTime<Utc>,
    /// When the asker stops waiting.
    pub(crate) expires_at: DateTime<Utc>,
    pub(crate) status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) answer: Option<Answer>,
    /// When it stopped being pending (answered, timed out or cancelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) closed_at: Option<DateTime<Utc>>,
}

/// An answer, who gave it and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Answer {
    pub(crate) text: String,
    /// `terminal`, `page`, `cli`, `mcp`, or `remote` (another clone).
    pub(crate) by: String,
    pub(crate) at: DateTime<Utc>,
}

/// What a new question says.
#[derive(Clone, Debug, Default)]
pub(crate) struct Asking {
    pub(crate) task: Option<String>,
    pub(crate) iteration: u32,
    pub(crate) question: String,
    pub(crate) options: Vec<String>,
    pub(crate) urgency: Option<String>,
}

impl Question {
    /// Whether someone still waits for its answer at `now`.
    pub(crate) fn waits(&self, now: DateTime<Utc>) -> bool {
        self.status == Status::Pending && now < self.expires_at
    }

    /// How long it has waited (or waited, once closed) by `now`.
    pub(crate) fn waited(&self, now: DateTime<Utc>) -> Duration {
        let until = self.closed_at.unwrap_or(now);
        (until - self.asked_at).to_std().unwrap_or_default()
    }
}

/// The questions folder of `dir`.
fn folder(dir: &RalphDir) -> std::path::PathBuf {
    dir.file(QUESTIONS_DIR)
}

fn path(dir: &RalphDir, id: &str) -> std::path::PathBuf {
    folder(dir).join(format!("{id}.json"))
}

/// Takes the questions' lock (the folder made when missing).
fn lock(dir: &RalphDir) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(folder(dir))?;
    super::lock::exclusive(dir, LOCK_FILE)
}

/// Whether `id` can name a question (`q` and hex digits): anything else names no file.
pub(crate) fn is_id(id: &str) -> bool {
    id.len() <= 20
        && id
            .strip_prefix('q')
            .is_some_and(|hex| !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Held by the asker for as long as it waits for the answer: an exclusive lock on
/// `questions/<id>.wait`, which goes with the asker's process however it ends. A question still
/// pending whose lock anyone can take was left by an asker that is gone (a ralph killed with
/// `kill -9`): it is read as cancelled.
pub(crate) struct Waiting {
    _held: std::fs::File,
    path: std::path::PathBuf,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        // The question is closed by now (answered, timed out, withdrawn): nobody tests the lock.
        let _ = std::fs::remove_file(&self.path);
    }
}

fn wait_path(dir: &RalphDir, id: &str) -> std::path::PathBuf {
    folder(dir).join(format!("{id}.wait"))
}

/// Whether the asker of pending question `id` is gone: its lock can be taken. A question with no
/// lock file (its asker already done) is left to its status and expiry.
fn asker_gone(dir: &RalphDir, id: &str) -> bool {
    let Ok(file) = std::fs::File::open(wait_path(dir, id)) else {
        return false;
    };
    let free = file.try_lock_shared().is_ok();
    if free {
        let _ = file.unlock();
    }
    free
}

/// Records a new pending question, waited for until `timeout` from now, and the asker's hold on
/// it (keep it while waiting).
pub(crate) fn ask(
    dir: &RalphDir,
    asking: Asking,
    timeout: Duration,
) -> anyhow::Result<(Question, Waiting)> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let _lock = lock(dir)?;
    let id = loop {
        let id = format!("q{}", crate::model::random_hex(3)?);
        if !path(dir, &id).exists() {
            break id;
        }
    };
    let held_at = wait_path(dir, &id);
    let held = (std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true))
    .mode(0o600)
    .open(&held_at)?;
    held.lock()?;
    let waiting = Waiting {
        _held: held,
        path: held_at,
    };
    let now = crate::model::now();
    let question = Question {
        id,
        task: asking.task,
        iteration: asking.iteration,
        question: asking.question,
        options: asking.options,
        urgency: asking.urgency,
        asked_at: now,
        expires_at: now + chrono::Duration::from_std(timeout).unwrap_or(chrono::Duration::MAX),
        status: Status::Pending,
        answer: None,
        closed_at: None,
    };
    super::write_json(&path(dir, &question.id), &question)?;
    Ok((question, waiting))
}

/// The question `id`, if there is one that can be read; a pending one whose asker is gone reads
/// as cancelled.
pub(crate) fn load(dir: &RalphDir, id: &str) -> Option<Question> {
    let mut question = read(dir, id)?;
    if question.status == Status::Pending && asker_gone(dir, id) {
        question.status = Status::Cancelled;
    }
    Some(question)
}

/// Question `id` as its file says (a pending one may have lost its asker).
fn read(dir: &RalphDir, id: &str) -> Option<Question> {
    if !is_id(id) {
        return None;
    }
    super::read_json(&path(dir, id)).ok()
}

/// Every question that can be read, oldest first.
pub(crate) fn all(dir: &RalphDir) -> Vec<Question> {
    changed_since(dir, std::time::SystemTime::UNIX_EPOCH)
}

/// The questions asked or changed at `since` or later (their file written then), oldest first:
/// those of a running iteration, without reading every question ever asked.
pub(crate) fn changed_since(dir: &RalphDir, since: std::time::SystemTime) -> Vec<Question> {
    let Ok(entries) = std::fs::read_dir(folder(dir)) else {
        return Vec::new();
    };
    let mut questions: Vec<Question> = entries
        .filter_map(Result::ok)
        .filter(|entry| {
            let written = entry.metadata().and_then(|meta| meta.modified());
            written.is_ok_and(|written| written >= since)
        })
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            load(dir, name.strip_suffix(".json")?)
        })
        .collect();
    questions.sort_by(|a, b| (a.asked_at, &a.id).cmp(&(b.asked_at, &b.id)));
    questions
}

/// The questions still waiting for an answer, oldest first: pending, and asked by an asker
/// still waiting (one whose asker is gone, or past its timeout, waits no more).
pub(crate) fn pending(dir: &RalphDir) -> Vec<Question> {
    pending_in(std::slice::from_ref(dir))
}

/// [`pending`] in each of `homes` (a repository's, and its worktree loops'), oldest first.
pub(crate) fn pending_in(homes: &[RalphDir]) -> Vec<Question> {
    let now = crate::model::now();
    let mut questions = all_in(homes);
    questions.retain(|question| question.waits(now));
    questions
}

/// [`all`] in each of `homes`, oldest first.
pub(crate) fn all_in(homes: &[RalphDir]) -> Vec<Question> {
    let mut questions: Vec<Question> = homes.iter().flat_map(all).collect();
    questions.sort_by(|a, b| (a.asked_at, &a.id).cmp(&(b.asked_at, &b.id)));
    questions
}

/// [`answer`] in whichever of `homes` keeps question `id`.
pub(crate) fn answer_in(
    homes: &[RalphDir],
    id: &str,
    text: &str,
    by: &str,
) -> anyhow::Result<Result<Question, Refused>> {
    if let Some(home) = (homes.iter()).find(|home| is_id(id) && path(home, id).exists()) {
        return answer(home, id, text, by);
    }
    if text.trim().is_empty() {
        return Ok(Err(Refused::Empty));
    }
    let waiting = pending_in(homes).into_iter().map(|q| q.id).collect();
    Ok(Err(Refused::Unknown(waiting)))
}

/// Why an answer was not taken.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No question has this id; the ids of those waiting.
    Unknown(Vec<String>),
    /// It is no longer waiting (answered, timed out, cancelled).
    Closed(Box<Question>),
    /// The answer is empty.
    Empty,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unknown(waiting) if waiting.is_empty() => {
                write!(
                    f,
                    "no question has that id, and none is waiting for an answer"
                )
            }
            Self::Unknown(waiting) => write!(
                f,
                "no question has that id; waiting for an answer: {} (ralph --status lists them)",
                waiting.join(", ")
            ),
            Self::Closed(question) => match (&question.status, &question.answer) {
                (Status::Pending, _) => write!(
                    f,
                    "question {} is no longer waiting: nobody answered in time (or the ralph that asked it was stopped)",
                    question.id
                ),
                (Status::Answered, Some(answer)) => write!(
                    f,
                    "question {} was answered already (by {}: {:?}); nothing was changed",
                    question.id, answer.by, answer.text
                ),
                (Status::TimedOut, _) => write!(
                    f,
                    "question {} is no longer waiting: nobody answered in time and the agent decided itself",
                    question.id
                ),
                _ => write!(
                    f,
                    "question {} is no longer waiting: its run stopped",
                    question.id
                ),
            },
            Self::Empty => write!(f, "the answer is empty; say what the agent should do"),
        }
    }
}

/// Answers question `id` with `text` (an option's number stands for that option), `by` whom:
/// the question as answered, unless it is not waiting.
pub(crate) fn answer(
    dir: &RalphDir,
    id: &str,
    text: &str,
    by: &str,
) -> anyhow::Result<Result<Question, Refused>> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Err(Refused::Empty));
    }
    let _lock = lock(dir)?;
    let Some(question) = load(dir, id) else {
        let waiting = pending(dir).into_iter().map(|q| q.id).collect();
        return Ok(Err(Refused::Unknown(waiting)));
    };
    let Some(answered) = answered(&question, text, by) else {
        return Ok(Err(Refused::Closed(Box::new(question))));
    };
    super::write_json(&path(dir, id), &answered)?;
    Ok(Ok(answered))
}

/// `question` answered now with `text` (an option's number stands for that option) `by` whom;
/// `None` when it is not waiting.
pub(crate) fn answered(question: &Question, text: &str, by: &str) -> Option<Question> {
    if !question.waits(crate::model::now()) {
        return None;
    }
    let text = text.trim();
    let chosen = (text.parse::<usize>().ok())
        .and_then(|number| question.options.get(number.checked_sub(1)?))
        .cloned();
    let now = crate::model::now();
    let mut question = question.clone();
    question.status = Status::Answered;
    question.closed_at = Some(now);
    question.answer = Some(Answer {
        text: chosen.unwrap_or_else(|| text.to_owned()),
        by: by.to_owned(),
        at: now,
    });
    Some(question)
}

/// Closes question `id` as `status` (timed out, cancelled) if it still waits: the question as
/// it is now (answered meanwhile, perhaps).
pub(crate) fn close(dir: &RalphDir, id: &str, status: Status) -> anyhow::Result<Option<Question>> {
    let _lock = lock(dir)?;
    let Some(mut question) = read(dir, id) else {
        return Ok(None);
    };
    if question.status == Status::Pending {
        question.status = status;
        question.closed_at = Some(crate::model::now());
        super::write_json(&path(dir, id), &question)?;
    }
    Ok(Some(question))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asking(question: &str, options: &[&str]) -> Asking {
        Asking {
            task: Some("api".to_owned()),
            iteration: 2,
            question: question.to_owned(),
            options: options.iter().map(|o| (*o).to_owned()).collect(),
            urgency: None,
        }
    }

    #[test]
    fn a_question_is_answered_once_and_an_option_by_its_number() {
        let tmp = crate::testing::tempdir().unwrap();
        let dir = RalphDir::new(tmp.path());
        let (asked, _waiting) = ask(
            &dir,
            asking("Which store?", &["SQLite", "Postgres"]),
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(is_id(&asked.id), "{}", asked.id);
        assert_eq!(pending(&dir), std::slice::from_ref(&asked));
        let answered = answer(&dir, &asked.id, " 2 ", "cli").unwrap().unwrap();
        assert_eq!(answered.status, Status::Answered);
        assert_eq!(answered.answer.as_ref().unwrap().text, "Postgres");
        assert_eq!(answered.answer.as_ref().unwrap().by, "cli");
        assert!(pending(&dir).is_empty());
        // A second answer changes nothing and says who answered.
        let again = answer(&dir, &asked.id, "SQLite", "page")
            .unwrap()
            .unwrap_err();
        assert!(
            again
                .to_string()
                .contains("answered already (by cli: \"Postgres\")"),
            "{again}"
        );
        assert_eq!(load(&dir, &asked.id).unwrap(), answered);
        // A number that is no option is the answer's text.
        let (other, _waiting) =
            ask(&dir, asking("How many?", &["one"]), Duration::from_secs(60)).unwrap();
        let text = answer(&dir, &other.id, "7", "cli").unwrap().unwrap();
        assert_eq!(text.answer.unwrap().text, "7");
    }

    #[test]
    fn unknown_empty_and_closed_answers_are_refused_with_why() {
        let tmp = crate::testing::tempdir().unwrap();
        let dir = RalphDir::new(tmp.path());
        let none = answer(&dir, "q123", "yes", "cli").unwrap().unwrap_err();
        assert_eq!(none, Refused::Unknown(Vec::new()));
        let (asked, _waiting) = ask(&dir, asking("Go?", &[]), Duration::from_secs(60)).unwrap();
        let unknown = answer(&dir, "../state", "yes", "cli").unwrap().unwrap_err();
        assert!(unknown.to_string().contains(&asked.id), "{unknown}");
        assert_eq!(
            answer(&dir, &asked.id, "  ", "cli").unwrap(),
            Err(Refused::Empty)
        );
        let closed = close(&dir, &asked.id, Status::TimedOut).unwrap().unwrap();
        assert_eq!(closed.status, Status::TimedOut);
        let late = answer(&dir, &asked.id, "yes", "cli").unwrap().unwrap_err();
        assert!(
            late.to_string().contains("nobody answered in time"),
            "{late}"
        );
        // One left pending by an asker still there stops waiting at its timeout.
        let (left, _waiting) = ask(&dir, asking("Stale?", &[]), Duration::ZERO).unwrap();
        assert!(pending(&dir).iter().all(|q| q.id != left.id));
        let stale = answer(&dir, &left.id, "yes", "cli").unwrap().unwrap_err();
        assert!(stale.to_string().contains("no longer waiting"), "{stale}");
        // Closing again keeps the first close.
        let twice = close(&dir, &asked.id, Status::Cancelled).unwrap().unwrap();
        assert_eq!(twice.status, Status::TimedOut);
    }

    #[test]
    fn a_question_whose_asker_is_gone_no_longer_waits() {
        let tmp = crate::testing::tempdir().unwrap();
        let dir = RalphDir::new(tmp.path());
        let (asked, waiting) = ask(&dir, asking("Go?", &[]), Duration::from_secs(60)).unwrap();
        assert_eq!(load(&dir, &asked.id).unwrap().status, Status::Pending);
        // The asker's process is killed: its lock goes with it, its lock file stays.
        drop(waiting);
        std::fs::write(wait_path(&dir, &asked.id), "").unwrap();
        assert_eq!(load(&dir, &asked.id).unwrap().status, Status::Cancelled);
        assert!(pending(&dir).is_empty());
        let late = answer(&dir, &asked.id, "yes", "cli").unwrap().unwrap_err();
        assert!(late.to_string().contains("its run stopped"), "{late}");
    }
}
