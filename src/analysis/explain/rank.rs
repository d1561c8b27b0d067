//! Root causes first: duplicates merged (the refused create and the
//! FailedCreate Event that reports it; the same Event on every Pod of a
//! ReplicaSet), symptoms folded under what explains them (a Deployment not
//! Available because its Pod cannot be scheduled is one finding, not
//! three), then ordered by severity, kind and time.

use std::collections::HashSet;

use super::collect::{Idx, State};
use super::findings::Raw;
use super::message::same_message;
use super::report::FindingKind;
use crate::judgement::is_background;

/// Objects looked at below one finding at most (bounds the fold on huge
/// object trees).
const MAX_SUBTREE: usize = 20_000;

/// A top-level finding and the findings folded under it.
pub(super) struct Ranked {
    pub finding: Raw,
    pub symptoms: Vec<Raw>,
    /// The cluster's own, before and apart from any user's change.
    pub background: bool,
}

/// Higher explains more: a refusal is closer to the cause than the Event
/// that reports it, which is closer than the state it left.
fn priority(k: FindingKind) -> u8 {
    match k {
        FindingKind::WritersFight => 6,
        FindingKind::DeniedWrite => 5,
        FindingKind::FailedWrite => 4,
        FindingKind::WarningEvent => 3,
        FindingKind::NotCompleted => 2,
        FindingKind::WebhookFailedOpen => 3,
        FindingKind::SlowHop | FindingKind::SlowWrite => 1,
    }
}

fn absorb(into: &mut Raw, other: Raw) {
    if priority(other.kind) > priority(into.kind) {
        into.kind = other.kind;
        into.title = other.title;
        into.key = other.key;
    }
    into.severity = into.severity.max(other.severity);
    into.first = into.first.min(other.first);
    into.last = into.last.max(other.last);
    into.count = into.count.max(other.count);
    into.evidence.extend(other.evidence);
    into.evidence.sort_by_key(|(t, _)| *t);
    if into.root.is_none() {
        into.root = other.root;
    }
}

/// The objects under `obj` (not itself).
fn subtree(st: &State, obj: Idx) -> HashSet<Idx> {
    let mut seen = HashSet::new();
    let mut stack: Vec<Idx> = st.objects[obj as usize]
        .children
        .iter()
        .map(|(c, _)| *c)
        .collect();
    while let Some(i) = stack.pop() {
        if i == obj || seen.len() >= MAX_SUBTREE || !seen.insert(i) {
            continue;
        }
        stack.extend(st.objects[i as usize].children.iter().map(|(c, _)| *c));
    }
    seen
}

fn first_parent(st: &State, obj: Idx) -> Option<Idx> {
    st.objects[obj as usize].parents.first().map(|(p, _)| *p)
}

