//! The cause stage: each write is noted as a candidate cause when it
//! arrives, its own cause inferred when it is processed (`aggregate/causes/`)
//! and handed with it to the change sinks; and how the inference is shown
//! on the write's span (attributes and an OTel link).

use std::sync::Arc;
use std::time::SystemTime;

use crate::json::{JsonContainerTrait as _, JsonValueTrait as _, Value};

use super::super::causes::{CauseIndex, ChangeEntry, Effect, Inference, Op, Revision};
use super::super::readiness;
use super::super::relations::{CLASS_NON_CONTROLLER_OWNER, CLASS_OWNER, KindRegistry};
use super::super::rules::{ChangeClass, Relation, Role, RuleSet};
use super::super::selectors::{SelectorIndex, SelectorLink};
use super::handoff::AppliedWrite;
pub(super) use super::handoff::{NewState, Write};
use crate::flow::{
    Accepted, CascadeRole, ChangeRecord, ChangeSink, ChangeSource, CpidOrigin, ObjectText,
    Readiness, RelatedObject, SpanRef, WriteCpid, is_event_resource, owner_references_of,
};
use crate::messages::LogEvery;
use crate::metrics::Metrics;
use crate::model::{ObjectRef, ObjectWindow, Windowing, raw_trace_id};
use crate::span_model::{self};
use prometheus_client::metrics::counter::Counter;

/// Infers each write's cause: owns the index of recent changes (the
/// candidate causes) and the change sinks the inference is handed to.
pub(super) struct CauseInferrer {
    /// Recent changes, the candidate causes of later writes.
    causes: CauseIndex,
    /// Where each change goes with its cause (change log, analysis, metrics).
    change_sinks: Vec<Arc<dyn ChangeSink>>,
    /// `kascade_cascade_writes_total` by role.
    role_counters: [Counter; 3],
    /// Malformed CPID annotations are logged at most this often.
    cpid_warned: LogEvery,
    rules: Arc<RuleSet>,
    kinds: Arc<KindRegistry>,
    windowing: Windowing,
    metrics: Arc<Metrics>,
}

impl<'a> Write<'a> {
    /// The audit write `item` shown by the span `span`.
    pub(super) fn audit(
        item: &'a Accepted,
        span: SpanRef,
        arrival: u64,
        uid: &'a str,
        deleted: bool,
    ) -> Self {
        let ev = &item.event;
        Write {
            object: &item.object,
            span,
            arrival,
            noted_through: item.noted_through,
            user: &ev.user.username,
            verb: &ev.verb,
            subresource: ev.subresource(),
            class: ChangeClass::of(&ev.verb, ev.subresource()),
            code: ev.code(),
            received: ev.request_received_timestamp,
            completed: ev.stage_timestamp,
            source: ChangeSource::Audit,
            uid,
            deleted,
            failure: (ev.code() >= 400).then(|| super::plan::failure_message(ev)),
            audit_id: &ev.audit_id,
            annotations: &ev.annotations,
            version: None,
            context: item.context,
        }
    }
}

impl CauseInferrer {
    pub(super) fn new(
        rules: Arc<RuleSet>,
        kinds: Arc<KindRegistry>,
        windowing: Windowing,
        cause_objects: u64,
        metrics: Arc<Metrics>,
    ) -> Self {
        CauseInferrer {
            causes: CauseIndex::new(&rules, cause_objects, &metrics),
            change_sinks: Vec::new(),
            role_counters: role_counters(&metrics),
            cpid_warned: LogEvery::new(std::time::Duration::from_secs(10)),
            rules,
            kinds,
            windowing,
            metrics,
        }
    }

    /// Hands every change, with its inferred cause, to `sink` too.
    pub(super) fn add_sink(&mut self, sink: Arc<dyn ChangeSink>) {
        self.change_sinks.push(sink);
    }

    /// The index itself, for tests that look into it.
    #[cfg(test)]
    pub(super) fn index(&self) -> &CauseIndex {
        &self.causes
    }

    /// Objects with recent changes kept.
    pub(super) fn entry_count(&self) -> u64 {
        self.causes.entry_count()
    }

    /// However the write of `arrival` ended: no later write waits for it.
    pub(super) fn settle(&self, arrival: u64) {
        self.causes.settle(arrival);
    }

