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
}

impl ExportProgress {
    pub fn add_sent(&self, n: u64) {
        self.sent.fetch_add(n, Ordering::AcqRel);
    }

    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Acquire)
    }

    /// The exporter has `n` outputs, each finishing every span.
    pub fn set_outputs(&self, n: usize) {
        *self.finished.lock().expect("progress") = vec![0; n];
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

/// Gauges a stage refreshes when metrics are scraped (the webhook's
/// `/metrics` serves them without knowing the stage).
pub trait Gauges: Send + Sync {
    fn update_gauges(&self);
}
