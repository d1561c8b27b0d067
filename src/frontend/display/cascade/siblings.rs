//! Wide levels of a cascade shown in part: beyond `max_siblings` writes of
//! one verb on one resource caused by one write (a ReplicaSet's 1,000 Pod
//! creates), only the ones on the way to the searched object, the critical
//! path, the failed and the latest to settle are shown with what they
//! caused; one span stands for the rest, naming each write in its logs.
//! The tag `siblings=all` shows them all, as in the other modes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use opentelemetry_proto::tonic::trace::v1::span::Event;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};

use super::super::entries::span_id;
use super::super::siblings::{SIBLINGS_TAG, hide_subtree, spread};
use super::failure_message;
use super::summary::{Folded, Summary};
use crate::analysis::cascade::write_failed;
use crate::analysis::cascade::{Attempt, Cascade, InPart, format_duration};
use crate::frontend::raw::{kv, kv_int, nanos};
use crate::model::ObjectRef;
use crate::span_model::attr;

/// Attribute of a summary span: how many writes of its level it stands for.
pub(crate) const WRITES_NOT_SHOWN: &str = "writes.not_shown";

/// What each change's subtree (itself and what it caused) holds.
pub(super) struct Subtrees {
    /// A write in it failed unexpectedly.
    failed: Vec<bool>,
    /// It writes the searched object.
    searched: Vec<bool>,
    /// Writes in it.
    size: Vec<usize>,
}

impl Subtrees {
    pub(super) fn of(c: &Cascade, searched: Option<&ObjectRef>) -> Subtrees {
        let n = c.changes.len();
        let mut t = Subtrees {
            failed: c.changes.iter().map(write_failed).collect(),
            searched: c
                .changes
                .iter()
                .map(|ch| searched == Some(&ch.object))
                .collect(),
            size: vec![1; n],
        };
        // The walk visits causes before their effects: gather bottom-up.
        for &(i, _) in c.walk().iter().rev() {
            if let Some(p) = c.parent[i] {
                t.failed[p] |= t.failed[i];
                t.searched[p] |= t.searched[i];
                t.size[p] += t.size[i];
            }
        }
        t
    }
}

/// Which changes are shown (`hidden[i]` false), and one [`Summary`] per
/// wide level. `max_siblings` 0 shows everything.
pub(super) fn select(
    c: &Cascade,
    times: &[(u64, u64)],
    subtrees: &Subtrees,
    max_siblings: usize,
) -> (Vec<bool>, Vec<Summary>) {
    let mut hidden = vec![false; c.changes.len()];
    let mut summaries = Vec::new();
    if max_siblings == 0 {
        return (hidden, summaries);
    }
    let mut critical = vec![false; c.changes.len()];
    for &i in &c.critical_path {
        critical[i] = true;
    }
    // Causes before their effects: what a hidden write caused is hidden
    // with it and gets no summary of its own (it would have no parent).
    for (p, _) in c.walk() {
        if hidden[p] || c.children[p].len() <= max_siblings {
            continue;
        }
        let mut levels: BTreeMap<(&str, &str, &str), Vec<usize>> = BTreeMap::new();
        for &i in &c.children[p] {
            let ch = &c.changes[i];
            levels
                .entry((&ch.object.resource, &ch.verb, &ch.subresource))
                .or_default()
                .push(i);
        }
        for ((resource, verb, subresource), mut level) in levels {
            if level.len() <= max_siblings {
                continue;
            }
            level.sort_by_key(|&i| {
                (
                    !subtrees.searched[i],
                    !critical[i],
                    !subtrees.failed[i],
                    std::cmp::Reverse(times[i].1),
                    i,
                )
            });
            let mut members = level.split_off(max_siblings);
            members.sort_by_key(|&i| (c.changes[i].received, i));
            for &m in &members {
                hide_subtree(m, |i| &c.children[i], &mut hidden);
            }
            summaries.push(Summary {
                parent: p,
                resource: resource.to_string(),
                verb: verb.to_string(),
                subresource: subresource.to_string(),
                members,
                shown: max_siblings,
                folded: Folded::Level,
            });
        }
    }
    super::retries::fold(c, &mut hidden, &mut summaries);
    (hidden, summaries)
}