    /// Notes a change only the list-watch saw as a candidate cause, now.
    pub(super) fn note_watched(
        &self,
        object: &ObjectRef,
        span: SpanRef,
        class: ChangeClass,
        op: Op,
        at: SystemTime,
        revision: Revision,
    ) -> Arc<ChangeEntry> {
        let (own, _) = self
            .causes
            .note_arrival(object, span, class, "", op, at, at, revision);
        own
    }

    /// Notes an audit write as a candidate cause in arrival order (the
    /// dispatcher calls this before the write is sharded); returns its place
    /// in that order.
    pub(super) fn note_arrival(&self, item: &Accepted) -> u64 {
        match self.record_arrival(item) {
            Some(entry) => {
                self.causes.hand_to_shard(&entry);
                entry.arrival
            }
            None => self.causes.next_arrival(),
        }
    }

    /// The last place in arrival order given out.
    pub(super) fn arrivals_noted(&self) -> u64 {
        self.causes.arrivals_noted()
    }

    /// The place in arrival order of a write with no entry of its own: the
    /// dispatcher's, else (processed without one) now.
    pub(super) fn arrival_of(&self, item: &Accepted) -> u64 {
        if item.arrival != 0 {
            item.arrival
        } else {
            self.causes.next_arrival()
        }
    }

    /// A write's own entry as a candidate cause: the one the dispatcher
    /// noted, else (processed without the dispatcher) recorded now.
    fn arrival_entry(&self, item: &Accepted) -> Option<Arc<ChangeEntry>> {
        if item.arrival != 0
            && let Some(entry) = self.causes.take_noted(item.arrival)
        {
            return Some(entry);
        }
        self.record_arrival(item)
    }

    fn record_arrival(&self, item: &Accepted) -> Option<Arc<ChangeEntry>> {
        let ev = &item.event;
        if item.failed_create.is_some()
            || ev.code() >= 400
            || is_event_resource(&item.object.group, &item.object.resource)
        {
            return None;
        }
        let class = ChangeClass::of(&ev.verb, ev.subresource())?;
        let window_start = self.windowing.window_start(ev.request_received_timestamp);
        let span = SpanRef {
            trace_id: raw_trace_id(item.object.hash(), window_start).to_bytes(),
            span_id: span_model::audit_span_id_of(&item.object, window_start, &ev.audit_id)
                .to_bytes(),
        };
        let (entry, new) = self.causes.note_arrival(
            &item.object,
            span,
            class,
            &ev.user.username,
            Op::of(&ev.verb, ev.subresource()),
            ev.request_received_timestamp,
            ev.stage_timestamp,
            Revision::of(
                ev.response_object
                    .as_ref()
                    .and_then(ObjectText::resource_version),
            ),
        );
        if new && class == ChangeClass::Create {
            // Its owners learn of it now, not when its shard gets to it: an
            // owner's status write may be processed first, elsewhere.
            self.register_owners_on_arrival(item);
            self.note_created_cpid(item, &entry);
        }
        Some(entry)
    }

