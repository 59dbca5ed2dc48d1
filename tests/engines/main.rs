//! The fleet on the engines users already run: the shipped GitHub Actions workflow run by `act`,
//! the shipped Slurm script run by a local `slurmctld`/`slurmd`, and the shipped Kubernetes
//! manifest checked against the Job schema. Each test says why it skipped when its tool is not
//! installed (`scripts/install-engines.sh` installs them).

#![allow(dead_code, unreachable_pub)]

#[path = "../integration/support.rs"]
mod support;

mod fleet;
mod github;
mod kubernetes;
mod slurm;
