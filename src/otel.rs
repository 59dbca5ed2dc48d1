//! `--otel ENDPOINT` (or `OTEL_EXPORTER_OTLP_ENDPOINT`): the run as OpenTelemetry traces and
//! metrics, sent over OTLP/HTTP in its JSON encoding (`POST ENDPOINT/v1/traces`,
//! `ENDPOINT/v1/metrics`) — no exporter crate: the protocol is a documented JSON document, and
//! the few lines here cost nothing at start-up.
//!
//! One trace per ralph process: the run's span (`ralph run`), a span per task of a `--parallel`
//! run or a worker (`task <id>`), one per iteration (`iteration N`) under its task (or the run),
//! and under each iteration the agent's call (`agent <id>`, with its cost and tokens) and every
//! check that judged it (`check <command>`); a task's merge is `merge <id>` under the task. Spans
//! are sent as they end (after every iteration) and at the run's end, with the metrics
//! `ralph.cost` (USD), `ralph.tokens`, `ralph.iterations` and `ralph.waits` (cumulative sums).
//! Nothing is sent unless asked; a failed send is said once and the run goes on.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::event::{LoopEvent, Reporter, Stamped};

/// How long one send may take.
const TIMEOUT: Duration = Duration::from_secs(3);

/// The standard variable naming the OTLP endpoint.
pub(crate) const ENDPOINT_VARIABLE: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// A span, open or ended.
#[derive(Clone, Debug)]
struct Span {
    id: String,
    parent: Option<String>,
    name: String,
    start: DateTime<Utc>,
    end: Option<DateTime<Utc>>,
    attributes: Vec<(String, Value)>,
    failed: bool,
}

/// The run's trace and totals, shared by every loop of the process.
#[derive(Debug)]
pub(crate) struct Trace {
    endpoint: String,
    trace_id: String,
    started: DateTime<Utc>,
    run: Span,
    tasks: BTreeMap<String, Span>,
    /// Open iterations, by task (`""`: the run's own loop) and number.
    iterations: BTreeMap<(String, u32), Span>,
    /// Ended spans not sent yet.
    ended: Vec<Span>,
    cost: f64,
    tokens: u64,
    iterations_run: u64,
    waits: u64,
    said_failure: bool,
    over: bool,
}

/// The process's trace, made by the first loop that asks (`None`: not asked for).
static TRACE: OnceLock<Option<Arc<Mutex<Trace>>>> = OnceLock::new();

/// The reporter of one loop: hands its events to the process's trace.
pub(crate) struct Otel(Arc<Mutex<Trace>>);

impl Otel {
    /// The reporter, when `--otel` or `OTEL_EXPORTER_OTLP_ENDPOINT` names an endpoint.
    pub(crate) fn new(endpoint: Option<&str>) -> Option<Self> {
        let trace = TRACE.get_or_init(|| {
            let endpoint = endpoint
                .map(str::to_owned)
                .or_else(|| std::env::var(ENDPOINT_VARIABLE).ok())
                .filter(|url| !url.trim().is_empty())?;
            Some(Arc::new(Mutex::new(Trace::new(
                &endpoint,
                crate::model::now(),
            ))))
        });
        trace.as_ref().map(|trace| Self(Arc::clone(trace)))
    }
}

impl Reporter for Otel {
    fn event(&mut self, event: &Stamped<'_>) {
        let mut trace = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        trace.hear(event);
        // After a failed send, nothing more is sent: a collector that is down would slow every
        // iteration by the sends' time.
        if trace.said_failure {
            return;
        }
        if let Some((spans, metrics)) = trace.due() {
            let failed = send(&trace.endpoint, &spans, &metrics);
            if let Some(why) = failed
                && !trace.said_failure
            {
                trace.said_failure = true;
                crate::output::warn(&[&format!(
                    "⚠️  --otel: could not send to {} ({why}); the run goes on without it. Check the endpoint (an OTLP/HTTP receiver, e.g. http://localhost:4318).",
                    trace.endpoint
                )]);
            }
        }
    }
}

/// 16 random bytes (a trace id) or 8 (a span id), in hex.
fn random_hex(bytes: usize) -> String {
    crate::model::random_hex(bytes).unwrap_or_else(|_| {
        // Unique enough in one machine's traces: the time and the process.
        let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
        let mut buffer = vec![0u8; bytes];
        for (at, byte) in seed.bytes().enumerate() {
            buffer[at % bytes] ^= byte;
        }
        buffer.iter().map(|byte| format!("{byte:02x}")).collect()
    })
}

