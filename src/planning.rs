//! Planning: what ralph asks an agent to turn a spec into a task graph, how the plan is found in
//! its answer, and what makes a plan acceptable. Pure: the call itself is `run::planner`'s.
//!
//! A plan is a JSON array of TodoItems (`id`, `content`, `status`, `activeForm`, `blockedBy`),
//! each optionally with the task properties ralph reads (`agent`, `model`, `promise`,
//! `max_iterations`, `timeout`, `verify`, `success`, `protect`, `may_change`: lists become
//! comma-separated). It becomes task blocks the way
//! `--import` turns a `tasks.json` into them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::storage::import;
use crate::storage::tasks::{self, Task, TaskList};

/// Where the planning prompt asks the agent to write its plan (under the working directory).
pub(crate) const PLAN_FILE: &str = ".ralph/plan.json";
/// Where a plan refused twice is kept for the user.
pub(crate) const REJECTED_FILE: &str = "plan-rejected.json";

/// The prompt of the planning call: the user's spec, the schema, and where the answer goes.
pub(crate) fn prompt(spec: &str, done: &[String], problems: Option<&[String]>) -> String {
    let mut text = String::from(
        "# Plan the work\n\nYou are planning, not doing: do not change any file but the plan. \
         Break the spec below into tasks that other agents will carry out, each in its own git \
         worktree, several at once. A task another one needs first names it in `blockedBy`; \
         tasks that do not depend on each other can run side by side, so keep them apart.\n\n",
    );
    text.push_str("## The spec\n\n");
    text.push_str(spec.trim());
    text.push_str("\n\n");
    if !done.is_empty() {
        text.push_str("## Already done (do not plan these again)\n\n");
        for task in done {
            text.push_str(&format!("- {task}\n"));
        }
        text.push('\n');
    }
    text.push_str(
        "## The answer\n\nA JSON array of tasks, and nothing else, in this shape:\n\n```json\n[\n  \
         {\"id\": \"schema\", \"content\": \"Create the database schema\", \"status\": \"pending\", \
         \"activeForm\": \"Creating the database schema\", \"blockedBy\": []},\n  \
         {\"id\": \"api\", \"content\": \"Build the REST endpoints on the schema\", \"status\": \
         \"pending\", \"activeForm\": \"Building the REST endpoints\", \"blockedBy\": [\"schema\"], \
         \"verify\": \"cargo test api\"}\n]\n```\n\n\
         - `id`: short, unique, letters, digits and dashes.\n\
         - `content`: what to do, in one line an agent can act on.\n\
         - `status`: `pending`.\n\
         - `activeForm`: the same as an action in progress.\n\
         - `blockedBy`: the ids of the tasks that must be done first (none: `[]`); no cycles.\n\
         - Optional, per task: `agent`, `model`, `promise`, `max_iterations`, `timeout` (`30m`), \
         `verify` (a shell command that passes when the task is done), `success` (what done \
         means).\n\
         - `protect`: globs of the files that judge this task's work (its tests, the scripts that \
         check it), which its agent may read but not change, e.g. `[\"tests/**\"]`; \
         `may_change`: globs of protected files this task's work must change (a task that writes \
         new tests names them), e.g. `[\"tests/api/**\"]`. Leave both out when nothing applies.\n\
         - `touches`: globs of the files this task's work changes, e.g. `[\"src/api/**\", \
         \"migrations/\"]`: tasks whose `touches` overlap never run at the same time.\n\n",
    );
    text.push_str(&format!(
        "Print the array as your answer, or write it to `{PLAN_FILE}`.\n"
    ));
    if let Some(problems) = problems {
        text.push_str("\n## Your last plan was refused\n\nFix these and answer again:\n\n");
        for problem in problems {
            text.push_str(&format!("- {problem}\n"));
        }
    }
    text
}

/// The prompt of the refine call: restate the user's prompt as a structured spec.
pub(crate) fn refine_prompt(prompt: &str) -> String {
    format!(
        "# Restate the spec\n\nYou are not doing the work, and you change no file. Restate the \
         request below as a clear spec another agent can plan from, in markdown, with these \
         sections: ## Goal, ## Constraints, ## Acceptance criteria, ## Out of scope. Keep \
         everything the request says; add nothing it does not imply. Answer with the spec only.\n\n\
         ## The request\n\n{}\n",
        prompt.trim()
    )
}

