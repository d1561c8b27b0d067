//! Raw reads: the per-object-window traces the collector exported.
//!
//! Three stores: the raw Jaeger's remote-storage gRPC API (many traces per
//! round trip) or its query HTTP API (one GET per trace) in production
//! ([`JaegerStore`] is either), and an in-memory store (offline `kascade
//! trace`, tests and benchmarks). All answer the same two questions: which
//! raw traces have an object span matching these tags, and what are the
//! spans of these raw traces.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, Span, TracesData};
use serde::Deserialize;

use crate::span_model::{SPAN_KIND_OBJECT, attr};

mod grpc;
mod jaeger;
#[cfg(feature = "test-support")]
mod memory;
mod spill;

pub use grpc::JaegerGrpc;
pub use jaeger::JaegerHttp;
#[cfg(feature = "test-support")]
pub use jaeger::decode_v3_trace;
#[cfg(feature = "test-support")]
pub use memory::MemoryStore;
pub(crate) use spill::{SpillStore, SpillWriter};

pub type TraceIdBytes = [u8; 16];

/// (parent resource, child resource) → relations seen.
pub type RelationCounts = std::collections::BTreeMap<(String, String), u64>;

/// Adds the child links among one raw trace's spans (its object's resource
/// → the linked object's resource); `attr_of(span, key)` reads a string
/// attribute.
fn count_child_links<T>(
    spans: &[T],
    attr_of: impl Fn(&T, &str) -> Option<String>,
    counts: &mut RelationCounts,
) {
    let kind = |s: &T| attr_of(s, attr::SPAN_KIND);
    let Some(resource) = spans
        .iter()
        .find(|s| kind(s).as_deref() == Some(SPAN_KIND_OBJECT))
        .and_then(|s| attr_of(s, attr::RESOURCE))
    else {
        return;
    };
    for s in spans {
        if kind(s).as_deref() == Some(crate::span_model::SPAN_KIND_LINK)
            && attr_of(s, attr::LINK_ROLE).as_deref() == Some("child")
            && let Some(child) = attr_of(s, &format!("link.{}", attr::RESOURCE))
        {
            *counts.entry((resource.clone(), child)).or_default() += 1;
        }
    }
}

/// A span as an offline store's search reads it: its times and its string
/// attributes.
trait SearchedSpan {
    fn start(&self) -> u64;
    fn end(&self) -> u64;
    fn tag(&self, key: &str) -> Option<&str>;
}

impl SearchedSpan for Span {
    fn start(&self) -> u64 {
        self.start_time_unix_nano
    }

    fn end(&self) -> u64 {
        self.end_time_unix_nano
    }

    fn tag(&self, key: &str) -> Option<&str> {
        string_attr(&self.attributes, key)
    }
}

/// `(group, resource)` of every object span among `spans`.
fn resources_of<'a, T: SearchedSpan + 'a>(
    spans: impl Iterator<Item = &'a T>,
) -> std::collections::BTreeSet<(String, String)> {
    spans
        .filter(|s| s.tag(attr::SPAN_KIND) == Some(SPAN_KIND_OBJECT))
        .filter_map(|s| {
            let resource = s.tag(attr::RESOURCE)?;
            let group = s.tag(attr::GROUP).unwrap_or("");
            Some((group.to_string(), resource.to_string()))
        })
        .collect()
}

/// The namespaces of the object spans among `spans` of `resource` (in
/// `group` when given) named `name`.
fn namespaces_of<'a, T: SearchedSpan + 'a>(
    spans: impl Iterator<Item = &'a T>,
    resource: &str,
    group: Option<&str>,
    name: &str,
) -> std::collections::BTreeSet<String> {
    spans
        .filter(|s| s.tag(attr::SPAN_KIND) == Some(SPAN_KIND_OBJECT))
        .filter(|s| {
            s.tag(attr::RESOURCE) == Some(resource)
                && s.tag(attr::NAME) == Some(name)
                && group.is_none_or(|g| s.tag(attr::GROUP).unwrap_or("") == g)
        })
        .map(|s| s.tag(attr::NAMESPACE).unwrap_or("").to_string())
        .collect()
}