impl Trace {
    fn new(endpoint: &str, now: DateTime<Utc>) -> Self {
        Self {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            trace_id: random_hex(16),
            started: now,
            run: Span {
                id: random_hex(8),
                parent: None,
                name: "ralph run".to_owned(),
                start: now,
                end: None,
                attributes: Vec::new(),
                failed: false,
            },
            tasks: BTreeMap::new(),
            iterations: BTreeMap::new(),
            ended: Vec::new(),
            cost: 0.0,
            tokens: 0,
            iterations_run: 0,
            waits: 0,
            said_failure: false,
            over: false,
        }
    }

    fn child(&self, parent: &str, name: String, start: DateTime<Utc>) -> Span {
        Span {
            id: random_hex(8),
            parent: Some(parent.to_owned()),
            name,
            start,
            end: None,
            attributes: Vec::new(),
            failed: false,
        }
    }

    /// The span of task `task` (opened now if it has none), or the run's.
    fn parent_of(&mut self, task: Option<&str>, at: DateTime<Utc>) -> String {
        let Some(task) = task else {
            return self.run.id.clone();
        };
        if !self.tasks.contains_key(task) {
            let mut span = self.child(&self.run.id, format!("task {task}"), at);
            span.attributes.push(("ralph.task".to_owned(), json!(task)));
            self.tasks.insert(task.to_owned(), span);
        }
        self.tasks[task].id.clone()
    }

    /// Ends task `task`'s span, if open.
    fn end_task(&mut self, task: &str, at: DateTime<Utc>, failed: bool) {
        if let Some(mut span) = self.tasks.remove(task) {
            span.end = Some(at);
            span.failed = failed;
            self.ended.push(span);
        }
    }

    /// Takes in one event.
    fn hear(&mut self, stamped: &Stamped<'_>) {
        let at = stamped.time;
        let task = stamped.task;
        let key = task.unwrap_or_default().to_owned();
        match stamped.event {
            LoopEvent::RunStarted { .. } | LoopEvent::WorkerStarted { .. } if task.is_none() => {
                let name = stamped.event.name();
                self.run
                    .attributes
                    .push(("ralph.shape".to_owned(), json!(name)));
            }
            LoopEvent::TaskStarted { task: id, .. } | LoopEvent::TaskClaimed { task: id, .. } => {
                self.parent_of(Some(id), at);
            }
            LoopEvent::IterationStarted { iteration, .. } => {
                let parent = self.parent_of(task, at);
                let mut span = self.child(&parent, format!("iteration {iteration}"), at);
                span.attributes
                    .push(("ralph.iteration".to_owned(), json!(iteration)));
                self.iterations.insert((key, *iteration), span);
            }
            LoopEvent::IterationFinished(record) => self.iteration_ended(task, record, at),
            LoopEvent::Verified(check) => {
                let parent = (self.iterations.iter().rev())
                    .find(|((of, _), _)| *of == key)
                    .map(|(_, span)| span.id.clone());
                let parent = parent.unwrap_or_else(|| self.parent_of(task, at));
                let ran = chrono::Duration::milliseconds(
                    i64::try_from(check.duration_ms).unwrap_or(i64::MAX),
                );
                let mut span = self.child(&parent, format!("check {}", check.command), at - ran);
                span.end = Some(at);
                span.failed = !check.passed;
                span.attributes
                    .push(("ralph.check".to_owned(), json!(check.command)));
                self.ended.push(span);
            }
            LoopEvent::TaskMerged {
                task: id, commit, ..
            } => {
                let parent = self.parent_of(Some(id), at);
                let mut span = self.child(&parent, format!("merge {id}"), at);
                span.end = Some(at);
                span.attributes
                    .push(("ralph.commit".to_owned(), json!(commit)));
                self.ended.push(span);
                self.end_task(id, at, false);
            }
            LoopEvent::TaskFailed { task: id, .. } => self.end_task(id, at, true),
            LoopEvent::TaskWaits { .. }
            | LoopEvent::TaskWaitsForRoom { .. }
            | LoopEvent::MergeWaits { .. }
            | LoopEvent::WorkerWaiting { .. } => self.waits += 1,
            // A task's loop ends before its merge: its span ends with the merge (or the run).
            LoopEvent::RunEnded(end) if task.is_none() => self.end_run(at, end.exit_code),
            LoopEvent::ParallelEnded(end) if task.is_none() => self.end_run(at, end.exit_code),
            LoopEvent::WorkerEnded { exit_code, .. } if task.is_none() => {
                self.end_run(at, *exit_code);
            }
            _ => {}
        }
    }

