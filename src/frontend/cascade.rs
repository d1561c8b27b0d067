//! The cascades an assembled object took part in (display mode `cascade`):
//! the cascade roots its scope's writes name (`cascade.root.span_id`), the
//! raw traces holding each cascade's writes (a raw search by that tag), and
//! those writes turned back into [`ChangeRecord`]s from their attributes.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use opentelemetry_proto::tonic::trace::v1::Span;

use super::assemble::{Assembler, Assembly, Clip, window_ids};
use super::merge::{ObjectHistory, Source, merge};
use super::raw::{
    RawError, RawStore, TimeRange, TraceIdBytes, find_all, from_nanos, int_attr, string_attr,
};
use crate::analysis::cascade::{self, Cascade};
use crate::model::ObjectRef;
use crate::pipeline::{
    CascadeRole, Cause, ChangeRecord, ChangeSource, CpidOrigin, Readiness, SpanRef, WriteCpid,
};
use crate::span_model::{CASCADE_ROLE_EFFECT, CASCADE_ROLE_UNEXPLAINED, attr};
use opentelemetry_proto::tonic::common::v1::KeyValue;

/// Cascades shown in one assembled trace at most (the latest ones).
pub const MAX_CASCADES: usize = 20;

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
pub fn root_of(span: &Span) -> Option<SpanRef> {
    let a = &span.attributes;
    span_ref(
        string_attr(a, attr::CASCADE_ROOT_TRACE_ID)?,
        string_attr(a, attr::CASCADE_ROOT_SPAN_ID)?,
    )
}

/// The change a raw audit or watch span of `object` shows, from its
/// attributes; `None` for other spans and spans without `cascade.*`
/// attributes (written before cause inference). The cause's object is not
/// an attribute: it is left empty here ([`CascadeRecords::finish`] fills
/// it in when the cause is among the records).
pub fn record_from_span(
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
    let deleted = match source {
        ChangeSource::Watch => verb == "deleted",
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
    Some(ChangeRecord {
        object: object.clone(),
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
        readiness,
        deleted,
        role,
        cause,
        root,
        depth: int_attr(a, attr::CASCADE_DEPTH).unwrap_or(0).max(0) as u32,
        cpid: write_cpid(a),
        failure: (code >= 400)
            .then(|| s.status.as_ref().map(|st| st.message.clone()))
            .flatten()
            .filter(|m| !m.is_empty()),
        old: None,
        new: None,
        related: Vec::new(),
    })
}

/// The `cpid` and `cpid.origin` attributes of a write's span.
pub fn write_cpid(a: &[KeyValue]) -> Option<WriteCpid> {
    let cpid = kascade_cpid::Cpid::parse(string_attr(a, attr::CPID)?).ok()?;
    let origin = match string_attr(a, attr::CPID_ORIGIN) {
        Some("inferred") => CpidOrigin::Inferred,
        Some("traceparent") => CpidOrigin::Traceparent,
        _ => CpidOrigin::Annotation,
    };
    Some(WriteCpid { cpid, origin })
}

/// The changes of cascades `roots` recorded up to `until` (ns since the
/// epoch), gathered history by history ([`CascadeRecords::add`]), each
/// once; [`CascadeRecords::finish`] fills in the causes' objects. Gathered
/// so that histories can be read, taken from and dropped a slice at a time.
pub struct CascadeRecords<'r> {
    roots: &'r HashSet<SpanRef>,
    until: u64,
    out: Vec<ChangeRecord>,
    seen: HashSet<SpanRef>,
}

impl<'r> CascadeRecords<'r> {
    pub fn new(roots: &'r HashSet<SpanRef>, until: u64) -> Self {
        Self {
            roots,
            until,
            out: Vec::new(),
            seen: HashSet::new(),
        }
    }

    pub fn add(&mut self, h: &ObjectHistory) {
        for e in &h.entries {
            if e.span.start_time_unix_nano > self.until {
                continue;
            }
            if let Some(r) = record_from_span(&h.object, &h.uid, e.source, &e.span)
                && self.roots.contains(&r.root)
                && self.seen.insert(r.span)
            {
                self.out.push(r);
            }
        }
    }

    pub fn finish(self) -> Vec<ChangeRecord> {
        let mut out = self.out;
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
}

/// The cascades the objects of `asm` (not the shared ones) took part in
/// within `clip`: at most
/// [`MAX_CASCADES`] (the latest roots; the rest counted in the notes).
///
/// The writes on the objects of the tree proper are taken from `asm`, whose
/// histories of them are whole within `clip`; a raw search by each root
/// finds the windows of other objects the cascade wrote (a shared Node, an
/// EndpointSlice, the Deployments a ConfigMap rolled), of which only those
/// not already held are read. So a warm tree is not read twice. The search
/// takes `raw_search_limit` windows at a time ([`find_all`]), at most
/// `max_windows` per root, and the windows are read in slices of
/// `raw_search_limit`, each dropped once its writes are taken.
pub async fn cascades_of<S: RawStore>(
    assembler: &Assembler<S>,
    asm: &Assembly,
    clip: &Clip,
    raw_search_limit: usize,
    max_windows: usize,
) -> Result<(Vec<Cascade>, Vec<String>), RawError> {
    let mut notes = Vec::new();
    // Roots by the time of the write that named them, latest last.
    let mut named: Vec<(u64, SpanRef)> = asm
        .nodes
        .iter()
        // The tree proper: a shared Node's or ConfigMap's own writes (node
        // heartbeats) root cascades of their own, not the searched object's.
        .filter(|n| !n.shared && n.copy_of.is_none())
        .flat_map(|n| n.history.entries.iter())
        .filter(|e| e.span.start_time_unix_nano <= clip.until)
        .filter_map(|e| root_of(&e.span).map(|r| (e.span.start_time_unix_nano, r)))
        .collect();
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
        let found = find_all(
            &**assembler.store(),
            &tags,
            range,
            raw_search_limit,
            max_windows,
        )
        .await?;
        if !found.complete {
            notes.push(format!(
                "cascade {}: its writes lie in more object windows than were searched ({raw_search_limit} per search, --raw-search-limit; {max_windows} in all, --max-objects); writes on objects outside this trace's tree may not be shown",
                r.span_hex()
            ));
        }
        raw_ids.extend(found.ids.into_iter().filter(|id| !held.contains(id)));
    }
    let wanted: HashSet<SpanRef> = roots.iter().copied().collect();
    let mut records = CascadeRecords::new(&wanted, clip.until);
    for h in &tree {
        records.add(h);
    }
    let raw_ids: Vec<_> = raw_ids.into_iter().collect();
    for slice in raw_ids.chunks(raw_search_limit.max(1)) {
        let mut traces = assembler.read_many(slice).await?;
        for id in slice {
            if let Some(h) = traces.remove(id).and_then(merge) {
                records.add(&h);
            }
        }
    }
    Ok((cascade::build(records.finish()), notes))
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
