//! `--parallel` runs end to end beyond the few of plain `cargo test`: a run seen and steered like
//! a single loop, merge trains and their bisection, `--parallel auto`, tasks kept apart by what
//! they touch, submodules, the user's own edits, protected paths at the landing, worktrees reused
//! from task to task, `--otel`. Each test runs several task loops and many git
//! processes, so plain `cargo test` leaves this target out and the README's test command runs it
//! after the rest (`cargo test --test parallel`).

#![allow(dead_code, unreachable_pub)]

#[path = "../integration/fleet.rs"]
mod fleet;
#[path = "../integration/protect_fixture.rs"]
mod protect_fixture;
#[path = "../integration/support.rs"]
mod support;

mod otel;
mod protect;
mod runs;
mod worktrees;
