//! The read side without Jaeger: audit log lines → the collector's spans in
//! memory → a [`MemoryStore`] the frontend assembles from (`kascade trace`,
//! tests, benchmarks).

use std::sync::Arc;

use super::raw::MemoryStore;
use crate::aggregate::ProcessorConfig;
use crate::aggregate::redact::Redactor;
use crate::aggregate::rules::RuleSet;
use crate::offline::spans_from_audit_lines;
use crate::source::audit::AuditFilter;

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
    (MemoryStore::new(spans), errors)
}
