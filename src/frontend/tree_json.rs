//! An assembled object tree as plain JSON (`kascade trace --format json`):
//! every object with its writes (who, verb, time, code, diff) and Events,
//! nested as the tree is. The fields are documented in docs/trace-json.md;
//! renaming one breaks its readers.

use serde::Serialize;

use super::assemble::{Assembly, REPEATED_COUNT, REPEATED_TIMES, REPEATED_UNTIL};
use super::display::{problem, snapshot};
use super::merge::{Entry, Source};
use super::raw::{from_nanos, int_attr, string_attr};
use crate::component_spans::ComponentSpans;
use crate::span_model::{EVENT_DIFF, attr};

/// The schema's name and version: changes only when a field changes
/// meaning or goes away (new fields may be added).
pub(crate) const SCHEMA: &str = "kascade.trace/v1";

#[derive(Serialize)]
pub(crate) struct TraceJson<'a> {
    schema: &'static str,
    /// What was not followed (limits, repeated objects).
    notes: &'a [String],
    root: ObjectJson<'a>,
}

#[derive(Serialize)]
struct ObjectJson<'a> {
    cluster: &'a str,
    group: &'a str,
    resource: &'a str,
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
    searched: bool,
    link_class: Option<&'a str>,
    shared: bool,
    shown_elsewhere: bool,
    problem: Option<String>,
    hidden_entries: usize,
    writes: Vec<WriteJson<'a>>,
    events: Vec<EventJson<'a>>,
    children: Vec<ObjectJson<'a>>,
}

#[derive(Serialize)]
struct WriteJson<'a> {
    time: String,
    source: &'static str,
    verb: Option<&'a str>,
    subresource: Option<&'a str>,
    user: Option<&'a str>,
    user_agent: Option<&'a str>,
    code: Option<i64>,
    audit_id: Option<&'a str>,
    error: Option<&'a str>,
    status: Option<&'a str>,
    diff: Vec<DiffJson<'a>>,
    snapshot: Option<&'a str>,
    /// What kube-apiserver's own trace of the request says (`trace
    /// --component-traces`); `None` when it was not traced.
    request: Option<RequestJson>,
}

/// A traced request: how long it took and the parts a person acts on.
#[derive(Serialize)]
struct RequestJson {
    duration_ms: f64,
    parts: Vec<PartJson>,
}

#[derive(Serialize)]
struct PartJson {
    part: String,
    duration_ms: f64,
    failed: bool,
}

#[derive(Serialize)]
struct DiffJson<'a> {
    op: Option<&'a str>,
    path: Option<&'a str>,
    old: Option<&'a str>,
    new: Option<&'a str>,
}

#[derive(Serialize)]
struct EventJson<'a> {
    time: String,
    #[serde(rename = "type")]
    event_type: Option<&'a str>,
    reason: Option<&'a str>,
    message: Option<&'a str>,
    component: Option<&'a str>,
    count: Option<i64>,
    name: Option<&'a str>,
    /// Later occurrences after the tree's last write folded into this one
    /// (`assemble::repeats`), the last of them, and its count.
    repeated_times: Option<i64>,
    repeated_until: Option<&'a str>,
    repeated_count: Option<i64>,
}

/// Nanoseconds since the epoch as RFC 3339 with nanoseconds, in UTC.
fn time(ns: u64) -> String {
    humantime::format_rfc3339_nanos(from_nanos(ns)).to_string()
}

/// An attribute that is a number, or a number written as a string.
fn number(attrs: &[opentelemetry_proto::tonic::common::v1::KeyValue], key: &str) -> Option<i64> {
    int_attr(attrs, key).or_else(|| string_attr(attrs, key).and_then(|s| s.parse().ok()))
}

