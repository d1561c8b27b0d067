//! The cascades an assembled object took part in (display mode `cascade`):
//! the cascade roots its scope's writes name (`cascade.root.span_id`), the
//! raw traces holding each cascade's writes (a raw search by that tag), and
//! those writes turned back into [`ChangeRecord`]s from their attributes.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use opentelemetry_proto::tonic::trace::v1::Span;

use super::assemble::{Assembler, Assembly, Clip, window_ids};
use super::merge::{ObjectHistory, Source, merge};
use super::raw::{RawError, RawStore, TimeRange, TraceIdBytes, from_nanos, int_attr, string_attr};
use crate::analysis::cascade::{self, Cascade};
use crate::flow::{
    CascadeRole, Cause, ChangeRecord, ChangeSource, CpidOrigin, Readiness, SpanRef, WriteCpid,
};
use crate::model::ObjectRef;
use crate::span_model::{CASCADE_ROLE_EFFECT, CASCADE_ROLE_UNEXPLAINED, attr};
use opentelemetry_proto::tonic::common::v1::KeyValue;

/// Cascades shown in one assembled trace at most (the latest ones).
pub(crate) const MAX_CASCADES: usize = 20;

fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn span_ref(trace_hex: &str, span_hex: &str) -> Option<SpanRef> {
    Some(SpanRef {
        trace_id: parse_hex(trace_hex)?,
        span_id: parse_hex(span_hex)?,
    })
}

/// The cascade root a raw audit or watch span names, if any.
pub(crate) fn root_of(span: &Span) -> Option<SpanRef> {
    let a = &span.attributes;
    span_ref(
        string_attr(a, attr::CASCADE_ROOT_TRACE_ID)?,
        string_attr(a, attr::CASCADE_ROOT_SPAN_ID)?,
    )
}

