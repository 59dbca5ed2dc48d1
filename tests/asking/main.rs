//! ralph's tools for the agents it runs, in the places and ways beyond the default run's tests.

#![allow(dead_code, unreachable_pub)]

#[path = "../integration/asking_fixture.rs"]
mod asking_fixture;
#[path = "../integration/support.rs"]
mod support;

mod questions;
