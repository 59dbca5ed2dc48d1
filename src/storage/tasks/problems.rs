//! What in a task file ralph reads otherwise than it is written (said line by line, so that a
//! typo never drops a task without a word), and the list with no task in progress.

use super::{
    BLOCKED_BY, ID, ID_RULE, TaskList, TaskStatus, block_end, checkbox, is_ref_safe, property,
    set_status, task_ids,
};

/// `content` with every task marked in progress (`[/]`) marked to do (`[ ]`) again, when any was
/// (no loop works on them any more: a run ended, or its state was reset).
pub(crate) fn with_none_in_progress(content: &[u8]) -> Option<Vec<u8>> {
    let list = TaskList::parse(&String::from_utf8_lossy(content));
    let mut changed = None;
    for task in list
        .tasks
        .iter()
        .filter(|task| task.status == TaskStatus::InProgress)
    {
        let current = changed.as_deref().unwrap_or(content);
        changed = set_status(current, task.number, TaskStatus::Todo, None).or(changed);
    }
    changed
}

/// What in a task file ralph reads otherwise than it is written, one line each (`line N: …`):
/// a line that looks like a task and is not one (skipped), a status ralph does not know (read as
/// to do), an id ralph cannot use as it is or one used twice (the task is known by another), a
/// `blocked_by` that names no task.
pub(crate) fn problems(content: &str) -> Vec<String> {
    let lines: Vec<&str> = content.lines().collect();
    let mut found: Vec<(usize, String)> = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        if checkbox(line).is_none() && looks_like_a_task(line) {
            found.push((
                at + 1,
                format!(
                    "`{}` is not a task line (`- [ ] text`, at the start of the line), so it is skipped",
                    line.trim_end()
                ),
            ));
        }
    }
    let list = TaskList::parse(content);
    for (task, known) in list.tasks.iter().zip(task_ids(&list)) {
        let number = task.line + 1;
        if let Some((status, _)) = checkbox(lines[task.line])
            && !matches!(status, ' ' | '/' | 'x' | 'X' | '!')
        {
            found.push((number, format!(
                "`[{status}]` is no status ralph knows ([ ] to do, [/] in progress, [x] done, [!] failed), so the task is read as to do"
            )));
        }
        let block = &lines[task.line + 1..block_end(&lines, task.line)];
        let at = |key: &str| {
            let offset = block
                .iter()
                .position(|line| property(line.trim_start()).is_some_and(|(k, _)| k == key));
            offset.map_or(number, |offset| number + 1 + offset)
        };
        match task.id() {
            Some(id) if !is_ref_safe(id) => found.push((at(ID), format!(
                "`{id}` cannot be a task id as it is ({ID_RULE}), so ralph knows the task as `{known}`"
            ))),
            Some(id) if id != known => found.push((at(ID), format!(
                "the id `{id}` is another task's already, so ralph knows this one as `{known}`"
            ))),
            _ => {}
        }
        for (key, value) in task.properties.iter().filter(|(key, _)| key == BLOCKED_BY) {
            if value.split(',').all(|id| id.trim().is_empty()) {
                found.push((
                    at(BLOCKED_BY),
                    format!("`{key}: {value}` names no task, so it is ignored"),
                ));
            }
        }
    }
    found.sort_by_key(|(line, _)| *line);
    (found.into_iter())
        .map(|(line, problem)| format!("line {line}: {problem}"))
        .collect()
}

/// A line at the start of the file's lines that a person meant as a task but ralph does not
/// take as one: `-[ ] x`, `* [ ] x`, `- [] x`, `- [ ]` with no text.
fn looks_like_a_task(line: &str) -> bool {
    static NEAR: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"^[-*+]\s*\[[^\]]{0,2}\]").expect("a valid pattern")
    });
    NEAR.is_match(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_name_each_line_ralph_reads_otherwise_than_written() {
        let content = "- [?] weird\n-[ ] nospace\n  - id: a b c\n- [ ] dup\n  - id: one\n- [ ] dup2\n  - id: one\n  - blocked_by: ,,\n* [ ] star\n- [x] fine\n  - id: fine\n";
        assert_eq!(
            problems(content),
            [
                "line 1: `[?]` is no status ralph knows ([ ] to do, [/] in progress, [x] done, [!] failed), so the task is read as to do".to_owned(),
                "line 2: `-[ ] nospace` is not a task line (`- [ ] text`, at the start of the line), so it is skipped".to_owned(),
                "line 7: the id `one` is another task's already, so ralph knows this one as `one-2`".to_owned(),
                "line 8: `blocked_by: ,,` names no task, so it is ignored".to_owned(),
                "line 9: `* [ ] star` is not a task line (`- [ ] text`, at the start of the line), so it is skipped".to_owned(),
            ]
        );
        assert_eq!(
            problems("- [ ] spaced\n  - id: a b c\n"),
            [format!(
                "line 2: `a b c` cannot be a task id as it is ({ID_RULE}), so ralph knows the task as `a-b-c`"
            )]
        );
        assert!(problems("# Tasks\n\n- [ ] a\n  - id: a\n- [x] b\n  - blocked_by: a\n").is_empty());
    }
}
