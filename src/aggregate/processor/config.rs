//! The processor's settings.

use std::time::Duration;

use super::super::causes::DEFAULT_CAUSE_OBJECTS;
use crate::model::Windowing;

/// How the processor works: windows, cache sizes, waits, and whether it
/// builds spans at all.
#[derive(Clone, Debug)]
pub struct ProcessorConfig {
    pub windowing: Windowing,
    /// Upper bound of the bytes of last-seen object states kept for diffs.
    pub state_cache_bytes: u64,
    /// Objects whose last state is also kept parsed (recently written ones).
    pub hot_states: usize,
    /// Most changed paths shown per write; the rest are counted.
    pub max_diff_changes: usize,
    /// How long a change seen by the watch waits for the audit event of the
    /// same write before it is shown on its own.
    pub watch_audit_wait: Duration,
    /// A list-watch also feeds this processor: audit writes leave ledger
    /// markers so the watch's copies of them are not shown again. Without a
    /// watch the markers would only cost time (a tenth of the collector's).
    pub has_watch: bool,
    /// Most entries of the audit/watch ledger (each ≈ 300 bytes, plus the
    /// diff of a change no audit event has claimed yet).
    pub ledger_entries: u64,
    /// Objects whose recent changes are kept as candidate causes of later
    /// writes (`aggregate/causes/`).
    pub cause_objects: u64,
    /// Only changes for the change sinks, no spans (`kascade analyze`): no
    /// span is built, no diff computed, and objects are not redacted unless
    /// a sink asks for them (nothing else of them leaves the process).
    pub changes_only: bool,
}

/// The ledger's default size: ≈ 80 MiB when full, which takes ≈ 440 writes
/// per second sustained over its 10 minutes.
pub(crate) const DEFAULT_LEDGER_ENTRIES: u64 = 1 << 18;

impl Default for ProcessorConfig {
    fn default() -> Self {
        Self {
            windowing: Windowing::new(Duration::from_secs(1800)),
            state_cache_bytes: 128 << 20,
            hot_states: 256,
            max_diff_changes: 100,
            watch_audit_wait: Duration::from_secs(5),
            has_watch: true,
            ledger_entries: DEFAULT_LEDGER_ENTRIES,
            cause_objects: DEFAULT_CAUSE_OBJECTS,
            changes_only: false,
        }
    }
}
