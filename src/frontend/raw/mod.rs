//! Raw reads: the per-object-window traces the collector exported.
//!
//! Two stores: Jaeger's query HTTP API (the frontend in production) and an
//! in-memory store (offline `kascade trace`, tests and benchmarks). Both
//! answer the same two questions: which raw traces have an object span
//! matching these tags, and what are the spans of one raw trace.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, Span, TracesData};
use serde::Deserialize;

use crate::span_model::{SPAN_KIND_OBJECT, attr};

mod jaeger;
mod memory;

pub use jaeger::JaegerHttp;
pub use memory::MemoryStore;

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

#[derive(Debug, thiserror::Error)]
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
        problem: Box<crate::client_tls::TlsError>,
    },
    #[error("cannot build the HTTP client of {url}: {message}")]
    Client { url: String, message: String },
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

    /// The spans of one raw trace; empty when the store has no such trace.
    fn get(&self, id: TraceIdBytes) -> impl Future<Output = Result<Vec<Span>, RawError>> + Send;

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

pub fn string_attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => Some(s.as_str()),
            _ => None,
        }
    })
}

pub fn int_attr(attrs: &[KeyValue], key: &str) -> Option<i64> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::IntValue(i)) => Some(*i),
            Some(any_value::Value::StringValue(s)) => s.parse().ok(),
            _ => None,
        }
    })
}

pub use crate::span_model::{kv, kv_int, nanos};

pub fn from_nanos(n: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(n)
}

pub fn trace_id_bytes(bytes: &[u8]) -> Option<TraceIdBytes> {
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
