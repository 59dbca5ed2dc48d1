//! Every loop option, declared once.
//!
//! The [`loop_options!`] table below names each option with its type, default, help and place in
//! `--help`. Everything else is derived from it: the command-line flags (`--max-iterations`), the
//! config-file keys (`max_iterations`), the environment variables (`RALPH_MAX_ITERATIONS`), the
//! commented `--init` file, the `--config` listing, the options saved in the loop state and the
//! overrides `--resume` reports. A value's type decides how it is parsed, checked in a config
//! file and shown ([`OptionValue`]), so a value means the same wherever it is written.
//!
//! Adding an option: one line in the table, and the code that uses `options.<name>`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Arg, ArgAction};

use crate::agents::OutputFormat;
use crate::output::ColorChoice;
use crate::promise::PromiseFormat;

pub(crate) mod layer;
pub(crate) mod parse;
mod value;

pub(crate) use layer::{Layer, Raw, Source};
pub(crate) use value::OptionValue;

/// How an option appears on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cli {
    /// `--flag VALUE` (or `--flag` for a boolean).
    Flag,
    /// A boolean with a `--no-flag` form; the text is the negation's help.
    Negatable(&'static str),
    /// Not a flag: set in config files and the environment (and, for `agent_args`, after `--`).
    None,
}

/// One option's declaration.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Def {
    /// The config key; the flag is the key with dashes, the variable `RALPH_` + the key in capitals.
    pub(crate) key: &'static str,
    pub(crate) help: &'static str,
    pub(crate) heading: &'static str,
    pub(crate) value_name: &'static str,
    pub(crate) short: Option<char>,
    pub(crate) cli: Cli,
    /// The `--init` line's value when the default ("none") makes a poor example.
    pub(crate) example: Option<&'static str>,
    /// The `--init` line's comment.
    pub(crate) note: &'static str,
    /// What a config file must give (for the file's error messages).
    pub(crate) wants: &'static str,
    /// Whether a value has the right type and parses.
    pub(crate) check: fn(&Raw) -> Result<(), String>,
    /// The option's clap argument, without its name, help and heading.
    pub(crate) arg: fn(Arg) -> Arg,
    /// Whether the value is a list that several flags or lines add to.
    pub(crate) list: bool,
    /// Whether the option is a switch (`--tasks`) rather than a flag with a value.
    pub(crate) boolean: bool,
}

impl Def {
    /// `--max-iterations`.
    pub(crate) fn flag(&self) -> String {
        self.key.replace('_', "-")
    }

    /// `RALPH_MAX_ITERATIONS`.
    pub(crate) fn variable(&self) -> String {
        format!("RALPH_{}", self.key.to_uppercase())
    }
}

/// The optional macro fragment in brackets, else the default.
macro_rules! or_default {
    ([$value:expr] $default:expr) => {
        $value
    };
    ([] $default:expr) => {
        $default
    };
}

