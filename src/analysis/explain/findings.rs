//! Raw findings from what the collector kept, one per refused write (by
//! object and message), Warning Event (by object, reason and message),
//! object not settled at the end, and hop far slower than its edge's
//! usual. [`super::rank`] merges and folds them.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use super::collect::{Idx, State};
use super::message::normalize;
use super::report::{Evidence, FindingKind, Severity};
use crate::analysis::cascade::{Attempt, format_duration};
use crate::flow::SpanRef;
use crate::judgement::{Refusal, Writer, warning_severity};

/// A hop counts as slow from this long…
const SLOW_HOP_FLOOR: Duration = Duration::from_secs(1);
/// …and this many times its edge's median (and above its p90: an
/// outlier, not the tail).
const SLOW_HOP_FACTOR: u64 = 10;
/// Edges with fewer hops have no "usual" latency to compare with.
const SLOW_HOP_MIN_SAMPLES: u64 = 20;

/// One finding before merging and folding.
#[derive(Clone, Debug)]
pub(super) struct Raw {
    pub kind: FindingKind,
    pub severity: Severity,
    pub obj: Idx,
    pub title: String,
    /// The title normalized for comparison (generated names elided).
    pub key: String,
    pub first: SystemTime,
    pub last: SystemTime,
    pub count: u64,
    pub evidence: Vec<(SystemTime, Evidence)>,
    /// The cascade it happened in.
    pub root: Option<SpanRef>,
    pub also: Vec<Idx>,
    pub also_total: u64,
}

pub(super) fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

/// The first line of a message, at most 400 characters.
pub(super) fn one_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or("").trim();
    if line.chars().count() > 400 {
        let head: String = line.chars().take(400).collect();
        format!("{head}…")
    } else {
        line.to_string()
    }
}

pub(super) fn raw_findings(st: &mut State, members: &HashSet<usize>) -> Vec<Raw> {
    let mut out = Vec::new();
    failed_writes(st, members, &mut out);
    warning_events(st, members, &mut out);
    unsettled(st, members, &mut out);
    slow_hops(st, members, &mut out);
    traced_requests(st, members, &mut out);
    fights(st, members, &mut out);
    out
}

fn fights(st: &State, members: &HashSet<usize>, out: &mut Vec<Raw>) {
    let mut fought: Vec<_> = st
        .fields
        .iter()
        .filter(|((obj, _), f)| {
            f.ownership.is_fight()
                && members.contains(&(*obj as usize))
                && st.scope.admits_finding(f.last)
        })
        .collect();
    fought.sort_by(|a, b| a.0.cmp(b.0));
    for ((obj, path), f) in fought {
        let who: Vec<String> = f
            .ownership
            .repeat_writers()
            .map(|(w, n)| {
                let value = f
                    .values
                    .iter()
                    .find(|(v, _)| v == w)
                    .map_or("?", |(_, v)| v.as_str());
                format!("{} sets {value} (×{n})", st.strings.get(*w))
            })
            .collect();
        let during = format_duration(f.last.duration_since(f.first).unwrap_or_default());
        let title = format!(
            "{path} is set back and forth by {} writers, {} times in {during}: {}",
            who.len(),
            f.ownership.handovers() + 1,
            who.join(", ")
        );
        out.push(Raw {
            kind: FindingKind::WritersFight,
            severity: Severity::Error,
            obj: *obj,
            key: format!("fight {path}"),
            first: f.first,
            last: f.last,
            count: f.ownership.handovers() + 1,
            evidence: vec![(
                f.last,
                Evidence {
                    kind: "write".into(),
                    time: rfc3339(f.last),
                    summary: format!("{} set {path} last", st.strings.get(f.last_writer)),
                    detail: String::new(),
                },
            )],
            title,
            root: Some(f.root),
            also: Vec::new(),
            also_total: 0,
        });
    }
}

