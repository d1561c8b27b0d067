//! What the load generators share: the deployment fixture's events as
//! templates whose namespace, audit ID and times are filled in per copy, and
//! the stream of copies they send.
#![allow(dead_code)]

use std::time::{Duration, SystemTime};

use serde_json::Value;

pub mod components;

pub const BATCH: usize = 400;
const NS: &str = "__KASCADE_BENCH_NS__";
const ID: &str = "__KASCADE_BENCH_ID__";
const TIME: &str = "__KASCADE_BENCH_TIME";
const PLACEHOLDER: &str = "__KASCADE_BENCH_";

pub fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

/// The fixture's events as templates: JSON texts with placeholders for
/// namespace, audit ID and the two timestamps.
pub struct Templates {
    pub texts: Vec<String>,
    /// Distinct objects a copy writes.
    pub objects_per_copy: usize,
    /// Per template, its `requestReceivedTimestamp` and `stageTimestamp` as
    /// offsets from the fixture's first request (`None`: the event had none).
    times: Vec<[Option<Duration>; 2]>,
}

const TIME_KEYS: [&str; 2] = ["requestReceivedTimestamp", "stageTimestamp"];

/// The fixture's namespaced events other than Events, as templates.
pub fn templates() -> Templates {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/e2e/fixtures/deployment/audit.log"
    );
    let text = std::fs::read_to_string(path).expect("deployment fixture");
    let first = first_request(&text);
    let omit_managed_fields = env_or("BENCH_OMIT_MANAGED_FIELDS", "0") == "1";
    let mut objects = std::collections::HashSet::new();
    let mut texts = Vec::new();
    let mut times = Vec::new();
    for line in text.lines() {
        let mut ev: Value = serde_json::from_str(line).unwrap();
        let ns = ev["objectRef"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let resource = ev["objectRef"]["resource"].as_str().unwrap_or("");
        if ns.is_empty() || resource == "events" {
            // Cluster-scoped objects would be shared by every copy; Events
            // (event spans on other objects, not objects of their own) would
            // skew the objects-per-second rate this measures.
            continue;
        }
        let name = ev["objectRef"]["name"].as_str().unwrap_or("").to_string();
        let resp_name = ev["responseObject"]["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        objects.insert(format!(
            "{}/{}",
            ev["objectRef"]["resource"],
            if name.is_empty() { resp_name } else { name }
        ));
        if omit_managed_fields {
            omit_managed_fields_of(&mut ev);
        }
        let id = ev["auditID"].as_str().unwrap().to_string();
        ev["auditID"] = Value::String(format!("{id}-{ID}"));
        let mut offsets = [None, None];
        for (which, key) in TIME_KEYS.iter().enumerate() {
            if let Some(t) = event_time(&ev, key) {
                offsets[which] = Some(t.duration_since(first).unwrap_or_default());
                ev[*key] = Value::String(format!("{TIME}{which}__"));
            }
        }
        times.push(offsets);
        let text = serde_json::to_string(&ev).unwrap();
        texts.push(
            text.replace(
                &format!("\"namespace\":\"{ns}\""),
                &format!("\"namespace\":\"{NS}\""),
            )
            .replace(&format!("/namespaces/{ns}/"), &format!("/namespaces/{NS}/")),
        );
    }
    Templates {
        texts,
        objects_per_copy: objects.len(),
        times,
    }
}

/// What an apiserver whose audit policy sets `omitManagedFields: true` logs
/// instead: the request and response objects (and a list's items) without
/// `metadata.managedFields` (k8s.io/apiserver's `copyWithoutManagedFields`).
pub fn omit_managed_fields_of(ev: &mut Value) {
    fn strip(object: &mut Value) {
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    }
    for key in ["requestObject", "responseObject"] {
        let Some(object) = ev.get_mut(key) else {
            continue;
        };
        strip(object);
        if let Some(items) = object.get_mut("items").and_then(Value::as_array_mut) {
            items.iter_mut().for_each(strip);
        }
    }
}

fn event_time(ev: &Value, key: &str) -> Option<SystemTime> {
    ev[key]
        .as_str()
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
}

/// When the fixture's first request was received.
fn first_request(fixture: &str) -> SystemTime {
    fixture
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|ev| event_time(&ev, "requestReceivedTimestamp"))
        .min()
        .expect("the fixture has timed events")
}

/// How long ago the fixture's first request was received.
pub fn age_of(fixture: &str) -> Duration {
    SystemTime::now()
        .duration_since(first_request(fixture))
        .unwrap_or_default()
}

/// Moves an event's timestamps forward by `shift`.
pub fn shift_to_now(ev: &mut Value, shift: Duration) {
    for key in TIME_KEYS {
        if let Some(t) = event_time(ev, key) {
            ev[key] = Value::String(humantime::format_rfc3339_micros(t + shift).to_string());
        }
    }
}

/// A template cut at its placeholders, so building a body is concatenation
/// (the generator shares the two cores with kascade: keep it cheap).
pub enum Part {
    Text(String),
    Namespace,
    Id,
    /// `requestReceivedTimestamp` (0) or `stageTimestamp` (1).
    Time(usize),
}

