//! What flows between the stages: the contract `source` (audit webhook,
//! audit files, list-watch), `aggregate` (the processor) and `export` share,
//! so that no stage reads another's internals.
//!
//! ```text
//! source ──Work (Audit(Accepted) | Watch(WatchChange) | Event(K8sEvent))──▶ Intake ──▶ aggregate
//! aggregate ──EncodedSpan (span_model)──▶ export;  ExportProgress counts both sides
//! ```

mod annotations;
mod audit;
mod change;
mod component_traces;
mod intake;
mod k8s_event;
mod object_json;
mod progress;
mod sent_links;

use std::sync::Arc;
use std::time::SystemTime;

use crate::json::Value;

pub(crate) use annotations::NO_ANNOTATIONS;
pub use annotations::RequestAnnotations;
pub(crate) use audit::{AUDIT_API_VERSION, AuditEvent, AuditLevel, FailedCreate, UNNAMED_OBJECT};
pub use change::CascadeRole;
pub use change::ChangeRecord;
pub use change::ChangeSink;
pub use change::ChangeSource;
pub use change::CpidOrigin;
pub(crate) use change::{
    Cause, EventRecord, Readiness, RelatedObject, SpanRef, WriteCpid, edge_after_failure,
    is_after_failure,
};
pub(crate) use component_traces::{ComponentTraceSink, QueueFull};
pub use intake::Intake;
pub(crate) use intake::{AdmitError, Barrier, Shutdown};
pub use k8s_event::K8sEvent;
pub(crate) use k8s_event::{InvolvedObject, is_event_resource, precise_occurrence};
#[cfg(test)]
pub(crate) use object_json::fixture_objects;
pub(crate) use object_json::{FieldHashes, ObjectText, object_text, owner_references_of};
pub(crate) use progress::{ExportProgress, Gauges, OutputHealth, unix_ms};
#[cfg(feature = "test-support")]
pub use sent_links::SENT_LINKS_FILE;
pub use sent_links::SentLinks;
pub(crate) use sent_links::{EarlierLink, SentLinksMetrics};

use crate::model::ObjectRef;

/// An audit event that passed the filter, with its object resolved.
pub struct Accepted {
    pub event: AuditEvent,
    pub object: ObjectRef,
    pub uid: String,
    /// Replayed from the durable spool after a crash: the object and link
    /// spans this event reaches may have been reserved (in a shared span
    /// cache) but never exported, so they are emitted again (same ids),
    /// links once per process, none the spool journaled as exported and
    /// those an earlier process may have sent as they were ([`SentLinks`]).
    pub replayed: bool,
    /// Read again at a restart from the spool's released batches, which
    /// were exported before: processed for what later writes need (object
    /// states, causes, seen Events) and nothing sent or handed to a change
    /// sink, so the batches replayed after it are shown as an uninterrupted
    /// run would show them.
    pub context: bool,
    /// A create refused before its object was named: `object` is then named
    /// by the `generateName` prefix, and the write is shown on the owner's
    /// span when the request names an owner.
    pub failed_create: Option<Box<FailedCreate>>,
    /// Its place in arrival order, given by the dispatcher before sharding
    /// (0 until then): causes that arrived after it are not waited for.
    pub arrival: u64,
    /// The last place in arrival order noted when the dispatcher handed it
    /// to its shard (0: processed in arrival order, nothing noted ahead of
    /// it but what was read): writes noted after that are not candidate
    /// causes, so that what it finds does not depend on how far the
    /// dispatcher ran ahead of the shards.
    pub noted_through: u64,
    /// More items of its webhook batch follow it (false for the last, and
    /// for items that come alone). The collector's look-ahead
    /// ([`LookAhead::Batch`](crate::aggregate::LookAhead)) reaches to the end
    /// of an item's batch and no further, so that what it finds does not
    /// depend on when the next batch arrives: a restart's replay finds what
    /// an uninterrupted run found.
    pub more_in_batch: bool,
    /// Self-tracing (crate::telemetry): the `process` span of the webhook
    /// batch this event came in, shared by its events and ended when the
    /// last is processed; disabled when self-tracing is off.
    pub batch_span: tracing::Span,
}

