//! Judgements on whole-cluster runs (`e2e/corpus/`: each run's complete
//! audit log from the control plane's start, with its `truth.yaml`): the
//! cluster's start-up stays in the background, the true cause comes first,
//! a healthy run raises no alarm in explain nor in any display mode, a
//! controller's back-off is not a hop. `e2e/corpus/score.sh` scores every
//! run; these tests pin the behaviours one by one.

#[path = "../common/mod.rs"]
mod common;

use std::path::PathBuf;

use std::sync::Arc;

use std::time::Duration;

use kascade::app::explain::{ExplainConfig, explain};

use kascade::test_support::analysis::explain::{FindingKind, Report, Scope, Severity};

use kascade::test_support::frontend::assemble::Scope as TreeScope;

use kascade::test_support::frontend::display::Mode;

use kascade::test_support::frontend::display::cascade::CRITICAL_MARK;

use kascade::test_support::frontend::raw::{MemoryStore, TimeRange, from_nanos};

use kascade::test_support::frontend::{AssembledTrace, Frontend, FrontendConfig, SearchQuery};

use opentelemetry_proto::tonic::trace::v1::Span;

const CLUSTER: &str = "corpus";

const MODES: [Mode; 5] = [
    Mode::Tracing,
    Mode::Tree,
    Mode::Timeline,
    Mode::Grouped,
    Mode::Cascade,
];

fn corpus_log(run: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("e2e/corpus")
        .join(run)
        .join("audit.log.gz")
}

/// A run's audit logs: `audit.log.gz`, then one per further apiserver
/// (`audit-2.log.gz`), as they are given to kascade together.
fn corpus_logs(run: &str) -> Vec<PathBuf> {
    let first = corpus_log(run);
    let dir = first.parent().unwrap().to_path_buf();
    let mut rest: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("audit-") && name.ends_with(".log.gz")
        })
        .collect();
    rest.sort();
    std::iter::once(first).chain(rest).collect()
}

/// A run's lines as the offline commands read its logs (several merged by
/// time).
fn lines(run: &str) -> Vec<String> {
    kascade::app::Lines::without_progress(corpus_logs(run))
        .correcting_clocks()
        .collect()
}

/// A run explained as score.sh does: its logs, and its apiserver traces
/// when the run was traced.
fn explain_run(run: &str) -> Report {
    let traces = corpus_log(run).with_file_name("apiserver-traces.jsonl.gz");
    explain_with(ExplainConfig {
        files: corpus_logs(run),
        component_traces: traces.exists().then_some(traces).into_iter().collect(),
        ..ExplainConfig::default()
    })
}

fn explain_file(path: PathBuf) -> Report {
    explain_files(vec![path])
}

fn explain_files(files: Vec<PathBuf>) -> Report {
    explain_with(ExplainConfig {
        files,
        scope: Scope::default(),
        ..ExplainConfig::default()
    })
}

fn explain_with(config: ExplainConfig) -> Report {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(explain(&config))
        .unwrap()
}

/// Every run the corpus marks healthy (read from the truth files).
fn healthy_runs() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("e2e/corpus");
    let mut out: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let truth = std::fs::read_to_string(e.path().join("truth.yaml")).ok()?;
            truth
                .lines()
                .any(|l| l.trim() == "verdict: healthy")
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect();
    out.sort();
    out
}

async fn frontend(run: &str) -> (Frontend<MemoryStore>, TimeRange) {
    frontend_of_lines(lines(run)).await
}

async fn frontend_of_lines(lines: Vec<String>) -> (Frontend<MemoryStore>, TimeRange) {
    let store = common::raw_store_of_lines(lines, CLUSTER).await;
    let (a, b) = store.time_span().unwrap();
    (
        Frontend::new(Arc::new(store), FrontendConfig::default()),
        TimeRange::new(from_nanos(a), from_nanos(b)),
    )
}

