//! Shrinking one span that is too large to export: a span with a hundred
//! diffs of large values can exceed the request size a receiver takes even
//! after every value was capped. It is trimmed — span events dropped,
//! then attribute values shortened, then links dropped — and marked, rather
//! than retried until it is dropped whole.

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

use crate::span_model::{self, EncodedSpan, kv_int};

/// Span events dropped from a trimmed span (also in the span's standard
/// `dropped_events_count`).
pub(crate) const TRIMMED_EVENTS_DROPPED: &str = "kascade.trimmed.events_dropped";
/// Encoded size in bytes of a trimmed span before trimming.
pub(crate) const TRIMMED_FROM_BYTES: &str = "kascade.trimmed.from_bytes";
/// Attribute values are not cut shorter than this while trimming.
const MIN_VALUE_BYTES: usize = 256;

/// What trimming removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Trimmed {
    pub events_dropped: usize,
    pub values_cut: usize,
    pub links_dropped: usize,
    pub from_bytes: usize,
}

/// `span` shrunk so that its encoding takes at most `max_len` bytes, or
/// `None` when even the bare span (no events, short values, no links) is
/// larger. Events are kept in order, each one that still fits.
pub(crate) fn trim_span(span: &EncodedSpan, max_len: usize) -> Option<(EncodedSpan, Trimmed)> {
    let from_bytes = span.0.len();
    let mut s = Span::decode(span.0.as_ref()).ok()?;
    let events = std::mem::take(&mut s.events);
    // The markers first, with the largest values they can take, so the room
    // they need is counted before events are chosen.
    s.attributes
        .push(kv_int(TRIMMED_EVENTS_DROPPED, events.len() as i64));
    s.attributes
        .push(kv_int(TRIMMED_FROM_BYTES, from_bytes as i64));
    let mut room = max_len.saturating_sub(s.encoded_len());
    let mut kept = Vec::with_capacity(events.len());
    let mut dropped = 0usize;
    for e in events {
        // Span.events is field 11: a one-byte key, the length, the event.
        let len = e.encoded_len();
        let framed = 1 + prost::encoding::encoded_len_varint(len as u64) + len;
        if framed <= room {
            room -= framed;
            kept.push(e);
        } else {
            dropped += 1;
        }
    }
    s.events = kept;
    s.dropped_events_count += dropped as u32;
    set_int(&mut s.attributes, TRIMMED_EVENTS_DROPPED, dropped as i64);

    // Still too large without events: values, longest first, then links.
    let mut cut_keys = std::collections::BTreeSet::new();
    let mut cap = s
        .attributes
        .iter()
        .filter_map(string_len)
        .max()
        .unwrap_or(0)
        / 2;
    while s.encoded_len() > max_len && cap >= MIN_VALUE_BYTES {
        cut_keys.extend(cut_values(&mut s.attributes, cap));
        cap /= 2;
    }
    let mut links_dropped = 0;
    if s.encoded_len() > max_len {
        links_dropped = s.links.len();
        s.dropped_links_count += links_dropped as u32;
        s.links.clear();
    }
    if s.encoded_len() > max_len {
        return None;
    }
    Some((
        EncodedSpan(s.encode_to_vec().into()),
        Trimmed {
            events_dropped: dropped,
            values_cut: cut_keys.len(),
            links_dropped,
            from_bytes,
        },
    ))
}

fn string_len(kv: &KeyValue) -> Option<usize> {
    match kv.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.len()),
        _ => None,
    }
}

fn set_int(attrs: &mut [KeyValue], key: &str, v: i64) {
    if let Some(kv) = attrs.iter_mut().find(|kv| kv.key == key) {
        kv.value = Some(AnyValue {
            value: Some(any_value::Value::IntValue(v)),
        });
    }
}

