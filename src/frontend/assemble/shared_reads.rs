//! Raw trace reads shared between assemblies: a hub object (a Node every
//! Pod links to, a namespace's ServiceAccount) is in most traces, so a
//! burst of searches would read its large raw trace once per assembly.
//!
//! A read of a trace another assembly is reading joins that read; a read
//! of a trace read within the reuse period (the server's: one second)
//! takes that answer. The raw store makes a span searchable later than
//! that, so an assembly served a second-old answer misses nothing it could
//! have read itself; the searches of `searches.rs` are shared on the same
//! grounds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

use crate::frontend::raw::{RawError, RawStore, TraceIdBytes};
use crate::metrics::FrontendMetrics;

/// Raw traces listed as being read at once; beyond, a read is not listed
/// (it is still made, and its answer kept for the reuse period).
const MAX_LISTED_IN_FLIGHT: usize = 65_536;

/// A read listed for longer than this is not joined but made again: every
/// assembly waiting for it went away (past `--assembly-timeout`) before it
/// finished, and its answer, when it comes, may be that old.
const STALE_IN_FLIGHT: Duration = Duration::from_secs(60);

/// Bytes of raw traces (protobuf-encoded size) kept for the reuse period.
/// Entries live a second, so this bounds a burst, not a working set: a
/// Node's raw trace of a 1,000-Pod Deployment is about 1 MB.
pub(crate) const RECENT_BYTES: u64 = 32 << 20;

/// One batch of raw traces being read, awaited by every assembly that
/// needs one of them.
type BatchRead =
    Shared<BoxFuture<'static, Result<Arc<HashMap<TraceIdBytes, Vec<Span>>>, RawError>>>;

struct InFlight {
    read: BatchRead,
    since: Instant,
}

/// The shared reads of one assembler.
pub(super) struct SharedReads {
    reuse: Duration,
    in_flight: Mutex<HashMap<TraceIdBytes, InFlight>>,
    /// Answers of the last `reuse`, by id; an id the store does not have is
    /// kept as an empty trace.
    recent: moka::sync::Cache<TraceIdBytes, Arc<Vec<Span>>>,
}

impl SharedReads {
    /// Sharing answers for `reuse` (zero: in flight only).
    pub(super) fn new(reuse: Duration, metrics: &Arc<FrontendMetrics>) -> Self {
        let evictions = metrics.raw_reads_dropped.clone();
        Self {
            reuse,
            in_flight: Mutex::new(HashMap::new()),
            recent: moka::sync::Cache::builder()
                // Weighed in KiB: moka's weights are u32.
                .weigher(|_, spans: &Arc<Vec<Span>>| {
                    u32::try_from(encoded_bytes(spans).div_ceil(1024)).unwrap_or(u32::MAX)
                })
                .max_capacity(RECENT_BYTES / 1024)
                .time_to_live(reuse.max(Duration::from_nanos(1)))
                .eviction_listener(move |_, _, cause| {
                    if cause == moka::notification::RemovalCause::Size {
                        evictions.inc();
                        tracing::debug!(
                            "a raw trace read dropped before its reuse period ended ({} MiB of recent reads)",
                            RECENT_BYTES >> 20
                        );
                    }
                })
                .build(),
        }
    }

    /// The traces of `ids` (absent: the store has none), each from a read
    /// in flight, a recent answer, or one new read of the rest made by
    /// `read` (which the assemblies needing them meanwhile join).
    pub(super) async fn read<S: RawStore>(
        &self,
        store: &Arc<S>,
        ids: &[TraceIdBytes],
        concurrency: usize,
        metrics: &FrontendMetrics,
    ) -> Result<HashMap<TraceIdBytes, Vec<Span>>, RawError> {
        let mut out = HashMap::with_capacity(ids.len());
        let mut waits: Vec<(BatchRead, Vec<TraceIdBytes>)> = Vec::new();
        let mut own: Vec<TraceIdBytes> = Vec::new();
        let mut shared = 0u64;
        let mut seen = std::collections::HashSet::with_capacity(ids.len());
        {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
            for &id in ids {
                if !seen.insert(id) {
                    continue;
                }
                if self.reuse > Duration::ZERO
                    && let Some(spans) = self.recent.get(&id)
                {
                    shared += 1;
                    if !spans.is_empty() {
                        out.insert(id, spans.as_ref().clone());
                    }
                    continue;
                }
                match in_flight.get(&id) {
                    Some(f) if f.since.elapsed() < STALE_IN_FLIGHT => {
                        shared += 1;
                        match waits.iter_mut().find(|(r, _)| r.ptr_eq(&f.read)) {
                            Some((_, wanted)) => wanted.push(id),
                            None => waits.push((f.read.clone(), vec![id])),
                        }
                    }
                    _ => own.push(id),
                }
            }
            if !own.is_empty() {
                let read = self.batch(store.clone(), own.clone(), concurrency);
                let since = Instant::now();
                for &id in &own {
                    if in_flight.len() < MAX_LISTED_IN_FLIGHT || in_flight.contains_key(&id) {
                        in_flight.insert(
                            id,
                            InFlight {
                                read: read.clone(),
                                since,
                            },
                        );
                    }
                }
                waits.push((read, own));
            }
        }
        metrics.raw_reads_shared.inc_by(shared);
        let answers = futures::future::join_all(waits.iter().map(|(r, _)| r.clone())).await;
        let mut failed = None;
        for ((read, wanted), answer) in waits.into_iter().zip(answers) {
            self.unlist(&read, &wanted);
            match answer {
                Ok(traces) => out.extend(
                    wanted
                        .into_iter()
                        .filter_map(|id| traces.get(&id).map(|t| (id, t.clone()))),
                ),
                Err(e) => failed = Some(e),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// One read of `ids`, whose answers are kept for the reuse period when
    /// it ends.
    fn batch<S: RawStore>(
        &self,
        store: Arc<S>,
        ids: Vec<TraceIdBytes>,
        concurrency: usize,
    ) -> BatchRead {
        let recent = (self.reuse > Duration::ZERO).then(|| self.recent.clone());
        async move {
            let traces = store.get_many(&ids, concurrency).await?;
            if let Some(recent) = recent {
                for id in &ids {
                    let spans = traces.get(id).cloned().unwrap_or_default();
                    recent.insert(*id, Arc::new(spans));
                }
            }
            Ok(Arc::new(traces))
        }
        .boxed()
        .shared()
    }

    /// Takes `read` off the list for `ids` (unless another read replaced
    /// it): it has answered.
    fn unlist(&self, read: &BatchRead, ids: &[TraceIdBytes]) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            if in_flight.get(id).is_some_and(|f| f.read.ptr_eq(read)) {
                in_flight.remove(id);
            }
        }
    }
}

/// Protobuf-encoded bytes of `spans`: what a raw trace costs to hold,
/// roughly.
fn encoded_bytes(spans: &[Span]) -> u64 {
    spans.iter().map(|s| s.encoded_len() as u64).sum()
}
