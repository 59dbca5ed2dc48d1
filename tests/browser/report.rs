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

#[test]
#[expect(
    clippy::print_stderr,
    reason = "the one line that explains a skipped test"
)]
fn the_report_renders_in_a_headless_browser() {
    let Some(browser) = chromium() else {
        eprintln!(
            "note: no Chromium installed (apt-get install chromium); the screenshot test is skipped"
        );
        return;
    };
    let env = crate::support::finished_run();
    let shot = env.path().join("report.png");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1000,1600",
        ])
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
