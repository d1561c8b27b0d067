//! The read side without Jaeger: audit log lines → the collector's spans in
//! memory → a [`MemoryStore`] the frontend assembles from (tests,
//! benchmarks), or spilled to a temporary file → a [`SpillStore`]
//! (`kascade trace`, whose logs can be large).

use std::sync::Arc;

#[cfg(feature = "test-support")]
use super::raw::MemoryStore;
use super::raw::{SpillStore, SpillWriter};
use crate::aggregate::ProcessorConfig;
use crate::aggregate::redact::Redactor;
use crate::aggregate::rules::RuleSet;
use crate::offline::encoded_spans_from_audit_lines;
#[cfg(feature = "test-support")]
use crate::offline::spans_from_audit_lines;
use crate::source::audit::AuditFilter;

/// Runs audit log lines through the collector's processing and stores the
/// spans; also returns the lines that could not be used (`line: error`).
#[cfg(feature = "test-support")]
pub async fn store_from_audit_lines(
    lines: impl IntoIterator<Item = String, IntoIter: Send + 'static>,
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

/// [`store_from_audit_lines`] with the spans in a temporary file and only
/// their index in memory; fails when the file cannot be written.
pub(crate) async fn spilled_store_from_audit_lines(
    lines: impl IntoIterator<Item = String, IntoIter: Send + 'static>,
    cluster: &str,
    rules: Arc<RuleSet>,
    filter: &AuditFilter,
    cfg: ProcessorConfig,
    redactor: Redactor,
) -> anyhow::Result<(SpillStore, Vec<String>)> {
    let writer = SpillWriter::new()?;
    let (writer, errors) =
        encoded_spans_from_audit_lines(lines, cluster, rules, filter, cfg, redactor, writer).await;
    Ok((writer.finish()?, errors))
}
