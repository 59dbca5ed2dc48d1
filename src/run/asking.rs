//! An iteration's questions (`ralph_ask`) as its loop sees them: the agent's tool server writes
//! each in `.ralph/questions/` of the run's home; this watch, looked at on every tick of the
//! agent's run, tells each as it is asked and as it stops waiting (`question_asked`,
//! `question_answered`), and says how long the agent has waited, so the time limits leave that
//! out. When the agent's run ends, what still waits is withdrawn.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::event::LoopEvent;
use crate::storage::RalphDir;
use crate::storage::questions::{self, Question, Status};
use crate::stream::Asking;

use super::sink::Sink;

/// How often the questions folder is looked at.
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// How often a `--worker` looks on the remote for an answer given from another clone.
const REMOTE_EVERY: Duration = Duration::from_secs(1);

/// A `--worker`'s remote, where its questions wait too (`refs/ralph/fleet/questions/<id>`), so
/// `ralph --status --remote` and `ralph --answer --remote` reach them from any clone.
pub(super) struct Remote {
    pub(super) repo: crate::git::Repo,
    pub(super) name: String,
    /// Each question published, with its record's commit there.
    published: BTreeMap<String, String>,
    next_fetch: Option<Instant>,
}

impl Remote {
    pub(super) fn new(repo: crate::git::Repo, name: String) -> Self {
        Self {
            repo,
            name,
            published: BTreeMap::new(),
            next_fetch: None,
        }
    }

    /// Publishes what waits here, takes the answers given there, and removes what stopped
    /// waiting; a remote out of reach is tried again at the next look.
    fn sync(&mut self, home: &RalphDir, mine: &[Question], now: Instant) {
        for question in mine {
            let published = self.published.get(&question.id).cloned();
            let at = crate::git::question_ref(&question.id);
            match (question.status, published) {
                (Status::Pending, None) => {
                    let Ok(record) = serde_json::to_string(question) else {
                        continue;
                    };
                    if let Ok(Some(sha)) = self.repo.push_record(&self.name, &at, &record, "") {
                        self.published.insert(question.id.clone(), sha);
                    }
                }
                (Status::Pending, Some(_)) => {}
                (_, Some(_)) => {
                    let gone = crate::git::Update {
                        dst: at,
                        new: None,
                        expect: None,
                    };
                    if self.repo.push(&self.name, &[gone]).is_ok() {
                        self.published.remove(&question.id);
                    }
                }
                (_, None) => {}
            }
        }
        let waiting = mine
            .iter()
            .any(|q| q.status == Status::Pending && self.published.contains_key(&q.id));
        if !waiting || self.next_fetch.is_some_and(|next| now < next) {
            return;
        }
        self.next_fetch = Some(now + REMOTE_EVERY);
        if self.repo.fetch_fleet(&self.name).is_err() {
            return;
        }
        for (_, text) in self.repo.seen_questions(&self.name) {
            let Ok(there) = serde_json::from_str::<Question>(&text) else {
                continue;
            };
            let answer = there
                .answer
                .as_ref()
                .filter(|_| there.status == Status::Answered);
            if let Some(answer) = answer
                && mine
                    .iter()
                    .any(|q| q.id == there.id && q.status == Status::Pending)
            {
                let _ = questions::answer(home, &there.id, &answer.text, &answer.by);
            }
        }
    }
}

/// The questions of one iteration's agent.
pub(super) struct Watch<'a> {
    home: RalphDir,
    task: Option<String>,
    iteration: u32,
    sink: &'a Sink,
    /// A little before the agent started: its questions were written since.
    since: std::time::SystemTime,
    /// A `--worker`'s remote.
    remote: Option<Remote>,
    /// Each question told, with its status as told.
    told: BTreeMap<String, Status>,
    next_look: Option<Instant>,
    /// Waits that are over, together.
    paused: Duration,
    waiting_since: Option<Instant>,
    resumed: Option<Instant>,
    /// The questions that stopped waiting, for the history.
    pub(super) closed: Vec<Question>,
}

