//! Secret values planted wherever a credential can sit in the objects the
//! real control plane wrote (e2e/fixtures: audit request and response
//! objects, list-watch streams), run through the real pipeline: none of them
//! may appear anywhere in what kascade exports (span names, attributes,
//! event attributes, snapshots, diffs), while the planted values that are not
//! credentials do appear, so the check is not vacuous.
//!
//! Places planted, in every object that has them:
//! - Secret `data` (every key, plus a new one) and `stringData`;
//! - env values whose names look like credentials, in every container list
//!   at any depth (Pods, pod templates, ControllerRevision data), with and
//!   without duplicate env names (duplicates make diffs label items by index);
//! - `kubectl.kubernetes.io/last-applied-configuration` and another
//!   annotation holding a copy of the object (with all of the above in it),
//!   and a last-applied annotation that is not valid JSON;
//! - the message of every Kubernetes Event (core/v1 `message`,
//!   events.k8s.io/v1 `note`) about an object planted before it: it quotes
//!   the last credential planted in that object (a Secret's value decoded).

#[path = "../common/mod.rs"]
mod common;

use std::sync::Arc;

use std::time::Duration;

use base64::Engine as _;

use kascade::app::RuleSources;

use kascade::test_support::aggregate::redact::{DEFAULT_REDACT_PATHS, PathPattern, Redactor};

use kascade::test_support::aggregate::span_cache::LocalSpanCache;

use kascade::test_support::aggregate::{Processor, ProcessorConfig};

use kascade::test_support::metrics::Metrics;

use kascade::test_support::model::{ObjectRef, Windowing};

use kascade::test_support::offline::spans_from_audit_lines;

use kascade::test_support::flow::{WatchChange, WatchKind};

use kascade::test_support::source::audit::AuditFilter;

use kascade::test_support::span_model::Span;

use serde_json::{Value, json};

const SCENARIOS: [&str; 9] = [
    "config",
    "deployment",
    "job",
    "service",
    "statefulset",
    "quota",
    "rollout-stuck",
    "unschedulable",
    "cronjob",
];

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Credential values planted: `SECRET` and a serial number. They must appear
/// nowhere in the output, neither plainly nor base64-encoded (as in Secret
/// `data`): every base64 text of a marker starts with [`SECRET_B64`].
const SECRET: &str = "plantedsecret";

const SECRET_B64: &str = "cGxhbnRlZHNlY3Jl";

/// Ordinary values planted next to them: these must reach the output.
const VISIBLE: &str = "plantedvisible";

/// Hands out unique marker values.
#[derive(Default)]
struct Planter {
    n: usize,
    /// Credential values planted so far.
    secrets: usize,
    /// Credential values planted in the object being planted.
    current: Vec<String>,
    /// The credential values last planted in each object, by kind,
    /// namespace and name.
    planted_in: std::collections::HashMap<(String, String, String), Vec<String>>,
    /// Events whose message was made to quote a planted credential.
    quoting_events: usize,
    /// Objects planted now are requests, not the object as stored: an
    /// Event about it does not quote them.
    planting_requests: bool,
}

impl Planter {
    fn secret(&mut self) -> String {
        self.n += 1;
        self.secrets += 1;
        let value = format!("{SECRET}{:06}z", self.n);
        self.current.push(value.clone());
        value
    }

    /// An Event about an object planted before: its message quotes the
    /// last credential planted there.
    fn quote_in_event(&mut self, event: &mut Value) {
        let (about, message) = if event["apiVersion"] == "events.k8s.io/v1" {
            ("regarding", "note")
        } else {
            ("involvedObject", "message")
        };
        let about = &event[about];
        let key = (
            about["kind"].as_str().unwrap_or("").to_string(),
            about["namespace"].as_str().unwrap_or("").to_string(),
            about["name"].as_str().unwrap_or("").to_string(),
        );
        let Some(value) = self.planted_in.get(&key).and_then(|v| v.first()) else {
            return;
        };
        let quoted = format!(
            "{} (quoting {value})",
            event[message].as_str().unwrap_or("")
        );
        event[message] = quoted.into();
        self.quoting_events += 1;
    }

    /// A Secret `data` value: the base64 of a marker.
    fn secret_b64(&mut self) -> String {
        let raw = self.secret();
        base64::engine::general_purpose::STANDARD.encode(raw.as_bytes())
    }

    fn visible(&mut self) -> String {
        self.n += 1;
        format!("{VISIBLE}{:06}z", self.n)
    }

    /// Plants into one object as the apiserver sent it (request, response or
    /// watch object). Objects without metadata (Status…) are left alone.
    fn plant(&mut self, obj: &mut Value) {
        if !obj.get("metadata").is_some_and(Value::is_object) {
            return;
        }
        if obj["kind"] == "Event" {
            self.quote_in_event(obj);
            return;
        }
        self.current.clear();
        self.plant_object(obj);
        let key = (
            obj["kind"].as_str().unwrap_or("").to_string(),
            obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
        );
        let planted = std::mem::take(&mut self.current);
        if !planted.is_empty() && !self.planting_requests {
            self.planted_in.insert(key, planted);
        }
    }

