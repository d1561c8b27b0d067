//! The frontend: raw reads → merge → follow links → display modes → Jaeger.
//!
//! [`Frontend`] answers "show me this object" with one assembled trace. It
//! serves the Jaeger UI through Jaeger's remote storage API v2 (service.rs),
//! dashboard links (http.rs), and `kascade trace` offline (text.rs).
//! This file holds the facade, its trace cache and assembly permits; what
//! a search asks and finds is in query.rs, its shared raw reads in
//! searches.rs, the clusters offered in clusters.rs, the cached trace in
//! assembled.rs, and the errors in error.rs.

pub(crate) mod assemble;
pub(crate) mod assembled;
pub(crate) mod cache_weight;
pub(crate) mod cascade_reads;
mod clusters;
pub(crate) mod components;
mod config;
mod error;
pub use config::FrontendConfig;
pub(crate) use config::RAW_READ_REUSE;
pub(crate) use config::{DEFAULT_MAX_ASSEMBLIES, DEFAULT_MAX_SEARCH_BYTES, DEFAULT_MAX_SEARCHES};
pub(crate) mod cpid;
pub(crate) mod display;
pub(crate) mod explain;
pub(crate) mod http;
pub(crate) mod merge;
pub(crate) mod offline;
pub mod proto;
mod query;
pub(crate) mod raw;
mod searches;
pub(crate) mod service;
pub(crate) mod text;
pub(crate) mod trace_id;
pub(crate) mod tree_json;

pub use assembled::AssembledTrace;
pub use error::FrontendError;
pub(crate) use query::Found;
pub(crate) use query::check_tag;
pub use query::{CPID_TAG, SEARCH_TAGS, SearchQuery};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use tracing::{Instrument as _, field};

use crate::metrics::FrontendMetrics;
use crate::model::{ObjectRef, Windowing, raw_trace_id};
use crate::self_trace::TARGET;
use assemble::{Assembler, Assembly, Clip, Scope};
use display::Mode;
use merge::{ObjectHistory, merge};
use raw::nanos;
use raw::{RawStore, TimeRange, TraceIdBytes};
use trace_id::AssembledId;

/// The trace cache's default bound: about ten 1,000-Pod Deployments'
/// traces as the server keeps them; full, and with `--max-assemblies`
/// assemblies in flight (one of them wide), the frontend peaked below
/// 500 MiB, within its 640 MiB limit (`deploy/`; `e2e/bench/frontend-memory.sh`).
pub(crate) const DEFAULT_CACHE_BYTES: u64 = 192 << 20;

/// Why a trace is not in the cache after loading it.
enum Miss {
    NotFound,
    Failed(Arc<FrontendError>),
}

pub struct Frontend<S> {
    assembler: Assembler<S>,
    metrics: Arc<FrontendMetrics>,
    cfg: FrontendConfig,
    windowing: Windowing,
    cache: moka::future::Cache<TraceIdBytes, Arc<AssembledTrace>>,
    /// [`FrontendConfig::max_assemblies`] permits, one per assembly in flight.
    assemblies: tokio::sync::Semaphore,
    /// Raw search reads, bounded and shared by identical searches.
    searches: searches::RawSearches,
    /// The clusters offered as operations.
    clusters: clusters::Clusters,
}

impl<S: RawStore> Frontend<S> {
    pub fn new(store: Arc<S>, cfg: FrontendConfig) -> Self {
        Self::with_metrics(store, cfg, Arc::new(FrontendMetrics::default()))
    }