    fn iteration_ended(
        &mut self,
        task: Option<&str>,
        record: &crate::storage::history::IterationRecord,
        at: DateTime<Utc>,
    ) {
        let key = (task.unwrap_or_default().to_owned(), record.iteration);
        let mut span = match self.iterations.remove(&key) {
            Some(span) => span,
            None => {
                let parent = self.parent_of(task, record.started_at);
                self.child(
                    &parent,
                    format!("iteration {}", record.iteration),
                    record.started_at,
                )
            }
        };
        let tokens = record
            .tokens
            .as_ref()
            .map_or(0, crate::model::Usage::billable);
        let agent = record.agent.clone().unwrap_or_default();
        let mut call = self.child(&span.id, format!("agent {agent}"), record.started_at);
        call.end = Some(record.ended_at);
        call.failed = record.exit_code != 0;
        call.attributes.extend([
            ("ralph.agent".to_owned(), json!(agent)),
            ("ralph.exit_code".to_owned(), json!(record.exit_code)),
            ("ralph.tokens".to_owned(), json!(tokens)),
        ]);
        if let Some(cost) = record.cost_usd {
            call.attributes
                .push(("ralph.cost_usd".to_owned(), json!(cost)));
            self.cost += cost;
        }
        self.tokens = self.tokens.saturating_add(tokens);
        self.iterations_run += 1;
        span.end = Some(at.max(record.ended_at));
        span.failed = record.exit_code != 0;
        self.ended.push(call);
        self.ended.push(span);
    }

    /// Ends the run's span, and with it every span still open.
    fn end_run(&mut self, at: DateTime<Utc>, exit_code: u8) {
        let open: Vec<String> = self.tasks.keys().cloned().collect();
        for task in open {
            self.end_task(&task, at, false);
        }
        for (_, mut span) in std::mem::take(&mut self.iterations) {
            span.end = Some(at);
            self.ended.push(span);
        }
        let mut run = self.run.clone();
        run.end = Some(at);
        run.failed = exit_code != 0;
        run.attributes
            .push(("ralph.exit_code".to_owned(), json!(exit_code)));
        self.ended.push(run);
        self.over = true;
    }

    /// The documents to send now, if any: the ended spans, and the metrics.
    fn due(&mut self) -> Option<(Value, Value)> {
        if self.ended.is_empty() {
            return None;
        }
        let spans: Vec<Value> = std::mem::take(&mut self.ended)
            .iter()
            .map(|span| self.span_value(span))
            .collect();
        let traces = json!({"resourceSpans": [{
            "resource": resource(),
            "scopeSpans": [{"scope": scope(), "spans": spans}],
        }]});
        Some((traces, self.metrics_value()))
    }

    fn span_value(&self, span: &Span) -> Value {
        let attributes: Vec<Value> = (span.attributes.iter())
            .map(|(key, value)| attribute(key, value))
            .collect();
        let mut value = json!({
            "traceId": self.trace_id,
            "spanId": span.id,
            "name": span.name,
            "kind": 1,
            "startTimeUnixNano": nanos(span.start),
            "endTimeUnixNano": nanos(span.end.unwrap_or(span.start)),
            "attributes": attributes,
            "status": {"code": if span.failed { 2 } else { 1 }},
        });
        if let Some(parent) = &span.parent {
            value["parentSpanId"] = json!(parent);
        }
        value
    }

    fn metrics_value(&self) -> Value {
        let now = nanos(crate::model::now());
        let start = nanos(self.started);
        let sum = |name: &str, unit: &str, point: Value| {
            let mut point = point;
            point["startTimeUnixNano"] = json!(start);
            point["timeUnixNano"] = json!(now);
            json!({"name": name, "unit": unit, "sum": {
                "aggregationTemporality": 2, "isMonotonic": true, "dataPoints": [point],
            }})
        };
        json!({"resourceMetrics": [{
            "resource": resource(),
            "scopeMetrics": [{"scope": scope(), "metrics": [
                sum("ralph.cost", "USD", json!({"asDouble": self.cost})),
                sum("ralph.tokens", "{token}", json!({"asInt": self.tokens.to_string()})),
                sum("ralph.iterations", "{iteration}", json!({"asInt": self.iterations_run.to_string()})),
                sum("ralph.waits", "{wait}", json!({"asInt": self.waits.to_string()})),
            ]}],
        }]})
    }
}

