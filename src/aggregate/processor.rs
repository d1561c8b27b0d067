//! Turns one accepted audit event into spans: the object span of its window
//! (once), an audit span with the diff or snapshot, and link spans for every
//! relation not yet recorded in that window, on both sides. A write of a
//! Kubernetes Event instead becomes an event span on the object the Event is
//! about.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::trace::Event;
use opentelemetry_sdk::trace::SpanData;
use serde_json::Value;
use tokio::sync::mpsc;
use xxhash_rust::xxh3::xxh3_64;

use super::diff::{self, Change};
use super::k8s_event::{K8sEvent, is_event_resource};
use super::redact::Redactor;
use super::relations::{KindRegistry, all_relations};
use super::rules::{Relation, RuleSet};
use super::span_cache::{Slot, SpanCache};
use crate::metrics::Metrics;
use crate::model::{ObjectRef, ObjectWindow, Windowing};
use crate::source::audit::{AuditEvent, FilterReason};
use crate::span_model::{
    self, AuditWrite, EVENT_DIFF, EVENT_SNAPSHOT, EventFields, LinkFields, attr,
};

/// An audit event that passed the filter, with its object resolved.
pub struct Accepted {
    pub event: AuditEvent,
    pub object: ObjectRef,
    pub uid: String,
}

#[derive(Clone, Debug)]
pub struct ProcessorConfig {
    pub windowing: Windowing,
    /// Upper bound of the bytes of last-seen object states kept for diffs.
    pub state_cache_bytes: u64,
    /// Most changed paths shown per write; the rest are counted.
    pub max_diff_changes: usize,
    /// Longest snapshot (JSON bytes) attached to a create/delete.
    pub max_snapshot_bytes: usize,
}

impl Default for ProcessorConfig {
    fn default() -> Self {
        Self {
            windowing: Windowing::new(Duration::from_secs(1800)),
            state_cache_bytes: 128 << 20,
            max_diff_changes: 100,
            max_snapshot_bytes: 64 << 10,
        }
    }
}

pub struct Processor {
    cfg: ProcessorConfig,
    redactor: Redactor,
    rules: Arc<RuleSet>,
    kinds: KindRegistry,
    /// Last seen state of each object (redacted, without managedFields), as JSON bytes.
    states: moka::sync::Cache<String, Arc<str>>,
    spans: Arc<dyn SpanCache>,
    out: mpsc::Sender<SpanData>,
    metrics: Arc<Metrics>,
}

/// What one write did to the object.
#[derive(Default)]
struct Outcome {
    state: Option<Value>,
    changes: Vec<Change>,
    snapshot: Option<Value>,
}

fn set_path(state: &mut Value, path: &[&str], v: Value) {
    let mut cur = state;
    for (i, key) in path.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::Object(Default::default());
        }
        let map = cur.as_object_mut().unwrap();
        if i + 1 == path.len() {
            map.insert(key.to_string(), v);
            return;
        }
        cur = map.entry(key.to_string()).or_insert(Value::Null);
    }
}

impl Processor {
    pub fn new(
        cfg: ProcessorConfig,
        redactor: Redactor,
        rules: Arc<RuleSet>,
        spans: Arc<dyn SpanCache>,
        out: mpsc::Sender<SpanData>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let states = moka::sync::Cache::builder()
            .weigher(|k: &String, v: &Arc<str>| (k.len() + v.len()).min(u32::MAX as usize) as u32)
            .max_capacity(cfg.state_cache_bytes)
            .build();
        Self {
            cfg,
            redactor,
            rules,
            kinds: KindRegistry::default(),
            states,
            spans,
            out,
            metrics,
        }
    }

    pub fn update_gauges(&self) {
        self.states.run_pending_tasks();
        self.metrics
            .state_cache_entries
            .set(self.states.entry_count() as i64);
        self.metrics
            .state_cache_bytes
            .set(self.states.weighted_size() as i64);
        self.metrics
            .span_cache_entries
            .set(self.spans.entry_count() as i64);
    }

    fn last_state(&self, key: &str) -> Option<Value> {
        self.states
            .get(key)
            .and_then(|b| serde_json::from_str(&b).ok())
    }

