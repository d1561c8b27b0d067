//! One assembled trace as the cache keeps it and the Jaeger API streams it.

use opentelemetry_proto::tonic::trace::v1::ResourceSpans;

use super::assemble::Assembly;
use super::raw::TraceIdBytes;
use super::{cache_weight, merge, service};

/// One assembled trace, ready to stream.
#[derive(Debug)]
pub struct AssembledTrace {
    pub id: TraceIdBytes,
    pub assembly: Assembly,
    /// Display mode `cascade`: the cascades the assembled objects took
    /// part in (empty in the other modes).
    pub cascades: Vec<crate::analysis::cascade::Cascade>,
    pub resource_spans: Vec<ResourceSpans>,
    /// `resource_spans` as the messages of a trace stream, encoded when
    /// first streamed (`service::encoded_chunks`); the cache's later answers
    /// send the same bytes.
    pub(super) encoded: std::sync::OnceLock<Vec<bytes::Bytes>>,
    /// What it holds in memory once streamed, [`cache_weight::trace_bytes`].
    pub bytes: u64,
    /// First start and last end of its spans (ns since the epoch); `None`
    /// when it has no span.
    pub span_range: Option<(u64, u64)>,
}

impl AssembledTrace {
    /// The trace, weighed ([`cache_weight::trace_bytes`]).
    pub fn new(
        id: TraceIdBytes,
        assembly: Assembly,
        cascades: Vec<crate::analysis::cascade::Cascade>,
        resource_spans: Vec<ResourceSpans>,
    ) -> Self {
        Self::unweighed(id, assembly, cascades, resource_spans).weighed()
    }

    /// The trace with `bytes` 0: weighed once as it is kept
    /// ([`Self::weighed`] or [`Self::served_only`]), a walk over every
    /// string of a wide trace spared.
    pub(super) fn unweighed(
        id: TraceIdBytes,
        assembly: Assembly,
        cascades: Vec<crate::analysis::cascade::Cascade>,
        resource_spans: Vec<ResourceSpans>,
    ) -> Self {
        let spans = resource_spans
            .iter()
            .flat_map(|rs| &rs.scope_spans)
            .flat_map(|ss| &ss.spans);
        let span_range = spans.fold(None, |acc, sp| {
            merge::widen(acc, (sp.start_time_unix_nano, sp.end_time_unix_nano))
        });
        Self {
            id,
            assembly,
            cascades,
            resource_spans,
            encoded: std::sync::OnceLock::new(),
            bytes: 0,
            span_range,
        }
    }

    pub(super) fn weighed(mut self) -> Self {
        self.bytes = cache_weight::trace_bytes(&self);
        self
    }

    /// Only what the Jaeger API serves: the stream, encoded now, and the
    /// time range. The object tree, cascades and rendered spans (four
    /// fifths of what a trace holds, or more) are let go.
    pub fn served_only(mut self) -> Self {
        service::encoded_chunks(&self);
        self.assembly = Assembly {
            nodes: Vec::new(),
            searched: 0,
            notes: std::mem::take(&mut self.assembly.notes),
            range: self.assembly.range,
        };
        self.cascades = Vec::new();
        self.resource_spans = Vec::new();
        self.bytes = cache_weight::trace_bytes(&self);
        self
    }
}