/// The span standing for `s`'s writes: named by their count, verb and
/// resource, spanning their times (each from its cause's response to the
/// last write it caused), with the spread of their hops and durations and
/// one log per write.
pub(super) fn summary_span(
    c: &Cascade,
    s: &Summary,
    times: &[(u64, u64)],
    subtrees: &Subtrees,
    trace_id: &[u8],
    parent_span_id: Vec<u8>,
) -> Span {
    let n = s.members.len();
    let what = if s.subresource.is_empty() {
        format!("{} {}", s.verb, s.resource)
    } else {
        format!("{} {} {}", s.verb, s.subresource, s.resource)
    };
    let start = s.members.iter().map(|&i| times[i].0).min().unwrap_or(0);
    let end = s.members.iter().map(|&i| times[i].1).max().unwrap_or(start);
    let below: usize = s.members.iter().map(|&i| subtrees.size[i] - 1).sum();
    let failed = s.members.iter().filter(|&&i| subtrees.failed[i]).count();
    let ([h50, h90, hmax], [d50, d90, dmax]) = hops_and_durations(c, s, times);
    // A run of retries waited back-off between its attempts, which is what
    // tells them apart: their hop is the first attempt's.
    let (spread_of, note) = match s.folded {
        Folded::Level => (
            "cascade.hop",
            format!(
                "{n} of the {} {what} writes this write caused are not shown, nor the \
                 {below} writes they caused: the critical path, the failed and the latest \
                 to settle are; add the tag {SIBLINGS_TAG}=all to show them all",
                n + s.shown
            ),
        ),
        Folded::Retries { from, to } => (
            "cascade.backoff",
            format!(
                "retries {from}–{to} of this {what}, each after a back-off (in its log), are \
                 not shown{}: the first attempt, retry 2 and the last retry are; add the tag \
                 {SIBLINGS_TAG}=all to show them all",
                if below > 0 {
                    format!(", nor the {below} writes they caused")
                } else {
                    String::new()
                }
            ),
        ),
    };
    let [s50, s90, smax] = match s.folded {
        Folded::Level => [h50, h90, hmax],
        Folded::Retries { .. } => backoffs(c, s),
    };
    let mut attributes = vec![
        kv(attr::RESOURCE, s.resource.clone()),
        kv(attr::AUDIT_VERB, s.verb.clone()),
        kv_int(WRITES_NOT_SHOWN, n as i64),
        kv_int("writes.shown", s.shown as i64),
        kv_int("writes.below_not_shown", below as i64),
        kv(&format!("{spread_of}.p50"), s50),
        kv(&format!("{spread_of}.p90"), s90),
        kv(&format!("{spread_of}.max"), smax),
        kv("duration.p50", d50),
        kv("duration.p90", d90),
        kv("duration.max", dmax),
        kv("note", note),
    ];
    if !s.subresource.is_empty() {
        attributes.push(kv(attr::AUDIT_SUBRESOURCE, s.subresource.clone()));
    }
    if failed > 0 {
        attributes.push(kv_int("writes.failed", failed as i64));
    }
    let events = s
        .members
        .iter()
        .map(|&i| {
            let ch = &c.changes[i];
            let (from, to) = times[i];
            let mut attributes = vec![kv(
                "duration",
                format_duration(std::time::Duration::from_nanos(to.saturating_sub(from))),
            )];
            match (&ch.cause, c.attempts[i]) {
                // A retry's wait is back-off, not a hop.
                (
                    _,
                    Attempt::Retry {
                        attempt, backoff, ..
                    },
                ) => {
                    attributes.push(kv_int("cascade.attempt", i64::from(attempt)));
                    attributes.push(kv("cascade.backoff", format_duration(backoff)));
                }
                (Some(k), Attempt::First) => {
                    let hop = c.hop(i).unwrap_or(k.hop);
                    attributes.push(kv("cascade.hop", format_duration(hop)));
                }
                (None, _) => {}
            }
            if subtrees.size[i] > 1 {
                attributes.push(kv_int("writes.caused", subtrees.size[i] as i64 - 1));
            }
            if write_failed(ch) {
                attributes.push(kv("error", failure_message(ch)));
            } else if subtrees.failed[i] {
                attributes.push(kv("error", "a write it caused failed"));
            }
            Event {
                time_unix_nano: nanos(ch.received),
                name: crate::analysis::cascade::short_change_name(ch),
                attributes,
                ..Default::default()
            }
        })
        .collect();
    let (seed, name) = match s.folded {
        Folded::Level => (
            format!("{}|{what}|not shown", c.changes[s.parent].span.span_hex()),
            format!("{n} more {what}"),
        ),
        Folded::Retries { from, to } => (
            format!(
                "{}|{what}|retries {from}",
                c.changes[s.parent].span.span_hex()
            ),
            format!("{n} more attempts of {what} (retries {from}–{to})"),
        ),
    };
    Span {
        trace_id: trace_id.to_vec(),
        span_id: span_id(&seed, 0x6e74),
        parent_span_id,
        name,
        kind: 1, // internal
        start_time_unix_nano: start,
        end_time_unix_nano: end.max(start),
        attributes,
        events,
        status: (failed > 0).then(|| Status {
            message: format!("{failed} of the {what} writes not shown failed, or what they caused"),
            code: StatusCode::Error as i32,
        }),
        ..Default::default()
    }
}