    /// The CPID a create gave its object, known from its arrival: an effect
    /// processed before the create (logged after it) still carries it on.
    /// Only creates: an update may keep a stale CPID its cascade replaces.
    fn note_created_cpid(&self, item: &Accepted, entry: &Arc<ChangeEntry>) {
        let Some(raw) = item.event.response_object.as_ref() else {
            return;
        };
        // Most objects carry none: a byte search (its searcher built once),
        // the parse only when found.
        static ANNOTATION: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new(kascade_cpid::CPID_ANNOTATION));
        if ANNOTATION.find(raw.get().as_bytes()).is_none() {
            return;
        }
        let Ok(state) = raw.parse() else {
            return;
        };
        if let Some(cpid) = self.object_cpid(&item.object, &state, false) {
            self.causes.note_own_cpid(entry, cpid);
        }
    }

    fn register_owners_on_arrival(&self, item: &Accepted) {
        let ev = &item.event;
        let Some(raw) = ev.response_object.as_ref().or(ev.request_object.as_ref()) else {
            return;
        };
        let obj = &item.object;
        let relations: Vec<(Relation, String)> = owner_references_of(raw.get())
            .into_iter()
            .map(|o| {
                let target = self.kinds.referenced_object(
                    &obj.cluster,
                    &o.api_version,
                    &o.kind,
                    &obj.namespace,
                    &o.name,
                );
                let class = if o.controller == Some(true) {
                    CLASS_OWNER
                } else {
                    CLASS_NON_CONTROLLER_OWNER
                };
                let rel = Relation {
                    target,
                    role: Role::Parent,
                    class: class.to_string(),
                };
                (rel, o.uid)
            })
            .collect();
        self.causes.register_relations(obj, &relations);
    }

    /// The cause of an audited write and the cascade it joins, in one step:
    /// its own entry (the dispatcher's, else noted now), the relations its
    /// state shows plus those of a selector it joined with this very write
    /// (a StatefulSet's new claim), and its readiness after the write.
    pub(super) async fn infer_audit(
        &self,
        selectors: &SelectorIndex,
        item: &Accepted,
        w: &AppliedWrite,
        selector_links: &[SelectorLink],
        readiness: Option<&readiness::ObjectStatus>,
    ) -> Inference {
        let ev = &item.event;
        // Only a write that joined a selector copies its relations.
        let holders_by_selector = holder_relations(selector_links, &item.object);
        let relations: std::borrow::Cow<'_, [(Relation, String)]> =
            if holders_by_selector.is_empty() {
                std::borrow::Cow::Borrowed(&w.relations)
            } else {
                std::borrow::Cow::Owned([w.relations.as_slice(), &holders_by_selector].concat())
            };
        // Before anything that can fail: writes caused by this one wait for it.
        let own = self.arrival_entry(item);
        // The entry already names this write's span (a refused write has none).
        let (span, arrival) = match &own {
            Some(e) => (e.span, e.arrival),
            None => (audit_span_ref(&w.ow, &ev.audit_id), self.arrival_of(item)),
        };
        let write = Write {
            version: w.new_rv.parse().ok(),
            ..Write::audit(item, span, arrival, &w.uid, w.deleted)
        };
        let new_state = w
            .outcome
            .state
            .as_ref()
            .filter(|_| !w.deleted)
            .map(NewState::Shared);
        self.infer_cause(
            selectors,
            &write,
            own.as_ref(),
            &relations,
            w.old.as_ref(),
            new_state,
            readiness,
        )
        .await
    }

    /// Infers the cause of `w` (whose state shows `relations`; `old`/`new`
    /// its states around the write), registers those relations for later
    /// effects, and hands the change to the sink.
    // The label index is the applier's, lent for the one lookup it needs
    // (the selecting objects of a new state) rather than shared.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn infer_cause(
        &self,
        selectors: &SelectorIndex,
        w: &Write<'_>,
        own: Option<&Arc<ChangeEntry>>,
        relations: &[(Relation, String)],
        old: Option<&Arc<Value>>,
        new_state: Option<NewState<'_>>,
        readiness: Option<&readiness::ObjectStatus>,
    ) -> Inference {
        let new = new_state.map(NewState::value);
        let new_phase = pod_phase_change(w, old, new);
        let op = if w.subresource.is_empty() {
            w.verb
        } else {
            w.subresource
        };
        // The state before is read only when it matters (most objects carry
        // no CPID); a malformed annotation is reported by the write that set it.
        let (cpid, cpid_kept) = match new {
            Some(state) => match self.object_cpid(w.object, state, true) {
                Some(c) => {
                    let before = old.and_then(|o| self.object_cpid(w.object, o, false));
                    (Some(c), before.is_some_and(|b| b.cpid == c.cpid))
                }
                None => (None, false),
            },
            None => (old.and_then(|o| self.object_cpid(w.object, o, true)), true),
        };
        let timer = w.class.and_then(|class| {
            let writer = (w.source == ChangeSource::Audit).then_some(w.user);
            self.rules
                .timers()
                .iter()
                .find(|t| t.fires(w.object, writer, class, old.map(|o| &**o), new))
                .map(|t| t.name.as_str())
        });
        let effect = Effect {
            cpid,
            cpid_kept,
            object: w.object,
            span: w.span,
            arrival: w.arrival,
            noted_through: w.noted_through,
            writer: (w.source == ChangeSource::Audit).then_some(w.user),
            class: w.class,
            op,
            received: w.received,
            completed: w.completed,
            revision: own.map_or_else(Revision::default, |o| o.revision),
            new_phase,
            timer,
        };
        // Before its own cascade is known: a write that waits for this one
        // ([`super::super::causes::CauseIndex::infer`]) then finds them.
        self.causes.register_relations(w.object, relations);
        let inference = self
            .causes
            .infer(&effect, relations, own, || {
                new.map(|state| holder_relations(&selectors.selected_by(w.object, state), w.object))
                    .unwrap_or_default()
            })
            .await;
        if w.context {
            return inference;
        }
        self.role_counters[inference.role as usize].inc();
        if !self.change_sinks.is_empty() {
            let readiness = readiness.filter(|_| !w.deleted).map(|st| Readiness {
                status: st.status.as_str().to_string(),
                message: st.message.clone(),
            });
            let objects = self.change_sinks.iter().any(|s| s.wants_objects());
            let record = ChangeRecord {
                object: w.object.clone(),
                uid: w.uid.to_string(),
                source: w.source,
                user: w.user.to_string(),
                verb: w.verb.to_string(),
                subresource: w.subresource.to_string(),
                code: w.code,
                received: w.received,
                completed: w.completed,
                span: w.span,
                cause_logged_after: inference.cause_logged_after,
                version: w.version,
                readiness,
                deleted: w.deleted,
                role: inference.role,
                cause: inference.cause.clone(),
                root: inference.root,
                timer: inference.timer.clone(),
                depth: inference.depth,
                cpid: inference.cpid,
                failure: w.failure.clone(),
                audit_id: w.audit_id.to_string(),
                annotations: w.annotations.clone(),
                old: old.filter(|_| objects).cloned(),
                new: new_state.filter(|_| objects).map(NewState::shared),
                related: if objects {
                    relations
                        .iter()
                        .map(|(r, _)| RelatedObject {
                            object: r.target.clone(),
                            class: r.class.clone(),
                            is_parent: r.role == Role::Parent,
                        })
                        .collect()
                } else {
                    Vec::new()
                },
            };
            for sink in &self.change_sinks {
                sink.record(&record);
            }
        }
        inference
    }
}