fn ms(d: std::time::Duration) -> f64 {
    // Microsecond precision: what a reader compares.
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn request(spans: &[opentelemetry_proto::tonic::trace::v1::Span]) -> RequestJson {
    let (total, parts) = crate::component_spans::parts(spans);
    RequestJson {
        duration_ms: ms(total),
        parts: parts
            .into_iter()
            .map(|p| PartJson {
                duration_ms: ms(p.took),
                part: p.label,
                failed: p.failed,
            })
            .collect(),
    }
}

fn write<'a>(e: &'a Entry, components: &ComponentSpans) -> WriteJson<'a> {
    let a = &e.span.attributes;
    WriteJson {
        time: time(e.span.start_time_unix_nano),
        source: e.source.name(),
        verb: string_attr(a, attr::AUDIT_VERB).or_else(|| string_attr(a, attr::WATCH_TYPE)),
        subresource: string_attr(a, attr::AUDIT_SUBRESOURCE).filter(|s| !s.is_empty()),
        user: string_attr(a, attr::AUDIT_USER),
        user_agent: string_attr(a, attr::AUDIT_USER_AGENT),
        code: number(a, attr::AUDIT_CODE),
        audit_id: string_attr(a, attr::AUDIT_ID),
        error: e
            .span
            .status
            .as_ref()
            .filter(|s| s.code == 2)
            .map(|s| s.message.as_str()),
        status: string_attr(a, attr::OBJECT_STATUS),
        diff: e
            .span
            .events
            .iter()
            .filter(|d| d.name == EVENT_DIFF)
            .map(|d| DiffJson {
                op: string_attr(&d.attributes, attr::DIFF_OP),
                path: string_attr(&d.attributes, attr::DIFF_PATH),
                old: string_attr(&d.attributes, attr::DIFF_OLD),
                new: string_attr(&d.attributes, attr::DIFF_NEW),
            })
            .collect(),
        snapshot: snapshot(&e.span),
        request: string_attr(a, attr::AUDIT_ID)
            .and_then(|id| components.of(id))
            .map(request),
    }
}

fn event(e: &Entry) -> EventJson<'_> {
    let a = &e.span.attributes;
    EventJson {
        time: time(e.span.start_time_unix_nano),
        event_type: string_attr(a, attr::EVENT_TYPE),
        reason: string_attr(a, attr::EVENT_REASON),
        message: string_attr(a, attr::EVENT_MESSAGE),
        component: string_attr(a, attr::EVENT_COMPONENT),
        count: number(a, attr::EVENT_COUNT),
        name: string_attr(a, attr::EVENT_NAME),
        repeated_times: number(a, REPEATED_TIMES),
        repeated_until: string_attr(a, REPEATED_UNTIL),
        repeated_count: number(a, REPEATED_COUNT),
    }
}

fn object<'a>(asm: &'a Assembly, i: usize, components: &ComponentSpans) -> ObjectJson<'a> {
    let n = &asm.nodes[i];
    let o = &n.history.object;
    // A shared object shown again is a leaf whose entries are at its first
    // occurrence.
    let entries = if n.copy_of.is_some() {
        &[][..]
    } else {
        &n.history.entries[..]
    };
    let (events, writes): (Vec<&Entry>, Vec<&Entry>) =
        entries.iter().partition(|e| e.source == Source::Event);
    ObjectJson {
        cluster: &o.cluster,
        group: &o.group,
        resource: &o.resource,
        namespace: &o.namespace,
        name: &o.name,
        uid: &n.history.uid,
        searched: i == asm.searched,
        link_class: n.class.as_deref(),
        shared: n.shared,
        shown_elsewhere: n.copy_of.is_some(),
        problem: problem(n),
        hidden_entries: n.history.hidden_entries,
        writes: writes.into_iter().map(|w| write(w, components)).collect(),
        events: events.into_iter().map(event).collect(),
        children: n
            .children
            .iter()
            .map(|&c| object(asm, c, components))
            .collect(),
    }
}

/// The tree of `asm` as one JSON document, each traced write with what its
/// request's trace in `components` says.
pub(crate) fn render_json(
    asm: &Assembly,
    components: &ComponentSpans,
) -> serde_json::Result<String> {
    serde_json::to_string(&TraceJson {
        schema: SCHEMA,
        notes: &asm.notes,
        root: object(asm, 0, components),
    })
}
