//! The HTML report: `ralph --report [FILE]`, and after every iteration with `report = true`.
//! Reads `.ralph/` (state, history, task file) and ralph's commits, writes one page
//! (`output/html.rs` draws it) atomically.

use std::path::{Path, PathBuf};

use crate::event::{LoopEvent, Reporter, Stamped};
use crate::git::Repo;
use crate::output::html::{self, Page};
use crate::storage::{self, RalphDir, history, state, tasks::TaskList};

/// The report's default place, in `.ralph/`.
pub(crate) const REPORT_FILE: &str = "report.html";

/// Most commits listed.
const MAX_COMMITS: usize = 500;

/// Where the report goes: `file`, or `.ralph/report.html`.
pub(crate) fn destination(dir: &RalphDir, file: Option<&Path>) -> PathBuf {
    file.map_or_else(|| dir.file(REPORT_FILE), Path::to_owned)
}

/// `report = true`: the HTML report in `.ralph/` follows every iteration and the run's end.
pub(crate) struct LiveReport {
    dir: RalphDir,
    repo: Option<Repo>,
    prompt: String,
}

impl LiveReport {
    pub(crate) fn new(dir: &RalphDir, repo: Option<Repo>, prompt: &str) -> Self {
        Self {
            dir: dir.clone(),
            repo,
            prompt: prompt.to_owned(),
        }
    }
}

impl Reporter for LiveReport {
    fn event(&mut self, stamped: &Stamped<'_>) {
        let ending = match stamped.event {
            LoopEvent::IterationFinished(_) => None,
            LoopEvent::RunEnded(end) => Some(end.reason.as_str()),
            LoopEvent::ParallelEnded(end) => Some(end.reason.as_str()),
            _ => return,
        };
        let to = destination(&self.dir, None);
        let ending = ending.map(|reason| (reason, self.prompt.as_str()));
        if let Err(err) = write(&self.dir, self.repo.as_ref(), &to, ending) {
            crate::output::report_failed(&crate::output::Voice::plain(), &to, &format!("{err:#}"));
        }
    }
}

/// Writes the report of the loop in `dir` to `to`; `ending`: how the loop ended and its prompt,
/// when the loop writes it at its end. `Ok(false)` when there is nothing to report (no history
/// and no state).
pub(crate) fn write(
    dir: &RalphDir,
    repo: Option<&Repo>,
    to: &Path,
    ending: Option<(&str, &str)>,
) -> anyhow::Result<bool> {
    let Some(page) = page(dir, repo, to, ending) else {
        return Ok(false);
    };
    storage::write_atomic(to, page.as_bytes())?;
    Ok(true)
}

/// The report of the loop in `dir` as an HTML page, its log links made for a page at `to`
/// (`-`: printed, so the links are full paths); `None` when there is nothing to report.
pub(crate) fn page(
    dir: &RalphDir,
    repo: Option<&Repo>,
    to: &Path,
    ending: Option<(&str, &str)>,
) -> Option<String> {
    let state = state::load(&dir.state()).ok();
    let history = history::load(&dir.history()).ok();
    if state.is_none() && history.is_none() {
        return None;
    }
    let history = history.unwrap_or_default();
    let tasks = storage::read_text(&dir.tasks())
        .ok()
        .flatten()
        .map(|content| TaskList::parse(&content))
        .filter(|list| !list.is_empty());
    let started = history
        .iterations
        .first()
        .map(|record| record.started_at)
        .or_else(|| state.as_ref().map(|state| state.started_at));
    let commits = match (repo, started) {
        (Some(repo), Some(since)) => repo.ralph_commits(since, MAX_COMMITS),
        _ => Vec::new(),
    };
    let top = repo.map_or_else(|| dir.root().to_owned(), |repo| repo.root().to_owned());
    let project = top.file_name().map_or_else(
        || "ralph".to_owned(),
        |name| name.to_string_lossy().into_owned(),
    );
    let branch = repo.and_then(Repo::current_branch);
    let running = state.as_ref().is_some_and(|s| s.active) && storage::lock::loop_is_running(dir);
    let page = html::page(&Page {
        project: &project,
        branch: branch.as_deref(),
        generated_at: crate::model::now(),
        state: state.as_ref(),
        running,
        ending,
        history: &history,
        tasks: tasks.as_ref(),
        commits: &commits,
        log_prefix: &log_prefix(dir, to),
    });
    Some(page)
}

/// Log paths in the history are relative to `.ralph/`: a report there links them as they are,
/// one elsewhere through `.ralph/`'s full path.
fn log_prefix(dir: &RalphDir, to: &Path) -> String {
    let here = to.parent().filter(|parent| !parent.as_os_str().is_empty());
    let same = match (here.map(Path::canonicalize), dir.root().canonicalize()) {
        (Some(Ok(a)), Ok(b)) => a == b,
        _ => false,
    };
    if same {
        String::new()
    } else {
        let root = dir
            .root()
            .canonicalize()
            .unwrap_or_else(|_| dir.root().to_owned());
        format!("file://{}/", root.display())
    }
}
