//! Runs of several loops: `--parallel` (a coordinator, a pool of worktrees, the merge queue and
//! its gate, the landing on the base), `--worker` (claims on a git remote, the task branches
//! pushed, the engines' job identity) and `--worktree NAME` (one loop beside the checkout).
//! Each task runs as one loop of `crate::run`, handed a `TaskLoop`; `run/` knows nothing of
//! what is here.
//!
//! - `parallel.rs` (+ `parallel/`): the coordinator of `--parallel`, its merges and gate.
//! - `remote.rs` (+ `remote/`): a `--worker`: its claims, task branches, landing and planning.
//! - `pool.rs`: the worktrees of finished tasks, kept for the next ones.
//! - `room.rs`: room on the machine for one more agent (`--parallel auto`, `--agent-memory`).
//! - `base.rs`: the base branch, a task's branch and settings, what a landing left half done.
//! - `carry.rs`: at a task's merge, the notes and tasks its agent added join the base.
//! - `worktree.rs`: `--worktree NAME [--merge]`.

mod base;
mod carry;
mod parallel;
mod pool;
mod remote;
mod room;
mod worktree;

pub(crate) use base::clear as clear_task_worktrees;
pub(crate) use parallel::run as run_parallel;
pub(crate) use remote::{claim_live, remote_status, worker};
pub(crate) use worktree::{in_worktree, worktree_home};
