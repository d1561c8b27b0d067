//! Wide levels shown in part: under one object, objects of one resource
//! linked by one class beyond `max_siblings` (a Deployment's 1,000 Pods)
//! are summarised by one span, and only the failed ones, the one searched
//! for, the slowest to get ready and the longest-lived are shown in full
//! (a rollout's question is which Pods held it up). A trace of thousands of
//! spans is slow for the Jaeger UI to fetch and unreadable in it; every
//! object left out stays one search away (by its name), and the tag
//! `siblings=all` shows them all.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use opentelemetry_proto::tonic::trace::v1::span::Event;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};

use super::entries::{object_label, span_id};
use crate::analysis::cascade::format_duration;
use crate::frontend::assemble::{Assembly, Node};
use crate::frontend::raw::{kv, kv_int, string_attr};
use crate::span_model::attr;

/// Default of `--max-siblings`: a ReplicaSet's Pods up to this many are
/// all shown.
pub(crate) const DEFAULT_MAX_SIBLINGS: usize = 50;

/// Attribute of a summary span: how many objects it stands for.
pub(crate) const OBJECTS_NOT_SHOWN: &str = "objects.not_shown";

/// Search tag that shows every object of a wide level (`siblings=all`).
pub(crate) const SIBLINGS_TAG: &str = "siblings";

/// The value of the tag [`SIBLINGS_TAG`]: whether every object of a wide
/// level is shown (`all`) or the rest summarised (`summary`, the default).
pub(crate) fn parse_siblings(value: &str) -> Result<bool, String> {
    match value.trim() {
        "all" => Ok(true),
        "summary" => Ok(false),
        other => Err(format!(
            "{} is neither all nor summary",
            crate::messages::quote(other)
        )),
    }
}

/// Objects of one wide level that are not shown.
pub(super) struct Summary {
    pub parent: usize,
    pub class: Option<String>,
    pub resource: String,
    /// Node indices, by start time.
    pub members: Vec<usize>,
    /// Objects of the level that are shown.
    pub shown: usize,
}

/// Which nodes are shown (`hidden[i]` false), and one [`Summary`] per wide
/// level. `max_siblings` 0 shows everything.
pub(super) fn select(
    asm: &Assembly,
    times: &[(u64, u64)],
    errors: &[Option<String>],
    max_siblings: usize,
) -> (Vec<bool>, Vec<Summary>) {
    let mut hidden = vec![false; asm.nodes.len()];
    let mut summaries = Vec::new();
    if max_siblings == 0 {
        return (hidden, summaries);
    }
    // Parents before their children: the children of an object not shown
    // are not shown either, and get no summary (it would have no parent).
    for (p, _) in asm.walk() {
        let node = &asm.nodes[p];
        if hidden[p] || node.children.len() <= max_siblings {
            continue;
        }
        let mut levels: BTreeMap<(&str, Option<&str>), Vec<usize>> = BTreeMap::new();
        for &c in &node.children {
            let child = &asm.nodes[c];
            levels
                .entry((&child.history.object.resource, child.class.as_deref()))
                .or_default()
                .push(c);
        }
        for ((resource, class), mut level) in levels {
            if level.len() <= max_siblings {
                continue;
            }
            // Shown first: the path to the searched object, then failures
            // (its own or below it; one never ready is one), then the
            // slowest to get ready, then the longest-lived (objects without
            // a readiness, a ConfigMap's).
            level.sort_by_cached_key(|&i| {
                (
                    !asm.on_searched_path(i),
                    errors[i].is_none(),
                    std::cmp::Reverse(ready_after(&asm.nodes[i]).unwrap_or(0)),
                    std::cmp::Reverse(times[i].1.saturating_sub(times[i].0)),
                    i,
                )
            });
            let mut members = level.split_off(max_siblings);
            members.sort_by_key(|&i| (times[i].0, i));
            for &m in &members {
                hide_subtree(m, |i| &asm.nodes[i].children, &mut hidden);
            }
            summaries.push(Summary {
                parent: p,
                class: class.map(str::to_string),
                resource: resource.to_string(),
                members,
                shown: max_siblings,
            });
        }
    }
    (hidden, summaries)
}

