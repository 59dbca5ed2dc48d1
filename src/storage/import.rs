//! `ralph --import FILE`: task lists written for other loops, turned into ralph's task file.
//!
//! Four formats, recognised by their content (not their name):
//! - ralph's own `--export json` (the `--list-tasks --json` report), every property kept;
//! - a `prd.json`: an object with `userStories` (`id`, `title`, `description`,
//!   `acceptanceCriteria`, `priority`, `passes`, …);
//! - a `tasks.json`: TodoItems (`content`, `status`, `activeForm`, `id`, `blockedBy`), as a list
//!   or under `tasks` / `todos`;
//! - a markdown task list (a roadmap): `- [ ]` lines with their property lines, which ralph
//!   reads as they are.
//!
//! Conversion is pure: it gives task blocks (markdown) that [`merge()`] appends after the existing
//! tasks, leaving out exact duplicates and giving a task whose id is taken a new one.

use serde_json::{Map, Value};

use super::tasks::{self, TaskList};

mod merge;

pub(crate) use merge::merge;

/// A task list read from another tool, as ralph task blocks.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Imported {
    /// `ralph`, `prd.json`, `tasks.json` or `markdown`.
    pub(crate) format: &'static str,
    /// One block per task: `- [ ] text` and its property lines, each line ending in `\n`.
    pub(crate) blocks: Vec<String>,
    /// A comment line that keeps what the file said about the whole list (a prd's project…).
    pub(crate) note: Option<String>,
}

/// What the formats expect, for error messages.
const EXPECTED: &str = "a prd.json (an object with \"userStories\"), a tasks.json (a list of {\"content\", \"status\"}), ralph's --export json or a markdown task list (\"- [ ] …\" lines)";

/// Converts a file's text; `Err` is one line saying what is wrong and what was expected.
pub(crate) fn convert(text: &str) -> Result<Imported, String> {
    let text = text.trim_start_matches('\u{feff}');
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(format!("it is empty; expected {EXPECTED}"));
    }
    let blocks = markdown_blocks(text);
    if trimmed.starts_with(['{', '[']) {
        match serde_json::from_str::<Value>(text) {
            Ok(value) => return from_json(&value),
            // Markdown may start with `[` (a badge, a link): its tasks count.
            Err(_) if !blocks.is_empty() => {}
            Err(err) => {
                return Err(format!(
                    "it is not valid JSON (line {}, column {}: {}); expected {EXPECTED}",
                    err.line(),
                    err.column(),
                    reason(&err)
                ));
            }
        }
    }
    if blocks.is_empty() {
        return Err(format!("it has no task in it; expected {EXPECTED}"));
    }
    Ok(Imported {
        format: "markdown",
        blocks,
        note: None,
    })
}

