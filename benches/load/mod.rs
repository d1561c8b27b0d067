//! What the load generators share: the deployment fixture's events as
//! templates whose namespace and audit ID are filled in per copy.
#![allow(dead_code)]

use serde_json::Value;

pub const BATCH: usize = 400;
const NS: &str = "__KASCADE_BENCH_NS__";
const ID: &str = "__KASCADE_BENCH_ID__";

pub fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

/// The fixture's events as JSON texts with placeholders for namespace and audit ID.
pub fn templates() -> (Vec<String>, usize) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/e2e/fixtures/deployment/audit.log"
    );
    let text = std::fs::read_to_string(path).expect("deployment fixture");
    let mut objects = std::collections::HashSet::new();
    let mut out = Vec::new();
    let shift = age_of(&text);
    for line in text.lines() {
        let mut ev: Value = serde_json::from_str(line).unwrap();
        shift_to_now(&mut ev, shift);
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
        let id = ev["auditID"].as_str().unwrap().to_string();
        ev["auditID"] = Value::String(format!("{id}-{ID}"));
        let text = serde_json::to_string(&ev).unwrap();
        out.push(
            text.replace(
                &format!("\"namespace\":\"{ns}\""),
                &format!("\"namespace\":\"{NS}\""),
            )
            .replace(&format!("/namespaces/{ns}/"), &format!("/namespaces/{NS}/")),
        );
    }
    (out, objects.len())
}

// The events happen now, as a live apiserver's would: shifted by the
// fixture's age (its own spacing kept). With the capture's own times the
// spans would age out of the checks' Jaeger searches (the fault suite found
// nothing once the fixture was two days old).

fn event_time(ev: &Value, key: &str) -> Option<std::time::SystemTime> {
    ev[key]
        .as_str()
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
}

/// How long ago the fixture's first request was received.
pub fn age_of(fixture: &str) -> std::time::Duration {
    let first = fixture
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|ev| event_time(&ev, "requestReceivedTimestamp"))
        .min()
        .expect("the fixture has timed events");
    std::time::SystemTime::now()
        .duration_since(first)
        .unwrap_or_default()
}

/// Moves an event's timestamps forward by `shift`.
pub fn shift_to_now(ev: &mut Value, shift: std::time::Duration) {
    for key in ["requestReceivedTimestamp", "stageTimestamp"] {
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
}

pub fn split_template(t: &str) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut rest = t;
    loop {
        let next = [(rest.find(NS), NS.len(), 0), (rest.find(ID), ID.len(), 1)]
            .into_iter()
            .filter_map(|(at, len, which)| at.map(|a| (a, len, which)))
            .min_by_key(|(a, _, _)| *a);
        let Some((at, len, which)) = next else {
            parts.push(Part::Text(rest.to_string()));
            return parts;
        };
        parts.push(Part::Text(rest[..at].to_string()));
        parts.push(if which == 0 {
            Part::Namespace
        } else {
            Part::Id
        });
        rest = &rest[at + len..];
    }
}

/// The EventList body of events `range` of the copy stream (template `i %
/// templates` of copy `i / templates`), in namespaces `<ns_prefix><copy>`.
pub fn batch_body(tpl: &[Vec<Part>], range: std::ops::Range<usize>, ns_prefix: &str) -> String {
    let per_copy = tpl.len();
    let mut body = String::with_capacity(range.len() * 6000);
    body.push_str(
        "{\"kind\":\"EventList\",\"apiVersion\":\"audit.k8s.io/v1\",\"metadata\":{},\"items\":[",
    );
    for (k, i) in range.enumerate() {
        let copy = i / per_copy;
        if k > 0 {
            body.push(',');
        }
        for part in &tpl[i % per_copy] {
            match part {
                Part::Text(t) => body.push_str(t),
                Part::Namespace => {
                    body.push_str(ns_prefix);
                    body.push_str(&copy.to_string());
                }
                Part::Id => body.push_str(&copy.to_string()),
            }
        }
    }
    body.push_str("]}");
    body
}

/// The audit ID a template's event has in copy `copy` (as `batch_body` writes it).
pub fn audit_id(template: &str, copy: usize) -> String {
    let ev: Value = serde_json::from_str(template).expect("templates are JSON");
    ev["auditID"]
        .as_str()
        .expect("auditID")
        .replace(ID, &copy.to_string())
}