/// [`select`] for the terminal (`kascade trace --mode cascade`): the same
/// writes shown as in the Jaeger UI, each wide level's rest said in one
/// line (how many, what they caused, failed, the spread of their hops and
/// durations, the first and last of them).
pub(crate) fn select_for_text(
    c: &Cascade,
    searched: Option<&ObjectRef>,
    max_siblings: usize,
) -> InPart {
    let times = super::span_times(c);
    let subtrees = Subtrees::of(c, searched);
    let (hidden, summaries) = select(c, &times, &subtrees, max_siblings);
    let rest = summaries
        .iter()
        .map(|s| (s.parent, summary_line(c, s, &times, &subtrees)))
        .collect();
    InPart { hidden, rest }
}

fn summary_line(c: &Cascade, s: &Summary, times: &[(u64, u64)], subtrees: &Subtrees) -> String {
    let n = s.members.len();
    let what = if s.subresource.is_empty() {
        format!("{} {}", s.verb, s.resource)
    } else {
        format!("{} {} {}", s.verb, s.subresource, s.resource)
    };
    let below: usize = s.members.iter().map(|&i| subtrees.size[i] - 1).sum();
    let mut line = match s.folded {
        Folded::Level => format!("… {n} more {what}  (not shown: {n} of {}", n + s.shown),
        Folded::Retries { from, to } => {
            format!("… {n} more attempts of {what}  (not shown: retries {from}–{to}")
        }
    };
    if below > 0 {
        let _ = write!(line, ", and the {below} writes they caused");
    }
    line.push(')');
    let failed = s.members.iter().filter(|&&i| subtrees.failed[i]).count();
    if failed > 0 {
        let _ = write!(line, "  ✗ {failed} failed, or what they caused");
    }
    if let Folded::Retries { .. } = s.folded {
        let [b50, b90, bmax] = backoffs(c, s);
        let _ = write!(
            line,
            "  back-off p50 {b50}, p90 {b90}, max {bmax}; --max-siblings 0 shows all"
        );
        return line;
    }
    let ([h50, h90, hmax], [d50, d90, dmax]) = hops_and_durations(c, s, times);
    let _ = write!(
        line,
        "  hop p50 {h50}, p90 {h90}, max {hmax}; duration p50 {d50}, p90 {d90}, max {dmax}"
    );
    let _ = write!(line, "; first {}", c.changes[s.members[0]].object.name);
    if n > 1 {
        let _ = write!(line, ", last {}", c.changes[s.members[n - 1]].object.name);
    }
    line.push_str("; --max-siblings 0 shows all");
    line
}

/// The spread (p50, p90, largest) of the back-offs `s`'s retries waited.
fn backoffs(c: &Cascade, s: &Summary) -> [String; 3] {
    spread(
        s.members
            .iter()
            .map(|&i| match c.attempts[i] {
                Attempt::Retry { backoff, .. } => backoff.as_nanos() as u64,
                Attempt::First => 0,
            })
            .collect(),
    )
}