fn resource() -> Value {
    json!({"attributes": [
        {"key": "service.name", "value": {"stringValue": "ralph"}},
        {"key": "service.version", "value": {"stringValue": env!("CARGO_PKG_VERSION")}},
    ]})
}

fn scope() -> Value {
    json!({"name": "ralph", "version": env!("CARGO_PKG_VERSION")})
}

/// An OTLP attribute: strings, integers (as strings, as OTLP's JSON writes 64-bit ones),
/// doubles, booleans.
fn attribute(key: &str, value: &Value) -> Value {
    let any = match value {
        Value::Bool(flag) => json!({"boolValue": flag}),
        Value::Number(n) if n.is_i64() || n.is_u64() => json!({"intValue": n.to_string()}),
        Value::Number(n) => json!({"doubleValue": n.as_f64()}),
        Value::String(text) => json!({"stringValue": text}),
        other => json!({"stringValue": other.to_string()}),
    };
    json!({"key": key, "value": any})
}

fn nanos(at: DateTime<Utc>) -> String {
    at.timestamp_nanos_opt().unwrap_or_default().to_string()
}

/// POSTs the traces and the metrics; why the first failed send failed.
fn send(endpoint: &str, traces: &Value, metrics: &Value) -> Option<String> {
    let agent = crate::notify::post_agent(TIMEOUT);
    [("v1/traces", traces), ("v1/metrics", metrics)]
        .into_iter()
        .find_map(|(path, body)| {
            agent
                .post(format!("{endpoint}/{path}"))
                .header("Content-Type", "application/json")
                .send(body.to_string())
                .err()
                .map(|err| err.to_string())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Stamped;

    fn at(second: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + second, 0).unwrap()
    }

    fn hear(trace: &mut Trace, second: i64, task: Option<&str>, event: LoopEvent) {
        trace.hear(&Stamped {
            time: at(second),
            task,
            event: &event,
        });
    }

    fn record(iteration: u32, cost: f64) -> crate::storage::history::IterationRecord {
        crate::storage::history::IterationRecord {
            iteration,
            started_at: at(1),
            ended_at: at(2),
            cost_usd: Some(cost),
            agent: Some("claude-code".to_owned()),
            ..crate::storage::history::IterationRecord::default()
        }
    }

    #[test]
    fn a_tasks_iteration_hangs_under_its_task_under_the_run_and_the_agent_under_it() {
        let mut trace = Trace::new("http://collector:4318/", at(0));
        hear(
            &mut trace,
            1,
            Some("api"),
            LoopEvent::IterationStarted {
                iteration: 1,
                agent: "claude-code".to_owned(),
                model: None,
            },
        );
        hear(
            &mut trace,
            2,
            Some("api"),
            LoopEvent::IterationFinished(Box::new(record(1, 0.25))),
        );
        let (traces, metrics) = trace.due().unwrap();
        let spans = traces["resourceSpans"][0]["scopeSpans"][0]["spans"]
            .as_array()
            .unwrap();
        let named = |name: &str| spans.iter().find(|s| s["name"] == name).unwrap().clone();
        let (agent, iteration) = (named("agent claude-code"), named("iteration 1"));
        assert_eq!(agent["parentSpanId"], iteration["spanId"]);
        assert_eq!(iteration["parentSpanId"], json!(trace.tasks["api"].id));
        assert_eq!(
            json!(trace.tasks["api"].parent.clone().unwrap()),
            json!(trace.run.id)
        );
        let cost = &metrics["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0];
        assert_eq!(cost["name"], "ralph.cost");
        assert_eq!(cost["sum"]["dataPoints"][0]["asDouble"], 0.25);
        assert_eq!(trace.endpoint, "http://collector:4318");
        // Nothing new: nothing to send.
        assert!(trace.due().is_none());
        hear(
            &mut trace,
            3,
            Some("api"),
            LoopEvent::TaskMerged {
                task: "api".to_owned(),
                into: "main".to_owned(),
                commit: "abc".to_owned(),
            },
        );
        let (traces, _) = trace.due().unwrap();
        let spans = traces["resourceSpans"][0]["scopeSpans"][0]["spans"]
            .as_array()
            .unwrap();
        let names: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
        assert_eq!(names, ["merge api", "task api"]);
        assert!(spans.iter().all(|s| s["traceId"] == json!(trace.trace_id)));
    }
}
