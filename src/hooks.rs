//! Hooks: the user's shell commands run when an iteration ends (`on_iteration`), when the loop
//! completes (`on_complete`), when it stops for any other reason (`on_stop`), and on the events
//! they name (`on_event`, `EVENT=CMD`: e.g. `commit_failed=./page-me.sh`).
//!
//! Each runs through `sh -c` from the repository's top directory (ralph's working directory
//! outside one), in its own process group, with the event's JSON object (the one `--json`
//! prints) on stdin and `RALPH_EVENT`, `RALPH_ITERATION`, `RALPH_STOP_REASON`,
//! `RALPH_EXIT_CODE`, `RALPH_TASK` in its environment, for at most `hook_timeout`. Its output is
//! shown with a `hook │ ` margin. A hook that fails or runs too long is a warning: it never
//! stops the loop.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::agents::AgentCommand;
use crate::event::{EVENT_NAMES, LoopEvent, Reporter, Stamped};
use crate::options::LoopOptions;
use crate::output;
use crate::signal::StopFlag;
use crate::stream::{self, EndedBy, OutputHandler, RunOptions, Segment};

/// When a hook runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    Iteration,
    Complete,
    Stop,
}

impl When {
    /// The setting that holds its command.
    fn key(self) -> &'static str {
        match self {
            Self::Iteration => "on_iteration",
            Self::Complete => "on_complete",
            Self::Stop => "on_stop",
        }
    }
}

/// One `on_event` setting, `EVENT=CMD`, as the event's name and the command; why not, when it
/// names no event or no command.
pub(crate) fn parse_on_event(setting: &str) -> Result<(&str, &str), String> {
    let (name, command) = setting.split_once('=').unwrap_or((setting, ""));
    let name = name.trim();
    if !EVENT_NAMES.contains(&name) {
        let names = match crate::options::closest_in(name, EVENT_NAMES.iter().copied()) {
            Some(known) => format!(
                "did you mean {known}? The events are {}",
                EVENT_NAMES.join(", ")
            ),
            None => format!("the events are {}", EVENT_NAMES.join(", ")),
        };
        return Err(format!(
            "--on-event {setting}: no event is named \"{name}\"; give EVENT=CMD ({names})"
        ));
    }
    if command.trim().is_empty() {
        return Err(format!(
            "--on-event {setting}: no command after \"{name}=\"; give EVENT=CMD, e.g. {name}=./alert.sh"
        ));
    }
    Ok((name, command))
}

/// The hooks of a loop, as a reporter: `on_iteration` after each iteration, `on_event`'s on the
/// events they name, and (for the run itself, `ends`) `on_complete` or `on_stop` at its end.
pub(crate) struct Hooks {
    on_iteration: Option<String>,
    on_complete: Option<String>,
    on_stop: Option<String>,
    /// `on_event`: each event's name and its command.
    on_event: Vec<(String, String)>,
    /// Where they run: the repository's top.
    dir: std::path::PathBuf,
    timeout: Duration,
    ends: bool,
    /// The loop's voice: a hook's output is shown in it (a task loop's too).
    voice: output::Voice,
}

impl Hooks {
    /// The hooks `options` set, if any.
    pub(crate) fn new(
        options: &LoopOptions,
        dir: &Path,
        ends: bool,
        voice: output::Voice,
    ) -> Option<Self> {
        let set = |command: &Option<String>| command.clone().filter(|c| !c.trim().is_empty());
        let hooks = Self {
            on_iteration: set(&options.on_iteration),
            on_complete: set(&options.on_complete).filter(|_| ends),
            on_stop: set(&options.on_stop).filter(|_| ends),
            // Checked with the settings: one that does not parse is not a hook.
            on_event: (options.on_event.iter())
                .filter_map(|setting| parse_on_event(setting).ok())
                .map(|(name, command)| (name.to_owned(), command.to_owned()))
                .collect(),
            dir: dir.to_owned(),
            timeout: options.hook_timeout,
            ends,
            voice,
        };
        let any = hooks.on_iteration.is_some()
            || hooks.on_complete.is_some()
            || hooks.on_stop.is_some()
            || !hooks.on_event.is_empty();
        any.then_some(hooks)
    }

    /// Runs `command` for `stamped`, named `hook` in its warning (`goes_on`: the loop is still
    /// running).
    fn run(&self, (hook, goes_on): (&str, bool), command: &str, stamped: &Stamped<'_>) {
        let event = stamped.to_value();
        let hook = Hook {
            name: hook,
            goes_on,
        };
        run(
            &hook,
            command,
            &event,
            &self.dir,
            (self.timeout, &self.voice),
        );
    }
}

