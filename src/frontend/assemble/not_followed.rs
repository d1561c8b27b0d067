//! The links an assembly did not follow, by the limit that stopped it:
//! noted on the trace, counted and logged.

use super::Limits;
use crate::metrics::{AssemblyLimit, AssemblyLimitLabel, FrontendMetrics};
use crate::model::ObjectRef;

/// Links one assembly did not follow, by the limit that stopped it.
#[derive(Default)]
pub(super) struct NotFollowed {
    pub(super) depth: usize,
    pub(super) objects: usize,
    pub(super) bytes: usize,
}

impl NotFollowed {
    /// Notes each limit reached on the trace (the reader sees it on the
    /// root span), counts it and logs it.
    pub(super) fn note(
        &self,
        limits: &Limits,
        metrics: &FrontendMetrics,
        from: &ObjectRef,
        notes: &mut Vec<String>,
    ) {
        let reached = [
            (AssemblyLimit::Depth, self.depth),
            (AssemblyLimit::Objects, self.objects),
            (AssemblyLimit::Bytes, self.bytes),
        ];
        for (limit, count) in reached.into_iter().filter(|(_, count)| *count > 0) {
            let note = match limit {
                AssemblyLimit::Depth => format!(
                    "{count} links below depth {} not followed (max depth)",
                    limits.max_depth
                ),
                AssemblyLimit::Objects => format!(
                    "{count} linked objects not shown (max {} objects per trace)",
                    limits.max_objects
                ),
                AssemblyLimit::Bytes => format!(
                    "{count} linked objects not shown (max {} MiB of object histories per trace, --max-trace-bytes)",
                    limits.max_bytes.div_ceil(1 << 20)
                ),
            };
            metrics
                .links_not_followed
                .get_or_create(&AssemblyLimitLabel { limit })
                .inc_by(count as u64);
            tracing::warn!(object = %from, limit = limit.as_str(), links = count,
                "an assembled trace stops at a limit: {note}");
            notes.push(note);
        }
    }
}