/// The relations of `object` towards the selecting objects of `links` that
/// pick it (a claim towards its StatefulSet).
fn holder_relations(
    links: &[crate::aggregate::selectors::SelectorLink],
    object: &ObjectRef,
) -> Vec<(Relation, String)> {
    links
        .iter()
        .filter(|l| l.relation.target == *object)
        .map(|l| {
            let rel = Relation {
                target: l.holder.clone(),
                role: l.relation.role.reverse(),
                class: l.relation.class.clone(),
            };
            (rel, String::new())
        })
        .collect()
}

/// The writes counters by role, in [`CascadeRole`] order (looked up once).
fn role_counters(metrics: &Metrics) -> [Counter; 3] {
    [
        CascadeRole::Root,
        CascadeRole::Effect,
        CascadeRole::Unexplained,
    ]
    .map(|role| {
        metrics
            .cascade_writes
            .get_or_create(&crate::metrics::CascadeRoleLabel { role })
            .clone()
    })
}

/// The span id of an audit event's span, with its trace.
pub(super) fn audit_span_ref(ow: &ObjectWindow, audit_id: &str) -> SpanRef {
    SpanRef {
        trace_id: ow.trace_id().to_bytes(),
        span_id: span_model::audit_span_id(ow, audit_id).to_bytes(),
    }
}

impl CauseInferrer {
    /// The CPID `state` carries in its annotations; a malformed one is
    /// counted and logged (at most every 10 s) if `report`, and the write
    /// shown without.
    fn object_cpid(&self, object: &ObjectRef, state: &Value, report: bool) -> Option<WriteCpid> {
        let annotations = crate::json::pointer(state, "/metadata/annotations")?.as_object()?;
        let read = kascade_cpid::ChangeContext::read_with(|name| {
            annotations.get(&name).and_then(Value::as_str)
        });
        for problem in read.problems.iter().filter(|_| report) {
            self.metrics.cpid_malformed.inc();
            if self.cpid_warned.should_log() {
                tracing::warn!(%object, %problem, "ignored a malformed change-propagation annotation (further ones within 10 s are only counted)");
            }
        }
        read.context.map(|c| WriteCpid {
            cpid: c.cpid,
            origin: if c.from_traceparent {
                CpidOrigin::Traceparent
            } else {
                CpidOrigin::Annotation
            },
        })
    }
}

/// A Pod status write that changed `status.phase`: the new phase.
fn pod_phase_change<'a>(
    w: &Write<'_>,
    old: Option<&Arc<Value>>,
    new: Option<&'a Value>,
) -> Option<&'a str> {
    if w.object.resource != "pods" || !w.object.group.is_empty() || w.subresource != "status" {
        return None;
    }
    fn phase(v: &Value) -> Option<&str> {
        crate::json::pointer(v, "/status/phase").and_then(Value::as_str)
    }
    let after = phase(new?)?;
    (old.and_then(|o| phase(o)) != Some(after)).then_some(after)
}

#[cfg(test)]
mod tests;