impl Reporter for Hooks {
    fn event(&mut self, stamped: &Stamped<'_>) {
        let name = stamped.event.name();
        let ending = matches!(name, "run_ended" | "parallel_ended");
        for (_, command) in self.on_event.iter().filter(|(event, _)| event == name) {
            self.run((&format!("on_event {name}"), !ending), command, stamped);
        }
        let when = match stamped.event {
            LoopEvent::IterationFinished(_) => When::Iteration,
            LoopEvent::RunEnded(end) if self.ends => ended(end.exit_code),
            LoopEvent::ParallelEnded(end) if self.ends => ended(end.exit_code),
            _ => return,
        };
        let command = match when {
            When::Iteration => &self.on_iteration,
            When::Complete => &self.on_complete,
            When::Stop => &self.on_stop,
        };
        if let Some(command) = command {
            self.run((when.key(), when == When::Iteration), command, stamped);
        }
    }
}

/// A hook as its warning names it: its setting, and whether the loop goes on after it.
struct Hook<'a> {
    name: &'a str,
    goes_on: bool,
}

/// The hook of a run's end: `on_complete` for exit code 0, else `on_stop`.
fn ended(exit_code: u8) -> When {
    if exit_code == 0 {
        When::Complete
    } else {
        When::Stop
    }
}

/// Runs `command` for `event` (an event object with its `event` field); a warning when it fails.
fn run(
    hook: &Hook<'_>,
    command: &str,
    event: &serde_json::Value,
    dir: &Path,
    (timeout, voice): (Duration, &output::Voice),
) {
    let field = |name: &str| -> OsString {
        match event.get(name) {
            Some(serde_json::Value::String(text)) => text.into(),
            Some(serde_json::Value::Null) | None => OsString::new(),
            Some(other) => other.to_string().into(),
        }
    };
    let env = vec![
        ("RALPH_EVENT".to_owned(), field("event")),
        ("RALPH_ITERATION".to_owned(), field("iteration")),
        ("RALPH_STOP_REASON".to_owned(), field("reason")),
        ("RALPH_EXIT_CODE".to_owned(), field("exit_code")),
        ("RALPH_TASK".to_owned(), field("task")),
    ];
    let shell = AgentCommand {
        program: "sh".into(),
        args: vec!["-c".into(), command.into()],
        env,
        clear_env: false,
        stdin: Some(format!("{event}\n")),
        usage_file: None,
        acp: None,
    };
    let options = RunOptions {
        grace: Duration::from_secs(2),
        leak_timeout: Duration::from_millis(500),
        tick: Duration::from_millis(100),
        run_timeout: Some(timeout),
        idle_timeout: None,
        completion_grace: None,
    };
    // A hook is not stopped by the user's Ctrl+C (it may be the one telling them about it);
    // its time limit ends it.
    let outcome = stream::run(
        &shell,
        dir,
        &options,
        &StopFlag::default(),
        &mut Shown(voice),
    );
    let why = match outcome {
        Ok(outcome) if outcome.ended_by == Some(EndedBy::RunTimeout) => {
            format!("stopped after {timeout:?}")
        }
        Ok(outcome) if outcome.exit_code != 0 => format!("exit code {}", outcome.exit_code),
        Ok(_) => return,
        Err(err) => format!("{err:#}"),
    };
    output::hook_failed(voice, (hook.name, hook.goes_on), &why);
}

/// Shows a hook's output with a margin, in the loop's voice.
struct Shown<'a>(&'a output::Voice);

impl OutputHandler for Shown<'_> {
    fn on_segment(&mut self, segment: &Segment<'_>) {
        output::hook_output(self.0, segment.text, segment.starts_line, segment.ends_line);
    }

    fn on_tick(&mut self, _: Instant, _: Instant) {
        output::flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_on_event_setting_names_an_event_and_a_command() {
        assert_eq!(
            parse_on_event("commit_failed=./alert.sh --loud"),
            Ok(("commit_failed", "./alert.sh --loud"))
        );
        // The command may hold `=` itself.
        assert_eq!(
            parse_on_event("run_ended=X=1 ./x.sh"),
            Ok(("run_ended", "X=1 ./x.sh"))
        );
        let unknown = parse_on_event("commit_faild=./a.sh").unwrap_err();
        assert!(
            unknown.contains("no event is named \"commit_faild\"")
                && unknown.contains("did you mean commit_failed?"),
            "{unknown}"
        );
        for bare in ["commit_failed", "commit_failed=", "commit_failed=  "] {
            let error = parse_on_event(bare).unwrap_err();
            assert!(
                error.contains("no command after \"commit_failed=\""),
                "{error}"
            );
        }
    }
}
