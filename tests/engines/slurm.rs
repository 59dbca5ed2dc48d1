//! The shipped Slurm script (`docs/slurm-workers.sbatch`) submitted with `sbatch` to a cluster of
//! one node that the test starts for itself: its own `munged`, `slurmctld` and `slurmd`, on free
//! ports, with every file under a temporary folder.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::fleet::{self, merges_of, remote_claims, remote_tasks, skipped, tool};
use crate::support::{TestEnv, run_with_deadline, wait_until};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/slurm-workers.sbatch");

/// A one-node Slurm cluster, ended (its jobs cancelled, its daemons stopped) when dropped.
struct Cluster {
    dir: PathBuf,
    daemons: Vec<Child>,
    jobs: Vec<String>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap()
}

impl Cluster {
    /// Starts the daemons in `dir`; `None` (having said why) when Slurm or munge is missing or
    /// does not come up.
    fn start(dir: &Path) -> Option<Self> {
        let [Some(munged), Some(slurmctld), Some(slurmd), Some(_)] =
            ["munged", "slurmctld", "slurmd", "sbatch"].map(|name| {
                tool(name).or_else(|| {
                    let sbin = Path::new("/usr/sbin").join(name);
                    sbin.exists().then_some(sbin)
                })
            })
        else {
            skipped("Slurm is not installed (scripts/install-engines.sh installs slurm-wlm)");
            return None;
        };
        if !nix::unistd::geteuid().is_root() {
            skipped("the Slurm test starts slurmd, which runs jobs as their users: it needs root");
            return None;
        }
        fs::create_dir_all(dir.join("state")).unwrap();
        fs::create_dir_all(dir.join("spool")).unwrap();
        let key = dir.join("munge.key");
        let mut random = [0_u8; 1024];
        std::io::Read::read_exact(&mut fs::File::open("/dev/urandom").unwrap(), &mut random)
            .unwrap();
        fs::write(&key, random).unwrap();
        fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o400)).unwrap();
        let socket = dir.join("munge.sock");
        let mut cluster = Self {
            dir: dir.to_owned(),
            daemons: Vec::new(),
            jobs: Vec::new(),
        };
        let mut munge = Command::new(munged);
        munge.args(["-F", "--force"]).args([
            format!("--socket={}", socket.display()),
            format!("--key-file={}", key.display()),
            format!("--pid-file={}", dir.join("munged.pid").display()),
            format!("--seed-file={}", dir.join("munge.seed").display()),
        ]);
        cluster.spawn(munge, "munged");
        wait_until(Duration::from_secs(10), "munged's socket", || {
            socket.exists()
        });
        let host = nix::unistd::gethostname()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let host = host.split('.').next().unwrap_or_default().to_owned();
        fs::write(cluster.conf(), config(dir, &host, &socket)).unwrap();
        for daemon in [slurmctld, slurmd] {
            let mut command = Command::new(&daemon);
            command.env("SLURM_CONF", cluster.conf()).arg("-D");
            let name = daemon.file_name().unwrap().to_string_lossy().into_owned();
            if name == "slurmctld" {
                command.arg("-i");
            }
            cluster.spawn(command, &name);
        }
        let mut up = false;
        for _ in 0..200 {
            let state = cluster.client("sinfo", &["-h", "-o", "%T"]);
            if state.trim() == "idle" {
                up = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if !up {
            let log = fs::read_to_string(dir.join("slurmctld.log")).unwrap_or_default();
            panic!("the Slurm node did not come up in 10 s; slurmctld's log:\n{log}");
        }
        Some(cluster)
    }

    fn conf(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }

    fn spawn(&mut self, mut command: Command, name: &str) {
        let log = fs::File::create(self.dir.join(format!("{name}.out"))).unwrap();
        command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        self.daemons.push(command.spawn().unwrap());
    }

    /// A Slurm command's standard output ("" when it failed).
    fn client(&self, program: &str, args: &[&str]) -> String {
        self.try_client(program, args).unwrap_or_default()
    }

    /// A Slurm command's standard output, `None` when it failed.
    fn try_client(&self, program: &str, args: &[&str]) -> Option<String> {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", self.conf()).args(args);
        let output = run_with_deadline(&mut command, Duration::from_secs(20));
        let out = String::from_utf8_lossy(&output.stdout).into_owned();
        output.status.success().then_some(out)
    }

    /// `JobState` of one array task.
    fn state(&self, job: &str) -> String {
        let shown = self.client("scontrol", &["show", "job", "-o", job]);
        field(&shown, "JobState")
    }
}