    /// Like `new`, counting into `metrics` (which the store may share:
    /// its round trips).
    pub fn with_metrics(store: Arc<S>, cfg: FrontendConfig, metrics: Arc<FrontendMetrics>) -> Self {
        let searches = searches::RawSearches::new(&cfg, metrics.clone());
        let evictions = metrics.cache_evictions.clone();
        Self {
            assembler: Assembler::new(store, cfg.limits.clone(), metrics.clone())
                .reusing_reads(cfg.raw_read_reuse),
            metrics,
            windowing: Windowing::new(cfg.window),
            cache: moka::future::Cache::builder()
                // Weighed in KiB: moka's weights are u32.
                .weigher(|_, t: &Arc<AssembledTrace>| {
                    u32::try_from(t.bytes.div_ceil(1024)).unwrap_or(u32::MAX)
                })
                .max_capacity(cfg.cache_bytes / 1024)
                .eviction_listener(move |_, t, cause| {
                    if cause == moka::notification::RemovalCause::Size {
                        evictions.inc();
                        tracing::debug!(
                            bytes = t.bytes,
                            "assembled trace dropped from the cache (--cache-bytes)"
                        );
                    }
                })
                .time_to_live(cfg.cache_ttl)
                // Least recently used first: moka's default (TinyLFU) may
                // refuse a newly assembled trace outright when full, and
                // that is what the UI asks for next.
                .eviction_policy(moka::policy::EvictionPolicy::lru())
                .build(),
            // At least one, or every assembly would wait out its deadline.
            assemblies: tokio::sync::Semaphore::new(
                cfg.max_assemblies
                    .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
            ),
            searches,
            clusters: clusters::Clusters::new(&cfg.clusters),
            cfg,
        }
    }

    pub fn metrics(&self) -> &Arc<FrontendMetrics> {
        &self.metrics
    }

    pub fn config(&self) -> &FrontendConfig {
        &self.cfg
    }

    pub fn store(&self) -> &Arc<S> {
        self.assembler.store()
    }

    /// Clusters configured, seen in assembled traces, and named by the raw
    /// store's most recent object spans of the last day (read again at most
    /// once a minute; a failed read is logged and leaves what is known).
    pub async fn clusters_stored(&self) -> Vec<String> {
        let limit = self.cfg.raw_search_limit;
        self.clusters.stored(self.store().as_ref(), limit).await
    }

    /// Adds the clusters the raw store's object spans in `range` name.
    #[cfg(feature = "test-support")]
    pub async fn read_clusters(&self, range: TimeRange) -> Result<(), FrontendError> {
        let limit = self.cfg.raw_search_limit;
        self.clusters
            .read(self.store().as_ref(), range, limit)
            .await
    }

    /// Clusters seen so far (and configured), sorted.
    #[cfg(feature = "test-support")]
    pub fn clusters(&self) -> Vec<String> {
        self.clusters.sorted()
    }

    fn width(&self) -> u64 {
        self.cfg.window.as_secs().max(1)
    }

    /// Window starts from the one containing `from` to the one containing
    /// `to`, at most 255 (the id keeps a one-byte count).
    pub fn windows_between(&self, from: SystemTime, to: SystemTime) -> Vec<u64> {
        let (a, b) = (
            self.windowing.window_start(from),
            self.windowing.window_start(to.max(from)),
        );
        (0..255u64)
            .map(|i| a.saturating_add(i * self.width()))
            .take_while(|w| *w <= b)
            .collect()
    }

    /// Finds the objects matching the query and assembles one trace each,
    /// all of them held until the last is assembled ([`Frontend::find`] and
    /// [`Found::next`] hand them over one at a time).
    pub async fn search(&self, q: &SearchQuery) -> Result<Vec<Arc<AssembledTrace>>, FrontendError> {
        let mut found = self.find(q).await?;
        let mut out = Vec::new();
        while let Some(t) = found.next(self).await? {
            out.push(t);
        }
        Ok(out)
    }

    /// The objects matching the query, none of them assembled yet: a
    /// server answers each trace as [`Found::next`] assembles it and lets it
    /// go, instead of holding all of a search's results at once (traces past
    /// `--cache-bytes`, or evicted meanwhile, would all be in memory
    /// together).
    /// Self-tracing (crate::telemetry): one `search` span, with the raw reads
    /// and the `get` of each trace found below it.
    pub async fn find(&self, q: &SearchQuery) -> Result<Found, FrontendError> {
        let span = tracing::info_span!(target: TARGET, "search", tags = q.tags.len(),
            limit = q.limit, raw_traces = field::Empty, found = field::Empty);
        let (change, ids) = self.find_traced(q, &span).instrument(span.clone()).await?;
        span.record("found", usize::from(change.is_some()));
        Ok(Found {
            change,
            ids: ids.into_iter(),
            limit: q.limit,
            yielded: 0,
            span,
        })
    }

