//! kascade's own Prometheus metrics.

mod cascade_tracker;
mod evictions;
mod frontend;
pub(crate) mod labels;
mod propagation;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub(crate) use cascade_tracker::CascadeMetrics;
pub(crate) use evictions::CacheEvictions;
pub use frontend::FrontendMetrics;
pub use labels::*;
pub(crate) use propagation::PropagationMetrics;

/// A latency histogram (seconds, 0.5 ms to ~4 s), with a `Default` so
/// `Metrics` can derive one.
#[derive(Clone, Debug)]
pub struct LatencyHistogram(pub prometheus_client::metrics::histogram::Histogram);

impl Default for LatencyHistogram {
    fn default() -> Self {
        use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
        Self(Histogram::new(exponential_buckets(0.0005, 2.0, 14)))
    }
}

#[derive(Default)]
pub struct Metrics {
    pub events_received: Family<SourceLabel, Counter>,
    pub events_accepted: Family<SourceLabel, Counter>,
    pub events_rejected: Family<RejectLabel, Counter>,
    pub events_filtered: Family<FilterLabel, Counter>,
    /// Accepted audit events whose objects carried `metadata.managedFields`.
    pub events_with_managed_fields: Family<ClusterLabel, Counter>,
    /// Values of logged objects nested too deep to read, left as markers.
    pub deep_values: Family<ClusterLabel, Counter>,
    pub events_processed: Counter,
    /// Kubernetes Event messages that quoted a redacted value.
    pub event_messages_scrubbed: Counter,
    pub watch_spans: Counter,
    pub watch_changes: Family<ClusterLabel, Counter>,
    pub watch_errors: Family<ClusterLabel, Counter>,
    pub watching: Family<ClusterLabel, Gauge>,
    /// Resources RBAC refuses to list or watch right now (checked again
    /// with backoff), by cluster.
    pub watch_forbidden: Family<ClusterLabel, Gauge>,
    pub object_spans: Counter,
    pub link_spans: Counter,
    pub event_spans: Counter,
    pub spans_exported: Family<OutputLabel, Counter>,
    pub spans_dropped: Family<DropLabel, Counter>,
    pub export_errors: Family<OutputLabel, Counter>,
    pub queue_depth: Gauge,
    pub queue_capacity: Gauge,
    /// Writes whose spans wait on the shared span cache (see
    /// `aggregate::EMISSIONS_IN_FLIGHT`).
    pub emissions_waiting: Gauge,
    pub export_queue_depth: Gauge,
    pub span_cache_entries: Gauge,
    pub span_cache_fallback: Gauge,
    pub span_cache_etcd_requests: Family<OpLabel, Counter>,
    pub span_cache_etcd_errors: Family<ReasonLabel, Counter>,
    pub span_cache_etcd_retries: Family<OpLabel, Counter>,
    pub span_cache_etcd_seconds: LatencyHistogram,
    pub span_cache_local_reservations: Counter,
    pub state_cache_entries: Gauge,
    pub state_cache_hot_entries: Gauge,
    pub state_cache_bytes: Gauge,
    pub spool_bytes: Gauge,
    pub spool_flushes: Counter,
    pub spool_full: Counter,
    pub spool_records_lost: Counter,
    pub spool_replayed: Counter,
    /// Bytes of released spool segments kept as restart context.
    pub spool_context_bytes: Gauge,
    /// Released batches read again at a start as context (nothing sent).
    pub spool_context_batches: Counter,
    /// Link spans confirmed as exported (`SPOOL_DIR/sent-links`).
    pub sent_links_persisted: Counter,
    /// Sent links the journal could not keep (each may be a second span in
    /// the store after a crash).
    pub sent_links_dropped: Counter,
    /// Webhook connections refused at `--max-connections`.
    pub webhook_connections_refused: Counter,
    /// Spans of Kubernetes components' own traces, by what became of them.
    pub component_spans: Family<ComponentSpanLabel, Counter>,
    /// Component trace requests refused (unauthorized, unreadable, too large).
    pub component_requests_refused: Family<RejectLabel, Counter>,
    /// Admission requests (`--admission-listen`), by what became of them.
    pub admission_requests: Family<AdmissionRequestLabel, Counter>,
    /// Admitted writes, by what the list-watch showed of them.
    pub admitted_writes: Family<AdmittedWriteLabel, Counter>,
    /// Admitted writes waiting for the list-watch.
    pub admission_pending: Gauge,
    /// Encoded bytes of component trace requests waiting to be forwarded.
    pub component_forward_queue_bytes: Gauge,
    /// Bytes of webhook bodies being read and decoded now (`--max-intake-bytes`).
    pub intake_bytes: Gauge,
    /// Spooled batches moved aside after processes died replaying them.
    pub spool_quarantined: Counter,
    pub cache_evictions: Family<CacheEvictionLabel, Counter>,
    pub spans_trimmed: Family<TrimLabel, Counter>,
    pub span_events_trimmed: Counter,
    pub export_splits: Family<OutputLabel, Counter>,
    pub export_output_queue_depth: Family<OutputLabel, Gauge>,
    /// Writes by role in their cascade (root, effect, unexplained).
    pub cascade_writes: Family<CascadeRoleLabel, Counter>,
    pub cascade_unexplained: Counter,
    pub cascade_causes_after_effect: Counter,
    pub cascade_resolve_timeouts: Counter,
    pub cascade_waits_for_earlier: Counter,
    /// Writes the dispatcher handed to a shard whose processing has not
    /// ended yet (the cause index's writes in flight).
    pub cascade_writes_in_flight: Gauge,
    pub cascade_causes_arrived_later: Counter,
    pub cascade_holders_dropped: Counter,
    pub cascade_candidates_dropped: Counter,
    pub cascade_cpids_forgotten: Counter,
    pub cascade_objects: Gauge,
    /// Change-log lines dropped because the writer fell behind.
    pub changelog_dropped: Counter,
    /// CPID annotations that are not a CPID (ignored).
    pub cpid_malformed: Counter,
    pub mergelogs_accepted: Counter,
    pub mergelogs_rejected: Counter,
    pub mergelogs_duplicate: Counter,
}

