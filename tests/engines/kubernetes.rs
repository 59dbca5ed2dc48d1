//! The shipped Kubernetes manifest (`docs/kubernetes-workers.yaml`): no cluster can run here, so
//! it is checked against the Kubernetes schemas (`kubernetes-validate`, offline) and for what
//! the schemas cannot say (which exit code does what, and where the git credential is).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use yaml_rust2::{Yaml, YamlLoader};

use crate::fleet::{skipped, tool};
use crate::support::run_with_deadline;

const MANIFEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/kubernetes-workers.yaml");

/// The versions checked: the first with `backoffLimitPerIndex` and `podFailurePolicy` both
/// generally available, and the newest the validator knows.
const VERSIONS: [&str; 2] = ["1.33.0", "1.37.0"];

fn validate(validator: &Path, file: &Path, version: &str) -> (bool, String) {
    let mut command = Command::new(validator);
    command.args(["--strict", "-k", version]).arg(file);
    let output = run_with_deadline(&mut command, Duration::from_secs(60));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), printed)
}

#[test]
fn the_manifest_is_a_valid_indexed_job_for_the_kubernetes_schemas() {
    let Some(validator) = tool("kubernetes-validate") else {
        skipped(
            "kubernetes-validate is not installed (scripts/install-engines.sh installs it from PyPI)",
        );
        return;
    };
    for version in VERSIONS {
        let (valid, printed) = validate(&validator, Path::new(MANIFEST), version);
        assert!(valid, "{version}: {printed}");
        assert!(
            printed.contains("passed for resource job/ralph-workers"),
            "{printed}"
        );
    }
    // The check can fail: a misspelt field is refused.
    let dir = tempfile::tempdir().unwrap();
    let misspelt = dir.path().join("workers.yaml");
    let text = std::fs::read_to_string(MANIFEST).unwrap();
    std::fs::write(
        &misspelt,
        text.replace("completionMode:", "completionsMode:"),
    )
    .unwrap();
    let (valid, printed) = validate(&validator, &misspelt, VERSIONS[0]);
    assert!(!valid, "{printed}");
    assert!(
        printed.contains("'completionsMode' was unexpected"),
        "{printed}"
    );
}

fn job() -> Yaml {
    let text = std::fs::read_to_string(MANIFEST).unwrap();
    let docs = YamlLoader::load_from_str(&text).unwrap();
    docs.into_iter()
        .find(|doc| doc["kind"].as_str() == Some("Job"))
        .expect("a Job")
}

/// The action of the podFailurePolicy rule that matches exit code `code`.
fn action_for(job: &Yaml, code: i64) -> Option<String> {
    let rules = job["spec"]["podFailurePolicy"]["rules"].as_vec()?;
    rules.iter().find_map(|rule| {
        let codes = rule["onExitCodes"]["values"].as_vec()?;
        codes
            .iter()
            .any(|value| value.as_i64() == Some(code))
            .then(|| rule["action"].as_str().unwrap_or_default().to_owned())
    })
}

#[test]
fn the_job_maps_ralphs_exit_codes_and_keeps_the_git_credential_from_the_agent() {
    let job = job();
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"].as_str(), Some("Indexed"));
    assert!(spec["parallelism"].as_i64().is_some() && spec["completions"].as_i64().is_some());
    assert_eq!(
        action_for(&job, 1).as_deref(),
        Some("FailJob"),
        "the remote is unusable"
    );
    assert_eq!(
        action_for(&job, 2).as_deref(),
        Some("FailIndex"),
        "a spent budget"
    );
    assert_eq!(
        action_for(&job, 3).as_deref(),
        Some("FailIndex"),
        "failed tasks"
    );
    assert_eq!(action_for(&job, 130), None, "a cancelled worker is retried");
    // FailIndex needs a limit per index.
    assert!(spec["backoffLimitPerIndex"].as_i64().is_some());
    let rules = spec["podFailurePolicy"]["rules"].as_vec().unwrap();
    let disruption = rules
        .iter()
        .find(|rule| rule["onPodConditions"][0]["type"].as_str() == Some("DisruptionTarget"))
        .expect("pod disruptions are retried");
    assert_eq!(disruption["action"].as_str(), Some("Ignore"));

    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"].as_str(), Some("Never"));
    let worker = &pod["containers"][0];
    assert_eq!(worker["name"].as_str(), Some("worker"));
    let script = worker["args"][0].as_str().unwrap();
    assert!(
        script.contains("exec ralph --worker --fleet-budget $sandbox"),
        "{script}"
    );
    let env = worker["env"].as_vec().unwrap();
    let var = |name: &str| env.iter().find(|var| var["name"].as_str() == Some(name));
    // What a claim shows of its pod (src/run/remote/job.rs reads these).
    for (name, path) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        (
            "JOB_NAME",
            "metadata.labels['batch.kubernetes.io/job-name']",
        ),
    ] {
        let from = &var(name).unwrap_or_else(|| panic!("{name}"))["valueFrom"]["fieldRef"];
        assert_eq!(from["fieldPath"].as_str(), Some(path), "{name}");
    }
    let key = &var("ANTHROPIC_API_KEY").unwrap()["valueFrom"]["secretKeyRef"];
    assert_eq!(key["name"].as_str(), Some("ralph-agent-key"));
    // The git credential is a file under HOME, which a sandboxed agent sees as an empty folder.
    let home = var("HOME").unwrap()["value"].as_str().unwrap().to_owned();
    let mounts = worker["volumeMounts"].as_vec().unwrap();
    let credential = mounts
        .iter()
        .find(|mount| mount["name"].as_str() == Some("git-credentials"))
        .unwrap();
    let at = credential["mountPath"].as_str().unwrap();
    assert!(at.starts_with(&format!("{home}/")), "{at} under {home}");
    assert!(
        script.contains("store --file=$HOME/.ralph-git/.git-credentials"),
        "{script}"
    );
    assert_eq!(at, format!("{home}/.ralph-git"));
}
