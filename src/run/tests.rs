//! The loop's sequencing, in-process: a loop run to its end with a fake agent (a shell script,
//! as a custom agent) tells its reporters the expected events, in order.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use super::*;
use crate::output::Voice;
use crate::settings::Settings;
use crate::signal::StopFlag;

use sink::{Collected, Sink};

/// A directory with a fake agent whose answer is `script`'s output (its call number in `$n`),
/// and a config file that makes it the loop's agent, with `options` (config-file lines) too.
/// The agent runs as `/bin/sh SCRIPT`: a script just written cannot be executed while another
/// test's child, forked before it closed the file, still holds it open (ETXTBSY).
fn setup(script: &str, options: &str) -> (tempfile::TempDir, RunConfig) {
    let tmp = crate::testing::tempdir().unwrap();
    let agent = tmp.path().join("agent.sh");
    let calls = tmp.path().join("calls");
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\ncat > /dev/null\necho x >> '{}'\nn=$(wc -l < '{}')\n{script}\n",
            calls.display(),
            calls.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(tmp.path().join(".ralph")).unwrap();
    std::fs::write(
        tmp.path().join(".ralph/config.toml"),
        format!(
            "agent = \"fake\"\npause = \"0s\"\n{options}\n[agents.fake]\ncommand = [\"/bin/sh\", \"{}\"]\n",
            agent.display()
        ),
    )
    .unwrap();
    let settings = Settings::load(tmp.path(), &|_| None).unwrap();
    let config = RunConfig::resolve(
        "Build it".to_owned(),
        None,
        &settings.stack(&[]),
        &settings.agents,
    )
    .unwrap();
    (tmp, config)
}

/// Runs the loop of `config` in `cwd` with a collecting reporter (`task`: as a task loop's sink
/// stamps it); the exit status and the events heard.
fn run(config: &RunConfig, cwd: &Path, task: Option<&str>) -> (ExitStatus, Vec<serde_json::Value>) {
    let heard = Collected::default();
    let voice = Voice::for_loop(true, None, false);
    let sink = Sink::with(
        task.map(str::to_owned),
        vec![Box::new(heard.clone())],
        voice,
    );
    let dir = RalphDir::new(cwd);
    let stop = StopFlag::default();
    let knobs = Knobs::from_env();
    let env = Env {
        config,
        cwd,
        dir: &dir,
        stop: &stop,
        knobs: &knobs,
        repo: None,
        steps: plan::steps(config, cwd).unwrap(),
        rules: Rules::new(&config.options, knobs.error_pause, false),
        promises: Promises::new(&config.options),
        shape: Shape::Single,
        sink,
        sandbox: None,
    };
    let status = Runner::new(env, None).unwrap().run().unwrap();
    let events = heard.0.lock().unwrap().clone();
    (status, events)
}

fn names(events: &[serde_json::Value]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|event| event["event"].as_str())
        .collect()
}

#[test]
fn a_loop_that_keeps_its_promise_tells_start_iterations_completion_and_end_in_order() {
    let (tmp, config) = setup(
        "if [ \"$n\" -ge 2 ]; then echo '<promise>COMPLETE</promise>'; else echo working; fi",
        "",
    );
    let (status, events) = run(&config, tmp.path(), None);
    assert_eq!(status, ExitStatus::Success);
    assert_eq!(
        names(&events),
        [
            "run_started",
            "iteration_started",
            "iteration_finished",
            "iteration_started",
            "iteration_finished",
            "completed",
            "run_ended",
        ]
    );
    assert_eq!(events[2]["completion_detected"], false);
    assert_eq!(events[4]["completion_detected"], true);
    assert_eq!(events[5]["iteration"], 2);
    assert_eq!(events[6]["exit_code"], 0);
    assert_eq!(events[6]["iterations"], 2);
    assert!(events.iter().all(|event| event.get("task").is_none()));
}

#[test]
fn a_loop_stopped_by_its_limit_ends_without_completion() {
    let (tmp, config) = setup("echo still working", "max_iterations = 2");
    let (status, events) = run(&config, tmp.path(), None);
    assert_eq!(status, ExitStatus::LimitReached);
    assert_eq!(
        names(&events),
        [
            "run_started",
            "iteration_started",
            "iteration_finished",
            "iteration_started",
            "iteration_finished",
            "run_ended",
        ]
    );
    let end = events.last().unwrap();
    assert_eq!(end["exit_code"], 2);
    assert_eq!(end["reason"], "max iterations (2) reached");
}

#[test]
fn a_task_loops_events_each_carry_its_task() {
    let (tmp, config) = setup("echo '<promise>COMPLETE</promise>'", "");
    let (_, events) = run(&config, tmp.path(), Some("api"));
    assert_eq!(names(&events).first(), Some(&"run_started"));
    assert!(
        events.iter().all(|event| event["task"] == "api"),
        "{events:?}"
    );
}
