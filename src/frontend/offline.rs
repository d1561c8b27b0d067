//! The read side without Jaeger: audit log lines → the collector's spans in
//! memory → a [`MemoryStore`] the frontend assembles from (`kascade trace`,
//! tests, benchmarks).

use std::sync::Arc;

use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SpanData;

use super::raw::{MemoryStore, spans_of};
use crate::aggregate::ProcessorConfig;
use crate::aggregate::offline::spans_from_audit_lines;
use crate::aggregate::redact::Redactor;
use crate::aggregate::rules::RuleSet;
use crate::source::audit::AuditFilter;

/// The collector's spans as OTLP protobuf spans (what Jaeger would return).
pub fn to_proto(spans: Vec<SpanData>) -> Vec<Span> {
    let resource = Resource::builder_empty().build();
    spans_of(group_spans_by_resource_and_scope(
        spans,
        &ResourceAttributesWithSchema::from(&resource),
    ))
}

/// Runs audit log lines through the collector's processing and stores the
/// spans; also returns the lines that could not be used (`line: error`).
pub async fn store_from_audit_lines(
    lines: impl IntoIterator<Item = String>,
    cluster: &str,
    rules: Arc<RuleSet>,
    filter: &AuditFilter,
    cfg: ProcessorConfig,
    redactor: Redactor,
) -> (MemoryStore, Vec<String>) {
    let (spans, errors) =
        spans_from_audit_lines(lines, cluster, rules, filter, cfg, redactor).await;
    (MemoryStore::new(to_proto(spans)), errors)
}