/// Cuts every string attribute longer than `cap`, marking each as the span
/// writer does (`<key>.truncated_from`, the original length kept when the
/// value was already cut). Returns the keys cut.
fn cut_values(attrs: &mut Vec<KeyValue>, cap: usize) -> Vec<String> {
    let mut markers = Vec::new();
    for kv in attrs.iter_mut() {
        let Some(AnyValue {
            value: Some(any_value::Value::StringValue(v)),
        }) = kv.value.as_mut()
        else {
            continue;
        };
        if v.len() <= cap {
            continue;
        }
        let original = v.len();
        let keep = span_model::truncate_str(v, cap).len();
        v.truncate(keep);
        markers.push((kv.key.clone(), original));
    }
    for (key, original) in &markers {
        let marker = span_model::truncated_from_key(key);
        if !attrs.iter().any(|kv| kv.key == marker) {
            attrs.push(kv_int(&marker, *original as i64));
        }
    }
    markers.into_iter().map(|(k, _)| k).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ObjectRef, ObjectWindow};
    use crate::span_model::{AuditWrite, EVENT_DIFF};
    use std::time::{Duration, UNIX_EPOCH};

    fn int_attr(attrs: &[KeyValue], key: &str) -> Option<i64> {
        attrs.iter().find(|kv| kv.key == key).and_then(|kv| {
            match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::IntValue(i) => Some(*i),
                _ => None,
            }
        })
    }

    /// An audit span as the processor writes it for a write that changed
    /// `changes` keys of a ConfigMap, each value `value_len` bytes.
    fn big_write(changes: usize, value_len: usize) -> EncodedSpan {
        let at = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let ow = ObjectWindow {
            object: ObjectRef::new("c", "", "configmaps", "ns", "big"),
            window_start: 1_800_000_000,
        };
        let mut s = span_model::audit_span(
            &ow,
            &AuditWrite {
                audit_id: "a-1",
                user: "admin",
                impersonated_user: None,
                user_agent: "kubectl/v1.36.3",
                verb: "update",
                subresource: "",
                code: 200,
                source_ip: "127.0.0.1",
                old_rv: "1",
                new_rv: "2",
                error: None,
                start: at,
                end: at,
                recorded_by: None,
                annotations: &crate::flow::NO_ANNOTATIONS,
            },
        );
        let old = "o".repeat(value_len);
        let new = "n".repeat(value_len);
        for i in 0..changes {
            let path = format!("data.key{i:03}");
            s.event(
                EVENT_DIFF,
                at,
                &[
                    ("diff.op", "replace"),
                    ("diff.path", &path),
                    ("diff.old", &old),
                    ("diff.new", &new),
                ],
            );
        }
        s.finish()
    }

    #[test]
    fn events_that_do_not_fit_are_dropped_counted_and_marked() {
        // 100 changes of 30 KB values (under the value cap): a 6 MB span.
        let span = big_write(100, 30_000);
        assert!(span.0.len() > 6_000_000);
        let max = 2 << 20;
        let (trimmed, report) = trim_span(&span, max).unwrap();
        assert!(trimmed.0.len() <= max, "{} > {max}", trimmed.0.len());
        let s = trimmed.decode();
        assert_eq!(s.events.len() + report.events_dropped, 100);
        // Each event is ~60 KB, so 34 fit in 2 MiB.
        assert_eq!(s.events.len(), 34);
        assert_eq!(s.dropped_events_count, 66);
        assert_eq!(int_attr(&s.attributes, TRIMMED_EVENTS_DROPPED), Some(66));
        assert_eq!(
            int_attr(&s.attributes, TRIMMED_FROM_BYTES),
            Some(span.0.len() as i64)
        );
        // The first changes are kept, in order.
        let paths: Vec<String> = s
            .events
            .iter()
            .map(|e| {
                e.attributes
                    .iter()
                    .find(|kv| kv.key == "diff.path")
                    .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                        any_value::Value::StringValue(p) => Some(p.clone()),
                        _ => None,
                    })
                    .unwrap()
            })
            .collect();
        assert_eq!(paths[0], "data.key000");
        assert_eq!(paths[16], "data.key016");
        // Everything else is as written.
        let original = span.decode();
        assert_eq!(s.span_id, original.span_id);
        assert_eq!(s.name, original.name);
        assert_eq!(
            s.attributes[..original.attributes.len()],
            original.attributes
        );
    }

    #[test]
    fn a_span_without_events_that_is_still_too_large_has_its_values_cut() {
        let mut s = big_write(0, 0).decode();
        s.attributes
            .push(span_model::kv("huge", "h".repeat(100_000)));
        let span = EncodedSpan(s.encode_to_vec().into());
        let (trimmed, report) = trim_span(&span, 20_000).unwrap();
        assert!(trimmed.0.len() <= 20_000);
        assert_eq!(report.values_cut, 1);
        let t = trimmed.decode();
        assert_eq!(
            int_attr(&t.attributes, "huge.truncated_from"),
            Some(100_000)
        );
        assert_eq!(int_attr(&t.attributes, TRIMMED_EVENTS_DROPPED), Some(0));
    }

    #[test]
    fn a_bound_smaller_than_the_bare_span_gives_none() {
        let span = big_write(3, 10);
        assert!(trim_span(&span, 50).is_none());
    }
}
