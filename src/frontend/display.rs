//! Display modes: an assembled object tree becomes OTLP spans that read well
//! in the Jaeger UI. Service = resource, operation = `namespace/name`
//! (with the cluster where it differs from the parent's); kascade's internal
//! attributes are hidden.

use std::collections::{BTreeMap, HashSet};
use std::str::FromStr;

use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::Event;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::assemble::{Assembly, Node};
use super::merge::{Entry, Source};
use super::raw::{TraceIdBytes, kv, string_attr};
use crate::span_model::{EVENT_DIFF, EVENT_SNAPSHOT, attr};

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
}

impl Mode {
    /// The default first: the Jaeger UI preselects the first service.
    pub const ALL: [Mode; 4] = [Mode::Tracing, Mode::Tree, Mode::Timeline, Mode::Grouped];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Tracing => "tracing",
            Mode::Tree => "tree",
            Mode::Timeline => "timeline",
            Mode::Grouped => "grouped",
        }
    }

    pub fn code(self) -> u8 {
        match self {
            Mode::Tracing => 0,
            Mode::Tree => 1,
            Mode::Timeline => 2,
            Mode::Grouped => 3,
        }
    }

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
                    "unknown display mode {} (expected tracing, tree, timeline or grouped)",
                    crate::bounds::quote(s)
                )
            })
    }
}

/// Most characters of one diff value shown in a log.
const MAX_VALUE_CHARS: usize = 400;

fn span_id(seed: &str, salt: u64) -> Vec<u8> {
    let v = xxh3_64_with_seed(seed.as_bytes(), salt).max(1);
    v.to_be_bytes().to_vec()
}

/// Whether a raw attribute is shown: kascade's internal ones are not, nor
/// what the raw Jaeger added to its copy (`@jaeger@warnings` about the
/// zero-length spans of Events and links).
fn is_visible(key: &str) -> bool {
    !key.starts_with("kascade.") && !key.starts_with("link.") && !key.starts_with("@jaeger@")
}

fn visible(attrs: &[KeyValue]) -> Vec<KeyValue> {
    attrs
        .iter()
        .filter(|kv| is_visible(&kv.key))
        .cloned()
        .collect()
}

fn shorten(s: &str) -> String {
    if s.chars().count() <= MAX_VALUE_CHARS {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(MAX_VALUE_CHARS).collect();
        t.push('…');
        t
    }
}

/// One line per changed path: `path: old → new`, `+ path: new`, `- path: old`.
pub fn diff_lines(span: &Span) -> Vec<String> {
    span.events
        .iter()
        .filter(|e| e.name == EVENT_DIFF)
        .map(|e| {
            let a = &e.attributes;
            let path = string_attr(a, attr::DIFF_PATH).unwrap_or("?");
            let old = string_attr(a, attr::DIFF_OLD).map(shorten);
            let new = string_attr(a, attr::DIFF_NEW).map(shorten);
            match (string_attr(a, attr::DIFF_OP), old, new) {
                (Some("add"), _, Some(n)) => format!("+ {path}: {n}"),
                (Some("remove"), Some(o), _) => format!("- {path}: {o}"),
                (_, o, n) => format!(
                    "{path}: {} → {}",
                    o.unwrap_or_else(|| "∅".into()),
                    n.unwrap_or_else(|| "∅".into())
                ),
            }
        })
        .collect()
}

pub fn snapshot(span: &Span) -> Option<&str> {
    span.events
        .iter()
        .find(|e| e.name == EVENT_SNAPSHOT)
        .and_then(|e| string_attr(&e.attributes, attr::SNAPSHOT))
}

fn is_error(span: &Span) -> bool {
    span.status
        .as_ref()
        .is_some_and(|s| s.code == StatusCode::Error as i32)
}

/// A failed request a controller expects and handles: an optimistic
/// concurrency conflict (409, retried with the newer version) or the
/// delete of an object already gone (404: the goal holds). Spans stored
/// by older collectors mark conflicts as errors; neither is what went wrong.
fn is_routine_failure(span: &Span) -> bool {
    let a = &span.attributes;
    match super::raw::int_attr(a, attr::AUDIT_CODE) {
        Some(409) => true,
        Some(404) => string_attr(a, attr::AUDIT_VERB) == Some("delete"),
        _ => false,
    }
}

/// What is wrong with an object at the end of the trace, if anything: a
/// state that is not ready (the last readiness recorded), else failed
/// writes and Warning Events.
pub fn problem(n: &Node) -> Option<String> {
    // The readiness the collector recorded after each write
    // (aggregate/status/): Current, InProgress, Failed, Terminating.
    let last_status = n.history.entries.iter().rev().find_map(|e| {
        string_attr(&e.span.attributes, attr::OBJECT_STATUS).map(|s| {
            (
                s,
                string_attr(&e.span.attributes, attr::OBJECT_STATUS_MESSAGE),
            )
        })
    });
    let with_message = |what: &str, m: Option<&str>| match m.filter(|m| !m.is_empty()) {
        Some(m) => format!("{what}: {m}"),
        None => what.to_string(),
    };
    match last_status {
        Some(("InProgress", m)) => return Some(with_message("not ready", m)),
        Some(("Failed", m)) => return Some(with_message("failed", m)),
        _ => {}
    }
    let failed: Vec<&Entry> = n
        .history
        .entries
        .iter()
        .filter(|e| is_error(&e.span) && !is_routine_failure(&e.span))
        .collect();
    let first = failed.first()?;
    let what = match first.source {
        Source::Event => format!("event {}", first.span.name),
        _ => first.span.name.clone(),
    };
    let message = first.span.status.as_ref().map(|s| s.message.as_str());
    let head = if failed.len() == 1 {
        what
    } else {
        format!(
            "{} failed writes or Warning Events, first {what}",
            failed.len()
        )
    };
    Some(with_message(&head, message))
}

