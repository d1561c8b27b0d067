//! The applier stage: each write applied to the last state of its object,
//! redacted, diffed, and the state kept for the next write's diff. Owns the
//! last states, the redactor and the label index (labels and selectors, for
//! `selector` rules).

use std::sync::Arc;

use crate::flow::{Accepted, AuditEvent, ObjectText};
use crate::json::{JsonValueTrait as _, Value};
use crate::model::{ObjectRef, ObjectWindow, Windowing};

use super::super::last_states::StateStore;
use super::super::redact::{HiddenValues, Redactor};
use super::super::relations::{KindRegistry, all_relations};
use super::super::rules::{Relation, RuleSet};
use super::super::selectors::{SelectorIndex, SelectorLink};
use super::applied::{self, prepare_watched, resource_version};
use super::handoff::AppliedWrite;
use super::plan::failure_message;
use super::{ParsedResponse, ProcessError};

pub(super) struct Applier {
    /// Last seen state of each object (redacted, without managedFields).
    states: StateStore,
    redactor: Redactor,
    /// Labels and selectors, for `selector` rules.
    selectors: SelectorIndex,
    rules: Arc<RuleSet>,
    kinds: Arc<KindRegistry>,
    windowing: Windowing,
}

impl Applier {
    pub(super) fn new(
        states: StateStore,
        redactor: Redactor,
        rules: Arc<RuleSet>,
        kinds: Arc<KindRegistry>,
        windowing: Windowing,
    ) -> Self {
        Applier {
            states,
            redactor,
            selectors: SelectorIndex::new(&rules),
            rules,
            kinds,
            windowing,
        }
    }

    pub(super) fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    pub(super) fn selectors(&self) -> &SelectorIndex {
        &self.selectors
    }

    pub(super) fn states(&self) -> &StateStore {
        &self.states
    }

    /// The last state kept of the object of `key`.
    pub(super) fn last_state(&self, key: &str) -> Option<Arc<Value>> {
        self.states.get(key)
    }

    /// Keeps a version the list-watch saw as the object's last state.
    pub(super) fn keep_watched(&self, key: String, state: &Value) -> Result<(), ProcessError> {
        self.states.put(key, Arc::new(state.clone()), None)?;
        Ok(())
    }

    /// Forgets a deleted object: its state and its labels and selectors.
    pub(super) fn forget(&self, key: &str, obj: &ObjectRef) {
        self.states.remove(key);
        self.selectors.remove(obj);
    }

    /// What an audited write did to its object: the new state and diff
    /// (redacted when `redact`, with the values redaction hid), the versions
    /// before and after as the audit event and the last state show them, the
    /// relations it shows.
    pub(super) fn apply(
        &self,
        item: &Accepted,
        response: Option<ParsedResponse>,
        redact: bool,
    ) -> AppliedWrite {
        let ev = &item.event;
        let obj = &item.object;
        let ow = ObjectWindow {
            object: obj.clone(),
            window_start: self.windowing.window_start(ev.request_received_timestamp),
        };
        let key = obj.key();
        let (old, old_fields) = self.states.get_with_fields(&key).unzip();
        let old_fields = old_fields.flatten();
        let outcome = applied::apply(
            ev,
            obj,
            old.as_ref(),
            old_fields.as_deref(),
            &self.kinds,
            redact.then_some(&self.redactor),
            response,
        );
        // A state that is the response as logged: its uid and version as the
        // decode read them (a lookup each in the parsed state cost ≈ 1 % of
        // the collector's instructions).
        let logged = ev
            .response_object
            .as_ref()
            .filter(|_| outcome.state_text.is_some());
        let uid = match logged.and_then(ObjectText::uid) {
            Some(uid) => uid.to_string(),
            None => outcome
                .state
                .as_ref()
                .and_then(|s| crate::json::pointer(&**s, "/metadata/uid"))
                .and_then(Value::as_str)
                .unwrap_or(&item.uid)
                .to_string(),
        };
        // A binding's state is the last one with `spec.nodeName` set: its
        // version is the one before the binding, not a new one.
        let new_rv = if ev.subresource() == "binding" {
            String::new()
        } else if let Some(rv) = logged.and_then(ObjectText::resource_version) {
            rv.to_string()
        } else {
            outcome
                .state
                .as_ref()
                .map(|s| resource_version(s).to_string())
                .unwrap_or_default()
        };
        // Relations come from the newest state known, or the snapshot of a deleted object.
        let deleted = applied::removes_object(ev, &outcome);
        let relations = outcome
            .state
            .as_ref()
            .or(outcome.snapshot.as_ref())
            .or(old.as_ref())
            .map(|s| all_relations(obj, s, &self.kinds, &self.rules))
            .unwrap_or_default();
        let mut w = AppliedWrite {
            ow,
            key,
            old,
            outcome,
            uid,
            new_rv,
            old_rv: String::new(),
            deleted,
            keeps_state: false,
            relations,
        };
        w.settle_versions(ev, "");
        w
    }

    /// The label index learns the new labels and selectors of a write
    /// whose state is kept; the selector links that result.
    pub(super) fn index_labels(&self, w: &AppliedWrite) -> Vec<SelectorLink> {
        match &w.outcome.state {
            Some(state) if w.keeps_state => self.selectors.update(&self.rules, &w.ow.object, state),
            _ => Vec::new(),
        }
    }