fn failed_writes(st: &State, members: &HashSet<usize>, out: &mut Vec<Raw>) {
    let mut by_key: HashMap<(Idx, String), usize> = HashMap::new();
    for f in &st.failed {
        if f.retried || !members.contains(&(f.obj as usize)) || !st.scope.admits_finding(f.received)
        {
            continue;
        }
        let message = if f.message.is_empty() {
            crate::judgement::unexplained_refusal(
                &f.attempted.resource,
                &f.attempted.group,
                st.strings.get(f.verb),
                f.code,
            )
        } else {
            one_line(&f.message)
        };
        let verb = st.strings.get(f.verb);
        let verb = verb.split(' ').next().unwrap_or(verb);
        let refusal = Refusal::of(f.code, verb, &message, false);
        let writer = Writer::of(st.strings.get(f.user));
        let Some(severity) = refusal.severity(writer) else {
            continue;
        };
        // A conflict at the end of the log, its retry not in it, on an
        // object that settled: routine.
        let o = &st.objects[f.obj as usize];
        if refusal == Refusal::Conflict && o.problem.is_none() && o.last_status.0 != 0 {
            continue;
        }
        let denied = match refusal {
            Refusal::Denied(policy) => Some(policy),
            _ => None,
        };
        let kind = if denied.is_some() {
            FindingKind::DeniedWrite
        } else {
            FindingKind::FailedWrite
        };
        let attempted = crate::analysis::cascade::object_name(&f.attempted);
        let retry = match f.attempt {
            Attempt::Retry {
                attempt, waited, ..
            } => format!(
                ", attempt {attempt}, {} after the first (its writer's back-off)",
                format_duration(waited)
            ),
            Attempt::First => String::new(),
        };
        let summary = format!(
            "{} {} {attempted} → {}{}{retry}",
            st.strings.get(f.user),
            st.strings.get(f.verb),
            f.code,
            denied
                .map(|d| format!(" (denied by {d})"))
                .unwrap_or_default()
        );
        let ev = Evidence {
            kind: "write".into(),
            time: rfc3339(f.received),
            summary,
            detail: message.clone(),
        };
        let key = normalize(&message);
        match by_key.get(&(f.obj, key.clone())) {
            Some(&i) => {
                let r: &mut Raw = &mut out[i];
                r.count += 1;
                r.first = r.first.min(f.received);
                if f.received >= r.last {
                    r.last = f.received;
                    if r.evidence.len() < 2 {
                        r.evidence.push((f.received, ev));
                    } else {
                        r.evidence[1] = (f.received, ev);
                    }
                }
            }
            None => {
                by_key.insert((f.obj, key.clone()), out.len());
                out.push(Raw {
                    kind,
                    severity,
                    obj: f.obj,
                    title: message,
                    key,
                    first: f.received,
                    last: f.received,
                    count: 1,
                    evidence: vec![(f.received, ev)],
                    root: Some(f.root),
                    also: Vec::new(),
                    also_total: 0,
                });
            }
        }
    }
}

fn warning_events(st: &State, members: &HashSet<usize>, out: &mut Vec<Raw>) {
    for e in st.events.values() {
        if !members.contains(&(e.obj as usize)) || !st.scope.admits_finding(e.last) {
            continue;
        }
        let reason = st.strings.get(e.reason);
        let o = &st.objects[e.obj as usize];
        // An object that settled after the Event recovered: what it
        // reported was passing. One whose readiness is unknown may not have.
        let recovered = o.problem.is_none() && o.last_status.0 != 0;
        let severity = warning_severity(reason, recovered);
        let message = one_line(&e.message);
        let component = st.strings.get(e.component);
        let times = if e.count > 1 {
            format!(" (×{})", e.count)
        } else {
            String::new()
        };
        let by = if component.is_empty() {
            String::new()
        } else {
            format!(" by {component}")
        };
        let recovered_note = if recovered { ", recovered later" } else { "" };
        out.push(Raw {
            kind: FindingKind::WarningEvent,
            severity,
            obj: e.obj,
            title: format!("{reason}: {message}"),
            key: normalize(&message),
            first: e.first,
            last: e.last,
            count: e.count,
            evidence: vec![(
                e.last,
                Evidence {
                    kind: "event".into(),
                    time: rfc3339(e.last),
                    summary: format!("Warning {reason}{times}{by}{recovered_note}"),
                    detail: message,
                },
            )],
            root: o.last_root,
            also: Vec::new(),
            also_total: 0,
        });
    }
}

