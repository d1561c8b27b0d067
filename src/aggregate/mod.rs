//! Aggregation: accepted audit events → object spans, audit spans, links,
//! and event spans for writes of Kubernetes Events.
//!
//! Events enter through one bounded queue (admission is all-or-nothing per
//! webhook batch, so the apiserver can retry a refused batch whole), then are
//! sharded by object so each object's writes are processed in order while
//! different objects proceed in parallel.

pub mod diff;
pub mod k8s_event;
pub mod offline;
pub mod processor;
pub mod redact;
pub mod relations;
pub mod rules;
pub mod selectors;
pub mod span_cache;
pub mod states;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use crate::metrics::Metrics;
pub use processor::{Accepted, Processor, ProcessorConfig};

/// One unit of work for the processor; all work about one object goes to the
/// same worker, in order.
pub enum Work {
    /// An audit event that passed the filter.
    Audit(Box<Accepted>),
    /// A version of an object from the list-watch.
    Watch(processor::WatchChange),
    /// A Kubernetes Event from the Event watch (`own` is the Event object).
    Event {
        own: crate::model::ObjectRef,
        uid: String,
        event: Box<k8s_event::K8sEvent>,
        at: std::time::SystemTime,
    },
    /// Passed once every shard has processed all work queued before it
    /// (durable intake: then the spans of that work are in the export queue).
    Barrier(Arc<Barrier>),
}

impl Work {
    fn routing_hash(&self) -> u64 {
        match self {
            Work::Audit(a) => a.object.hash(),
            Work::Watch(w) => w.object.hash(),
            Work::Event { own, .. } => own.hash(),
            Work::Barrier(_) => 0,
        }
    }
}

/// See [`Work::Barrier`]: every shard arrives once; the last one to arrive
/// answers the waiter.
pub struct Barrier {
    remaining: std::sync::atomic::AtomicUsize,
    done: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl Barrier {
    fn arrive(&self) {
        if self
            .remaining
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
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
        self.intake
            .metrics
            .queue_depth
            .set(self.intake.depth() as i64);
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

/// The entry point of the pipeline, shared by every source.
#[derive(Clone)]
pub struct Intake {
    tx: mpsc::Sender<Work>,
    capacity: usize,
    metrics: Arc<Metrics>,
}

impl Intake {
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
        let (tx, rx) = tokio::sync::oneshot::channel();
        let barrier = Arc::new(Barrier {
            remaining: std::sync::atomic::AtomicUsize::new(usize::MAX),
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

/// Ends the pipeline: the intake stops admitting (sources get `Closed`), what
/// was admitted is still processed.
pub struct Shutdown(tokio::sync::oneshot::Sender<()>);

impl Shutdown {
    pub fn new() -> (Shutdown, tokio::sync::oneshot::Receiver<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (Shutdown(tx), rx)
    }

    pub fn close(self) {
        let _ = self.0.send(());
    }
}

/// Starts the dispatcher and `shards` workers. The returned handle finishes
/// once the intake is closed (by `Shutdown` or by dropping every `Intake`)
/// and all queued events are processed.
pub fn start(
    processor: Arc<Processor>,
    queue_capacity: usize,
    shards: usize,
    metrics: Arc<Metrics>,
) -> (Intake, Shutdown, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<Work>(queue_capacity);
    metrics.queue_capacity.set(queue_capacity as i64);
    let shards = shards.max(1);
    let mut shard_txs = Vec::with_capacity(shards);
    let mut workers = Vec::with_capacity(shards);
    for _ in 0..shards {
        // Small queues relative to the intake, so a stalled exporter fills the
        // intake (and the webhook says 429) rather than hiding events in shards.
        let (stx, mut srx) = mpsc::channel::<Work>((queue_capacity / shards).clamp(1, 256));
        shard_txs.push(stx);
        let p = processor.clone();
        workers.push(tokio::spawn(async move {
            while let Some(work) = srx.recv().await {
                // Described only on failure: formatting a description of
                // every event cost more than some of the processing.
                let result = match work {
                    Work::Audit(item) => p
                        .process(&item)
                        .instrument(item.batch_span.clone())
                        .await
                        .map_err(|e| {
                            (
                                e,
                                format!("{} (audit {})", item.object, item.event.audit_id),
                            )
                        }),
                    Work::Watch(change) => {
                        let what = format!("{} (watch {})", change.object, change.kind.as_str());
                        p.process_watch(change).await.map_err(|e| (e, what))
                    }
                    Work::Event {
                        own,
                        uid,
                        event,
                        at,
                    } => p
                        .process_k8s_event(&own, &uid, *event, at)
                        .await
                        .map_err(|e| (e, format!("{own} (event)"))),
                    Work::Barrier(b) => {
                        b.arrive();
                        Ok(())
                    }
                };
                if let Err((e, what)) = result {
                    tracing::error!(%what, error = %e, "processing failed");
                }
            }
        }));
    }
    let m = metrics.clone();
    let (stop, mut stop_rx) = Shutdown::new();
    // Watch changes whose wait for an audit event is over are shown from here.
    let flusher = {
        let p = processor.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(250));
            loop {
                tick.tick().await;
                if let Err(e) = p.flush_watch(false).await {
                    tracing::error!(error = %e, "showing watch changes failed");
                }
            }
        })
    };
    let handle = tokio::spawn(async move {
        loop {
            let item = tokio::select! {
                item = rx.recv() => item,
                _ = &mut stop_rx, if !stop_rx.is_terminated() => {
                    // Refuse new events; the loop drains what is queued.
                    rx.close();
                    continue;
                }
            };
            let Some(item) = item else { break };
            m.queue_depth.set(rx.len() as i64);
            if let Work::Barrier(b) = &item {
                b.remaining
                    .store(shards, std::sync::atomic::Ordering::Release);
                for tx in &shard_txs {
                    if tx.send(Work::Barrier(b.clone())).await.is_err() {
                        break;
                    }
                }
                continue;
            }
            let shard = (item.routing_hash() % shards as u64) as usize;
            if shard_txs[shard].send(item).await.is_err() {
                break;
            }
        }
        drop(shard_txs);
        for w in workers {
            let _ = w.await;
        }
        flusher.abort();
        // What still waits for an audit event is shown now.
        if let Err(e) = processor.flush_watch(true).await {
            tracing::error!(error = %e, "showing the last watch changes failed");
        }
    });
    (
        Intake {
            tx,
            capacity: queue_capacity,
            metrics,
        },
        stop,
        handle,
    )
}
