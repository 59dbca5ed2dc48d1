//! The command line, described for clap. The doc comments here are the `--help` text.
//!
//! Nothing here decides anything: `config` turns a parsed [`Cli`] into a validated `Config`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgAction, Parser};

use crate::options::LoopArgs;

const USAGE: &str = "ralph \"<prompt>\" [options]
       ralph --prompt-file <path> [options]
       cat prompt.md | ralph [options]
       ralph <command>";

const AFTER_HELP: &str = "\
Examples:
  ralph \"Build a REST API for todos\" --max-iterations 20
  ralph --prompt-file PROMPT.md --agent claude-code --model sonnet
  cat PROMPT.md | ralph --agent codex --max-iterations 10
  ralph \"Finish the roadmap\" --tasks --max-iterations 30
  ralph --add-context \"The tests live in tests/api\"   (from another terminal)
  ralph \"Fix the build\" -- --some-agent-flag          (arguments after -- go to the agent)

How it works:
  1. ralph sends your prompt to the agent, wrapped with loop instructions.
  2. The agent works on it: reads and edits files, runs commands.
  3. ralph checks whether the last line of the agent's answer is <promise>COMPLETE</promise>.
  4. If not, ralph commits the agent's changes (files you had changed before the loop stay out
     of its commits; see --commit-dirty) and runs the agent again with the same prompt.
  5. The agent sees its previous work in the files and carries on.
  6. This repeats until the promise is kept or a limit is reached.

State, history, context and tasks live in .ralph/ in the current directory.
Press Ctrl+C to stop; the loop can be resumed with `ralph --resume`.
Learn more: https://ghuntley.com/ralph/";

/// Ralph Wiggum Loop - run an AI coding agent in a loop until it keeps its promise.
#[derive(Debug, Parser)]
#[command(
    name = "ralph",
    version,
    override_usage = USAGE,
    after_help = AFTER_HELP,
    disable_version_flag = true,
    disable_help_flag = true,
    args_override_self = true,
    max_term_width = 100
)]
pub(crate) struct Cli {
    /// The task for the agent (words are joined with spaces; a single existing file path is read).
    #[arg(value_name = "PROMPT")]
    pub(crate) prompt: Vec<String>,

    /// Arguments passed to the agent verbatim (everything after `--`).
    #[arg(last = true, value_name = "AGENT_ARGS")]
    pub(crate) agent_args: Vec<String>,

    /// The commands (each acts and exits).
    #[command(flatten)]
    pub(crate) commands: CommandArgs,

    /// Machine-readable output: JSON for --status and --list-tasks, JSON lines for a run.
    #[arg(long, help_heading = "Agent and output")]
    pub(crate) json: bool,

    /// Print help.
    #[arg(short = 'h', long, action = ArgAction::Help, help_heading = "Commands")]
    pub(crate) help: Option<bool>,

    /// Print the version.
    #[arg(short = 'v', long, action = ArgAction::Version, help_heading = "Commands")]
    pub(crate) version: Option<bool>,

    // ── Loop options ──────────────────────────────────────────────────────────────────────────
    /// Read the prompt from a file.
    #[arg(
        short = 'f',
        long,
        visible_alias = "file",
        value_name = "PATH",
        help_heading = "Loop"
    )]
    pub(crate) prompt_file: Option<PathBuf>,

    /// The loop options (declared in `options.rs`).
    #[command(flatten)]
    pub(crate) options: LoopArgs,
}

/// The commands: flags that act and exit (or choose how the loop runs).
#[derive(Debug, clap::Args)]
pub(crate) struct CommandArgs {
    /// Show the loop's status, pending context, tasks and history, then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) status: bool,

    /// Add the tasks of a task list (ralph's --export json, a prd.json, a tasks.json or a markdown
    /// roadmap; - reads standard input) to .ralph/ralph-tasks.md, then exit. Repeat it to import
    /// several files, in order; a task whose id is taken gets a new one.
    #[arg(long, value_name = "FILE", action = ArgAction::Append, help_heading = "Commands")]
    pub(crate) import: Vec<PathBuf>,

    /// Print the task list in FORMAT (json: the --list-tasks --json schema, every property
    /// included, which --import reads back), then exit.
    #[arg(long, value_name = "FORMAT", help_heading = "Commands")]
    pub(crate) export: Option<ExportFormat>,

    /// Write an HTML report of the loop (default: .ralph/report.html; -: stdout), then exit.
    #[arg(long, value_name = "FILE", num_args = 0..=1, help_heading = "Commands")]
    pub(crate) report: Option<Option<PathBuf>>,

    /// A live dashboard of the loop running here (or of the last run), until q.
    #[arg(long, help_heading = "Commands")]
    pub(crate) watch: bool,