/// The change a raw audit or watch span of `object` shows, from its
/// attributes; `None` for other spans and spans without `cascade.*`
/// attributes (written before cause inference). The cause's object is not
/// an attribute: it is left empty here ([`records_from_histories`] fills
/// it in when the cause is among the records).
pub(crate) fn record_from_span(
    object: &ObjectRef,
    uid: &str,
    source: Source,
    s: &Span,
) -> Option<ChangeRecord> {
    let a = &s.attributes;
    let root = root_of(s)?;
    let span = SpanRef {
        trace_id: s.trace_id.as_slice().try_into().ok()?,
        span_id: s.span_id.as_slice().try_into().ok()?,
    };
    let (source, user, verb) = match source {
        Source::Audit => (
            ChangeSource::Audit,
            string_attr(a, attr::AUDIT_USER)
                .unwrap_or_default()
                .to_string(),
            string_attr(a, attr::AUDIT_VERB)
                .unwrap_or_default()
                .to_string(),
        ),
        Source::Watch => (
            ChangeSource::Watch,
            String::new(),
            string_attr(a, attr::WATCH_TYPE)
                .unwrap_or_default()
                .to_string(),
        ),
        _ => return None,
    };
    let code = int_attr(a, attr::AUDIT_CODE).unwrap_or(200) as i32;
    let readiness = string_attr(a, attr::OBJECT_STATUS).map(|status| Readiness {
        status: status.to_string(),
        message: string_attr(a, attr::OBJECT_STATUS_MESSAGE)
            .unwrap_or_default()
            .to_string(),
    });
    // The processor leaves readiness out on writes that removed the object;
    // a delete answered 404 found it gone.
    let deleted = string_attr(a, attr::OBJECT_REMOVED) == Some("true")
        || match source {
            ChangeSource::Watch => verb == "deleted",
            // Spans of collectors that did not mark removals.
            ChangeSource::Audit => {
                verb == "delete" && readiness.is_none() && (code < 300 || code == 404)
            }
        };
    let role = match string_attr(a, attr::CASCADE_ROLE) {
        Some(CASCADE_ROLE_EFFECT) => CascadeRole::Effect,
        Some(CASCADE_ROLE_UNEXPLAINED) => CascadeRole::Unexplained,
        _ => CascadeRole::Root,
    };
    let cause = span_ref(
        string_attr(a, attr::CASCADE_CAUSE_TRACE_ID).unwrap_or_default(),
        string_attr(a, attr::CASCADE_CAUSE_SPAN_ID).unwrap_or_default(),
    )
    .map(|cause_span| Cause {
        span: cause_span,
        object: ObjectRef::new("", "", "", "", ""),
        name: string_attr(a, attr::CASCADE_CAUSE_NAME)
            .unwrap_or_default()
            .to_string(),
        edge: string_attr(a, attr::CASCADE_EDGE)
            .unwrap_or_default()
            .to_string(),
        rule: string_attr(a, attr::CASCADE_RULE)
            .unwrap_or_default()
            .to_string(),
        hop: Duration::from_micros(int_attr(a, attr::CASCADE_HOP_US).unwrap_or(0).max(0) as u64),
    });
    // A create refused before its object was named is shown on its owner's
    // span: the record is of what it tried to create.
    let object = match string_attr(a, attr::AUDIT_ATTEMPT_RESOURCE) {
        Some(resource) => {
            // By its `generateName` prefix, as explain names it: the
            // names the apiserver drew for refused attempts differ each
            // time, the prefix tells they are one writer's retries.
            let name = string_attr(a, attr::AUDIT_ATTEMPT_GENERATE_NAME)
                .filter(|n| !n.is_empty())
                .or_else(|| string_attr(a, attr::AUDIT_ATTEMPT_NAME))
                .unwrap_or(&object.name);
            ObjectRef::new(
                &object.cluster,
                string_attr(a, attr::AUDIT_ATTEMPT_GROUP).unwrap_or_default(),
                resource,
                string_attr(a, attr::AUDIT_ATTEMPT_NAMESPACE).unwrap_or_default(),
                name.to_string(),
            )
        }
        None => object.clone(),
    };
    Some(ChangeRecord {
        object,
        uid: uid.to_string(),
        source,
        user,
        verb,
        subresource: string_attr(a, attr::AUDIT_SUBRESOURCE)
            .unwrap_or_default()
            .to_string(),
        code,
        received: from_nanos(s.start_time_unix_nano),
        completed: from_nanos(s.end_time_unix_nano.max(s.start_time_unix_nano)),
        span,
        cause_logged_after: string_attr(a, attr::CASCADE_CAUSE_LOGGED_AFTER) == Some("true"),
        version: string_attr(a, attr::AUDIT_RV_NEW)
            .or_else(|| string_attr(a, attr::WATCH_RV_NEW))
            .and_then(|v| v.parse().ok()),
        readiness,
        deleted,
        role,
        cause,
        root,
        timer: string_attr(a, attr::CASCADE_TIMER).map(str::to_string),
        depth: int_attr(a, attr::CASCADE_DEPTH).unwrap_or(0).max(0) as u32,
        cpid: write_cpid(a),
        failure: (code >= 400)
            .then(|| s.status.as_ref().map(|st| st.message.clone()))
            .flatten()
            .filter(|m| !m.is_empty()),
        audit_id: string_attr(a, attr::AUDIT_ID)
            .unwrap_or_default()
            .to_string(),
        annotations: annotations_of(a),
        old: None,
        new: None,
        related: Vec::new(),
    })
}

/// The apiserver's annotations a write's span carries.
fn annotations_of(a: &[KeyValue]) -> crate::flow::RequestAnnotations {
    let mut out = crate::flow::RequestAnnotations::default();
    if let Some(names) = string_attr(a, attr::AUDIT_WEBHOOKS_FAILED_OPEN) {
        out.failed_open = names.split(", ").map(str::to_string).collect();
    }
    match string_attr(a, attr::AUDIT_LATENCY) {
        Some(text) => out.with_latency_text(text),
        None => out,
    }
}

