//! `--answer ID TEXT`: a person's answer to a question an agent asked through `ralph_ask`.

use std::path::Path;
use std::time::Duration;

use crate::error::fail;
use crate::exit::ExitStatus;
use crate::output;
use crate::storage::RalphDir;
use crate::storage::questions::{self, Question};

/// Answers question `id` with `text` (in this clone, or on `remote` for a worker's question,
/// whose task's claim is stale after `ttl`).
pub(crate) fn answer(
    dir: &RalphDir,
    cwd: &Path,
    (id, text): (&str, &str),
    remote: Option<(&str, Duration)>,
    json: bool,
) -> anyhow::Result<ExitStatus> {
    let answered = match remote {
        Some(remote) => answer_on_remote(cwd, remote, (id, text))?,
        None => questions::answer_in(&crate::git::question_homes(dir), id, text, "cli")?,
    };
    let question = answered.map_err(|refused| fail(format!("--answer {id}: {refused}")))?;
    if json {
        output::report::print(&question);
    } else {
        output::say(&[&answered_line(&question)]);
    }
    Ok(ExitStatus::Success)
}

/// What a person is told once their answer is recorded.
pub(crate) fn answered_line(question: &Question) -> String {
    let of = question
        .task
        .as_deref()
        .map_or_else(String::new, |task| format!(" of task {task}"));
    let text = question
        .answer
        .as_ref()
        .map_or("", |answer| answer.text.as_str());
    format!(
        "✅ Answered question {} (iteration {}{of}): {text:?}. The agent waiting on it goes on with it.",
        question.id, question.iteration
    )
}

/// Tries at answering a question on the remote before another answer is taken to have won.
const REMOTE_TRIES: u32 = 5;

/// Answers a `--worker`'s question on `remote` (`refs/ralph/fleet/questions/<id>` there), by
/// compare-and-swap: the worker that asked finds the answer at its next look. A question whose
/// task's claim is stale (after `ttl`) was left by a worker that is gone: refused as cancelled.
fn answer_on_remote(
    cwd: &Path,
    (remote, ttl): (&str, Duration),
    (id, text): (&str, &str),
) -> anyhow::Result<Result<Question, questions::Refused>> {
    let repo = crate::git::Repo::discover(cwd).ok_or_else(|| {
        fail("--answer --remote needs a git clone of the workers' remote; run it in one")
    })?;
    if text.trim().is_empty() {
        return Ok(Err(questions::Refused::Empty));
    }
    for _ in 0..REMOTE_TRIES {
        // Fetched into refs of this process's own: a worker fetching in this clone at the same
        // moment is left alone.
        let now = (repo.questions_now(remote))
            .map_err(|why| fail(format!("--answer: cannot fetch {remote}: {why}")))?;
        let seen: Vec<(String, Question)> = (now.questions.into_iter())
            .filter_map(|(sha, text)| Some((sha, serde_json::from_str(&text).ok()?)))
            .collect();
        let Some((sha, question)) = seen.iter().find(|(_, question)| question.id == id) else {
            let waiting = (seen.iter())
                .filter(|(_, question)| question.status == questions::Status::Pending)
                .map(|(_, question)| question.id.clone())
                .collect();
            return Ok(Err(questions::Refused::Unknown(waiting)));
        };
        let at = (crate::model::now(), ttl);
        let live = |task: &str| crate::fleet::claim_live(&now.claims, task, at);
        if question.status == questions::Status::Pending
            && !question.task.as_deref().is_none_or(live)
        {
            let mut gone = question.clone();
            gone.status = questions::Status::Cancelled;
            return Ok(Err(questions::Refused::Closed(Box::new(gone))));
        }
        let Some(answered) = questions::answered(question, text, "remote") else {
            return Ok(Err(questions::Refused::Closed(Box::new(question.clone()))));
        };
        let record = serde_json::to_string(&answered)?;
        let pushed = repo
            .push_record(remote, &crate::git::question_ref(id), &record, sha)
            .map_err(|why| fail(format!("--answer: cannot push to {remote}: {why}")))?;
        if pushed.is_some() {
            return Ok(Ok(answered));
        }
    }
    Err(fail(format!(
        "--answer: question {id} on {remote} kept changing; look at ralph --status --remote {remote} and try again"
    ))
    .into())
}