    /// Add a hint for the next iteration (works while a loop runs; in a --parallel run or a
    /// --worker, every running task's loop gets it), then exit.
    #[arg(
        long,
        value_name = "TEXT",
        allow_hyphen_values = true,
        help_heading = "Commands"
    )]
    pub(crate) add_context: Option<String>,

    /// With --add-context: the hint is for this task's loop only, in a --parallel run or a
    /// --worker (a single loop gets every hint).
    #[arg(
        long,
        value_name = "ID",
        requires = "add_context",
        help_heading = "Commands"
    )]
    pub(crate) task: Option<String>,

    /// Remove the pending context, then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) clear_context: bool,

    /// List the tasks in .ralph/ralph-tasks.md, then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) list_tasks: bool,

    /// Append a task to .ralph/ralph-tasks.md, then exit.
    #[arg(
        long,
        value_name = "DESCRIPTION",
        allow_hyphen_values = true,
        help_heading = "Commands"
    )]
    pub(crate) add_task: Option<String>,

    /// With --add-task: the new task's id, for other tasks' `blocked_by`. A task without one gets
    /// an id from its text, for its worktree and branch: its letters and digits (of any script)
    /// in lower case, other characters as '-' ("Write the parser!" → write-the-parser, "实现用户认证"
    /// → 实现用户认证).
    #[arg(
        long,
        value_name = "ID",
        requires = "add_task",
        help_heading = "Commands"
    )]
    pub(crate) id: Option<String>,

    /// With --add-task: ids of the tasks that must be done first (comma-separated).
    #[arg(
        long,
        value_name = "IDS",
        requires = "add_task",
        help_heading = "Commands"
    )]
    pub(crate) blocked_by: Option<String>,

    /// With --add-task: what "done" means for the new task, shown to the agent. --agent, --model,
    /// --max-iterations, --completion-promise, --iteration-timeout and --verify given with
    /// --add-task become the task's own.
    #[arg(
        long,
        value_name = "CRITERIA",
        requires = "add_task",
        allow_hyphen_values = true,
        help_heading = "Commands"
    )]
    pub(crate) success: Option<String>,

    /// Remove task N (and its subtasks) from .ralph/ralph-tasks.md, then exit.
    #[arg(long, value_name = "N", help_heading = "Commands")]
    pub(crate) remove_task: Option<String>,

    /// Run this loop in its own git worktree, .ralph/worktrees/NAME on branch ralph/NAME, so
    /// several loops can work in one repository at once (with --resume: go on with the loop
    /// stopped there).
    #[arg(long, value_name = "NAME", help_heading = "Commands")]
    pub(crate) worktree: Option<String>,

    /// With --worktree: merge the branch into the current one when the loop completes (and
    /// remove the worktree); without it the branch is left for you to review.
    #[arg(long, requires = "worktree", help_heading = "Commands")]
    pub(crate) merge: bool,

    /// Answer question ID an agent asked (ralph_ask) with TEXT (an option may be given by its
    /// number), then exit; ralph --status lists the questions waiting. With --remote: a question
    /// a --worker asked, from any clone.
    #[arg(long, num_args = 2, value_names = ["ID", "TEXT"], help_heading = "Commands")]
    pub(crate) answer: Option<Vec<String>>,

    /// Print what the agent printed in iteration N (default: the last), as it was shown; in a
    /// parallel run, TASK for a task's last iteration, TASK/N for its N-th.
    #[arg(
        long,
        value_name = "N|TASK[/N]",
        num_args = 0..=1,
        default_missing_value = "last",
        help_heading = "Commands"
    )]
    pub(crate) log: Option<String>,

    /// With --log: the agent's lines exactly as it printed them.
    #[arg(long, requires = "log", help_heading = "Commands")]
    pub(crate) raw: bool,

    /// With --log: keep printing while the iteration runs, until it ends.
    #[arg(long, requires = "log", help_heading = "Commands")]
    pub(crate) follow: bool,

    /// Take tasks from the task list on a git remote's base branch, one at a time, claiming each
    /// there so any number of workers on any machines share the list.
    #[arg(long, help_heading = "Commands")]
    pub(crate) worker: bool,

    /// The git remote of --worker and --status (default: origin).
    #[arg(
        long,
        value_name = "NAME",
        num_args = 0..=1,
        default_missing_value = "origin",
        help_heading = "Commands"
    )]
    pub(crate) remote: Option<String>,

    /// The branch --worker takes tasks from and merges into (default: the remote's default branch).
    #[arg(long, value_name = "BRANCH", help_heading = "Commands")]
    pub(crate) base: Option<String>,

    /// Continue the interrupted or crashed loop recorded in .ralph/.
    #[arg(long, help_heading = "Commands")]
    pub(crate) resume: bool,

    /// Remove the loop's state, history and context (never the task file), then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) reset: bool,

    /// Write a commented .ralph/config.toml with the defaults, then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) init: bool,

    /// Show the settings in effect and where each comes from, then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) config: bool,

    /// Check git, the agents and .ralph/, and say what to fix, then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) doctor: bool,

    /// Serve the Model Context Protocol on stdin and stdout, so another agent can read and steer
    /// ralph's runs here (e.g. claude mcp add ralph -- ralph --mcp).
    #[arg(long, help_heading = "Commands")]
    pub(crate) mcp: bool,

    /// Show the command, environment and prompt of iteration 1 without running anything.
    #[arg(long, help_heading = "Commands")]
    pub(crate) dry_run: bool,

    /// Plan the prompt (a spec) into a task graph with the agent, write it to
    /// .ralph/ralph-tasks.md and show it, then exit; nothing is committed (with --json: the plan
    /// as a plan_created event). A run of the list (--parallel N or --tasks) then goes on from it.
    #[arg(long, help_heading = "Commands")]
    pub(crate) plan: bool,

    /// Plan the prompt (a new spec) again: the done tasks are kept and shown to the planner, the
    /// others are replaced by the new plan. With --plan (write and show) or a run of the list
    /// (--parallel N, --tasks).
    #[arg(long, help_heading = "Commands")]
    pub(crate) replan: bool,

    /// Before planning, have the agent restate the prompt as a spec (goal, constraints,
    /// acceptance criteria, out of scope); on a terminal ralph shows it and asks to use it, keep
    /// the original, or edit it. The prompt used is saved to .ralph/prompt.md.
    #[arg(long, help_heading = "Commands")]
    pub(crate) refine: bool,

    /// With --refine: use the restated prompt without asking.
    #[arg(long, requires = "refine", help_heading = "Commands")]
    pub(crate) yes: bool,

    /// Print a shell completion script (bash, zsh, fish, powershell, elvish), then exit.
    #[arg(long, value_name = "SHELL", help_heading = "Commands")]
    pub(crate) completions: Option<clap_complete::Shell>,

    /// Print the man page (roff), then exit.
    #[arg(long, help_heading = "Commands")]
    pub(crate) man: bool,
}