/// The spec in a refine call's answer: the answer without a code fence around it; `None` when
/// it is empty.
pub(crate) fn refined(answer: &str) -> Option<String> {
    let text = answer.trim();
    let text = text
        .strip_prefix("```markdown")
        .or_else(|| text.strip_prefix("```md"))
        .or_else(|| text.strip_prefix("```"))
        .and_then(|inner| inner.trim_end().strip_suffix("```"))
        .unwrap_or(text)
        .trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// The plan in an answer: bare JSON, a fenced block, or an array after prose; `None` when the
/// answer holds no JSON array (or object with `tasks`).
pub(crate) fn find(answer: &str) -> Option<Value> {
    let answer = answer.trim();
    if let Ok(value) = serde_json::from_str::<Value>(answer)
        && is_plan_shaped(&value)
    {
        return Some(value);
    }
    // The first `[` or `{` from which a whole JSON value of the plan's shape parses.
    answer
        .char_indices()
        .filter(|(_, c)| *c == '[' || *c == '{')
        .find_map(|(at, _)| {
            let mut values = serde_json::Deserializer::from_str(&answer[at..]).into_iter::<Value>();
            values.next()?.ok().filter(is_plan_shaped)
        })
}

/// A list of objects, or an object holding one under `tasks` or `todos`.
fn is_plan_shaped(value: &Value) -> bool {
    let list = match value {
        Value::Array(items) => items,
        Value::Object(map) => match map.get("tasks").or_else(|| map.get("todos")) {
            Some(Value::Array(items)) => items,
            _ => return false,
        },
        _ => return false,
    };
    list.iter().all(Value::is_object)
}

/// A plan turned into task blocks and read back as ralph reads its task file.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The task file's text of the plan's tasks (blocks, each ending in `\n`).
    pub(crate) blocks: String,
    pub(crate) list: TaskList,
}

/// The plan `value` as task blocks, or every problem that keeps it from being run, one line
/// each (`known_agent` says whether ralph knows an agent's name; `kept`: the ids of the tasks
/// done already, which the plan may wait for but not reuse).
pub(crate) fn check(
    value: &Value,
    known_agent: &dyn Fn(&str) -> bool,
    kept: &[String],
) -> Result<Plan, Vec<String>> {
    let mut problems = Vec::new();
    if let Some(items) = value.as_array().or_else(|| {
        let map = value.as_object()?;
        map.get("tasks").or_else(|| map.get("todos"))?.as_array()
    }) {
        for (at, item) in items.iter().enumerate() {
            let has_id = item.get("id").is_some_and(|id| match id {
                Value::String(text) => !text.trim().is_empty(),
                Value::Number(_) => true,
                _ => false,
            });
            if !has_id {
                problems.push(format!("task {} has no \"id\"", at + 1));
            }
        }
    }
    let imported = import::convert(&value.to_string()).map_err(|why| vec![why])?;
    let blocks: String = imported.blocks.concat();
    let list = TaskList::parse(&blocks);
    if list.is_empty() {
        problems.push("the plan has no task".to_owned());
    }
    problems.extend(graph_problems(&list, kept));
    for task in &list.tasks {
        problems.extend(property_problems(task, known_agent));
    }
    if problems.is_empty() {
        Ok(Plan { blocks, list })
    } else {
        Err(problems)
    }
}

/// Ids used twice (or taken by a done task), blockers that name no task, and cycles (named by
/// their ids in order).
fn graph_problems(list: &TaskList, kept: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for id in list.tasks.iter().filter_map(Task::id) {
        if kept.iter().any(|done| done == id) {
            problems.push(format!(
                "the id \"{id}\" is a done task's; give the new task another"
            ));
        } else if !seen.insert(id) {
            problems.push(format!("the id \"{id}\" is used by more than one task"));
        }
    }
    let mut edges: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for task in &list.tasks {
        let Some(id) = task.id() else { continue };
        for blocker in task.blocked_by() {
            if seen.contains(blocker) {
                edges.entry(id).or_default().push(blocker);
            } else if !kept.iter().any(|done| done == blocker) {
                problems.push(format!(
                    "task \"{id}\" is blocked by \"{blocker}\", which is no task of the plan"
                ));
            }
        }
    }
    if let Some(cycle) = first_cycle(&edges) {
        problems.push(format!(
            "the tasks wait for each other in a cycle: {}",
            cycle.join(" → ")
        ));
    }
    problems
}

