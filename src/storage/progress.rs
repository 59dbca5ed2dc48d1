//! `progress.md`: the loop's narrative, one section per iteration, for people and for the agent.
//!
//! Append-only: ralph adds a section after every iteration, and the agent is asked to read it
//! first and to append its own notes. It survives completion (like the history) and is removed by
//! `--reset`. Sections are appended with one `O_APPEND` write, so text the agent added stays.
//! When a task's branch is merged, what the branch added to its log is appended to the base's
//! (see `carry`).

use std::io::Write as _;

use anyhow::Context as _;
use chrono::{DateTime, SecondsFormat, Utc};

use super::RalphDir;

/// The file name.
pub(crate) const PROGRESS_FILE: &str = "progress.md";

/// The first lines of a log ralph creates.
pub(super) const HEADER: &str = "# Ralph Progress Log\n\nralph adds a section after every iteration. Agents: read this first, and add your own notes at the end (what you did, what you learned, what is next).\n";

/// The facts of one iteration.
#[derive(Debug, Default)]
pub(crate) struct Entry<'a> {
    pub(crate) iteration: u32,
    pub(crate) at: Option<DateTime<Utc>>,
    pub(crate) task: Option<&'a str>,
    pub(crate) outcome: String,
    pub(crate) files: &'a [String],
    pub(crate) verification: Vec<String>,
    pub(crate) refusal: Option<&'a str>,
    pub(crate) errors: &'a [String],
}

/// Appends a note the agent left through `ralph_note` (task `task`'s iteration `iteration`).
pub(crate) fn note(
    dir: &RalphDir,
    task: Option<&str>,
    iteration: u32,
    note: &str,
) -> anyhow::Result<()> {
    let at = crate::model::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    let of = task.map_or_else(String::new, |task| format!(" of task {task}"));
    let section = format!(
        "\n## Note from iteration {iteration}{of} — {at}\n\n{}\n",
        note.trim()
    );
    append_section(dir, section)
}

/// Appends an iteration's section, creating the file with its header.
pub(crate) fn append(dir: &RalphDir, entry: &Entry<'_>) -> anyhow::Result<()> {
    let mut text = String::new();
    let at = entry
        .at
        .map(|at| format!(" — {}", at.to_rfc3339_opts(SecondsFormat::Secs, true)))
        .unwrap_or_default();
    text.push_str(&format!("\n## Iteration {}{at}\n\n", entry.iteration));
    if let Some(task) = entry.task {
        text.push_str(&format!("- Task: {task}\n"));
    }
    text.push_str(&format!("- Outcome: {}\n", entry.outcome));
    if entry.files.is_empty() {
        text.push_str("- Files changed: none\n");
    } else {
        const SHOWN: usize = 15;
        let mut files: Vec<String> = entry
            .files
            .iter()
            .take(SHOWN)
            .map(|f| format!("`{f}`"))
            .collect();
        if entry.files.len() > SHOWN {
            files.push(format!("and {} more", entry.files.len() - SHOWN));
        }
        text.push_str(&format!("- Files changed: {}\n", files.join(", ")));
    }
    for line in &entry.verification {
        text.push_str(&format!("- Verification: {line}\n"));
    }
    if let Some(refusal) = entry.refusal {
        text.push_str(&format!("- Completion refused: {refusal}\n"));
    }
    for error in entry.errors.iter().take(5) {
        text.push_str(&format!("- Error: {error}\n"));
    }
    append_section(dir, text)
}

/// Appends `section` with one write, creating the file with its header.
fn append_section(dir: &RalphDir, section: String) -> anyhow::Result<()> {
    dir.ensure()?;
    let path = dir.file(PROGRESS_FILE);
    let text = if path.exists() {
        section
    } else {
        format!("{HEADER}{section}")
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("failed to open `{}`", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("failed to write `{}`", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_appended_after_a_header_and_agent_notes_stay() {
        let tmp = crate::testing::tempdir().unwrap();
        let dir = RalphDir::new(tmp.path());
        let files = vec!["src/a.rs".to_owned()];
        append(
            &dir,
            &Entry {
                iteration: 1,
                outcome: "continued".into(),
                files: &files,
                task: Some("Build"),
                ..Entry::default()
            },
        )
        .unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.file(PROGRESS_FILE))
            .unwrap()
            .write_all(b"\nAgent note.\n")
            .unwrap();
        append(
            &dir,
            &Entry {
                iteration: 2,
                outcome: "completed".into(),
                verification: vec!["`true` passed".into()],
                ..Entry::default()
            },
        )
        .unwrap();
        let text = std::fs::read_to_string(dir.file(PROGRESS_FILE)).unwrap();
        assert!(text.starts_with("# Ralph Progress Log\n"));
        assert!(text.contains(
            "## Iteration 1\n\n- Task: Build\n- Outcome: continued\n- Files changed: `src/a.rs`\n"
        ));
        assert!(text.contains("Agent note.\n\n## Iteration 2\n"));
        assert!(text.contains("- Verification: `true` passed\n"));
    }
}
