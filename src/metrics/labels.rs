//! The labels of kascade's metrics: a closed set of values per label is an
//! enum, so a typo cannot start a new series; open sets (cluster names) are
//! strings.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

/// An enum whose variants are label values, each spelt as given (the
/// derive of `EncodeLabelValue` would spell the variant's name, and these
/// values are snake_case or hyphenated, as dashboards and tests know them).
macro_rules! label_values {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident => $value:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            // Not every label set is iterated.
            #[allow(dead_code)]
            pub const ALL: &[$name] = &[$($name::$variant,)+];

            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $value,)+
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                std::fmt::Write::write_str(encoder, self.as_str())
            }
        }
    };
}

label_values! {
    /// Where audit events came from.
    pub enum Source {
        Webhook => "webhook",
        /// Replayed from the durable intake at start.
        Spool => "spool",
        /// `kascade replay`.
        Replay => "replay",
    }
}

label_values! {
    /// Why audit events were rejected.
    pub enum RejectReason {
        /// Not an audit event kascade can use (or beyond its bounds).
        Malformed => "malformed",
        /// A missing or wrong bearer token.
        Unauthorized => "unauthorized",
        /// The body could not be read, decompressed or was too large.
        BadBody => "bad_body",
        /// The queue stayed full for `--admission-wait`.
        Overload => "overload",
    }
}

label_values! {
    /// What became of the spans Kubernetes components sent
    /// (`kascade collect --component-traces-listen`).
    pub enum ComponentSpanOutcome {
        /// In a request kascade accepted for forwarding.
        Received => "received",
        /// Exported to the raw store.
        Forwarded => "forwarded",
        /// Refused because the forwarding queue was full (the sender retries).
        Shed => "shed",
        /// Accepted, then given up by the export (refused, or failing past --export-retry-for).
        Dropped => "dropped",
    }
}

label_values! {
    /// Why spans too large to export were trimmed.
    pub enum TrimReason {
        /// Over `--export-max-batch-bytes`.
        BatchBytes => "batch_bytes",
        /// Refused by the receiver as too large.
        ReceiverLimit => "receiver_limit",
    }
}

label_values! {
    /// An output of the exporter.
    pub enum ExportOutput {
        Otlp => "otlp",
        OtlpJson => "otlp-json",
    }
}

label_values! {
    /// The bounded in-process caches whose evictions are counted.
    // `SpanCache`: the span cache's name everywhere else.
    #[allow(clippy::enum_variant_names)]
    pub enum Cache {
        /// The audit/watch ledger.
        Ledger => "ledger",
        /// Kubernetes Event occurrences already shown.
        SeenEvents => "seen_events",
        /// Last object states, for diffs.
        States => "states",
        /// The local span cache.
        SpanCache => "span_cache",
        /// Recent changes of objects, the candidate causes of later writes.
        Causes => "causes",
        /// Mergelogs already shown (a sender's retry is shown once).
        SeenMergelogs => "seen_mergelogs",
        /// Hashes of the values redaction replaced in recent objects, for
        /// the Events about them.
        HiddenValues => "hidden_values",
    }
}

label_values! {
    /// Why a cache entry went before it was done with.
    pub enum EvictionCause {
        /// The cache was full.
        Size => "size",
        /// Older than its time to live.
        Expired => "expired",
    }
}

label_values! {
    /// The calls of the Jaeger remote storage API that `kascade frontend` serves.
    pub enum Rpc {
        GetTraces => "GetTraces",
        GetOperations => "GetOperations",
        FindTraces => "FindTraces",
        FindTraceIDs => "FindTraceIDs",
        GetDependencies => "GetDependencies",
    }
}

/// Why an event was not turned into spans: part of the stages' contract
/// (`crate::pipeline`), spelt here as a label value.
pub(crate) use crate::flow::FilterReason;