impl Metrics {
    pub fn register(&self, r: &mut Registry) {
        let r = r.sub_registry_with_prefix("kascade");
        r.register(
            "audit_events_received",
            "Audit events received, by source",
            self.events_received.clone(),
        );
        r.register(
            "changelog_dropped",
            "Changes not written to the change log (--output changelog=) because its writer fell behind",
            self.changelog_dropped.clone(),
        );
        r.register(
            "spool_bytes",
            "Bytes of accepted audit batches on disk, waiting for their spans to be exported",
            self.spool_bytes.clone(),
        );
        r.register(
            "spool_context_bytes",
            "Bytes of released audit batches kept on disk as restart context (--spool-context-bytes)",
            self.spool_context_bytes.clone(),
        );
        r.register(
            "spool_context_batches",
            "Released audit batches read again at the start as context for the batches replayed after them (nothing sent)",
            self.spool_context_batches.clone(),
        );
        r.register(
            "spool_flushes",
            "Group commits of the durable intake (one fdatasync each)",
            self.spool_flushes.clone(),
        );
        r.register(
            "spool_full",
            "Audit batches refused with 429 because the spool reached --spool-bytes",
            self.spool_full.clone(),
        );
        r.register(
            "spool_damaged_segments",
            "Spool segments found damaged at start (the damaged tail, never answered 200, is skipped)",
            self.spool_records_lost.clone(),
        );
        r.register(
            "webhook_connections_refused",
            "Webhook connections answered 429 and closed because --max-connections were open",
            self.webhook_connections_refused.clone(),
        );
        r.register(
            "component_spans",
            "Spans of Kubernetes components' own traces (--component-traces-listen): received, forwarded to the raw store, shed (forwarding queue full: refused, the sender retries), dropped (export gave up)",
            self.component_spans.clone(),
        );
        r.register(
            "component_trace_requests_refused",
            "Component trace requests refused: unauthorized, bad_body (unreadable, too large), malformed (not OTLP traces)",
            self.component_requests_refused.clone(),
        );
        r.register(
            "admission_requests",
            "Admission requests (--admission-listen) by cluster and outcome: recorded, dry_run, not_a_write (CONNECT), unwatched (what was stored cannot be known), malformed (answered 400), shed (dropped to stay within --admission-max-pending)",
            self.admission_requests.clone(),
        );
        r.register(
            "admitted_writes",
            "Admitted writes by cluster and what the list-watch showed: persisted, no_change, not_persisted, conflict, attempt (an earlier admission of a retried write)",
            self.admitted_writes.clone(),
        );
        r.register(
            "admission_pending",
            "Admitted writes waiting for the list-watch to show them stored (bounded by --admission-max-pending)",
            self.admission_pending.clone(),
        );
        r.register(
            "component_forward_queue_bytes",
            "Encoded bytes of component trace requests waiting to be forwarded (bounded by --component-traces-queue-bytes)",
            self.component_forward_queue_bytes.clone(),
        );
        r.register(
            "webhook_intake_bytes",
            "Bytes of webhook bodies being read and decoded now (bounded by --max-intake-bytes; over it a request is answered 429 before its body is read)",
            self.intake_bytes.clone(),
        );
        r.register(
            "spool_quarantined_batches",
            "Spooled batches moved aside to the spool's quarantine/ directory because processes died twice while replaying them",
            self.spool_quarantined.clone(),
        );
        r.register(
            "spool_sent_links_persisted",
            "Link spans confirmed in the spool's journal as exported, so that a restart does not send them again",
            self.sent_links_persisted.clone(),
        );
        r.register(
            "spool_sent_links_dropped",
            "Sent link spans the spool's journal could not keep (full, unwritable, over its bound): each may be a second span in the store after a crash",
            self.sent_links_dropped.clone(),
        );
        r.register(
            "spool_replayed_batches",
            "Audit batches replayed from the spool at start (accepted by a previous run, not yet exported)",
            self.spool_replayed.clone(),
        );
        r.register(
            "audit_events_accepted",
            "Audit events accepted for processing",
            self.events_accepted.clone(),
        );
        r.register(
            "audit_events_rejected",
            "Audit events rejected (malformed, overload, too large)",
            self.events_rejected.clone(),
        );
        r.register(
            "audit_events_filtered",
            "Audit events dropped by the filter, by reason",
            self.events_filtered.clone(),
        );
        r.register(
            "audit_deep_values",
            "Values of audit events' objects and of listed or watched objects nested deeper than kascade reads (64 levels), each shown as a marker, by cluster",
            self.deep_values.clone(),
        );
        r.register(
            "audit_events_with_managed_fields",
            "Accepted audit events whose request or response object carried metadata.managedFields, by cluster (an audit policy with omitManagedFields: true leaves them out)",
            self.events_with_managed_fields.clone(),
        );
        r.register(
            "audit_events_processed",
            "Audit events turned into spans",
            self.events_processed.clone(),
        );
        r.register(
            "event_messages_scrubbed",
            "Kubernetes Event messages that quoted a value redaction replaced in the object they are about, shown with its marker instead",
            self.event_messages_scrubbed.clone(),
        );
        r.register(
            "watch_spans_created",
            "Changes seen only by the list-watch, shown as watch spans",
            self.watch_spans.clone(),
        );
        r.register(
            "watch_changes",
            "Object versions received from list-watch, by cluster",
            self.watch_changes.clone(),
        );
        r.register(
            "watching",
            "1 while this replica holds a cluster's watcher role and watches it",
            self.watching.clone(),
        );
        r.register(
            "watch_forbidden_resources",
            "Resources RBAC refuses to list or watch now (checked again with backoff), by cluster",
            self.watch_forbidden.clone(),
        );
        r.register(
            "watch_errors",
            "List-watch errors (reconnected with backoff), by cluster",
            self.watch_errors.clone(),
        );
        r.register(
            "object_spans_created",
            "Object spans created (one per object and window)",
            self.object_spans.clone(),
        );
        r.register(
            "cascade_writes",
            "Writes by their role in a cascade: root (nothing related caused it), effect (a cause was inferred), unexplained (a controller's write whose cause was not found)",
            self.cascade_writes.clone(),
        );
        r.register(
            "cascade_causes_after_effect",
            "Controller writes left without a cause because every candidate was stamped after the write was received (clock skew between apiservers, out-of-order input)",
            self.cascade_causes_after_effect.clone(),
        );
        r.register(
            "cascade_resolve_timeouts",
            "Effects whose cause's cascade, or whose earlier arrivals, were not known within 10 s (another shard lagged): shown under the cause alone, or looked at again with what was known then",
            self.cascade_resolve_timeouts.clone(),
        );
        r.register(
            "cascade_writes_in_flight",
            "Writes handed to a processing shard and not yet done with (bounded by the shards' queues): a later controller write that finds no cause waits for the earlier ones among them",
            self.cascade_writes_in_flight.clone(),
        );
        r.register(
            "cascade_waits_for_earlier",
            "Controller writes that found no cause while writes that arrived before them were still being processed in other shards, and waited for those (at most 10 s) before looking again",
            self.cascade_waits_for_earlier.clone(),
        );
        r.register(
            "cascade_causes_arrived_later",
            "Effects whose cause arrived after them (out-of-order input): shown under the cause alone, without waiting for it",
            self.cascade_causes_arrived_later.clone(),
        );
        r.register(
            "cascade_holders_dropped",
            "Relations not registered for cause inference because an object already had 4096 related holders",
            self.cascade_holders_dropped.clone(),
        );
        r.register(
            "cascade_candidates_dropped",
            "Changes forgotten as candidate causes before 10 s had passed, because an object had 256 of one change class within 10 s",
            self.cascade_candidates_dropped.clone(),
        );
        r.register(
            "cascade_cpids_forgotten",
            "Creates' CPIDs forgotten before their creates were processed (more than 16384 waiting): an effect processed before such a create carries no CPID",
            self.cascade_cpids_forgotten.clone(),
        );
        r.register(
            "mergelogs_accepted",
            "Mergelogs accepted from instrumented controllers (POST /cpid/mergelogs)",
            self.mergelogs_accepted.clone(),
        );
        r.register(
            "mergelogs_rejected",
            "Mergelogs refused for a full queue (429, the sender retries), plus requests refused as malformed or too large (4xx, one each, not retried)",
            self.mergelogs_rejected.clone(),
        );
        r.register(
            "mergelogs_duplicate",
            "Mergelogs received again within an hour (a sender's retry): shown once",
            self.mergelogs_duplicate.clone(),
        );
        r.register(
            "cpid_annotations_malformed",
            "kascade.io/cpid, cpid-ancestors or traceparent annotations on written objects that were malformed: ignored (the write is shown without that CPID)",
            self.cpid_malformed.clone(),
        );
        r.register(
            "cascade_objects",
            "Objects whose recent changes are kept as candidate causes",
            self.cascade_objects.clone(),
        );
        r.register(
            "link_spans_created",
            "Link spans created",
            self.link_spans.clone(),
        );
        r.register(
            "event_spans_created",
            "Event spans created (one per Kubernetes Event occurrence written)",
            self.event_spans.clone(),
        );
        r.register(
            "spans_exported",
            "Spans exported, by output",
            self.spans_exported.clone(),
        );
        r.register(
            "spans_dropped",
            "Spans not exported, by output and reason (retries_exhausted, rejected, partial_rejection, too_large)",
            self.spans_dropped.clone(),
        );
        r.register(
            "export_errors",
            "Failed export attempts, by output",
            self.export_errors.clone(),
        );
        r.register(
            "queue_depth",
            "Accepted audit events waiting to be processed",
            self.queue_depth.clone(),
        );
        r.register(
            "queue_capacity",
            "Capacity of the audit event queue",
            self.queue_capacity.clone(),
        );
        r.register(
            "span_cache_writes_waiting",
            "Processed writes whose spans wait for the shared span cache (etcd) before they are sent",
            self.emissions_waiting.clone(),
        );
        r.register(
            "export_queue_depth",
            "Spans waiting to be exported",
            self.export_queue_depth.clone(),
        );
        r.register(
            "span_cache_entries",
            "Object windows in the span cache",
            self.span_cache_entries.clone(),
        );
        r.register(
            "span_cache_fallback",
            "1 while etcd (--etcd-endpoints) is unreachable and the local span cache decides alone",
            self.span_cache_fallback.clone(),
        );
        r.register(
            "span_cache_etcd_requests",
            "Requests to etcd by the shared span cache, by op (reserve, link, lease, probe, republish, auth)",
            self.span_cache_etcd_requests.clone(),
        );
        r.register(
            "span_cache_etcd_errors",
            "Failed requests to etcd by the shared span cache, by reason (timeout, connect, status, decode)",
            self.span_cache_etcd_errors.clone(),
        );
        r.register(
            "span_cache_etcd_retries",
            "etcd transactions retried by the shared span cache after a timeout or an unavailable etcd (the outcome was unknown), by op",
            self.span_cache_etcd_retries.clone(),
        );
        r.register(
            "span_cache_etcd_request_seconds",
            "Latency of one request to etcd by the shared span cache",
            self.span_cache_etcd_seconds.0.clone(),
        );
        r.register(
            "span_cache_local_reservations",
            "Object spans and links reserved by this replica alone while etcd was unreachable (other replicas may emit them too)",
            self.span_cache_local_reservations.clone(),
        );
        r.register(
            "state_cache_entries",
            "Objects whose last state is kept for diffs",
            self.state_cache_entries.clone(),
        );
        r.register(
            "state_cache_hot_entries",
            "Objects whose last state is also kept parsed (the most recently written)",
            self.state_cache_hot_entries.clone(),
        );
        r.register(
            "cache_evictions",
            "Entries a bounded in-process cache forgot before they were done with, by cache (ledger, seen_events, states, span_cache) and cause (size: the cache was full; expired: older than its time to live)",
            self.cache_evictions.clone(),
        );
        r.register(
            "state_cache_bytes",
            "Bytes of last object states kept for diffs, compressed (the parsed hot states are bounded by entries)",
            self.state_cache_bytes.clone(),
        );
        r.register(
            "spans_trimmed",
            "Spans too large to export that had events dropped or values cut, by reason (batch_bytes: over --export-max-batch-bytes; receiver_limit: refused as too large)",
            self.spans_trimmed.clone(),
        );
        r.register(
            "span_events_trimmed",
            "Span events dropped from spans too large to export",
            self.span_events_trimmed.clone(),
        );
        r.register(
            "span_values_truncated",
            "Attribute and span-event values cut to --export-max-value-bytes",
            crate::span_model::VALUES_TRUNCATED.clone(),
        );
        r.register(
            "export_splits",
            "Export requests the receiver refused as too large and that were sent again in halves, by output",
            self.export_splits.clone(),
        );
        r.register(
            "export_output_queue_depth",
            "Batches waiting for one output (each output has its own queue and task)",
            self.export_output_queue_depth.clone(),
        );
    }

