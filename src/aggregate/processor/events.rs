//! Kubernetes Events: an audited write of an Event, or an Event from the
//! Event watch, becomes an event span on the object the Event is about,
//! once per occurrence (Event uid and count) however often it is seen.

use std::time::{Duration, SystemTime};

use moka::policy::EvictionPolicy;
use serde_json::Value;

use super::{ProcessError, Processor};
use crate::metrics::{CacheEvictions, Metrics};
use crate::model::{ObjectRef, ObjectWindow};
use crate::pipeline::{Accepted, AuditEvent, FilterReason, K8sEvent, precise_occurrence};
use crate::span_model::{self, EventFields};

/// Event occurrences remembered (window + 5 min) so each is shown once.
const SEEN_EVENTS: u64 = 1 << 20;

/// The Event occurrences (`cluster|Event uid|count`) already shown.
pub(super) fn seen_events(window: Duration, metrics: &Metrics) -> moka::sync::Cache<String, ()> {
    let evictions = CacheEvictions::new(
        metrics,
        "seen_events",
        "an Event occurrence seen again after its entry went is shown again",
    );
    // LRU, not moka's default TinyLFU, which may refuse a new entry
    // outright when full: here the newest entries matter most.
    moka::sync::Cache::builder()
        .max_capacity(SEEN_EVENTS)
        .time_to_live(window + Duration::from_secs(300))
        .eviction_policy(EvictionPolicy::lru())
        .eviction_listener(move |_, _, cause| evictions.record(cause))
        .build()
}

/// The Event a write of an Event object recorded: from the response (a
/// patch's request is partial), else from the request of a create (when
/// the audit policy logs no responses).
fn written_event(ev: &AuditEvent) -> Option<K8sEvent> {
    let parse = |raw: &Option<Box<serde_json::value::RawValue>>| {
        raw.as_ref()
            .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
            .and_then(|v| K8sEvent::from_object(&v))
    };
    parse(&ev.response_object).or_else(|| {
        if ev.verb == "create" {
            parse(&ev.request_object)
        } else {
            None
        }
    })
}

impl Processor {
    pub(super) fn count_filtered(&self, reason: FilterReason) {
        self.metrics
            .events_filtered
            .get_or_create(&Metrics::reason(reason.as_str()))
            .inc();
    }

    /// A write of a Kubernetes Event: an event span on the object the Event
    /// is about (whose object span is created if the window has none yet).
    /// The Event object itself gets no span, no diff, no cached state.
    pub(super) async fn process_event_write(&self, item: &Accepted) -> Result<(), ProcessError> {
        let ev = &item.event;
        if !matches!(ev.verb.as_str(), "create" | "update" | "patch") {
            self.count_filtered(FilterReason::EventDelete);
            return Ok(());
        }
        if ev.code() >= 400 {
            self.count_filtered(FilterReason::EventWriteFailed);
            return Ok(());
        }
        let Some(e) = written_event(ev) else {
            self.count_filtered(FilterReason::EventWithoutObject);
            return Ok(());
        };
        let at = precise_occurrence(e.occurred, ev.stage_timestamp);
        self.process_k8s_event(&item.object, &item.uid, e, at).await
    }

    /// One occurrence of a Kubernetes Event (from an audited write or from the
    /// Event watch): an event span on the involved object's span, once per
    /// Event uid and count however often it is seen.
    pub async fn process_k8s_event(
        &self,
        own: &ObjectRef,
        own_uid: &str,
        e: K8sEvent,
        at: SystemTime,
    ) -> Result<(), ProcessError> {
        let involved = self.kinds.referenced_object(
            &own.cluster,
            &e.involved.api_version,
            &e.involved.kind,
            &e.involved.namespace,
            &e.involved.name,
        );
        let ow = ObjectWindow {
            object: involved,
            window_start: self.cfg.windowing.window_start(at),
        };
        let name = if e.name.is_empty() {
            own.name.as_str()
        } else {
            e.name.as_str()
        };
        let uid = if e.uid.is_empty() {
            own_uid
        } else {
            e.uid.as_str()
        };
        let identity = if uid.is_empty() {
            own.key()
        } else {
            uid.to_string()
        };
        // The audit log and the Event watch report the same occurrence, and a
        // re-list after a reconnect reports it again: emit it once.
        let occurrence = format!("{}|{identity}|{}", own.cluster, e.count);
        if self.seen_events.contains_key(&occurrence) {
            self.count_filtered(FilterReason::EventSeen);
            return Ok(());
        }
        self.seen_events.insert(occurrence, ());
        self.ensure_object_span(&ow, &e.involved.uid, false).await?;
        let fields = EventFields {
            identity: &identity,
            name,
            uid,
            reason: &e.reason,
            message: &e.message,
            event_type: &e.event_type,
            component: &e.component,
            action: &e.action,
            count: e.count,
            at,
        };
        self.metrics.event_spans.inc();
        self.emit(span_model::event_span(&ow, &fields)).await?;
        self.metrics.events_processed.inc();
        Ok(())
    }
}
