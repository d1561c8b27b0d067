//! Aggregation: accepted audit events → object spans, audit spans, links,
//! and event spans for writes of Kubernetes Events.
//!
//! Work enters through the pipeline's [`Intake`] (one bounded queue;
//! admission is all-or-nothing per webhook batch, so the apiserver can retry
//! a refused batch whole), then is sharded by object so each object's writes
//! are processed in order while different objects proceed in parallel.

pub(crate) mod causes;
pub(crate) mod diff;
pub(crate) mod last_states;
pub(crate) mod processor;
pub(crate) mod readiness;
pub(crate) mod redact;
pub(crate) mod relations;
pub(crate) mod rules;
pub(crate) mod selectors;
pub(crate) mod span_cache;

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tracing::Instrument as _;

use crate::flow::{Accepted, Intake, Shutdown, Work};
use crate::metrics::Metrics;
pub(crate) use processor::ParsedResponse;
pub use processor::Processor;
pub use processor::ProcessorConfig;

/// Queued items the dispatcher notes together before handing them to the
/// shards (and offline runs, lines).
pub(crate) const NOTE_AHEAD: usize = 64;

/// Writes whose spans a shard may still be sending while it processes the
/// next ones, with a shared span cache (see
/// [`Processor::pipelines_emission`]): their reservations reach etcd
/// together. Bounds what a shard holds beyond its queue.
const EMISSIONS_IN_FLIGHT: u32 = 128;

/// What the dispatcher notes in the cause index before it hands a write to
/// its shard. A write logged after its effect (its response finished later)
/// is a candidate cause only once it is noted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LookAhead {
    /// The rest of each item's webhook batch, up to 64 items after it
    /// (`NOTE_AHEAD`), and nothing beyond ([`Accepted::more_in_batch`]):
    /// a live source never waits for a batch that has not arrived, and what
    /// an item finds does not depend on whether the next batch was already
    /// queued, so a restart replaying the spool finds what an uninterrupted
    /// run found.
    ///
    /// [`Accepted::more_in_batch`]: crate::flow::Accepted::more_in_batch
    #[default]
    Batch,
    /// The 64 items after each (fewer only at the end of the
    /// input or before a barrier), waiting for them: replaying a file gives
    /// the same causes however fast it is read.
    Full,
}