/// A version of an object seen by the list-watch.
#[derive(Clone, Debug)]
pub struct WatchChange {
    pub object: ObjectRef,
    pub kind: WatchKind,
    /// The object as the apiserver sent it (not yet redacted).
    pub state: Value,
    pub observed: SystemTime,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchKind {
    /// Part of the initial list (or a re-list): seeds the state, shown only
    /// if it differs from what kascade last saw.
    Listed,
    Added,
    Modified,
    Deleted,
}

impl WatchKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchKind::Listed => "listed",
            WatchKind::Added => "added",
            WatchKind::Modified => "modified",
            WatchKind::Deleted => "deleted",
        }
    }
}

/// One unit of work for the processor; all work about one object goes to the
/// same worker, in order.
pub enum Work {
    /// An audit event that passed the filter.
    Audit(Box<Accepted>),
    /// A version of an object from the list-watch.
    Watch(WatchChange),
    /// A Kubernetes Event from the Event watch (`own` is the Event object).
    Event {
        own: ObjectRef,
        uid: String,
        event: Box<K8sEvent>,
        at: SystemTime,
    },
    /// A mergelog from an instrumented controller (`POST /cpid/mergelogs`).
    Mergelog {
        cluster: Arc<str>,
        mergelog: Box<kascade_cpid::Mergelog>,
    },
    /// Passed once every shard has processed all work queued before it
    /// (durable intake: then the spans of that work are in the export queue).
    Barrier(Arc<Barrier>),
}

impl Work {
    /// Whether it is the last of its batch (work other than a webhook
    /// batch's audit events comes alone).
    pub(crate) fn ends_batch(&self) -> bool {
        !matches!(self, Work::Audit(a) if a.more_in_batch)
    }

    /// Where the work goes: all work about one object to the same shard.
    pub fn routing_hash(&self) -> u64 {
        match self {
            Work::Audit(a) => a.object.hash(),
            Work::Watch(w) => w.object.hash(),
            Work::Event { own, .. } => own.hash(),
            Work::Mergelog { mergelog, .. } => {
                u64::from_be_bytes(mergelog.cpid.to_bytes()[..8].try_into().unwrap_or_default())
            }
            Work::Barrier(_) => 0,
        }
    }
}

/// Why an event was not turned into spans (the `reason` of
/// `kascade_audit_events_filtered_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FilterReason {
    Stage,
    Verb,
    Resource,
    UserAgent,
    NoObject,
    /// An Event write that carries no Event naming an involved object
    /// (Metadata-level policy, a patch without response).
    EventWithoutObject,
    /// A failed Event write: nothing was recorded.
    EventWriteFailed,
    /// An Event deleted: not an occurrence.
    EventDelete,
    /// A `dryRun=All` request: the apiserver audits it, but nothing changed.
    DryRun,
    /// An Event occurrence already shown (seen in the audit log and the
    /// watch, or again after a re-list).
    EventSeen,
    /// An Event older than --event-max-age listed when a watch (re)started.
    EventTooOld,
}

impl FilterReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FilterReason::Stage => "stage",
            FilterReason::Verb => "verb",
            FilterReason::Resource => "resource",
            FilterReason::UserAgent => "user_agent",
            FilterReason::NoObject => "no_object",
            FilterReason::EventWithoutObject => "event-without-object",
            FilterReason::EventWriteFailed => "event-write-failed",
            FilterReason::EventDelete => "event-delete",
            FilterReason::DryRun => "dry_run",
            FilterReason::EventSeen => "event-seen",
            FilterReason::EventTooOld => "event-too-old",
        }
    }
}
