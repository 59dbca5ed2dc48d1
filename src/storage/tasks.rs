//! `ralph-tasks.md`: the markdown task list that tasks mode works through.
//!
//! The file is the single source of truth and belongs to the user and the agent: ralph parses it
//! line by line and edits it only by appending or removing lines, so notes, blank lines and
//! deeper indentation survive every edit byte for byte.
//!
//! Format: a top-level task is a line at column 0, `- [c] text`, where `c` is a space (todo), `/`
//! (in progress), `x` or `X` (complete) or `!` (failed); any other character counts as todo.
//! Indented `- [c] text` lines are subtasks of the task above them, and indented `- key: value`
//! lines are its properties. Every other line is ignored.

mod problems;

pub(crate) use problems::{problems, with_none_in_progress};

/// The heading of a task file ralph creates.
pub(crate) const HEADING: &str = "# Ralph Tasks";

/// Where a task stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TaskStatus {
    Todo,
    InProgress,
    Complete,
    Failed,
}

impl TaskStatus {
    /// Whether a task in this status is still to be done: to do, or in progress (not complete,
    /// not failed).
    pub(crate) fn is_to_do(self) -> bool {
        matches!(self, Self::Todo | Self::InProgress)
    }

    fn from_char(c: char) -> Self {
        match c {
            '/' => Self::InProgress,
            'x' | 'X' => Self::Complete,
            '!' => Self::Failed,
            _ => Self::Todo,
        }
    }

    /// Its name in JSON: `todo`, `in_progress`, `complete` or `failed`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Todo => "todo",
            Self::InProgress => "in_progress",
            Self::Complete => "complete",
            Self::Failed => "failed",
        }
    }

    /// The icon `--list-tasks` and `--status` show.
    pub(crate) fn icon(self) -> &'static str {
        match self {
            Self::Todo => "⏸️",
            Self::InProgress => "🔄",
            Self::Complete => "✅",
            Self::Failed => "❌",
        }
    }
}

/// An indented checkbox line under a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Subtask {
    pub(crate) status: TaskStatus,
    pub(crate) text: String,
}

/// Properties ralph understands (others are kept untouched).
pub(crate) const ID: &str = "id";
pub(crate) const BLOCKED_BY: &str = "blocked_by";
pub(crate) const VERIFY: &str = "verify";
pub(crate) const MAX_ATTEMPTS: &str = "max_attempts";
/// The agent for this task (`cli`, as roadmaps write it, is read too).
pub(crate) const AGENT: &str = "agent";
pub(crate) const MODEL: &str = "model";
/// Iterations this task may take.
pub(crate) const MAX_ITERATIONS: &str = "max_iterations";
/// The task's completion promise (`completion_promise`, as roadmaps write it, is read too).
pub(crate) const PROMISE: &str = "promise";
/// Time limit of each iteration on this task (a bare number is minutes, as roadmaps write it).
pub(crate) const TIMEOUT: &str = "timeout";
/// What "done" means, shown to the agent.
pub(crate) const SUCCESS: &str = "success";
/// `ralph: false`: one attempt, no loop.
pub(crate) const RALPH: &str = "ralph";
/// Paths (globs, comma-separated) the agent may read but not change in this task, besides the
/// run's `--protect`.
pub(crate) const PROTECT: &str = "protect";
/// Protected paths (globs, comma-separated) this task's work may change.
pub(crate) const MAY_CHANGE: &str = "may_change";
/// What this task's work touches (globs, comma-separated): two tasks whose `touches` overlap
/// never run at the same time.
pub(crate) const TOUCHES: &str = "touches";
/// The memory this task's agent may need (`2G`), for `--parallel auto`.
pub(crate) const MEMORY: &str = "memory";

/// A top-level task with its subtasks and properties.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Task {
    /// 1-based position among the top-level tasks.
    pub(crate) number: usize,
    /// 0-based line index in the file.
    pub(crate) line: usize,
    pub(crate) status: TaskStatus,
    pub(crate) text: String,
    pub(crate) subtasks: Vec<Subtask>,
    /// `- key: value` lines under the task, in file order.
    pub(crate) properties: Vec<(String, String)>,
}