/// Whether one raw trace matches an offline store's search for `tags`
/// within `from..=to` (ns): the start of its object span (the order of the
/// answer) if it does.
fn search_match<T: SearchedSpan>(
    spans: &[T],
    tags: &[(String, String)],
    from: u64,
    to: u64,
) -> Option<u64> {
    let obj = spans
        .iter()
        .position(|s| s.tag(attr::SPAN_KIND) == Some(SPAN_KIND_OBJECT))?;
    let (obj_start, obj_end) = (spans[obj].start(), spans[obj].end());
    // As Jaeger's search: some span of the trace carries every tag and
    // starts within the range (object tags are on the object span,
    // `cascade.*` and `cpid` on audit and watch spans), so `find_all` can
    // split a range. Unlike Jaeger, the object span matches when its window
    // overlaps the range: offline searches name objects by the windows they
    // had.
    let overlaps = obj_start <= to && obj_end >= from;
    let matches = spans.iter().enumerate().any(|(i, s)| {
        let within = if i == obj {
            overlaps
        } else {
            (from..=to).contains(&s.start())
        };
        within && tags.iter().all(|(k, v)| s.tag(k) == Some(v.as_str()))
    });
    matches.then_some(obj_start)
}

/// Tags of the spans that record a child link (the service graph's input).
fn child_link_tags() -> [(String, String); 2] {
    [
        (
            attr::SPAN_KIND.to_string(),
            crate::span_model::SPAN_KIND_LINK.to_string(),
        ),
        (attr::LINK_ROLE.to_string(), "child".to_string()),
    ]
}

/// Tags of object spans (which name the cluster).
fn object_span_tags() -> [(String, String); 1] {
    [(attr::SPAN_KIND.to_string(), SPAN_KIND_OBJECT.to_string())]
}

/// The clusters named by the object spans among `spans` (OTLP spans).
fn object_clusters(spans: &[Span]) -> impl Iterator<Item = String> + '_ {
    spans
        .iter()
        .filter(|s| string_attr(&s.attributes, attr::SPAN_KIND) == Some(SPAN_KIND_OBJECT))
        .filter_map(|s| string_attr(&s.attributes, attr::CLUSTER))
        .map(str::to_string)
}

/// Runs `reads` (each a map of raw traces) at most `concurrency` at a time
/// and joins their answers; the first failure fails all.
async fn gather<F>(
    reads: Vec<F>,
    concurrency: usize,
    capacity: usize,
) -> Result<HashMap<TraceIdBytes, Vec<Span>>, RawError>
where
    F: Future<Output = Result<HashMap<TraceIdBytes, Vec<Span>>, RawError>>,
{
    use futures::StreamExt as _;
    let answers = futures::stream::iter(reads)
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    let mut out = HashMap::with_capacity(capacity);
    for a in answers {
        out.extend(a?);
    }
    Ok(out)
}

/// A closed time interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeRange {
    pub start: SystemTime,
    pub end: SystemTime,
}

impl TimeRange {
    pub fn new(start: SystemTime, end: SystemTime) -> Self {
        Self { start, end }
    }
}

/// What [`find_all`] found: distinct ids, in order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FoundAll {
    pub ids: Vec<TraceIdBytes>,
    /// Whether every matching trace is among `ids`: false when more than
    /// the `max` asked for matched or the searches allowed ran out.
    pub complete: bool,
}

/// Ranges narrower than this are not split: an apiserver does not write a
/// search's worth of object windows (500) within a millisecond, and each
/// halving is another search (copies of one object replayed at the same
/// instants would otherwise be bisected down to Jaeger's microseconds).
const MIN_SPLIT: Duration = Duration::from_millis(1);

