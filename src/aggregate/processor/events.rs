//! The Kubernetes Event stage: an audited write of an Event, or an Event
//! from the Event watch, is admitted once per occurrence (Event uid and
//! count) however often it is seen, scrubbed of the values redaction hid
//! in the object it is about, handed to the change sinks that want Events,
//! and planned as an event span on that object.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use moka::policy::EvictionPolicy;
// Events are read with serde_json, as the list-watch of Events delivers them.
use serde_json::Value;

use super::super::relations::KindRegistry;
use super::handoff::{Emission, Pending};
use crate::aggregate::redact::HiddenValues;
use crate::flow::{
    Accepted, AuditEvent, ChangeSink, EventRecord, FilterReason, K8sEvent, precise_occurrence,
};
use crate::metrics::{Cache, CacheEvictions, Metrics};
use crate::model::{ObjectRef, ObjectWindow, Windowing};
use crate::span_model::{self, EventFields};

/// Event occurrences remembered (window + 5 min) so each is shown once.
const SEEN_EVENTS: u64 = 1 << 20;

/// Bytes of hashed hidden values kept, for the objects that had some
/// redacted most recently (at most `MAX_HIDDEN_VALUES` values each, ≈ 50
/// bytes a value).
const HIDDEN_VALUES_BYTES: u64 = 16 << 20;

/// The values redaction replaced in recent objects (see
/// [`EventStage::note_hidden`]), bounded in bytes, the least recently used
/// forgotten first.
fn hidden_values(metrics: &Metrics) -> moka::sync::Cache<ObjectRef, Arc<HiddenValues>> {
    let evictions = CacheEvictions::new(
        metrics,
        Cache::HiddenValues,
        "an Event about an object whose redacted values were forgotten is no longer scrubbed of them",
    );
    moka::sync::Cache::builder()
        .max_capacity(HIDDEN_VALUES_BYTES)
        .weigher(|k: &ObjectRef, v: &Arc<HiddenValues>| {
            u32::try_from(v.bytes() + k.name.len() + k.namespace.len() + 64).unwrap_or(u32::MAX)
        })
        .eviction_policy(EvictionPolicy::lru())
        .eviction_listener(move |_, _, cause| evictions.record(cause))
        .build()
}

