//! Builds the prompt the agent receives on every iteration. Pure: no I/O.

use crate::model::Verification;
use crate::storage::tasks::{self, Task, TaskList, TaskStatus};

/// The state of the task file for the tasks-mode prompt.
#[derive(Debug)]
pub(crate) enum TasksView<'a> {
    /// There is no task file.
    Missing,
    /// The task file exists but cannot be read.
    Unreadable,
    /// The task file's content and its parsed tasks.
    Found {
        content: &'a str,
        list: &'a TaskList,
    },
}

/// Everything one iteration's prompt depends on.
#[derive(Debug)]
pub(crate) struct PromptInput<'a> {
    pub(crate) iteration: u32,
    pub(crate) min_iterations: u32,
    pub(crate) max_iterations: u32,
    pub(crate) completion_promise: &'a str,
    pub(crate) task_promise: &'a str,
    /// The promise that stops the loop because the agent cannot go on, if enabled.
    pub(crate) abort_promise: Option<&'a str>,
    /// The user's prompt.
    pub(crate) task: &'a str,
    /// Pending context, if any.
    pub(crate) context: Option<&'a str>,
    /// `Some` in tasks mode.
    pub(crate) tasks: Option<TasksView<'a>>,
    /// Sections explaining why the agent's last claim was refused (each with its heading).
    pub(crate) feedback: &'a [String],
    /// Set when the loop is one task of a `--parallel` run or of a `--worker`: the prompt is
    /// written for that one task, its worktree and its merge.
    pub(crate) task_loop: Option<TaskLoop<'a>>,
    /// How long `ralph_ask` waits for an answer, when the agent has ralph's tools.
    pub(crate) ask_timeout: Option<std::time::Duration>,
}

/// A task loop: one task worked on in its own git worktree, on its own branch, while other
/// agents work on other tasks; ralph merges the branch into the base when the task is done and
/// keeps the statuses of the task list itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TaskLoop<'a> {
    /// The task's id (as `storage::tasks::task_ids` gives it); its branch is `ralph/<id>`.
    pub(crate) id: &'a str,
    /// The branch the task's branch is merged into.
    pub(crate) base: &'a str,
    /// The other tasks whose loops ran when this one started (beside it, by other agents).
    pub(crate) alongside: &'a [String],
}

/// Most other tasks a task loop's prompt lists.
const OTHER_TASKS_SHOWN: usize = 40;

/// A task loop's "not yours" section: every other task of the list, its id, text and state,
/// those running beside it said so.
fn other_tasks(list: &TaskList, mine: &str, alongside: &[String]) -> Option<String> {
    let ids = tasks::task_ids(list);
    let others: Vec<String> = (list.tasks.iter().zip(&ids))
        .filter(|(_, id)| *id != mine)
        .map(|(task, id)| {
            let state = if alongside.contains(id) {
                "in progress: another agent works on it now, beside you"
            } else {
                match task.status {
                    TaskStatus::Todo => "to do",
                    TaskStatus::InProgress => "in progress",
                    TaskStatus::Complete => "done",
                    TaskStatus::Failed => "failed",
                }
            };
            format!("- `{id}` {} — {state}", task.description())
        })
        .collect();
    if others.is_empty() {
        return None;
    }
    let more = others.len().saturating_sub(OTHER_TASKS_SHOWN);
    let mut section = String::from(
        "## The Other Tasks (not yours)\n\nOther agents do these, or will; do not do their \
         work, and leave their files to them unless your task needs the change:\n\n",
    );
    section.push_str(&others[..others.len() - more].join("\n"));
    if more > 0 {
        section.push_str(&format!("\n- … and {more} more in .ralph/ralph-tasks.md"));
    }
    Some(section)
}

