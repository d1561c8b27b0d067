//! The entry point of the pipeline, shared by every source: a bounded queue
//! of [`Work`] that admits a webhook batch all-or-nothing (so the apiserver
//! can retry a refused batch whole) and paces the other sources.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{mpsc, oneshot};

use super::{Accepted, Work};

/// See [`Work::Barrier`]: every shard arrives once; the last one to arrive
/// answers the waiter.
pub struct Barrier {
    remaining: AtomicUsize,
    done: std::sync::Mutex<Option<oneshot::Sender<()>>>,
}

impl Barrier {
    /// Sets how many shards must arrive, before it is passed to them.
    pub fn expect(&self, shards: usize) {
        self.remaining.store(shards, Ordering::Release);
    }

    /// One shard has processed all work queued before the barrier.
    pub fn arrive(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1
            && let Some(tx) = self.done.lock().expect("barrier").take()
        {
            let _ = tx.send(());
        }
    }
}

/// Room reserved in the intake queue for a whole batch; sending cannot fail
/// or wait (the durable intake writes the batch to disk in between).
pub struct Reserved<'a> {
    permits: mpsc::PermitIterator<'a, Work>,
    intake: &'a Intake,
}

impl Reserved<'_> {
    pub fn send(self, batch: Vec<Accepted>) {
        for (permit, item) in self.permits.zip(batch) {
            permit.send(Work::Audit(Box::new(item)));
        }
        self.intake.depth_gauge.set(self.intake.depth() as i64);
    }

    /// Sends work other than audit events (mergelogs).
    pub fn send_work(self, work: Vec<Work>) {
        for (permit, item) in self.permits.zip(work) {
            permit.send(item);
        }
        self.intake.depth_gauge.set(self.intake.depth() as i64);
    }
}

/// Why a batch was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    #[error("queue is full ({depth} of {capacity} events waiting); retry later")]
    Full { depth: usize, capacity: usize },
    #[error("batch of {batch} events is larger than the whole queue ({capacity})")]
    TooLarge { batch: usize, capacity: usize },
    #[error("kascade is shutting down")]
    Closed,
}

/// The sources' handle on the queue; the processor's side is the receiver
/// [`Intake::new`] returns.
#[derive(Clone)]
pub struct Intake {
    tx: mpsc::Sender<Work>,
    capacity: usize,
    /// Kept current as batches are admitted (the dispatcher updates it too).
    depth_gauge: Gauge,
}

impl Intake {
    /// A queue of `capacity` units of work (at least 1); `depth_gauge`
    /// shows how many are waiting.
    pub fn new(capacity: usize, depth_gauge: Gauge) -> (Intake, mpsc::Receiver<Work>) {
        let (tx, rx) = mpsc::channel::<Work>(capacity);
        (
            Intake {
                tx,
                capacity,
                depth_gauge,
            },
            rx,
        )
    }

    /// Reserves room for a whole batch of `n` events (`n` ≥ 1), waiting up
    /// to `wait` (a zero wait still admits a batch that fits at once): a
    /// refused batch comes back from the apiserver and is decoded again, so
    /// a short wait under load costs less than a refusal.
    pub async fn reserve(&self, n: usize, wait: Duration) -> Result<Reserved<'_>, AdmitError> {
        if n > self.capacity {
            return Err(AdmitError::TooLarge {
                batch: n,
                capacity: self.capacity,
            });
        }
        match tokio::time::timeout(wait, self.tx.reserve_many(n)).await {
            Ok(Ok(permits)) => Ok(Reserved {
                permits,
                intake: self,
            }),
            Ok(Err(_)) => Err(AdmitError::Closed),
            Err(_) => Err(AdmitError::Full {
                depth: self.depth(),
                capacity: self.capacity,
            }),
        }
    }

    /// Waits until every shard has processed all work queued before this call.
    pub async fn barrier(&self) -> Result<(), AdmitError> {
        let (tx, rx) = oneshot::channel();
        let barrier = Arc::new(Barrier {
            remaining: AtomicUsize::new(usize::MAX),
            done: std::sync::Mutex::new(Some(tx)),
        });
        self.submit_work(Work::Barrier(barrier)).await?;
        rx.await.map_err(|_| AdmitError::Closed)
    }

    /// Admits one event, waiting for room (used by replay, where the source can wait).
    pub async fn submit(&self, item: Accepted) -> Result<(), AdmitError> {
        self.submit_work(Work::Audit(Box::new(item))).await
    }

    /// Waits for room: list-watch input is paced, never refused.
    pub async fn submit_work(&self, work: Work) -> Result<(), AdmitError> {
        self.tx.send(work).await.map_err(|_| AdmitError::Closed)
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    pub fn depth(&self) -> usize {
        self.capacity - self.tx.capacity()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Ends a stage: its intake stops admitting (sources get `Closed`), what
/// was admitted is still processed.
pub(crate) struct Shutdown(oneshot::Sender<()>);

impl Shutdown {
    pub(crate) fn new() -> (Shutdown, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        (Shutdown(tx), rx)
    }

    pub(crate) fn close(self) {
        let _ = self.0.send(());
    }
}