/// Starts the dispatcher and `shards` workers. The returned handle finishes
/// once the intake is closed (by `Shutdown` or by dropping every `Intake`)
/// and all queued events are processed.
pub(crate) fn start(
    processor: Arc<Processor>,
    queue_capacity: usize,
    shards: usize,
    look_ahead: LookAhead,
    metrics: Arc<Metrics>,
) -> (Intake, Shutdown, JoinHandle<()>) {
    let (intake, mut rx) = Intake::new(queue_capacity, metrics.queue_depth.clone());
    metrics.queue_capacity.set(queue_capacity as i64);
    let shards = shards.max(1);
    let mut shard_txs = Vec::with_capacity(shards);
    let mut workers = Vec::with_capacity(shards);
    for _ in 0..shards {
        // Small queues relative to the intake, so a stalled exporter fills the
        // intake (and the webhook says 429) rather than hiding events in shards.
        let (stx, mut srx) =
            tokio::sync::mpsc::channel::<Work>((queue_capacity / shards).clamp(1, 256));
        shard_txs.push(stx);
        let p = processor.clone();
        let pipelined = processor.pipelines_emission();
        let sending = Arc::new(tokio::sync::Semaphore::new(EMISSIONS_IN_FLIGHT as usize));
        let waiting_gauge = metrics.emissions_waiting.clone();
        workers.push(tokio::spawn(async move {
            // Described only on failure: formatting a description of every
            // event cost more than some of the processing.
            let audit_what =
                |item: &Accepted| format!("{} (audit {})", item.object, item.event.audit_id);
            while let Some(work) = srx.recv().await {
                let result = match work {
                    Work::Audit(item) if pipelined => {
                        let batch_span = item.batch_span.clone();
                        match p
                            .process_until_emission(&item)
                            .instrument(batch_span.clone())
                            .await
                        {
                            Ok(None) => Ok(()),
                            Ok(Some(rest)) => {
                                let permit = sending
                                    .clone()
                                    .acquire_owned()
                                    .await
                                    .expect("the semaphore is never closed");
                                let p = p.clone();
                                let waiting = waiting_gauge.clone();
                                waiting.inc();
                                tokio::spawn(async move {
                                    if let Err(e) = p.send_emission(rest).instrument(batch_span).await
                                    {
                                        tracing::error!(what = %audit_what(&item), error = %e, "processing failed");
                                    }
                                    waiting.dec();
                                    drop(permit);
                                });
                                Ok(())
                            }
                            Err(e) => Err((e, audit_what(&item))),
                        }
                    }
                    Work::Audit(item) => p
                        .process(&item)
                        .instrument(item.batch_span.clone())
                        .await
                        .map_err(|e| (e, audit_what(&item))),
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
                    Work::Mergelog { cluster, mergelog } => p
                        .process_mergelog(&cluster, &mergelog)
                        .await
                        .map_err(|e| (e, format!("mergelog {}", mergelog.cpid))),
                    Work::Barrier(b) => {
                        // Spans still being sent were made before it.
                        drop(sending.acquire_many(EMISSIONS_IN_FLIGHT).await);
                        b.arrive();
                        Ok(())
                    }
                };
                if let Err((e, what)) = result {
                    tracing::error!(%what, error = %e, "processing failed");
                }
            }
            drop(sending.acquire_many(EMISSIONS_IN_FLIGHT).await);
        }));
    }
    let m = metrics;
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
        // A sliding window: each item is handed to its shard once what
        // follows it (up to NOTE_AHEAD items) is noted, in arrival order,
        // before any shard runs it — a write another shard processes first
        // still finds this one as its cause.
        // Each item with the last place in arrival order given out once it
        // was noted: what the end of its batch lets the batch's items find.
        let mut window: VecDeque<(Work, u64)> = VecDeque::with_capacity(NOTE_AHEAD + 1);
        let mut closed = false;
        let ends_in_barrier =
            |w: &VecDeque<(Work, u64)>| matches!(w.back(), Some((Work::Barrier(_), _)));
        // Where the front item's batch ends in the window, if it does.
        let batch_end = |w: &VecDeque<(Work, u64)>| {
            w.iter()
                .find(|(item, _)| item.ends_batch())
                .map(|(_, noted)| *noted)
        };
        let note = |window: &mut VecDeque<(Work, u64)>, mut item: Work| {
            if let Work::Audit(a) = &mut item {
                a.arrival = processor.note_arrival(a);
            }
            window.push_back((item, processor.arrivals_noted()));
        };
        loop {
            // Whoever waits for a barrier sends nothing after it: nothing is
            // noted past one.
            while window.len() <= NOTE_AHEAD && !ends_in_barrier(&window) {
                match rx.try_recv() {
                    Ok(item) => note(&mut window, item),
                    Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                    Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            }
            m.queue_depth.set(rx.len() as i64);
            let end = match look_ahead {
                LookAhead::Batch => batch_end(&window),
                LookAhead::Full => None,
            };
            let ready = !window.is_empty()
                && (end.is_some()
                    || window.len() > NOTE_AHEAD
                    || closed
                    || ends_in_barrier(&window));
            if ready {
                let (mut item, _) = window.pop_front().expect("the window is not empty");
                if let Work::Audit(a) = &mut item {
                    a.noted_through = end.unwrap_or_else(|| processor.arrivals_noted());
                }
                if let Work::Barrier(b) = &item {
                    b.expect(shards);
                    let mut sent = true;
                    for tx in &shard_txs {
                        sent &= tx.send(Work::Barrier(b.clone())).await.is_ok();
                    }
                    if !sent {
                        break;
                    }
                    continue;
                }
                let shard = (item.routing_hash() % shards as u64) as usize;
                if shard_txs[shard].send(item).await.is_err() {
                    break;
                }
                continue;
            }
            if closed {
                break;
            }
            tokio::select! {
                item = rx.recv() => match item {
                    Some(item) => note(&mut window, item),
                    None => closed = true,
                },
                _ = &mut stop_rx, if !stop_rx.is_terminated() => {
                    // Refuse new events; what is queued is still processed.
                    rx.close();
                }
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
    (intake, stop, handle)
}