/// The full prompt for one iteration.
pub(crate) fn build(input: &PromptInput<'_>) -> String {
    let mut sections: Vec<String> = Vec::new();
    sections.push(format!(
        "# Ralph Wiggum Loop - Iteration {}",
        input.iteration
    ));
    match (&input.tasks, input.task_loop) {
        (_, Some(task_loop)) => sections.push(format!(
            "You are working in an iterative development loop on ONE task of a task list, in \
             your own git worktree on branch `{}`. Other agents work on the other tasks at the \
             same time, each in its own worktree. Your previous work on this task is in the \
             files.",
            tasks::branch_of(task_loop.id)
        )),
        (None, None) => sections.push(
            "You are working in an iterative development loop. The same task is given to you on \
             every iteration; your previous work is in the files. Keep working on the task below \
             until it is genuinely complete."
                .to_owned(),
        ),
        (Some(_), None) => sections.push(
            "You are working in an iterative development loop that works through a task list, \
             one task at a time. Your previous work is in the files."
                .to_owned(),
        ),
    }
    if let Some(context) = input.context {
        sections.push(format!(
            "## Additional Context (added by user mid-loop)\n\n{}\n\n---",
            context.trim()
        ));
    }
    sections.extend(input.feedback.iter().cloned());
    sections.push(
        "## Progress Log\n\nRead .ralph/progress.md first, if it exists: it tells what earlier \
         iterations did and learned. Before you finish, add a short note at its end (what you \
         did, what you learned, what is next)."
            .to_owned(),
    );
    match (&input.tasks, input.task_loop) {
        (_, Some(task_loop)) => task_loop_sections(input, task_loop, &mut sections),
        (None, None) => normal_sections(input, &mut sections),
        (Some(view), None) => tasks_sections(input, view, &mut sections),
    }
    if let Some(timeout) = input.ask_timeout {
        let at = sections.len().saturating_sub(1);
        sections.insert(at, tools_section(timeout));
    }
    if let Some(abort) = input.abort_promise {
        let at = sections.len().saturating_sub(1);
        sections.insert(
            at,
            format!(
                "## If You Cannot Go On\n\nIf the task cannot be done at all (something only a person \
                 can fix blocks it), explain why and end your final message with this line, on its \
                 own:\n\n   <promise>{abort}</promise>"
            ),
        );
    }
    sections.join("\n\n").trim().to_owned()
}

/// What the agent is told of ralph's tools (the MCP server `ralph`).
fn tools_section(timeout: std::time::Duration) -> String {
    let timeout = crate::output::format::compact_duration(timeout);
    format!(
        "## Ralph's Tools\n\nYou have MCP tools from the server `ralph`, the loop that runs you:\n\n\
         - `ralph_ask` asks a person and waits for the answer (up to {timeout}). Use it only for \
         a real decision you cannot make from the task, the code and the notes (two designs with \
         real trade-offs, an ambiguous requirement) or for something you lack (a credential, an \
         account). Never use it to ask permission to continue. With no answer in time, decide \
         yourself and say what you chose.\n\
         - `ralph_add_task` adds a follow-up task to the task list (with `blocked_by` and \
         `touches`), instead of editing the task file.\n\
         - `ralph_note` adds a note to the progress log.\n\
         - `ralph_context` shows your task's state and the hints people left for you."
    )
}

fn iteration_label(input: &PromptInput<'_>) -> String {
    let max = if input.max_iterations > 0 {
        format!(" / {}", input.max_iterations)
    } else {
        " (unlimited)".to_owned()
    };
    format!(
        "{}{max} (min: {})",
        input.iteration,
        input.min_iterations.max(1)
    )
}

fn normal_sections(input: &PromptInput<'_>, sections: &mut Vec<String>) {
    let promise = format!("<promise>{}</promise>", input.completion_promise);
    sections.push(format!("## Your Task\n\n{}", input.task));
    sections.push(format!(
        "## Instructions\n\n\
         1. Look at the current files to see what earlier iterations already did.\n\
         2. Keep track of your progress and plan the next step.\n\
         3. Make real progress on the task in this iteration.\n\
         4. Run the tests or other checks, where the task has any.\n\
         5. When the task is GENUINELY COMPLETE, end your final message with this line, on its own:\n\n   {promise}"
    ));
    sections.push(format!(
        "## Critical Rules\n\n\
         - Print {promise} only when the task is truly done.\n\
         - Never print the promise to get out of the loop; do not lie about being finished.\n\
         - If you are stuck, try a different approach.\n\
         - Check your work before you claim completion.\n\
         - The loop goes on until you succeed."
    ));
    sections.push(format!("## Current Iteration: {}", iteration_label(input)));
    sections.push("Now work on the task. Good luck!".to_owned());
}

