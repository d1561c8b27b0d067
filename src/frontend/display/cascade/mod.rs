//! Display mode `cascade`: each cascade's root write is a root span, each
//! write it caused a child of its cause's span, lasting from the cause's
//! response to the effect's, so the timeline shows where the time went.
//! Service = the written object's resource, as in the other modes.

use std::collections::HashMap;

use opentelemetry_proto::tonic::trace::v1::span::Event;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, Span, Status};

use super::{Out, span_id};
use crate::analysis::cascade::{
    Attempt, Cascade, Completion, change_name, format_duration, short_change_name, write_failed,
};
use crate::flow::ChangeRecord;
use crate::frontend::raw::{TraceIdBytes, kv, kv_int, nanos};
use crate::model::ObjectRef;
use crate::span_model::attr;

mod retries;
mod siblings;
mod summary;
pub(crate) use siblings::{WRITES_NOT_SHOWN, select_for_text};

/// Marks the critical path in span names.
pub const CRITICAL_MARK: &str = "★ ";

/// Why a write failed: the apiserver's refusal when the span carries it.
fn failure_message(ch: &ChangeRecord) -> String {
    match &ch.failure {
        Some(m) => format!("request failed with {}: {m}", ch.code),
        None => format!("request failed with {}", ch.code),
    }
}

/// Each change's span (ns): from its cause's response completed (the
/// root and retries: its own request received) to its own response completed, widened
/// to cover the spans it caused, and the root to the completion, so every
/// span lies within its parent (Jaeger adjusts spans that do not, taking
/// them for clock skew). The request and response are events on the span.
fn span_times(c: &Cascade) -> Vec<(u64, u64)> {
    let mut end: Vec<u64> = c.changes.iter().map(|ch| nanos(ch.completed)).collect();
    if let Completion::Complete { at } = &c.completion {
        end[0] = end[0].max(nanos(*at));
    }
    // The walk visits causes before their effects: widen bottom-up.
    let walk = c.walk();
    for &(i, _) in walk.iter().rev() {
        if let Some(p) = c.parent[i] {
            end[p] = end[p].max(end[i]);
        }
    }
    let mut times = vec![(0u64, 0u64); c.changes.len()];
    for &(i, _) in &walk {
        times[i] = match c.parent[i] {
            None => {
                let s = nanos(c.changes[i].received).min(end[i]);
                (s, end[i])
            }
            // A retry spans its own request: the wait before it is its
            // writer's back-off, not a hop.
            Some(p) if c.attempts[i].is_retry() => {
                let (ps, _) = times[p];
                let s = nanos(c.changes[i].received).min(end[i]).max(ps);
                (s, end[i].max(s))
            }
            Some(p) => {
                let (ps, _) = times[p];
                let s = nanos(c.changes[p].completed).min(end[i]).max(ps);
                (s, end[i].max(s))
            }
        };
    }
    times
}

