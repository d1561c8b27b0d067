//! Inputs for the processor's unit tests: what the real control plane wrote
//! (e2e/fixtures), and a processor that sends its spans to a channel.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use super::super::redact::Redactor;
use super::super::rules::RuleSet;
use super::super::span_cache::LocalSpanCache;
use super::{Processor, ProcessorConfig};
use crate::flow::{Accepted, AuditEvent, FailedCreate};
use crate::metrics::Metrics;
use crate::model::ObjectRef;
use crate::span_model::{EncodedSpan, Span};

pub(super) fn fixture(scenario: &str, file: &str) -> String {
    let path = format!(
        "{}/e2e/fixtures/{scenario}/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The audit events of a scenario, as logged.
pub(super) fn audit_values(scenario: &str) -> Vec<Value> {
    fixture(scenario, "audit.log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("an audit event"))
        .collect()
}

pub(super) fn parse(v: &Value) -> AuditEvent {
    // Timestamps are read borrowed: from text, not from a `Value`.
    let ev: AuditEvent = sonic_rs::from_str(&v.to_string()).expect("an audit event");
    ev.validate().expect("a valid audit event");
    ev
}

/// The event with its object resolved, as the source accepts it; `None`
/// for what names no object.
pub(super) fn accepted(v: &Value) -> Option<Accepted> {
    let event = parse(v);
    let (object, uid) = event.object("c").expect("within bounds")?;
    Some(Accepted {
        event,
        object,
        uid,
        replayed: false,
        context: false,
        arrival: 0,
        noted_through: 0,
        more_in_batch: false,
        failed_create: None,
        batch_span: tracing::Span::none(),
    })
}

/// The quota scenario's first Pod create the quota refused, as the source
/// accepts it (named by its `generateName`), with what it tried.
pub(super) fn refused_pod_create() -> (Accepted, FailedCreate) {
    let refused = audit_values("quota")
        .into_iter()
        .find(|e| e["verb"] == "create" && e["responseStatus"]["code"] == 403)
        .expect("the quota scenario's refused Pod");
    let event = parse(&refused);
    let attempt = event
        .failed_create()
        .unwrap()
        .expect("a generateName create");
    let r = event.object_ref.as_ref().unwrap();
    let item = Accepted {
        object: ObjectRef::new(
            "c",
            &r.api_group,
            &r.resource,
            &r.namespace,
            attempt.generate_name.clone(),
        ),
        event,
        uid: String::new(),
        replayed: false,
        context: false,
        arrival: 0,
        noted_through: 0,
        more_in_batch: false,
        failed_create: Some(Box::new(attempt.clone())),
        batch_span: tracing::Span::none(),
    };
    (item, attempt)
}

/// A processor with the default configuration and rules found in the
/// repository, its spans sent to the returned receiver.
pub(crate) fn processor(
    cfg: ProcessorConfig,
) -> (Processor, mpsc::Receiver<EncodedSpan>, Arc<Metrics>) {
    processor_redacting(cfg, Redactor::new(None))
}

/// [`processor`] with `redactor` (processors that must redact alike share
/// one: its markers are keyed by a seed of its own).
pub(super) fn processor_redacting(
    cfg: ProcessorConfig,
    redactor: Redactor,
) -> (Processor, mpsc::Receiver<EncodedSpan>, Arc<Metrics>) {
    let rules = repository_rules();
    let metrics = Arc::new(Metrics::default());
    let (tx, rx) = mpsc::channel(1 << 16);
    let ttl = cfg.windowing.width + Duration::from_secs(300);
    let p = Processor::new(
        cfg,
        redactor,
        Arc::new(rules),
        Arc::new(LocalSpanCache::new(1 << 20, ttl)),
        tx,
        metrics.clone(),
    );
    (p, rx, metrics)
}

/// The rules found in the repository (`rules/`).
pub(super) fn repository_rules() -> RuleSet {
    RuleSet::load_dir(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/rules"
    )))
    .expect("the repository's rules")
}

/// The change records a sink was handed.
#[derive(Default)]
pub(super) struct Records(pub std::sync::Mutex<Vec<crate::flow::ChangeRecord>>);

impl crate::flow::ChangeSink for Records {
    fn record(&self, change: &crate::flow::ChangeRecord) {
        self.0.lock().unwrap().push(change.clone());
    }
}

/// The spans sent so far.
pub(crate) fn drain(rx: &mut mpsc::Receiver<EncodedSpan>) -> Vec<Span> {
    let mut out = Vec::new();
    while let Ok(s) = rx.try_recv() {
        out.push(s.decode());
    }
    out
}

pub(crate) fn attr(s: &Span, key: &str) -> Option<String> {
    use opentelemetry_proto::tonic::common::v1::any_value;
    s.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .map(|v| match v {
            any_value::Value::StringValue(s) => s.clone(),
            any_value::Value::IntValue(i) => i.to_string(),
            other => format!("{other:?}"),
        })
}