/// A cycle in `edges` (task → the tasks it waits for), as ids from its first back to itself.
fn first_cycle<'a>(edges: &BTreeMap<&'a str, Vec<&'a str>>) -> Option<Vec<&'a str>> {
    let mut done = BTreeSet::new();
    for start in edges.keys() {
        let mut path = Vec::new();
        if let Some(cycle) = walk(start, edges, &mut path, &mut done) {
            return Some(cycle);
        }
    }
    None
}

fn walk<'a>(
    at: &'a str,
    edges: &BTreeMap<&'a str, Vec<&'a str>>,
    path: &mut Vec<&'a str>,
    done: &mut BTreeSet<&'a str>,
) -> Option<Vec<&'a str>> {
    if let Some(from) = path.iter().position(|id| *id == at) {
        let mut cycle = path[from..].to_vec();
        cycle.push(at);
        return Some(cycle);
    }
    if done.contains(at) {
        return None;
    }
    path.push(at);
    for next in edges.get(at).into_iter().flatten() {
        if let Some(cycle) = walk(next, edges, path, done) {
            return Some(cycle);
        }
    }
    path.pop();
    done.insert(at);
    None
}

/// The task's properties ralph would refuse or misread: an unknown agent, a limit that is not a
/// positive number, a timeout it cannot read.
fn property_problems(task: &Task, known_agent: &dyn Fn(&str) -> bool) -> Vec<String> {
    let name = task.id().unwrap_or(&task.text);
    let mut problems = Vec::new();
    if let Some(agent) = task.agent().filter(|agent| !known_agent(agent)) {
        problems.push(format!(
            "task \"{name}\" names the agent \"{agent}\", which ralph does not know"
        ));
    }
    for key in [tasks::MAX_ITERATIONS, tasks::MAX_ATTEMPTS] {
        if let Some(value) = task.property(key)
            && value.parse::<u32>().map_or(true, |n| n == 0)
        {
            problems.push(format!(
                "task \"{name}\" has {key} \"{value}\", which is not a positive whole number"
            ));
        }
    }
    if task.property(tasks::TIMEOUT).is_some() && task.timeout().is_none() {
        problems.push(format!(
            "task \"{name}\" has a timeout ralph cannot read (write it as 30s, 20m or 1h)"
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(name: &str) -> bool {
        ["opencode", "claude-code", "codex"].contains(&name)
    }

    #[test]
    fn a_plan_is_found_bare_fenced_or_after_prose() {
        let plan = r#"[{"id": "a", "content": "A", "status": "pending", "blockedBy": []}]"#;
        for answer in [
            plan.to_owned(),
            format!("Here is the plan:\n```json\n{plan}\n```\nDone."),
            format!("I looked at it [briefly]. The plan: {plan} <promise>COMPLETE</promise>"),
        ] {
            let found = find(&answer).unwrap();
            assert_eq!(found[0]["id"], "a", "{answer}");
        }
        assert!(find("no plan here [1, 2]").is_none());
        let wrapped = find(r#"{"tasks": [{"id": "a", "content": "A"}]}"#).unwrap();
        assert!(check(&wrapped, &known, &[]).is_ok());
    }

    #[test]
    fn a_valid_plan_becomes_task_blocks_with_ids_blockers_and_properties() {
        let value = find(
            r#"[{"id": "schema", "content": "Make the schema", "status": "pending", "activeForm": "Making", "blockedBy": []},
                {"id": "api", "content": "Build the API", "status": "pending", "blockedBy": ["schema"], "agent": "codex", "max_iterations": 5, "verify": "make test"}]"#,
        )
        .unwrap();
        let plan = check(&value, &known, &[]).unwrap();
        assert_eq!(plan.list.tasks.len(), 2);
        let api = plan.list.by_id("api").unwrap();
        assert_eq!(api.blocked_by(), ["schema"]);
        assert_eq!(api.agent(), Some("codex"));
        assert_eq!(api.attempt_limit(), Some(5));
        assert!(
            plan.blocks
                .starts_with("- [ ] Make the schema\n  - id: schema\n"),
            "{}",
            plan.blocks
        );
    }

    #[test]
    fn a_plan_names_what_a_task_protects_and_may_change() {
        let value = find(
            r#"[{"id": "api", "content": "Build the API", "protect": ["tests/**", "scripts/check.sh"], "may_change": "tests/api/**"}]"#,
        )
        .unwrap();
        let plan = check(&value, &known, &[]).unwrap();
        let api = plan.list.by_id("api").unwrap();
        assert_eq!(
            api.property(tasks::PROTECT),
            Some("tests/**, scripts/check.sh")
        );
        assert_eq!(api.property(tasks::MAY_CHANGE), Some("tests/api/**"));
        assert!(prompt("Build it", &[], None).contains("`may_change`"));
        assert!(prompt("Build it", &[], None).contains("`touches`"));
    }

    #[test]
    fn every_problem_of_a_plan_is_named() {
        let value = serde_json::json!([
            {"id": "a", "content": "A", "blockedBy": ["c"]},
            {"id": "b", "content": "B", "blockedBy": ["a", "zz"]},
            {"id": "c", "content": "C", "blockedBy": ["b"], "agent": "nonesuch"},
            {"id": "a", "content": "A again", "max_iterations": 0},
            {"content": "No id", "timeout": "soon"}
        ]);
        let problems = check(&value, &known, &[]).unwrap_err();
        let all = problems.join("\n");
        for expected in [
            "task 5 has no \"id\"",
            "the id \"a\" is used by more than one task",
            "task \"b\" is blocked by \"zz\", which is no task of the plan",
            "the tasks wait for each other in a cycle: a → c → b → a",
            "task \"c\" names the agent \"nonesuch\", which ralph does not know",
            "task \"a\" has max_iterations \"0\", which is not a positive whole number",
            "a timeout ralph cannot read",
        ] {
            assert!(all.contains(expected), "{expected}\n---\n{all}");
        }
        assert_eq!(
            check(&serde_json::json!([]), &known, &[]).unwrap_err(),
            ["the plan has no task"]
        );
    }

    #[test]
    fn a_new_plan_may_wait_for_done_tasks_but_not_take_their_ids() {
        let done = ["schema".to_owned()];
        let value = serde_json::json!([
            {"id": "api", "content": "Build the API", "blockedBy": ["schema"]},
            {"id": "schema", "content": "Again"}
        ]);
        let problems = check(&value, &known, &done).unwrap_err();
        assert_eq!(
            problems,
            ["the id \"schema\" is a done task's; give the new task another"]
        );
        let value = serde_json::json!([{"id": "api", "content": "Build", "blockedBy": ["schema"]}]);
        assert!(check(&value, &known, &done).is_ok());
    }

    #[test]
    fn a_refined_spec_is_the_answer_without_its_fence() {
        assert_eq!(
            refined("```markdown\n## Goal\nA todo API\n```\n").as_deref(),
            Some("## Goal\nA todo API")
        );
        assert_eq!(refined("## Goal\nX").as_deref(), Some("## Goal\nX"));
        assert_eq!(refined("  \n"), None);
        assert!(refine_prompt("Build it").contains("## Acceptance criteria"));
    }

    #[test]
    fn the_prompt_holds_the_spec_the_schema_the_done_tasks_and_the_problems() {
        let problems = ["the tasks wait for each other in a cycle: a → b → a".to_owned()];
        let text = prompt(
            "Build a todo API",
            &["Set up CI".to_owned()],
            Some(&problems),
        );
        for part in [
            "Build a todo API",
            "\"blockedBy\"",
            "\"activeForm\"",
            PLAN_FILE,
            "- Set up CI",
            "a → b → a",
        ] {
            assert!(text.contains(part), "{part}");
        }
    }
}