    /// The object's state after the write, for the next write's diff; a
    /// deleted object is forgotten. Gives back the write's object window.
    pub(super) fn keep(&self, w: AppliedWrite) -> Result<ObjectWindow, ProcessError> {
        if w.deleted {
            self.states.remove(&w.key);
            self.selectors.remove(&w.ow.object);
        } else if let Some(state) = w.outcome.state
            && w.keeps_state
        {
            self.states.put_with_fields(
                w.key,
                state,
                w.outcome.state_text,
                w.outcome.state_fields,
            )?;
        }
        Ok(w.ow)
    }

    /// [`failure_message`], without the values redaction hides in the
    /// write's objects (when `redact`): an admission webhook's denial may
    /// quote them.
    pub(super) fn failure_message(&self, ev: &AuditEvent, redact: bool) -> String {
        let message = failure_message(ev);
        let Some(r) = ev.object_ref.as_ref().filter(|_| redact) else {
            return message;
        };
        let objects: Vec<&str> = [&ev.request_object, &ev.response_object]
            .into_iter()
            .flatten()
            .map(ObjectText::get)
            .collect();
        self.redactor
            .scrub(&r.api_group, &r.resource, &objects, &message)
            .unwrap_or(message)
    }

    /// A version from the list-watch, without managedFields and redacted;
    /// the values redaction hid.
    pub(super) fn prepare_watched(&self, obj: &ObjectRef, state: &mut Value) -> HiddenValues {
        prepare_watched(obj, state, &self.kinds, &self.redactor)
    }

    /// Every relation `state` of `obj` shows (owners, rules).
    pub(super) fn relations(&self, obj: &ObjectRef, state: &Value) -> Vec<(Relation, String)> {
        all_relations(obj, state, &self.kinds, &self.rules)
    }

    /// The label index learns `obj`'s labels and selectors; the selector
    /// links that result.
    pub(super) fn index_state(&self, obj: &ObjectRef, state: &Value) -> Vec<SelectorLink> {
        self.selectors.update(&self.rules, obj, state)
    }
}

/// The applier stage alone, with the repository's rules (for the unit
/// tests of this stage and of the stages after it).
#[cfg(test)]
pub(super) fn applier() -> Applier {
    let cfg = super::ProcessorConfig::default();
    let metrics = crate::metrics::Metrics::default();
    Applier::new(
        StateStore::new(cfg.state_cache_bytes, cfg.hot_states, &metrics),
        Redactor::new(None),
        Arc::new(super::test_support::repository_rules()),
        Arc::new(KindRegistry::default()),
        cfg.windowing,
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{accepted, audit_values};
    use super::*;

    /// The deployment scenario's successful writes of its Deployment's spec
    /// (create, then updates), as the source accepts them.
    fn deployment_writes() -> Vec<Accepted> {
        audit_values("deployment")
            .iter()
            .filter(|e| {
                e["objectRef"]["resource"] == "deployments"
                    && e["objectRef"].get("subresource").is_none()
                    && e["responseStatus"]["code"].as_i64().unwrap_or(0) < 300
            })
            .filter_map(accepted)
            .collect()
    }

    #[test]
    fn a_write_is_diffed_against_the_state_the_previous_write_left() {
        let a = applier();
        let writes = deployment_writes();
        assert!(writes.len() >= 2, "a create and a later write");
        let created = a.apply(&writes[0], None, true);
        assert_eq!(writes[0].event.verb, "create");
        assert!(
            created.outcome.snapshot.is_some(),
            "a create shows the object"
        );
        assert!(created.old.is_none() && created.keeps_state && !created.deleted);
        assert!(!created.uid.is_empty());
        assert!(
            created.relations.is_empty(),
            "a Deployment has no owner: {:?}",
            created.relations.len()
        );
        let created_rv = created.new_rv.clone();
        // Not kept yet: the next write would see no state.
        assert!(a.last_state(&created.key).is_none());
        a.keep(created).unwrap();
        let next = a.apply(&writes[1], None, true);
        assert!(next.old.is_some(), "the kept state");
        assert_eq!(next.old_rv, created_rv, "the version before the write");
        assert!(
            next.outcome.snapshot.is_some() || !next.outcome.changes.is_empty(),
            "a diff or a snapshot"
        );
    }

    #[test]
    fn a_replicaset_shows_its_owner_and_joins_the_label_index() {
        let a = applier();
        let rs = audit_values("deployment")
            .iter()
            .find(|e| {
                e["verb"] == "create"
                    && e["objectRef"]["resource"] == "replicasets"
                    && e["responseStatus"]["code"] == 201
            })
            .and_then(accepted)
            .expect("the scenario creates a ReplicaSet");
        let w = a.apply(&rs, None, true);
        let owner = w
            .relations
            .iter()
            .find(|(r, _)| r.target.resource == "deployments")
            .expect("its Deployment");
        assert!(!owner.1.is_empty(), "the owner's uid");
        // Its selector is indexed: no Pod yet to link.
        assert!(a.index_labels(&w).is_empty());
    }

    #[test]
    fn a_refusal_quoting_nothing_hidden_keeps_its_message() {
        let a = applier();
        let conflict = audit_values("deployment")
            .into_iter()
            .find(|e| e["responseStatus"]["code"] == 409)
            .expect("a conflict");
        let item = accepted(&conflict).unwrap();
        let message = conflict["responseStatus"]["message"].as_str().unwrap();
        assert_eq!(a.failure_message(&item.event, true), message);
        let w = a.apply(&item, None, true);
        assert!(
            w.outcome.state.is_none() && !w.keeps_state,
            "nothing written"
        );
    }
}
