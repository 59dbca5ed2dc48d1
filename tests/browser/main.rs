//! What ralph shows in a browser, rendered by headless Chromium: the HTML report and the
//! `--serve` page. A target of its own (a browser takes seconds to start): `cargo test --test
//! browser`. Each test says why it skipped when no Chromium is installed
//! (`scripts/install-test-tools.sh` installs it).

#![allow(dead_code, unreachable_pub)]

#[path = "../integration/support.rs"]
mod support;

#[path = "../integration/fleet.rs"]
mod fleet;

mod page;
mod report;