    /// Applies the write to the last known state, yielding the new state and
    /// what changed.
    fn apply(&self, ev: &AuditEvent, obj: &ObjectRef, old: Option<&Value>) -> Outcome {
        let code = ev.code();
        if code >= 400 {
            return Outcome::default();
        }
        let response: Option<Value> = ev
            .response_object
            .as_ref()
            .and_then(|r| serde_json::from_str(r.get()).ok());
        let kind = response
            .as_ref()
            .and_then(|r| r.get("kind"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let kind = kind.as_str();
        let subresource = ev.subresource();
        let mut out = Outcome::default();
        let new_state = match (kind, subresource) {
            // `kubectl scale` answers with a Scale: carry its replicas onto the object.
            ("Scale", _) => {
                let replicas = response
                    .as_ref()
                    .and_then(|r| r.pointer("/spec/replicas"))
                    .cloned()
                    .unwrap_or(Value::Null);
                let mut s = old
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Default::default()));
                set_path(&mut s, &["spec", "replicas"], replicas);
                Some(s)
            }
            // The scheduler's binding answers with a Status; the request names the node.
            (_, "binding") => {
                let node = ev
                    .request_object
                    .as_ref()
                    .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
                    .and_then(|b| b.pointer("/target/name").cloned());
                node.map(|n| {
                    let mut s = old
                        .cloned()
                        .unwrap_or_else(|| Value::Object(Default::default()));
                    set_path(&mut s, &["spec", "nodeName"], n);
                    s
                })
            }
            ("Status", _) | ("", _) => None,
            // Only a response of the object's own kind is a new state of the
            // object: a TokenRequest (serviceaccounts/token) must never be.
            (_, sub)
                if sub.is_empty()
                    || sub == "status"
                    || old.and_then(|o| o.get("kind")).and_then(Value::as_str) == Some(kind) =>
            {
                let mut r = response.unwrap_or_default();
                self.kinds
                    .learn(&obj.group, kind, &obj.resource, !obj.namespace.is_empty());
                diff::strip_noise(&mut r);
                self.redactor.redact(&obj.group, &obj.resource, &mut r);
                Some(r)
            }
            _ => None,
        };
        let creates_object = ev.verb == "create" && subresource.is_empty();
        match ev.verb.as_str() {
            _ if creates_object => out.snapshot = new_state.clone(),
            "delete" | "deletecollection" => {
                out.snapshot = new_state.clone().or_else(|| old.cloned());
            }
            _ => {
                if let (Some(o), Some(n)) = (old, new_state.as_ref()) {
                    out.changes = diff::diff(o, n);
                }
            }
        }
        out.state = new_state;
        out
    }