/// serde_json's message without its own `at line … column …` (said already).
fn reason(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

fn from_json(value: &Value) -> Result<Imported, String> {
    if let Some(stories) = value.get("userStories") {
        let stories = stories
            .as_array()
            .ok_or("\"userStories\" is not a list; expected a prd.json's list of user stories")?;
        return prd(value, stories);
    }
    let items = match value {
        Value::Array(items) => Some(items),
        Value::Object(map) => ["tasks", "todos"]
            .iter()
            .find_map(|key| map.get(*key).and_then(Value::as_array)),
        _ => None,
    };
    let all_have = |items: &[Value], key: &str| items.iter().all(|item| item.get(key).is_some());
    match items {
        Some(items) if all_have(items, "content") => todo_items(items),
        Some(items) if all_have(items, "text") => exported(items),
        _ => Err(format!(
            "it is JSON but none of the formats ralph imports; expected {EXPECTED}"
        )),
    }
}

/// A prd.json: stories in priority order (stable), `passes` → `[x]`, acceptance criteria →
/// `success`, every other field a property.
fn prd(value: &Value, stories: &[Value]) -> Result<Imported, String> {
    let mut ordered: Vec<(usize, &Map<String, Value>)> = Vec::with_capacity(stories.len());
    for (at, story) in stories.iter().enumerate() {
        let story = story
            .as_object()
            .ok_or_else(|| format!("user story {} is not an object", at + 1))?;
        ordered.push((at, story));
    }
    let priority = |story: &Map<String, Value>| story.get("priority").and_then(Value::as_f64);
    ordered.sort_by(|(a_at, a), (b_at, b)| match (priority(a), priority(b)) {
        (Some(x), Some(y)) => x.total_cmp(&y).then(a_at.cmp(b_at)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a_at.cmp(b_at),
    });
    let mut blocks = Vec::with_capacity(ordered.len());
    for (at, story) in ordered {
        let title_key = title_key(story);
        let title = (story.get(title_key).and_then(Value::as_str))
            .map(one_line)
            .filter(|title| !title.is_empty())
            .ok_or_else(|| format!("user story {} has no title", at + 1))?;
        let done = story.get("passes").and_then(Value::as_bool) == Some(true);
        let mut properties = Vec::new();
        if let Some(id) = story.get("id").and_then(text_of) {
            properties.push((tasks::ID.to_owned(), task_id(&id)));
        }
        if let Some(criteria) = story.get("acceptanceCriteria") {
            let success = match criteria {
                Value::Array(items) => items
                    .iter()
                    .filter_map(text_of)
                    .collect::<Vec<_>>()
                    .join("; "),
                other => text_of(other).unwrap_or_default(),
            };
            if !success.trim().is_empty() {
                properties.push(("success".to_owned(), one_line(&success)));
            }
        }
        let known = ["id", "title", "passes", "acceptanceCriteria"];
        properties.extend(other_fields(story, &known, title_key));
        blocks.push(block(if done { 'x' } else { ' ' }, &title, &properties));
    }
    let mut about = Vec::new();
    if let Some(map) = value.as_object() {
        for (key, field) in map.iter().filter(|(key, _)| *key != "userStories") {
            if let Some(text) = text_of(field) {
                about.push(format!("{}: {}", snake(key), one_line(&text)));
            }
        }
    }
    Ok(Imported {
        format: "prd.json",
        blocks,
        note: (!about.is_empty()).then(|| {
            format!(
                "<!-- From prd.json: {} -->",
                comment_safe(&about.join("; "))
            )
        }),
    })
}

/// Text that cannot end an HTML comment early (no `--` left).
fn comment_safe(text: &str) -> String {
    let mut text = text.to_owned();
    while text.contains("--") {
        text = text.replace("--", "-");
    }
    text
}

/// The field a story's title was taken from (the others stay properties).
fn title_key(story: &Map<String, Value>) -> &'static str {
    ["title", "name", "description"]
        .into_iter()
        .find(|key| story.get(*key).and_then(Value::as_str).is_some())
        .unwrap_or("title")
}

/// TodoItems: `completed` → `[x]`, `in_progress` → `[/]`, `blockedBy` → `blocked_by`.
fn todo_items(items: &[Value]) -> Result<Imported, String> {
    let mut blocks = Vec::with_capacity(items.len());
    for (at, item) in items.iter().enumerate() {
        let item = item
            .as_object()
            .ok_or_else(|| format!("task {} is not an object", at + 1))?;
        let content = item
            .get("content")
            .and_then(Value::as_str)
            .map(one_line)
            .filter(|content| !content.is_empty())
            .ok_or_else(|| format!("task {} has no \"content\"", at + 1))?;
        let status = match item.get("status").and_then(Value::as_str) {
            Some("completed") => 'x',
            Some("in_progress") => '/',
            _ => ' ',
        };
        let mut properties = Vec::new();
        if let Some(id) = item.get("id").and_then(text_of) {
            properties.push((tasks::ID.to_owned(), task_id(&id)));
        }
        if let Some(Value::Array(blockers)) = item.get("blockedBy") {
            let ids: Vec<String> = blockers
                .iter()
                .filter_map(text_of)
                .map(|id| task_id(&id))
                .collect();
            if !ids.is_empty() {
                properties.push((tasks::BLOCKED_BY.to_owned(), ids.join(", ")));
            }
        }
        let known = ["id", "content", "status", "blockedBy"];
        properties.extend(other_fields(item, &known, ""));
        blocks.push(block(status, &content, &properties));
    }
    Ok(Imported {
        format: "tasks.json",
        blocks,
        note: None,
    })
}

/// ralph's own export: `text`, `status`, every property line as it was (`properties`), and the
/// subtasks. An export without `properties` (an older ralph's) gives its `id` and `blocked_by`.
fn exported(items: &[Value]) -> Result<Imported, String> {
    let mut blocks = Vec::with_capacity(items.len());
    for (at, item) in items.iter().enumerate() {
        let item = item
            .as_object()
            .ok_or_else(|| format!("task {} is not an object", at + 1))?;
        let text = (item.get("text").and_then(Value::as_str))
            .map(one_line)
            .filter(|text| !text.is_empty())
            .ok_or_else(|| format!("task {} has no \"text\"", at + 1))?;
        let properties = match item.get("properties").and_then(Value::as_array) {
            Some(lines) => {
                let mut properties: Vec<(String, String)> = lines
                    .iter()
                    .filter_map(|line| {
                        let key = line.get("key").and_then(text_of)?;
                        let value = line.get("value").and_then(text_of).unwrap_or_default();
                        Some((property_key(&key), one_line(&value)))
                    })
                    .collect();
                // An id the task's text gave (a roadmap's `**id**:`, left out of the export's
                // text) comes back as its property.
                if !properties.iter().any(|(key, _)| key == tasks::ID) {
                    properties.splice(
                        0..0,
                        id_and_blockers(item, &text)
                            .into_iter()
                            .filter(|(key, _)| key == tasks::ID),
                    );
                }
                properties
            }
            None => id_and_blockers(item, &text),
        };
        let mut block = block(exported_status(item.get("status")), &text, &properties);
        for subtask in item
            .get("subtasks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(text) = subtask.get("text").and_then(Value::as_str).map(one_line)
                && !text.is_empty()
            {
                let status = exported_status(subtask.get("status"));
                block.push_str(&format!("  - [{status}] {text}\n"));
            }
        }
        blocks.push(block);
    }
    Ok(Imported {
        format: "ralph",
        blocks,
        note: None,
    })
}

/// The box of an exported status (`complete`, `in_progress`, `failed`, else todo).
fn exported_status(status: Option<&Value>) -> char {
    match status.and_then(Value::as_str) {
        Some("complete") => 'x',
        Some("in_progress") => '/',
        Some("failed") => '!',
        _ => ' ',
    }
}

/// An export's `id` (when its text does not give it already) and `blocked_by`, as properties.
fn id_and_blockers(item: &Map<String, Value>, text: &str) -> Vec<(String, String)> {
    let mut properties = Vec::new();
    let from_text = TaskList::parse(&format!("- [ ] {text}\n"))
        .tasks
        .first()
        .and_then(|task| task.id().map(str::to_owned));
    if let Some(id) = item.get("id").and_then(text_of)
        && from_text.as_deref() != Some(id.as_str())
    {
        properties.push((tasks::ID.to_owned(), one_line(&id)));
    }
    let blockers: Vec<String> = (item.get("blocked_by").and_then(Value::as_array))
        .into_iter()
        .flatten()
        .filter_map(text_of)
        .collect();
    if !blockers.is_empty() {
        properties.push((tasks::BLOCKED_BY.to_owned(), blockers.join(", ")));
    }
    properties
}

/// A property key as it was when it is one (`max_iterations`), else made one (`snake`).
fn property_key(key: &str) -> String {
    if tasks::is_property_key(key) {
        key.to_owned()
    } else {
        snake(key)
    }
}

/// Every field not in `known` (nor `also`), as a property: `activeForm` → `active_form: …`.
fn other_fields(map: &Map<String, Value>, known: &[&str], also: &str) -> Vec<(String, String)> {
    map.iter()
        .filter(|(key, _)| !known.contains(&key.as_str()) && key.as_str() != also)
        .filter_map(|(key, value)| {
            let text = match value {
                Value::Null => return None,
                Value::String(text) => text.clone(),
                // A list of words (`["tests/**", "docs/"]`) as a property reads it: comma-separated.
                Value::Array(items) if items.iter().all(Value::is_string) => {
                    let words: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
                    words.join(", ")
                }
                other => other.to_string(),
            };
            Some((snake(key), one_line(&text))).filter(|(_, text)| !text.is_empty())
        })
        .collect()
}

/// A value as one line of text (strings as they are, numbers and booleans written out).
fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// An id ralph can use for a branch and a folder (`#1` → `1`, spaces → dashes).
fn task_id(id: &str) -> String {
    let id = id.trim().trim_start_matches('#');
    if tasks::is_ref_safe(id) {
        id.to_owned()
    } else {
        tasks::slug(id)
    }
}

/// `acceptanceCriteria` → `acceptance_criteria`; anything else a property key cannot hold → `_`.
fn snake(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for (at, c) in key.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if at > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        } else {
            out.push('_');
        }
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) || out.is_empty() {
        out.insert(0, '_');
    }
    out
}

/// Text on one line: line breaks and runs of white space become single spaces.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn block(status: char, text: &str, properties: &[(String, String)]) -> String {
    let mut block = format!("- [{status}] {text}\n");
    for (key, value) in properties {
        block.push_str(&format!("  - {key}: {value}\n"));
    }
    block
}

/// A markdown file's task blocks as they are written (a task line and its indented lines).
fn markdown_blocks(text: &str) -> Vec<String> {
    let list = TaskList::parse(text);
    let lines: Vec<&[u8]> = text.as_bytes().split_inclusive(|&b| b == b'\n').collect();
    list.tasks
        .iter()
        .map(|task| {
            let end = tasks::block_end(&lines, task.line);
            let mut block = String::from_utf8_lossy(&lines[task.line..end].concat()).into_owned();
            if !block.ends_with('\n') {
                block.push('\n');
            }
            block
        })
        .collect()
}

#[cfg(test)]
mod tests;
