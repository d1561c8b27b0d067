//! Cascades over the fixtures captured from the real control plane: the
//! changes the real processor records, assembled into trees with their
//! completion (`analysis::cascade`), `kascade trace --mode cascade`, and
//! display mode `cascade` of the frontend over the collector's spans.

#[path = "../common/mod.rs"]
mod common;

use common::int_attr;

use std::collections::{HashMap, HashSet};

use std::sync::Arc;

use std::time::{Duration, SystemTime};

use kascade::app::RuleSources;

use kascade::test_support::aggregate::ProcessorConfig;

use kascade::test_support::aggregate::redact::Redactor;

use kascade::test_support::analysis::cascade::{
    self, Cascade, Completion, change_name, format_duration,
};

use kascade::test_support::frontend::assemble::Scope;

use kascade::test_support::frontend::display::Mode;

use kascade::test_support::frontend::display::cascade::CRITICAL_MARK;

use kascade::test_support::frontend::offline::store_from_audit_lines;

use kascade::test_support::frontend::raw::{MemoryStore, TimeRange, from_nanos, string_attr};

use kascade::test_support::frontend::{AssembledTrace, Frontend, FrontendConfig, SearchQuery};

use kascade::test_support::flow::ChangeRecord;

use kascade::test_support::source::audit::AuditFilter;

use kascade::test_support::span_model::attr;

use opentelemetry_proto::tonic::trace::v1::Span;

use serde_json::Value;

const CLUSTER: &str = "fixture";

async fn cascades(scenario: &str) -> Vec<Cascade> {
    cascade::build(common::changes_of_lines(common::audit_lines(scenario), CLUSTER).await)
}

/// The last cascade whose root write is named `root` (`<user> <verb>[
/// <sub>] <resource> <ns>/<name>`): a scenario may start by deleting what
/// an earlier run left.
fn rooted_at<'a>(all: &'a [Cascade], root: &str) -> &'a Cascade {
    all.iter()
        .rev()
        .find(|c| change_name(c.root()) == root)
        .unwrap_or_else(|| {
            panic!(
                "no cascade rooted at {root:?} among {:?}",
                all.iter()
                    .map(|c| change_name(c.root()))
                    .collect::<Vec<_>>()
            )
        })
}

fn time(v: &Value) -> SystemTime {
    humantime::parse_rfc3339_weak(v.as_str().unwrap()).unwrap()
}

/// The fixture's own timestamps of a write: (requestReceived,
/// stageTimestamp) of its ResponseComplete event, found by user, verb,
/// resource, subresource and received time.
fn raw_times(raw: &[Value], c: &ChangeRecord) -> (SystemTime, SystemTime) {
    let found: Vec<_> = raw
        .iter()
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["user"]["username"] == c.user.as_str()
                && e["verb"] == c.verb.as_str()
                && e["objectRef"]["resource"] == c.object.resource.as_str()
                && e["objectRef"]["subresource"].as_str().unwrap_or_default() == c.subresource
                && time(&e["requestReceivedTimestamp"]) == c.received
        })
        .collect();
    assert_eq!(found.len(), 1, "one audit event for {}", change_name(c));
    (
        time(&found[0]["requestReceivedTimestamp"]),
        time(&found[0]["stageTimestamp"]),
    )
}

fn waiting(c: &Cascade) -> Vec<String> {
    match &c.completion {
        Completion::Waiting(w) => w.iter().map(ToString::to_string).collect(),
        Completion::Complete { at } => panic!("{} complete at {at:?}", change_name(c.root())),
        Completion::NotKnown(w) => panic!("{} not known: {w:?}", change_name(c.root())),
    }
}

const PATCH: &str = "kascade-e2e-admin patch deployments default/hello";

async fn frontend(scenario: &str) -> (Frontend<MemoryStore>, TimeRange) {
    let (store, errors) = store_from_audit_lines(
        common::audit_lines(scenario),
        CLUSTER,
        Arc::new(RuleSources::default().load().unwrap()),
        &AuditFilter::default(),
        ProcessorConfig::default(),
        Redactor::new(None),
    )
    .await;
    assert!(errors.is_empty(), "{errors:?}");
    let (a, b) = store.time_span().unwrap();
    (
        Frontend::new(Arc::new(store), FrontendConfig::default()),
        TimeRange::new(from_nanos(a), from_nanos(b)),
    )
}

async fn search(
    f: &Frontend<MemoryStore>,
    range: TimeRange,
    t: &[(&str, &str)],
) -> Arc<AssembledTrace> {
    let found = f
        .search(&SearchQuery {
            mode: Mode::Cascade,
            scope: Scope::Full,
            all_siblings: false,
            tags: t
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            range,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{t:?}");
    found[0].clone()
}

fn spans(t: &AssembledTrace) -> Vec<(String, Span)> {
    t.resource_spans
        .iter()
        .flat_map(|rs| {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| string_attr(&r.attributes, "service.name"))
                .unwrap_or_default()
                .to_string();
            rs.scope_spans
                .iter()
                .flat_map(|ss| ss.spans.clone())
                .map(move |s| (service.clone(), s))
        })
        .collect()
}

/// (parent span, resource, verb, subresource) of a write's span: the level
/// it belongs to.
fn level_of(s: &Span) -> (Vec<u8>, String, String, String) {
    let a = |k| string_attr(&s.attributes, k).unwrap_or("").to_string();
    (
        s.parent_span_id.clone(),
        a(attr::RESOURCE),
        a(attr::AUDIT_VERB),
        a(attr::AUDIT_SUBRESOURCE),
    )
}

mod display;
mod scenarios;
mod wide;