pub(super) fn rank(raw: Vec<Raw>, st: &State) -> Vec<Ranked> {
    // 1. The same thing on the same object, said twice (a refusal and its
    //    Event, an Event and the state it left).
    let mut merged: Vec<Raw> = Vec::new();
    let mut raw = raw;
    // A fixed order, whatever order the maps gave them in, so that the same
    // log gives the same report: which finding absorbs its twin, which
    // sibling (the first to fail) names a group.
    raw.sort_by(|a, b| {
        priority(b.kind)
            .cmp(&priority(a.kind))
            .then(a.first.cmp(&b.first))
            .then(a.obj.cmp(&b.obj))
            .then_with(|| a.key.cmp(&b.key))
            .then_with(|| a.title.cmp(&b.title))
    });
    for r in raw {
        let twin = merged.iter_mut().find(|m| {
            m.obj == r.obj
                && m.kind != FindingKind::SlowHop
                && r.kind != FindingKind::SlowHop
                && same_message(&m.key, &r.key)
        });
        match twin {
            Some(m) => absorb(m, r),
            None => merged.push(r),
        }
    }
    // 2. The same finding on siblings (every Pod of a ReplicaSet).
    let mut grouped: Vec<Raw> = Vec::new();
    for r in merged {
        let parent = first_parent(st, r.obj);
        let sibling = grouped.iter_mut().find(|g| {
            g.kind == r.kind
                && g.key == r.key
                && g.obj != r.obj
                && g.kind != FindingKind::SlowHop
                && parent.is_some()
                && first_parent(st, g.obj) == parent
        });
        match sibling {
            Some(g) => {
                g.also_total += 1;
                if g.also.len() < 5 {
                    g.also.push(r.obj);
                }
                g.count += r.count;
                g.first = g.first.min(r.first);
                g.last = g.last.max(r.last);
                g.severity = g.severity.max(r.severity);
            }
            None => grouped.push(r),
        }
    }
    // 3. Symptoms under their causes: a state or Event on an object is
    //    explained by a finding further down its tree (or by a stronger
    //    one on the object itself). Refused writes are causes, never
    //    symptoms.
    let n = grouped.len();
    let below: Vec<HashSet<Idx>> = grouped.iter().map(|g| subtree(st, g.obj)).collect();
    let mut explained_by: Vec<Option<usize>> = vec![None; n];
    for x in 0..n {
        let gx = &grouped[x];
        if matches!(
            gx.kind,
            FindingKind::DeniedWrite
                | FindingKind::FailedWrite
                | FindingKind::SlowHop
                | FindingKind::SlowWrite
                | FindingKind::WebhookFailedOpen
                | FindingKind::WritersFight
        ) {
            continue;
        }
        let best = (0..n)
            .filter(|&y| y != x && grouped[y].kind != FindingKind::SlowHop)
            .filter(|&y| !recovered_before(st, &grouped[y], gx))
            .filter(|&y| {
                let gy = &grouped[y];
                below[x].contains(&gy.obj)
                    || gy.also.iter().any(|o| below[x].contains(o))
                    || (gy.obj == gx.obj && priority(gy.kind) > priority(gx.kind))
                    || namespace_held(st, gy, gx)
            })
            .max_by_key(|&y| {
                (
                    grouped[y].severity,
                    priority(grouped[y].kind),
                    std::cmp::Reverse(grouped[y].first),
                )
            });
        explained_by[x] = best;
    }
    let top = |mut i: usize| {
        let mut steps = 0;
        while let Some(p) = explained_by[i] {
            i = p;
            steps += 1;
            if steps > n {
                break;
            }
        }
        i
    };
    let tops: Vec<usize> = (0..n).map(top).collect();
    // A cycle (two findings each below the other) leaves both on top.
    let mut slots: Vec<Option<Raw>> = grouped.into_iter().map(Some).collect();
    let mut out: Vec<Ranked> = Vec::new();
    let mut position = vec![usize::MAX; n];
    for i in 0..n {
        if tops[i] == i || explained_by[i].is_none() {
            position[i] = out.len();
            out.push(Ranked {
                finding: slots[i].take().expect("each finding once"),
                symptoms: Vec::new(),
                background: false,
            });
        }
    }
    for i in 0..n {
        if let Some(s) = slots[i].take() {
            let t = tops[i];
            if position[t] != usize::MAX {
                out[position[t]].symptoms.push(s);
            } else {
                out.push(Ranked {
                    finding: s,
                    symptoms: Vec::new(),
                    background: false,
                });
            }
        }
    }
    for r in &mut out {
        r.symptoms.sort_by_key(|s| (s.first, s.obj));
        // A folded Error makes the cause an Error too.
        if let Some(worst) = r.symptoms.iter().map(|s| s.severity).max() {
            r.finding.severity = r.finding.severity.max(worst);
        }
    }
    for r in &mut out {
        r.background = background(st, r);
    }
    out.sort_by(|a, b| {
        let background = a.background.cmp(&b.background);
        let (a, b) = (&a.finding, &b.finding);
        background
            .then(b.severity.cmp(&a.severity))
            .then(priority(b.kind).cmp(&priority(a.kind)))
            .then(a.first.cmp(&b.first))
            .then(a.obj.cmp(&b.obj))
    });
    out
}

/// Whether `cause`'s object had recovered from it (settled after its last
/// occurrence, and settled still) before `symptom` began: a problem gone
/// before another began does not explain it — a kubelet's start-up
/// Warnings (cgroup v1, an image filesystem not yet measured) on a Node
/// Ready a moment later do not explain the crash loop of a Pod bound to it
/// after that.
fn recovered_before(st: &State, cause: &Raw, symptom: &Raw) -> bool {
    let o = &st.objects[cause.obj as usize];
    o.problem.is_none()
        && o.settled_at
            .is_some_and(|at| cause.last <= at && at <= symptom.first)
}

/// Whether a finding belongs to the cluster's background: its cascade was
/// started by the cluster (or by nothing the log shows), it began before
/// the first cascade a user started, and no user's cascade touched its
/// objects (see `judgement`).
fn background(st: &State, r: &Ranked) -> bool {
    let all = || std::iter::once(&r.finding).chain(&r.symptoms);
    let started_by = all()
        .filter_map(|f| f.root)
        .filter_map(|root| st.root_writers.get(&root).copied())
        .max_by_key(|w| *w == crate::judgement::Writer::User);
    let began = all().map(|f| f.first).min().unwrap_or(r.finding.first);
    let touched = all().any(|f| {
        std::iter::once(&f.obj)
            .chain(&f.also)
            .any(|&o| st.objects[o as usize].user_touched)
    });
    is_background(started_by, began, st.first_user_cascade, touched)
}

/// Whether `cause` is the deletion of `symptom`'s namespace, not finished:
/// what is left in a namespace being deleted cannot settle (its
/// controllers' creates are refused).
fn namespace_held(st: &State, cause: &Raw, symptom: &Raw) -> bool {
    let ns = &st.objects[cause.obj as usize].object;
    let o = &st.objects[symptom.obj as usize].object;
    cause.kind == FindingKind::NotCompleted
        && ns.resource == "namespaces"
        && ns.group.is_empty()
        && !o.namespace.is_empty()
        && o.namespace == ns.name
        && symptom.last >= cause.first
}
