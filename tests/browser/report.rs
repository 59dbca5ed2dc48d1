//! The HTML report, rendered by headless Chromium.

use std::fs;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::wait_output;

/// A browser to render the page with, if one is installed.
pub(crate) fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|out| out.status.success())
        })
}

/// The installed Chromium, or `None` after one line saying that `test` is skipped.
#[expect(
    clippy::print_stderr,
    reason = "the one line that explains a skipped test"
)]
pub(crate) fn chromium_or_skip(test: &str) -> Option<&'static str> {
    let found = chromium();
    if found.is_none() {
        eprintln!(
            "note: no Chromium installed (scripts/install-test-tools.sh installs it); {test} is skipped"
        );
    }
    found
}

/// How every test starts Chromium: headless, quiet, nothing fetched behind the page's back.
pub(crate) const HEADLESS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--disable-quic",
];

#[test]
fn the_report_renders_in_a_headless_browser() {
    let Some(browser) = chromium_or_skip("the report's screenshot test") else {
        return;
    };
    let env = crate::support::finished_run();
    let shot = env.path().join("report.png");
    let mut child = Command::new(browser)
        .args(HEADLESS)
        .arg("--window-size=1000,1600")
        .arg(format!(
            "--user-data-dir={}",
            env.path().join("browser").display()
        ))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!(
            "file://{}",
            env.ralph_file("report.html").display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = wait_output(&mut child, Duration::from_secs(60));
    assert!(output.status.success(), "{output:?}");
    let size = fs::metadata(&shot).map(|meta| meta.len()).unwrap_or(0);
    assert!(size > 10_000, "a screenshot of the page: {size} bytes");
}
