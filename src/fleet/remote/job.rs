//! Which engine job a worker runs in, read from the variables each engine sets: recorded in the
//! worker's claims so `--status --remote` leads from a stuck task to its job's log, and so a
//! retried job (a GitHub re-run, a Slurm requeue, a Kubernetes pod retried) takes back the tasks
//! its earlier attempt held without waiting for their claims to go stale.

use crate::git::Job;

/// The job this worker runs in, from its environment (`var` reads one variable); `None` outside
/// the engines ralph knows. GitHub Actions is asked first (its runners may run on Kubernetes),
/// then Slurm, then Kubernetes.
pub(crate) fn detect(var: &dyn Fn(&str) -> Option<String>, host: &str) -> Option<Job> {
    let get = |name: &str| var(name).filter(|value| !value.trim().is_empty());
    if get("GITHUB_ACTIONS").as_deref() == Some("true") {
        return Some(github(&get));
    }
    if let Some(id) = get("SLURM_JOB_ID") {
        return Some(slurm(&get, &id, host));
    }
    if get("KUBERNETES_SERVICE_HOST").is_some() {
        return Some(kubernetes(&get, host));
    }
    None
}

/// The slot number a job template gives each of its workers when the engine has none of its
/// own (a GitHub Actions matrix passes `${{ matrix.worker }}`).
const INDEX: &str = "RALPH_JOB_INDEX";

fn github(get: &dyn Fn(&str) -> Option<String>) -> Job {
    let run = get("GITHUB_RUN_ID").unwrap_or_else(|| "?".to_owned());
    let job = get("GITHUB_JOB").unwrap_or_else(|| "?".to_owned());
    let index = get(INDEX);
    let attempt = get("GITHUB_RUN_ATTEMPT").filter(|attempt| attempt != "1");
    let mut label = format!("GitHub Actions run {run}, job {job}");
    if let Some(index) = &index {
        label.push_str(&format!(" #{index}"));
    }
    if let Some(attempt) = &attempt {
        label.push_str(&format!(", attempt {attempt}"));
    }
    let url = match (get("GITHUB_SERVER_URL"), get("GITHUB_REPOSITORY")) {
        (Some(server), Some(repository)) => Some(format!(
            "{}/{repository}/actions/runs/{run}",
            server.trim_end_matches('/')
        )),
        _ => None,
    };
    // Every job of a matrix has the same GITHUB_JOB: without an index they cannot be told apart.
    let slot = index.map(|index| format!("github:{run}:{job}:{index}"));
    Job {
        engine: "github".to_owned(),
        slot,
        label,
        url,
    }
}

fn slurm(get: &dyn Fn(&str) -> Option<String>, id: &str, host: &str) -> Job {
    let array = get("SLURM_ARRAY_JOB_ID").zip(get("SLURM_ARRAY_TASK_ID"));
    let shown = array
        .as_ref()
        .map_or_else(|| id.to_owned(), |(job, task)| format!("{job}_{task}"));
    let node = get("SLURMD_NODENAME").unwrap_or_else(|| host.to_owned());
    let mut label = format!("Slurm job {shown}");
    if array.is_some() {
        label.push_str(&format!(" (job id {id})"));
    }
    label.push_str(&format!(" on node {node}"));
    if let Some(restarts) = get("SLURM_RESTART_COUNT").filter(|count| count != "0") {
        label.push_str(&format!(", requeued {restarts}×"));
    }
    let cluster = get("SLURM_CLUSTER_NAME").unwrap_or_default();
    Job {
        engine: "slurm".to_owned(),
        // A requeued job keeps its id (and its array index).
        slot: Some(format!("slurm:{cluster}:{shown}")),
        label,
        url: None,
    }
}

