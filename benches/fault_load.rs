//! Load generator and checker of the fault suite (e2e/faults.sh, which starts
//! kascade, a real Jaeger with persistent storage and the faults).
//!
//! `load`: posts copies of the deployment fixture (captured from the e2e
//! control plane) to one or more webhooks, round robin, behaving as the
//! apiserver does: a refused batch (429/503) or a connection that fails
//! (kascade being killed and restarted) is sent again until it is answered
//! 200. The audit ID of every event in a batch answered 200 is appended to
//! FAULT_ACCEPTED (one `namespace<TAB>auditID` line each).
//!
//! `oversized`: one batch with three updates of a ConfigMap holding
//! FAULT_BIG_BYTES of data (from the config fixture) and 50 small ConfigMap
//! creates, as in the defect report; recorded like `load`.
//!
//! `verify`: reads FAULT_ACCEPTED, asks the Jaeger query API for every trace
//! of each namespace and prints `answered200 stored missing` (audit spans by
//! audit ID); exits 1 if any accepted event has no span. With
//! FAULT_REFERENCE (the OTLP/JSON of an uninterrupted collector given the
//! same batches: `resend`), each stored audit span's name, status and
//! attributes are compared with the reference's span of the same audit ID
//! (`attributes_differ`), and their counts; exits 1 if the counts differ or
//! more spans than FAULT_MAX_DIFFERING (default 0) do.
//!
//! FAULT_BODIES (optional, `load`): every batch answered 200 is appended to
//! it as one line, in the order of the answers (with one sender, the order
//! the collector processed them). `resend` posts its lines again, in order,
//! each until it is answered 200.
//!
//! Environment: KASCADE_URLS (comma-separated webhook base URLs), FAULT_TOKEN
//! (bearer token, optional), FAULT_NS (namespace prefix), BENCH_COPIES,
//! BENCH_COPY_SPACING_MS (see collect_load),
//! BENCH_SENDERS, FAULT_ACCEPTED, JAEGER_QUERY_URL, FAULT_SERVICE.

#[path = "load/mod.rs"]
mod load;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use load::{BATCH, Stream, age_of, audit_id, env_or, shift_to_now, spacing_from_env, templates};
use serde_json::{Value, json};

struct Poster {
    client: reqwest::Client,
    urls: Vec<String>,
    token: Option<String>,
    accepted: Mutex<std::fs::File>,
    /// FAULT_BODIES: the accepted events as audit log lines.
    bodies: Option<Mutex<std::fs::File>>,
    refused: AtomicUsize,
    connection_errors: AtomicUsize,
}

impl Poster {
    /// A poster as the environment says; `record_bodies`: writes the
    /// batches answered 200 to FAULT_BODIES.
    fn from_env(record_bodies: bool) -> Self {
        let urls = env_or("KASCADE_URLS", "")
            .split(',')
            .filter(|u| !u.is_empty())
            .map(|u| format!("{u}/audit/faults"))
            .collect::<Vec<_>>();
        assert!(!urls.is_empty(), "KASCADE_URLS is empty");
        let accepted = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(env_or("FAULT_ACCEPTED", "accepted.tsv"))
            .expect("FAULT_ACCEPTED");
        Poster {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .danger_accept_invalid_certs(false)
                .build()
                .unwrap(),
            urls,
            token: std::env::var("FAULT_TOKEN").ok().filter(|t| !t.is_empty()),
            accepted: Mutex::new(accepted),
            bodies: std::env::var("FAULT_BODIES")
                .ok()
                .filter(|p| !p.is_empty() && record_bodies)
                .map(|p| Mutex::new(std::fs::File::create(p).expect("FAULT_BODIES"))),
            refused: AtomicUsize::new(0),
            connection_errors: AtomicUsize::new(0),
        }
    }