async fn search(
    f: &Frontend<MemoryStore>,
    range: TimeRange,
    mode: Mode,
    object: (&str, &str, &str),
) -> Arc<AssembledTrace> {
    let (resource, namespace, name) = object;
    let found = f
        .search(&SearchQuery {
            mode,
            scope: TreeScope::Full,
            all_siblings: false,
            tags: [
                ("resource", resource),
                ("namespace", namespace),
                ("name", name),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            range,
            limit: 1,
        })
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{object:?} {mode:?}");
    found[0].clone()
}

fn spans(t: &AssembledTrace) -> Vec<Span> {
    t.resource_spans
        .iter()
        .flat_map(|rs| rs.scope_spans.iter().flat_map(|ss| ss.spans.clone()))
        .collect()
}

/// The span without a parent: a trace's title in the UI.
fn top(spans: &[Span]) -> &Span {
    spans
        .iter()
        .find(|s| s.parent_span_id.is_empty())
        .expect("a top span")
}

fn in_error(s: &Span) -> bool {
    s.status.as_ref().is_some_and(|st| st.code == 2)
}

fn string_attr<'a>(s: &'a Span, key: &str) -> Option<&'a str> {
    kascade::test_support::frontend::raw::string_attr(&s.attributes, key)
}

/// No span of `object`'s trace is in error, in any display mode.
async fn no_error_in_any_mode(run: &str, object: (&str, &str, &str)) {
    no_error_in_any_mode_of(run, lines(run), object).await
}

/// [`no_error_in_any_mode`] for the run's lines as given (`run` names them).
async fn no_error_in_any_mode_of(run: &str, lines: Vec<String>, object: (&str, &str, &str)) {
    let (f, range) = frontend_of_lines(lines).await;
    for mode in MODES {
        let t = search(&f, range, mode, object).await;
        let red: Vec<String> = spans(&t)
            .iter()
            .filter(|s| in_error(s))
            .map(|s| format!("{}: {:?}", s.name, s.status.as_ref().map(|st| &st.message)))
            .collect();
        assert!(red.is_empty(), "{run} {object:?} {mode:?}: {red:#?}");
    }
}

/// Writes `lines` to a temporary file and explains it.
fn explain_lines(lines: &[String]) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let config = ExplainConfig {
        files: vec![path],
        scope: Scope::default(),
        ..ExplainConfig::default()
    };
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(explain(&config))
        .unwrap()
}

/// Sends each change to several sinks.
struct Tee(Vec<Arc<dyn kascade::test_support::flow::ChangeSink>>);

impl kascade::test_support::flow::ChangeSink for Tee {
    fn wants_objects(&self) -> bool {
        self.0.iter().any(|s| s.wants_objects())
    }
    fn record(&self, change: &kascade::test_support::flow::ChangeRecord) {
        for s in &self.0 {
            s.record(change);
        }
    }
}

/// Like [`search`], with `tags` and `scope` of the caller's choosing.
async fn search_with(
    f: &Frontend<MemoryStore>,
    range: TimeRange,
    mode: Mode,
    scope: TreeScope,
    tags: &[(&str, &str)],
) -> Arc<AssembledTrace> {
    search_siblings(f, range, mode, scope, tags, false).await
}

/// [`search_with`], every write of a wide level shown if `all_siblings`
/// (the tag `siblings=all`).
async fn search_siblings(
    f: &Frontend<MemoryStore>,
    range: TimeRange,
    mode: Mode,
    scope: TreeScope,
    tags: &[(&str, &str)],
    all_siblings: bool,
) -> Arc<AssembledTrace> {
    let found = f
        .search(&SearchQuery {
            mode,
            scope,
            all_siblings,
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            range,
            limit: 1,
        })
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{tags:?} {mode:?}");
    found[0].clone()
}

