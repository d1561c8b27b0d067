//! What the explain collector (`sink.rs`) keeps, in a compact form,
//! what the findings need from a whole run: each object's relations and its
//! state at the end, refused writes, Warning Events, the slowest hops per
//! edge, the external writes that started cascades (with what they changed)
//! and a compact row per change for the cascade timelines. Memory grows
//! with objects and changes (about 150 bytes a change), never with their
//! bodies.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use super::scope::Scope;
use crate::analysis::cascade::{Attempt, Retries, SerialCreates, Settling};
use crate::component_spans::ComponentSpans;
use crate::flow::{CascadeRole, ChangeRecord, EventRecord, SpanRef};
use crate::judgement::{Refusal, Writer};
use crate::model::ObjectRef;

mod fights;
mod records;
mod requests;
mod settling;

use crate::aggregate::rules::labels_of;
pub(super) use records::{Edge, EventAgg, Failed, Interner, Obj, Problem, RootInfo, Row, SlowHop};
pub(super) use requests::{RequestNote, TracedWrites, WriteDurations, slow_part};

/// Index of an object in [`State::objects`].
pub(super) type Idx = u32;

/// Changes kept for timelines at most (each about 150 bytes).
const MAX_TIMELINE_ROWS: usize = 4_000_000;
/// Cascade roots whose writer is kept at most (each about 40 bytes).
const MAX_ROOT_WRITERS: usize = 4_000_000;
/// Refused writes kept at most (the rest are counted).
const MAX_FAILED: usize = 100_000;
/// Slowest hops kept per edge.
const SLOWEST_PER_EDGE: usize = 3;

/// Everything collected.
pub(super) struct State {
    pub scope: Scope,
    pub strings: Interner,
    pub index: HashMap<ObjectRef, Idx>,
    pub objects: Vec<Obj>,
    pub failed: Vec<Failed>,
    pub failed_dropped: u64,
    /// Open 409 conflicts by (object, user): indices into `failed`.
    conflicts: HashMap<(Idx, u32), Vec<usize>>,
    pub events: HashMap<(Idx, u32, String), EventAgg>,
    /// Occurrences seen (namespace, Event name, count): the audit log and
    /// an Event list report the same ones.
    occurrences: HashSet<(String, String, i64)>,
    pub edges: BTreeMap<String, Edge>,
    pub roots: HashMap<SpanRef, RootInfo>,
    /// Who started each cascade (refused roots and roots outside the
    /// scope too: the background judgement needs them all).
    pub root_writers: HashMap<SpanRef, Writer>,
    /// Cascade roots whose writer was not kept (bound reached): their
    /// problems are never judged background.
    pub root_writers_dropped: u64,
    /// When the first cascade a user started began, anywhere in the log.
    pub first_user_cascade: Option<SystemTime>,
    /// The cascades the cluster started before any user's, as `kascade
    /// analyze` leaves them out: their hops are not counted in the edges'
    /// statistics (the slow-hop baseline), so both count the same hops.
    start_up: crate::analysis::foreground::StartUp,
    /// Writers' refused attempts, to tell retries from new intents.
    pub retries: Retries,
    /// Writers' creates in batches: a later batch's hop counts from the
    /// answer it waited for.
    serial: SerialCreates,
    /// Spec fields by (object, path): who set them (writers fighting).
    pub fields: fights::Fields,
    pub fields_dropped: u64,
    pub rows: Vec<Row>,
    pub rows_by_root: HashMap<SpanRef, Vec<u32>>,
    pub rows_dropped: u64,
    /// Changes of an object under a uid other than the one that exists
    /// (not removed in between): two clusters' logs mixed. The first one.
    pub uid_conflicts: u64,
    pub uid_conflict_example: Option<String>,
    /// Namespaces deleted or emptied by a deletecollection: their objects
    /// may be gone without a delete of their own.
    wiped: HashSet<String>,
    /// Changes and Events in the scope.
    pub in_scope: u64,
    pub first: Option<SystemTime>,
    pub last: Option<SystemTime>,
    /// The latest completion logged so far, and the changes logged more
    /// than [`OUT_OF_ORDER_SLACK`] before it (several apiservers' logs
    /// interleaved, files given out of order): causes are inferred from
    /// what was logged before a change, so some of theirs may be missed.
    latest_completed: Option<SystemTime>,
    pub out_of_order: u64,
    /// How far back the furthest of them went.
    pub out_of_order_by: std::time::Duration,
    /// Controllers' writes left without a cause because what they reacted
    /// to was logged as received after them (clock skew), and one of them.
    pub causes_logged_after: u64,
    pub cause_logged_after_example: Option<String>,
    /// kube-apiserver's own traces of the requests (`explain
    /// --component-traces`), by audit ID.
    pub components: Option<Arc<ComponentSpans>>,
    /// Traced writes that were slow, or admitted past a failing webhook.
    pub request_notes: Vec<RequestNote>,
    pub request_notes_dropped: u64,
    /// How long the log's writes took, by verb: what a slow write is
    /// slow against.
    pub write_durations: WriteDurations,
    pub traced_writes: TracedWrites,
}