fn tasks_sections(input: &PromptInput<'_>, view: &TasksView<'_>, sections: &mut Vec<String>) {
    let done = format!("<promise>{}</promise>", input.completion_promise);
    let next = format!("<promise>{}</promise>", input.task_promise);
    match view {
        TasksView::Missing => sections.push(
            "## TASKS MODE: Enabled (no tasks file found)\n\n\
             Create .ralph/ralph-tasks.md with one task per line (`- [ ] description`), \
             or add tasks with: ralph --add-task \"description\""
                .to_owned(),
        ),
        TasksView::Unreadable => sections.push(
            "## TASKS MODE: Error reading tasks file\n\n\
             Unable to read .ralph/ralph-tasks.md. Check that it exists and is readable."
                .to_owned(),
        ),
        TasksView::Found { content, list } => {
            let instruction = task_instruction(list, &next, &done);
            sections.push(format!(
                "## TASKS MODE: Working through task list\n\n\
                 Current tasks from .ralph/ralph-tasks.md:\n\n```markdown\n{}\n```\n\n{instruction}\n\n\
                 ### Task Workflow\n\n\
                 1. Find the task marked [/]; if there is none, take the first [ ] task whose \
                 `blocked_by` tasks are all [x].\n\
                 2. Mark it [/] in .ralph/ralph-tasks.md.\n\
                 3. Do the work of that task only.\n\
                 4. Mark it [x] once you have verified it.\n\
                 5. End your message with {next} to move on to the next task.\n\
                 6. Only when ALL tasks are [x], end your message with {done}\n\n---",
                content.trim()
            ));
        }
    }
    sections.push(format!("## Your Main Goal\n\n{}", input.task));
    sections.push(format!(
        "## Critical Rules\n\n\
         - Work on ONE task at a time from .ralph/ralph-tasks.md.\n\
         - Print {next} only when the current task is complete and marked [x].\n\
         - Print {done} only when ALL tasks are [x].\n\
         - Never print a promise to get out of the loop; do not lie about being finished.\n\
         - If you are stuck, try a different approach.\n\
         - Check your work before you claim completion.\n\
         - Print a promise as the last line of your final message, on its own."
    ));
    sections.push(format!("## Current Iteration: {}", iteration_label(input)));
    sections
        .push("Tasks Mode: ENABLED - work on one task at a time from ralph-tasks.md".to_owned());
    sections.push("Now work on the current task. Good luck!".to_owned());
}

/// The instruction of the tasks section: the task in progress, the next one, or what to do when
/// there is none.
fn task_instruction(list: &TaskList, next: &str, done: &str) -> String {
    if let Some(task) = list.current() {
        format!(
            "🔄 CURRENT TASK: \"{}\"\n\nFocus on this task. When it is done and verified, \
             mark it [x] in .ralph/ralph-tasks.md and end your message with {}.{}",
            task.text,
            task_promise(task, next),
            task_notes(task)
        )
    } else if let Some(task) = list.next() {
        format!(
            "📍 NEXT TASK: \"{}\"\n\nMark it [/] in .ralph/ralph-tasks.md before you \
             start. When it is done and verified, mark it [x] and end your message with {}.{}",
            task.text,
            task_promise(task, next),
            task_notes(task)
        )
    } else if list.all_complete() {
        format!(
            "✅ ALL TASKS COMPLETE!\n\nEvery task is marked [x]. Check the work once more, \
             then end your message with {done}"
        )
    } else if list.is_empty() {
        "📋 No tasks found.\n\nAdd tasks to .ralph/ralph-tasks.md (`- [ ] description`), \
         or with: ralph --add-task \"description\""
            .to_owned()
    } else {
        "⛔ No task can be started: every open task is failed or waits for another one. \
         Review .ralph/ralph-tasks.md."
            .to_owned()
    }
}