fn kubernetes(get: &dyn Fn(&str) -> Option<String>, host: &str) -> Job {
    let pod = get("POD_NAME").unwrap_or_else(|| host.to_owned());
    let job = get("JOB_NAME");
    let index = get("JOB_COMPLETION_INDEX");
    let mut label = format!("Kubernetes pod {pod}");
    match (&job, &index) {
        (Some(job), Some(index)) => label.push_str(&format!(" (job {job}, index {index})")),
        (Some(job), None) => label.push_str(&format!(" (job {job})")),
        (None, Some(index)) => label.push_str(&format!(" (index {index})")),
        (None, None) => {}
    }
    let namespace = get("POD_NAMESPACE").unwrap_or_default();
    // A retried pod of an Indexed Job has another name but the same index.
    let slot = job
        .zip(index)
        .map(|(job, index)| format!("kubernetes:{namespace}/{job}:{index}"));
    Job {
        engine: "kubernetes".to_owned(),
        slot,
        label,
        url: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(vars: &[(&str, &str)]) -> Option<Job> {
        let var = |name: &str| {
            (vars.iter())
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        };
        detect(&var, "box")
    }

    #[test]
    fn a_worker_started_by_hand_runs_in_no_job() {
        assert_eq!(job(&[("HOME", "/root")]), None);
        assert_eq!(job(&[("SLURM_JOB_ID", " ")]), None, "blank is unset");
    }

    #[test]
    fn a_github_matrix_job_names_its_run_job_index_and_address() {
        let github = job(&[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_RUN_ID", "9001"),
            ("GITHUB_JOB", "work"),
            ("GITHUB_RUN_ATTEMPT", "2"),
            ("GITHUB_SERVER_URL", "https://github.example/"),
            ("GITHUB_REPOSITORY", "me/app"),
            ("RALPH_JOB_INDEX", "3"),
            // Runners on Kubernetes are GitHub jobs first.
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
        ])
        .unwrap();
        assert_eq!(github.engine, "github");
        assert_eq!(
            github.label,
            "GitHub Actions run 9001, job work #3, attempt 2"
        );
        assert_eq!(
            github.url.as_deref(),
            Some("https://github.example/me/app/actions/runs/9001")
        );
        assert_eq!(github.slot.as_deref(), Some("github:9001:work:3"));
    }

    #[test]
    fn matrix_jobs_without_an_index_have_no_slot_to_share() {
        let github = job(&[("GITHUB_ACTIONS", "true"), ("GITHUB_RUN_ID", "1")]).unwrap();
        assert_eq!(github.slot, None);
        assert_eq!(github.url, None);
    }

    #[test]
    fn a_slurm_array_task_keeps_its_slot_when_requeued() {
        let vars = [
            ("SLURM_JOB_ID", "42"),
            ("SLURM_ARRAY_JOB_ID", "41"),
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURMD_NODENAME", "n7"),
            ("SLURM_CLUSTER_NAME", "lab"),
        ];
        let first = job(&vars).unwrap();
        assert_eq!(first.label, "Slurm job 41_2 (job id 42) on node n7");
        let mut requeued = vars.to_vec();
        requeued.push(("SLURM_RESTART_COUNT", "1"));
        let again = job(&requeued).unwrap();
        assert_eq!(
            again.label,
            "Slurm job 41_2 (job id 42) on node n7, requeued 1×"
        );
        assert_eq!(first.slot, again.slot);
        assert_eq!(first.slot.as_deref(), Some("slurm:lab:41_2"));
        let single = job(&[("SLURM_JOB_ID", "7")]).unwrap();
        assert_eq!(single.label, "Slurm job 7 on node box");
    }

    #[test]
    fn a_kubernetes_pod_is_found_by_its_job_and_index() {
        let pod = job(&[
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
            ("POD_NAME", "ralph-workers-1-x7k2p"),
            ("POD_NAMESPACE", "ci"),
            ("JOB_NAME", "ralph-workers"),
            ("JOB_COMPLETION_INDEX", "1"),
        ])
        .unwrap();
        assert_eq!(
            pod.label,
            "Kubernetes pod ralph-workers-1-x7k2p (job ralph-workers, index 1)"
        );
        assert_eq!(pod.slot.as_deref(), Some("kubernetes:ci/ralph-workers:1"));
        let bare = job(&[("KUBERNETES_SERVICE_HOST", "10.0.0.1")]).unwrap();
        assert_eq!(
            (bare.label.as_str(), bare.slot),
            ("Kubernetes pod box", None)
        );
    }
}