/// The Event occurrences (`cluster|Event uid|count`) already shown.
fn seen_events(window: Duration, metrics: &Metrics) -> moka::sync::Cache<String, ()> {
    let evictions = CacheEvictions::new(
        metrics,
        Cache::SeenEvents,
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
    let parse = |raw: &Option<crate::flow::ObjectText>| {
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

/// Admits each Event occurrence once: owns the occurrences seen and the
/// values redaction hid in recent objects.
pub(super) struct EventStage {
    /// Event occurrences (cluster|Event uid|count) already admitted.
    seen_events: moka::sync::Cache<String, ()>,
    /// The values redaction replaced in recent objects (hashed), to scrub
    /// them from the Events about those objects.
    hidden_values: moka::sync::Cache<ObjectRef, Arc<HiddenValues>>,
    /// The change sinks that want Events.
    sinks: Vec<Arc<dyn ChangeSink>>,
    kinds: Arc<KindRegistry>,
    windowing: Windowing,
    metrics: Arc<Metrics>,
}

/// An Event occurrence admitted, about the object of `ow`.
pub(super) struct AdmittedEvent {
    pub ow: ObjectWindow,
    /// The Event's uid, else its object's key: with its count, the occurrence.
    pub identity: String,
    pub event: K8sEvent,
    pub at: SystemTime,
}

impl EventStage {
    pub(super) fn new(
        kinds: Arc<KindRegistry>,
        windowing: Windowing,
        metrics: Arc<Metrics>,
    ) -> Self {
        EventStage {
            seen_events: seen_events(windowing.width, &metrics),
            hidden_values: hidden_values(&metrics),
            sinks: Vec::new(),
            kinds,
            windowing,
            metrics,
        }
    }

    /// Hands every Event occurrence to `sink` too, if it wants them.
    pub(super) fn add_sink(&mut self, sink: Arc<dyn ChangeSink>) {
        if sink.wants_events() {
            self.sinks.push(sink);
        }
    }

    /// Whether a change sink wants Events.
    pub(super) fn sinks_want_events(&self) -> bool {
        !self.sinks.is_empty()
    }

    /// Keeps the values redaction replaced in `object`'s latest version
    /// (with those of its earlier versions still kept), so that an Event
    /// about the object quoting one shows its marker instead.
    pub(super) fn note_hidden(&self, object: &ObjectRef, hidden: HiddenValues) {
        if hidden.is_empty() {
            return;
        }
        let kept = match self.hidden_values.get(object) {
            Some(older) => hidden.merged(&older),
            None => hidden,
        };
        self.hidden_values.insert(object.clone(), Arc::new(kept));
    }

    /// `e`'s message without the values redaction replaced in the object
    /// it is about (an Event may quote them: a failed mount, a probe's
    /// output), each replaced by its marker.
    fn scrub_event(&self, involved: &ObjectRef, e: &mut K8sEvent) {
        let Some(hidden) = self.hidden_values.get(involved) else {
            return;
        };
        if let Some(scrubbed) = hidden.scrub(&e.message) {
            self.metrics.event_messages_scrubbed.inc();
            e.message = scrubbed;
        }
    }

    fn count_filtered(&self, reason: FilterReason) {
        self.metrics
            .events_filtered
            .get_or_create(&Metrics::filtered(reason))
            .inc();
    }

    /// The Event a write of a Kubernetes Event recorded, and when it
    /// occurred. The Event object itself gets no span, no diff, no cached
    /// state; a delete or a refused write is counted, not shown.
    pub(super) fn written(&self, item: &Accepted) -> Option<(K8sEvent, SystemTime)> {
        let ev = &item.event;
        if !matches!(ev.verb.as_str(), "create" | "update" | "patch") {
            self.count_filtered(FilterReason::EventDelete);
            return None;
        }
        if ev.code() >= 400 {
            self.count_filtered(FilterReason::EventWriteFailed);
            return None;
        }
        let Some(e) = written_event(ev) else {
            self.count_filtered(FilterReason::EventWithoutObject);
            return None;
        };
        let at = precise_occurrence(e.occurred, ev.stage_timestamp);
        Some((e, at))
    }

    /// One occurrence of a Kubernetes Event (from an audited write, the
    /// Event object `own`, or from the Event watch): admitted the first time
    /// it is seen and handed to the sinks that want Events (unless not
    /// `to_sinks`: restart context, handed to them before).
    pub(super) fn admit(
        &self,
        own: &ObjectRef,
        own_uid: &str,
        e: K8sEvent,
        at: SystemTime,
        to_sinks: bool,
    ) -> Option<AdmittedEvent> {
        let involved = self.kinds.referenced_object(
            &own.cluster,
            &e.involved.api_version,
            &e.involved.kind,
            &e.involved.namespace,
            &e.involved.name,
        );
        let mut e = e;
        self.scrub_event(&involved, &mut e);
        let ow = ObjectWindow {
            object: involved,
            window_start: self.windowing.window_start(at),
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
            return None;
        }
        self.seen_events.insert(occurrence, ());
        if to_sinks && !self.sinks.is_empty() {
            let record = EventRecord {
                involved: ow.object.clone(),
                event: e.clone(),
                at,
            };
            for sink in &self.sinks {
                sink.event(&record);
            }
        }
        Some(AdmittedEvent {
            ow,
            identity,
            event: e,
            at,
        })
    }
}

/// The event span of an admitted occurrence, on the object it is about
/// (whose object span is created if the window has none yet); `own` and
/// `own_uid` name the Event where the Event does not.
pub(super) fn event_emission(a: AdmittedEvent, own: &ObjectRef, own_uid: &str) -> Emission {
    let e = &a.event;
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
    let fields = EventFields {
        identity: &a.identity,
        name,
        uid,
        reason: &e.reason,
        message: &e.message,
        event_type: &e.event_type,
        component: &e.component,
        action: &e.action,
        count: e.count,
        at: a.at,
    };
    let span = span_model::event_span(&a.ow, &fields);
    Emission(Pending::Event {
        involved_uid: e.involved.uid.clone(),
        ow: a.ow,
        span,
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{accepted, attr, audit_values, drain, fixture, processor};
    use super::*;
    use crate::span_model::attr as key;

    /// The first core/v1 Event the deployment scenario's audit log created,
    /// and the same Event as the Event list served it.
    fn written_and_listed() -> (Value, Value) {
        let written = audit_values("deployment")
            .into_iter()
            .find(|e| {
                e["objectRef"]["resource"] == "events"
                    && e["objectRef"]["apiGroup"].as_str().unwrap_or("").is_empty()
                    && e["verb"] == "create"
            })
            .expect("the scenario writes Events");
        let uid = &written["responseObject"]["metadata"]["uid"];
        let list: Value = serde_json::from_str(&fixture("deployment", "events.json")).unwrap();
        let listed = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| &i["metadata"]["uid"] == uid)
            .expect("the Event list has the written Event")
            .clone();
        (written, listed)
    }

    fn listed_event(listed: &Value) -> (ObjectRef, String, K8sEvent) {
        let meta = &listed["metadata"];
        let own = ObjectRef::new(
            "c",
            "",
            "events",
            meta["namespace"].as_str().unwrap(),
            meta["name"].as_str().unwrap().to_string(),
        );
        let e = K8sEvent::from_object(listed).expect("an Event");
        (own, meta["uid"].as_str().unwrap().to_string(), e)
    }

    fn filtered(m: &Metrics, reason: FilterReason) -> u64 {
        m.events_filtered
            .get_or_create(&Metrics::filtered(reason))
            .get()
    }

    #[tokio::test]
    async fn an_event_written_and_watched_is_one_span_on_the_object_it_is_about() {
        let (p, mut rx, metrics) = processor(Default::default());
        let (written, listed) = written_and_listed();
        p.process(&accepted(&written).unwrap()).await.unwrap();
        let (own, uid, e) = listed_event(&listed);
        let at = precise_occurrence(e.occurred, std::time::SystemTime::now());
        p.process_k8s_event(&own, &uid, e, at).await.unwrap();
        let spans = drain(&mut rx);
        let events: Vec<_> = spans
            .iter()
            .filter(|s| attr(s, key::SPAN_KIND).as_deref() == Some("event"))
            .collect();
        assert_eq!(events.len(), 1, "once, however often seen");
        assert_eq!(filtered(&metrics, FilterReason::EventSeen), 1);
        let involved = &written["responseObject"]["involvedObject"];
        assert_eq!(
            attr(events[0], key::EVENT_REASON).as_deref(),
            written["responseObject"]["reason"].as_str()
        );
        // On the involved object's span, which the window gets first.
        let object = spans
            .iter()
            .find(|s| attr(s, key::SPAN_KIND).as_deref() == Some("object"))
            .expect("the involved object's span");
        assert_eq!(
            attr(object, key::NAME).as_deref(),
            involved["name"].as_str()
        );
        assert_eq!(events[0].parent_span_id, object.span_id);
        assert_eq!(events[0].trace_id, object.trace_id);
    }

    #[tokio::test]
    async fn a_new_count_is_a_new_occurrence() {
        let (p, mut rx, _) = processor(Default::default());
        let (_, listed) = written_and_listed();
        let (own, uid, e) = listed_event(&listed);
        let at = std::time::SystemTime::now();
        p.process_k8s_event(&own, &uid, e.clone(), at)
            .await
            .unwrap();
        // The same Event seen again after it recurred (its count raised).
        let again = K8sEvent {
            count: e.count + 1,
            ..e
        };
        p.process_k8s_event(&own, &uid, again, at).await.unwrap();
        let events: Vec<_> = drain(&mut rx)
            .into_iter()
            .filter(|s| attr(s, key::SPAN_KIND).as_deref() == Some("event"))
            .collect();
        assert_eq!(events.len(), 2);
        assert_ne!(events[0].span_id, events[1].span_id);
    }

    #[tokio::test]
    async fn deletes_and_failed_writes_of_events_are_counted_not_shown() {
        let (p, mut rx, metrics) = processor(Default::default());
        let (written, _) = written_and_listed();
        // The real create, as if it had been a delete, then as if refused.
        let mut deleted = written.clone();
        deleted["verb"] = "delete".into();
        p.process(&accepted(&deleted).unwrap()).await.unwrap();
        let mut refused = written.clone();
        refused["responseStatus"]["code"] = 403.into();
        p.process(&accepted(&refused).unwrap()).await.unwrap();
        assert!(drain(&mut rx).is_empty());
        assert_eq!(filtered(&metrics, FilterReason::EventDelete), 1);
        assert_eq!(filtered(&metrics, FilterReason::EventWriteFailed), 1);
    }

    /// The stage alone: an occurrence is admitted once, handed to the
    /// sinks that want Events, and about the object the Event names.
    #[test]
    fn the_stage_admits_an_occurrence_once_and_hands_it_to_the_event_sinks() {
        use crate::flow::ChangeRecord;
        #[derive(Default)]
        struct Events(std::sync::Mutex<Vec<EventRecord>>);
        impl ChangeSink for Events {
            fn record(&self, _: &ChangeRecord) {}
            fn wants_events(&self) -> bool {
                true
            }
            fn event(&self, e: &EventRecord) {
                self.0.lock().unwrap().push(e.clone());
            }
        }
        let metrics = Arc::new(Metrics::default());
        let windowing = super::super::ProcessorConfig::default().windowing;
        let mut stage = EventStage::new(
            Arc::new(KindRegistry::default()),
            windowing,
            metrics.clone(),
        );
        let sink = Arc::new(Events::default());
        stage.add_sink(sink.clone());
        let (_, listed) = written_and_listed();
        let (own, uid, e) = listed_event(&listed);
        let at = SystemTime::now();
        let admitted = stage
            .admit(&own, &uid, e.clone(), at, true)
            .expect("the first sighting");
        assert_eq!(
            Some(admitted.ow.object.name.as_str()),
            listed["involvedObject"]["name"].as_str()
        );
        assert_eq!(admitted.identity, uid, "the Event's uid");
        assert!(
            stage.admit(&own, &uid, e, at, true).is_none(),
            "seen already"
        );
        assert_eq!(filtered(&metrics, FilterReason::EventSeen), 1);
        assert_eq!(sink.0.lock().unwrap().len(), 1);
    }
}