/// The sections of a task loop's prompt: its one task, the shared goal, how the task ends (its
/// promise, then ralph's merge), and what it must leave to ralph.
fn task_loop_sections(
    input: &PromptInput<'_>,
    task_loop: TaskLoop<'_>,
    sections: &mut Vec<String>,
) {
    let branch = tasks::branch_of(task_loop.id);
    let base = task_loop.base;
    let loop_promise = format!("<promise>{}</promise>", input.task_promise);
    let found = match &input.tasks {
        Some(TasksView::Found { content, list }) => tasks::task_ids(list)
            .iter()
            .position(|id| id == task_loop.id)
            .map(|index| {
                (
                    &list.tasks[index],
                    tasks::block_text(content, &list.tasks[index]),
                )
            }),
        _ => None,
    };
    let Some((task, block)) = found else {
        sections.push(format!(
            "## Your Task\n\nYour task `{}` is not in .ralph/ralph-tasks.md. Do not start \
             other work: say so in your final message, and print no promise.",
            task_loop.id
        ));
        sections.push(format!("## Current Iteration: {}", iteration_label(input)));
        return;
    };
    let promise = task_promise(task, &loop_promise);
    sections.push(format!(
        "## Your Task\n\n🔄 CURRENT TASK: \"{}\"\n\nIts entry in .ralph/ralph-tasks.md (id `{}`):\n\n\
         ```markdown\n{}\n```{}",
        task.text,
        task_loop.id,
        block.trim_end(),
        task_notes(task)
    ));
    sections.push(format!(
        "## The Goal of the Whole Task List\n\n{}\n\nEvery agent shares this goal; your part of \
         it is the task above.",
        input.task
    ));
    if let Some(TasksView::Found { list, .. }) = &input.tasks {
        sections.extend(other_tasks(list, task_loop.id, task_loop.alongside));
    }
    sections.push(format!(
        "## Instructions\n\n\
         1. Look at the current files to see what earlier iterations already did on this task.\n\
         2. Do the work of your task only: the other tasks (listed above) are other agents' work.\n\
         3. Run the tests or other checks, where the project has any.\n\
         4. When your task is done and verified, end your final message with this line, on its own:\n\n   {promise}\n\n\
         ralph then merges your branch `{branch}` into `{base}` and marks the task [x]."
    ));
    let mut rules = vec![
        "- Do not change the status of any task ([ ], [/], [x], [!]) in .ralph/ralph-tasks.md: \
         ralph keeps them, and marks your task [x] when it merges your branch."
            .to_owned(),
        format!(
            "- Found more work? Add it as a new `- [ ] …` line at the end of \
             .ralph/ralph-tasks.md, and notes at the end of .ralph/progress.md: both are carried \
             into `{base}` when your branch is merged."
        ),
    ];
    let completion = format!("<promise>{}</promise>", input.completion_promise);
    if completion != promise {
        rules.push(format!(
            "- Do not print {completion}: it ends a whole task list, not a task loop. Your task \
             ends with {promise}."
        ));
    }
    rules.push(format!(
        "- Print {promise} only when your task is truly done; never print a promise to get out \
         of the loop."
    ));
    rules.push("- If you are stuck, try a different approach.".to_owned());
    sections.push(format!("## Critical Rules\n\n{}", rules.join("\n")));
    sections.push(format!("## Current Iteration: {}", iteration_label(input)));
    sections.push("Now work on your task. Good luck!".to_owned());
}

/// The prompt section for a parallel worker whose branch did not merge cleanly: merging the base
/// in left conflicts to resolve.
pub(crate) fn merge_conflicts(base: &str, files: &[String]) -> String {
    let list: Vec<String> = files.iter().map(|file| format!("- {file}")).collect();
    format!(
        "## Merge conflicts to resolve first\n\n\
         Other tasks were merged into `{base}` while you worked. Merging `{base}` into your branch \
         conflicted in:\n\n{}\n\n\
         Resolve every conflict in these files, keeping the intent of both sides, and remove the \
         conflict markers. Make sure the work still builds and its checks pass, then end your \
         message with the task's promise.",
        list.join("\n")
    )
}

