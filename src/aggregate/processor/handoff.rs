//! The values handed from stage to stage: a write applied to its object's
//! state ([`AppliedWrite`], from the applier through the ledger and the
//! cause stage to span planning), what the cause stage is asked about
//! ([`Write`], [`NewState`]), and the spans that wait on the span cache
//! ([`Emission`], for the emitter).

use std::sync::Arc;
use std::time::SystemTime;

use crate::flow::{AuditEvent, ChangeSource, SpanRef};
use crate::json::Value;
use crate::model::ObjectRef;
use crate::model::ObjectWindow;

use super::super::rules::ChangeClass;
use crate::span_model::SpanBuf;

use super::super::rules::Relation;
use super::super::selectors::SelectorLink;
use super::applied::{self, is_older, resource_version};

/// What an audited write did to its object ([`super::applier::Applier::apply`]),
/// its versions settled with the list-watch's ([`super::reconcile::Ledger::reconcile_audit`]).
pub(super) struct AppliedWrite {
    pub ow: ObjectWindow,
    pub key: String,
    pub old: Option<Arc<Value>>,
    pub outcome: applied::Outcome,
    pub uid: String,
    pub new_rv: String,
    pub old_rv: String,
    pub deleted: bool,
    /// The new state is kept (not a delete, not older than the one kept).
    pub keeps_state: bool,
    pub relations: Vec<(Relation, String)>,
}

impl AppliedWrite {
    /// Sets the version before the write and whether its state is kept,
    /// from the new version and `watch_old_rv` (the version before, as the
    /// list-watch saw it; empty if unknown).
    pub(super) fn settle_versions(&mut self, ev: &AuditEvent, watch_old_rv: &str) {
        let last_rv = self.old.as_deref().map(resource_version).unwrap_or("");
        self.old_rv = applied::old_resource_version(ev, watch_old_rv, last_rv, &self.new_rv);
        self.keeps_state =
            !self.deleted && self.outcome.state.is_some() && !is_older(&self.new_rv, last_rv);
    }
}

/// The spans of a processed write that wait on the span cache: see
/// [`super::Processor::process_until_emission`].
pub struct Emission(pub(super) Pending);

pub(super) enum Pending {
    /// An audited write's object span (once per window), audit span and
    /// link spans.
    Write {
        ow: ObjectWindow,
        uid: String,
        replayed: bool,
        span: SpanBuf,
        relations: Vec<(Relation, String)>,
        selector_links: Vec<SelectorLink>,
        at: SystemTime,
    },
    /// A Kubernetes Event's span on the object it is about (whose object
    /// span is created if the window has none yet).
    Event {
        ow: ObjectWindow,
        involved_uid: String,
        span: SpanBuf,
    },
}

/// What the processor knows of a write when it asks for its cause.
pub(super) struct Write<'a> {
    pub object: &'a ObjectRef,
    pub span: SpanRef,
    /// Its place in arrival order (see [`Effect::arrival`]).
    pub arrival: u64,
    /// See [`Effect::noted_through`].
    pub noted_through: u64,
    /// Empty for a change only the list-watch saw.
    pub user: &'a str,
    pub verb: &'a str,
    pub subresource: &'a str,
    pub class: Option<ChangeClass>,
    pub code: i32,
    pub received: SystemTime,
    pub completed: SystemTime,
    pub source: ChangeSource,
    pub uid: &'a str,
    pub deleted: bool,
    /// The Status message of a refused write.
    pub failure: Option<String>,
    /// The request's audit ID; empty for a change only the watch saw.
    pub audit_id: &'a str,
    /// The apiserver's annotations of the request.
    pub annotations: &'a crate::flow::RequestAnnotations,
    /// The object's resourceVersion after the write, when an integer.
    pub version: Option<u64>,
    /// Restart context ([`Accepted::context`](crate::flow::Accepted::context)):
    /// inferred for later writes, not handed to the change sinks.
    pub context: bool,
}

/// An object's state after a write, for [`CauseInferrer::infer_cause`]:
/// shared where the processor keeps it in an `Arc` (an audited write), so a
/// change record holds it without a copy of the whole object.
#[derive(Clone, Copy)]
pub(super) enum NewState<'a> {
    Shared(&'a Arc<Value>),
    Borrowed(&'a Value),
}

impl<'a> NewState<'a> {
    pub(super) fn value(self) -> &'a Value {
        match self {
            NewState::Shared(v) => v,
            NewState::Borrowed(v) => v,
        }
    }

    pub(super) fn shared(self) -> Arc<Value> {
        match self {
            NewState::Shared(v) => Arc::clone(v),
            NewState::Borrowed(v) => Arc::new(v.clone()),
        }
    }
}