/// How long `n` took to get ready: from the start of its first entry to
/// the end of the first write that left it `Current` (the collector's
/// readiness, `object.status`); `None` when no entry did.
pub(super) fn ready_after(n: &Node) -> Option<u64> {
    let first = n.history.entries.first()?.span.start_time_unix_nano;
    let ready = n
        .history
        .entries
        .iter()
        .find(|e| string_attr(&e.span.attributes, attr::OBJECT_STATUS) == Some("Current"))?;
    Some(ready.span.end_time_unix_nano.saturating_sub(first))
}

/// Marks `root` and everything below it hidden; `children(i)` are the
/// indices below `i` (an assembly's objects, a cascade's writes).
pub(super) fn hide_subtree<'a>(
    root: usize,
    children: impl Fn(usize) -> &'a [usize],
    hidden: &mut [bool],
) {
    let mut stack = vec![root];
    while let Some(i) = stack.pop() {
        hidden[i] = true;
        stack.extend(children(i).iter().copied());
    }
}

/// p50, p90 and the largest of `nanos` (not empty), as durations to read.
pub(super) fn spread(mut nanos: Vec<u64>) -> [String; 3] {
    nanos.sort_unstable();
    [0.5, 0.9, 1.0].map(|q| {
        let at = ((nanos.len() - 1) as f64 * q).round() as usize;
        format_duration(Duration::from_nanos(nanos[at]))
    })
}

/// The span standing for `s`'s objects: named by their count, spanning
/// their times, with one log per object (its name and how long it was
/// active) and the spread of those durations.
pub(super) fn summary_span(
    asm: &Assembly,
    s: &Summary,
    times: &[(u64, u64)],
    errors: &[Option<String>],
    trace_id: &[u8],
    parent_span_id: Vec<u8>,
) -> Span {
    let shown = s.shown;
    let parent = &asm.nodes[s.parent];
    let class = s.class.as_deref().unwrap_or("");
    let seed = format!(
        "{}|{}|{class}|not shown",
        parent.history.object.key(),
        s.resource
    );
    let start = s.members.iter().map(|&i| times[i].0).min().unwrap_or(0);
    let end = s.members.iter().map(|&i| times[i].1).max().unwrap_or(start);
    let [p50, p90, max] = spread(
        s.members
            .iter()
            .map(|&i| times[i].1.saturating_sub(times[i].0))
            .collect(),
    );
    let failed = s.members.iter().filter(|&&i| errors[i].is_some()).count();
    let ready: Vec<Option<u64>> = s
        .members
        .iter()
        .map(|&i| ready_after(&asm.nodes[i]))
        .collect();
    let n = s.members.len();
    let mut attributes = vec![
        kv("resource", s.resource.clone()),
        kv_int(OBJECTS_NOT_SHOWN, n as i64),
        kv_int("objects.shown", shown as i64),
        kv("duration.p50", p50),
        kv("duration.p90", p90),
        kv("duration.max", max),
        kv(
            "note",
            format!(
                "{n} of {} {} not shown: the failed, the slowest to get ready and the \
                 longest-lived are; search one by its name, or add the tag \
                 {SIBLINGS_TAG}=all to show them all",
                n + shown,
                s.resource
            ),
        ),
    ];
    if failed > 0 {
        attributes.push(kv_int("objects.failed", failed as i64));
    }
    let got_ready: Vec<u64> = ready.iter().flatten().copied().collect();
    if !got_ready.is_empty() {
        let [p50, p90, max] = spread(got_ready);
        attributes.extend([
            kv("ready_after.p50", p50),
            kv("ready_after.p90", p90),
            kv("ready_after.max", max),
        ]);
    }
    if let Some(c) = &s.class {
        attributes.push(kv("relation", c.clone()));
    }
    let events = s
        .members
        .iter()
        .zip(&ready)
        .map(|(&i, ready)| {
            let (from, to) = times[i];
            let mut attributes = vec![kv(
                "active",
                format_duration(Duration::from_nanos(to.saturating_sub(from))),
            )];
            if let Some(r) = ready {
                attributes.push(kv("ready_after", format_duration(Duration::from_nanos(*r))));
            }
            if let Some(e) = &errors[i] {
                attributes.push(kv("error", e.clone()));
            }
            Event {
                time_unix_nano: from,
                name: object_label(&asm.nodes[i], Some(parent)),
                attributes,
                ..Default::default()
            }
        })
        .collect();
    Span {
        trace_id: trace_id.to_vec(),
        span_id: span_id(&seed, 0x6e73),
        parent_span_id,
        name: format!("{n} more {}", s.resource),
        kind: 1, // internal
        start_time_unix_nano: start,
        end_time_unix_nano: end.max(start),
        attributes,
        events,
        status: (failed > 0).then(|| Status {
            message: format!("{failed} of the {} not shown failed", s.resource),
            code: StatusCode::Error as i32,
        }),
        ..Default::default()
    }
}