    fn plant_object(&mut self, obj: &mut Value) {
        let is_secret = obj["kind"] == "Secret";
        if is_secret {
            if let Some(data) = obj.get_mut("data").and_then(Value::as_object_mut) {
                let keys: Vec<String> = data.keys().cloned().collect();
                for k in keys {
                    data[&k] = self.secret_b64().into();
                }
            }
            obj["data"]["planted-key"] = self.secret_b64().into();
            obj["stringData"] = json!({"planted": self.secret()});
        }
        let duplicates = self.n.is_multiple_of(2);
        self.plant_env(obj, duplicates);
        // kubectl apply's copy: what the user applied, secrets included.
        let mut copy = obj.clone();
        if let Some(c) = copy.as_object_mut() {
            c.remove("status");
        }
        let meta = &obj["metadata"];
        copy["metadata"] = json!({
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": meta["labels"],
            "annotations": {"planted.example.com/note": self.visible()},
        });
        let applied = format!("{}\n", serde_json::to_string(&copy).unwrap());
        // Another tool's copy of the object (kapp, or anything storing a manifest).
        let other_copy = serde_json::to_string(&copy).unwrap();
        let annotations = &mut obj["metadata"]["annotations"];
        if !annotations.is_object() {
            *annotations = json!({});
        }
        annotations[LAST_APPLIED] = applied.into();
        annotations["tool.example.com/original"] = other_copy.into();
        if self.n.is_multiple_of(5) {
            // Cut short, as a truncated or hand-edited annotation would be.
            let cut = format!("{{\"data\":{{\"k\":\"{}\"", self.secret());
            // Hidden whole with its annotation: no Event quotes it.
            self.current.pop();
            annotations[LAST_APPLIED] = cut.into();
        }
    }

    /// Adds credential-named env vars (and one ordinary) to every container
    /// list below `v`, duplicated names included when `duplicates`.
    fn plant_env(&mut self, v: &mut Value, duplicates: bool) {
        match v {
            Value::Object(map) => {
                for (k, child) in map.iter_mut() {
                    if matches!(
                        k.as_str(),
                        "containers" | "initContainers" | "ephemeralContainers"
                    ) && let Value::Array(containers) = child
                    {
                        for c in containers.iter_mut().filter(|c| c.is_object()) {
                            if !c["env"].is_array() {
                                c["env"] = json!([]);
                            }
                            let mut planted = vec![
                                json!({"name": "DB_PASSWORD", "value": self.secret()}),
                                json!({"name": "API_TOKEN", "value": self.secret()}),
                                json!({"name": "MODE", "value": self.visible()}),
                            ];
                            if duplicates {
                                // Kubernetes accepts this with a warning; the
                                // last one wins in the container.
                                planted.push(json!({"name": "API_TOKEN", "value": self.secret()}));
                                planted.push(json!({"name": "MODE", "value": self.visible()}));
                            }
                            c["env"].as_array_mut().unwrap().extend(planted);
                        }
                    } else {
                        self.plant_env(child, duplicates);
                    }
                }
            }
            Value::Array(items) => {
                for item in items {
                    self.plant_env(item, duplicates);
                }
            }
            _ => {}
        }
    }
}

fn config() -> ProcessorConfig {
    // Nothing is cut off, so every planted value has its chance to show.
    kascade::test_support::span_model::set_max_value_bytes(64 << 20);
    ProcessorConfig {
        windowing: Windowing::new(Duration::from_secs(3600 * 24)),
        max_diff_changes: 100_000,
        watch_audit_wait: Duration::from_secs(3600),
        ..ProcessorConfig::default()
    }
}

/// [`config`] with every last state kept only in the compressed tier,
/// read back from there for the next write's diff: where a state is kept
/// as the response's logged text when redaction changed nothing in it.
fn config_all_states_cold() -> ProcessorConfig {
    ProcessorConfig {
        hot_states: 0,
        ..config()
    }
}

fn redactor() -> Redactor {
    Redactor::new(Some(PathPattern::new(DEFAULT_REDACT_PATHS).unwrap()))
}

/// The scenario's audit log with markers planted in every request and
/// response object.
fn planted_audit_lines(scenario: &str, p: &mut Planter) -> Vec<String> {
    common::audit_lines(scenario)
        .iter()
        .map(|line| {
            let mut ev: Value = serde_json::from_str(line).unwrap();
            for field in ["requestObject", "responseObject"] {
                p.planting_requests = field == "requestObject";
                if let Some(obj) = ev.get_mut(field) {
                    p.plant(obj);
                }
            }
            p.planting_requests = false;
            ev.to_string()
        })
        .collect()
}