/// Declares the loop options: the resolved [`LoopOptions`] struct and the [`DEFS`] table.
macro_rules! loop_options {
    ($(
        $(#[doc = $help:literal])+
        $name:ident: $ty:ty = $default:expr,
        heading $heading:literal, value $value_name:literal
        $(, short $short:literal)?
        $(, cli $cli:expr)?
        $(, example $example:literal)?
        $(, note $note:literal)?
        ;
    )*) => {
        /// Every loop option, resolved.
        #[derive(Clone, Debug, PartialEq)]
        pub(crate) struct LoopOptions {
            $($(#[doc = $help])+ pub(crate) $name: $ty,)*
        }

        impl Default for LoopOptions {
            fn default() -> Self {
                Self { $($name: $default,)* }
            }
        }

        /// The declarations, in the order `--help`, `--init` and `--config` show them.
        pub(crate) const DEFS: &[Def] = &[$(Def {
            key: stringify!($name),
            help: concat!($($help),+),
            heading: $heading,
            value_name: $value_name,
            short: or_default!([$(Some($short))?] None),
            cli: or_default!([$($cli)?] Cli::Flag),
            example: or_default!([$(Some($example))?] None),
            note: or_default!([$($note)?] ""),
            boolean: <$ty as OptionValue>::BOOLEAN,
            wants: <$ty as OptionValue>::WANTS,
            check: |raw| <$ty as OptionValue>::from_raw(raw).map(drop),
            arg: <$ty as OptionValue>::arg,
            list: <$ty as OptionValue>::LIST,
        },)*];

        impl LoopOptions {
            /// The options from `layers` (highest first), defaults filling the gaps.
            pub(crate) fn resolve(layers: &[&Layer]) -> Result<Self, String> {
                let defaults = Self::default();
                Ok(Self {$(
                    $name: match layer::find(layers, stringify!($name)) {
                        Some((raw, source)) => <$ty as OptionValue>::from_raw(raw)
                            .map_err(|err| format!("{source}: `{}`: {err}", stringify!($name)))?,
                        None => defaults.$name,
                    },
                )*})
            }

            /// Every option's value, as a config file writes it.
            pub(crate) fn values(&self) -> Vec<(&'static str, Raw)> {
                vec![$((stringify!($name), OptionValue::to_raw(&self.$name)),)*]
            }
        }
    };
}

loop_options! {
    /// The agent CLI to run: opencode, claude-code, codex, gemini, …, an ACP preset (gemini-acp, …),
    /// acp (with --acp-command), or a custom agent from the config.
    agent: parse::AgentName = parse::AgentName("opencode".to_owned()),
        heading "Loop", value "AGENT", note "opencode, claude-code, codex, or a name from [agents.NAME]";
    /// The command that starts the ACP agent `--agent acp` runs: CMD ARGS… (quoted as in a shell).
    acp_command: Option<String> = None,
        heading "Loop", value "CMD", note "for --agent acp: starts any ACP agent";
    /// The model to ask the agent for (passed through as given).
    model: Option<String> = None,
        heading "Loop", value "MODEL", example "\"\"", note "passed to the agent as given";
    /// Cycle agents and models, one per iteration: AGENT[:MODEL],AGENT[:MODEL],…
    rotation: parse::Rotation = parse::Rotation(Vec::new()),
        heading "Loop", value "LIST", example "[\"claude-code:sonnet\", \"codex\"]",
        note "cycle agents/models per iteration";
    /// Agents to switch to when the current one runs out of quota: AGENT[:MODEL],AGENT[:MODEL],…
    fallback: parse::Rotation = parse::Rotation(Vec::new()),
        heading "Loop", value "LIST", example "[\"codex\", \"gemini:gemini-2.5-pro\"]",
        note "agents for when one hits its usage limit";
    /// Switch to a fallback agent when a usage limit resets later than this (or gives no time).
    fallback_after: Duration = Duration::from_secs(300), heading "Loop", value "DURATION";
    /// Completion is accepted only from this iteration on.
    min_iterations: u32 = 1, heading "Loop", value "N";
    /// Stop after N iterations; 0 means no limit.
    max_iterations: u32 = 0, heading "Loop", value "N", note "0 = no limit";
    /// The text the agent prints as <promise>TEXT</promise> when done.
    completion_promise: String = "COMPLETE".to_owned(), heading "Loop", value "TEXT";
    /// How promises are written: `<promise>TEXT</promise>` (xml) or the bare TEXT as the last line (plain).
    promise_format: PromiseFormat = PromiseFormat::Xml,
        heading "Loop", value "FORMAT", note "xml or plain";
    /// Count a promise anywhere in the output, not only at the end of the last line.
    promise_anywhere: bool = false, heading "Loop", value "";
    /// Pause between iterations, e.g. 0, 500ms, 2s.
    pause: Duration = Duration::from_secs(1), heading "Loop", value "DURATION";
    /// A command that must pass before completion is accepted (repeatable; run by `sh -c` from the repository's top directory).
    verify: Vec<String> = Vec::new(),
        heading "Loop", value "CMD", example "[\"cargo test\"]",
        note "must pass before completion is accepted";
    /// A path (glob) the agent may read but not change (repeatable; e.g. 'tests/**'): a change is put back after the iteration and never committed; under --sandbox bwrap the path is read-only.
    protect: Vec<String> = Vec::new(),
        heading "Loop", value "GLOB", example "[\"tests/**\"]";
    /// What a change to a protected path does: restore (put it back and tell the agent) or fail (put it back and end the loop; a run's task fails).
    protect_mode: String = "restore".to_owned(), heading "Loop", value "MODE", note "restore or fail";
    /// A check the agent never sees (repeatable): it runs when the agent claims completion, after --verify passes; the agent learns only how many failed. Secret only under --sandbox.
    holdout: Vec<String> = Vec::new(),
        heading "Loop", value "CMD", example "[\"sh ~/checks/hidden.sh\"]";
    /// What the agent is told of failed holdout checks: count (N of M failed), names (their commands) or full (commands and output).
    holdout_feedback: String = "count".to_owned(),
        heading "Loop", value "WHAT", note "count, names or full";
    /// Time limit for each --verify command and each task's verify command.
    verify_timeout: Duration = Duration::from_secs(600), heading "Loop", value "DURATION";
    /// Stop the agent if one iteration runs longer than this (e.g. 30m); the loop goes on.
    iteration_timeout: Option<Duration> = None,
        heading "Limits", value "DURATION", example "\"30m\"";
    /// Stop the agent if it prints nothing for this long (e.g. 10m); the loop goes on.
    idle_timeout: Option<Duration> = None,
        heading "Limits", value "DURATION", example "\"10m\"";
    /// How long a stopped agent gets between SIGTERM and SIGKILL (a timeout, Ctrl-C, a stop).
    kill_grace: Duration = Duration::from_secs(3), heading "Limits", value "DURATION";
    /// Once the agent has said its promise, how long it may take to exit before ralph ends it (and everything it started) and counts the iteration as completed.
    completion_grace: Duration = Duration::from_secs(30), heading "Limits", value "DURATION";
    /// Stop the loop after this much time in all (e.g. 8h); checked between iterations.
    max_runtime: Option<Duration> = None,
        heading "Limits", value "DURATION", example "\"8h\"";
    /// Stop the loop once the agent has reported this much cost in USD (e.g. 5.00).
    max_cost: Option<f64> = None, heading "Limits", value "USD", example "20.0", note "USD";
    /// Stop the loop once the agent has used this many tokens (input, output and cache).
    max_tokens: Option<u64> = None, heading "Limits", value "N", example "\"5M\"";
    /// What an iteration of a --parallel task or a --worker reserves of --max-cost before it starts (default: the average of its agent's last iterations); an iteration starts only while the budget can pay for it.
    reserve: Option<f64> = None, heading "Limits", value "USD", example "0.5", note "USD";
    /// Stop after N iterations in a row that changed no files.
    max_stalled: Option<u32> = None, heading "Limits", value "N", example "5";
    /// Stop after N iterations in a row in which the agent exits with an error and changes nothing.
    max_failed_runs: u32 = 5, heading "Limits", value "N";
    /// The text the agent prints as <promise>TEXT</promise> to stop the loop because it cannot go on.
    abort_promise: Option<String> = None,
        heading "Limits", value "TEXT", example "\"BLOCKED\"";
    /// Retries in a row of an iteration that failed on the provider's side (rate limit, overload, server or network error).
    max_retries: u32 = 3, heading "Limits", value "N";
    /// Longest wait before such a retry when the provider gives no reset time.
    retry_max_wait: Duration = Duration::from_secs(600), heading "Limits", value "DURATION";
    /// The agent (AGENT[:MODEL]) that plans a spec into a task list; default: the run's agent.
    plan_agent: parse::Rotation = parse::Rotation(Vec::new()),
        heading "Tasks", value "AGENT[:MODEL]", example "\"claude-code:opus\"",
        note "the first agent of the list plans";
    /// Work through .ralph/ralph-tasks.md one task at a time.
    tasks: bool = false, heading "Tasks", value "", short 't';
    /// The text the agent prints when one task is done.
    task_promise: String = "READY_FOR_NEXT_TASK".to_owned(), heading "Tasks", value "TEXT";
    /// Run up to N ready tasks at once, each in its own git worktree, merging each when done (implies --tasks; 0: one at a time in this work tree); auto (or auto:MAX): as many as the machine's memory and load allow.
    parallel: parse::Parallel = parse::Parallel::default(), heading "Tasks", value "N|auto[:MAX]", example "\"auto:8\"", note "0 = tasks one at a time, here; auto: as memory and load allow";
    /// The memory one agent may need (e.g. 2G; --parallel auto counts 2G without it): another task starts (a --worker claims one) only while the machine's available memory covers it beside what the running agents may need (a task's memory: property, or --sandbox-memory, sets it instead).
    agent_memory: Option<crate::sandbox::Bytes> = None, heading "Tasks", value "BYTES", example "\"2G\"", note "default 2G with --parallel auto";
    /// In a parallel run, keep the untracked build outputs (git-ignored files) of a worktree reused for the next task.
    keep_build_cache: bool = false, heading "Tasks", value "";
    /// How often a --worker tells the remote it still holds its task.
    claim_heartbeat: Duration = Duration::from_secs(60), heading "Tasks", value "DURATION";
    /// A --worker's claim not refreshed for this long is stale: another worker may take the task over.
    claim_ttl: Duration = Duration::from_secs(900), heading "Tasks", value "DURATION";
    /// --worker: --max-cost and --max-tokens hold for every worker sharing the remote together, kept in a ledger on it (refs/ralph/fleet/budget); each iteration reserves its expected cost there before it starts.
    fleet_budget: bool = false, heading "Tasks", value "";
    /// A --worker with no task free waits for those other workers hold (to take over a stale one, or one they unblock) instead of ending.
    wait: bool = false, heading "Tasks", value "";
    /// Read the agent's JSON event stream (default) or its plain text.
    output_format: OutputFormat = OutputFormat::Json,
        heading "Agent and output", value "FORMAT", note "json or text";
    /// Show the agent's output as it arrives (default).
    stream: bool = true, heading "Agent and output", value "",
        cli Cli::Negatable("Show the agent's output only when it exits.");
    /// Give each agent ralph's tools (an MCP server: ralph_ask, ralph_add_task, ralph_note, ralph_context) through its own MCP configuration (default).
    agent_tools: bool = true, heading "Agent and output", value "",
        cli Cli::Negatable("Give the agents none of ralph's tools (no MCP server is passed to them).");
    /// How long an agent's ralph_ask waits for a person's answer; then it is told to decide itself.
    ask_timeout: Duration = Duration::from_secs(900), heading "Agent and output", value "DURATION";
    /// In a parallel run, show every agent's own output too, each line prefixed with its task.
    verbose: bool = false, heading "Agent and output", value "";
    /// Cut an iteration's log (.ralph/logs/) at this many bytes (e.g. 50M).
    log_max_size: Option<u64> = Some(50_000_000),
        heading "Agent and output", value "BYTES", note "k and M suffixes; none: no limit";
    /// Keep the logs of this many iterations (the oldest are removed).
    keep_logs: u32 = 200, heading "Agent and output", value "N";
    /// Print every tool call instead of the compact `| Tools` summary.
    verbose_tools: bool = false, heading "Agent and output", value "";
    /// OpenCode only: load no plugins except authentication plugins.
    no_plugins: bool = false, heading "Agent and output", value "";
    /// Let the agent use every tool without asking (default).
    allow_all: bool = true, heading "Agent and output", value "",
        cli Cli::Negatable("Keep the agent's own permission prompts.");
    /// Commit the agent's work after every iteration that changes files (default).
    commit: bool = true, heading "Agent and output", value "",
        cli Cli::Negatable("Do not commit anything.");
    /// Also commit the files that had uncommitted changes when the loop started (by default ralph lists them at start and commits only the agent's changes).
    commit_dirty: bool = false, heading "Agent and output", value "";
    /// Arguments passed to the agent verbatim (on the command line: everything after `--`).
    agent_args: Vec<String> = Vec::new(), heading "Agent and output", value "ARG", cli Cli::None;
    /// Shell command run after every iteration, with the event's JSON on stdin.
    on_iteration: Option<String> = None,
        heading "Hooks", value "CMD", example "\"./notify.sh\"";
    /// Shell command run when the loop completes, with the event's JSON on stdin.
    on_complete: Option<String> = None, heading "Hooks", value "CMD";
    /// Shell command run when the loop stops without completing (limit, failure, interrupt, abort).
    on_stop: Option<String> = None, heading "Hooks", value "CMD";
    /// Shell command run on every event of that name, with its JSON on stdin (repeatable; e.g. commit_failed=./alert.sh).
    on_event: Vec<String> = Vec::new(),
        heading "Hooks", value "EVENT=CMD", example "[\"commit_failed=./alert.sh\"]";
    /// Time limit of each hook; a hook that runs longer is stopped (a warning).
    hook_timeout: Duration = Duration::from_secs(30), heading "Hooks", value "DURATION";
    /// POST a short message to this URL when the loop ends (repeat for several; Slack, Discord and ntfy URLs get their own shape).
    notify: Vec<String> = Vec::new(),
        heading "Hooks", value "URL", example "[\"https://ntfy.sh/my-topic\"]";
    /// With --notify: a message after every iteration too.
    notify_each: bool = false, heading "Hooks", value "";
    /// The message's shape: auto (from the URL), slack, discord, ntfy or json.
    notify_format: String = "auto".to_owned(), heading "Hooks", value "FORMAT";
    /// Send the run as OpenTelemetry traces and metrics to this OTLP/HTTP endpoint (e.g. http://localhost:4318; OTEL_EXPORTER_OTLP_ENDPOINT does the same); nothing is sent unless asked.
    otel: Option<String> = None,
        heading "Hooks", value "ENDPOINT", example "\"http://localhost:4318\"";
    /// Keep the HTML report (.ralph/report.html, see --report) up to date after every iteration.
    report: bool = false, heading "Hooks", value "", cli Cli::None;
    /// Run every agent (and what ralph runs after it) in a sandbox: auto (bwrap on Linux, Seatbelt on macOS), bwrap, seatbelt, docker, podman or none; `--sandbox` alone is auto.
    sandbox: crate::sandbox::Backend = crate::sandbox::Backend::None,
        heading "Sandbox", value "BACKEND", note "auto, bwrap, seatbelt, docker, podman or none";
    /// What a sandboxed agent may reach on the network: api (its model's API and --sandbox-allow hosts, through ralph's proxy), none, or full.
    sandbox_net: crate::sandbox::Net = crate::sandbox::Net::Api,
        heading "Sandbox", value "NET", note "api, none or full";
    /// A host (HOST or HOST:PORT) a sandboxed agent may reach besides its API (repeatable; presets @npm @pypi @crates @github).
    sandbox_allow: Vec<String> = Vec::new(),
        heading "Sandbox", value "HOST[:PORT]", example "[\"@crates\"]";
    /// An environment variable passed into the sandbox besides the agent's own (repeatable).
    sandbox_env: Vec<String> = Vec::new(), heading "Sandbox", value "NAME";
    /// A path mounted into the sandbox, read-only (:ro, the default) or writable (:rw) (repeatable).
    sandbox_mount: Vec<String> = Vec::new(), heading "Sandbox", value "PATH[:ro|rw]";
    /// The memory a sandboxed agent and everything it starts may use (e.g. 512M, 2G).
    sandbox_memory: Option<crate::sandbox::Bytes> = None,
        heading "Sandbox", value "BYTES", example "\"2G\"";
    /// The CPUs a sandboxed agent may use (e.g. 1.5).
    sandbox_cpus: Option<crate::sandbox::Cpus> = None, heading "Sandbox", value "N", example "2.0";
    /// The most processes a sandboxed agent may have at once.
    sandbox_pids: Option<u32> = None, heading "Sandbox", value "N", example "512";
    /// The image a docker or podman sandbox runs.
    sandbox_image: Option<String> = None, heading "Sandbox", value "IMAGE";
    /// A command line put before the agent's (srt, firejail, a cloud sandbox's CLI), instead of a backend.
    sandbox_wrapper: Option<String> = None, heading "Sandbox", value "CMD";
    /// Serve the runs of this repository to a browser and over HTTP at ADDR (default 127.0.0.1:8765): alone, beside a loop started elsewhere; with a prompt, inside the run.
    serve: Option<crate::options::parse::Addr> = None,
        heading "Serve", value "ADDR", example "\"127.0.0.1:8765\"";
    /// Let --serve listen on an address other machines can reach (anyone who reaches it can read your runs; changes still need the token).
    serve_allow_remote: bool = false, heading "Serve", value "";
    /// When to colour ralph's own messages.
    color: ColorChoice = ColorChoice::Auto,
        heading "Agent and output", value "WHEN", note "auto, always or never";
}

impl LoopOptions {
    /// What the `--sandbox…` options ask for.
    pub(crate) fn sandbox(&self) -> crate::sandbox::Settings {
        crate::sandbox::Settings {
            backend: self.sandbox,
            net: self.sandbox_net,
            allow: self.sandbox_allow.clone(),
            env: self.sandbox_env.clone(),
            mount: self.sandbox_mount.clone(),
            protect: self.protect.clone(),
            holdout: self.holdout.clone(),
            memory: self.sandbox_memory,
            cpus: self.sandbox_cpus,
            pids: self.sandbox_pids,
            image: self.sandbox_image.clone(),
            wrapper: self.sandbox_wrapper.clone(),
        }
    }
}

/// The declaration of `key`.
pub(crate) fn def(key: &str) -> Option<&'static Def> {
    DEFS.iter().find(|def| def.key == key)
}

/// The known key closest to a misspelt one.
pub(crate) fn closest(name: &str) -> Option<&'static str> {
    closest_in(name, DEFS.iter().map(|def| def.key))
}

/// The name of `names` closest to a misspelt one (at most three edits away).
pub(crate) fn closest_in(
    name: &str,
    names: impl Iterator<Item = &'static str>,
) -> Option<&'static str> {
    names
        .map(|known| (edit_distance(name, known), known))
        .filter(|(distance, _)| *distance <= 3)
        .min()
        .map(|(_, known)| known)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = (previous + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            previous = current;
        }
    }
    row[b.len()]
}

