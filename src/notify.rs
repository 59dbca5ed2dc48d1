//! `--notify URL`: a short message POSTed when the loop ends (and with `--notify-each` after
//! every iteration), in a shape each kind of receiver takes as it is: Slack and Discord incoming
//! webhooks, ntfy topics, or any URL that takes JSON. A failure is a warning, never an error.

use std::time::Duration;

use serde_json::{Value, json};

use crate::event::{LoopEvent, Reporter, Stamped};
use crate::git::Repo;
use crate::options::LoopOptions;
use crate::output;

/// The page's address (token included) of the `--serve` server this process runs, once it
/// runs: a notification of an agent's question links to it.
static PAGE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Records the address of the page this process serves.
pub(crate) fn serving(url: &str) {
    let _ = PAGE.set(url.to_owned());
}

/// How long one POST may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// What a notification says: a title, one line of text, and the event's facts.
pub(crate) struct Note {
    pub(crate) title: String,
    pub(crate) text: String,
    /// The event's object (`--json`'s) with the repository and branch added.
    pub(crate) fields: Value,
}

/// The receiver's kind, from `notify_format` (`auto`: recognised from the URL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Slack,
    Discord,
    Ntfy,
    Json,
}

fn kind(format: &str, url: &str) -> Kind {
    match format {
        "slack" => Kind::Slack,
        "discord" => Kind::Discord,
        "ntfy" => Kind::Ntfy,
        "json" => Kind::Json,
        _ => {
            let host = url
                .split("://")
                .nth(1)
                .unwrap_or(url)
                .split(['/', ':'])
                .next()
                .unwrap_or("");
            if host == "hooks.slack.com" {
                Kind::Slack
            } else if host.ends_with("discord.com") || host.ends_with("discordapp.com") {
                Kind::Discord
            } else if host == "ntfy.sh" || host.starts_with("ntfy.") {
                Kind::Ntfy
            } else {
                Kind::Json
            }
        }
    }
}

/// The request body and its content type for a receiver of `kind`.
fn body(kind: Kind, note: &Note) -> (&'static str, String) {
    match kind {
        Kind::Slack => (
            "application/json",
            json!({"text": format!("*{}*\n{}", note.title, note.text)}).to_string(),
        ),
        Kind::Discord => (
            "application/json",
            json!({"content": format!("**{}**\n{}", note.title, note.text)}).to_string(),
        ),
        Kind::Ntfy => ("text/plain; charset=utf-8", note.text.clone()),
        Kind::Json => {
            let mut fields = note.fields.clone();
            if let Some(map) = fields.as_object_mut() {
                map.insert("title".to_owned(), Value::from(note.title.clone()));
                map.insert("text".to_owned(), Value::from(note.text.clone()));
            }
            ("application/json", fields.to_string())
        }
    }
}

/// `--notify` as a reporter: a message at the run's end (`ends`), and with `--notify-each` after
/// every iteration. Each names the repository and its branch.
pub(crate) struct Notifier {
    urls: Vec<String>,
    format: String,
    each: bool,
    ends: bool,
    /// The repository's top (its name is the repository's), and the repository for its branch.
    top: std::path::PathBuf,
    repo: Option<Repo>,
}

impl Notifier {
    /// The notifier `options` ask for, if any URL is given.
    pub(crate) fn new(
        options: &LoopOptions,
        top: &std::path::Path,
        repo: Option<Repo>,
        ends: bool,
    ) -> Option<Self> {
        (!options.notify.is_empty()).then(|| Self {
            urls: options.notify.clone(),
            format: options.notify_format.clone(),
            each: options.notify_each,
            ends,
            top: top.to_owned(),
            repo,
        })
    }

    /// Sends `text` under `title`, with the event's facts, the repository and the branch.
    fn send(&self, title: String, text: &str, mut fields: Value) {
        let repository = self
            .top
            .file_name()
            .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
        let branch = self.repo.as_ref().and_then(Repo::current_branch);
        if let Some(map) = fields.as_object_mut() {
            map.insert("repository".to_owned(), repository.clone().into());
            map.insert("branch".to_owned(), branch.clone().into());
        }
        let place = match &branch {
            Some(branch) => format!("{repository} ({branch})"),
            None => repository,
        };
        let note = Note {
            title,
            text: format!("{text} — {place}"),
            fields,
        };
        send(&self.urls, &self.format, &note);
    }
}