    fn old_resource_version(ev: &AuditEvent, old: Option<&Value>) -> String {
        if let Some(rv) = ev
            .object_ref
            .as_ref()
            .map(|r| r.resource_version.as_str())
            .filter(|s| !s.is_empty())
        {
            return rv.to_string();
        }
        old.and_then(|o| o.pointer("/metadata/resourceVersion"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    }

    async fn emit(&self, span: SpanData) -> anyhow::Result<()> {
        self.out
            .send(span)
            .await
            .map_err(|_| anyhow::anyhow!("span exporter has stopped"))
    }

    /// Emits the object span of `ow` unless it already exists.
    async fn ensure_object_span(&self, ow: &ObjectWindow, uid: &str) -> anyhow::Result<()> {
        if self.spans.fetch_or_reserve(ow).await? == Slot::Created {
            let (_, end) = self.cfg.windowing.bounds(ow.window_start);
            self.metrics.object_spans.inc();
            self.emit(span_model::object_span(ow, uid, end)).await?;
        }
        Ok(())
    }

    async fn record_relation(
        &self,
        ow: &ObjectWindow,
        rel: &Relation,
        target_uid: &str,
        at: SystemTime,
    ) -> anyhow::Result<()> {
        let link_key = |role: &str, class: &str, other: &ObjectRef| {
            xxh3_64(format!("{role}|{class}|{}", other.key()).as_bytes())
        };
        let forward = link_key(rel.role.as_str(), &rel.class, &rel.target);
        if !self.spans.record_link(ow, forward).await? {
            return Ok(());
        }
        let target = ObjectWindow {
            object: rel.target.clone(),
            window_start: ow.window_start,
        };
        self.ensure_object_span(&target, target_uid).await?;
        self.metrics.link_spans.inc();
        let f = LinkFields {
            target: &target,
            role: rel.role.as_str(),
            class: &rel.class,
            at,
        };
        self.emit(span_model::link_span(ow, &f, forward)).await?;
        let reverse_role = rel.role.reverse();
        let backward = link_key(reverse_role.as_str(), &rel.class, &ow.object);
        if self.spans.record_link(&target, backward).await? {
            self.metrics.link_spans.inc();
            let b = LinkFields {
                target: ow,
                role: reverse_role.as_str(),
                class: &rel.class,
                at,
            };
            self.emit(span_model::link_span(&target, &b, backward))
                .await?;
        }
        Ok(())
    }

    fn change_events(&self, changes: &[Change], at: SystemTime) -> Vec<Event> {
        changes
            .iter()
            .take(self.cfg.max_diff_changes)
            .map(|c| {
                let mut attrs = vec![
                    KeyValue::new(attr::DIFF_OP, c.op()),
                    KeyValue::new(attr::DIFF_PATH, c.path.clone()),
                ];
                if let Some(o) = &c.old {
                    attrs.push(KeyValue::new(attr::DIFF_OLD, o.clone()));
                }
                if let Some(n) = &c.new {
                    attrs.push(KeyValue::new(attr::DIFF_NEW, n.clone()));
                }
                Event::new(EVENT_DIFF, at, attrs, 0)
            })
            .collect()
    }

    fn snapshot_event(&self, snapshot: &Value, at: SystemTime) -> Event {
        let mut text = snapshot.to_string();
        if text.len() > self.cfg.max_snapshot_bytes {
            let mut cut = self.cfg.max_snapshot_bytes;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str("…(truncated)");
        }
        Event::new(
            EVENT_SNAPSHOT,
            at,
            vec![KeyValue::new(attr::SNAPSHOT, text)],
            0,
        )
    }

    fn count_filtered(&self, reason: FilterReason) {
        self.metrics
            .events_filtered
            .get_or_create(&Metrics::reason(reason.as_str()))
            .inc();
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

    /// A write of a Kubernetes Event: an event span on the object the Event
    /// is about (whose object span is created if the window has none yet).
    /// The Event object itself gets no span, no diff, no cached state.
    async fn process_event_write(&self, item: Accepted) -> anyhow::Result<()> {
        let ev = &item.event;
        if !matches!(ev.verb.as_str(), "create" | "update" | "patch") {
            self.count_filtered(FilterReason::EventDelete);
            return Ok(());
        }
        if ev.code() >= 400 {
            self.count_filtered(FilterReason::EventWriteFailed);
            return Ok(());
        }
        let Some(e) = Self::written_event(ev) else {
            self.count_filtered(FilterReason::EventWithoutObject);
            return Ok(());
        };
        let own = &item.object;
        let involved = self.kinds.referenced_object(
            &own.cluster,
            &e.involved.api_version,
            &e.involved.kind,
            &e.involved.namespace,
            &e.involved.name,
        );
        let at = precise_occurrence(e.occurred, ev.stage_timestamp);
        let ow = ObjectWindow {
            object: involved,
            window_start: self.cfg.windowing.window_start(at),
        };
        self.ensure_object_span(&ow, &e.involved.uid).await?;
        let name = if e.name.is_empty() {
            own.name.as_str()
        } else {
            e.name.as_str()
        };
        let uid = if e.uid.is_empty() {
            item.uid.as_str()
        } else {
            e.uid.as_str()
        };
        let identity = if uid.is_empty() {
            own.key()
        } else {
            uid.to_string()
        };
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

    pub async fn process(&self, item: Accepted) -> anyhow::Result<()> {
        if is_event_resource(&item.object.group, &item.object.resource) {
            return self.process_event_write(item).await;
        }
        let ev = &item.event;
        let obj = &item.object;
        let ow = ObjectWindow {
            object: obj.clone(),
            window_start: self
                .cfg
                .windowing
                .window_start(ev.request_received_timestamp),
        };
        let key = obj.key();
        let old = self.last_state(&key);
        let outcome = self.apply(ev, obj, old.as_ref());

        let uid = outcome
            .state
            .as_ref()
            .and_then(|s| s.pointer("/metadata/uid"))
            .and_then(Value::as_str)
            .unwrap_or(&item.uid)
            .to_string();
        self.ensure_object_span(&ow, &uid).await?;

        let new_rv = outcome
            .state
            .as_ref()
            .and_then(|s| s.pointer("/metadata/resourceVersion"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let old_rv = Self::old_resource_version(ev, old.as_ref());
        let code = ev.code();
        let error = (code >= 400).then(|| {
            let st = ev.response_status.as_ref();
            let msg = st.map(|s| s.message.as_str()).unwrap_or("");
            let reason = st.map(|s| s.reason.as_str()).unwrap_or("");
            match (reason.is_empty(), msg.is_empty()) {
                (true, true) => format!("HTTP {code}"),
                (false, true) => format!("{reason} (HTTP {code})"),
                (_, false) => msg.to_string(),
            }
        });
        let write = AuditWrite {
            audit_id: &ev.audit_id,
            user: &ev.user.username,
            impersonated_user: ev.impersonated_user.as_ref().map(|u| u.username.as_str()),
            user_agent: &ev.user_agent,
            verb: &ev.verb,
            subresource: ev.subresource(),
            code,
            source_ip: ev.source_ips.first().map(String::as_str).unwrap_or(""),
            old_rv: &old_rv,
            new_rv: &new_rv,
            error,
            start: ev.request_received_timestamp,
            end: ev.stage_timestamp,
        };
        let mut span = span_model::audit_span(&ow, &write);
        let at = ev.stage_timestamp;
        if let Some(snap) = &outcome.snapshot {
            span.events.events.push(self.snapshot_event(snap, at));
        }
        span.events
            .events
            .extend(self.change_events(&outcome.changes, at));
        if outcome.changes.len() > self.cfg.max_diff_changes {
            span.attributes.push(KeyValue::new(
                attr::DIFF_TRUNCATED,
                (outcome.changes.len() - self.cfg.max_diff_changes) as i64,
            ));
        }
        self.emit(span).await?;

        // Relations come from the newest state known, or the snapshot of a deleted object.
        let basis = outcome
            .state
            .as_ref()
            .or(outcome.snapshot.as_ref())
            .or(old.as_ref());
        if let Some(state) = basis {
            for (rel, uid) in all_relations(obj, state, &self.kinds, &self.rules) {
                self.record_relation(&ow, &rel, &uid, ev.request_received_timestamp)
                    .await?;
            }
        }

        let deleted = matches!(ev.verb.as_str(), "delete" | "deletecollection")
            && outcome
                .state
                .as_ref()
                .is_none_or(|s| s.pointer("/metadata/deletionTimestamp").is_none());
        if deleted {
            self.states.invalidate(&key);
        } else if let Some(state) = outcome.state {
            let text: Arc<str> = serde_json::to_string(&state)?.into();
            self.states.insert(key, text);
        }
        self.metrics.events_processed.inc();
        Ok(())
    }
}

/// core/v1 Event timestamps have whole-second precision, which would sort an
/// Event before the writes of the same second it reports. When the write of
/// the Event falls within that second, its audit time is the better estimate.
fn precise_occurrence(occurred: Option<SystemTime>, written: SystemTime) -> SystemTime {
    let Some(t) = occurred else {
        return written;
    };
    let whole_second = t
        .duration_since(std::time::UNIX_EPOCH)
        .is_ok_and(|d| d.subsec_nanos() == 0);
    match written.duration_since(t) {
        Ok(lag) if whole_second && lag < std::time::Duration::from_secs(1) => written,
        _ => t,
    }
}