/// Every raw trace [`RawStore::find`] would give for `tags` in `range`
/// without a limit, up to `max`, searched `page` at a time. Jaeger's
/// search returns at most `limit` ids and has no offset, so a range whose
/// search finds more than a page (each search asks for one more) is split
/// in halves and each half searched again; a range whose search finds a
/// page or fewer holds no more. Halves share their middle instant (the
/// stores' bounds are inclusive), so a trace matching the whole range
/// matches a half; a range too narrow to split is searched once more for
/// up to `max`. At most `2 × ⌈max / page⌉ + 8` searches.
pub async fn find_all<S: RawStore>(
    store: &S,
    tags: &[(String, String)],
    range: TimeRange,
    page: usize,
    max: usize,
) -> Result<FoundAll, RawError> {
    let page = page.max(1);
    let mut searches = 2 * max.div_ceil(page) + 8;
    let mut ids = std::collections::BTreeSet::new();
    let mut complete = true;
    let mut ranges = vec![range];
    while let Some(r) = ranges.pop() {
        if ids.len() >= max || searches == 0 {
            complete = false;
            break;
        }
        searches -= 1;
        // One more than a page: a range holding exactly a page is whole.
        let found = store.find(tags, r, page + 1).await?;
        let full = found.len() > page;
        ids.extend(found);
        if !full {
            continue;
        }
        match r.end.duration_since(r.start) {
            Ok(width) if width >= MIN_SPLIT => {
                let middle = r.start + width / 2;
                ranges.push(TimeRange::new(middle, r.end));
                ranges.push(TimeRange::new(r.start, middle));
            }
            // Too narrow to split (a controller creating several Pods
            // within a millisecond): searched once for all it may hold.
            _ if searches > 0 => {
                searches -= 1;
                let left = max.saturating_sub(ids.len());
                let found = store.find(tags, r, page + left + 1).await?;
                if found.len() > page + left {
                    complete = false;
                }
                ids.extend(found);
            }
            _ => complete = false,
        }
    }
    if ids.len() > max {
        complete = false;
    }
    Ok(FoundAll {
        ids: ids.into_iter().take(max).collect(),
        complete,
    })
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum RawError {
    #[error("raw Jaeger at {url} is unreachable: {message}")]
    Unreachable { url: String, message: String },
    #[error("raw Jaeger at {url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("raw Jaeger at {url} sent a response kascade cannot read: {message}")]
    Decode { url: String, message: String },
    /// The TLS problem is part of the message: raw-read errors are logged
    /// and shown in the UI on their own, not as an error chain.
    #[error("TLS for the raw Jaeger at {url}: {problem}")]
    Tls {
        url: String,
        problem: std::sync::Arc<crate::client_tls::TlsError>,
    },
    #[error("raw Jaeger at {url} answered {method} with {code}: {message}")]
    Grpc {
        url: String,
        method: String,
        code: String,
        message: String,
    },
    #[error("cannot build the client of {url}: {message}")]
    Client { url: String, message: String },
    /// Spans an offline command spilled to a temporary file could not be
    /// read back.
    #[error("cannot read back the spans spilled to a temporary file: {message}")]
    Spill { message: String },
}

/// Where raw object-window traces are read from.
pub trait RawStore: Send + Sync + 'static {
    /// Ids of raw traces with a span that carries every `(key, value)` tag
    /// (object tags: the object span; `cascade.root.span_id`: the writes of
    /// a cascade) and whose window overlaps `range`; at most `limit`.
    fn find(
        &self,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<TraceIdBytes>, RawError>> + Send;

    /// Ids of the traces a Kubernetes component exported itself (`service`:
    /// `apiserver`, `kubelet`) with a span that carries every `(key, value)`
    /// tag and starts within `range`; at most `limit`. A store that holds no
    /// component traces finds none.
    fn find_component(
        &self,
        service: &str,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<TraceIdBytes>, RawError>> + Send {
        let _ = (service, tags, range, limit);
        async { Ok(Vec::new()) }
    }

    /// The spans of one raw trace; empty when the store has no such trace.
    fn get(&self, id: TraceIdBytes) -> impl Future<Output = Result<Vec<Span>, RawError>> + Send;

    /// The spans of many raw traces, by id (an id the store does not have
    /// is absent), with at most `concurrency` requests in flight. One
    /// `get` per id unless the store reads many in one round trip.
    fn get_many(
        &self,
        ids: &[TraceIdBytes],
        concurrency: usize,
    ) -> impl Future<Output = Result<HashMap<TraceIdBytes, Vec<Span>>, RawError>> + Send {
        // Collected first: a stream of futures made by a closure over
        // borrowed ids would not be `Send` (rust-lang/rust#102211).
        let reads: Vec<_> = ids
            .iter()
            .map(|&id| async move {
                let spans = self.get(id).await?;
                Ok(HashMap::from_iter(
                    (!spans.is_empty()).then_some((id, spans)),
                ))
            })
            .collect();
        gather(reads, concurrency, ids.len())
    }

    /// Relations recorded in up to `limit` raw traces of `range`, counted
    /// by (resource of the parent object, resource of the child object):
    /// the service graph of the assembled traces, whose services are
    /// resources.
    fn relation_counts(
        &self,
        range: TimeRange,
        limit: usize,
    ) -> impl Future<Output = Result<RelationCounts, RawError>> + Send;

    /// Clusters named by the object spans of the (at most `limit`) most
    /// recent raw traces in `range`.
    fn clusters(
        &self,
        range: TimeRange,
        limit: usize,
    ) -> impl Future<Output = Result<std::collections::BTreeSet<String>, RawError>> + Send;

    /// A short description for logs and errors.
    fn describe(&self) -> String;
}

/// The raw Jaeger, over whichever API the frontend was given
/// (`--jaeger-grpc-url`, else `--jaeger-url`).
pub enum JaegerStore {
    Grpc(JaegerGrpc),
    Http(JaegerHttp),
}

impl RawStore for JaegerStore {
    async fn find(
        &self,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<Vec<TraceIdBytes>, RawError> {
        match self {
            Self::Grpc(s) => s.find(tags, range, limit).await,
            Self::Http(s) => s.find(tags, range, limit).await,
        }
    }

    async fn find_component(
        &self,
        service: &str,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<Vec<TraceIdBytes>, RawError> {
        match self {
            Self::Grpc(s) => s.find_component(service, tags, range, limit).await,
            Self::Http(s) => s.find_component(service, tags, range, limit).await,
        }
    }

    async fn get(&self, id: TraceIdBytes) -> Result<Vec<Span>, RawError> {
        match self {
            Self::Grpc(s) => s.get(id).await,
            Self::Http(s) => s.get(id).await,
        }
    }

    async fn get_many(
        &self,
        ids: &[TraceIdBytes],
        concurrency: usize,
    ) -> Result<HashMap<TraceIdBytes, Vec<Span>>, RawError> {
        match self {
            Self::Grpc(s) => s.get_many(ids, concurrency).await,
            Self::Http(s) => s.get_many(ids, concurrency).await,
        }
    }

    async fn relation_counts(
        &self,
        range: TimeRange,
        limit: usize,
    ) -> Result<RelationCounts, RawError> {
        match self {
            Self::Grpc(s) => s.relation_counts(range, limit).await,
            Self::Http(s) => s.relation_counts(range, limit).await,
        }
    }

    async fn clusters(
        &self,
        range: TimeRange,
        limit: usize,
    ) -> Result<std::collections::BTreeSet<String>, RawError> {
        match self {
            Self::Grpc(s) => s.clusters(range, limit).await,
            Self::Http(s) => s.clusters(range, limit).await,
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Grpc(s) => s.describe(),
            Self::Http(s) => s.describe(),
        }
    }
}

pub fn string_attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => Some(s.as_str()),
            _ => None,
        }
    })
}

pub(crate) fn int_attr(attrs: &[KeyValue], key: &str) -> Option<i64> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::IntValue(i)) => Some(*i),
            Some(any_value::Value::StringValue(s)) => s.parse().ok(),
            _ => None,
        }
    })
}

pub use crate::span_model::nanos;
pub(crate) use crate::span_model::{kv, kv_int};

pub fn from_nanos(n: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(n)
}

pub(crate) fn trace_id_bytes(bytes: &[u8]) -> Option<TraceIdBytes> {
    bytes.try_into().ok()
}

pub fn spans_of(data: impl IntoIterator<Item = ResourceSpans>) -> Vec<Span> {
    data.into_iter()
        .flat_map(|rs| rs.scope_spans)
        .flat_map(|ss| ss.spans)
        .collect()
}

/// Jaeger prints trace ids without leading zeros.
pub fn parse_hex_trace_id(s: &str) -> Option<TraceIdBytes> {
    if s.is_empty() || s.len() > 32 {
        return None;
    }
    u128::from_str_radix(s, 16).ok().map(|v| v.to_be_bytes())
}

pub fn hex_trace_id(id: &TraceIdBytes) -> String {
    format!("{:032x}", u128::from_be_bytes(*id))
}