/// How far a change may complete before one logged ahead of it and still
/// count as in order: an apiserver writes its audit log in batches, close
/// to completion order, not exactly in it.
pub(super) const OUT_OF_ORDER_SLACK: std::time::Duration = std::time::Duration::from_secs(1);

impl State {
    pub(super) fn new(scope: Scope) -> Self {
        let mut strings = Interner::default();
        // Id 0 is "nothing".
        strings.id("");
        State {
            scope,
            strings,
            index: HashMap::new(),
            objects: Vec::new(),
            failed: Vec::new(),
            failed_dropped: 0,
            conflicts: HashMap::new(),
            events: HashMap::new(),
            occurrences: HashSet::new(),
            edges: BTreeMap::new(),
            roots: HashMap::new(),
            root_writers: HashMap::new(),
            root_writers_dropped: 0,
            first_user_cascade: None,
            start_up: Default::default(),
            retries: Retries::default(),
            serial: SerialCreates::default(),
            fields: HashMap::new(),
            fields_dropped: 0,
            rows: Vec::new(),
            rows_by_root: HashMap::new(),
            rows_dropped: 0,
            uid_conflicts: 0,
            uid_conflict_example: None,
            wiped: HashSet::new(),
            in_scope: 0,
            first: None,
            last: None,
            latest_completed: None,
            out_of_order: 0,
            out_of_order_by: std::time::Duration::ZERO,
            causes_logged_after: 0,
            cause_logged_after_example: None,
            components: None,
            request_notes: Vec::new(),
            request_notes_dropped: 0,
            write_durations: WriteDurations::default(),
            traced_writes: TracedWrites::default(),
        }
    }

    pub(super) fn obj(&mut self, o: &ObjectRef) -> Idx {
        if let Some(&i) = self.index.get(o) {
            return i;
        }
        let i = self.objects.len() as Idx;
        self.objects.push(Obj {
            object: o.clone(),
            parents: Vec::new(),
            children: Vec::new(),
            labels: None,
            settling: Settling::default(),
            problem: None,
            settled_at: None,
            last_status: (0, 0),
            gone: false,
            last_root: None,
            deleting: None,
            delete_root: None,
            uid: None,
            user_touched: false,
        });
        self.index.insert(o.clone(), i);
        i
    }

    pub(super) fn relate(&mut self, parent: Idx, child: Idx, class: &str) {
        if parent == child {
            return;
        }
        let class = self.strings.id(class);
        let owner = self.strings.id(crate::aggregate::relations::CLASS_OWNER);
        let p = &mut self.objects[child as usize].parents;
        if !p.iter().any(|(i, _)| *i == parent) {
            // Controllers (owners) first: the chain climbs through them.
            if class == owner {
                p.insert(0, (parent, class));
            } else {
                p.push((parent, class));
            }
        }
        let c = &mut self.objects[parent as usize].children;
        if !c.iter().any(|(i, _)| *i == child) {
            c.push((child, class));
        }
    }

    fn note_order(&mut self, completed: SystemTime) {
        match self.latest_completed {
            Some(latest) if completed < latest => {
                let back = latest.duration_since(completed).unwrap_or_default();
                if back > OUT_OF_ORDER_SLACK {
                    self.out_of_order += 1;
                    self.out_of_order_by = self.out_of_order_by.max(back);
                }
            }
            _ => self.latest_completed = Some(completed),
        }
    }