/// The error status of each object span: its own problem, else (for the
/// objects of the tree proper) the first problem among its descendants,
/// so a failure deep in the tree shows on the path down to it. Shared
/// objects (copies, and what hangs below a shared class) keep theirs to
/// themselves.
fn error_statuses(asm: &Assembly) -> Vec<Option<String>> {
    let own: Vec<Option<String>> = asm.nodes.iter().map(problem).collect();
    let mut out = own.clone();
    let mut below: Vec<(usize, usize)> = vec![(0, usize::MAX); asm.nodes.len()];
    // Children come after their parents in the walk: go backwards.
    for &(i, _) in asm.walk().iter().rev() {
        let n = &asm.nodes[i];
        let Some(p) = n.parent else { continue };
        if n.shared {
            continue;
        }
        let (count, first) = below[i];
        let add = usize::from(own[i].is_some()) + count;
        if add == 0 {
            continue;
        }
        let first = if own[i].is_some() { i } else { first };
        let (pc, pf) = below[p];
        below[p] = (pc + add, if pf == usize::MAX { first } else { pf });
    }
    for (i, (count, first)) in below.into_iter().enumerate() {
        if out[i].is_some() || count == 0 || first == usize::MAX {
            continue;
        }
        let f = &asm.nodes[first];
        let others = if count > 1 {
            format!(" (and {} more)", count - 1)
        } else {
            String::new()
        };
        out[i] = Some(format!(
            "below: {} {}{others}: {}",
            f.history.object.resource,
            object_label(f, None),
            own[first].as_deref().unwrap_or_default()
        ));
    }
    out
}

/// An entry folded into one log of its object's span.
fn entry_log(e: &Entry) -> Event {
    let mut attributes = visible(&e.span.attributes);
    attributes.insert(0, kv("source", e.source.name()));
    let diff = diff_lines(&e.span);
    if !diff.is_empty() {
        attributes.push(kv("diff", diff.join("\n")));
    }
    if let Some(s) = snapshot(&e.span) {
        attributes.push(kv("snapshot", s));
    }
    if is_error(&e.span) {
        attributes.push(kv("level", "error"));
        if let Some(st) = &e.span.status {
            attributes.push(kv("error.message", st.message.clone()));
        }
    }
    let name = match e.source {
        Source::Event => format!("event {}", e.span.name),
        _ => e.span.name.clone(),
    };
    Event {
        time_unix_nano: e.span.start_time_unix_nano,
        name,
        attributes,
        dropped_attributes_count: 0,
    }
}

/// The raw entry span, re-parented into the assembled trace.
fn entry_span(e: &Entry, trace_id: &TraceIdBytes, parent: &[u8], name: String) -> Span {
    let mut s = e.span.clone();
    s.trace_id = trace_id.to_vec();
    s.parent_span_id = parent.to_vec();
    s.name = name;
    s.attributes = visible(&s.attributes);
    s.attributes.insert(0, kv("source", e.source.name()));
    s.links.clear();
    s
}

fn object_label(n: &Node, parent: Option<&Node>) -> String {
    let o = &n.history.object;
    let mut s = if o.namespace.is_empty() {
        o.name.clone()
    } else {
        format!("{}/{}", o.namespace, o.name)
    };
    if parent.is_some_and(|p| p.history.object.cluster != o.cluster) {
        s = format!("{s} (cluster {})", o.cluster);
    }
    s
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
pub fn render(
    asm: &Assembly,
    mode: Mode,
    trace_id: &TraceIdBytes,
    group_classes: &HashSet<String>,
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
        let n = &asm.nodes[i];
        let parent = n.parent.map(|p| &asm.nodes[p]);
        let service = n.history.object.resource.as_str();
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
            Mode::Tracing => {
                obj.events = n.history.entries.iter().map(entry_log).collect();
            }
            Mode::Tree => {
                for e in &n.history.entries {
                    let name = match e.source {
                        Source::Event => format!("event {}", e.span.name),
                        _ => e.span.name.clone(),
                    };
                    out.push(service, entry_span(e, trace_id, &ids[i], name));
                }
            }
            Mode::Timeline => {
                let label = format!("{} {}", service, object_label(n, None));
                for e in &n.history.entries {
                    let name = format!("{label}: {}", e.span.name);
                    out.push(service, entry_span(e, trace_id, &ids[0], name));
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
                    let any_error = entries.iter().any(|e| is_error(&e.span));
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
                            events: entries.iter().map(|e| entry_log(e)).collect(),
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
