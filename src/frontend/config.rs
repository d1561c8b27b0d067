//! What one frontend assembles with: window, limits, caching, deadlines.

use std::collections::HashSet;
use std::time::Duration;

use super::assemble::{Limits, Scope};
use super::cpid;

/// Default of [`FrontendConfig::max_assemblies`]: with the default budget
/// (64 MiB of histories, 16 MiB before an assembly is wide) three small
/// assemblies and the wide one peak near 350 MB together.
pub(crate) const DEFAULT_MAX_ASSEMBLIES: usize = 4;

/// Default of [`FrontendConfig::max_searches`]: a search's raw read asks
/// the raw Jaeger for up to `raw_search_limit` traces' ids; two hundred at
/// once made it time every one of them out.
pub(crate) const DEFAULT_MAX_SEARCHES: usize = 4;

/// [`FrontendConfig::raw_read_reuse`] of `kascade frontend`: the raw store
/// makes a span searchable later than that, so an answer this old misses
/// nothing a new read would find (the searches' grain, `searches.rs`).
pub(crate) const RAW_READ_REUSE: Duration = Duration::from_secs(1);

/// Default of [`FrontendConfig::max_search_bytes`].
pub(crate) const DEFAULT_MAX_SEARCH_BYTES: u64 = 64 << 20;

/// Settings of a [`super::Frontend`]; `kascade frontend` and `kascade
/// trace` fill it from their flags.
#[derive(Clone, Debug)]
pub struct FrontendConfig {
    /// Must equal the collector's `--window`.
    pub window: Duration,
    pub limits: Limits,
    /// Link classes shown under a virtual span named by the class.
    pub group_classes: HashSet<String>,
    /// Objects of one resource and link class shown under one object
    /// (a ReplicaSet's Pods), and in mode cascade writes of one verb and
    /// resource caused by one write; beyond it the failed, the slowest to
    /// get ready and the longest-lived (latest to settle) are shown and one
    /// span summarises the rest (the search tag `siblings=all` shows them
    /// all). 0 shows all.
    pub max_siblings: usize,
    pub default_scope: Scope,
    /// Raw traces read per search (each is one object window).
    pub raw_search_limit: usize,
    /// How long an assembled trace is kept for reloads.
    pub cache_ttl: Duration,
    /// Bytes of assembled traces kept for reloads, as
    /// [`super::assembled::trace_bytes`] counts them (a trace larger than
    /// this is answered but not kept).
    pub cache_bytes: u64,
    /// Clusters offered as operations before any search has seen them.
    pub clusters: Vec<String>,
    /// How far back a change's trace looks when reloaded by id (its id is
    /// the CPID and carries no time).
    pub change_lookback: Duration,
    /// Longest one trace's assembly (raw reads included) may take; the
    /// request then fails with DeadlineExceeded instead of holding the UI.
    pub assembly_timeout: Duration,
    /// Assemblies in flight at once (cache misses of different traces;
    /// requests for one trace share its assembly). Each holds up to a
    /// quarter of `limits.max_bytes` of histories unless it is the one
    /// wide assembly, so memory stays bounded under a burst of requests;
    /// the rest wait, the wait counting against `assembly_timeout`.
    pub max_assemblies: usize,
    /// Searches reading the raw store at once; further ones queue, each
    /// for at most `search_wait`, then fail saying the frontend is busy.
    /// Identical searches in flight (same tags and time range) share one
    /// read.
    pub max_searches: usize,
    /// Longest a search waits in the queue for one of `max_searches`.
    pub search_wait: Duration,
    /// Bytes one search's answer may stream (its traces encoded); the
    /// answer stops with a message saying so before a trace that would
    /// pass it.
    pub max_search_bytes: u64,
    /// Keep each assembled trace whole: its object tree, cascades and
    /// rendered spans (`kascade trace`, the library). `kascade frontend`
    /// keeps only what the Jaeger API serves, the encoded stream and its
    /// time range ([`super::AssembledTrace::served_only`]), so its cache
    /// holds five times as many traces or more (a 1,000-Pod Deployment's
    /// in tracing mode: 17 MB instead of 94 MB).
    pub keep_assembly: bool,
    /// How long a raw trace read answers other assemblies after it
    /// answered its own (reads in flight are joined whatever this is):
    /// `kascade frontend` reuses for a second, so a burst of searches
    /// reads a hub object (a Node every Pod links to) once. Zero (the
    /// library's default, `kascade trace`): no reuse.
    pub raw_read_reuse: Duration,
    /// The service kube-apiserver's own traces are stored under, joined to
    /// the writes by audit ID (`components.rs`); empty: no join.
    pub component_service: String,
    /// The service the kubelet's own traces are stored under, whose pod
    /// syncs are joined to the Pods by uid (`components.rs`); empty: no
    /// join.
    pub kubelet_service: String,
}

impl Default for FrontendConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(1800),
            limits: Limits::default(),
            group_classes: HashSet::new(),
            max_siblings: super::display::DEFAULT_MAX_SIBLINGS,
            default_scope: Scope::Full,
            raw_search_limit: 500,
            cache_ttl: Duration::from_secs(600),
            cache_bytes: super::DEFAULT_CACHE_BYTES,
            clusters: Vec::new(),
            change_lookback: cpid::LOOKBACK,
            assembly_timeout: Duration::from_secs(30),
            max_assemblies: DEFAULT_MAX_ASSEMBLIES,
            max_searches: DEFAULT_MAX_SEARCHES,
            search_wait: Duration::from_secs(60),
            max_search_bytes: DEFAULT_MAX_SEARCH_BYTES,
            keep_assembly: true,
            raw_read_reuse: Duration::ZERO,
            component_service: super::components::APISERVER_SERVICE.to_string(),
            kubelet_service: super::components::KUBELET_SERVICE.to_string(),
        }
    }
}