    fn seen(&mut self, from: SystemTime, to: SystemTime) {
        self.in_scope += 1;
        self.first = Some(self.first.map_or(from, |f| f.min(from)));
        self.last = Some(self.last.map_or(to, |l| l.max(to)));
    }

    pub(super) fn record(&mut self, c: &ChangeRecord) {
        self.note_order(c.completed);
        if c.cause_logged_after {
            self.causes_logged_after += 1;
            self.cause_logged_after_example.get_or_insert_with(|| {
                format!(
                    "{} {} {}",
                    c.user,
                    if c.subresource.is_empty() {
                        c.verb.clone()
                    } else {
                        format!("{} {}", c.verb, c.subresource)
                    },
                    crate::analysis::cascade::object_name(&c.object)
                )
            });
        }
        if matches!(c.role, CascadeRole::Root | CascadeRole::Unexplained) {
            let writer = Writer::of(&c.user);
            if self.root_writers.len() < MAX_ROOT_WRITERS {
                self.root_writers.insert(c.span, writer);
            } else {
                self.root_writers_dropped += 1;
            }
            if writer == Writer::User {
                let first = self.first_user_cascade.get_or_insert(c.received);
                *first = (*first).min(c.received);
            }
        }
        self.start_up.observe(c);
        let attempt = self.retries.observe(c);
        let after_sibling = self.serial.observe(c);
        if !self.scope.admits_time(c.received) || !self.scope.may_concern(&c.object) {
            return;
        }
        self.seen(c.received, c.completed);
        let obj = self.obj(&c.object);
        let by_user = self.root_writers.get(&c.root) == Some(&Writer::User);
        self.objects[obj as usize].user_touched |= by_user;
        for r in &c.related {
            let other = self.obj(&r.object);
            if r.is_parent {
                self.relate(other, obj, &r.class);
            } else {
                self.relate(obj, other, &r.class);
            }
        }
        if self.scope.needs_labels()
            && let Some(labels) = c.new.as_deref().and_then(labels_of)
        {
            self.objects[obj as usize].labels = Some(labels);
        }
        let user = self.strings.id(&c.user);
        if c.code >= 400 {
            self.record_failure(c, obj, user, attempt);
        } else if let Some(open) = self.conflicts.remove(&(obj, user)) {
            for i in open {
                self.failed[i].retried = true;
            }
        }
        if matches!(c.role, CascadeRole::Root | CascadeRole::Unexplained) && c.code < 400 {
            self.roots.insert(
                c.span,
                RootInfo {
                    name: crate::analysis::cascade::change_name(c),
                    received: c.received,
                    changes: super::changes::changed_lines(c.old.as_deref(), c.new.as_deref()),
                },
            );
        }
        // Hops as `kascade analyze` counts them: effects outside the
        // cluster's start-up; a refused write is a failure, not a hop.
        let counted = c.role == CascadeRole::Effect && !self.start_up.started(&c.root);
        match (&c.cause, attempt) {
            (Some(cause), Attempt::First) if counted && c.code < 400 => {
                let hop = after_sibling.map_or(cause.hop, |a| a.gap);
                self.record_hop(c, obj, cause, hop);
            }
            // A retry's wait is its writer's back-off, not a hop.
            (Some(cause), Attempt::Retry { backoff, .. }) if counted => {
                let edge = self.edges.entry(cause.edge.clone()).or_default();
                edge.retries += 1;
                edge.backoff += backoff;
            }
            _ => {}
        }
        self.note_request(c, obj);
        self.record_fields(c, obj, user);
        self.apply_state(c, obj);
        self.keep_row(c, obj, user);
    }