/// The command line with `--add-context --task ID TEXT` read as `--task ID --add-context TEXT`:
/// `--add-context` takes text that starts with `-` (`--add-context "--verbose is broken"`), so
/// clap alone would take `--task` for the hint. Nothing after `--` (the agent's) is touched.
pub(crate) fn task_before_context(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    let mut at = 0;
    while at + 1 < args.len() && args[at] != "--" {
        let next = args[at + 1].to_string_lossy();
        let taken = if next == "--task" {
            2.min(args.len() - at - 1)
        } else if next.starts_with("--task=") {
            1
        } else {
            0
        };
        if args[at] == "--add-context" && taken > 0 {
            // `--add-context`, then the task's tokens → the task's tokens, then `--add-context`.
            args[at..=at + taken].rotate_left(1);
            at += taken;
        }
        at += 1;
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    fn reordered(args: &[&str]) -> Vec<String> {
        task_before_context(args.iter().map(OsString::from))
            .into_iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_task_of_added_context_may_come_before_the_text() {
        assert_eq!(
            reordered(&["ralph", "--add-context", "--task", "alpha", "USE SQLITE"]),
            ["ralph", "--task", "alpha", "--add-context", "USE SQLITE"]
        );
        assert_eq!(
            reordered(&["ralph", "--add-context", "--task=alpha", "hint"]),
            ["ralph", "--task=alpha", "--add-context", "hint"]
        );
        for unchanged in [
            &["ralph", "--add-context", "hint", "--task", "alpha"][..],
            &["ralph", "--add-context", "--verbose is broken"],
            &["ralph", "x", "--", "--add-context", "--task", "a"],
            &["ralph", "--add-context"],
        ] {
            assert_eq!(reordered(unchanged), unchanged);
        }
        // A task id that is missing is clap's to report.
        assert_eq!(
            reordered(&["ralph", "--add-context", "--task"]),
            ["ralph", "--task", "--add-context"]
        );
        let cli = Cli::try_parse_from(task_before_context(
            ["ralph", "--add-context", "--task", "alpha", "hint"].map(OsString::from),
        ))
        .unwrap();
        assert_eq!(cli.commands.add_context.as_deref(), Some("hint"));
        assert_eq!(cli.commands.task.as_deref(), Some("alpha"));
    }

    #[test]
    fn the_command_definition_is_valid() {
        Cli::command().debug_assert();
    }
}

/// What `--export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportFormat {
    /// The `--list-tasks --json` schema.
    Json,
}