    /// A search by change (its one trace), or the ids of the objects' traces
    /// to assemble, in order.
    async fn find_traced(
        &self,
        q: &SearchQuery,
        span: &tracing::Span,
    ) -> Result<(Option<Arc<AssembledTrace>>, Vec<TraceIdBytes>), FrontendError> {
        if let Some((_, v)) = q.tags.iter().find(|(k, _)| k == CPID_TAG) {
            let cpid = kascade_cpid::Cpid::parse(v.trim())
                .map_err(|e| FrontendError::InvalidArgument(format!("tag \"cpid\": {e}")))?;
            let found = self.change_trace(cpid, q.range).await?;
            return Ok((found, Vec::new()));
        }
        for (k, v) in &q.tags {
            if !SEARCH_TAGS.contains(&k.as_str()) {
                return Err(FrontendError::InvalidArgument(format!(
                    "unknown tag {}: search by {} (and scope)",
                    crate::messages::quote(k),
                    SEARCH_TAGS.join(", ")
                )));
            }
            check_tag(k, v).map_err(FrontendError::InvalidArgument)?;
        }
        let range_windows = self.windows_between(q.range.start, q.range.end);
        let raw_ids = self.searches.search(self.store(), &q.tags, q.range).await?;
        span.record("raw_traces", raw_ids.len());
        // A raw id is `object hash ‖ window start`: group windows by object.
        let mut objects: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for id in raw_ids.iter() {
            let hash = u64::from_be_bytes(id[..8].try_into().expect("8 bytes"));
            let window = u64::from_be_bytes(id[8..].try_into().expect("8 bytes"));
            objects.entry(hash).or_default().push(window);
        }
        // The clip end is the search's end, to the second (rounded up): a
        // later search sees later writes under a new id.
        let clip_end = nanos(q.range.end).div_ceil(1_000_000_000);
        let ids = objects
            .into_iter()
            .map(|(hash, mut windows)| {
                windows.sort_unstable();
                let first = windows[0].max(range_windows.first().copied().unwrap_or(windows[0]));
                AssembledId {
                    object_hash: hash,
                    first_window: first,
                    clip_end: clip_end.max(first),
                    mode: q.mode,
                    scope: q.scope,
                    all_siblings: q.all_siblings,
                }
                .encode()
            })
            .collect();
        Ok((None, ids))
    }

    /// [`Frontend::find`]'s traces as a stream, each assembled when the
    /// previous one has been taken: what a server answers a search with.
    /// Ends after the first error.
    pub fn found_stream(
        self: Arc<Self>,
        found: Found,
    ) -> impl futures::Stream<Item = Result<Arc<AssembledTrace>, FrontendError>> + Send + 'static
    where
        S: 'static,
    {
        futures::stream::try_unfold((self, found), |(frontend, mut found)| async move {
            let next = found.next(&frontend).await?;
            Ok(next.map(|t| (t, (frontend, found))))
        })
    }

    /// The service graph for the Jaeger UI's System Architecture: how
    /// often objects of one resource were linked to children of another in
    /// `range` (over at most `--raw-search-limit` raw traces).
    pub async fn dependencies(
        &self,
        range: TimeRange,
    ) -> Result<raw::RelationCounts, FrontendError> {
        Ok(self
            .store()
            .relation_counts(range, self.cfg.raw_search_limit)
            .await?)
    }

