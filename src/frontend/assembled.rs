//! One assembled trace as the cache keeps it and the Jaeger API streams it.

use bytes::Bytes;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, TracesData};

use super::assemble::Assembly;
use super::raw::TraceIdBytes;
use super::{cache_weight, merge};

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
    /// first streamed ([`encoded_chunks`]); the cache's later answers
    /// send the same bytes.
    pub(super) encoded: std::sync::OnceLock<Vec<bytes::Bytes>>,
    /// What it holds in memory once streamed, [`trace_bytes`].
    pub bytes: u64,
    /// First start and last end of its spans (ns since the epoch); `None`
    /// when it has no span.
    pub span_range: Option<(u64, u64)>,
}

impl AssembledTrace {
    /// The trace, weighed ([`trace_bytes`]).
    #[cfg(feature = "test-support")]
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
        self.bytes = trace_bytes(&self);
        self
    }

    /// Only what the Jaeger API serves: the stream, encoded now, and the
    /// time range. The object tree, cascades and rendered spans (four
    /// fifths of what a trace holds, or more) are let go.
    pub fn served_only(mut self) -> Self {
        encoded_chunks(&self);
        self.assembly = Assembly {
            nodes: Vec::new(),
            searched: 0,
            notes: std::mem::take(&mut self.assembly.notes),
            range: self.assembly.range,
        };
        self.cascades = Vec::new();
        self.resource_spans = Vec::new();
        self.bytes = trace_bytes(&self);
        self
    }
}

/// Largest message of a trace stream, in encoded bytes of spans: a quarter
/// of the 4 MiB a Go gRPC client (the query Jaeger) accepts by default.
const MAX_CHUNK_BYTES: usize = 1 << 20;

/// One assembled trace as consecutive messages of at most
/// [`MAX_CHUNK_BYTES`] of spans each (a Deployment with 1,000 Pods, 4,043
/// spans with 6,172 logs in tracing mode, is more than one message may
/// carry). Jaeger joins consecutive messages of the same trace (the chunking
/// rule of its storage API); each message starts with a span, which is how
/// Jaeger reads its trace id.
pub fn chunks(t: &AssembledTrace) -> Vec<TracesData> {
    use prost::Message as _;
    let mut out = Vec::new();
    let mut current: Vec<ResourceSpans> = Vec::new();
    let mut bytes = 0;
    for rs in &t.resource_spans {
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                let len = span.encoded_len();
                if bytes + len > MAX_CHUNK_BYTES && bytes > 0 {
                    out.push(TracesData {
                        resource_spans: std::mem::take(&mut current),
                    });
                    bytes = 0;
                }
                bytes += len;
                // Continue this resource's and scope's group, or open one.
                let same_rs = current.last().is_some_and(|last| {
                    last.resource == rs.resource && last.schema_url == rs.schema_url
                });
                if !same_rs {
                    current.push(ResourceSpans {
                        resource: rs.resource.clone(),
                        scope_spans: Vec::new(),
                        schema_url: rs.schema_url.clone(),
                    });
                }
                let group = current.last_mut().expect("pushed above");
                let same_ss = group
                    .scope_spans
                    .last()
                    .is_some_and(|last| last.scope == ss.scope && last.schema_url == ss.schema_url);
                if !same_ss {
                    group.scope_spans.push(ScopeSpans {
                        scope: ss.scope.clone(),
                        spans: Vec::new(),
                        schema_url: ss.schema_url.clone(),
                    });
                }
                group
                    .scope_spans
                    .last_mut()
                    .expect("pushed above")
                    .spans
                    .push(span.clone());
            }
        }
    }
    if !current.is_empty() {
        out.push(TracesData {
            resource_spans: current,
        });
    }
    out
}

/// [`chunks`] encoded, once per assembled trace: the cache's answers after
/// the first send these bytes instead of cloning and encoding every span.
pub fn encoded_chunks(t: &AssembledTrace) -> &[Bytes] {
    use prost::Message as _;
    t.encoded.get_or_init(|| {
        chunks(t)
            .iter()
            .map(|m| Bytes::from(m.encode_to_vec()))
            .collect()
    })
}

/// Bytes `t` holds on the heap, its stream's encoding included.
pub fn trace_bytes(t: &AssembledTrace) -> u64 {
    let assembly = &t.assembly;
    let nodes = cache_weight::vec_bytes(&assembly.nodes)
        + assembly
            .nodes
            .iter()
            .map(|n| {
                cache_weight::history_bytes(&n.history)
                    + cache_weight::vec_bytes(&n.children)
                    + n.class.as_ref().map_or(0, String::capacity)
            })
            .sum::<usize>();
    let notes = cache_weight::vec_bytes(&assembly.notes)
        + assembly.notes.iter().map(String::capacity).sum::<usize>();
    let cascades = cache_weight::vec_bytes(&t.cascades)
        + t.cascades
            .iter()
            .map(cache_weight::cascade_bytes)
            .sum::<usize>();
    let rendered = cache_weight::vec_bytes(&t.resource_spans)
        + t.resource_spans
            .iter()
            .map(cache_weight::resource_spans_bytes)
            .sum::<usize>();
    let encoded = match t.encoded.get() {
        Some(chunks) => chunks.iter().map(bytes::Bytes::len).sum::<usize>(),
        None => {
            use prost::Message as _;
            t.resource_spans
                .iter()
                .map(|r| r.encoded_len())
                .sum::<usize>()
        }
    };
    (std::mem::size_of::<AssembledTrace>() + nodes + notes + cascades + rendered + encoded) as u64
}