impl<'a> Watch<'a> {
    pub(super) fn new(
        home: RalphDir,
        (task, iteration): (Option<String>, u32),
        sink: &'a Sink,
        remote: Option<Remote>,
    ) -> Self {
        Self {
            home,
            task,
            iteration,
            sink,
            since: std::time::SystemTime::now() - Duration::from_secs(2),
            remote,
            told: BTreeMap::new(),
            next_look: None,
            paused: Duration::ZERO,
            waiting_since: None,
            resumed: None,
            closed: Vec::new(),
        }
    }

    /// The waits as of `now`, after a look at the folder when one is due.
    pub(super) fn look(&mut self, now: Instant) -> Asking {
        if self.next_look.is_none_or(|next| now >= next) {
            self.next_look = Some(now + LOOK_EVERY);
            self.read(now);
        }
        Asking {
            paused: self.paused
                + self
                    .waiting_since
                    .map_or(Duration::ZERO, |since| now - since),
            waiting_since: self.waiting_since,
            resumed: self.resumed,
        }
    }

    /// Tells what changed since the last look.
    fn read(&mut self, now: Instant) {
        let mut mine: Vec<Question> = questions::changed_since(&self.home, self.since);
        mine.retain(|question| question.task == self.task && question.iteration == self.iteration);
        if let Some(remote) = &mut self.remote {
            remote.sync(&self.home, &mine, now);
        }
        let mut waiting = false;
        for question in mine {
            let told = self.told.get(&question.id).copied();
            if told.is_none() {
                answer_from_terminal(&self.home, self.sink.voice().is_json());
                self.sink.emit(LoopEvent::QuestionAsked {
                    id: question.id.clone(),
                    iteration: question.iteration,
                    question: question.question.clone(),
                    options: question.options.clone(),
                    urgency: question.urgency.clone(),
                    timeout_ms: millis(
                        (question.expires_at - question.asked_at)
                            .to_std()
                            .unwrap_or_default(),
                    ),
                });
            }
            waiting |= question.status == Status::Pending;
            if question.status != Status::Pending && told != Some(question.status) {
                self.sink.emit(answered(&question));
                self.closed.push(question.clone());
            }
            self.told.insert(question.id, question.status);
        }
        match (self.waiting_since, waiting) {
            (None, true) => self.waiting_since = Some(now),
            (Some(since), false) => {
                self.paused += now - since;
                self.waiting_since = None;
                self.resumed = Some(now);
            }
            _ => {}
        }
    }

    /// The agent's run is over: what still waits is withdrawn (and told); the questions of the
    /// iteration, for the history.
    pub(super) fn finish(&mut self) -> Vec<Question> {
        let waiting: Vec<String> = (self.told.iter())
            .filter(|(_, status)| **status == Status::Pending)
            .map(|(id, _)| id.clone())
            .collect();
        for id in waiting {
            let _ = questions::close(&self.home, &id, Status::Cancelled);
        }
        self.read(Instant::now());
        std::mem::take(&mut self.closed)
    }
}

/// The terminal's answers: when ralph's stdin and stdout are a terminal (and it does not speak
/// JSON), a line typed there answers the oldest question waiting, an option by its number. One
/// reader for the whole process, started at the first question.
pub(super) fn answer_from_terminal(home: &RalphDir, json: bool) {
    use std::io::BufRead as _;
    static STARTED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    if !crate::output::terminal_answers(json) {
        return;
    }
    let home = home.clone();
    STARTED.get_or_init(|| {
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if let Some(oldest) = questions::pending(&home).into_iter().next() {
                    let _ = questions::answer(&home, &oldest.id, &line, "terminal");
                }
            }
        });
    });
}

/// The event of a question that stopped waiting.
pub(super) fn answered(question: &Question) -> LoopEvent {
    let status = match question.status {
        Status::Answered => "answered",
        Status::TimedOut => "timed_out",
        Status::Cancelled | Status::Pending => "cancelled",
    };
    LoopEvent::QuestionAnswered {
        id: question.id.clone(),
        iteration: question.iteration,
        status: status.to_owned(),
        answer: question.answer.as_ref().map(|answer| answer.text.clone()),
        by: question.answer.as_ref().map(|answer| answer.by.clone()),
        waited_ms: millis(question.waited(crate::model::now())),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