/// The `cpid` and `cpid.origin` attributes of a write's span.
pub(crate) fn write_cpid(a: &[KeyValue]) -> Option<WriteCpid> {
    let cpid = kascade_cpid::Cpid::parse(string_attr(a, attr::CPID)?).ok()?;
    let origin = match string_attr(a, attr::CPID_ORIGIN) {
        Some("inferred") => CpidOrigin::Inferred,
        Some("traceparent") => CpidOrigin::Traceparent,
        _ => CpidOrigin::Annotation,
    };
    Some(WriteCpid { cpid, origin })
}

/// The changes of cascades `roots` recorded in `histories` up to `until`
/// (ns since the epoch), each once, causes' objects filled in.
pub(crate) fn records_from_histories<'a>(
    histories: impl IntoIterator<Item = &'a ObjectHistory>,
    roots: &HashSet<SpanRef>,
    until: u64,
) -> Vec<ChangeRecord> {
    let mut out: Vec<ChangeRecord> = Vec::new();
    let mut seen = HashSet::new();
    for h in histories {
        for e in &h.entries {
            if e.span.start_time_unix_nano > until {
                continue;
            }
            if let Some(r) = record_from_span(&h.object, &h.uid, e.source, &e.span)
                && roots.contains(&r.root)
                && seen.insert(r.span)
            {
                out.push(r);
            }
        }
    }
    let objects: HashMap<SpanRef, ObjectRef> =
        out.iter().map(|r| (r.span, r.object.clone())).collect();
    for r in &mut out {
        if let Some(c) = &mut r.cause
            && let Some(o) = objects.get(&c.span)
        {
            c.object = o.clone();
        }
    }
    out
}

