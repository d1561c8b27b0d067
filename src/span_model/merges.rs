//! Mergelogs as spans. The raw store keeps the merge graph: each CPID has a
//! trace of its own whose id is the CPID's 128 bits, holding a `merge` span
//! when the CPID was minted by a merge (naming its sources) and a
//! `merged_into` span for every merge it went into. Any frontend replica
//! walks the graph with direct trace reads, in either direction.

use opentelemetry::trace::{SpanId, TraceId};

use super::{SALT_MERGE, SALT_MERGED_INTO, SPAN_KIND_MERGE, SPAN_KIND_MERGED_INTO, attr};
use crate::model::derived_span_id_of;
use crate::span_model::SpanBuf;
use kascade_cpid::{Cpid, Mergelog};

/// The `merge` span of `cpid` (in its own trace).
pub(crate) fn merge_span_id(cpid: Cpid) -> SpanId {
    derived_span_id_of(SALT_MERGE, |h| h.update(&cpid.to_bytes()))
}

/// The `merged_into` span of `source` → `merged` (in the source's trace).
pub(crate) fn merged_into_span_id(source: Cpid, merged: Cpid) -> SpanId {
    derived_span_id_of(SALT_MERGED_INTO, |h| {
        h.update(&source.to_bytes());
        h.update(&merged.to_bytes());
    })
}

fn trace_of(c: Cpid) -> TraceId {
    TraceId::from_bytes(c.to_bytes())
}

/// The spans of one mergelog: its `merge` span, and a `merged_into` span per
/// source; each links to the other side.
pub fn merge_spans(cluster: &str, m: &Mergelog) -> Vec<SpanBuf> {
    let new = m.cpid;
    let sources: Vec<String> = m.sources.iter().map(Cpid::to_string).collect();
    let name = if m.controller.is_empty() {
        format!("merged {} changes", m.sources.len())
    } else {
        format!("{} merged {} changes", m.controller, m.sources.len())
    };
    let mut merge = SpanBuf::new(
        trace_of(new),
        merge_span_id(new),
        SpanId::INVALID,
        &name,
        m.time,
        m.time,
    );
    merge.attr(attr::SPAN_KIND, SPAN_KIND_MERGE);
    merge.attr(attr::CLUSTER, cluster);
    merge.attr(attr::CPID, &new.to_string());
    merge.attr(attr::CPID_SOURCES, &sources.join(","));
    if !m.controller.is_empty() {
        merge.attr(attr::CPID_CONTROLLER, &m.controller);
    }
    let mut out = Vec::with_capacity(1 + m.sources.len());
    for (s, text) in m.sources.iter().zip(&sources) {
        let id = merged_into_span_id(*s, new);
        merge.link_ids(
            &s.to_bytes(),
            &id.to_bytes(),
            &[(attr::LINK_CLASS, "merge source")],
        );
        let mut into = SpanBuf::new(
            trace_of(*s),
            id,
            SpanId::INVALID,
            &format!("merged into {new}"),
            m.time,
            m.time,
        );
        into.attr(attr::SPAN_KIND, SPAN_KIND_MERGED_INTO);
        into.attr(attr::CLUSTER, cluster);
        into.attr(attr::CPID, text);
        into.attr(attr::CPID_MERGED_INTO, &new.to_string());
        if !m.controller.is_empty() {
            into.attr(attr::CPID_CONTROLLER, &m.controller);
        }
        into.link_ids(
            &new.to_bytes(),
            &merge_span_id(new).to_bytes(),
            &[(attr::LINK_CLASS, "merged into")],
        );
        out.push(into);
    }
    out.insert(0, merge);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};

    fn string_attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
        attrs.iter().find(|kv| kv.key == key).and_then(|kv| {
            match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => Some(s.as_str()),
                _ => None,
            }
        })
    }

    #[test]
    fn each_side_of_a_merge_is_in_its_cpids_trace_and_links_the_other() {
        let (a, b, n) = (Cpid::new_random(), Cpid::new_random(), Cpid::new_random());
        let m = Mergelog {
            cpid: n,
            sources: vec![a, b],
            time: std::time::SystemTime::now(),
            controller: "roller".into(),
        };
        let spans: Vec<_> = merge_spans("c1", &m)
            .into_iter()
            .map(|s| s.finish().decode())
            .collect();
        assert_eq!(spans.len(), 3);
        let merge = &spans[0];
        assert_eq!(merge.trace_id, n.to_bytes());
        assert_eq!(merge.name, "roller merged 2 changes");
        assert_eq!(
            string_attr(&merge.attributes, attr::CPID_SOURCES),
            Some(format!("{a},{b}").as_str())
        );
        for (span, source) in spans[1..].iter().zip([a, b]) {
            assert_eq!(span.trace_id, source.to_bytes());
            assert_eq!(
                string_attr(&span.attributes, attr::CPID_MERGED_INTO),
                Some(n.to_string().as_str())
            );
            // The merge links to this span, and this span to the merge.
            assert!(merge.links.iter().any(|l| l.span_id == span.span_id));
            assert_eq!(span.links[0].span_id, merge.span_id);
        }
    }
}
