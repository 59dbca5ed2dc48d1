//! The page `--serve` shows, in headless Chromium driven through the DevTools protocol on a pipe:
//! it lists the tasks, shows a new iteration and a task turning done without a reload, loads
//! nothing from another host, and is photographed at 1280×800 and 390×844 (the pictures are kept
//! in cargo's target directory).

use std::fs;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::report::{HEADLESS, chromium_or_skip};
use crate::support::{TestEnv, claude_events, served_at, wait_for_file, wait_output};

/// A headless Chromium and the page it shows, spoken to over `--remote-debugging-pipe`.
struct Browser {
    child: Child,
    commands: ChildStdin,
    answers: mpsc::Receiver<Value>,
    /// Every event the browser sent (network requests among them).
    events: Arc<Mutex<Vec<Value>>>,
    session: String,
    next: u64,
}

impl Browser {
    fn open(program: &str, profile: &Path) -> Self {
        // The protocol runs on fds 3 (commands in) and 4 (answers out): the shell puts the
        // pipes there.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 >/dev/null 2>&1"#)
            .arg(program)
            .args(HEADLESS)
            .args([
                "--remote-debugging-pipe",
                // Any host but this machine fails to resolve.
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let (send, answers) = mpsc::channel();
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&events);
        std::thread::spawn(move || {
            let mut pending = Vec::new();
            let mut buffer = [0_u8; 65536];
            while let Ok(read) = out.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                pending.extend_from_slice(&buffer[..read]);
                while let Some(end) = pending.iter().position(|&b| b == 0) {
                    let message: Vec<u8> = pending.drain(..=end).collect();
                    let Ok(value) = serde_json::from_slice::<Value>(&message[..end]) else {
                        continue;
                    };
                    if value.get("id").is_some() {
                        let _ = send.send(value);
                    } else {
                        seen.lock().unwrap().push(value);
                    }
                }
            }
        });
        let commands = child.stdin.take().unwrap();
        let mut browser = Self {
            child,
            commands,
            answers,
            events,
            session: String::new(),
            next: 0,
        };
        let target = browser.send("Target.createTarget", json!({"url": "about:blank"}));
        let target = target["targetId"].as_str().unwrap().to_owned();
        let attached = browser.send(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_owned();
        browser.send("Network.enable", json!({}));
        browser.send("Page.enable", json!({}));
        browser
    }

    /// Sends a command (to the page once attached) and waits for its result.
    fn send(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let mut message = json!({"id": self.next, "method": method, "params": params});
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = self
                .answers
                .recv_timeout(left)
                .expect("the browser answers");
            if answer["id"] == self.next {
                assert!(answer.get("error").is_none(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// Shows the page of the server on `port`, with `token` in the address as ralph prints it.
    fn show(&mut self, port: u16, token: &str) {
        let page = format!("http://127.0.0.1:{port}/#token={token}");
        self.send("Page.navigate", json!({"url": page}));
    }

    /// Clicks the button with this id.
    fn click(&mut self, id: &str) {
        self.eval(&format!("document.getElementById('{id}').click()"));
    }

    fn size(&mut self, width: u32, height: u32) {
        self.send(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 500}),
        );
    }

    /// The value of a script run in the page.
    fn eval(&mut self, script: &str) -> Value {
        let result = self.send(
            "Runtime.evaluate",
            json!({"expression": script, "returnByValue": true}),
        );
        result["result"]["value"].clone()
    }

    /// Waits (30 s at most) until `script` is true in the page.
    fn until(&mut self, what: &str, script: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.eval(script) != json!(true) {
            let shown = self.eval("document.body.innerText");
            assert!(
                Instant::now() < deadline,
                "{what}; the page shows:\n{shown}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn screenshot(&mut self, path: &Path) {
        let shot = self.send("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64(shot["data"].as_str().unwrap());
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(path, png).unwrap();
    }

    /// The address of every request the page made.
    fn requested(&self) -> Vec<String> {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .filter(|event| event["method"] == "Network.requestWillBeSent")
            .filter_map(|event| {
                event["params"]["request"]["url"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let digits: Vec<u8> = text.bytes().filter_map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let bits = chunk
            .iter()
            .enumerate()
            .fold(0_u32, |acc, (i, d)| acc | (u32::from(*d) << (18 - 6 * i)));
        let bytes = bits.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

/// Where the test keeps its pictures.
fn artifact(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// A task loop's agent: it finds its task in the prompt (`id`: its words joined with `_`),
/// says it started, waits for the test's `go-<id>`, reports its cost and keeps the promise.
const AGENT: &str = r#"#!/bin/sh
dir=${FAKE_AGENT_DIR:?}
for last in "$@"; do :; done
task=${last#*CURRENT TASK: \"}
task=${task%%\"*}
id=
set -f; for word in $task; do id=${id:+${id}_}$word; done; set +f
echo "$task" > "$id.txt"
touch "$dir/started-$id"
i=0; while [ ! -f "$dir/go-$id" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
echo '{"type":"step_finish","part":{"tokens":{"input":1200,"output":300,"cache":{"read":0,"write":0}},"cost":0.04}}'
echo "<promise>READY_FOR_NEXT_TASK</promise>"
"#;

/// A `--parallel 2` run of two tasks with `--serve`, once both agents started: the run, the
/// server's port and its token.
fn start_two_tasks_served(env: &TestEnv) -> (Child, u16, String) {
    env.write_executable("opencode", AGENT);
    fs::create_dir_all(env.ralph_file("")).unwrap();
    let tasks = "- [ ] Write the schema\n  - id: schema\n- [ ] Write the docs\n  - id: docs\n";
    fs::write(env.ralph_file("ralph-tasks.md"), tasks).unwrap();
    let mut run = env
        .ralph()
        .args([
            "--parallel",
            "2",
            "--pause",
            "0",
            "--serve",
            "127.0.0.1:0",
            "Build the todo API",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (port, token) = served_at(&mut run);
    for task in ["Write_the_schema", "Write_the_docs"] {
        wait_for_file(
            &env.agent_dir().join(format!("started-{task}")),
            Duration::from_secs(30),
        );
    }
    (run, port, token)
}

/// The Output panel shows the loop chosen in the list as the terminal shows it, and a run of
/// several loops counts its iterations and shows the tasks' costs in one column.
fn assert_a_loops_output_and_the_run_columns(browser: &mut Browser) {
    // The output of a loop chosen in the list: the schema's, which said its promise.
    browser.eval(
        "const which = document.getElementById('which'); which.value = 'schema'; which.dispatchEvent(new Event('change'))",
    );
    browser.until(
        "the schema loop's output",
        "document.getElementById('output').innerText.includes('READY_FOR_NEXT_TASK')",
    );
    // As the terminal shows it: never the agent's raw events.
    assert_eq!(
        browser.eval("document.getElementById('output').innerText.includes('\"type\"')"),
        json!(false),
        "{}",
        browser.eval("document.getElementById('output').innerText")
    );
    // A run of several loops counts its iterations; the tasks' costs stand in one column.
    assert_eq!(
        browser.eval("document.getElementById('iter-label').innerText"),
        json!("iterations")
    );
    assert_eq!(
        browser.eval("new Set([...document.querySelectorAll('#tasks .cost')].map(c => c.getBoundingClientRect().right)).size"),
        json!(1)
    );
}

#[test]
fn the_page_follows_a_parallel_run_live_in_a_browser() {
    let Some(program) = chromium_or_skip("the --serve page's test") else {
        return;
    };
    let env = TestEnv::new();
    let (mut run, port, token) = start_two_tasks_served(&env);
    let mut browser = Browser::open(program, &env.path().join("browser"));
    browser.size(1280, 800);
    browser.show(port, &token);
    browser.until(
        "both tasks running",
        "document.querySelectorAll('#tasks .badge.running').length === 2",
    );
    browser.until(
        "both tasks' iterations on the timeline",
        "document.querySelectorAll('#timeline .row').length === 2",
    );
    browser.eval("window.loadedOnce = true");
    browser.screenshot(&artifact("serve-page-1280x800.png"));
    // The schema's iteration ends: the page shows it done and merged, without a reload.
    std::fs::write(env.agent_dir().join("go-Write_the_schema"), "").unwrap();
    browser.until(
        "the schema done",
        "[...document.querySelectorAll('#tasks li')].some(li => li.dataset.task === 'schema' && li.querySelector('.badge.complete'))",
    );
    browser.until(
        "the schema merged",
        "document.getElementById('merges').innerText.includes('schema')",
    );
    assert_eq!(
        browser.eval("window.loadedOnce === true"),
        json!(true),
        "never reloaded"
    );
    assert!(browser.eval("document.getElementById('cost').innerText") != json!("$0.00"));
    browser.until(
        "the cost chart's line",
        "document.querySelector('#chart polyline') !== null",
    );
    assert_a_loops_output_and_the_run_columns(&mut browser);
    browser.size(390, 844);
    browser.until(
        "the phone layout",
        "document.documentElement.scrollWidth <= 390",
    );
    browser.screenshot(&artifact("serve-page-390x844.png"));
    // The run's last events reach the page before its server stops with it.
    std::fs::write(env.agent_dir().join("go-Write_the_docs"), "").unwrap();
    browser.until(
        "the run's end",
        "document.getElementById('events').innerText.includes('parallel_ended')",
    );
    let requested = browser.requested();
    assert!(!requested.is_empty());
    let own = format!("http://127.0.0.1:{port}/");
    assert!(
        requested.iter().all(|url| url.starts_with(&own)),
        "{requested:?}"
    );
    drop(browser);
    let output = wait_output(&mut run, Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(0));
}

#[test]
fn the_page_shows_a_loops_output_follows_dark_mode_and_adds_context_and_stops_the_run() {
    let Some(program) = chromium_or_skip("the --serve page's steering test") else {
        return;
    };
    let env = TestEnv::new();
    // Every call says it started, then waits for the test's `go-N`.
    env.agent_script(
        None,
        r#"touch "$dir/started-$n"
i=0; while [ ! -f "$dir/go-$n" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
"#,
    );
    let mut run = env
        .ralph()
        .args([
            "Build the todo API",
            "--pause",
            "0",
            "--serve",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (port, token) = served_at(&mut run);
    wait_for_file(&env.agent_dir().join("started-1"), Duration::from_secs(30));
    let mut browser = Browser::open(program, &env.path().join("browser"));
    browser.size(390, 844);
    browser.send(
        "Emulation.setEmulatedMedia",
        json!({"features": [{"name": "prefers-color-scheme", "value": "dark"}]}),
    );
    browser.show(port, &token);
    browser.until(
        "the dark colours",
        "getComputedStyle(document.body).backgroundColor === 'rgb(17, 17, 20)'",
    );
    browser.until(
        "the running iteration's output",
        "document.getElementById('output').innerText.includes('fake agent call 1')",
    );
    browser.screenshot(&artifact("serve-page-dark-390x844.png"));
    // A hint typed into the page reaches the next iteration's prompt.
    browser.eval("document.getElementById('context').value = 'Use the blue palette'");
    browser.click("send");
    browser.until(
        "the context accepted",
        "document.getElementById('note').innerText === 'Done.'",
    );
    std::fs::write(env.agent_dir().join("go-1"), "").unwrap();
    wait_for_file(&env.agent_dir().join("started-2"), Duration::from_secs(30));
    let prompt = std::fs::read_to_string(env.agent_dir().join("prompt.2")).unwrap();
    assert!(prompt.contains("Use the blue palette"), "{prompt}");
    // The stop button stops the run as Ctrl-C does.
    browser.eval("document.getElementById('note').innerText = ''");
    browser.click("stop");
    browser.until(
        "the stop accepted",
        "document.getElementById('note').innerText === 'Done.'",
    );
    let output = wait_output(&mut run, Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(130));
    assert!(!env.agent_dir().join("started-3").exists());
}

#[test]
fn the_output_panel_shows_a_claude_code_runs_text_and_tools_never_its_json() {
    let Some(program) = chromium_or_skip("the --serve page's Output test") else {
        return;
    };
    let env = TestEnv::new();
    env.agent_script(None, &claude_events("Done.\n<promise>COMPLETE</promise>"));
    // The repository refuses the agent's commit: the page lists it among what needs a look.
    let hook = env.work().join(".git/hooks/pre-commit");
    fs::write(&hook, "#!/bin/sh\necho 'hook says no' >&2\nexit 1\n").unwrap();
    fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let edit = env.work().join("notes.txt");
    let run = env.run_loop_with(&["Write hello.txt", "--agent", "claude-code"], |command| {
        command.env("FAKE_AGENT_EDIT", &edit);
    });
    run.assert_code(0);
    let mut server = env
        .ralph()
        .args(["--serve", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (port, token) = served_at(&mut server);
    let mut browser = Browser::open(program, &env.path().join("browser"));
    browser.size(1280, 800);
    browser.show(port, &token);
    browser.until(
        "the agent's text in the Output panel",
        "document.getElementById('output').innerText.includes(\"I'll write the file.\")",
    );
    let shown = browser.eval("document.getElementById('output').innerText");
    let shown = shown.as_str().unwrap_or_default();
    // Each tool call folded to one line: its name and what it worked on.
    assert!(
        shown.contains("| Write /w/hello.txt"),
        "the tool's line: {shown}"
    );
    assert!(!shown.contains("{\"type\":"), "no raw event: {shown}");
    browser.until(
        "the refused commit among what needs a look",
        "document.getElementById('problems').innerText.includes('commit failed') && document.getElementById('problems').innerText.includes('hook says no')",
    );
    drop(browser);
    stop_server(&mut server);
}

/// `ralph --serve ADDR --remote` in `dir`: the server, its port and its token.
fn serve_remote(env: &TestEnv, dir: &Path, addr: &str) -> (std::process::Child, u16, String) {
    let mut server = env
        .ralph()
        .current_dir(dir)
        .args(["--serve", addr, "--remote"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (port, token) = served_at(&mut server);
    (server, port, token)
}

/// Stops a server as Ctrl+C does, and waits for it.
fn stop_server(server: &mut std::process::Child) {
    let _ = Command::new("kill")
        .args(["-INT", &server.id().to_string()])
        .status();
    let _ = wait_output(server, Duration::from_secs(30));
}

#[test]
fn the_page_shows_the_fleet_under_remote_and_picks_up_again_from_a_restarted_server() {
    use crate::fleet::{machine, release_workers, two_workers_holding_their_tasks};
    let Some(program) = chromium_or_skip("the --serve page's fleet test") else {
        return;
    };
    // The workers are two tasks of a Slurm array job: the fleet names their jobs.
    let (env, workers) = two_workers_holding_their_tasks([
        &[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_ARRAY_JOB_ID", "41"),
            ("SLURM_ARRAY_TASK_ID", "1"),
        ],
        &[
            ("SLURM_JOB_ID", "43"),
            ("SLURM_ARRAY_JOB_ID", "41"),
            ("SLURM_ARRAY_TASK_ID", "2"),
        ],
    ]);
    let watcher = machine(&env, "m3");
    let journal = watcher.join(".ralph/events.jsonl");
    fs::create_dir_all(watcher.join(".ralph")).unwrap();
    fs::write(
        &journal,
        "{\"event\":\"run_started\",\"time\":\"2026-01-01T00:00:00Z\"}\n",
    )
    .unwrap();
    let serve = |addr: &str| serve_remote(&env, &watcher, addr);
    let (mut server, port, token) = serve("127.0.0.1:0");
    let mut browser = Browser::open(program, &env.path().join("browser"));
    browser.size(1280, 800);
    browser.show(port, &token);
    let fleet = "document.getElementById('fleet').innerText";
    browser.until(
        "both workers' claims in the fleet table",
        &format!(
            "!document.getElementById('fleet-card').hidden && {fleet}.includes('solo') && {fleet}.includes('duo') && {fleet}.includes('Slurm job 41_1') && {fleet}.includes('Slurm job 41_2') && {fleet}.includes('2 tasks left to run on origin/')"
        ),
    );
    let events = "document.getElementById('events').innerText";
    browser.until(
        "the first event",
        &format!("{events}.includes('run_started')"),
    );
    // No loop runs here: nothing to stop.
    assert_eq!(
        browser.eval("document.getElementById('loop').innerText === 'none' && document.getElementById('stop').hidden"),
        json!(true)
    );
    // The server goes: the page says so, and picks up from the new one on the same port with
    // the events it missed, none twice.
    stop_server(&mut server);
    browser.until(
        "the page seeing the server gone",
        "document.getElementById('conn').className === 'down'",
    );
    let mut lines = fs::read_to_string(&journal).unwrap();
    lines.push_str("{\"event\":\"run_ended\",\"time\":\"2026-01-01T00:00:01Z\"}\n");
    fs::write(&journal, lines).unwrap();
    let (mut again, _, _) = serve(&format!("127.0.0.1:{port}"));
    browser.until(
        "the page live again with the event it missed",
        &format!(
            "document.getElementById('conn').className === 'live' && {events}.includes('run_ended')"
        ),
    );
    assert_eq!(
        browser.eval(&format!("{events}.split('run_started').length - 1")),
        json!(1),
        "no event twice"
    );
    release_workers(&env, workers);
    drop(browser);
    stop_server(&mut again);
}

#[test]
fn the_page_shows_an_agents_question_and_answers_it_with_one_tap_on_a_phone() {
    let Some(program) = chromium_or_skip("the --serve page's questions test") else {
        return;
    };
    let env = TestEnv::new();
    env.write_executable("claude", include_str!("../fixtures/fake-mcp-agent.sh"));
    let ask = json!({"name": "ralph_ask", "arguments": {"question": "Which store should the API use?", "options": ["SQLite", "Postgres"], "urgency": "high"}});
    fs::write(env.agent_dir().join("call"), ask.to_string()).unwrap();
    let mut run = env
        .ralph()
        .args([
            "Build the API",
            "--agent",
            "claude-code",
            "--output-format",
            "text",
        ])
        .args(["--max-iterations", "1", "--serve", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (port, token) = served_at(&mut run);
    let mut browser = Browser::open(program, &env.path().join("browser"));
    browser.size(390, 844);
    browser.show(port, &token);
    browser.until(
        "the question",
        "!document.getElementById('questions-card').hidden && document.getElementById('questions').innerText.includes('Which store should the API use?')",
    );
    // On a phone: first on the page, nothing wider than the screen, taps big enough.
    assert_eq!(
        browser.eval("document.getElementById('questions-card').getBoundingClientRect().top < 200"),
        json!(true)
    );
    assert_eq!(
        browser.eval("document.documentElement.scrollWidth <= 390"),
        json!(true)
    );
    assert_eq!(
        browser.eval("[...document.querySelectorAll('.question button')].every((b) => b.getBoundingClientRect().height >= 44)"),
        json!(true)
    );
    let shown = browser.eval("document.getElementById('questions').innerText");
    assert!(
        shown.as_str().unwrap().contains("2. Postgres")
            && shown.as_str().unwrap().contains("urgent"),
        "{shown}"
    );
    browser.screenshot(&artifact("serve-page-question-390x844.png"));
    browser.eval("document.querySelector('button.choice[data-answer=\"2\"]').click()");
    browser.until(
        "the answer accepted",
        "document.getElementById('note').innerText === 'Done.'",
    );
    browser.until(
        "the answered question gone",
        "document.getElementById('questions-card').hidden",
    );
    let output = wait_output(&mut run, Duration::from_secs(60));
    assert_eq!(output.status.code(), Some(0));
    let result = fs::read_to_string(env.agent_dir().join("mcp-out.1")).unwrap();
    assert!(result.contains("A person answered: Postgres"), "{result}");
    assert_eq!(
        env.history()["iterations"][0]["questions"][0]["answer"]["by"],
        "page"
    );
}
