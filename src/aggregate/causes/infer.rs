//! How a write's cause is chosen: of the changes of related objects that a
//! propagation says its writer reacts to, the latest completed before the
//! write was received; waiting, bounded, for causes still being processed
//! in other shards.

use std::sync::Arc;

use super::entry;
use super::index::{Candidate, EffectTimes, ObjectChanges};
use super::{CauseIndex, ChangeEntry, Effect, Inference, PodEnd, RESOLVE_WAIT, Resolved, Revision};
use crate::aggregate::rules::{ChangeClass, Relation, Role, Via};
use crate::flow::{CascadeRole, Cause, CpidOrigin, WriteCpid};
use crate::internal_events::{CauseNotKnownInTime, InternalEvent};
use crate::model::ObjectRef;

/// The CPID of an effect: the one its write set on the object; else its
/// cause's, carried over as an instrumented writer would have (an
/// uninstrumented one keeps whatever CPID the object had, e.g. the
/// deployment controller scaling down an old ReplicaSet that still carries
/// the previous rollout's).
fn effect_cpid(effect: &Effect<'_>, cause: Option<WriteCpid>) -> Option<WriteCpid> {
    let inferred = cause.map(|c| WriteCpid {
        cpid: c.cpid,
        origin: CpidOrigin::Inferred,
    });
    match (effect.cpid, inferred) {
        (Some(own), Some(inferred)) if effect.cpid_kept && own.cpid != inferred.cpid => {
            Some(inferred)
        }
        (Some(own), _) => Some(own),
        (None, inferred) => inferred,
    }
}