fn unsettled(st: &State, members: &HashSet<usize>, out: &mut Vec<Raw>) {
    let end = st.last.unwrap_or(SystemTime::UNIX_EPOCH);
    for (i, o) in st.objects.iter().enumerate() {
        let Some(p) = &o.problem else { continue };
        if o.gone || !members.contains(&i) {
            continue;
        }
        let status = st.strings.get(p.status);
        let message = one_line(st.strings.get(p.message));
        let held = o.deleting.as_ref().filter(|(_, f)| !f.is_empty());
        let title = match held {
            Some((at, finalizers)) => format!(
                "deletion requested {} ago is held by finalizer{} {}",
                format_duration(end.duration_since(*at).unwrap_or_default()),
                if finalizers.len() == 1 { "" } else { "s" },
                finalizers.join(", ")
            ),
            None if message.is_empty() => status.to_string(),
            // `Failed: container app: Error (exit code 1)` says it already.
            None if message.starts_with(&format!("{status}:")) => message.clone(),
            None => format!("{status}: {message}"),
        };
        let severity = if status == "Failed" {
            Severity::Error
        } else {
            Severity::Warning
        };
        let stuck_for = end.duration_since(p.since).unwrap_or_default();
        let lasted = if stuck_for < Duration::from_millis(1) {
            "at the end of the log".to_string()
        } else {
            format!("for {}, until the log ends", format_duration(stuck_for))
        };
        out.push(Raw {
            kind: FindingKind::NotCompleted,
            severity,
            obj: i as Idx,
            key: normalize(&message),
            title,
            first: p.since,
            last: end,
            count: 1,
            evidence: vec![(
                p.since,
                Evidence {
                    kind: "status".into(),
                    time: rfc3339(p.since),
                    summary: format!("{status} {lasted}"),
                    detail: message,
                },
            )],
            // A held deletion: what requested it, not the last status write.
            root: held.and(o.delete_root).or(o.last_root),
            also: Vec::new(),
            also_total: 0,
        });
    }
}

/// What kube-apiserver's own traces say of writes: the part that made one
/// slow, a webhook that failed open.
fn traced_requests(st: &mut State, members: &HashSet<usize>, out: &mut Vec<Raw>) {
    let State {
        request_notes,
        write_durations,
        scope,
        ..
    } = st;
    for n in request_notes.iter() {
        if !members.contains(&(n.obj as usize)) || !scope.admits_finding(n.received) {
            continue;
        }
        let listing = n
            .parts
            .iter()
            // The annotations list every layer, most of them microseconds.
            .filter(|p| n.traced || p.failed || p.took >= std::time::Duration::from_millis(1))
            .map(|p| {
                if !n.traced && p.failed {
                    // An annotation names the webhook, not how long it took.
                    return format!("{} (failed open)", p.label);
                }
                let failed = if p.failed { " (failed)" } else { "" };
                format!("{}: {}{failed}", p.label, format_duration(p.took))
            })
            .collect::<Vec<_>>()
            .join(", ");
        let evidence = |summary: String| {
            vec![(
                n.received,
                Evidence {
                    kind: "write".into(),
                    time: rfc3339(n.received),
                    summary,
                    detail: if n.traced {
                        format!(
                            "kube-apiserver's trace: {} in all; {listing}",
                            format_duration(n.total)
                        )
                    } else if n.total > std::time::Duration::ZERO {
                        format!(
                            "the audit event's latency annotations: {} in all; {listing}",
                            format_duration(n.total)
                        )
                    } else {
                        format!("the audit event's annotations: {listing}")
                    },
                },
            )]
        };
        let mut raw = |kind, severity, title: String, key: String, summary: String| {
            out.push(Raw {
                kind,
                severity,
                obj: n.obj,
                title,
                key,
                first: n.received,
                last: n.received,
                count: 1,
                evidence: evidence(summary),
                root: Some(n.root),
                also: Vec::new(),
                also_total: 0,
            });
        };
        let usual = write_durations.usual(&n.verb);
        if let Some(p) = super::collect::slow_part(n.total, &n.parts, usual) {
            let against = usual.map_or(String::new(), |u| {
                format!(
                    "; {} writes in this log usually take {} (median of {})",
                    n.verb,
                    format_duration(u.median),
                    u.writes
                )
            });
            raw(
                FindingKind::SlowWrite,
                Severity::Info,
                format!(
                    "slow write: {}: {} of {}",
                    p.label,
                    format_duration(p.took),
                    format_duration(n.total)
                ),
                format!("slow write {}", p.label),
                format!("{} took {}{against}", n.write, format_duration(n.total)),
            );
        }
        if n.code < 400 {
            for p in n.parts.iter().filter(|p| p.failed && p.is_webhook()) {
                raw(
                    FindingKind::WebhookFailedOpen,
                    Severity::Warning,
                    format!(
                        "{} failed open: its call failed and the write was admitted without its judgement",
                        p.label
                    ),
                    format!("failed open {}", p.label),
                    format!("{} admitted ({})", n.write, n.code),
                );
            }
        }
    }
}