/// When the audit log's write `verb resource namespace/name` was received
/// (ns since the epoch).
fn write_time(run: &str, verb: &str, resource: &str, namespace: &str, name: &str) -> u64 {
    lines(run)
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| {
            let o = &e["objectRef"];
            e["stage"] == "ResponseComplete"
                && e["verb"] == verb
                && o["resource"] == resource
                && o["namespace"].as_str().unwrap_or_default() == namespace
                && o["name"] == name
                && o.get("subresource").is_none()
        })
        .and_then(|e| humantime::parse_rfc3339_weak(e["requestReceivedTimestamp"].as_str()?).ok())
        .map(|t| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64)
        .unwrap_or_else(|| panic!("{run}: no {verb} {resource} {namespace}/{name}"))
}

/// A span or log: name, start, tags (with `error.message` when in error).
type Row = (String, u64, Vec<(String, String)>);

/// Every span and log of a trace — in tracing mode entries are logs of
/// their object's span.
fn rows(t: &AssembledTrace) -> Vec<Row> {
    let tags = |a: &[opentelemetry_proto::tonic::common::v1::KeyValue]| -> Vec<(String, String)> {
        a.iter()
            .map(|kv| {
                let v = kv.value.as_ref().and_then(|v| v.value.as_ref());
                let v = match v {
                    Some(
                        opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s),
                    ) => s.clone(),
                    Some(opentelemetry_proto::tonic::common::v1::any_value::Value::IntValue(i)) => {
                        i.to_string()
                    }
                    other => format!("{other:?}"),
                };
                (kv.key.clone(), v)
            })
            .collect()
    };
    let mut out = Vec::new();
    for s in spans(t) {
        let mut t = tags(&s.attributes);
        if in_error(&s) {
            t.push(("error.message".into(), s.status.clone().unwrap().message));
        }
        out.push((s.name.clone(), s.start_time_unix_nano, t));
        for e in &s.events {
            out.push((e.name.clone(), e.time_unix_nano, tags(&e.attributes)));
        }
    }
    out
}