/// The loop options as clap arguments, flattened into the command line (`cli.rs`).
#[derive(Clone, Debug, Default)]
pub(crate) struct LoopArgs {
    /// The options given on the command line.
    pub(crate) layer: Layer,
}

impl clap::Args for LoopArgs {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        for def in DEFS {
            let base = || {
                let mut arg = Arg::new(def.key)
                    .long(def.flag())
                    .help(def_help(def))
                    .help_heading(def.heading);
                if !def.value_name.is_empty() {
                    arg = arg.value_name(def.value_name);
                }
                if let Some(short) = def.short {
                    arg = arg.short(short);
                }
                (def.arg)(arg)
            };
            match def.cli {
                Cli::Flag => cmd = cmd.arg(base()),
                Cli::Negatable(help) => {
                    let negation = format!("no_{}", def.key);
                    cmd = cmd.arg(base().overrides_with(&negation)).arg(
                        Arg::new(negation)
                            .long(format!("no-{}", def.flag()))
                            .help(help.trim_end_matches('.'))
                            .help_heading(def.heading)
                            .action(ArgAction::SetTrue)
                            .overrides_with(def.key),
                    );
                }
                Cli::None => {}
            }
        }
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for LoopArgs {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut layer = Layer::new(Source::CommandLine);
        for def in DEFS {
            let given =
                |id: &str| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
            match def.cli {
                Cli::None => {}
                Cli::Negatable(_) if given(&format!("no_{}", def.key)) => {
                    layer.set(def.key, Raw::Bool(false), Source::CommandLine);
                }
                _ if !given(def.key) => {}
                _ if def.boolean => {
                    layer.set(def.key, Raw::Bool(true), Source::CommandLine);
                }
                _ => {
                    let values: Vec<String> = matches
                        .get_many::<String>(def.key)
                        .map(|values| values.cloned().collect())
                        .unwrap_or_default();
                    let raw = if def.list {
                        Raw::List(values)
                    } else {
                        Raw::Text(values.into_iter().last().unwrap_or_default())
                    };
                    layer.set(def.key, raw, Source::CommandLine);
                }
            }
        }
        Ok(Self { layer })
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// The help line with the default appended (`[default: 1]`) when there is one worth showing.
fn def_help(def: &Def) -> String {
    let defaults = LoopOptions::default();
    let shown = defaults
        .values()
        .into_iter()
        .find(|(key, _)| *key == def.key)
        .map(|(_, raw)| raw.shown_bare())
        .unwrap_or_default();
    // As clap writes help taken from doc comments: no closing period.
    let help = def.help.trim().trim_end_matches('.');
    if def.boolean || shown.is_empty() || shown == "none" || shown == "[]" {
        help.to_owned()
    } else {
        format!("{help} [default: {shown}]")
    }
}

/// The commented project config `ralph --init` writes.
pub(crate) fn init_text() -> String {
    let mut text = String::from(
        "# ralph project settings. Every key is optional; the command line and RALPH_* variables win.\n\
         # Durations: 500ms, 90s, 30m, 1h. See `ralph --help` for what each option does, and\n\
         # `ralph --config` for the settings in effect and where each comes from.\n\n",
    );
    let defaults: BTreeMap<&str, Raw> = LoopOptions::default().values().into_iter().collect();
    for def in DEFS {
        let value = def
            .example
            .map(str::to_owned)
            .or_else(|| defaults.get(def.key).map(Raw::shown))
            .unwrap_or_default();
        let line = format!("# {} = {value}", def.key);
        if def.note.is_empty() {
            text.push_str(&line);
        } else {
            text.push_str(&format!("{line:<33} # {}", def.note));
        }
        text.push('\n');
    }
    text.push_str(CUSTOM_AGENT_EXAMPLE);
    text
}

const CUSTOM_AGENT_EXAMPLE: &str = "
# A custom agent, run with `ralph --agent my-agent` (a name of its own, not a built-in one):
# [agents.my-agent]
# command = \"my-agent\"                                # or [\"my-agent\", \"--headless\"]
# args = [\"--yes\", \"--message\", \"{prompt}\"]          # {prompt}: the prompt as an argument
# model_args = [\"--model\", \"{model}\"]                # added when a model is set
# allow_all_args = []                                  # added with --allow-all
# prompt = \"argument\"                                  # or \"stdin\"
# format = \"text\"                 # text, or the JSON events of claude-code, codex or opencode
# tool_pattern = '^Applied edit to (\\S+)'              # text format: group 1 names the tool
# env = { MY_AGENT_AUTO_COMMITS = \"false\" }
#
# An agent that speaks ACP (the Agent Client Protocol):
# [agents.my-acp-agent]
# protocol = \"acp\"
# command = [\"my-agent\", \"--acp\"]
";

/// The saved loop's options as a settings layer: the state's `options` object (config keys and
/// config-file values), or, for a state written by ralph.ts or an older ralph, what it has.
pub(crate) fn saved_layer(state: &crate::storage::state::LoopState) -> Layer {
    let mut layer = Layer::new(Source::SavedLoop);
    let reference = [
        ("agent", Raw::Str(state.agent.clone())),
        ("model", Raw::Str(state.model.clone())),
        ("min_iterations", Raw::Int(state.min_iterations.to_string())),
        ("max_iterations", Raw::Int(state.max_iterations.to_string())),
        (
            "completion_promise",
            Raw::Str(state.completion_promise.clone()),
        ),
        ("tasks", Raw::Bool(state.tasks_mode)),
        ("task_promise", Raw::Str(state.task_promise.clone())),
    ];
    for (key, raw) in reference {
        layer.set(key, raw, Source::SavedLoop);
    }
    for (key, value) in state.options.iter().flatten() {
        // A value this ralph cannot read (a newer or older format) falls back to the default.
        if let Some((def, raw)) = layer::saved_entry(key, value)
            && (def.check)(&raw).is_ok()
        {
            layer.set(def.key, raw, Source::SavedLoop);
        }
    }
    layer
}

/// The options as the loop state saves them (config keys, config-file values).
pub(crate) fn saved_options(options: &LoopOptions) -> BTreeMap<String, serde_json::Value> {
    options
        .values()
        .into_iter()
        .filter(|(key, _)| *key != "color")
        .map(|(key, raw)| (key.to_owned(), raw.to_json()))
        .collect()
}

/// `--flag: old → new` for every option whose value differs.
pub(crate) fn changes(before: &LoopOptions, after: &LoopOptions) -> Vec<String> {
    before
        .values()
        .into_iter()
        .zip(after.values())
        .filter(|((_, old), (_, new))| old != new)
        .map(|((key, old), (_, new))| {
            format!(
                "--{}: {} → {}",
                key.replace('_', "-"),
                old.shown_bare(),
                new.shown_bare()
            )
        })
        .collect()
}

/// Where the project config file lives, relative to the working directory.
pub(crate) const PROJECT_FILE: &str = ".ralph/config.toml";

/// `$XDG_CONFIG_HOME/ralph/config.toml`, else `~/.config/ralph/config.toml`.
pub(crate) fn user_file(var: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    var("XDG_CONFIG_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|home| PathBuf::from(home).join(".config")))
        .map(|dir| dir.join("ralph").join("config.toml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_has_a_flag_a_key_and_a_variable() {
        let def = def("max_iterations").unwrap();
        assert_eq!(def.flag(), "max-iterations");
        assert_eq!(def.variable(), "RALPH_MAX_ITERATIONS");
        assert!(DEFS.iter().all(|def| !def.help.is_empty()));
        let keys: std::collections::BTreeSet<&str> = DEFS.iter().map(|def| def.key).collect();
        assert_eq!(keys.len(), DEFS.len(), "keys are unique");
    }

    #[test]
    fn the_init_file_shows_every_key() {
        let text = init_text();
        for def in DEFS {
            assert!(text.contains(&format!("# {} = ", def.key)), "{}", def.key);
        }
        assert!(text.contains("# max_iterations = 0"));
        assert!(text.contains("# pause = \"1s\""));
    }

    #[test]
    fn changes_show_durations_as_durations() {
        let before = LoopOptions::default();
        let after = LoopOptions {
            max_runtime: Some(Duration::from_secs(3600)),
            max_iterations: 2,
            verify: vec!["true".to_owned()],
            ..LoopOptions::default()
        };
        assert_eq!(
            changes(&before, &after),
            [
                "--max-iterations: 0 → 2",
                "--verify: [] → [\"true\"]",
                "--max-runtime: none → 1h"
            ]
        );
    }

    #[test]
    fn saved_options_round_trip() {
        let options = LoopOptions {
            pause: Duration::from_millis(1500),
            max_cost: Some(2.5),
            max_tokens: Some(500_000),
            verify: vec!["make".to_owned()],
            ..LoopOptions::default()
        };
        let saved = saved_options(&options);
        let mut layer = Layer::new(Source::SavedLoop);
        for (key, value) in &saved {
            let (def, raw) = layer::saved_entry(key, value).unwrap();
            layer.set(def.key, raw, Source::SavedLoop);
        }
        let resolved = LoopOptions::resolve(&[&layer]).unwrap();
        assert_eq!(
            LoopOptions {
                color: ColorChoice::Auto,
                ..resolved
            },
            options
        );
    }
}