impl Reporter for Notifier {
    fn event(&mut self, stamped: &Stamped<'_>) {
        let ended = |exit_code: u8| {
            if exit_code == 0 {
                "ralph completed"
            } else {
                "ralph stopped"
            }
            .to_owned()
        };
        let (title, text) = match stamped.event {
            LoopEvent::IterationFinished(record) if self.each => (
                format!("ralph iteration {}", record.iteration),
                format!(
                    "iteration {}: exit code {}, {} changed",
                    record.iteration,
                    record.exit_code,
                    output::format::plural(record.files_modified.len() as u64, "file")
                ),
            ),
            LoopEvent::RunEnded(end) if self.ends => {
                (ended(end.exit_code), output::run_summary(end))
            }
            LoopEvent::ParallelEnded(end) if self.ends => {
                (ended(end.exit_code), output::parallel_summary(end))
            }
            LoopEvent::QuestionAsked {
                id,
                question,
                options,
                ..
            } => {
                let of = stamped
                    .task
                    .map_or_else(String::new, |task| format!(" ({task})"));
                let choices: String = output::numbered(options)
                    .map(|option| format!(" {option}"))
                    .collect();
                let answer = match PAGE.get() {
                    Some(url) => format!("answer on {url} or with ralph --answer {id} \"…\""),
                    None => format!("answer with ralph --answer {id} \"…\""),
                };
                (
                    format!("ralph: the agent asks{of}"),
                    format!("{question}{choices} — {answer}"),
                )
            }
            _ => return,
        };
        self.send(title, &text, stamped.to_value());
    }
}

/// Checks a `--notify` URL at start: `http://` or `https://` and a host, as a POST can use it.
pub(crate) fn check_url(url: &str) -> Result<(), String> {
    check_http_url("--notify", url, "https://ntfy.sh/my-topic")
}

/// Checks the URL `flag` was given: `http://` or `https://` and a host, as a POST can use it;
/// the error shows `example`.
pub(crate) fn check_http_url(flag: &str, url: &str, example: &str) -> Result<(), String> {
    let uri: ureq::http::Uri = url
        .trim()
        .parse()
        .map_err(|err| format!("{flag} '{url}' is not a URL ({err}); give one like {example}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(format!(
            "{flag} '{url}' is not an http:// or https:// URL; give one like {example}"
        ));
    }
    if uri
        .host()
        .is_none_or(|host| host.trim_matches(['[', ']']).is_empty())
    {
        return Err(format!(
            "{flag} '{url}' names no host; give one like {example}"
        ));
    }
    Ok(())
}

/// An HTTP client for ralph's POSTs (`--notify`, `--otel`): each request has `timeout` in all,
/// and an error status is an error.
pub(crate) fn post_agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(true)
        .build()
        .into()
}

/// POSTs `note` to every URL; each failure is a warning.
pub(crate) fn send(urls: &[String], format: &str, note: &Note) {
    if urls.is_empty() {
        return;
    }
    let agent = post_agent(TIMEOUT);
    for url in urls {
        let (content_type, payload) = body(kind(format, url), note);
        let mut request = agent.post(url).header("Content-Type", content_type);
        if kind(format, url) == Kind::Ntfy {
            request = request.header("Title", &note.title);
        }
        if let Err(err) = request.send(payload.as_str()) {
            output::notify_failed(&output::Voice::plain(), url, &err.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note() -> Note {
        Note {
            title: "ralph completed".to_owned(),
            text: "completed in 3 iterations".to_owned(),
            fields: json!({"event": "run_ended", "exit_code": 0}),
        }
    }

    #[test]
    fn receivers_are_recognised_from_their_url_or_the_setting() {
        assert_eq!(
            kind("auto", "https://hooks.slack.com/services/T/B/X"),
            Kind::Slack
        );
        assert_eq!(
            kind("auto", "https://discord.com/api/webhooks/1/x"),
            Kind::Discord
        );
        assert_eq!(kind("auto", "https://ntfy.sh/my-topic"), Kind::Ntfy);
        assert_eq!(kind("auto", "http://127.0.0.1:8080/hook"), Kind::Json);
        assert_eq!(kind("ntfy", "http://127.0.0.1:8080/topic"), Kind::Ntfy);
    }

    #[test]
    fn only_http_urls_with_a_host_are_taken() {
        for good in [
            "https://ntfy.sh/topic",
            "http://127.0.0.1:8080/hook",
            "http://[::1]:9/x",
            "HTTPS://hooks.slack.com/services/T/B/X",
            "http://user:pw@example.com",
        ] {
            assert_eq!(check_url(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("notaurl", "is not an http:// or https:// URL"),
            ("ftp://example.com/x", "is not an http:// or https:// URL"),
            ("http://[::1", "is not a URL"),
            ("https://", "is not a URL"),
            ("http:///path", "is not a URL"),
            ("", "is not a URL"),
        ] {
            let message = check_url(bad).unwrap_err();
            assert!(message.contains(why), "{bad}: {message}");
            assert!(message.contains(&format!("'{bad}'")), "{message}");
        }
    }

    #[test]
    fn each_receiver_gets_the_shape_it_takes() {
        let (_, slack) = body(Kind::Slack, &note());
        assert_eq!(
            serde_json::from_str::<Value>(&slack).unwrap()["text"],
            "*ralph completed*\ncompleted in 3 iterations"
        );
        let (_, discord) = body(Kind::Discord, &note());
        assert!(discord.contains("\"content\""));
        let (kind_type, ntfy) = body(Kind::Ntfy, &note());
        assert!(kind_type.starts_with("text/plain"));
        assert_eq!(ntfy, "completed in 3 iterations");
        let (_, plain) = body(Kind::Json, &note());
        let plain: Value = serde_json::from_str(&plain).unwrap();
        assert_eq!(plain["exit_code"], 0);
        assert_eq!(plain["title"], "ralph completed");
    }
}
