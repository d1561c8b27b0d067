//! What the durable intake learns from the later stages: how far export has
//! got, and the processor's gauges to refresh before a scrape.

use std::sync::atomic::{AtomicU64, Ordering};

/// How far export has got, in spans: `sent` into the export queue by the
/// processor, and per output how many it has finished (written, or dropped
/// and counted). Batches reach each output in order and the span queue is
/// FIFO, so once every output's count reaches a value `sent` had, every span
/// sent before that moment is done: the durable intake releases spooled
/// batches on that basis.
#[derive(Default)]
pub struct ExportProgress {
    sent: AtomicU64,
    finished: std::sync::Mutex<Vec<u64>>,
    advanced: tokio::sync::Notify,
    /// Per output: how its last requests went (`kascade doctor`).
    health: std::sync::Mutex<Vec<OutputHealth>>,
    /// Written before each batch leaves (the spool's journal of links).
    write_ahead: std::sync::OnceLock<std::sync::Arc<super::SentLinks>>,
}

/// How an export output's requests have gone lately: served on the admin
/// listener (`GET /intake`) for `kascade doctor`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutputHealth {
    /// The endpoint or file written to.
    pub target: String,
    /// Requests (or file writes) that succeeded.
    pub succeeded: u64,
    /// Attempts that failed (each retry counts).
    pub failed: u64,
    /// Failed attempts since the last success.
    pub failing: u64,
    /// When the last success and the last failure were (ms since the epoch, 0: never).
    pub last_success_ms: u64,
    pub last_failure_ms: u64,
    /// The last failure's message, at most 400 bytes.
    pub last_error: String,
}

impl ExportProgress {
    /// Has `journal` write what was noted before each batch leaves.
    pub(crate) fn write_ahead_to(&self, journal: std::sync::Arc<super::SentLinks>) {
        let _ = self.write_ahead.set(journal);
    }

    /// A batch is about to leave the process: what must be on disk before
    /// its spans are is written.
    pub(crate) fn before_batch_leaves(&self) {
        if let Some(journal) = self.write_ahead.get() {
            journal.write_ahead();
        }
    }

    pub fn add_sent(&self, n: u64) {
        self.sent.fetch_add(n, Ordering::AcqRel);
    }

    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Acquire)
    }

    /// The exporter has `n` outputs, each finishing every span.
    pub fn set_outputs(&self, n: usize) {
        *self.finished.lock().expect("progress") = vec![0; n];
        *self.health.lock().expect("progress") = vec![OutputHealth::default(); n];
    }

    /// Names output `output`'s endpoint or file.
    pub fn set_target(&self, output: usize, target: &str) {
        if let Some(h) = self.health.lock().expect("progress").get_mut(output) {
            h.target = target.to_string();
        }
    }

    /// Output `output` sent a request (or wrote a batch).
    pub fn succeeded(&self, output: usize) {
        if let Some(h) = self.health.lock().expect("progress").get_mut(output) {
            h.succeeded += 1;
            h.failing = 0;
            h.last_success_ms = unix_ms(std::time::SystemTime::now());
        }
    }

    /// An attempt of output `output` failed with `error`.
    pub fn failed(&self, output: usize, error: &str) {
        if let Some(h) = self.health.lock().expect("progress").get_mut(output) {
            h.failed += 1;
            h.failing += 1;
            h.last_failure_ms = unix_ms(std::time::SystemTime::now());
            h.last_error = crate::messages::clip_message(error.to_string());
        }
    }

    /// Every output's health, in configured order.
    pub fn health(&self) -> Vec<OutputHealth> {
        self.health.lock().expect("progress").clone()
    }

    pub fn add_finished(&self, output: usize, n: u64) {
        if let Some(c) = self.finished.lock().expect("progress").get_mut(output) {
            *c += n;
        }
        self.advanced.notify_waiters();
    }

    /// Spans every output has finished.
    pub fn finished(&self) -> u64 {
        let f = self.finished.lock().expect("progress");
        f.iter().copied().min().unwrap_or(u64::MAX)
    }

    /// Waits until `n` spans are finished by every output.
    pub async fn wait_finished(&self, n: u64) {
        loop {
            let advanced = self.advanced.notified();
            tokio::pin!(advanced);
            advanced.as_mut().enable();
            if self.finished() >= n {
                return;
            }
            advanced.await;
        }
    }
}

/// Milliseconds since the Unix epoch (0 before it).
pub(crate) fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Gauges a stage refreshes when metrics are scraped (the webhook's
/// `/metrics` serves them without knowing the stage).
pub(crate) trait Gauges: Send + Sync {
    fn update_gauges(&self);
}