impl EncodeLabelValue for FilterReason {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

label_values! {
    /// Why spans were not exported: the `reason` of
    /// `kascade_spans_dropped_total` (`export` re-exports it).
    pub enum DropReason {
        /// A retryable failure lasted longer than `--export-retry-for`.
        RetriesExhausted => "retries_exhausted",
        /// The receiver refused the request for good (HTTP 400, gRPC
        /// INVALID_ARGUMENT, unauthenticated, …).
        Rejected => "rejected",
        /// The receiver took the request but rejected these spans.
        PartialRejection => "partial_rejection",
        /// Even the span trimmed to its bare attributes was too large.
        TooLarge => "too_large",
    }
}

label_values! {
    /// The limit that stopped an assembly from following more links.
    pub enum AssemblyLimit {
        /// `--max-depth` levels.
        Depth => "depth",
        /// `--max-objects` objects.
        Objects => "objects",
        /// `--max-trace-bytes` of object histories.
        Bytes => "bytes",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AssemblyLimitLabel {
    pub limit: AssemblyLimit,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    pub source: Source,
}

pub(crate) use crate::flow::CascadeRole;

impl EncodeLabelValue for CascadeRole {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CascadeRoleLabel {
    pub role: CascadeRole,
}

label_values! {
    /// What became of an admission request (`--admission-listen`).
    pub enum AdmissionRequestOutcome {
        /// Held until the list-watch shows what was stored.
        Recorded => "recorded",
        /// A dry run: never stored, not shown.
        DryRun => "dry_run",
        /// CONNECT (exec, attach, port-forward): writes nothing shown.
        NotAWrite => "not_a_write",
        /// Its cluster and resource are not watched: what was stored cannot
        /// be known.
        Unwatched => "unwatched",
        /// Not an AdmissionReview kascade can read (answered 400).
        Malformed => "malformed",
        /// Held, then dropped to stay within --admission-max-pending.
        Shed => "shed",
        /// Not read: over --max-body-bytes (answered 413).
        TooLarge => "too_large",
        /// Not read: its body took longer than --body-read-timeout (408).
        TimedOut => "timed_out",
        /// Not read: --max-intake-bytes of bodies were being read and
        /// decoded (answered 429).
        Busy => "busy",
    }
}

label_values! {
    /// What became of an admitted write.
    pub enum AdmittedWriteOutcome {
        /// The list-watch showed the version it stored.
        Persisted => "persisted",
        /// An update that changed nothing: nothing stored.
        NoChange => "no_change",
        /// Never shown stored within --admission-persist-wait.
        NotPersisted => "not_persisted",
        /// Not stored: another write changed the object first.
        Conflict => "conflict",
        /// Not stored: the object was deleted first.
        Gone => "gone",
        /// An earlier admission of a write the apiserver retried.
        Attempt => "attempt",
    }
}

/// A cluster's admission requests, by outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionRequestLabel {
    pub cluster: String,
    pub outcome: AdmissionRequestOutcome,
}

/// A cluster's admitted writes, by outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmittedWriteLabel {
    pub cluster: String,
    pub outcome: AdmittedWriteOutcome,
}

/// The `source` of the list-watch metrics: a watched cluster's name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabel {
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ComponentSpanLabel {
    pub outcome: ComponentSpanOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabel {
    pub reason: RejectReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FilterLabel {
    pub reason: FilterReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TrimLabel {
    pub reason: TrimReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutputLabel {
    pub output: ExportOutput,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabel {
    pub output: ExportOutput,
    pub reason: DropReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheEvictionLabel {
    pub cache: Cache,
    pub cause: EvictionCause,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabel {
    pub rpc: Rpc,
}

label_values! {
    /// What a request to etcd was for (the `op` of
    /// `kascade_span_cache_etcd_requests_total` and `_retries_total`).
    pub enum EtcdOp {
        /// The shared span cache reserving an object window.
        Reserve => "reserve",
        /// Reserving a link.
        Link => "link",
        /// A lease for reservations.
        Lease => "lease",
        /// Checking whether etcd is back, while falling back.
        Probe => "probe",
        /// Reserving again what was emitted while etcd was away.
        Republish => "republish",
        /// Logging in (user and password).
        Auth => "auth",
        /// The watcher role election: a lease grant or a contest.
        Role => "role",
        /// A watch opened on the role key.
        Watch => "watch",
        /// Lease renewals sent.
        Keepalive => "keepalive",
    }
}

label_values! {
    /// Why a request to etcd failed (the `reason` of
    /// `kascade_span_cache_etcd_errors_total`).
    pub enum EtcdErrorReason {
        Timeout => "timeout",
        Connect => "connect",
        Status => "status",
        Decode => "decode",
        WatchCancelled => "watch_cancelled",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    pub op: EtcdOp,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: EtcdErrorReason,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{FrontendMetrics, Metrics};
    use prometheus_client::registry::Registry;

    /// The label values as /metrics shows them: dashboards, alerts, the
    /// e2e scripts and docs/metrics.md name them.
    #[test]
    fn label_values_are_spelt_as_before_they_were_enums() {
        let m = Metrics::default();
        let f = FrontendMetrics::default();
        let mut registry = Registry::default();
        m.register(&mut registry);
        f.register(&mut registry);
        for s in Source::ALL {
            m.events_received.get_or_create(&Metrics::source(*s)).inc();
        }
        for r in RejectReason::ALL {
            m.events_rejected
                .get_or_create(&Metrics::rejected(*r))
                .inc();
        }
        for r in [FilterReason::DryRun, FilterReason::EventTooOld] {
            m.events_filtered.get_or_create(&Metrics::filtered(r)).inc();
        }
        for r in TrimReason::ALL {
            m.spans_trimmed.get_or_create(&Metrics::trimmed(*r)).inc();
        }
        for o in ExportOutput::ALL {
            m.spans_exported.get_or_create(&Metrics::output(*o)).inc();
            for r in DropReason::ALL {
                m.spans_dropped
                    .get_or_create(&Metrics::dropped(*o, *r))
                    .inc();
            }
        }
        for cache in Cache::ALL {
            for cause in EvictionCause::ALL {
                m.cache_evictions
                    .get_or_create(&CacheEvictionLabel {
                        cache: *cache,
                        cause: *cause,
                    })
                    .inc();
            }
        }
        m.watch_errors
            .get_or_create(&Metrics::cluster("prod-eu"))
            .inc();
        for rpc in Rpc::ALL {
            f.requests.get_or_create(&FrontendMetrics::rpc(*rpc)).inc();
        }
        for op in EtcdOp::ALL {
            m.span_cache_etcd_requests
                .get_or_create(&Metrics::op(*op))
                .inc();
        }
        for r in EtcdErrorReason::ALL {
            m.span_cache_etcd_errors
                .get_or_create(&Metrics::reason(*r))
                .inc();
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let mut expected = vec![
            r#"kascade_audit_events_received_total{source="webhook"} 1"#.to_string(),
            r#"kascade_audit_events_received_total{source="spool"} 1"#.to_string(),
            r#"kascade_audit_events_received_total{source="replay"} 1"#.to_string(),
            r#"kascade_audit_events_filtered_total{reason="dry_run"} 1"#.to_string(),
            r#"kascade_audit_events_filtered_total{reason="event-too-old"} 1"#.to_string(),
            r#"kascade_watch_errors_total{source="prod-eu"} 1"#.to_string(),
        ];
        for r in ["malformed", "unauthorized", "bad_body", "overload"] {
            expected.push(format!(
                r#"kascade_audit_events_rejected_total{{reason="{r}"}} 1"#
            ));
        }
        for r in ["batch_bytes", "receiver_limit"] {
            expected.push(format!(r#"kascade_spans_trimmed_total{{reason="{r}"}} 1"#));
        }
        for o in ["otlp", "otlp-json"] {
            expected.push(format!(r#"kascade_spans_exported_total{{output="{o}"}} 1"#));
            for r in [
                "retries_exhausted",
                "rejected",
                "partial_rejection",
                "too_large",
            ] {
                expected.push(format!(
                    r#"kascade_spans_dropped_total{{output="{o}",reason="{r}"}} 1"#
                ));
            }
        }
        for c in [
            "ledger",
            "seen_events",
            "states",
            "span_cache",
            "causes",
            "seen_mergelogs",
            "hidden_values",
        ] {
            for cause in ["size", "expired"] {
                expected.push(format!(
                    r#"kascade_cache_evictions_total{{cache="{c}",cause="{cause}"}} 1"#
                ));
            }
        }
        for rpc in [
            "GetTraces",
            "GetOperations",
            "FindTraces",
            "FindTraceIDs",
            "GetDependencies",
        ] {
            expected.push(format!(
                r#"kascade_frontend_requests_total{{rpc="{rpc}"}} 1"#
            ));
        }
        for op in [
            "reserve",
            "link",
            "lease",
            "probe",
            "republish",
            "auth",
            "role",
            "watch",
            "keepalive",
        ] {
            expected.push(format!(
                r#"kascade_span_cache_etcd_requests_total{{op="{op}"}} 1"#
            ));
        }
        for r in ["timeout", "connect", "status", "decode", "watch_cancelled"] {
            expected.push(format!(
                r#"kascade_span_cache_etcd_errors_total{{reason="{r}"}} 1"#
            ));
        }
        for line in &expected {
            assert!(text.contains(line.as_str()), "{line} missing in:\n{text}");
        }
        // Every series above is one the test set: no value spelt twice.
        let series = text.lines().filter(|l| l.ends_with(" 1")).count();
        assert_eq!(series, expected.len(), "{text}");
    }
}
