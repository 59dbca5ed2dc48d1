//! `ralph --report [FILE]` and `report = true`: one self-contained HTML page of the run.

use std::fs;
use std::path::Path;

use scraper::{Html, Selector};

use crate::support::TestEnv;

/// Parses `path` as HTML and fails on any parse error.
fn parse(path: &Path) -> Html {
    let text = fs::read_to_string(path).unwrap();
    let page = Html::parse_document(&text);
    assert!(
        page.errors.is_empty(),
        "HTML parse errors: {:?}",
        page.errors
    );
    assert!(!text.contains("<script"), "no script");
    assert!(
        !text.contains("http://") && !text.contains("https://"),
        "nothing from the network"
    );
    page
}

fn select<'a>(page: &'a Html, css: &str) -> Vec<scraper::ElementRef<'a>> {
    page.select(&Selector::parse(css).unwrap()).collect()
}

fn text_of(page: &Html) -> String {
    page.root_element().text().collect::<Vec<_>>().join(" ")
}

#[test]
fn report_true_keeps_one_valid_page_up_to_date_and_report_writes_it_anywhere() {
    let env = crate::support::finished_run();
    // Updated after every iteration: the agent of iteration 2 saw iteration 1 in it.
    let early = parse(&env.agent_dir().join("report-at-2.html"));
    assert_eq!(select(&early, "tr.iteration").len(), 1);
    let page = parse(&env.ralph_file("report.html"));
    let rows = select(&page, "tr.iteration");
    assert_eq!(rows.len(), 3);
    for n in 1..=3 {
        assert_eq!(select(&page, &format!("tr#iteration-{n}")).len(), 1, "{n}");
        let link = format!("a[href=\"logs/{n:04}.jsonl\"]");
        assert_eq!(select(&page, &link).len(), 1, "log link of {n}");
        assert!(env.ralph_file(&format!("logs/{n:04}.jsonl")).exists());
    }
    assert_eq!(
        select(&page, "svg").len(),
        4,
        "duration, tokens, cost, files"
    );
    let text = text_of(&page);
    for expected in [
        "completed",
        "Write notes & more",
        "Ralph iteration 1: work in progress",
        "Ralph iteration 3: work in progress",
        "echo checked",
        "passed",
    ] {
        assert!(text.contains(expected), "{expected} missing from {text}");
    }
    // Never committed, never the agent's change.
    assert!(!env.git(&["ls-files"]).contains("report.html"));
    let files = env.history()["iterations"][2]["files_modified"].to_string();
    assert!(!files.contains("report"), "{files}");

    // `--report FILE` writes the page elsewhere, its log links pointing into `.ralph/`.
    let out = env.path().join("out.html");
    let run = env.run(&["--report", out.to_str().unwrap()]);
    run.assert_code(0);
    assert!(
        run.stdout().contains("Report written to"),
        "{}",
        run.stdout()
    );
    let page = parse(&out);
    assert_eq!(select(&page, "tr.iteration").len(), 3);
    let link = select(&page, "tr#iteration-1 a")[0]
        .value()
        .attr("href")
        .unwrap()
        .to_owned();
    assert!(
        link.starts_with("file://") && link.ends_with(".ralph/logs/0001.jsonl"),
        "{link}"
    );
}

#[test]
fn report_without_a_loop_is_one_line_and_exit_1() {
    let env = TestEnv::new();
    let run = env.run(&["--report"]);
    run.assert_code(1);
    assert!(
        run.stderr().contains("nothing to report in "),
        "{}",
        run.stderr()
    );
    assert!(!env.work().join(".ralph").exists(), "nothing was created");
}