impl CauseIndex {
    /// The cause of `effect`, given the relations its state shows, and the
    /// cascade it joins. `own` is the effect's own entry (a successful
    /// write), resolved here so its effects can go on.
    ///
    /// A controller's write that finds no cause while writes that arrived
    /// before it are still being processed in other shards waits for them
    /// (the relation that explains it may be one of theirs: the selector of
    /// a StatefulSet created 16 ms before its first claim), then looks again
    /// with the relations `relations_now` finds then.
    pub(crate) async fn infer(
        &self,
        effect: &Effect<'_>,
        relations: &[(Relation, String)],
        own: Option<&Arc<ChangeEntry>>,
        relations_now: impl FnOnce() -> Vec<(Relation, String)>,
    ) -> Inference {
        let mut best = if effect.timer.is_some() {
            Best::default()
        } else {
            self.best_candidate(effect, relations)
        };
        // A status write that may have finished a Pod counts once its shard
        // has said so; it arrived first, so waiting for it cannot deadlock.
        while let Some(undecided) = best.undecided.take() {
            self.metrics.cascade_waits_for_earlier.inc();
            if undecided
                .resolved(RESOLVE_WAIT, &self.ready)
                .await
                .is_none()
            {
                CauseNotKnownInTime {
                    effect: effect.object,
                }
                .emit(&self.metrics);
                break;
            }
            best = self.best_candidate(effect, relations);
        }
        let Best {
            mut found,
            mut later_only,
            ..
        } = best;
        if found.is_none()
            && self.is_controller_write(effect)
            && self.earlier_unresolved(effect.arrival).is_some()
        {
            self.metrics.cascade_waits_for_earlier.inc();
            if !self.wait_for_earlier(effect.arrival).await {
                CauseNotKnownInTime {
                    effect: effect.object,
                }
                .emit(&self.metrics);
            }
            let more = relations_now();
            let relations: std::borrow::Cow<'_, [(Relation, String)]> = if more.is_empty() {
                relations.into()
            } else {
                [relations, &more].concat().into()
            };
            Best {
                found,
                later_only,
                ..
            } = self.best_candidate(effect, &relations);
        }
        let inference = match found {
            Some(c) => {
                // Only a cause that arrived first is waited for: a later
                // one may be queued behind this effect, so it always stands
                // for its cascade (whether another shard placed it first is
                // chance, and the trace must not depend on it).
                let resolved = if c.entry.arrival < effect.arrival {
                    match c.entry.resolved(RESOLVE_WAIT, &self.ready).await {
                        Some(known) => known,
                        None => {
                            CauseNotKnownInTime {
                                effect: effect.object,
                            }
                            .emit(&self.metrics);
                            self.unresolved(&c.entry).unwrap_or(Resolved {
                                root: c.entry.span,
                                depth: 0,
                                cpid: None,
                                pod_end: None,
                            })
                        }
                    }
                } else {
                    self.metrics.cascade_causes_arrived_later.inc();
                    self.standing_for(&c.entry)
                };
                let hop = effect
                    .received
                    .duration_since(c.entry.completed().time())
                    .unwrap_or_default();
                let same = c.object == *effect.object;
                // A create made because what the writer made before failed
                // (a Job's next Pod): its next attempt, after its back-off.
                let after_failure = resolved.pod_end == Some(PodEnd::Failed)
                    && !same
                    && effect.class == Some(ChangeClass::Create);
                Inference {
                    cause_logged_after: false,
                    role: CascadeRole::Effect,
                    root: resolved.root,
                    depth: resolved.depth + 1,
                    cpid: effect_cpid(effect, resolved.cpid),
                    timer: None,
                    cause: Some(Cause {
                        span: c.entry.span,
                        // Joined, not formatted: one per write.
                        name: [
                            c.entry.user.as_str(),
                            c.entry.op.as_str(),
                            &c.object.group_resource(),
                            &object_name(&c.object),
                        ][usize::from(c.entry.user.is_empty())..]
                            .join(" "),
                        edge: if after_failure {
                            crate::flow::edge_after_failure(
                                &c.object.resource,
                                &effect.object.resource,
                                effect.op,
                            )
                        } else {
                            edge(&c.object, effect, same)
                        },
                        rule: c.rule.to_string(),
                        hop,
                        object: c.object,
                    }),
                }
            }
            None => {
                let role = if self.is_controller_write(effect) {
                    self.metrics.cascade_unexplained.inc();
                    if later_only {
                        // Only changes received after this request: clock
                        // skew between apiservers or out-of-order input.
                        self.metrics.cascade_causes_after_effect.inc();
                    }
                    CascadeRole::Unexplained
                } else {
                    CascadeRole::Root
                };
                Inference {
                    cause_logged_after: role == CascadeRole::Unexplained && later_only,
                    role,
                    cause: None,
                    root: effect.span,
                    depth: 0,
                    cpid: effect.cpid,
                    timer: effect.timer.map(str::to_string),
                }
            }
        };
        if let Some(own) = own {
            self.resolve_own(
                own,
                Resolved {
                    root: inference.root,
                    depth: inference.depth,
                    cpid: inference.cpid,
                    pod_end: PodEnd::of(effect.new_phase),
                },
            );
        }
        inference
    }

    /// Whether a propagation says the effect's writer reacts to changes (a
    /// controller's write, not a user's nor a timer's): one without a cause
    /// is `unexplained`.
    fn is_controller_write(&self, effect: &Effect<'_>) -> bool {
        effect.timer.is_none()
            && effect.writer.is_some()
            && effect.class.is_some_and(|class| {
                let mut writer = self.writers.of(effect.writer);
                self.propagations
                    .iter()
                    .any(|p| p.explains_given(effect.object, class, |re| writer.matches(re)))
            })
    }

    /// The latest change a propagation says the effect's writer reacts to,
    /// completed before the effect was received.
    fn best_candidate<'p>(
        &'p self,
        effect: &Effect<'_>,
        relations: &[(Relation, String)],
    ) -> Best<'p> {
        let Some(class) = effect.class else {
            return Best::default();
        };
        let mut best: Option<Candidate<'p>> = None;
        let mut undecided: Option<Arc<ChangeEntry>> = None;
        // Only when no change completed before the effect did.
        let mut best_late: Option<Candidate<'p>> = None;
        let mut later = false;
        let own = self.objects.get(effect.object.hash());
        let times = EffectTimes {
            span: effect.span,
            arrival: effect.arrival,
            noted_through: effect.noted_through,
            received: entry::Nanos::of(effect.received),
            completed: entry::Nanos::of(effect.completed),
            revision: effect.revision,
        };
        let mut writer = self.writers.of(effect.writer);
        for p in &self.propagations {
            if !p.explains_given(effect.object, class, |re| writer.matches(re)) {
                continue;
            }
            let mut consider = |changes: &ObjectChanges, object: &ObjectRef, same: bool| {
                // Revisions order writes within one cluster only.
                let times = if object.cluster == effect.object.cluster {
                    times
                } else {
                    EffectTimes {
                        revision: Revision::default(),
                        ..times
                    }
                };
                let found = changes.latest_before(p, &times, same);
                later |= found.later;
                if let Some(u) = found.undecided
                    && undecided.as_ref().is_none_or(|d| u.arrival > d.arrival)
                {
                    undecided = Some(u);
                }
                if let Some(entry) = found.seen
                    && best.as_ref().is_none_or(|b| {
                        entry.stored_after(&b.entry, object.cluster == b.object.cluster)
                    })
                {
                    best = Some(Candidate {
                        entry,
                        object: object.clone(),
                        rule: &p.name,
                    });
                }
                if let Some(entry) = found.late
                    && best_late.as_ref().is_none_or(|b| {
                        (entry.received, entry.span) > (b.entry.received, b.entry.span)
                    })
                {
                    best_late = Some(Candidate {
                        entry,
                        object: object.clone(),
                        rule: &p.name,
                    });
                }
            };
            match &p.via {
                Via::SameObject => {
                    if let Some(own) = &own {
                        let c = own.lock().unwrap_or_else(|p| p.into_inner());
                        consider(&c, effect.object, true);
                    }
                }
                Via::Sibling { class: rel_class } => {
                    for (rel, _) in relations {
                        if rel.class != *rel_class || rel.role != Role::Parent {
                            continue;
                        }
                        let Some(parent) = self.objects.get(rel.target.hash()) else {
                            continue;
                        };
                        let siblings = parent
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .holders(rel_class, Role::Child);
                        for (hash, sibling) in siblings {
                            if hash == effect.object.hash() {
                                continue;
                            }
                            if let Some(other) = self.objects.get(hash) {
                                let c = other.lock().unwrap_or_else(|p| p.into_inner());
                                consider(&c, &sibling, false);
                            }
                        }
                    }
                }
                Via::Namespace => {
                    if !effect.object.namespace.is_empty() {
                        let ns = ObjectRef::new(
                            &effect.object.cluster,
                            "",
                            "namespaces",
                            "",
                            effect.object.namespace.clone(),
                        );
                        if let Some(other) = self.objects.get(ns.hash()) {
                            let c = other.lock().unwrap_or_else(|p| p.into_inner());
                            consider(&c, &ns, false);
                        }
                    }
                }
                Via::Relation {
                    class: rel_class,
                    cause_role,
                } => {
                    for (rel, _) in relations {
                        if rel.class == *rel_class
                            && rel.role == *cause_role
                            && let Some(other) = self.objects.get(rel.target.hash())
                        {
                            let c = other.lock().unwrap_or_else(|p| p.into_inner());
                            consider(&c, &rel.target, false);
                        }
                    }
                    let holders = own.as_ref().map(|o| {
                        let c = o.lock().unwrap_or_else(|p| p.into_inner());
                        c.holders(rel_class, *cause_role)
                    });
                    for (hash, holder) in holders.into_iter().flatten() {
                        if let Some(other) = self.objects.get(hash) {
                            let c = other.lock().unwrap_or_else(|p| p.into_inner());
                            consider(&c, &holder, false);
                        }
                    }
                }
            }
        }
        let found = best.or(best_late);
        Best {
            later_only: found.is_none() && later,
            found,
            undecided,
        }
    }

    /// The cascade of a cause that arrived after its effect: the cause
    /// stands for it, with the CPID a create gave its object — the same
    /// whether or not its shard has got to it yet.
    fn standing_for(&self, cause: &ChangeEntry) -> Resolved {
        let created = self
            .created_cpids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&cause.arrival)
            .copied();
        // A create's own CPID is forgotten there once it is resolved.
        let own = || {
            cause
                .resolved_now()
                .and_then(|r| r.cpid)
                .filter(|c| c.origin != CpidOrigin::Inferred)
        };
        Resolved {
            root: cause.span,
            depth: 0,
            cpid: created.or_else(|| (cause.class == ChangeClass::Create).then(own).flatten()),
            pod_end: None,
        }
    }
}

/// What [`CauseIndex::best_candidate`] found.
#[derive(Default)]
struct Best<'p> {
    found: Option<Candidate<'p>>,
    /// None found, but a triggering change was received after the effect.
    later_only: bool,
    /// The latest status write that arrived first and may have finished a
    /// Pod, still being processed ([`super::index::Found::undecided`]).
    undecided: Option<Arc<ChangeEntry>>,
}

fn object_name(o: &ObjectRef) -> String {
    if o.namespace.is_empty() {
        o.name.clone()
    } else {
        [o.namespace.as_str(), &o.name].join("/")
    }
}

/// The edge class a hop is counted under (`cascade.edge`).
fn edge(cause: &ObjectRef, effect: &Effect<'_>, same: bool) -> String {
    if let Some(phase) = effect.new_phase {
        return format!("{} → {phase}", effect.object.resource);
    }
    if same {
        format!("{} {}", effect.object.resource, effect.op)
    } else {
        format!(
            "{} → {} {}",
            cause.resource, effect.object.resource, effect.op
        )
    }
}