    /// An assembled trace by id: from the cache, else assembled again from
    /// what the id encodes. `None` for ids kascade did not make or objects
    /// with nothing recorded in range.
    /// Self-tracing: one `get` span, with the raw reads and `assemble`
    /// below it unless the trace was cached.
    pub async fn get(
        &self,
        id: &TraceIdBytes,
    ) -> Result<Option<Arc<AssembledTrace>>, FrontendError> {
        let span = tracing::info_span!(target: TARGET, "get", trace_id = field::Empty,
            cached = field::Empty);
        if !span.is_disabled() {
            span.record("trace_id", raw::hex_trace_id(id).as_str());
        }
        async {
            if let Some(t) = self.cache.get(id).await {
                self.metrics.cache_hits.inc();
                span.record("cached", true);
                return Ok(Some(t));
            }
            span.record("cached", false);
            // Concurrent requests for the same trace (the UI's search, then
            // its reload; two users) wait for one assembly.
            let deadline = self.cfg.assembly_timeout;
            let loaded = self
                .cache
                .try_get_with(*id, async {
                    let assembly = async {
                        let _in_flight = self.assembly_permit().await;
                        self.get_uncached(id).await
                    };
                    match tokio::time::timeout(deadline, assembly).await {
                        Ok(Ok(Some(t))) => Ok(t),
                        Ok(Ok(None)) => Err(Miss::NotFound),
                        Ok(Err(e)) => Err(Miss::Failed(Arc::new(e))),
                        Err(_) => {
                            self.metrics.assembly_timeouts.inc();
                            Err(Miss::Failed(Arc::new(FrontendError::Timeout(deadline))))
                        }
                    }
                })
                .await;
            // Evictions settled now, so the gauge (and the next request) see them.
            self.cache.run_pending_tasks().await;
            self.metrics
                .cache_bytes
                .set(i64::try_from(self.cache.weighted_size() * 1024).unwrap_or(i64::MAX));
            match loaded {
                Ok(t) => {
                    if t.bytes > self.cfg.cache_bytes {
                        tracing::warn!(
                            bytes = t.bytes,
                            cache_bytes = self.cfg.cache_bytes,
                            "an assembled trace larger than --cache-bytes is answered but not \
                             kept: each request for it assembles it again"
                        );
                    }
                    Ok(Some(t))
                }
                Err(miss) => match &*miss {
                    Miss::NotFound => Ok(None),
                    Miss::Failed(e) => Err(FrontendError::Shared(e.clone())),
                },
            }
        }
        .instrument(span.clone())
        .await
    }

