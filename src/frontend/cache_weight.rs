//! What the parts of an assembled trace hold in memory (the whole is
//! summed by `assembled::trace_bytes`), so the frontend's trace cache
//! can be bounded in bytes (`--cache-bytes`) rather than in traces: a
//! 1,000-Pod Deployment's trace holds about 100 MB whole and 20 MB as the
//! server keeps it (`AssembledTrace::served_only`), one ConfigMap's a few
//! hundred KB or less.
//!
//! The count walks the trace's heap: every string and vector by capacity,
//! plus the encoding its stream keeps once it has been sent (about the
//! rendered spans' encoded length). It leaves out the allocator's rounding
//! (tested: within a fifth of what jemalloc counts for the fixtures' traces
//! in every display mode, `tests/frontend_cache.rs`).

use std::mem::size_of;

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, Span};

use super::merge::ObjectHistory;
use crate::analysis::cascade::{Cascade, Completion};
use crate::flow::{Cause, ChangeRecord};
use crate::model::ObjectRef;

pub(super) fn vec_bytes<T>(v: &Vec<T>) -> usize {
    v.capacity() * size_of::<T>()
}

fn object_bytes(o: &ObjectRef) -> usize {
    o.cluster.capacity()
        + o.group.capacity()
        + o.resource.capacity()
        + o.namespace.capacity()
        + o.name.capacity()
}

/// Bytes one object's merged history holds (what `--max-trace-bytes` bounds).
pub fn history_bytes(h: &ObjectHistory) -> usize {
    object_bytes(&h.object)
        + h.uid.capacity()
        + key_values_bytes(&h.attributes)
        + vec_bytes(&h.windows)
        + vec_bytes(&h.entries)
        + h.entries.iter().map(|e| span_bytes(&e.span)).sum::<usize>()
        + vec_bytes(&h.links)
        + h.links
            .iter()
            .map(|l| object_bytes(&l.other) + l.class.capacity())
            .sum::<usize>()
}

pub(super) fn resource_spans_bytes(r: &ResourceSpans) -> usize {
    let resource = r.resource.as_ref().map_or(0, |res| {
        key_values_bytes(&res.attributes) + vec_bytes(&res.entity_refs)
    });
    resource
        + r.schema_url.capacity()
        + vec_bytes(&r.scope_spans)
        + r.scope_spans
            .iter()
            .map(|s| {
                s.schema_url.capacity()
                    + s.scope.as_ref().map_or(0, |sc| {
                        sc.name.capacity()
                            + sc.version.capacity()
                            + key_values_bytes(&sc.attributes)
                    })
                    + vec_bytes(&s.spans)
                    + s.spans.iter().map(span_bytes).sum::<usize>()
            })
            .sum::<usize>()
}

fn span_bytes(s: &Span) -> usize {
    s.trace_id.capacity()
        + s.span_id.capacity()
        + s.parent_span_id.capacity()
        + s.trace_state.capacity()
        + s.name.capacity()
        + key_values_bytes(&s.attributes)
        + vec_bytes(&s.events)
        + s.events
            .iter()
            .map(|e| e.name.capacity() + key_values_bytes(&e.attributes))
            .sum::<usize>()
        + vec_bytes(&s.links)
        + s.links
            .iter()
            .map(|l| {
                l.trace_id.capacity()
                    + l.span_id.capacity()
                    + l.trace_state.capacity()
                    + key_values_bytes(&l.attributes)
            })
            .sum::<usize>()
        + s.status.as_ref().map_or(0, |st| st.message.capacity())
}

fn key_values_bytes(kvs: &Vec<KeyValue>) -> usize {
    vec_bytes(kvs)
        + kvs
            .iter()
            .map(|kv| kv.key.capacity() + kv.value.as_ref().map_or(0, any_value_bytes))
            .sum::<usize>()
}

fn any_value_bytes(v: &AnyValue) -> usize {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => s.capacity(),
        Some(any_value::Value::BytesValue(b)) => b.capacity(),
        Some(any_value::Value::ArrayValue(a)) => {
            vec_bytes(&a.values) + a.values.iter().map(any_value_bytes).sum::<usize>()
        }
        Some(any_value::Value::KvlistValue(l)) => key_values_bytes(&l.values),
        _ => 0,
    }
}

pub(super) fn cascade_bytes(c: &Cascade) -> usize {
    let waiting = match &c.completion {
        Completion::Complete { .. } => 0,
        Completion::Waiting(w) | Completion::NotKnown(w) => {
            vec_bytes(w)
                + w.iter()
                    .map(|w| object_bytes(&w.object) + w.status.capacity() + w.message.capacity())
                    .sum::<usize>()
        }
    };
    vec_bytes(&c.changes)
        + c.changes.iter().map(change_bytes).sum::<usize>()
        + vec_bytes(&c.parent)
        + vec_bytes(&c.children)
        + c.children.iter().map(vec_bytes).sum::<usize>()
        + c.missing_cause.as_ref().map_or(0, cause_bytes)
        + waiting
        + vec_bytes(&c.after_sibling)
        + vec_bytes(&c.critical_path)
}

fn change_bytes(r: &ChangeRecord) -> usize {
    // `old`/`new` stay empty in the frontend (its sink wants no objects).
    object_bytes(&r.object)
        + r.uid.capacity()
        + r.user.capacity()
        + r.verb.capacity()
        + r.subresource.capacity()
        + r.readiness
            .as_ref()
            .map_or(0, |x| x.status.capacity() + x.message.capacity())
        + r.cause.as_ref().map_or(0, cause_bytes)
        + r.failure.as_ref().map_or(0, String::capacity)
        + vec_bytes(&r.related)
        + r.related
            .iter()
            .map(|x| object_bytes(&x.object) + x.class.capacity())
            .sum::<usize>()
}

fn cause_bytes(c: &Cause) -> usize {
    object_bytes(&c.object) + c.name.capacity() + c.edge.capacity() + c.rule.capacity()
}