/// The parsed task file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TaskList {
    pub(crate) tasks: Vec<Task>,
}

impl Task {
    /// The first value of a property.
    pub(crate) fn property(&self, key: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// The first value of the first of `keys` the task has (a property and its roadmap alias).
    fn either(&self, keys: &[&str]) -> Option<&str> {
        keys.iter().find_map(|key| self.property(key))
    }

    /// The task's id: its `id` property, else a `**task-001**:` prefix of its description.
    pub(crate) fn id(&self) -> Option<&str> {
        self.property(ID).or_else(|| {
            let rest = self.text.strip_prefix("**")?;
            let (id, _) = rest.split_once("**:")?;
            let id = id.trim();
            (!id.is_empty() && !id.contains(char::is_whitespace)).then_some(id)
        })
    }

    /// What the task is, without a roadmap's `**id**:` prefix (the id is the task's `id`).
    pub(crate) fn description(&self) -> &str {
        (self.text.strip_prefix("**"))
            .and_then(|rest| rest.split_once("**:"))
            .filter(|(id, _)| !id.trim().is_empty() && !id.trim().contains(char::is_whitespace))
            .map_or(&self.text, |(_, rest)| rest.trim_start())
    }

    /// The task's identity: its id, else its text.
    pub(crate) fn key(&self) -> &str {
        self.id().unwrap_or(&self.text)
    }

    /// The agent this task runs with (`agent`, or a roadmap's `cli`).
    pub(crate) fn agent(&self) -> Option<&str> {
        self.either(&[AGENT, "cli"])
    }

    pub(crate) fn model(&self) -> Option<&str> {
        self.property(MODEL)
    }

    /// The task's completion promise (`promise`, or a roadmap's `completion_promise`).
    pub(crate) fn promise(&self) -> Option<&str> {
        self.either(&[PROMISE, "completion_promise"])
    }

    /// What "done" means for this task (acceptance criteria).
    pub(crate) fn success(&self) -> Option<&str> {
        self.property(SUCCESS)
    }

    /// The time limit of each iteration: `30s`, `60min`, `1h`, or a bare number of minutes.
    pub(crate) fn timeout(&self) -> Option<std::time::Duration> {
        let text = self.property(TIMEOUT)?.trim();
        match text.parse::<u64>() {
            Ok(minutes) => Some(std::time::Duration::from_secs(minutes.saturating_mul(60))),
            Err(_) => crate::model::parse_duration(text).ok(),
        }
    }

    /// How many iterations this task may take: the least of `max_attempts`, `max_iterations`
    /// and, for `ralph: false`, one.
    pub(crate) fn attempt_limit(&self) -> Option<u32> {
        let single = self
            .property(RALPH)
            .is_some_and(|value| value.eq_ignore_ascii_case("false"))
            .then_some(1);
        let max_iterations = self
            .property(MAX_ITERATIONS)
            .and_then(|value| value.parse().ok())
            .filter(|n| *n > 0);
        [self.max_attempts(), max_iterations, single]
            .into_iter()
            .flatten()
            .min()
    }

    /// The ids this task waits for.
    pub(crate) fn blocked_by(&self) -> Vec<&str> {
        self.properties
            .iter()
            .filter(|(k, _)| k == BLOCKED_BY)
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .collect()
    }

    /// `max_attempts`, when it is a positive number.
    pub(crate) fn max_attempts(&self) -> Option<u32> {
        self.property(MAX_ATTEMPTS)?.parse().ok().filter(|n| *n > 0)
    }
}

impl TaskList {
    /// Parses a task file; never fails.
    pub(crate) fn parse(content: &str) -> Self {
        let lines: Vec<&str> = content.lines().collect();
        let mut tasks: Vec<Task> = Vec::new();
        let mut index = 0;
        while index < lines.len() {
            let Some((status, text)) = checkbox(lines[index]) else {
                index += 1;
                continue;
            };
            let end = block_end(&lines, index);
            let mut task = Task {
                number: tasks.len() + 1,
                line: index,
                status: TaskStatus::from_char(status),
                text: text.to_owned(),
                subtasks: Vec::new(),
                properties: Vec::new(),
            };
            for line in &lines[index + 1..end] {
                let indented = line.trim_start();
                if let Some((status, text)) = checkbox(indented) {
                    task.subtasks.push(Subtask {
                        status: TaskStatus::from_char(status),
                        text: text.to_owned(),
                    });
                } else if let Some((key, value)) = property(indented) {
                    task.properties.push((key.to_owned(), value.to_owned()));
                }
            }
            tasks.push(task);
            index = end;
        }
        Self { tasks }
    }

