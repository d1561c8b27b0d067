//! Display modes: an assembled object tree becomes OTLP spans that read well
//! in the Jaeger UI. Service = resource, operation = `namespace/name`
//! (with the cluster where it differs from the parent's); kascade's internal
//! attributes are hidden.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;

use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::Event;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::assemble::{Assembly, Node};
use super::merge::{Entry, Source};
use super::raw::{TraceIdBytes, int_attr, kv, string_attr};
use crate::judgement;
use crate::span_model::{EVENT_DIFF, EVENT_SNAPSHOT, attr};

pub(crate) mod cascade;
mod entries;
mod siblings;

use entries::*;
pub(crate) use entries::{diff_lines, fight_writes, problem, snapshot};
pub(crate) use siblings::{
    DEFAULT_MAX_SIBLINGS, OBJECTS_NOT_SHOWN, SIBLINGS_TAG, parse_siblings, select_for_text,
};

/// Objects (or writes, in mode cascade) the summary spans of `spans` stand
/// for: what a trace shows in part.
pub(crate) fn not_shown(spans: &[ResourceSpans]) -> u64 {
    spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .filter_map(|s| {
            int_attr(&s.attributes, OBJECTS_NOT_SHOWN)
                .or_else(|| int_attr(&s.attributes, cascade::WRITES_NOT_SHOWN))
        })
        .filter_map(|n| u64::try_from(n).ok())
        .sum()
}

/// How an object tree is laid out as spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// One span per object; writes, Events and diffs are its logs.
    Tracing,
    /// One span per object, each write and Event a child span.
    Tree,
    /// Every write and Event of every object flat under the root object.
    Timeline,
    /// Like tracing, with one child span per source (audit, event).
    Grouped,
    /// The cascades the objects took part in: the root write, and the
    /// writes it caused as child spans (`cascade.rs`).
    Cascade,
}

impl Mode {
    /// The default first: the Jaeger UI preselects the first service.
    pub const ALL: [Mode; 5] = [
        Mode::Tracing,
        Mode::Tree,
        Mode::Timeline,
        Mode::Grouped,
        Mode::Cascade,
    ];

    /// The name on the command line and in the Jaeger UI's search tag.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Tracing => "tracing",
            Mode::Tree => "tree",
            Mode::Timeline => "timeline",
            Mode::Grouped => "grouped",
            Mode::Cascade => "cascade",
        }
    }

    /// The mode's byte in an assembled trace id.
    pub fn code(self) -> u8 {
        match self {
            Mode::Tracing => 0,
            Mode::Tree => 1,
            Mode::Timeline => 2,
            Mode::Grouped => 3,
            Mode::Cascade => 4,
        }
    }

    /// The mode of an assembled trace id's byte.
    pub fn from_code(c: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.code() == c)
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown display mode {} (expected tracing, tree, timeline, grouped or cascade)",
                    crate::messages::quote(s)
                )
            })
    }
}

/// Output being built: spans grouped by service.
#[derive(Default)]
struct Out {
    by_service: BTreeMap<String, Vec<Span>>,
}

impl Out {
    fn push(&mut self, service: &str, span: Span) {
        self.by_service
            .entry(service.to_string())
            .or_default()
            .push(span);
    }

