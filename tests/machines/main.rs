//! Several machines: `--worker`s in clones of one bare repository sharing its task list — claims,
//! take-overs, merges into the remote, context that reaches every clone. Each test starts several
//! ralph processes and many git processes, so plain `cargo test` leaves this target out and the
//! README's test command runs it after the rest (`cargo test --test machines`).

#![allow(dead_code, unreachable_pub)]

#[path = "../integration/fleet.rs"]
mod fleet;
#[path = "../integration/support.rs"]
mod support;

mod budget;
mod gates;
mod merges;
mod questions;
mod room;
mod workers;
