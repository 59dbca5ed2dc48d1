//! Verification gates: shell commands that must pass before ralph accepts the agent's claim.
//!
//! Each command runs through `sh -c` from the repository's top directory (or ralph's working
//! directory outside a repository), in its own process group, with a timeout, through the same
//! runner as the agent. Its output is shown with a `│ ` margin and only its tail is kept. It is
//! never searched for promises.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::agents::AgentCommand;
pub(crate) use crate::model::Verification;
use crate::output::{self, Voice};
use crate::sandbox::Sandbox;
use crate::signal::StopFlag;
use crate::stream::{self, EndedBy, OutputHandler, RunOptions, Segment};

/// Lines of output kept for the report and the next prompt.
const TAIL_LINES: usize = 40;
/// Characters kept per line.
const LINE_CHARS: usize = 300;

/// Keeps the last lines of a command's output and shows them as they come.
struct Tail<'a> {
    lines: std::collections::VecDeque<String>,
    current: String,
    voice: &'a Voice,
}

impl OutputHandler for Tail<'_> {
    fn on_segment(&mut self, segment: &Segment<'_>) {
        if segment.starts_line {
            self.current.clear();
        }
        if self.current.chars().count() < LINE_CHARS {
            self.current.extend(segment.text.chars().take(LINE_CHARS));
        }
        output::verify_output(
            self.voice,
            segment.text,
            segment.starts_line,
            segment.ends_line,
        );
        if segment.ends_line {
            if self.lines.len() == TAIL_LINES {
                self.lines.pop_front();
            }
            self.lines.push_back(std::mem::take(&mut self.current));
        }
    }

    fn on_tick(&mut self, _: Instant, _: Instant) {
        output::flush();
    }
}

/// Runs the commands in order and tells `finished` each result; stops at the first failure.
/// `tree` is the git tree of `dir` they run on, recorded as evidence with each result; `sandbox`,
/// the loop's, which they run in (they run the agent's code).
pub(crate) fn run_all(
    commands: &[String],
    (dir, tree, sandbox): (&Path, Option<&str>, Option<&Sandbox>),
    (timeout, grace): (Duration, Duration),
    stop: &StopFlag,
    voice: &Voice,
    finished: &dyn Fn(&Verification),
) -> Vec<Verification> {
    let mut results = Vec::new();
    for command in commands {
        output::verify_started(voice, command);
        let started = Instant::now();
        let mut result = run_one(command, (dir, sandbox), (timeout, grace), stop, voice);
        result.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        result.tree = tree.map(str::to_owned);
        finished(&result);
        let passed = result.passed;
        results.push(result);
        if !passed || stop.is_stopping() {
            break;
        }
    }
    results
}

fn run_one(
    command: &str,
    (dir, sandbox): (&Path, Option<&Sandbox>),
    (timeout, grace): (Duration, Duration),
    stop: &StopFlag,
    voice: &Voice,
) -> Verification {
    let shell = AgentCommand {
        program: "sh".into(),
        args: vec!["-c".into(), command.into()],
        env: Vec::new(),
        clear_env: false,
        stdin: None,
        usage_file: None,
        acp: None,
    };
    let options = RunOptions {
        grace,
        leak_timeout: Duration::from_millis(500),
        tick: Duration::from_millis(100),
        run_timeout: Some(timeout),
        idle_timeout: None,
        completion_grace: None,
    };
    let mut tail = Tail {
        lines: std::collections::VecDeque::new(),
        current: String::new(),
        voice,
    };
    // The command runs the agent's code: inside the loop's sandbox when it has one.
    let shell = match sandbox {
        Some(sandbox) => sandbox.wrap(&shell, None),
        None => shell,
    };
    let outcome = stream::run(&shell, dir, &options, stop, &mut tail);
    let output_tail = tail.lines.into_iter().collect::<Vec<_>>().join("\n");
    match outcome {
        Ok(outcome) => {
            let timed_out = outcome.ended_by.is_some_and(|by| by != EndedBy::User);
            let exit_code = (!timed_out).then_some(outcome.exit_code);
            Verification {
                command: command.to_owned(),
                passed: outcome.ended_by.is_none() && outcome.exit_code == 0,
                exit_code,
                timed_out,
                output_tail,
                ..Verification::default()
            }
        }
        Err(err) => Verification {
            command: command.to_owned(),
            passed: false,
            exit_code: None,
            timed_out: false,
            output_tail: format!("{err:#}"),
            ..Verification::default()
        },
    }
}