    fn record_failure(&mut self, c: &ChangeRecord, obj: Idx, user: u32, attempt: Attempt) {
        let gone = self.objects[obj as usize].gone;
        let message = c.failure.as_deref().unwrap_or_default();
        let refusal = Refusal::of(c.code, &c.verb, message, gone);
        if refusal == Refusal::AlreadyGone {
            return;
        }
        if self.failed.len() >= MAX_FAILED {
            self.failed_dropped += 1;
            return;
        }
        // A create refused before it had a name shows on its owner.
        let shown = if c.object.name.ends_with('-') || c.object.name.is_empty() {
            c.related
                .iter()
                .find(|r| r.is_parent)
                .and_then(|r| self.index.get(&r.object).copied())
                .unwrap_or(obj)
        } else {
            obj
        };
        let verb = if c.subresource.is_empty() {
            self.strings.id(&c.verb)
        } else {
            self.strings.id(&format!("{} {}", c.verb, c.subresource))
        };
        if self.root_writers.get(&c.root) == Some(&Writer::User) {
            self.objects[shown as usize].user_touched = true;
        }
        if refusal == Refusal::Conflict {
            self.conflicts
                .entry((obj, user))
                .or_default()
                .push(self.failed.len());
        }
        self.failed.push(Failed {
            obj: shown,
            attempted: c.object.clone(),
            user,
            verb,
            code: c.code,
            message: c.failure.clone().unwrap_or_default(),
            received: c.received,
            root: c.root,
            retried: false,
            attempt,
        });
    }

    /// `hop`: the cause's, or from the sibling's answer a create waited for.
    fn record_hop(
        &mut self,
        c: &ChangeRecord,
        obj: Idx,
        cause: &crate::flow::Cause,
        hop: std::time::Duration,
    ) {
        let edge = self.edges.entry(cause.edge.clone()).or_default();
        edge.latencies.record(hop);
        let hop_us = u64::try_from(hop.as_micros()).unwrap_or(u64::MAX);
        let slowest = &mut edge.slowest;
        if slowest.len() < SLOWEST_PER_EDGE || slowest.last().is_some_and(|s| s.hop_us < hop_us) {
            slowest.push(SlowHop {
                hop_us,
                obj,
                write: crate::analysis::cascade::change_name(c),
                cause: cause.name.clone(),
                received: c.received,
                root: c.root,
            });
            slowest.sort_by_key(|s| std::cmp::Reverse(s.hop_us));
            slowest.truncate(SLOWEST_PER_EDGE);
        }
    }

    fn keep_row(&mut self, c: &ChangeRecord, obj: Idx, user: u32) {
        if self.rows.len() >= MAX_TIMELINE_ROWS {
            self.rows_dropped += 1;
            return;
        }
        let (status, message) = match &c.readiness {
            Some(r) => (self.strings.id(&r.status), self.strings.id(&r.message)),
            None => (0, 0),
        };
        let row = Row {
            obj,
            user,
            verb: self.strings.id(&c.verb),
            subresource: self.strings.id(&c.subresource),
            code: c.code,
            received: c.received,
            completed: c.completed,
            span: c.span,
            version: c.version.unwrap_or(0),
            cause: c.cause.as_ref().map(|k| k.span),
            edge: c.cause.as_ref().map_or(0, |k| self.strings.id(&k.edge)),
            role: c.role,
            depth: c.depth,
            status,
            message,
            deleted: c.deleted,
        };
        self.rows_by_root
            .entry(c.root)
            .or_default()
            .push(self.rows.len() as u32);
        self.rows.push(row);
    }

    pub(super) fn record_event(&mut self, e: &EventRecord) {
        if e.event.event_type != "Warning"
            || !self.scope.admits_time(e.at)
            || !self.scope.may_concern(&e.involved)
        {
            return;
        }
        if !e.event.name.is_empty()
            && !self.occurrences.insert((
                e.involved.namespace.clone(),
                e.event.name.clone(),
                e.event.count,
            ))
        {
            return;
        }
        self.seen(e.at, e.at);
        let obj = self.obj(&e.involved);
        let reason = self.strings.id(&e.event.reason);
        let component = self.strings.id(&e.event.component);
        let key = (obj, reason, super::message::normalize(&e.event.message));
        let agg = self.events.entry(key).or_insert_with(|| EventAgg {
            obj,
            reason,
            message: e.event.message.clone(),
            component,
            first: e.at,
            last: e.at,
            count: 0,
        });
        agg.first = agg.first.min(e.at);
        if e.at >= agg.last {
            agg.last = e.at;
            agg.message = e.event.message.clone();
        }
        agg.count = (agg.count + 1).max(e.event.count.max(1) as u64);
    }
}
