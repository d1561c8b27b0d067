//! Metrics of `kascade frontend`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{AssemblyLimitLabel, Rpc, RpcLabel};

/// Metrics of `kascade frontend`.
pub struct FrontendMetrics {
    pub requests: Family<RpcLabel, Counter>,
    pub errors: Family<RpcLabel, Counter>,
    pub traces_assembled: Counter,
    pub cache_hits: Counter,
    /// Bytes of the traces in the cache (`assembled::trace_bytes`).
    pub cache_bytes: prometheus_client::metrics::gauge::Gauge,
    /// Traces the cache let go before their time to live, to stay within
    /// `--cache-bytes` (a later request assembles them again).
    pub cache_evictions: Counter,
    pub raw_reads: Counter,
    /// Requests for raw traces (searches not counted): one per trace over
    /// HTTP, one per batch of traces over gRPC.
    pub raw_requests: Counter,
    pub raw_read_errors: Counter,
    /// Of `raw_reads`, those answered by another assembly's read of the
    /// same raw trace (in flight, or within the reuse period).
    pub raw_reads_shared: Counter,
    /// Raw trace answers dropped before their reuse period ended, to stay
    /// within the bytes kept for reuse.
    pub raw_reads_dropped: Counter,
    /// Assemblies that ran out of `--assembly-timeout`.
    pub assembly_timeouts: Counter,
    pub assemble_seconds: prometheus_client::metrics::histogram::Histogram,
    pub objects_per_trace: prometheus_client::metrics::histogram::Histogram,
    /// Objects (writes, in mode cascade) of wide levels that assembled
    /// traces summarised instead of showing (`--max-siblings`).
    pub summarised: Counter,
    /// Links an assembly did not follow, by the limit that stopped it (the
    /// trace's root span notes them too).
    pub links_not_followed: Family<AssemblyLimitLabel, Counter>,
    /// Wide assemblies (past a quarter of `--max-trace-bytes`) that waited
    /// for another to finish: one is assembled at a time.
    pub wide_assembly_waits: Counter,
    /// Assemblies that waited for one of the `--max-assemblies` in flight
    /// to finish.
    pub assembly_waits: Counter,
    /// Searches that waited for one of the `--max-searches` in flight.
    pub search_waits: Counter,
    /// Searches refused after waiting `--search-wait`.
    pub searches_refused: Counter,
    /// Searches answered by an identical search's raw read.
    pub searches_shared: Counter,
    /// Search answers stopped at `--max-search-bytes`.
    pub search_answers_cut: Counter,
}

impl Default for FrontendMetrics {
    fn default() -> Self {
        use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
        Self {
            requests: Family::default(),
            errors: Family::default(),
            traces_assembled: Counter::default(),
            cache_hits: Counter::default(),
            cache_bytes: Default::default(),
            cache_evictions: Counter::default(),
            raw_reads: Counter::default(),
            raw_requests: Counter::default(),
            assembly_timeouts: Counter::default(),
            raw_read_errors: Counter::default(),
            raw_reads_shared: Counter::default(),
            raw_reads_dropped: Counter::default(),
            assemble_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            objects_per_trace: Histogram::new(exponential_buckets(1.0, 2.0, 16)),
            summarised: Counter::default(),
            links_not_followed: Family::default(),
            wide_assembly_waits: Counter::default(),
            assembly_waits: Counter::default(),
            search_waits: Counter::default(),
            searches_refused: Counter::default(),
            searches_shared: Counter::default(),
            search_answers_cut: Counter::default(),
        }
    }
}

impl FrontendMetrics {
    pub fn register(&self, r: &mut Registry) {
        let r = r.sub_registry_with_prefix("kascade_frontend");
        r.register("requests", "Requests, by rpc", self.requests.clone());
        r.register("errors", "Failed requests, by rpc", self.errors.clone());
        r.register(
            "traces_assembled",
            "Traces assembled (cache misses)",
            self.traces_assembled.clone(),
        );
        r.register(
            "cache_hits",
            "Trace requests answered from the cache",
            self.cache_hits.clone(),
        );
        r.register(
            "cache_bytes",
            "Bytes of the assembled traces in the cache (bounded by --cache-bytes)",
            self.cache_bytes.clone(),
        );
        r.register(
            "cache_evictions",
            "Assembled traces dropped from the cache to stay within --cache-bytes",
            self.cache_evictions.clone(),
        );
        r.register("raw_reads", "Reads of raw traces", self.raw_reads.clone());
        r.register(
            "raw_requests",
            "Requests for raw traces to the raw Jaeger (one per trace over HTTP, one per batch over gRPC)",
            self.raw_requests.clone(),
        );
        r.register(
            "assembly_timeouts",
            "Trace assemblies stopped by --assembly-timeout",
            self.assembly_timeouts.clone(),
        );
        r.register(
            "raw_read_errors",
            "Failed reads of raw traces",
            self.raw_read_errors.clone(),
        );
        r.register(
            "raw_reads_shared",
            "Reads of raw traces answered by another assembly's read of the same trace (in flight, or within the last second)",
            self.raw_reads_shared.clone(),
        );
        r.register(
            "raw_reads_dropped",
            "Raw trace answers dropped before their reuse period ended, to stay within the bytes kept for reuse (32 MiB)",
            self.raw_reads_dropped.clone(),
        );
        r.register(
            "assemble_seconds",
            "Time to assemble one trace",
            self.assemble_seconds.clone(),
        );
        r.register(
            "objects_per_trace",
            "Objects in an assembled trace",
            self.objects_per_trace.clone(),
        );
        r.register(
            "summarised",
            "Objects (writes, in mode cascade) of wide levels an assembled trace summarised by one span instead of showing (--max-siblings; the tag siblings=all shows them)",
            self.summarised.clone(),
        );
        r.register(
            "links_not_followed",
            "Links an assembly did not follow, by the limit that stopped it (depth, objects, bytes)",
            self.links_not_followed.clone(),
        );
        r.register(
            "wide_assembly_waits",
            "Wide assemblies (past a quarter of --max-trace-bytes) that waited for another to finish",
            self.wide_assembly_waits.clone(),
        );
        r.register(
            "assembly_waits",
            "Assemblies that waited for one of the --max-assemblies in flight to finish",
            self.assembly_waits.clone(),
        );
        r.register(
            "search_waits",
            "Searches that waited for one of the --max-searches reading the raw store",
            self.search_waits.clone(),
        );
        r.register(
            "searches_refused",
            "Searches refused after waiting --search-wait for one of the --max-searches",
            self.searches_refused.clone(),
        );
        r.register(
            "searches_shared",
            "Searches answered by the raw read of an identical search in flight",
            self.searches_shared.clone(),
        );
        r.register(
            "search_answers_cut",
            "Search answers stopped before a trace that would pass --max-search-bytes",
            self.search_answers_cut.clone(),
        );
    }

    pub fn rpc(rpc: Rpc) -> RpcLabel {
        RpcLabel { rpc }
    }
}