fn split_template(t: &str) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut rest = t;
    while let Some(at) = rest.find(PLACEHOLDER) {
        parts.push(Part::Text(rest[..at].to_string()));
        let tail = &rest[at..];
        let (part, len) = if tail.starts_with(NS) {
            (Part::Namespace, NS.len())
        } else if tail.starts_with(ID) {
            (Part::Id, ID.len())
        } else if let Some(which) = tail.strip_prefix(TIME).and_then(|t| t.get(..1)) {
            (Part::Time(which.parse().unwrap()), TIME.len() + 3)
        } else {
            panic!("unknown placeholder in {tail:.40}");
        };
        parts.push(part);
        rest = &rest[at + len..];
    }
    parts.push(Part::Text(rest.to_string()));
    parts
}

/// The load: `copies` copies of the templates, each in a namespace of its
/// own, in the order they are sent.
///
/// With a spacing, copy `c` happens `c × spacing` after the first (each
/// event at its own offset within the fixture, ≈ 2 s) and the stream is in
/// time order: the copies overlap as concurrent rollouts do, and the
/// changes' clock moves on, as it does in a cluster. With no spacing every
/// copy carries the same times and the copies are sent one after the other
/// (the load of the benchmarks before 2026-11-27).
pub struct Stream {
    parts: Vec<Vec<Part>>,
    times: Vec<[Option<Duration>; 2]>,
    /// (copy, template) of each event, in sending order.
    order: Vec<(u32, u32)>,
    start: SystemTime,
    spacing: Duration,
}

/// The spacing `BENCH_COPY_SPACING_MS` asks for (default 5 ms: about the
/// rate one core of this machine processes copies at).
pub fn spacing_from_env() -> Duration {
    let ms: f64 = env_or("BENCH_COPY_SPACING_MS", "5")
        .parse()
        .expect("BENCH_COPY_SPACING_MS is a number of milliseconds");
    Duration::from_secs_f64(ms / 1e3)
}

impl Stream {
    /// The copies start now, so their spans fall within Jaeger's lookback.
    pub fn new(templates: &Templates, copies: usize, spacing: Duration) -> Self {
        let per_copy = templates.texts.len();
        let mut order: Vec<(u32, u32)> = (0..copies as u32)
            .flat_map(|c| (0..per_copy as u32).map(move |k| (c, k)))
            .collect();
        if !spacing.is_zero() {
            let stage = |k: u32| {
                let [received, stage] = templates.times[k as usize];
                stage.or(received).unwrap_or_default()
            };
            // Stable: events of one time keep the fixture's order.
            order.sort_by_key(|&(c, k)| spacing * c + stage(k));
        }
        Stream {
            parts: templates.texts.iter().map(|t| split_template(t)).collect(),
            times: templates.times.clone(),
            order,
            start: SystemTime::now(),
            spacing,
        }
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// (copy, template) of event `i`.
    pub fn event(&self, i: usize) -> (usize, usize) {
        let (c, k) = self.order[i];
        (c as usize, k as usize)
    }

    /// When event `i`'s request was received (its stage's time when it has
    /// no `requestReceivedTimestamp`), as `batch_body` writes it.
    pub fn received_at(&self, i: usize) -> SystemTime {
        let (copy, k) = self.event(i);
        let [received, stage] = self.times[k];
        self.start + self.spacing * copy as u32 + received.or(stage).unwrap_or_default()
    }

    /// The EventList body of events `range`, in namespaces `<ns_prefix><copy>`.
    pub fn batch_body(&self, range: std::ops::Range<usize>, ns_prefix: &str) -> String {
        use std::fmt::Write;
        let mut body = String::with_capacity(range.len() * 6000);
        body.push_str(
            "{\"kind\":\"EventList\",\"apiVersion\":\"audit.k8s.io/v1\",\"metadata\":{},\"items\":[",
        );
        for (n, i) in range.enumerate() {
            let (copy, k) = self.event(i);
            if n > 0 {
                body.push(',');
            }
            for part in &self.parts[k] {
                match part {
                    Part::Text(t) => body.push_str(t),
                    Part::Namespace => {
                        body.push_str(ns_prefix);
                        write!(body, "{copy}").unwrap();
                    }
                    Part::Id => write!(body, "{copy}").unwrap(),
                    Part::Time(which) => {
                        let offset = self.times[k][*which].unwrap_or_default();
                        let at = self.start + self.spacing * copy as u32 + offset;
                        write!(body, "{}", humantime::format_rfc3339_micros(at)).unwrap();
                    }
                }
            }
        }
        body.push_str("]}");
        body
    }
}

/// The audit ID a template's event has in copy `copy` (as `batch_body` writes it).
pub fn audit_id(template: &str, copy: usize) -> String {
    let ev: Value = serde_json::from_str(template).expect("templates are JSON");
    ev["auditID"]
        .as_str()
        .expect("auditID")
        .replace(ID, &copy.to_string())
}