/// The files of `files` (relative to `root`) with a line of a conflict marker left.
pub(crate) fn marked<'f>(root: &Path, files: &'f [String]) -> Vec<&'f String> {
    (files.iter())
        .filter(|file| {
            std::fs::read(root.join(file)).is_ok_and(|bytes| {
                String::from_utf8_lossy(&bytes).lines().any(|line| {
                    line.starts_with("<<<<<<< ")
                        || line.starts_with(">>>>>>> ")
                        || line == "======="
                })
            })
        })
        .collect()
}

/// Whether `text` holds a conflict block as a merge writes it: a `<<<<<<< ` line, later a
/// `=======` line, later a `>>>>>>> ` line.
fn has_conflict_block(text: &str) -> bool {
    let mut seen = 0;
    for line in text.lines().map(|line| line.trim_end_matches('\r')) {
        seen = match seen {
            0 if line.starts_with("<<<<<<< ") => 1,
            1 if line == "=======" => 2,
            2 if line.starts_with(">>>>>>> ") => return true,
            seen => seen,
        };
    }
    false
}

/// The check a landing makes of the files a merge changed (`files`, each as `read` gives it, or
/// gone): failed when any holds a conflict block, naming them. A merge the agent was handed and
/// did not finish (or one cut short by a kill) never reaches the base this way.
pub(crate) fn no_conflict_blocks(
    files: &[String],
    read: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Option<Verification> {
    let left: Vec<&str> = (files.iter())
        .filter(|file| {
            read(file).is_some_and(|bytes| has_conflict_block(&String::from_utf8_lossy(&bytes)))
        })
        .map(String::as_str)
        .collect();
    (!left.is_empty()).then(|| Verification {
        command: "no conflict markers in the merged files".to_owned(),
        passed: false,
        exit_code: Some(1),
        timed_out: false,
        output_tail: format!(
            "conflict markers (<<<<<<<, =======, >>>>>>>) are left in {}: resolve each conflict and remove the markers.",
            left.join(", ")
        ),
        ..Verification::default()
    })
}

/// The one failed check that stands for failed `--holdout` checks (of `results`) where the agent
/// and the event stream see it: how many failed, and with `tell` (`--holdout-feedback`) `names`
/// their commands or `full` their output too; none when all passed.
pub(crate) fn holdout_refusal(results: &[Verification], tell: &str) -> Option<Verification> {
    let failed: Vec<&Verification> = results.iter().filter(|result| !result.passed).collect();
    if failed.is_empty() {
        return None;
    }
    let mut output = format!(
        "{} of {} holdout checks failed",
        failed.len(),
        results.len()
    );
    for check in failed.iter().filter(|_| tell != "count") {
        output.push_str(&format!(
            "\n`{}` failed ({})",
            check.command,
            check.outcome()
        ));
        if tell == "full" && !check.output_tail.is_empty() {
            output.push_str(&format!(":\n{}", check.output_tail));
        }
    }
    Some(Verification {
        command: "holdout checks".to_owned(),
        passed: false,
        exit_code: Some(1),
        timed_out: false,
        output_tail: output,
        ..Verification::default()
    })
}

/// The check a landing makes of the files a merge changed: failed when any is protected
/// (`--protect`) and not one its task may change, naming them.
pub(crate) fn no_protected_changes(
    protection: &crate::protect::Protection,
    files: &[String],
) -> Option<Verification> {
    let touched: Vec<&str> = (files.iter())
        .filter(|file| protection.guards(file))
        .map(String::as_str)
        .collect();
    (!touched.is_empty()).then(|| Verification {
        command: "no change to protected paths".to_owned(),
        passed: false,
        exit_code: Some(1),
        timed_out: false,
        output_tail: format!(
            "the work changes protected paths its task may not change: {}. Put them back as the base has them (git checkout <base> -- PATH), and change the code instead.",
            touched.join(", ")
        ),
        ..Verification::default()
    })
}

/// One failed check per file in `files` (relative to `root`) that still has a line of a
/// conflict marker (`<<<<<<< `, `=======`, `>>>>>>> `).
pub(crate) fn conflict_markers(root: &Path, files: &[String]) -> Vec<Verification> {
    marked(root, files)
        .into_iter()
        .map(|file| Verification {
            command: format!("no conflict markers in {file}"),
            passed: false,
            exit_code: Some(1),
            timed_out: false,
            output_tail: format!("{file} still has conflict markers (<<<<<<<, =======, >>>>>>>)."),
            ..Verification::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_holdout_checks_stand_as_one_that_says_only_what_it_may() {
        let check = |command: &str, passed: bool| Verification {
            command: command.to_owned(),
            passed,
            exit_code: Some(i32::from(!passed)),
            output_tail: "SECRET".to_owned(),
            ..Verification::default()
        };
        let results = [check("sh /h/a.sh", false), check("sh /h/b.sh", true)];
        assert!(holdout_refusal(&results[1..], "count").is_none());
        let count = holdout_refusal(&results, "count").unwrap();
        assert_eq!(
            (count.command.as_str(), count.output_tail.as_str()),
            ("holdout checks", "1 of 2 holdout checks failed")
        );
        let names = holdout_refusal(&results, "names").unwrap().output_tail;
        assert!(names.contains("`sh /h/a.sh` failed (exit code 1)") && !names.contains("SECRET"));
        let full = holdout_refusal(&results, "full").unwrap().output_tail;
        assert!(full.contains("SECRET") && !full.contains("b.sh"), "{full}");
    }

    fn verify(command: &str, timeout: Duration) -> Verification {
        let results = run_all(
            &[command.to_owned()],
            (
                Path::new("."),
                Some("4b825dc642cb6eb9a060e54bf8d69288fbee4904"),
                None,
            ),
            (timeout, Duration::from_millis(200)),
            &StopFlag::default(),
            &Voice::plain(),
            &|_| {},
        );
        results.into_iter().next().unwrap()
    }

    #[test]
    fn passing_and_failing_commands() {
        let passed = verify("true", Duration::from_secs(10));
        assert!(passed.passed);
        assert_eq!(
            passed.tree.as_deref(),
            Some("4b825dc642cb6eb9a060e54bf8d69288fbee4904"),
            "the tree it ran on is kept as evidence"
        );
        let failed = verify("echo one; echo two >&2; exit 3", Duration::from_secs(10));
        assert!(!failed.passed);
        assert_eq!(failed.exit_code, Some(3));
        assert!(failed.output_tail.contains("one") && failed.output_tail.contains("two"));
    }

    #[test]
    fn a_command_over_its_time_is_ended() {
        let slow = verify("sleep 30", Duration::from_millis(300));
        assert!(!slow.passed && slow.timed_out);
        assert_eq!(slow.outcome(), "timed out");
    }

    #[test]
    fn only_the_tail_is_kept() {
        let long = verify("seq 1 1000", Duration::from_secs(10));
        assert_eq!(long.output_tail.lines().count(), TAIL_LINES);
        assert!(long.output_tail.ends_with("1000"));
    }

    #[test]
    fn a_conflict_block_is_three_markers_in_order() {
        assert!(has_conflict_block(
            "a\n<<<<<<< HEAD\nx\n=======\ny\n>>>>>>> main\nb\n"
        ));
        assert!(has_conflict_block(
            "<<<<<<< ours\r\nx\r\n||||||| base\r\n=======\r\n>>>>>>> theirs\r\n"
        ));
        assert!(!has_conflict_block("=======\nheading underline\n"));
        assert!(!has_conflict_block(">>>>>>> main\n=======\n<<<<<<< HEAD\n"));
        let dir = crate::testing::tempdir().unwrap();
        std::fs::write(
            dir.path().join("left.txt"),
            "<<<<<<< HEAD\n=======\n>>>>>>> x\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("clean.txt"), "fine\n").unwrap();
        let files = [
            "left.txt".to_owned(),
            "clean.txt".to_owned(),
            "gone.txt".to_owned(),
        ];
        let read = |file: &str| std::fs::read(dir.path().join(file)).ok();
        let check = no_conflict_blocks(&files, &read).unwrap();
        assert!(
            !check.passed && check.output_tail.contains("left in left.txt:"),
            "{check:?}"
        );
        assert!(no_conflict_blocks(&files[1..], &read).is_none());
    }
}