    fn finish(self) -> Vec<ResourceSpans> {
        self.by_service
            .into_iter()
            .map(|(service, spans)| ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", service)],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "kascade-frontend".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    spans,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            })
            .collect()
    }
}

/// Times of each object span: the entries it covers, widened to cover its
/// children in the tree proper (a parent span encloses its subtree, as
/// Jaeger expects); an object with none sits at its parent's start, zero
/// length. Shared objects' entries lie within their parent's activity
/// already (`assemble`).
fn object_times(asm: &Assembly) -> Vec<(u64, u64)> {
    let walk = asm.walk();
    let mut own: Vec<Option<(u64, u64)>> =
        asm.nodes.iter().map(|n| n.history.active_range()).collect();
    // Children come after their parents in the walk: widen bottom-up.
    for &(i, _) in walk.iter().rev() {
        let n = &asm.nodes[i];
        if n.shared {
            continue;
        }
        if let (Some(p), Some((s, e))) = (n.parent, own[i]) {
            own[p] = Some(own[p].map_or((s, e), |(ps, pe)| (ps.min(s), pe.max(e))));
        }
    }
    let mut times = vec![(0u64, 0u64); asm.nodes.len()];
    for &(i, _) in &walk {
        let n = &asm.nodes[i];
        times[i] = own[i].unwrap_or_else(|| {
            let at = n
                .parent
                .map(|p| times[p].0)
                .or_else(|| n.history.windows.first().copied())
                .unwrap_or(0);
            (at, at)
        });
    }
    times
}

/// Lays `asm` out as spans of one trace with id `trace_id`. Children linked
/// by a class in `group_classes` go under a virtual span named by the class.
/// Beyond `max_siblings` objects of one resource and class under one
/// object, the rest are summarised by one span (`siblings.rs`; 0 shows
/// all).
pub fn render(
    asm: &Assembly,
    mode: Mode,
    trace_id: &TraceIdBytes,
    group_classes: &HashSet<String>,
    max_siblings: usize,
) -> Vec<ResourceSpans> {
    let mut times = object_times(asm);
    if mode == Mode::Timeline {
        // The root spans every entry shown under it.
        let all = asm.nodes.iter().filter_map(|n| n.history.active_range());
        let (s, e) = all.fold((u64::MAX, 0), |(s, e), r| (s.min(r.0), e.max(r.1)));
        if s <= e {
            times[0] = (s, e);
        }
    }
    let mut out = Out::default();
    // A shared object shown under several objects: each copy its own span.
    let ids: Vec<Vec<u8>> = asm
        .nodes
        .iter()
        .map(|n| match (n.copy_of, n.parent) {
            (Some(_), Some(p)) => span_id(
                &format!(
                    "{}|{}",
                    n.history.object.key(),
                    asm.nodes[p].history.object.key()
                ),
                0x6b62,
            ),
            _ => span_id(&n.history.object.key(), 0x6b61),
        })
        .collect();
    let errors = error_statuses(asm);
    let (hidden, summaries) = siblings::select(asm, &times, &errors, max_siblings);
    // (parent node, class) -> virtual span id, start, end.
    let mut virtuals: BTreeMap<(usize, String), (Vec<u8>, u64, u64)> = BTreeMap::new();
    let parent_span = |i: usize, virtuals: &mut BTreeMap<(usize, String), (Vec<u8>, u64, u64)>| {
        let n = &asm.nodes[i];
        let p = n.parent?;
        match &n.class {
            Some(c) if mode != Mode::Timeline && group_classes.contains(c) => {
                let v = virtuals.entry((p, c.clone())).or_insert_with(|| {
                    let key = format!("{}|{c}", asm.nodes[p].history.object.key());
                    (span_id(&key, 0x7669), u64::MAX, 0)
                });
                v.1 = v.1.min(times[i].0);
                v.2 = v.2.max(times[i].1);
                Some(v.0.clone())
            }
            _ => Some(ids[p].clone()),
        }
    };
    for (i, _) in asm.walk() {
        if hidden[i] {
            continue;
        }
        let n = &asm.nodes[i];
        let parent = n.parent.map(|p| &asm.nodes[p]);
        let service = n.history.object.resource.as_str();
        let recovered = recovered(n);
        let mut attributes = visible(&n.history.attributes);
        if attributes.is_empty() {
            // A placeholder: known only from a link.
            let o = &n.history.object;
            attributes = vec![
                kv(attr::CLUSTER, o.cluster.clone()),
                kv(attr::GROUP, o.group.clone()),
                kv(attr::RESOURCE, o.resource.clone()),
                kv(attr::NAMESPACE, o.namespace.clone()),
                kv(attr::NAME, o.name.clone()),
                kv("note", "no writes or Events in range"),
            ];
            attributes.retain(|a| !entries::is_empty(a));
        }
        if let Some(c) = &n.class {
            attributes.push(kv("relation", c.clone()));
        }
        if i == asm.searched && asm.nodes.len() > 1 {
            attributes.push(kv("searched", "true"));
        }
        if n.history.hidden_entries > 0 {
            attributes.push(kv(
                "note",
                format!(
                    "{} entries outside this trace's time range not shown",
                    n.history.hidden_entries
                ),
            ));
        }
        if i == 0 {
            for note in &asm.notes {
                attributes.push(kv("note", note.clone()));
            }
        }
        // The root names the trace in the UI's search results: when another
        // object was searched, the root's name says which.
        let mut name = object_label(n, parent);
        if i == 0 && asm.searched != 0 {
            let s = &asm.nodes[asm.searched];
            name = format!(
                "{name} ▸ {} {}",
                s.history.object.resource,
                object_label(s, None)
            );
        }
        let mut obj = Span {
            trace_id: trace_id.to_vec(),
            span_id: ids[i].clone(),
            parent_span_id: parent_span(i, &mut virtuals).unwrap_or_default(),
            name,
            status: errors[i].as_ref().map(|m| Status {
                message: m.clone(),
                code: StatusCode::Error as i32,
            }),
            kind: 1, // internal
            start_time_unix_nano: times[i].0,
            end_time_unix_nano: times[i].1,
            attributes,
            ..Default::default()
        };
        match mode {
            // `cascade` is rendered from the cascades (`cascade::render`);
            // an object tree asked for in it is shown as in `tracing`.
            Mode::Tracing | Mode::Cascade => {
                obj.events = n
                    .history
                    .entries
                    .iter()
                    .map(|e| entry_log(e, recovered))
                    .collect();
            }
            Mode::Tree => {
                for e in &n.history.entries {
                    let name = match e.source {
                        Source::Event => format!("event {}", e.span.name),
                        _ => short_writer_name(e),
                    };
                    out.push(service, entry_span(e, recovered, trace_id, &ids[i], name));
                }
            }
            Mode::Timeline => {
                let label = format!("{} {}", service, object_label(n, None));
                for e in &n.history.entries {
                    let name = format!("{label}: {}", short_writer_name(e));
                    out.push(service, entry_span(e, recovered, trace_id, &ids[0], name));
                }
            }
            Mode::Grouped => {
                let mut by_source: BTreeMap<Source, Vec<&Entry>> = BTreeMap::new();
                for e in &n.history.entries {
                    by_source.entry(e.source).or_default().push(e);
                }
                for (source, entries) in by_source {
                    let start = entries.iter().map(|e| e.span.start_time_unix_nano).min();
                    let end = entries.iter().map(|e| e.span.end_time_unix_nano).max();
                    let any_error = entries.iter().any(|e| is_error_mark(e, recovered));
                    out.push(
                        service,
                        Span {
                            trace_id: trace_id.to_vec(),
                            span_id: span_id(&n.history.object.key(), 0x100 + source as u64),
                            parent_span_id: ids[i].clone(),
                            name: source.name().to_string(),
                            kind: 1,
                            start_time_unix_nano: start.unwrap_or(times[i].0),
                            end_time_unix_nano: end.unwrap_or(times[i].1),
                            attributes: vec![kv("source", source.name())],
                            events: entries.iter().map(|e| entry_log(e, recovered)).collect(),
                            status: any_error.then(|| Status {
                                message: format!("a {} entry failed", source.name()),
                                code: StatusCode::Error as i32,
                            }),
                            ..Default::default()
                        },
                    );
                }
            }
        }
        if mode == Mode::Timeline && i != 0 {
            continue; // only the root object is a span in the timeline
        }
        out.push(service, obj);
    }
    for s in &summaries {
        let parent = if mode == Mode::Timeline {
            ids[0].clone()
        } else {
            // Under the class's virtual span when the level is grouped
            // (widening it to the objects not shown).
            let mut parent = None;
            for &m in &s.members {
                parent = parent_span(m, &mut virtuals);
            }
            parent.unwrap_or_else(|| ids[s.parent].clone())
        };
        out.push(
            &s.resource,
            siblings::summary_span(asm, s, &times, &errors, trace_id, parent),
        );
    }
    for ((p, class), (id, start, end)) in virtuals {
        let parent = &asm.nodes[p];
        out.push(
            &parent.history.object.resource,
            Span {
                trace_id: trace_id.to_vec(),
                span_id: id,
                parent_span_id: ids[p].clone(),
                name: class.clone(),
                kind: 1,
                start_time_unix_nano: start,
                end_time_unix_nano: end.max(start),
                attributes: vec![kv("relation", class)],
                ..Default::default()
            },
        );
    }
    out.finish()
}