/// The promise that ends a task: its own `promise`, else the loop's task promise.
fn task_promise(task: &Task, loop_promise: &str) -> String {
    task.promise().map_or_else(
        || loop_promise.to_owned(),
        |text| format!("<promise>{text}</promise>"),
    )
}

/// What the agent should know about a task beyond its description: what "done" means, and the
/// check ralph runs.
fn task_notes(task: &Task) -> String {
    let mut notes = String::new();
    if let Some(success) = task.success() {
        notes.push_str(&format!("\n\nDone means: {success}"));
    }
    if let Some(command) = task.property(crate::storage::tasks::VERIFY) {
        notes.push_str(&format!(
            " ralph then runs `{command}`; the task counts as done only if it passes."
        ));
    }
    notes
}

/// Why the agent's last claim was refused, for the next prompt.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Feedback<'a> {
    /// Completion was claimed with tasks still open.
    OpenTasks {
        promise: &'a str,
        open: &'a [String],
    },
    /// A claim was made but a check that must pass first failed (`--verify`, a task's own
    /// `verify` in a task loop, conflict markers left after a merge).
    Verification {
        /// The promise the agent printed (the whole tag): the completion promise, or in a task
        /// loop its task's promise.
        printed: &'a str,
        failed: &'a [Verification],
    },
    /// A task was said done but its own verify command failed.
    TaskVerification {
        task: &'a str,
        task_tag: &'a str,
        failed: &'a [Verification],
    },
    /// The agent changed protected paths (`--protect`): they were put back.
    ProtectedRestored { files: &'a [String] },
    /// `--holdout` checks failed (of `total`): the agent is told what `tell` lets it (`count`,
    /// `names`, `full`).
    Holdout {
        printed: &'a str,
        failed: &'a [Verification],
        total: usize,
        tell: &'a str,
    },
}

/// The prompt section (with its heading) explaining a refused claim.
pub(crate) fn feedback(feedback: Feedback<'_>) -> String {
    match feedback {
        Feedback::OpenTasks { promise, open } => {
            let list: Vec<String> = open.iter().map(|task| format!("- {task}")).collect();
            format!(
                "## Completion was refused\n\nIn the previous iteration you printed <promise>{promise}</promise>, \
                 but these tasks are not marked [x] in .ralph/ralph-tasks.md:\n\n{}\n\n\
                 Finish them (and mark them [x]) before claiming completion.",
                list.join("\n")
            )
        }
        Feedback::Verification { printed, failed } => format!(
            "## Completion was refused\n\nIn the previous iteration you printed {printed}, \
             but the verification that must pass first did not:\n\n{}\n\nFix the cause, then end \
             your message with {printed} again.",
            verification_text(failed)
        ),
        Feedback::TaskVerification {
            task,
            task_tag,
            failed,
        } => format!(
            "## The task was not accepted\n\nYou said \"{task}\" was done, but its verify command \
             failed, so it is marked [/] again:\n\n{}\n\nFix it before you print {task_tag} again.",
            verification_text(failed)
        ),
        Feedback::Holdout {
            printed,
            failed,
            total,
            tell,
        } => {
            let detail = match tell {
                "full" => format!(":\n\n{}\n\n", verification_text(failed)),
                "names" => {
                    let names: Vec<String> = failed
                        .iter()
                        .map(|v| format!("- `{}`", v.command))
                        .collect();
                    format!(":\n\n{}\n\n", names.join("\n"))
                }
                _ => ". You cannot see them: they check the task as it is asked, not as the \
                      visible checks test it.\n\n"
                    .to_owned(),
            };
            format!(
                "## Completion was refused\n\nIn the previous iteration you printed {printed}; the \
                 visible checks passed, but {} of {total} holdout checks failed{detail}Look again at \
                 what the task asks and make the work do all of it, then end your message with \
                 {printed} again.",
                failed.len()
            )
        }
        Feedback::ProtectedRestored { files } => {
            let list: Vec<String> = files.iter().map(|file| format!("- {file}")).collect();
            format!(
                "## Your changes to protected files were undone\n\nThese files are protected: you \
                 may read them but not change them, and the checks that judge your work use them \
                 as they were. Your changes to them were put back and are not committed:\n\n{}\n\n\
                 Make the code meet them as they are; do not edit them again.",
                list.join("\n")
            )
        }
    }
}