/// The scenario's watch streams, markers planted, as the list-watch hands
/// them to the processor.
fn planted_watch(scenario: &str, p: &mut Planter) -> Vec<WatchChange> {
    let dir = common::fixture_path(scenario, "watch");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        // `<group>.<resource>.jsonl`, `core` for the core group.
        let stem = file.file_stem().unwrap().to_str().unwrap().to_string();
        let (group, resource) = stem.rsplit_once('.').unwrap();
        let group = if group == "core" { "" } else { group };
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let ev: Value = serde_json::from_str(line).unwrap();
            let kind = match ev["type"].as_str().unwrap() {
                "ADDED" => WatchKind::Added,
                "MODIFIED" => WatchKind::Modified,
                "DELETED" => WatchKind::Deleted,
                _ => continue,
            };
            let mut state = ev["object"].clone();
            p.plant(&mut state);
            let object = ObjectRef::new(
                "fixture",
                group,
                resource,
                state["metadata"]["namespace"].as_str().unwrap_or(""),
                state["metadata"]["name"].as_str().unwrap(),
            );
            out.push(WatchChange {
                object,
                kind,
                state: sonic_rs::from_str(&state.to_string()).unwrap(),
                observed: std::time::SystemTime::now(),
            });
        }
    }
    out
}

/// Audit events through the offline runner (parse, filter, process, encode).
async fn run_audit(lines: Vec<String>, config: ProcessorConfig) -> Vec<Span> {
    let (spans, errors) = spans_from_audit_lines(
        lines,
        "fixture",
        Arc::new(RuleSources::default().load().unwrap()),
        &AuditFilter::default(),
        config,
        redactor(),
    )
    .await;
    assert!(errors.is_empty(), "{errors:?}");
    spans
}

/// Watch changes (and then, if any, audit events of the same writes, which
/// take the watch's diffs) through one processor.
async fn run_watch_then_audit(
    watch: Vec<WatchChange>,
    audit_lines: Vec<String>,
    config: ProcessorConfig,
) -> Vec<Span> {
    let metrics = Arc::new(Metrics::default());
    let (tx, mut rx) = tokio::sync::mpsc::channel(1 << 20);
    let processor = Processor::new(
        config,
        redactor(),
        Arc::new(RuleSources::default().load().unwrap()),
        Arc::new(LocalSpanCache::new(1 << 16, Duration::from_secs(3600 * 48))),
        tx,
        metrics.clone(),
    );
    for change in watch {
        processor.process_watch(change).await.unwrap();
    }
    for line in audit_lines {
        let ev = kascade::test_support::source::audit::parse_event(&line).unwrap();
        if let Some(item) =
            kascade::test_support::source::accept(ev, "fixture", &AuditFilter::default(), &metrics)
        {
            processor.process(&item).await.unwrap();
        }
    }
    processor.flush_watch(true).await.unwrap();
    drop(processor);
    let mut out = Vec::new();
    while let Some(s) = rx.recv().await {
        out.push(s.decode());
    }
    out
}

/// Every string kascade exports, one per line: span names, attributes,
/// event names and event attributes (snapshots, diff paths and values).
fn exported_text(spans: &[Span]) -> String {
    // The Debug form prints every field of the OTLP messages; markers are
    // plain alphanumerics, so escaping cannot hide them.
    spans.iter().map(|s| format!("{s:?}\n")).collect::<String>()
}

fn assert_nothing_leaks(what: &str, spans: &[Span], p: &Planter) {
    assert!(!spans.is_empty(), "{what}: no spans");
    assert!(p.secrets > 0);
    let text = exported_text(spans);
    for needle in [SECRET, SECRET_B64] {
        if let Some(at) = text.find(needle) {
            panic!(
                "{what}: a planted secret leaked ({} planted so far): {}",
                p.secrets,
                context(&text, at)
            );
        }
    }
    // Not vacuous: the ordinary values planted beside them are exported.
    assert!(
        text.contains(VISIBLE),
        "{what}: no planted value reached the output"
    );
}

/// The text around `at`, to show where a marker leaked.
fn context(text: &str, at: usize) -> &str {
    let mut from = at.saturating_sub(300);
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    let mut to = (at + 120).min(text.len());
    while !text.is_char_boundary(to) {
        to += 1;
    }
    &text[from..to]
}

/// Event attributes named `key` of every span, to check what kind of output
/// the planted values reached.
fn event_values(spans: &[Span], key: &str) -> Vec<String> {
    spans
        .iter()
        .flat_map(|s| &s.events)
        .flat_map(|e| &e.attributes)
        .filter(|kv| kv.key == key)
        .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
            opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(v) => {
                Some(v.clone())
            }
            _ => None,
        })
        .collect()
}

mod collector;
mod report;