    /// The task whose id is `id`.
    pub(crate) fn by_id(&self, id: &str) -> Option<&Task> {
        self.tasks.iter().find(|task| task.id() == Some(id))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The first task in progress.
    pub(crate) fn current(&self) -> Option<&Task> {
        self.tasks
            .iter()
            .find(|task| task.status == TaskStatus::InProgress)
    }

    /// The first task still to do whose blockers are all complete.
    pub(crate) fn next(&self) -> Option<&Task> {
        self.tasks
            .iter()
            .find(|task| task.status == TaskStatus::Todo && self.blockers(task).is_empty())
    }

    /// The task to work on: the one in progress, else the next ready one.
    pub(crate) fn focus(&self) -> Option<&Task> {
        self.current().or_else(|| self.next())
    }

    /// Why a task cannot start yet: its blockers that are not complete, described
    /// (`db`, `db (failed)`, `cfg (unknown id)`). Empty when it can start.
    pub(crate) fn blockers(&self, task: &Task) -> Vec<String> {
        task.blocked_by()
            .into_iter()
            .filter_map(
                |id| match self.tasks.iter().find(|other| other.id() == Some(id)) {
                    Some(other) if other.status == TaskStatus::Complete => None,
                    Some(other) if other.status == TaskStatus::Failed => {
                        Some(format!("{id} (failed)"))
                    }
                    Some(_) => Some(id.to_owned()),
                    None => Some(format!("{id} (unknown id)")),
                },
            )
            .collect()
    }

    /// True when there is at least one task and every top-level task is complete.
    pub(crate) fn all_complete(&self) -> bool {
        !self.tasks.is_empty()
            && self
                .tasks
                .iter()
                .all(|task| task.status == TaskStatus::Complete)
    }

    /// Top-level tasks that are not complete.
    pub(crate) fn open(&self) -> impl Iterator<Item = &Task> {
        self.tasks
            .iter()
            .filter(|task| task.status != TaskStatus::Complete)
    }

    /// How many top-level tasks have `status`.
    pub(crate) fn count(&self, status: TaskStatus) -> usize {
        self.tasks
            .iter()
            .filter(|task| task.status == status)
            .count()
    }

    /// How many open tasks could still be done: none of their blockers, nor the blockers'
    /// blockers, failed or is missing from the list.
    pub(crate) fn left_to_run(&self) -> usize {
        let open = |task: &Task| task.status.is_to_do();
        // Stuck: failed, or waiting (at any depth) on a failed or unknown task. Grown until
        // nothing changes; a cycle of open tasks is never stuck by this rule (nor runnable,
        // but that is the plan's fault, named where the plan is checked).
        let mut stuck: Vec<bool> = (self.tasks.iter())
            .map(|task| task.status == TaskStatus::Failed)
            .collect();
        let index = |id: &str| self.tasks.iter().position(|task| task.id() == Some(id));
        loop {
            let mut changed = false;
            for (at, task) in self.tasks.iter().enumerate() {
                if stuck[at] || !open(task) {
                    continue;
                }
                let blocked = task
                    .blocked_by()
                    .into_iter()
                    .any(|id| index(id).is_none_or(|blocker| stuck[blocker]));
                if blocked {
                    stuck[at] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        (self.tasks.iter().zip(stuck))
            .filter(|(task, stuck)| open(task) && !stuck)
            .count()
    }
}

/// The end (exclusive line index) of the block of the task on line `task_line`: the indented
/// lines below it, blank lines between them included, up to the next line at column 0 that is
/// not blank. Blank lines after the last indented line are not part of the block. The parser
/// and every edit use this one definition.
pub(super) fn block_end<L: AsRef<[u8]>>(lines: &[L], task_line: usize) -> usize {
    let mut end = task_line + 1;
    for (index, line) in lines.iter().enumerate().skip(task_line + 1) {
        let line = line.as_ref();
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if !line.starts_with(b" ") && !line.starts_with(b"\t") {
            break;
        }
        end = index + 1;
    }
    end
}

/// The lines of `task`'s block in `content`, the text it was parsed from: its line, then the
/// indented lines under it (subtasks, properties, notes).
pub(crate) fn block_text(content: &str, task: &Task) -> String {
    let lines: Vec<&str> = content.lines().collect();
    let end = block_end(&lines, task.line).min(lines.len());
    lines
        .get(task.line..end)
        .map(|block| block.join("\n"))
        .unwrap_or_default()
}

/// The branch a task with id `id` is worked on in its own worktree (`--parallel`, `--worker`).
pub(crate) fn branch_of(id: &str) -> String {
    format!("ralph/{id}")
}

/// A stable, filesystem- and ref-safe id for every task, in file order: its own id when that is
/// safe, else one derived from it or from the description (`Write the parser` → `write-the-parser`),
/// made unique with `-2`, `-3`…
pub(crate) fn task_ids(list: &TaskList) -> Vec<String> {
    let mut ids: Vec<String> = Vec::with_capacity(list.tasks.len());
    // The ids given so far, looked up in constant time: a list of thousands of tasks.
    let mut taken = std::collections::HashSet::with_capacity(list.tasks.len());
    for task in &list.tasks {
        let base = match task.id() {
            Some(id) if is_ref_safe(id) => id.to_owned(),
            Some(id) => slug(id),
            None => slug(task.text.trim_start_matches("**")),
        };
        let mut id = base.clone();
        let mut n = 2;
        while taken.contains(&id) {
            id = format!("{base}-{n}");
            n += 1;
        }
        taken.insert(id.clone());
        ids.push(id);
    }
    ids
}

/// What a safe id is made of, for messages.
pub(crate) const ID_RULE: &str = "letters (of any script), digits, '-', '_' or '.', at most 60 of them, not starting with '-' or '.', not ending with '.' or '.lock', without '..'";

/// Whether `id` can name a branch and a directory as it is (see [`ID_RULE`]).
pub(crate) fn is_ref_safe(id: &str) -> bool {
    !id.is_empty()
        && id.chars().count() <= 60
        && !id.starts_with(['-', '.'])
        && !id.ends_with(['.', '/'])
        && !id.contains("..")
        && !id.ends_with(".lock")
        && id
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The id ralph would make of `text` (see [`slug`]), for a message suggesting one.
pub(crate) fn id_from(text: &str) -> String {
    slug(text)
}

/// An id made from text: its letters and digits (of any script) in lower case, every run of
/// other characters one dash, at most 40 characters (`Write the parser!` → `write-the-parser`,
/// `实现用户认证` → `实现用户认证`); `task` when nothing is left.
pub(super) fn slug(text: &str) -> String {
    let mut slug = String::new();
    let mut length = 0;
    for c in text.chars() {
        if c.is_alphanumeric() {
            for lower in c.to_lowercase() {
                slug.push(lower);
                length += 1;
            }
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
            length += 1;
        }
        if length >= 40 {
            break;
        }
    }
    let slug = slug.trim_end_matches('-');
    if slug.is_empty() {
        "task".to_owned()
    } else {
        slug.to_owned()
    }
}

/// `- [c] text` → (c, text); the text must not be empty.
fn checkbox(line: &str) -> Option<(char, &str)> {
    let rest = line.strip_prefix("- [")?;
    let mut chars = rest.chars();
    let status = chars.next()?;
    let text = chars.as_str().strip_prefix(']')?.trim();
    (!text.is_empty()).then_some((status, text))
}

/// `- key: value` → (key, value), with `key` an identifier.
pub(super) fn property(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.strip_prefix("- ")?.split_once(':')?;
    is_property_key(key).then(|| (key, value.trim()))
}

/// Whether `key` can be a property's key: an identifier (`max_iterations`).
pub(super) fn is_property_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The content of a task file ralph creates: the heading and a one-line hint.
pub(crate) fn new_file_content() -> String {
    format!(
        "{HEADING}\n\nAdd tasks below, one checkbox line each, or run: ralph --add-task \"description\"\n"
    )
}

/// Why a task edit was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum EditError {
    /// The description is empty or spans several lines.
    BadDescription(&'static str),
    /// The task number is outside `1..=count`.
    OutOfRange { number: usize, count: usize },
}

impl std::fmt::Display for EditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BadDescription(why) => f.write_str(why),
            Self::OutOfRange { count: 0, number } => {
                write!(f, "task {number} does not exist: the task list is empty")
            }
            Self::OutOfRange { number, count } => {
                write!(f, "task {number} is out of range (1-{count})")
            }
        }
    }
}

impl std::error::Error for EditError {}

/// Checks a task description given on the command line.
pub(crate) fn validate_description(description: &str) -> Result<&str, EditError> {
    let description = description.trim();
    if description.is_empty() {
        return Err(EditError::BadDescription("the task description is empty"));
    }
    if description.contains(['\n', '\r']) {
        return Err(EditError::BadDescription(
            "the task description contains a line break; give each task on one line",
        ));
    }
    Ok(description)
}

/// The file's bytes ready for tasks to be appended: a heading for a new (or blank) file, and a
/// final line break.
pub(crate) fn appendable(content: Option<&[u8]>) -> Vec<u8> {
    let mut bytes = match content {
        Some(content) if !content.iter().all(u8::is_ascii_whitespace) => content.to_vec(),
        _ => format!("{HEADING}\n\n").into_bytes(),
    };
    if !bytes.ends_with(b"\n") {
        bytes.push(b'\n');
    }
    bytes
}

/// Appends `- [ ] description` (and property lines) to the file's bytes, touching nothing else.
pub(crate) fn add_task(
    content: Option<&[u8]>,
    description: &str,
    properties: &[(&str, &str)],
) -> Vec<u8> {
    let mut bytes = appendable(content);
    bytes.extend_from_slice(format!("- [ ] {description}\n").as_bytes());
    for (key, value) in properties {
        bytes.extend_from_slice(format!("  - {key}: {value}\n").as_bytes());
    }
    bytes
}

/// The file's lines (each with its line break) and its parsed tasks. Parsing reads the bytes
/// lossily; the lines stay the bytes as they are, so edits keep every other line byte for byte
/// whatever its encoding.
fn lines_and_tasks(content: &[u8]) -> (Vec<&[u8]>, TaskList) {
    let list = TaskList::parse(&String::from_utf8_lossy(content));
    (content.split_inclusive(|&b| b == b'\n').collect(), list)
}

/// Removes task `number` (1-based) and its block, touching nothing else.
pub(crate) fn remove_task(content: &[u8], number: usize) -> Result<Vec<u8>, EditError> {
    let (lines, list) = lines_and_tasks(content);
    let count = list.tasks.len();
    let task = number
        .checked_sub(1)
        .and_then(|index| list.tasks.get(index))
        .ok_or(EditError::OutOfRange { number, count })?;
    let end = block_end(&lines, task.line);
    let mut kept = Vec::with_capacity(content.len());
    for (index, line) in lines.iter().enumerate() {
        if index < task.line || index >= end {
            kept.extend_from_slice(line);
        }
    }
    Ok(kept)
}

/// Rewrites the status character of task `number`'s line (and appends a `note` line at the end
/// of its block), touching nothing else.
pub(crate) fn set_status(
    content: &[u8],
    number: usize,
    status: TaskStatus,
    note: Option<&str>,
) -> Option<Vec<u8>> {
    let (lines, list) = lines_and_tasks(content);
    let task = list.tasks.get(number.checked_sub(1)?)?;
    let c = match status {
        TaskStatus::Todo => ' ',
        TaskStatus::InProgress => '/',
        TaskStatus::Complete => 'x',
        TaskStatus::Failed => '!',
    };
    let end = block_end(&lines, task.line);
    let mut out = Vec::with_capacity(content.len() + 80);
    for (index, line) in lines.iter().enumerate() {
        if index == task.line {
            // The parser matched `- [<one character>]`: replace what stands between the brackets.
            let close = line.iter().skip(3).position(|&b| b == b']')? + 3;
            out.extend_from_slice(b"- [");
            out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            out.extend_from_slice(&line[close..]);
        } else {
            out.extend_from_slice(line);
        }
        if index + 1 == end
            && let Some(note) = note
        {
            if !out.ends_with(b"\n") {
                out.push(b'\n');
            }
            out.extend_from_slice(format!("  - note: {note}\n").as_bytes());
        }
    }
    Some(out)
}

/// Edits the task file under its lock: `change` gets the file's current bytes (`None` when it
/// does not exist), read inside the lock, and returns the new bytes (`None`: leave the file as
/// it is) and a value for the caller. Every change ralph makes to the task file goes through
/// here, so two edits (two `--add-task`, or one and the loop's own marks) never lose each other.
pub(crate) fn edit<T>(
    dir: &super::RalphDir,
    change: impl FnOnce(Option<&[u8]>) -> (Option<Vec<u8>>, T),
) -> anyhow::Result<T> {
    let _lock = super::lock::exclusive(dir, super::TASKS_LOCK_FILE)?;
    let path = dir.tasks();
    let current = super::read_raw(&path)?;
    let (updated, value) = change(current.as_deref());
    if let Some(updated) = updated
        && current.as_deref() != Some(updated.as_slice())
    {
        super::write_atomic_shared(&path, &updated)?;
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# Ralph Tasks\n\nSome notes here.\n\n- [x] Set up\n  - [x] cargo init\n    deeper note\n- [/] Build API\n  - [ ] routes\n  - id: api\n- [?] Odd status\n- [ ] Write docs\n\nTrailing note.\n";

    #[test]
    fn parses_tasks_subtasks_properties_and_odd_statuses() {
        let list = TaskList::parse(SAMPLE);
        assert_eq!(list.tasks.len(), 4);
        assert_eq!(list.tasks[0].status, TaskStatus::Complete);
        assert_eq!(list.tasks[0].subtasks.len(), 1);
        assert_eq!(
            list.tasks[1].properties,
            vec![("id".to_owned(), "api".to_owned())]
        );
        assert_eq!(
            list.tasks[2].status,
            TaskStatus::Todo,
            "malformed status counts as todo"
        );
        assert_eq!(list.current().unwrap().text, "Build API");
        assert_eq!(list.next().unwrap().text, "Odd status");
        assert!(!list.all_complete());
        assert!(TaskList::parse("- [X] a\n- [x] b\n").all_complete());
        assert!(!TaskList::parse("no tasks\n").all_complete());
    }

    #[test]
    fn add_task_appends_and_preserves_everything_else() {
        let added = add_task(Some(SAMPLE.as_bytes()), "Ship it", &[]);
        assert_eq!(added, format!("{SAMPLE}- [ ] Ship it\n").into_bytes());
        assert_eq!(
            add_task(None, "First", &[]),
            b"# Ralph Tasks\n\n- [ ] First\n"
        );
        assert_eq!(
            add_task(Some(b"x"), "y", &[("id", "y1")]),
            b"x\n- [ ] y\n  - id: y1\n"
        );
    }

    #[test]
    fn remove_task_drops_the_task_and_its_indented_lines_only() {
        let removed = String::from_utf8(remove_task(SAMPLE.as_bytes(), 1).unwrap()).unwrap();
        assert_eq!(
            removed,
            "# Ralph Tasks\n\nSome notes here.\n\n- [/] Build API\n  - [ ] routes\n  - id: api\n- [?] Odd status\n- [ ] Write docs\n\nTrailing note.\n"
        );
        let removed = String::from_utf8(remove_task(SAMPLE.as_bytes(), 4).unwrap()).unwrap();
        assert!(removed.ends_with("- [?] Odd status\n\nTrailing note.\n"));
        assert_eq!(
            remove_task(SAMPLE.as_bytes(), 9),
            Err(EditError::OutOfRange {
                number: 9,
                count: 4
            })
        );
        assert_eq!(
            EditError::OutOfRange {
                number: 9,
                count: 4
            }
            .to_string(),
            "task 9 is out of range (1-4)"
        );
        assert!(remove_task(SAMPLE.as_bytes(), 0).is_err());
    }

    #[test]
    fn dependencies_choose_the_next_ready_task() {
        let content = "- [x] schema\n  - id: db\n- [ ] api\n  - blocked_by: db, cfg\n- [ ] cfg\n  - id: cfg\n- [ ] docs\n";
        let list = TaskList::parse(content);
        assert_eq!(list.blockers(&list.tasks[1]), ["cfg"]);
        assert_eq!(list.next().unwrap().text, "cfg", "api waits for cfg");
        let cycle = TaskList::parse(
            "- [ ] a\n  - id: a\n  - blocked_by: b\n- [ ] b\n  - id: b\n  - blocked_by: a\n",
        );
        assert!(cycle.focus().is_none());
        let failed = TaskList::parse("- [!] a\n  - id: a\n- [ ] b\n  - blocked_by: a, zz\n");
        assert_eq!(
            failed.blockers(&failed.tasks[1]),
            ["a (failed)", "zz (unknown id)"]
        );
        assert_eq!(failed.tasks[1].key(), "b");
        assert_eq!(
            TaskList::parse("- [ ] t\n  - max_attempts: 3\n").tasks[0].max_attempts(),
            Some(3)
        );
    }

    #[test]
    fn set_status_rewrites_one_character_and_can_add_a_note() {
        let changed =
            String::from_utf8(set_status(SAMPLE.as_bytes(), 2, TaskStatus::Failed, None).unwrap())
                .unwrap();
        assert_eq!(
            changed,
            SAMPLE.replace("- [/] Build API", "- [!] Build API")
        );
        let noted = String::from_utf8(
            set_status(SAMPLE.as_bytes(), 2, TaskStatus::Failed, Some("gave up")).unwrap(),
        )
        .unwrap();
        assert!(
            noted.contains(
                "- [!] Build API\n  - [ ] routes\n  - id: api\n  - note: gave up\n- [?] Odd"
            ),
            "{noted}"
        );
    }

    #[test]
    fn a_task_block_spans_blank_lines_between_its_indented_lines() {
        let content = "- [x] a\n- [ ] b\n  - [ ] b.1\n\n  - [ ] b.2\n- [ ] c\n";
        let list = TaskList::parse(content);
        assert_eq!(list.tasks[1].subtasks.len(), 2);
        assert!(list.tasks[0].subtasks.is_empty());
        let removed = remove_task(content.as_bytes(), 2).unwrap();
        assert_eq!(removed, b"- [x] a\n- [ ] c\n");
        // A line at column 0 ends the block: indented lines after it belong to no task.
        let list = TaskList::parse("- [ ] a\nNotes\n  - [ ] stray\n");
        assert!(list.tasks[0].subtasks.is_empty());
    }

    #[test]
    fn edits_keep_other_bytes_whatever_the_encoding() {
        let content = b"# caf\xe9\n- [ ] a \xff\n  - note: \xe9t\xe9\n- [ ] b\n";
        let marked = set_status(content, 1, TaskStatus::Complete, Some("ok")).unwrap();
        assert_eq!(
            marked,
            b"# caf\xe9\n- [x] a \xff\n  - note: \xe9t\xe9\n  - note: ok\n- [ ] b\n"
        );
        let removed = remove_task(content, 2).unwrap();
        assert_eq!(removed, b"# caf\xe9\n- [ ] a \xff\n  - note: \xe9t\xe9\n");
        let added = add_task(Some(content), "c", &[]);
        assert!(added.starts_with(content));
    }

    /// Seed 004's roadmap examples, as written there.
    const ROADMAP: &str = "## Tasks\n\n### Phase 1: Implementation\n\n\
- [ ] **task-001**: Implement user authentication with tests\n  - ralph: true\n  - max_iterations: 30\n  - completion_promise: AUTH_FEATURE_COMPLETE\n  - timeout: 60min\n  - success: All tests pass, coverage > 80%\n  - cli: codex\n\
- [ ] **fix-001**: Fix race condition in user service\n  - ralph: true\n  - max_iterations: 15\n  - completion_promise: RACE_CONDITION_FIXED\n  - timeout: 30\n  - success: Concurrent user creation no longer causes duplicates, regression test added\n  - cli: claude\n\
- [ ] **doc-001**: Write the changelog\n  - ralph: false\n";

    #[test]
    fn a_roadmap_reads_as_a_task_file() {
        let list = TaskList::parse(ROADMAP);
        assert_eq!(list.tasks.len(), 3);
        let auth = &list.tasks[0];
        assert_eq!(auth.id(), Some("task-001"));
        assert_eq!(auth.key(), "task-001");
        assert_eq!(auth.agent(), Some("codex"));
        assert_eq!(auth.promise(), Some("AUTH_FEATURE_COMPLETE"));
        assert_eq!(auth.timeout(), Some(std::time::Duration::from_secs(3600)));
        assert_eq!(auth.attempt_limit(), Some(30));
        assert_eq!(auth.success(), Some("All tests pass, coverage > 80%"));
        let fix = &list.tasks[1];
        assert_eq!(
            fix.timeout(),
            Some(std::time::Duration::from_secs(1800)),
            "minutes"
        );
        assert_eq!(fix.agent(), Some("claude"));
        assert_eq!(
            list.tasks[2].attempt_limit(),
            Some(1),
            "ralph: false is one attempt"
        );
        assert_eq!(list.by_id("fix-001").unwrap().number, 2);
        let blocked = TaskList::parse("- [ ] **a-1**: first\n- [ ] second\n  - blocked_by: a-1\n");
        assert_eq!(blocked.blockers(&blocked.tasks[1]), ["a-1"]);
    }

    #[test]
    fn every_task_gets_a_stable_safe_unique_id() {
        let list = TaskList::parse(
            "- [ ] Write the parser!\n- [ ] Write the parser\n- [ ] **api**: Build it\n- [ ] x\n  - id: has space\n- [ ] ---\n",
        );
        assert_eq!(
            task_ids(&list),
            [
                "write-the-parser",
                "write-the-parser-2",
                "api",
                "has-space",
                "task"
            ]
        );
        // An id a suffix already gave is suffixed in its turn.
        let list = TaskList::parse("- [ ] A\n- [ ] A\n- [ ] A 2\n");
        assert_eq!(task_ids(&list), ["a", "a-2", "a-2-2"]);
    }

    #[test]
    fn ids_from_text_keep_letters_of_every_script() {
        let list = TaskList::parse(
            "- [ ] 实现用户认证\n- [ ] 编写文档\n- [ ] Ünïcödé façade — naïve café\n- [ ] Привет мир\n",
        );
        assert_eq!(
            task_ids(&list),
            [
                "实现用户认证",
                "编写文档",
                "ünïcödé-façade-naïve-café",
                "привет-мир"
            ]
        );
        assert!(is_ref_safe("实现"));
        assert!(!is_ref_safe(".integrate"));
        assert!(is_ref_safe(&"认".repeat(60)));
        assert!(!is_ref_safe(&"认".repeat(61)));
        assert_eq!(slug(&"长".repeat(50)).chars().count(), 40);
    }

    #[test]
    fn tasks_waiting_on_a_failed_task_at_any_depth_are_not_left_to_run() {
        let list = TaskList::parse(
            "- [!] a\n  - id: a\n- [ ] b\n  - id: b\n  - blocked_by: a\n- [ ] c\n  - id: c\n  - blocked_by: b\n- [/] d\n  - id: d\n- [ ] e\n  - blocked_by: zz\n- [x] f\n- [ ] g\n  - blocked_by: d\n",
        );
        assert_eq!(list.left_to_run(), 2, "d, and g behind it");
        assert_eq!(TaskList::parse("- [x] a\n- [!] b\n").left_to_run(), 0);
    }

    #[test]
    fn descriptions_must_be_one_non_empty_line() {
        assert!(validate_description("  ").is_err());
        assert!(validate_description("a\nb").is_err());
        assert_eq!(validate_description(" ok "), Ok("ok"));
    }
}