fn field(shown: &str, name: &str) -> String {
    let prefix = format!("{name}=");
    (shown.split_whitespace())
        .find_map(|word| word.strip_prefix(&prefix))
        .unwrap_or_default()
        .to_owned()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for job in &self.jobs {
            let _ = self.client("scancel", &["--full", job]);
        }
        for daemon in self.daemons.iter_mut().rev() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(daemon.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        for daemon in &mut self.daemons {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while daemon.try_wait().ok().flatten().is_none() {
                if std::time::Instant::now() > deadline {
                    let _ = daemon.kill();
                    let _ = daemon.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn config(dir: &Path, host: &str, socket: &Path) -> String {
    let at = |name: &str| dir.join(name).display().to_string();
    format!(
        "ClusterName=ralphtest
SlurmctldHost={host}
SlurmctldPort={ctld}
SlurmdPort={d}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket}
StateSaveLocation={state}
SlurmdSpoolDir={spool}
SlurmctldPidFile={ctld_pid}
SlurmdPidFile={d_pid}
SlurmctldLogFile={ctld_log}
SlurmdLogFile={d_log}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName={host} CPUs=2 RealMemory=3000 State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
",
        ctld = free_port(),
        d = free_port(),
        socket = socket.display(),
        state = at("state"),
        spool = at("spool"),
        ctld_pid = at("slurmctld.pid"),
        d_pid = at("slurmd.pid"),
        ctld_log = at("slurmctld.log"),
        d_log = at("slurmd.log"),
    )
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// The claim of `task` on the remote, as JSON (`Null` when there is none).
fn claim(env: &TestEnv, task: &str) -> serde_json::Value {
    let mut command = Command::new("git");
    command.args([
        "-C",
        &fleet::remote(env),
        "log",
        "-1",
        "--format=%B",
        &format!("refs/ralph/claims/{task}"),
    ]);
    let output = run_with_deadline(&mut command, Duration::from_secs(10));
    serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null)
}

/// Submits the worker script as an array of two jobs (run in `jobs`, cloning under `nodes`):
/// the array's id.
fn submit_array(env: &TestEnv, cluster: &Cluster, (jobs, nodes): (&Path, &Path)) -> String {
    // sbatch passes its environment on to the job (the hermetic one of the tests).
    let mut submit = env.ralph();
    let path = format!(
        "{}:{}:/usr/local/bin:/usr/bin:/bin:/usr/sbin",
        env.bin().display(),
        fleet::ralph_bin().parent().unwrap().display()
    );
    submit
        .env("PATH", path)
        .env("SLURM_CONF", cluster.conf())
        .env("RALPH_AGENT", "opencode")
        .env("RALPH_PAUSE", "0")
        .env("RALPH_WORKER_POLL_MS", "200")
        .env("RALPH_SANDBOX_MOUNT", fleet::agent_folder(env))
        .env("RALPH_SCRATCH", nodes);
    let mut sbatch = Command::new("sbatch");
    sbatch.env_clear();
    for (name, value) in submit.get_envs() {
        if let Some(value) = value {
            sbatch.env(name, value);
        }
    }
    // The script's own --mem and --cpus-per-task are a real node's; this one is small.
    sbatch.current_dir(jobs).args([
        "--parsable",
        "--array=1-2",
        "--mem=200M",
        "--cpus-per-task=1",
        "--time=5",
        SCRIPT,
        &fleet::remote(env),
    ]);
    let output = run_with_deadline(&mut sbatch, Duration::from_secs(20));
    let array = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    assert!(
        output.status.success() && !array.is_empty(),
        "sbatch: {output:?}"
    );
    array
}

/// Kills (SIGKILL) the worker that claims `crash` once it does: the array task it runs in.
fn kill_the_worker_holding_crash(env: &TestEnv, array: &str) -> String {
    wait_until(Duration::from_secs(30), "a worker to claim crash", || {
        claim(env, "crash")["pid"].is_number()
    });
    let held = claim(env, "crash");
    let label = held["job"]["label"].as_str().unwrap_or_default().to_owned();
    let element = label
        .strip_prefix("Slurm job ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("the claim names its Slurm job: {held}"))
        .to_owned();
    assert!(
        element.starts_with(&format!("{array}_")),
        "{element} in {array}"
    );
    let pid = i32::try_from(held["pid"].as_i64().unwrap()).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    element
}

/// Requeues the failed array task `element` until its new run took `crash` back (the claim's
/// token moved on to 2).
fn requeue_until_taken_back(env: &TestEnv, cluster: &Cluster, element: &str, jobs: &Path) {
    // Slurm requeues it (as it does after a node failure), once, and starts it soon: a requeued
    // job waits for a begin time of its own otherwise. A requeue that comes too early (the job
    // still completing) is refused, and given again. slurmd refuses to launch a job in the same
    // second (its clock's grain) as it ended a run of it, so the start waits for a later one.
    let ended = unix_seconds();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut requeued = false;
    while claim(env, "crash")["token"] != 2 {
        if !requeued {
            requeued = cluster
                .try_client("scontrol", &["requeue", element])
                .is_some();
        } else if unix_seconds() > ended + 1 && cluster.state(element) == "PENDING" {
            cluster.client(
                "scontrol",
                &["update", &format!("jobid={element}"), "StartTime=now"],
            );
        }
        if std::time::Instant::now() > deadline {
            let shown = cluster.client("scontrol", &["show", "job", element]);
            let log = fs::read_to_string(jobs.join(format!("ralph-worker-{element}.out")));
            let slurmd = fs::read_to_string(cluster.dir.join("slurmd.log")).unwrap_or_default();
            panic!(
                "the requeued task did not take crash back in 30 s:\n{shown}\n{log:?}\nslurmd:\n{slurmd}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_array_of_two_workers_does_every_task_once_and_a_requeued_one_takes_its_claim_back() {
    let env = fleet::seeded(
        "- [ ] Alpha\n  - id: alpha\n- [ ] Beta\n  - id: beta\n- [ ] Crash\n  - id: crash\n- [ ] Delta\n  - id: delta\n",
    );
    let dir = env.path().join("slurm");
    let Some(mut cluster) = Cluster::start(&dir) else {
        return;
    };
    let nodes = env.path().join("nodes");
    let jobs = env.path().join("jobs");
    fs::create_dir_all(&jobs).unwrap();
    let array = submit_array(&env, &cluster, (&jobs, &nodes));
    cluster.jobs.push(array.clone());

    // The node that runs `crash` dies mid-task: its worker is killed outright.
    let element = kill_the_worker_holding_crash(&env, &array);
    wait_until(Duration::from_secs(30), "the array task to fail", || {
        cluster.state(&element) == "FAILED"
    });
    requeue_until_taken_back(&env, &cluster, &element, &jobs);
    let clone = nodes.join(format!("ralph-worker-{element}"));
    let tree = clone.join(".ralph/worktrees/crash");
    wait_until(Duration::from_secs(30), "crash's worktree", || {
        tree.is_dir()
    });
    fs::write(tree.join("go"), "").unwrap();
    wait_until(Duration::from_secs(60), "the array to finish", || {
        cluster
            .client("squeue", &["-h", "-j", &array])
            .trim()
            .is_empty()
    });

    let tasks = remote_tasks(&env);
    for (id, task) in [
        ("alpha", "Alpha"),
        ("beta", "Beta"),
        ("crash", "Crash"),
        ("delta", "Delta"),
    ] {
        assert!(tasks.contains(&format!("- [x] {task}")), "{tasks}");
        assert_eq!(
            merges_of(&env, &format!("task {id} ")),
            1,
            "{id} merged once"
        );
    }
    assert_eq!(remote_claims(&env), "", "no claim is left");
    let shown = cluster.client("scontrol", &["show", "job", "-o", &element]);
    assert_eq!(field(&shown, "JobState"), "COMPLETED", "{shown}");
    assert_eq!(field(&shown, "Restarts"), "1", "{shown}");
    let log = fs::read_to_string(jobs.join(format!("ralph-worker-{element}.out"))).unwrap();
    assert!(
        log.contains(", requeued 1×: taking tasks from origin/main"),
        "{log}"
    );
    assert!(
        log.contains("[crash] 📌 Claimed \"Crash\" (taken back from ")
            && log.contains("an earlier attempt of this job)"),
        "{log}"
    );
    assert!(log.contains("ralph worker: every task is done"), "{log}");
    assert!(
        !clone.exists(),
        "a clone whose work is on the remote is removed"
    );
}