    /// A permit to assemble, waited for (and the wait counted) while
    /// `--max-assemblies` others are in flight.
    async fn assembly_permit(&self) -> tokio::sync::SemaphorePermit<'_> {
        if let Ok(p) = self.assemblies.try_acquire() {
            return p;
        }
        self.metrics.assembly_waits.inc();
        tracing::debug!(
            max_assemblies = self.cfg.max_assemblies,
            "an assembly waits for one in flight to finish"
        );
        self.assemblies
            .acquire()
            .await
            .expect("the semaphore is never closed")
    }

    async fn get_uncached(
        &self,
        id: &TraceIdBytes,
    ) -> Result<Option<Arc<AssembledTrace>>, FrontendError> {
        let Some(decoded) = AssembledId::decode(id, self.width()) else {
            return self.change_trace_by_id(id).await;
        };
        let windows = decoded.window_starts(self.width());
        let clip = Clip {
            windows: windows.clone(),
            until: decoded.clip_end.saturating_mul(1_000_000_000),
        };
        // All windows in one batch of reads; the first window where the
        // object has a raw trace tells who it is.
        let ids: Vec<TraceIdBytes> = windows
            .iter()
            .map(|&w| raw_trace_id(decoded.object_hash, w).to_bytes())
            .collect();
        let mut traces = self.assembler.read_many(&ids).await?;
        let object = ids
            .iter()
            .find_map(|id| traces.get(id).and_then(|spans| merge(spans.clone())))
            .map(|h| h.object);
        let Some(object) = object else {
            // A change's trace: its id is the CPID (an object id's check
            // bits pass for one CPID in 16; then no object has that hash).
            return self.change_trace_by_id(id).await;
        };
        let spans: Vec<_> = ids
            .iter()
            .filter_map(|id| traces.remove(id))
            .flatten()
            .collect();
        let Some(searched) = merge::merge_until(spans, clip.until).filter(|h| h.object == object)
        else {
            return Ok(None);
        };
        let trace = self.assemble(searched, decoded, &clip).await?;
        Ok(Some(trace))
    }

    async fn assemble(
        &self,
        searched: ObjectHistory,
        id: AssembledId,
        clip: &Clip,
    ) -> Result<Arc<AssembledTrace>, FrontendError> {
        let started = std::time::Instant::now();
        let span = tracing::info_span!(target: TARGET, "assemble", objects = field::Empty);
        // `_wide` is held until `finish` returns: the trace is rendered, and
        // for the server (`keep_assembly = false`) encoded too.
        let (assembly, _wide) = self
            .assembler
            .assemble(searched, id.scope, clip)
            .instrument(span.clone())
            .await?;
        span.record("objects", assembly.nodes.len());
        self.metrics.traces_assembled.inc();
        self.metrics
            .objects_per_trace
            .observe(assembly.nodes.len() as f64);
        for n in &assembly.nodes {
            self.clusters.seen(&n.history.object.cluster);
        }
        let encoded = id.encode();
        let max_siblings = if id.all_siblings {
            0
        } else {
            self.cfg.max_siblings
        };
        let (cascades, resource_spans) = if id.mode == Mode::Cascade {
            let (cascades, mut notes) = cascade_reads::cascades_of(
                &self.assembler,
                &assembly,
                clip,
                self.cfg.raw_search_limit,
            )
            .instrument(tracing::info_span!(target: TARGET, "cascades"))
            .await?;
            notes.extend(
                assembly
                    .notes
                    .iter()
                    .filter(|n| !assemble::is_fold_note(n))
                    .cloned(),
            );
            let searched = assembly
                .nodes
                .get(assembly.searched)
                .map(|n| &n.history.object);
            let fought = display::fight_writes(&assembly);
            let spans = display::cascade::render(
                &cascades,
                &encoded,
                &notes,
                searched,
                max_siblings,
                &fought,
            );
            (cascades, spans)
        } else {
            let spans = display::render(
                &assembly,
                id.mode,
                &encoded,
                &self.cfg.group_classes,
                max_siblings,
            );
            (Vec::new(), spans)
        };
        let mut resource_spans = resource_spans;
        let (comps, pods) = self
            .component_spans(&assembly, &resource_spans)
            .instrument(tracing::info_span!(target: TARGET, "component spans"))
            .await?;
        components::join(&mut resource_spans, &encoded, &comps);
        components::join_syncs(&mut resource_spans, &encoded, &comps, &pods);
        self.metrics
            .summarised
            .inc_by(display::not_shown(&resource_spans));
        self.metrics
            .assemble_seconds
            .observe(started.elapsed().as_secs_f64());
        Ok(self.finish(AssembledTrace::unweighed(
            encoded,
            assembly,
            cascades,
            resource_spans,
        )))
    }

    /// The apiserver's own spans of the writes an assembled trace shows
    /// (`shown`, as displayed), the kubelet's syncs of the Pods it shows,
    /// and those Pods.
    async fn component_spans(
        &self,
        assembly: &Assembly,
        shown: &[opentelemetry_proto::tonic::trace::v1::ResourceSpans],
    ) -> Result<(components::ComponentSpans, Vec<components::Pod>), FrontendError> {
        let (writes, pods) = components::shown(shown, assembly);
        let spans = components::read(
            self.assembler.store().as_ref(),
            components::Lookups {
                apiserver_service: &self.cfg.component_service,
                writes,
                max_writes: components::MAX_JOINED_WRITES,
                budget: Some(components::JOIN_BUDGET),
                kubelet_service: &self.cfg.kubelet_service,
                pods: pods.clone(),
            },
            self.cfg.limits.concurrency,
        )
        .await?;
        Ok((spans, pods))
    }

    /// `t` (unweighed) as the cache keeps it, weighed: whole, or only what
    /// the Jaeger API serves ([`FrontendConfig::keep_assembly`]).
    fn finish(&self, t: AssembledTrace) -> Arc<AssembledTrace> {
        Arc::new(if self.cfg.keep_assembly {
            t.weighed()
        } else {
            t.served_only()
        })
    }

    /// The id of the trace of `object` around `at` (the window before, the
    /// window of, and the window after `at`, clipped at `now`), without
    /// reading anything.
    pub fn id_for(
        &self,
        object: &ObjectRef,
        at: SystemTime,
        now: SystemTime,
        mode: Mode,
        scope: Scope,
        all_siblings: bool,
    ) -> TraceIdBytes {
        let w = self.windowing.window_start(at);
        let first_window = w.saturating_sub(self.width());
        let window_after_end = w.saturating_add(2 * self.width()).saturating_sub(1);
        let now = nanos(now).div_ceil(1_000_000_000);
        AssembledId {
            object_hash: object.hash(),
            first_window,
            clip_end: window_after_end.min(now).max(first_window),
            mode,
            scope,
            all_siblings,
        }
        .encode()
    }
}