/// `run`'s log with Event `event`'s last patch repeated `times` more
/// times, a minute apart (its count going up), and, if `then` is given,
/// a new Event `(reason, message)` about the same object a minute after
/// the last repeat: a stuck object whose controller keeps saying the same.
fn with_repeats(run: &str, event: &str, times: i64, then: Option<(&str, &str)>) -> Vec<String> {
    use serde_json::{Value, json};
    let mut lines = lines(run);
    let is_event = |e: &Value| {
        e["objectRef"]["resource"] == "events"
            && e["objectRef"]["name"] == event
            && e["stage"] == "ResponseComplete"
    };
    let parsed: Vec<Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(is_event)
        .collect();
    let create = parsed
        .iter()
        .find(|e| e["verb"] == "create")
        .unwrap()
        .clone();
    let last = parsed
        .iter()
        .rfind(|e| e["verb"] == "patch")
        .unwrap()
        .clone();
    let at = |e: &Value| {
        humantime::parse_rfc3339_weak(e["requestReceivedTimestamp"].as_str().unwrap()).unwrap()
    };
    let stamp = |t: std::time::SystemTime, micros: bool| {
        if micros {
            humantime::format_rfc3339_micros(t).to_string()
        } else {
            humantime::format_rfc3339_seconds(t).to_string()
        }
    };
    let count = last["requestObject"]["count"].as_i64().unwrap();
    let rv: i64 = last["responseObject"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut t = at(&last);
    for k in 1..=times {
        t += Duration::from_secs(60);
        let mut e = last.clone();
        e["auditID"] = json!(format!("repeat-{event}-{k}"));
        e["requestReceivedTimestamp"] = json!(stamp(t, true));
        e["stageTimestamp"] = json!(stamp(t + Duration::from_millis(2), true));
        e["requestObject"]["count"] = json!(count + k);
        e["requestObject"]["lastTimestamp"] = json!(stamp(t, false));
        e["responseObject"]["count"] = json!(count + k);
        e["responseObject"]["lastTimestamp"] = json!(stamp(t, false));
        e["responseObject"]["metadata"]["resourceVersion"] = json!((rv + k).to_string());
        lines.push(e.to_string());
    }
    if let Some((reason, message)) = then {
        t += Duration::from_secs(60);
        let mut e = create;
        let name = format!("{event}-new");
        e["auditID"] = json!(format!("new-{event}"));
        e["objectRef"]["name"] = json!(name);
        e["requestReceivedTimestamp"] = json!(stamp(t, true));
        e["stageTimestamp"] = json!(stamp(t + Duration::from_millis(2), true));
        for body in ["requestObject", "responseObject"] {
            let b = &mut e[body];
            b["metadata"]["name"] = json!(name);
            b["reason"] = json!(reason);
            b["message"] = json!(message);
            b["firstTimestamp"] = json!(stamp(t, false));
            b["lastTimestamp"] = json!(stamp(t, false));
        }
        e["responseObject"]["metadata"]["uid"] = json!("00000000-0000-4000-8000-00000000beef");
        e["responseObject"]["metadata"]["resourceVersion"] = json!((rv + times + 1).to_string());
        lines.push(e.to_string());
    }
    lines
}

fn analyze_json(run: &str) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kascade"))
        .arg("analyze")
        .args(corpus_logs(run))
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{run}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every change's cause was received before it: no cause points forward in
/// time, whatever order or clocks the logs came with.
fn no_cause_after(changes: &[kascade::test_support::flow::ChangeRecord], what: &str) {
    let received: std::collections::HashMap<_, _> =
        changes.iter().map(|c| (c.span, c.received)).collect();
    for c in changes {
        if let Some(k) = &c.cause
            && let Some(&at) = received.get(&k.span)
        {
            assert!(
                at <= c.received,
                "{what}: {} caused by a later {}",
                c.user,
                k.name
            );
        }
    }
}

/// `kascade trace FILES --mode cascade` of the `two-apiservers` run's
/// Deployment, ha-demo/web (it must succeed).
fn cascade_mode_of_ha_web(files: &[PathBuf]) -> std::process::Output {
    common::succeeded(
        common::kascade()
            .arg("trace")
            .args(files)
            .args(["--resource", "deployments", "--namespace", "ha-demo"])
            .args(["--name", "web", "--mode", "cascade"]),
    )
}

/// The run's second log with its times moved by `secs` (derived: no
/// apiserver's clock can be set here, so the test shifts its log's times,
/// the lines otherwise as logged).
fn second_log_shifted(dir: &std::path::Path, secs: i64) -> Vec<PathBuf> {
    second_log_shifted_ms(dir, secs * 1000, &format!("audit-2-shifted{secs}.log"))
}

/// [`second_log_shifted`] by `ms` milliseconds, into `name`.
fn second_log_shifted_ms(dir: &std::path::Path, ms: i64, name: &str) -> Vec<PathBuf> {
    let logs = corpus_logs("two-apiservers");
    let shifted = dir.join(name);
    let mut out = String::new();
    for line in kascade::app::Lines::without_progress(vec![logs[1].clone()]) {
        let mut e: serde_json::Value = serde_json::from_str(&line).unwrap();
        for key in ["requestReceivedTimestamp", "stageTimestamp"] {
            let t = humantime::parse_rfc3339(e[key].as_str().unwrap()).unwrap();
            let by = Duration::from_millis(ms.unsigned_abs());
            let t = if ms < 0 { t - by } else { t + by };
            e[key] = humantime::format_rfc3339_micros(t).to_string().into();
        }
        out.push_str(&e.to_string());
        out.push('\n');
    }
    std::fs::write(&shifted, out).unwrap();
    vec![logs[0].clone(), shifted]
}

/// The note on the clocks, if the report has one.
fn clock_note(report: &Report) -> Option<&String> {
    report
        .inputs
        .notes
        .iter()
        .find(|n| n.contains("clock of the apiserver"))
}

mod clocks;
mod determinism;
mod hops;
mod inputs;
mod judgement;
mod readable;
mod real_node;
mod traced;