/// Lays the cascades out as spans of one trace with id `trace_id`, `notes`
/// on the first root. Beyond `max_siblings` writes of one verb on one
/// resource caused by one write, the rest (and what they caused) are
/// summarised by one span, the writes of `searched` kept (0 shows all).
pub(crate) fn render(
    cascades: &[Cascade],
    trace_id: &TraceIdBytes,
    notes: &[String],
    searched: Option<&ObjectRef>,
    max_siblings: usize,
    fought: &HashMap<Vec<u8>, String>,
) -> Vec<ResourceSpans> {
    let mut out = Out::default();
    // Several cascades hang under one span that names the one that matters
    // (the title in Jaeger's search results and at the top of the trace).
    let top = (cascades.len() > 1).then(|| headline(cascades, fought, trace_id, searched));
    let top_id = top
        .as_ref()
        .map(|(s, _, _)| s.span_id.clone())
        .unwrap_or_default();
    // The critical path is drawn on the cascade the trace is titled by.
    let titled = top.as_ref().map_or(0, |(_, _, n)| *n);
    for (n, c) in cascades.iter().enumerate() {
        let root = c.root();
        let ids: Vec<Vec<u8>> = c
            .changes
            .iter()
            .map(|ch| span_id(&ch.span.span_hex(), 0x6361))
            .collect();
        let last_end = c
            .changes
            .iter()
            .map(|ch| ch.completed)
            .max()
            .unwrap_or(root.completed);
        let times = span_times(c);
        let subtrees = siblings::Subtrees::of(c, searched);
        let (hidden, summaries) = siblings::select(c, &times, &subtrees, max_siblings);
        for s in &summaries {
            let span =
                siblings::summary_span(c, s, &times, &subtrees, trace_id, ids[s.parent].clone());
            out.push(&s.resource, span);
        }
        for (i, ch) in c.changes.iter().enumerate() {
            if hidden[i] {
                continue;
            }
            let critical = n == titled && c.is_critical(i) && c.changes.len() > 1;
            let o = &ch.object;
            let mut attributes = vec![
                kv(attr::CLUSTER, o.cluster.clone()),
                kv(attr::RESOURCE, o.resource.clone()),
                kv(attr::NAMESPACE, o.namespace.clone()),
                kv(attr::NAME, o.name.clone()),
                kv(
                    if ch.user.is_empty() {
                        attr::WATCH_TYPE
                    } else {
                        attr::AUDIT_USER
                    },
                    if ch.user.is_empty() {
                        ch.verb.clone()
                    } else {
                        ch.user.clone()
                    },
                ),
                kv(attr::AUDIT_VERB, ch.verb.clone()),
                kv_int(attr::AUDIT_CODE, i64::from(ch.code)),
                kv("cascade.depth", i64::from(ch.depth).to_string()),
                kv("cascade.critical_path", critical.to_string()),
                kv(
                    "request.received",
                    humantime::format_rfc3339_micros(ch.received).to_string(),
                ),
                kv(
                    "response.completed",
                    humantime::format_rfc3339_micros(ch.completed).to_string(),
                ),
            ];
            if !o.group.is_empty() {
                attributes.insert(1, kv(attr::GROUP, o.group.clone()));
            }
            // A cluster-scoped object has no namespace: no empty tag.
            attributes.retain(|a| !super::entries::is_empty(a));
            if !ch.subresource.is_empty() {
                attributes.push(kv(attr::AUDIT_SUBRESOURCE, ch.subresource.clone()));
            }
            if let Some(r) = &ch.readiness {
                attributes.push(kv(attr::OBJECT_STATUS, r.status.clone()));
                if !r.message.is_empty() {
                    attributes.push(kv(attr::OBJECT_STATUS_MESSAGE, r.message.clone()));
                }
            }
            if ch.deleted {
                attributes.push(kv(attr::OBJECT_REMOVED, "true"));
            }
            if !ch.audit_id.is_empty() {
                // Joins the apiserver's own spans of the request (components.rs).
                attributes.push(kv(attr::AUDIT_ID, ch.audit_id.clone()));
            }
            if let Some(c) = &ch.cpid {
                attributes.push(kv(attr::CPID, c.cpid.to_string()));
                attributes.push(kv(attr::CPID_ORIGIN, c.origin.as_str()));
            }
            let mut events = Vec::new();
            let mut status = if write_failed(ch) {
                Some(Status {
                    message: failure_message(ch),
                    code: StatusCode::Error as i32,
                })
            } else if let Some(m) = fought.get(ch.span.span_id.as_slice()) {
                Some(Status {
                    message: format!("writers fight: {m}"),
                    code: StatusCode::Error as i32,
                })
            } else {
                left_failed(c, i).map(|message| Status {
                    message,
                    code: StatusCode::Error as i32,
                })
            };
            let parent = c.parent[i]
                .map(|p| ids[p].clone())
                .unwrap_or_else(|| top_id.clone());
            let (start, end) = times[i];
            events.push(Event {
                time_unix_nano: nanos(ch.completed),
                name: format!("response completed ({})", ch.code),
                ..Default::default()
            });
            match (&ch.cause, c.attempts[i]) {
                (
                    Some(k),
                    Attempt::Retry {
                        attempt,
                        backoff,
                        waited,
                        first_hop,
                    },
                ) => {
                    attributes.push(kv("cascade.edge", k.edge.clone()));
                    attributes.push(kv("cascade.rule", k.rule.clone()));
                    // No hop of its own: its wait is back-off. The first
                    // attempt's hop under another name, so that no one
                    // reads it as this request's.
                    attributes.push(kv_int("cascade.first_hop_us", first_hop.as_micros() as i64));
                    attributes.push(kv("cascade.first_hop", format_duration(first_hop)));
                    attributes.push(kv_int("cascade.attempt", i64::from(attempt)));
                    attributes.push(kv_int("cascade.backoff_us", backoff.as_micros() as i64));
                    attributes.push(kv("cascade.backoff", format_duration(backoff)));
                    events.push(Event {
                        time_unix_nano: nanos(ch.received),
                        name: format!(
                            "request received: attempt {attempt}, after a back-off of {} ({} since the first attempt)",
                            format_duration(backoff),
                            format_duration(waited)
                        ),
                        ..Default::default()
                    });
                }
                (Some(k), Attempt::First) => {
                    attributes.push(kv("cascade.edge", k.edge.clone()));
                    attributes.push(kv("cascade.rule", k.rule.clone()));
                    // A later batch's hop counts from the answer it waited
                    // for; the cause's is kept under another name.
                    let hop = c.hop(i).unwrap_or(k.hop);
                    let after = c.after_sibling[i].map(|j| {
                        (
                            hop,
                            crate::analysis::cascade::short_change_name(&c.changes[j]),
                        )
                    });
                    attributes.push(kv_int("cascade.hop_us", hop.as_micros() as i64));
                    attributes.push(kv("cascade.hop", format_duration(hop)));
                    let received = match &after {
                        Some((gap, sibling)) => {
                            attributes.push(kv("cascade.after", sibling.clone()));
                            attributes
                                .push(kv_int("cascade.cause_hop_us", k.hop.as_micros() as i64));
                            attributes.push(kv("cascade.cause_hop", format_duration(k.hop)));
                            format!(
                                "request received ({} after its writer's previous create was answered: {sibling}; {} after the cause)",
                                format_duration(*gap),
                                format_duration(k.hop)
                            )
                        }
                        None => format!(
                            "request received ({} after the cause)",
                            format_duration(k.hop)
                        ),
                    };
                    events.push(Event {
                        time_unix_nano: nanos(ch.received),
                        name: received,
                        ..Default::default()
                    });
                }
                (None, _) => {}
            }
            if i == 0 {
                attributes.push(kv("cascade.writes", c.changes.len().to_string()));
                if let Some(t) = &ch.timer {
                    attributes.push(kv(attr::CASCADE_TIMER, t.clone()));
                }
                if let Some(k) = &c.missing_cause {
                    attributes.push(kv(
                        "cascade.partial",
                        format!("caused by {} ({}), not in range", k.name, k.edge),
                    ));
                }
                match &c.completion {
                    Completion::Complete { at } => {
                        let after = at.duration_since(root.received).unwrap_or_default();
                        attributes.push(kv("cascade.complete", "true"));
                        attributes.push(kv("cascade.completion", format_duration(after)));
                        attributes.push(kv_int("cascade.completion_us", after.as_micros() as i64));
                        attributes.push(kv(
                            "cascade.completed_at",
                            humantime::format_rfc3339_micros(*at).to_string(),
                        ));
                        events.push(Event {
                            time_unix_nano: nanos(*at),
                            name: format!(
                                "complete: every object settled, {} after the root write",
                                format_duration(after)
                            ),
                            ..Default::default()
                        });
                    }
                    Completion::Waiting(w) => {
                        let waiting: Vec<String> = w.iter().map(ToString::to_string).collect();
                        attributes.push(kv("cascade.complete", "false"));
                        attributes.push(kv("cascade.waiting_for", waiting.join("; ")));
                        for x in &waiting {
                            events.push(Event {
                                time_unix_nano: nanos(last_end),
                                name: format!("waiting for {x}"),
                                ..Default::default()
                            });
                        }
                        status = Some(Status {
                            message: format!("not complete: waiting for {}", waiting.join("; ")),
                            code: StatusCode::Error as i32,
                        });
                    }
                    // Said, not marked as an error: nothing shows it went
                    // wrong.
                    Completion::NotKnown(w) => {
                        let text = crate::analysis::cascade::not_known_text(w);
                        attributes.push(kv("cascade.complete", "not known"));
                        attributes.push(kv("cascade.not_known", text.clone()));
                        events.push(Event {
                            time_unix_nano: nanos(last_end),
                            name: text,
                            ..Default::default()
                        });
                    }
                }
                if n == 0 {
                    for note in notes {
                        attributes.push(kv("note", note.clone()));
                    }
                }
            }
            let retry = match c.attempts[i] {
                Attempt::Retry { attempt, .. } => format!("retry {attempt}: "),
                Attempt::First => String::new(),
            };
            let timer = match (&ch.timer, i) {
                (Some(t), 0) => format!("timer {t}: "),
                _ => String::new(),
            };
            // The one root is the trace's title: it says whether its cascade
            // went wrong, as the span above several cascades does.
            let alone_failing = i == 0 && top.is_none() && failing(c, fought);
            let mut name = format!(
                "{}{}{retry}{timer}{}",
                if critical { CRITICAL_MARK } else { "" },
                if alone_failing { "failing: " } else { "" },
                short_change_name(ch)
            );
            if alone_failing && status.is_none() {
                status = Some(Status {
                    message: what_went_wrong(c, fought),
                    code: StatusCode::Error as i32,
                });
            }
            // The one root is the trace's title: it names the object
            // searched for when that is not the root's, as the other modes'
            // roots do.
            if i == 0
                && top.is_none()
                && let Some(o) = searched.filter(|o| **o != ch.object)
            {
                name.push_str(&format!(" ▸ {} {}", o.resource, namespaced(o)));
            }
            out.push(
                &o.resource,
                Span {
                    trace_id: trace_id.to_vec(),
                    span_id: ids[i].clone(),
                    parent_span_id: parent,
                    name,
                    kind: 1,
                    start_time_unix_nano: start,
                    end_time_unix_nano: end,
                    attributes,
                    events,
                    status,
                    ..Default::default()
                },
            );
        }
    }
    if let Some((span, service, _)) = top {
        out.push(&service, span);
    }
    out.finish()
}