/// Each failed command with its outcome and the end of its output.
fn verification_text(failures: &[Verification]) -> String {
    let mut text = String::new();
    for failure in failures {
        text.push_str(&format!(
            "`{}` failed ({})",
            failure.command,
            failure.outcome()
        ));
        if failure.output_tail.is_empty() {
            text.push_str(" with no output.\n\n");
        } else {
            text.push_str(&format!(
                ". The end of its output:\n\n```\n{}\n```\n\n",
                failure.output_tail
            ));
        }
    }
    text.trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_with_ralphs_tools_are_told_when_to_ask() {
        let mut with = input(None, None);
        with.ask_timeout = Some(std::time::Duration::from_secs(120));
        let prompt = build(&with);
        assert!(prompt.contains("## Ralph's Tools\n\nYou have MCP tools from the server `ralph`, the loop that runs you:\n\n- `ralph_ask` asks a person and waits for the answer (up to 2m). Use it only for a real decision"), "{prompt}");
        assert!(
            prompt.contains("Never use it to ask permission to continue."),
            "{prompt}"
        );
        assert!(
            prompt.contains("\n- `ralph_context` shows your task's state"),
            "{prompt}"
        );
        assert!(!build(&input(None, None)).contains("ralph_ask"));
    }

    fn input<'a>(tasks: Option<TasksView<'a>>, context: Option<&'a str>) -> PromptInput<'a> {
        PromptInput {
            iteration: 2,
            min_iterations: 1,
            max_iterations: 5,
            completion_promise: "COMPLETE",
            task_promise: "READY_FOR_NEXT_TASK",
            abort_promise: None,
            task: "Build a REST API",
            context,
            tasks,
            feedback: &[],
            task_loop: None,
            ask_timeout: None,
        }
    }

    const TWO_TASKS: &str = "# Ralph Tasks\n\n- [/] **api**: Build the API\n  - [ ] GET /todos\n  - success: GET /todos works\n  - promise: API_DONE\n\n- [ ] Write docs\n";

    fn task_loop_prompt(id: &str) -> String {
        let list = TaskList::parse(TWO_TASKS);
        let mut input = input(
            Some(TasksView::Found {
                content: TWO_TASKS,
                list: &list,
            }),
            None,
        );
        input.task_loop = Some(TaskLoop {
            id,
            base: "main",
            alongside: &[],
        });
        build(&input)
    }

    #[test]
    fn a_task_loop_prompt_is_about_its_one_task_its_branch_and_its_merge() {
        let prompt = task_loop_prompt("write-docs");
        assert!(
            prompt.contains("🔄 CURRENT TASK: \"Write docs\""),
            "{prompt}"
        );
        assert_eq!(prompt.matches("CURRENT TASK").count(), 1, "{prompt}");
        assert!(prompt.contains("branch `ralph/write-docs`"), "{prompt}");
        assert!(
            prompt.contains("\n   <promise>READY_FOR_NEXT_TASK</promise>\n"),
            "{prompt}"
        );
        assert!(
            prompt.contains("merges your branch `ralph/write-docs` into `main`"),
            "{prompt}"
        );
        assert!(prompt.contains("Do not change the status of any task"));
        assert!(prompt.contains("at the end of .ralph/ralph-tasks.md"));
        assert!(prompt.contains("Do not print <promise>COMPLETE</promise>"));
        assert!(prompt.contains("## The Goal of the Whole Task List\n\nBuild a REST API"));
        // Nothing of the sequential workflow; the other task is named as not this loop's.
        for sequential in [
            "Only when ALL tasks",
            "Task Workflow",
            "Mark it [/]",
            "mark it [x]",
            "NEXT TASK",
            "TASKS MODE",
            "then end your message with <promise>COMPLETE</promise>",
        ] {
            assert!(!prompt.contains(sequential), "{sequential}: {prompt}");
        }
        assert!(
            prompt.contains(
                "## The Other Tasks (not yours)\n\nOther agents do these, or will; do not do their work, and leave their files to them unless your task needs the change:\n\n- `api` Build the API — in progress"
            ),
            "{prompt}"
        );
        assert_eq!(prompt.matches("Build the API").count(), 1, "{prompt}");
    }

    #[test]
    fn a_task_loop_prompt_shows_the_tasks_entry_and_its_own_promise() {
        let prompt = task_loop_prompt("api");
        assert!(
            prompt.contains("🔄 CURRENT TASK: \"**api**: Build the API\""),
            "{prompt}"
        );
        assert!(
            prompt.contains(
                "(id `api`):\n\n```markdown\n- [/] **api**: Build the API\n  - [ ] GET /todos\n  - success: GET /todos works\n  - promise: API_DONE\n```"
            ),
            "{prompt}"
        );
        assert!(prompt.contains("Done means: GET /todos works"), "{prompt}");
        assert!(
            prompt.contains("\n   <promise>API_DONE</promise>\n"),
            "{prompt}"
        );
        assert!(!prompt.contains("READY_FOR_NEXT_TASK"), "{prompt}");
        assert!(prompt.contains("- `write-docs` Write docs — "), "{prompt}");
        let missing = task_loop_prompt("gone");
        assert!(missing.contains("Your task `gone` is not in"), "{missing}");
        assert!(!missing.contains("<promise>"), "{missing}");
    }

    #[test]
    fn a_refusal_names_the_promise_that_was_printed_and_a_conflict_its_files() {
        let failed = [Verification {
            command: "no conflict markers in src/lib.rs".to_owned(),
            passed: false,
            exit_code: Some(1),
            timed_out: false,
            output_tail: "src/lib.rs still has conflict markers".to_owned(),
            ..Verification::default()
        }];
        let text = feedback(Feedback::Verification {
            printed: "<promise>READY_FOR_NEXT_TASK</promise>",
            failed: &failed,
        });
        assert!(
            text.contains("you printed <promise>READY_FOR_NEXT_TASK</promise>, but"),
            "{text}"
        );
        assert!(!text.contains("COMPLETE"), "{text}");
        let conflicts = merge_conflicts("main", &["src/lib.rs".to_owned()]);
        assert!(conflicts.contains("- src/lib.rs") && conflicts.contains("`main`"));
    }

    #[test]
    fn normal_prompt() {
        insta::assert_snapshot!(build(&input(
            None,
            Some("# Ralph Loop Context\n\nuse sqlite\n")
        )));
    }

    fn tasks_prompt(content: &str) -> String {
        let list = TaskList::parse(content);
        build(&input(
            Some(TasksView::Found {
                content,
                list: &list,
            }),
            None,
        ))
    }

    #[test]
    fn tasks_prompt_with_a_current_task() {
        insta::assert_snapshot!(tasks_prompt(
            "# Ralph Tasks\n\n- [x] one\n- [/] two\n- [ ] three\n"
        ));
    }

    #[test]
    fn tasks_prompt_picks_the_instruction_by_state() {
        assert!(tasks_prompt("- [x] a\n- [ ] b\n").contains("📍 NEXT TASK: \"b\""));
        assert!(tasks_prompt("- [x] a\n- [X] b\n").contains("✅ ALL TASKS COMPLETE!"));
        assert!(tasks_prompt("# Ralph Tasks\n").contains("📋 No tasks found."));
        let missing = build(&input(Some(TasksView::Missing), None));
        assert!(missing.contains("## TASKS MODE: Enabled (no tasks file found)"));
        let unreadable = build(&input(Some(TasksView::Unreadable), None));
        assert!(unreadable.contains("## TASKS MODE: Error reading tasks file"));
    }

    #[test]
    fn the_promise_line_stands_alone_and_the_label_counts() {
        let prompt = build(&input(None, None));
        assert!(prompt.contains("\n   <promise>COMPLETE</promise>\n"));
        assert!(prompt.contains("## Current Iteration: 2 / 5 (min: 1)"));
        let mut unlimited = input(None, None);
        unlimited.max_iterations = 0;
        assert!(build(&unlimited).contains("## Current Iteration: 2 (unlimited) (min: 1)"));
    }
}