/// The cascades the objects of `asm` (not the shared ones) took part in
/// within `clip`: at most
/// [`MAX_CASCADES`] (the latest roots; the rest counted in the notes).
///
/// The writes on the objects of the tree proper are taken from `asm`, whose
/// histories of them are whole within `clip`; a raw search by each root
/// finds the windows of other objects the cascade wrote (a shared Node, an
/// EndpointSlice, the Deployments a ConfigMap rolled), of which only those
/// not already held are read. So a rollout wider than `--raw-search-limit`
/// keeps every write on its own Pods, and a warm tree is not read twice.
pub(crate) async fn cascades_of<S: RawStore>(
    assembler: &Assembler<S>,
    asm: &Assembly,
    clip: &Clip,
    raw_search_limit: usize,
) -> Result<(Vec<Cascade>, Vec<String>), RawError> {
    let mut notes = Vec::new();
    // Roots by the time of the write that named them, latest last.
    // The searched object's first write: cascades over before it, which
    // never touched it, are the history of what it came to use (the
    // PersistentVolumes a cluster's set-up created for its claims), not its
    // own.
    let searched = asm.nodes.get(asm.searched);
    let born = searched
        .and_then(|n| {
            n.history
                .entries
                .iter()
                .map(|e| e.span.start_time_unix_nano)
                .min()
        })
        .unwrap_or(0);
    let own: HashSet<SpanRef> = searched
        .map(|n| {
            n.history
                .entries
                .iter()
                .filter_map(|e| root_of(&e.span))
                .collect()
        })
        .unwrap_or_default();
    // Objects of the tree written by writes logged before the changes they
    // react to, or by what those caused, in range or not
    // (`cascade::early_objects`).
    let early = {
        let tree_records: Vec<ChangeRecord> = asm
            .nodes
            .iter()
            .filter(|n| !n.shared && n.copy_of.is_none())
            .flat_map(|n| {
                n.history
                    .entries
                    .iter()
                    .filter(|e| e.span.start_time_unix_nano <= clip.until)
                    .filter_map(|e| {
                        record_from_span(&n.history.object, &n.history.uid, e.source, &e.span)
                    })
            })
            .collect();
        cascade::early_objects(&tree_records)
    };
    let mut last_write: std::collections::HashMap<SpanRef, u64> = Default::default();
    for n in asm
        .nodes
        .iter()
        .filter(|n| !n.shared && n.copy_of.is_none())
    {
        for e in n
            .history
            .entries
            .iter()
            .filter(|e| e.span.start_time_unix_nano <= clip.until)
        {
            if let Some(r) = root_of(&e.span) {
                let t = last_write.entry(r).or_insert(0);
                *t = (*t).max(e.span.end_time_unix_nano);
            }
        }
    }
    let mut earlier = 0;
    let mut named: Vec<(u64, SpanRef)> = asm
        .nodes
        .iter()
        // The tree proper: a shared Node's or ConfigMap's own writes (node
        // heartbeats) root cascades of their own, not the searched object's.
        .filter(|n| !n.shared && n.copy_of.is_none())
        .flat_map(|n| n.history.entries.iter())
        .filter(|e| e.span.start_time_unix_nano <= clip.until)
        .filter_map(|e| root_of(&e.span).map(|r| (e.span.start_time_unix_nano, r)))
        .filter(|(_, r)| {
            let keep = own.contains(r) || last_write.get(r).is_none_or(|&t| t >= born);
            earlier += usize::from(!keep);
            keep
        })
        .collect();
    if earlier > 0 {
        notes.push(
            "cascades of the objects it uses that were over before it was first written are left out"
                .to_string(),
        );
    }
    named.sort();
    let mut roots: Vec<SpanRef> = Vec::new();
    for (_, r) in named.iter().rev() {
        if !roots.contains(r) {
            roots.push(*r);
        }
    }
    if roots.len() > MAX_CASCADES {
        notes.push(format!(
            "{} cascades in range: the latest {MAX_CASCADES} shown",
            roots.len()
        ));
        roots.truncate(MAX_CASCADES);
    }
    let first = clip.windows.first().copied().unwrap_or(0);
    let range = TimeRange::new(
        from_nanos(first.saturating_mul(1_000_000_000)),
        from_nanos(clip.until),
    );
    let tree: Vec<&ObjectHistory> = asm
        .nodes
        .iter()
        .filter(|n| !n.shared && n.copy_of.is_none())
        .map(|n| &n.history)
        .collect();
    let held: HashSet<TraceIdBytes> = tree
        .iter()
        .flat_map(|h| window_ids(&h.object, clip))
        .collect();
    let mut raw_ids = BTreeSet::new();
    for r in &roots {
        let tags = [(attr::CASCADE_ROOT_SPAN_ID.to_string(), r.span_hex())];
        let found = assembler
            .store()
            .find(&tags, range, raw_search_limit)
            .await?;
        if found.len() >= raw_search_limit {
            notes.push(format!(
                "cascade {}: more than {raw_search_limit} object windows (--raw-search-limit) hold its writes; writes on objects outside this trace's tree may not be shown",
                r.span_hex()
            ));
        }
        raw_ids.extend(found.into_iter().filter(|id| !held.contains(id)));
    }
    let raw_ids: Vec<_> = raw_ids.into_iter().collect();
    let read = assembler.read_each(&raw_ids).await?;
    if let Some(why) = read.first_error() {
        notes.push(format!(
            "{} raw traces holding writes of these cascades could not be read; their writes are not shown: {why}",
            read.unreadable.len(),
        ));
    }
    let mut traces = read.traces;
    let others: Vec<_> = raw_ids
        .iter()
        .filter_map(|id| traces.remove(id).and_then(merge))
        .collect();
    let wanted: HashSet<SpanRef> = roots.iter().copied().collect();
    let records = records_from_histories(
        tree.iter().copied().chain(others.iter()),
        &wanted,
        clip.until,
    );
    Ok((cascade::build_with_early_writes(records, &early), notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_ids_parse_back() {
        let r = SpanRef {
            trace_id: [0xab; 16],
            span_id: [0x01; 8],
        };
        assert_eq!(span_ref(&r.trace_hex(), &r.span_hex()), Some(r));
        assert_eq!(span_ref("zz", &r.span_hex()), None);
        assert_eq!(parse_hex::<2>("abc"), None);
    }
}