/// What write `i` of `c` did wrong by succeeding: it left its object
/// failed (a kubelet's `ErrImagePull`), and no later write of the cascade
/// left the object otherwise; its retries are that work again, not new
/// failures (`None` for them).
fn left_failed(c: &Cascade, i: usize) -> Option<String> {
    let ch = &c.changes[i];
    let r = ch.readiness.as_ref().filter(|r| r.status == "Failed")?;
    if c.attempts[i].is_retry() || ch.deleted {
        return None;
    }
    let recovered = c.changes[i + 1..].iter().any(|later| {
        later.object == ch.object
            && later
                .readiness
                .as_ref()
                .is_some_and(|l| l.status != "Failed")
    });
    crate::judgement::left_failed_severity(recovered)?;
    Some(format!(
        "left {} {} failed: {}",
        ch.object.resource,
        namespaced(&ch.object),
        r.message
    ))
}

/// Whether a cascade went wrong: not complete, or a write in it failed or
/// undid another writer's.
fn failing(c: &Cascade, fought: &HashMap<Vec<u8>, String>) -> bool {
    c.went_wrong()
        || c.changes
            .iter()
            .any(|ch| fought.contains_key(ch.span.span_id.as_slice()))
}

/// What went wrong in a failing cascade, said once: the writes it still
/// waits for, else its first failed write, else the fight.
fn what_went_wrong(c: &Cascade, fought: &HashMap<Vec<u8>, String>) -> String {
    if let Completion::Waiting(w) = &c.completion {
        let waiting: Vec<String> = w.iter().map(ToString::to_string).collect();
        return format!("not complete: waiting for {}", waiting.join("; "));
    }
    if let Some(ch) = c.changes.iter().find(|ch| write_failed(ch)) {
        return format!("{}: {}", short_change_name(ch), failure_message(ch));
    }
    if let Some(ch) = c.left_failed() {
        let why = ch.readiness.as_ref().map_or("", |r| r.message.as_str());
        return format!("{}: left it {why}", short_change_name(ch));
    }
    c.changes
        .iter()
        .find_map(|ch| fought.get(ch.span.span_id.as_slice()))
        .map_or_else(String::new, |m| format!("writers fight: {m}"))
}

