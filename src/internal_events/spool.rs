//! The durable intake's occurrences (`source/spool`): what it could not
//! replay at start. Each is said: rare, and each is data kascade answered
//! 200 for.

use std::path::Path;

use super::InternalEvent;
use crate::metrics::Metrics;

/// A spool segment damaged after `offset` (a write cut short by a crash,
/// never answered 200): the rest of it is skipped.
pub(crate) struct SpoolSegmentDamaged<'a> {
    pub segment: &'a Path,
    pub offset: u64,
    pub reason: &'a str,
}

impl InternalEvent for SpoolSegmentDamaged<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.spool_records_lost.inc();
        tracing::error!(segment = %self.segment.display(), offset = self.offset, reason = self.reason,
            "spool segment is damaged after this offset; the rest of it is skipped (a write cut short by a crash was never answered 200)");
    }
}

/// A spooled batch that was being processed each time the process died
/// (`deaths` times), moved aside to `file`.
pub(crate) struct SpoolBatchQuarantined<'a> {
    pub seq: u64,
    pub deaths: u32,
    pub file: &'a Path,
}

impl InternalEvent for SpoolBatchQuarantined<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.spool_quarantined.inc();
        tracing::error!(seq = self.seq, deaths = self.deaths, file = %self.file.display(),
            "a spooled batch was being processed each time the process died: moved aside, the rest is replayed; \
             inspect it with `kascade explain FILE` or send it on with `kascade replay FILE`");
    }
}