/// The spread (p50, p90, largest) of `s`'s writes' hops from their cause,
/// and of their durations (to the last write each caused).
fn hops_and_durations(
    c: &Cascade,
    s: &Summary,
    times: &[(u64, u64)],
) -> ([String; 3], [String; 3]) {
    // Retries' waits are back-off: the hops are the first attempts'.
    let hops = s
        .members
        .iter()
        .map(|&i| match c.attempts[i] {
            Attempt::Retry { first_hop, .. } => first_hop.as_nanos() as u64,
            Attempt::First => c.hop(i).map_or(0, |hop| hop.as_nanos() as u64),
        })
        .collect();
    let durations = s
        .members
        .iter()
        .map(|&i| times[i].1.saturating_sub(times[i].0))
        .collect();
    (spread(hops), spread(durations))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::cascade::build;
    use crate::analysis::cascade::testing::{caused_by, change, obj};

    /// A ReplicaSet scaled to 60: each Pod create is followed by its
    /// binding; the binding of one early Pod is refused and that Pod never
    /// runs, the others bind and get ready one after the other, each create
    /// long after the one before was answered (not a batch waiting for the
    /// previous one, which would put them all on the critical path). The refused
    /// one is neither on the critical path nor among the latest to settle,
    /// so only the rule "the failed are shown" keeps it in sight (no
    /// captured scenario has such a level: in each, the write that failed
    /// is also the latest or on the critical path).
    fn scale_with_one_refused_binding() -> (Cascade, usize) {
        let scale = change(1, obj("replicasets", "web-1"), "patch", 0, 2, None);
        let mut records = vec![scale.clone()];
        let mut refused_create = None;
        for p in 0..60u8 {
            let name = format!("web-1-{p:02}");
            let at = 10 + u64::from(p) * 100;
            let create = caused_by(
                change(
                    2 + 3 * p,
                    obj("pods", &name),
                    "create",
                    at,
                    at + 1,
                    Some(("InProgress", "Pending")),
                ),
                &scale,
                "replicasets → pods create",
            );
            let mut bind = caused_by(
                change(
                    3 + 3 * p,
                    obj("pods", &name),
                    "create",
                    at + 2,
                    at + 3,
                    None,
                ),
                &create,
                "pods binding",
            );
            bind.subresource = "binding".into();
            if p == 3 {
                bind.code = 403;
                bind.failure = Some("binding refused by policy".into());
                refused_create = Some(create.span);
                records.extend([create, bind]);
                continue;
            }
            let running = caused_by(
                change(
                    4 + 3 * p,
                    obj("pods", &name),
                    "patch",
                    at + 5,
                    at + 6,
                    Some(("Current", "Running, ready")),
                ),
                &bind,
                "pods → Running",
            );
            records.extend([create, bind, running]);
        }
        let cascade = build(records).remove(0);
        let refused = cascade
            .changes
            .iter()
            .position(|c| Some(c.span) == refused_create)
            .unwrap();
        (cascade, refused)
    }

    #[test]
    fn a_failed_write_of_a_wide_level_is_shown_though_it_settled_early_off_the_critical_path() {
        let (c, refused) = scale_with_one_refused_binding();
        assert!(!c.critical_path.contains(&refused));
        let shown = select_for_text(&c, None, 50);
        assert!(
            !shown.hidden[refused],
            "the create whose binding was refused is summarised away"
        );
        // Its refused binding is shown under it.
        let binding = c.children[refused][0];
        assert_eq!(c.changes[binding].code, 403);
        assert!(!shown.hidden[binding]);
        // The level keeps 50 creates: the failed one and the 49 that settled
        // last; the 10 hidden are the earliest of the others, none failed.
        let creates = &c.children[0];
        assert_eq!(creates.len(), 60);
        let hidden: Vec<&str> = creates
            .iter()
            .filter(|&&i| shown.hidden[i])
            .map(|&i| c.changes[i].object.name.as_str())
            .collect();
        let expected: Vec<String> = (0..11u8)
            .filter(|&p| p != 3)
            .map(|p| format!("web-1-{p:02}"))
            .collect();
        assert_eq!(hidden, expected);
        assert_eq!(shown.rest.len(), 1);
        assert!(!shown.rest[0].1.contains("failed"), "{}", shown.rest[0].1);
    }
}