/// `namespace/name`, or the name of a cluster-scoped object.
fn namespaced(o: &ObjectRef) -> String {
    match o.namespace.as_str() {
        "" => o.name.clone(),
        ns => format!("{ns}/{}", o.name),
    }
}

/// The span above several cascades, named by the one that matters: of
/// those that wrote the searched object (all, if none did: its scope's
/// others), the latest failing one a change started (else one a timer
/// started), else the latest; with its service (resource) and that
/// cascade's index.
fn headline(
    cascades: &[Cascade],
    fought: &HashMap<Vec<u8>, String>,
    trace_id: &TraceIdBytes,
    searched: Option<&ObjectRef>,
) -> (Span, String, usize) {
    let (chosen_index, went_wrong) =
        crate::analysis::cascade::the_one_that_matters(cascades, searched, |c| failing(c, fought))
            .expect("several cascades");
    let chosen = &cascades[chosen_index];
    let failed = went_wrong.then_some(());
    let start = cascades
        .iter()
        .map(|c| nanos(c.root().received))
        .min()
        .unwrap_or(0);
    let end = cascades
        .iter()
        .flat_map(|c| c.changes.iter().map(|ch| nanos(ch.completed)))
        .chain(cascades.iter().filter_map(|c| match &c.completion {
            Completion::Complete { at } => Some(nanos(*at)),
            Completion::Waiting(_) | Completion::NotKnown(_) => None,
        }))
        .max()
        .unwrap_or(start)
        .max(start);
    let what = if failed.is_some() {
        "failing"
    } else {
        "latest"
    };
    // The service is the object's resource, which the UI shows before the
    // name: the name does not repeat it.
    let object = searched.unwrap_or(&chosen.root().object);
    let object_name = namespaced(object);
    let name = format!(
        "{object_name}: {} cascades, {what}: {}",
        cascades.len(),
        short_change_name(chosen.root())
    );
    let service = object.resource.clone();
    let span = Span {
        trace_id: trace_id.to_vec(),
        span_id: span_id(&chosen.root().span.span_hex(), 0x746f70),
        name,
        kind: 1,
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        attributes: vec![
            kv("cascade.count", cascades.len().to_string()),
            kv(&format!("cascade.{what}"), change_name(chosen.root())),
        ],
        status: failed.map(|_| Status {
            message: format!(
                "{}: {}",
                short_change_name(chosen.root()),
                what_went_wrong(chosen, fought)
            ),
            code: StatusCode::Error as i32,
        }),
        ..Default::default()
    };
    (span, service, chosen_index)
}