/// A wide level as the terminal shows it (`kascade trace`): which objects
/// are left out, and one line per level standing for them.
pub(crate) struct TextSelection {
    /// `hidden[i]`: node `i` (and so its subtree) is not shown.
    pub hidden: Vec<bool>,
    /// (parent node, the line shown last under it), by parent in walk order.
    pub summaries: Vec<(usize, String)>,
}

/// [`select`] for the terminal: the same objects shown as in the Jaeger UI,
/// each wide level's rest said in one line (how many, failed, how long
/// they were active and took to get ready, the first of them by name).
/// `max_siblings` 0 shows everything.
pub(crate) fn select_for_text(asm: &Assembly, max_siblings: usize) -> TextSelection {
    let times = super::object_times(asm);
    let errors = super::entries::error_statuses(asm);
    let (hidden, summaries) = select(asm, &times, &errors, max_siblings);
    let summaries = summaries
        .iter()
        .map(|s| (s.parent, summary_line(asm, s, &times, &errors)))
        .collect();
    TextSelection { hidden, summaries }
}

fn summary_line(
    asm: &Assembly,
    s: &Summary,
    times: &[(u64, u64)],
    errors: &[Option<String>],
) -> String {
    let n = s.members.len();
    let mut line = format!("… {n} more {}", s.resource);
    if let Some(c) = &s.class {
        let _ = write!(line, "  [{c}]");
    }
    let _ = write!(line, "  (not shown: {n} of {})", n + s.shown);
    let failed = s.members.iter().filter(|&&i| errors[i].is_some()).count();
    if failed > 0 {
        let _ = write!(line, "  ✗ {failed} failed");
    }
    let [p50, p90, max] = spread(
        s.members
            .iter()
            .map(|&i| times[i].1.saturating_sub(times[i].0))
            .collect(),
    );
    let _ = write!(line, "  active p50 {p50}, p90 {p90}, max {max}");
    let ready: Vec<u64> = s
        .members
        .iter()
        .filter_map(|&i| ready_after(&asm.nodes[i]))
        .collect();
    if !ready.is_empty() {
        let [p50, p90, max] = spread(ready);
        let _ = write!(line, "; ready after p50 {p50}, p90 {p90}, max {max}");
    }
    // Named so that one is a `kascade trace --name` away.
    let first = &asm.nodes[s.members[0]].history.object;
    let _ = write!(line, "; first {}", first.name);
    if n > 1 {
        let last = &asm.nodes[s.members[n - 1]].history.object;
        let _ = write!(line, ", last {}", last.name);
    }
    line.push_str("; --max-siblings 0 shows all");
    line
}