    /// Sends `body` until it is answered 200 (as the apiserver's batching
    /// webhook backend retries), then records `ids`.
    async fn post(&self, n: usize, body: String, ids: &[(String, String)]) {
        let mut attempt = n;
        loop {
            let url = &self.urls[attempt % self.urls.len()];
            attempt += 1;
            let mut req = self.client.post(url).body(body.clone());
            if let Some(t) = &self.token {
                req = req.bearer_auth(t);
            }
            match req.send().await {
                Ok(r) if r.status() == 200 => break,
                Ok(r) if matches!(r.status().as_u16(), 429 | 503) => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                }
                Ok(r) => {
                    let status = r.status();
                    panic!(
                        "webhook answered {status}: {}",
                        r.text().await.unwrap_or_default()
                    );
                }
                Err(_) => {
                    self.connection_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut f = self.accepted.lock().unwrap();
        for (ns, id) in ids {
            writeln!(f, "{ns}\t{id}").unwrap();
        }
        f.flush().unwrap();
        if let Some(bodies) = &self.bodies {
            let list: Value = serde_json::from_str(&body).expect("an EventList");
            let mut b = bodies.lock().unwrap();
            writeln!(b, "{list}").unwrap();
            b.flush().unwrap();
        }
    }
}

async fn run_load(poster: Arc<Poster>) {
    let copies: usize = env_or("BENCH_COPIES", "100").parse().unwrap();
    let senders: usize = env_or("BENCH_SENDERS", "4").parse().unwrap();
    let prefix = env_or("FAULT_NS", "fault-");
    let templates = templates();
    let stream = Arc::new(Stream::new(&templates, copies, spacing_from_env()));
    let texts = Arc::new(templates.texts);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..senders {
        let (stream, texts, next, poster, prefix) = (
            stream.clone(),
            texts.clone(),
            next.clone(),
            poster.clone(),
            prefix.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(BATCH, Ordering::Relaxed);
                if first >= stream.len() {
                    break;
                }
                let last = (first + BATCH).min(stream.len());
                let body = stream.batch_body(first..last, &prefix);
                let ids: Vec<(String, String)> = (first..last)
                    .map(|i| {
                        let (copy, k) = stream.event(i);
                        (format!("{prefix}{copy}"), audit_id(&texts[k], copy))
                    })
                    .collect();
                poster.post(first / BATCH, body, &ids).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Posts the batches of FAULT_BODIES again, one after the other.
async fn resend(poster: &Poster) {
    let bodies = std::fs::read_to_string(env_or("FAULT_BODIES", "")).expect("FAULT_BODIES");
    for (n, body) in bodies.lines().enumerate() {
        poster.post(n, body.to_string(), &[]).await;
    }
}

/// Three updates of a ConfigMap with `big` bytes of data and 50 small
/// creates, in one batch: one request too large for Jaeger must not take the
/// small spans down with it.
async fn run_oversized(poster: Arc<Poster>) {
    let big: usize = env_or("FAULT_BIG_BYTES", "1500000").parse().unwrap();
    let ns = env_or("FAULT_NS", "fault-big-");
    let ns = format!("{ns}0");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/fixtures/config/audit.log");
    let text = std::fs::read_to_string(path).expect("config fixture");
    let shift = age_of(&text);
    let mut create: Value = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| {
            e["objectRef"]["resource"] == "configmaps"
                && e["verb"] == "create"
                && e["responseObject"]["data"].is_object()
        })
        .expect("a ConfigMap create in the config fixture");
    shift_to_now(&mut create, shift);
    let set_ns = |e: &mut Value, name: &str, id: String| {
        e["auditID"] = json!(id);
        e["objectRef"]["namespace"] = json!(ns);
        e["objectRef"]["name"] = json!(name);
        e["requestURI"] = json!(format!("/api/v1/namespaces/{ns}/configmaps"));
        for o in ["requestObject", "responseObject"] {
            if e[o].is_object() {
                e[o]["metadata"]["namespace"] = json!(ns);
                e[o]["metadata"]["name"] = json!(name);
            }
        }
    };
    let mut items = Vec::new();
    let mut ids = Vec::new();
    for i in 0..3 {
        let mut e = create.clone();
        let id = format!("big-{i}");
        set_ns(&mut e, "big", id.clone());
        if i > 0 {
            e["verb"] = json!("update");
            e["requestURI"] = json!(format!("/api/v1/namespaces/{ns}/configmaps/big"));
        }
        // Different content each time, so every update has a big diff.
        let value: String = std::iter::repeat_n((b'a' + i as u8) as char, big).collect();
        for o in ["requestObject", "responseObject"] {
            if e[o].is_object() {
                e[o]["data"] = json!({ "blob": value });
                e[o]["metadata"]["resourceVersion"] = json!(format!("{}", 900_000 + i));
            }
        }
        items.push(e);
        ids.push((ns.clone(), id));
    }
    for i in 0..50 {
        let mut e = create.clone();
        let id = format!("small-{i}");
        set_ns(&mut e, &format!("small-{i}"), id.clone());
        items.push(e);
        ids.push((ns.clone(), id));
    }
    let body = json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": items});
    poster.post(0, body.to_string(), &ids).await;
}

/// Spans stored more than once: the same write (audit ID), a second object
/// span in one object window's trace, the same link twice in one trace.
/// Failed on above `FAULT_MAX_DUPLICATES` (`audit/object/link`; unset or
/// empty: only counted): a scenario's bound is what its fault allows (docs/testing.md).
#[derive(Default)]
struct Duplicates {
    audit: usize,
    object: usize,
    link: usize,
}

async fn verify() {
    let jaeger = env_or("JAEGER_QUERY_URL", "");
    let service = env_or("FAULT_SERVICE", "kascade");
    let accepted_path = env_or("FAULT_ACCEPTED", "accepted.tsv");
    let mut accepted: BTreeMap<String, HashSet<String>> = BTreeMap::new();
    let mut answered = 0usize;
    for line in std::fs::read_to_string(&accepted_path)
        .expect("FAULT_ACCEPTED")
        .lines()
    {
        let (ns, id) = line.split_once('\t').expect("namespace<TAB>auditID");
        answered += 1;
        accepted
            .entry(ns.to_string())
            .or_default()
            .insert(id.to_string());
    }
    let reference = std::env::var("FAULT_REFERENCE")
        .ok()
        .filter(|p| !p.is_empty())
        .map(|p| reference_spans(&p));
    let mut compared = 0usize;
    let mut differ: Vec<String> = Vec::new();
    let client = reqwest::Client::new();
    let mut stored = 0usize;
    let mut missing = Vec::new();
    let mut orphan_traces = Vec::new();
    let mut duplicates = Duplicates::default();
    for (ns, ids) in &accepted {
        let tags = json!({ "namespace": ns }).to_string();
        let r: Value = client
            .get(format!("{jaeger}/api/traces"))
            .query(&[
                ("service", service.as_str()),
                ("tags", tags.as_str()),
                ("limit", "100000"),
                ("lookback", "24h"),
            ])
            .send()
            .await
            .expect("Jaeger query API")
            .json()
            .await
            .expect("Jaeger answers JSON");
        let mut seen = HashSet::new();
        let mut audit_spans: HashMap<String, usize> = HashMap::new();
        for t in r["data"].as_array().into_iter().flatten() {
            let mut has_object_span = false;
            let mut object_spans = 0usize;
            let mut links: HashMap<String, usize> = HashMap::new();
            for s in t["spans"].as_array().into_iter().flatten() {
                let tags: BTreeMap<&str, String> = s["tags"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|tag| Some((tag["key"].as_str()?, tag["value"].to_string())))
                    .collect();
                for tag in s["tags"].as_array().into_iter().flatten() {
                    if tag["key"] == "audit.id"
                        && let Some(v) = tag["value"].as_str()
                    {
                        seen.insert(v.to_string());
                        *audit_spans.entry(v.to_string()).or_default() += 1;
                        if let Some(want) = reference.as_ref().and_then(|r| r.get(v)) {
                            compared += 1;
                            let got = jaeger_span(s);
                            if &got != want {
                                differ.push(describe_difference(v, want, &got));
                            }
                        }
                    }
                    if tag["key"] == "kascade.span" && tag["value"] == "object" {
                        has_object_span = true;
                        object_spans += 1;
                    }
                }
                // A link is the same link when every link.* tag is.
                if tags.get("kascade.span").map(String::as_str) == Some("\"link\"") {
                    let key: Vec<String> = tags
                        .iter()
                        .filter(|(k, _)| k.starts_with("link."))
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    *links.entry(key.join(",")).or_default() += 1;
                }
            }
            duplicates.object += object_spans.saturating_sub(1);
            duplicates.link += links.values().map(|n| n - 1).sum::<usize>();
            // A window whose object span was reserved but never exported
            // cannot be found by a search for its object.
            if !has_object_span {
                orphan_traces.push(t["traceID"].as_str().unwrap_or("?").to_string());
            }
        }
        duplicates.audit += audit_spans.values().map(|n| n - 1).sum::<usize>();
        for id in ids {
            if seen.contains(id) {
                stored += 1;
            } else {
                missing.push(format!("{ns}/{id}"));
            }
        }
    }
    let distinct: usize = accepted.values().map(HashSet::len).sum();
    let attributes = match &reference {
        Some(r) => format!(
            " attributes_differ={}/{compared} (reference {})",
            differ.len(),
            r.len()
        ),
        None => String::new(),
    };
    println!(
        "answered200={answered} distinct={distinct} stored={stored} missing={} traces_without_object_span={} duplicate_spans={}/{}/{}{attributes}",
        missing.len(),
        orphan_traces.len(),
        duplicates.audit,
        duplicates.object,
        duplicates.link
    );
    if !differ.is_empty() {
        eprintln!(
            "{} stored audit spans differ from the uninterrupted run's; the first:\n{}",
            differ.len(),
            differ[..differ.len().min(5)].join("\n")
        );
        let max: usize = env_or("FAULT_MAX_DIFFERING", "0")
            .parse()
            .expect("FAULT_MAX_DIFFERING: a count");
        if differ.len() > max {
            eprintln!("over the bound of {max}");
            std::process::exit(1);
        }
    }
    if let Some(r) = &reference
        && compared != r.len()
    {
        eprintln!(
            "{compared} stored audit spans compared, the uninterrupted run has {}: span counts differ",
            r.len()
        );
        std::process::exit(1);
    }
    if let Ok(bound) = std::env::var("FAULT_MAX_DUPLICATES")
        && !bound.is_empty()
    {
        let max: Vec<usize> = bound
            .split('/')
            .map(|n| n.parse().expect("FAULT_MAX_DUPLICATES: audit/object/link"))
            .collect();
        let found = [duplicates.audit, duplicates.object, duplicates.link];
        if max.len() != 3 || found.iter().zip(&max).any(|(f, m)| f > m) {
            eprintln!(
                "duplicate write/object/link spans {}/{}/{} over the bound {bound}",
                found[0], found[1], found[2]
            );
            std::process::exit(1);
        }
    }
    if !missing.is_empty() || !orphan_traces.is_empty() {
        eprintln!(
            "first missing: {:?}; first traces without object span: {:?}",
            &missing[..missing.len().min(10)],
            &orphan_traces[..orphan_traces.len().min(10)]
        );
        std::process::exit(1);
    }
}

/// A span as compared: its name and attributes, values as text.
type Compared = (String, BTreeMap<String, String>);

/// An OTLP/JSON value as text (`stringValue` as is, numbers and booleans
/// as written).
fn otlp_value(v: &Value) -> String {
    match v.as_object().and_then(|o| o.iter().next()) {
        Some((_, Value::String(s))) => s.clone(),
        Some((_, other)) => other.to_string(),
        None => String::new(),
    }
}

/// The audit spans of an OTLP/JSON file (`kascade replay --output
/// otlp-json=`), by audit ID.
fn reference_spans(path: &str) -> HashMap<String, Compared> {
    let text = std::fs::read_to_string(path).expect("FAULT_REFERENCE");
    let mut spans = HashMap::new();
    for line in text.lines() {
        let req: Value = serde_json::from_str(line).expect("OTLP/JSON lines");
        for rs in req["resourceSpans"].as_array().into_iter().flatten() {
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for s in ss["spans"].as_array().into_iter().flatten() {
                    let mut attrs: BTreeMap<String, String> = s["attributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| {
                            (
                                a["key"].as_str().unwrap_or("").to_string(),
                                otlp_value(&a["value"]),
                            )
                        })
                        .collect();
                    // Jaeger shows an error status as the tag `error` and
                    // its message as `otel.status_description`.
                    if s["status"]["code"].as_i64() == Some(2) {
                        attrs.insert("error".into(), "true".into());
                        if let Some(m) = s["status"]["message"].as_str().filter(|m| !m.is_empty()) {
                            attrs.insert("otel.status_description".into(), m.to_string());
                        }
                    }
                    if let Some(id) = attrs.get("audit.id").cloned() {
                        spans.insert(id, (s["name"].as_str().unwrap_or("").to_string(), attrs));
                    }
                }
            }
        }
    }
    spans
}

/// A span of the Jaeger query API as compared: its kascade attributes and
/// status (the store adds tags of its own: `otel.*`, `span.kind`,
/// `internal.*`).
fn jaeger_span(s: &Value) -> Compared {
    let attrs = s["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let key = t["key"].as_str()?;
            let store_own = key.starts_with("otel.") && key != "otel.status_description";
            if store_own || key.starts_with("internal.") || key == "span.kind" {
                return None;
            }
            let value = match &t["value"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            Some((key.to_string(), value))
        })
        .collect();
    (s["operationName"].as_str().unwrap_or("").to_string(), attrs)
}

fn describe_difference(id: &str, want: &Compared, got: &Compared) -> String {
    let mut out = format!("audit ID {id}:");
    if want.0 != got.0 {
        out += &format!(" name {:?} stored as {:?};", want.0, got.0);
    }
    for (k, v) in &want.1 {
        match got.1.get(k) {
            Some(g) if g == v => {}
            Some(g) => out += &format!(" {k}: {v:?} stored as {g:?};"),
            None => out += &format!(" {k}: {v:?} not stored;"),
        }
    }
    for (k, g) in &got.1 {
        if !want.1.contains_key(k) {
            out += &format!(" {k}: stored {g:?}, not in the uninterrupted run;");
        }
    }
    out
}

#[tokio::main]
async fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    match mode.as_str() {
        "load" | "oversized" | "resend" => {
            let poster = Arc::new(Poster::from_env(mode != "resend"));
            match mode.as_str() {
                "load" => run_load(poster.clone()).await,
                "oversized" => run_oversized(poster.clone()).await,
                _ => resend(&poster).await,
            }
            println!(
                "refused={} connection_errors={}",
                poster.refused.load(Ordering::Relaxed),
                poster.connection_errors.load(Ordering::Relaxed)
            );
        }
        "verify" => verify().await,
        // `cargo bench` without the fault suite around it: nothing to do.
        _ => eprintln!("fault_load: run e2e/faults.sh (modes: load, oversized, resend, verify)"),
    }
}