fn slow_hops(st: &mut State, members: &HashSet<usize>, out: &mut Vec<Raw>) {
    for (edge, e) in st.edges.iter_mut() {
        if e.latencies.count() < SLOW_HOP_MIN_SAMPLES {
            continue;
        }
        let p50 = e.latencies.quantile_us(0.5);
        let p90 = e.latencies.quantile_us(0.9);
        let p99 = e.latencies.quantile_us(0.99);
        let floor = SLOW_HOP_FLOOR.as_micros() as u64;
        for h in &e.slowest {
            if h.hop_us < floor
                || h.hop_us < p50.saturating_mul(SLOW_HOP_FACTOR)
                || h.hop_us <= p90
                || !members.contains(&(h.obj as usize))
                || !st.scope.admits_finding(h.received)
            {
                continue;
            }
            let took = format_duration(Duration::from_micros(h.hop_us));
            let usual = format!(
                "usually {} (p50), {} (p99) over {} hops",
                format_duration(Duration::from_micros(p50)),
                format_duration(Duration::from_micros(p99)),
                e.latencies.count()
            );
            out.push(Raw {
                kind: FindingKind::SlowHop,
                severity: Severity::Info,
                obj: h.obj,
                title: format!("slow hop {edge}: {took}, {usual}"),
                key: format!("slow {edge} {}", h.write),
                first: h.received,
                last: h.received,
                count: 1,
                evidence: vec![(
                    h.received,
                    Evidence {
                        kind: "write".into(),
                        time: rfc3339(h.received),
                        summary: format!("{} {took} after {}", h.write, h.cause),
                        detail: usual,
                    },
                )],
                root: Some(h.root),
                also: Vec::new(),
                also_total: 0,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::analysis::cascade::testing::{caused_by, change, obj};
    use crate::analysis::explain::{
        ExplainCollector, FindingKind, Inputs, Scope, Severity, report,
    };
    use crate::flow::ChangeSink;

    /// A ReplicaSet creating 40 Pods, each 10 ms after it, except one that
    /// came 5 s late.
    fn hops(late_ms: u64) -> crate::analysis::explain::Report {
        let c = ExplainCollector::new(Scope::default());
        let rs = change(1, obj("replicasets", "web-1"), "create", 0, 5, None);
        c.record(&rs);
        for i in 0..40u8 {
            let start = if i == 7 { 5 + late_ms } else { 15 };
            let pod = change(
                10 + i,
                obj("pods", &format!("web-1-p{i}")),
                "create",
                start,
                start + 2,
                None,
            );
            c.record(&caused_by(pod, &rs, "replicasets → pods create"));
        }
        report(c, Inputs::default())
    }

    #[test]
    fn a_hop_far_slower_than_its_edges_usual_is_a_note() {
        let r = hops(5_000);
        let slow: Vec<_> = r
            .findings
            .iter()
            .filter(|f| f.kind == FindingKind::SlowHop)
            .collect();
        assert_eq!(slow.len(), 1, "{:#?}", r.findings);
        assert_eq!(slow[0].severity, Severity::Info);
        assert_eq!(slow[0].object.name, "web-1-p7");
        assert!(
            slow[0]
                .title
                .starts_with("slow hop replicasets → pods create: 5"),
            "{}",
            slow[0].title
        );
        // Twice the usual is not "far outside" it.
        let r = hops(20);
        assert!(
            r.findings.iter().all(|f| f.kind != FindingKind::SlowHop),
            "{:#?}",
            r.findings
        );
    }
}