    pub fn source(source: Source) -> SourceLabel {
        SourceLabel { source }
    }

    /// The label of the list-watch metrics of `cluster`.
    pub fn cluster(cluster: &str) -> ClusterLabel {
        ClusterLabel {
            source: cluster.to_string(),
        }
    }

    pub fn component(outcome: ComponentSpanOutcome) -> ComponentSpanLabel {
        ComponentSpanLabel { outcome }
    }

    pub fn rejected(reason: RejectReason) -> RejectLabel {
        RejectLabel { reason }
    }

    pub fn filtered(reason: FilterReason) -> FilterLabel {
        FilterLabel { reason }
    }

    pub fn trimmed(reason: TrimReason) -> TrimLabel {
        TrimLabel { reason }
    }

    pub fn output(output: ExportOutput) -> OutputLabel {
        OutputLabel { output }
    }

    pub fn dropped(output: ExportOutput, reason: DropReason) -> DropLabel {
        DropLabel { output, reason }
    }

    /// The label of an etcd span cache metric by op.
    pub fn op(op: EtcdOp) -> OpLabel {
        OpLabel { op }
    }

    /// The label of `span_cache_etcd_errors` by reason.
    pub fn reason(reason: EtcdErrorReason) -> ReasonLabel {
        ReasonLabel { reason }
    }
}
