//! Turns one accepted audit event into spans: the object span of its window
//! (once), an audit span with the diff or snapshot, and link spans for every
//! relation not yet recorded in that window, on both sides. A write of a
//! Kubernetes Event instead becomes an event span on the object the Event is
//! about.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use moka::policy::EvictionPolicy;
use serde_json::Value;
use tokio::sync::mpsc;
use xxhash_rust::xxh3::Xxh3;

use super::diff::{self, Change};
use super::k8s_event::{K8sEvent, is_event_resource};
use super::redact::Redactor;
use super::relations::{KindRegistry, all_relations};
use super::rules::{Relation, RuleSet};
use super::selectors::SelectorIndex;
use super::span_cache::{Slot, SpanCache};
use super::states::StateStore;
use super::status;
use crate::metrics::{Cache, CacheEvictions, Metrics};
use crate::model::{ObjectRef, ObjectWindow, Windowing};
use crate::source::audit::{AuditEvent, FailedCreate, FilterReason};
use crate::span_model::{
    self, AuditWrite, EVENT_DIFF, EVENT_SNAPSHOT, EncodedSpan, EventFields, LinkFields, SpanBuf,
    attr,
};

/// An audit event that passed the filter, with its object resolved.
pub struct Accepted {
    pub event: AuditEvent,
    pub object: ObjectRef,
    pub uid: String,
    /// Replayed from the durable spool after a crash: the object and link
    /// spans this event reaches may have been reserved (in a shared span
    /// cache) but never exported, so they are emitted again (same ids).
    pub replayed: bool,
    /// A create refused before its object was named: `object` is then named
    /// by the `generateName` prefix, and the write is shown on the owner's
    /// span when the request names an owner.
    pub failed_create: Option<Box<FailedCreate>>,
    /// Self-tracing (crate::telemetry): the `process` span of the webhook
    /// batch this event came in, shared by its events and ended when the
    /// last is processed; disabled when self-tracing is off.
    pub batch_span: tracing::Span,
}

#[derive(Clone, Debug)]
pub struct ProcessorConfig {
    pub windowing: Windowing,
    /// Upper bound of the bytes of last-seen object states kept for diffs.
    pub state_cache_bytes: u64,
    /// Objects whose last state is also kept parsed (recently written ones).
    pub hot_states: usize,
    /// Most changed paths shown per write; the rest are counted.
    pub max_diff_changes: usize,
    /// How long a change seen by the watch waits for the audit event of the
    /// same write before it is shown on its own.
    pub watch_audit_wait: Duration,
    /// A list-watch also feeds this processor: audit writes leave ledger
    /// markers so the watch's copies of them are not shown again. Without a
    /// watch the markers would only cost time (a tenth of the collector's).
    pub has_watch: bool,
    /// Most entries of the audit/watch ledger (each ≈ 300 bytes, plus the
    /// diff of a change no audit event has claimed yet).
    pub ledger_entries: u64,
}

/// The ledger's default size: ≈ 80 MiB when full, which takes ≈ 440 writes
/// per second sustained over its 10 minutes.
pub const DEFAULT_LEDGER_ENTRIES: u64 = 1 << 18;
/// How long the ledger keeps an entry.
const LEDGER_TTL: Duration = Duration::from_secs(600);
/// Event occurrences remembered (window + 5 min) so each is shown once.
const SEEN_EVENTS: u64 = 1 << 20;

impl Default for ProcessorConfig {
    fn default() -> Self {
        Self {
            windowing: Windowing::new(Duration::from_secs(1800)),
            state_cache_bytes: 128 << 20,
            hot_states: 256,
            max_diff_changes: 100,
            watch_audit_wait: Duration::from_secs(5),
            has_watch: true,
            ledger_entries: DEFAULT_LEDGER_ENTRIES,
        }
    }
}

pub struct Processor {
    cfg: ProcessorConfig,
    redactor: Redactor,
    rules: Arc<RuleSet>,
    kinds: KindRegistry,
    /// Last seen state of each object (redacted, without managedFields).
    states: StateStore,
    spans: Arc<dyn SpanCache>,
    out: mpsc::Sender<EncodedSpan>,
    export_progress: Option<Arc<crate::export::ExportProgress>>,
    metrics: Arc<Metrics>,
    /// Event occurrences (cluster|Event uid|count) already emitted.
    seen_events: moka::sync::Cache<String, ()>,
    /// Diffs recently computed, by `object key@resourceVersion`, so a write
    /// seen by both the watch and the audit log is shown once.
    ledger: moka::sync::Cache<u128, Arc<LedgerEntry>>,
    /// Watch changes waiting (bounded) for their audit event.
    pending: std::sync::Mutex<std::collections::VecDeque<PendingWatch>>,
    /// Labels and selectors, for `selector` rules.
    selectors: SelectorIndex,
}

/// A diff between two versions of an object, and whether a write's audit
/// span already shows it.
pub struct LedgerEntry {
    changes: Vec<Change>,
    /// The versions the watch saw the diff between (empty in an audit
    /// event's marker): the audit span of the same write reports them when
    /// the watch got ahead of it and the last state is already newer.
    old_rv: Box<str>,
    new_rv: Box<str>,
    /// CLAIM_NONE, CLAIM_AUDIT or CLAIM_WATCH: who showed the diff.
    claimed: std::sync::atomic::AtomicU8,
}

struct PendingWatch {
    due: std::time::Instant,
    /// The diff itself, not only its ledger key: the ledger may have evicted
    /// it by the time the wait is over, and the change must still be shown.
    entry: Arc<LedgerEntry>,
    /// Where an audit event of the same write claims it, or leaves a marker
    /// when the entry was evicted: the version key, then the aliases.
    ledger_keys: Vec<u128>,
    ow: ObjectWindow,
    change: WatchChange,
    old_rv: String,
    snapshot: Option<Value>,
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
        out: mpsc::Sender<EncodedSpan>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let states = StateStore::new(cfg.state_cache_bytes, cfg.hot_states, &metrics);
        let ttl = cfg.windowing.width + Duration::from_secs(300);
        // LRU, not moka's default TinyLFU, which may refuse a new entry
        // outright when full: here the newest entries matter most.
        let seen_evictions = CacheEvictions::new(
            &metrics,
            Cache::SeenEvents,
            "an Event occurrence seen again after its entry went is shown again",
        );
        let ledger_evictions = CacheEvictions::new(
            &metrics,
            Cache::Ledger,
            "a write seen by both the watch and the audit log may be shown twice; raise --watch-ledger-entries",
        );
        Self {
            seen_events: moka::sync::Cache::builder()
                .max_capacity(SEEN_EVENTS)
                .time_to_live(ttl)
                .eviction_policy(EvictionPolicy::lru())
                .eviction_listener(move |_, _, cause| seen_evictions.record(cause))
                .build(),
            ledger: moka::sync::Cache::builder()
                .max_capacity(cfg.ledger_entries)
                .time_to_live(LEDGER_TTL)
                .eviction_policy(EvictionPolicy::lru())
                .eviction_listener(move |_, _, cause| ledger_evictions.record(cause))
                .build(),
            pending: Default::default(),
            selectors: SelectorIndex::new(&rules),
            cfg,
            redactor,
            rules,
            kinds: KindRegistry::default(),
            states,
            spans,
            out,
            export_progress: None,
            metrics,
        }
    }

    pub fn update_gauges(&self) {
        self.metrics
            .state_cache_entries
            .set(self.states.entry_count() as i64);
        self.metrics
            .state_cache_hot_entries
            .set(self.states.hot_entries() as i64);
        self.metrics
            .state_cache_bytes
            .set(self.states.cold_bytes() as i64);
        self.metrics
            .span_cache_entries
            .set(self.spans.entry_count() as i64);
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
            .and_then(|r| diff::parse_object(r.get()).ok());
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
                // The Scale's resourceVersion is the object's new one: the
                // watch's copy of this write is matched by it.
                if let Some(rv) = response
                    .as_ref()
                    .and_then(|r| r.pointer("/metadata/resourceVersion"))
                {
                    set_path(&mut s, &["metadata", "resourceVersion"], rv.clone());
                }
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

    /// The version a write replaced, reported only when it is known to
    /// precede `new_rv`: the version the request itself names (an update's
    /// precondition), else the one the watch saw before `new_rv`, else the
    /// last state's — which is the written version itself, or a later one,
    /// when the list-watch got ahead of the audit event. Without a new
    /// version (a failed write) only the request's own is reported.
    fn old_resource_version(
        ev: &AuditEvent,
        watch_old: &str,
        old: Option<&Value>,
        new_rv: &str,
    ) -> String {
        let requested = ev
            .object_ref
            .as_ref()
            .map(|r| r.resource_version.as_str())
            .unwrap_or("");
        if new_rv.is_empty() {
            return requested.to_string();
        }
        let last = old.map(resource_version).unwrap_or("");
        [requested, watch_old, last]
            .into_iter()
            .find(|rv| is_older(rv, new_rv))
            .unwrap_or("")
            .to_string()
    }

    async fn emit(&self, span: SpanBuf) -> anyhow::Result<()> {
        self.out
            .send(span.finish())
            .await
            .map_err(|_| anyhow::anyhow!("span exporter has stopped"))?;
        if let Some(p) = &self.export_progress {
            p.add_sent(1);
        }
        Ok(())
    }

    /// Counts every span sent to the exporter (for the durable intake).
    pub fn with_export_progress(mut self, progress: Arc<crate::export::ExportProgress>) -> Self {
        self.export_progress = Some(progress);
        self
    }

    /// Emits the object span of `ow` unless it already exists (or again when
    /// `force`: see [`Accepted::replayed`]).
    async fn ensure_object_span(
        &self,
        ow: &ObjectWindow,
        uid: &str,
        force: bool,
    ) -> anyhow::Result<()> {
        if self.spans.fetch_or_reserve(ow).await? == Slot::Created || force {
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
        force: bool,
    ) -> anyhow::Result<()> {
        // The hash of `<role>|<class>|<other object's key>`.
        let link_key = |role: &str, class: &str, other: &ObjectRef| {
            let mut h = Xxh3::new();
            h.update(role.as_bytes());
            h.update(b"|");
            h.update(class.as_bytes());
            h.update(b"|");
            other.hash_key(&mut h);
            h.digest()
        };
        let forward = link_key(rel.role.as_str(), &rel.class, &rel.target);
        if !self.spans.record_link(ow, forward).await? && !force {
            return Ok(());
        }
        let target = ObjectWindow {
            object: rel.target.clone(),
            window_start: ow.window_start,
        };
        self.ensure_object_span(&target, target_uid, force).await?;
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
        if self.spans.record_link(&target, backward).await? || force {
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

    /// The diff as span events, one per changed path.
    fn add_changes(&self, span: &mut SpanBuf, changes: &[Change], at: SystemTime) {
        for c in changes.iter().take(self.cfg.max_diff_changes) {
            let mut attrs = [("", ""); 4];
            attrs[0] = (attr::DIFF_OP, c.op());
            attrs[1] = (attr::DIFF_PATH, &*c.path);
            let mut n = 2;
            if let Some(o) = &c.old {
                attrs[n] = (attr::DIFF_OLD, o);
                n += 1;
            }
            if let Some(v) = &c.new {
                attrs[n] = (attr::DIFF_NEW, v);
                n += 1;
            }
            span.event(EVENT_DIFF, at, &attrs[..n]);
        }
    }

    fn add_snapshot(&self, span: &mut SpanBuf, snapshot: &Value, at: SystemTime) {
        // Straight into a buffer (`to_string` goes through a `fmt::Formatter`).
        // A long one is cut by the span writer (`--export-max-value-bytes`),
        // which records its real length.
        let text = serde_json::to_string(snapshot).unwrap_or_default();
        span.event(EVENT_SNAPSHOT, at, &[(attr::SNAPSHOT, &text)]);
    }

    fn count_filtered(&self, reason: FilterReason) {
        self.metrics
            .events_filtered
            .get_or_create(&Metrics::filtered(reason))
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
    async fn process_event_write(&self, item: &Accepted) -> anyhow::Result<()> {
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
    ) -> anyhow::Result<()> {
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

    /// A version of an object from the list-watch. Its diff against the
    /// previous version is kept for the audit event of the same write; if that
    /// does not claim it within `watch_audit_wait` (a Metadata-level audit
    /// policy, no audit webhook), it is shown as a `watch` span on its own.
    pub async fn process_watch(&self, mut change: WatchChange) -> anyhow::Result<()> {
        let obj = change.object.clone();
        let key = obj.key();
        if let Some(kind) = change.state.get("kind").and_then(Value::as_str) {
            self.kinds
                .learn(&obj.group, kind, &obj.resource, !obj.namespace.is_empty());
        }
        diff::strip_noise(&mut change.state);
        self.redactor
            .redact(&obj.group, &obj.resource, &mut change.state);
        let new_rv = resource_version(&change.state).to_string();
        let old = self.states.get(&key);
        let old_rv = old
            .as_ref()
            .map(|o| resource_version(o).to_string())
            .unwrap_or_default();
        let ow = ObjectWindow {
            object: obj.clone(),
            window_start: self.cfg.windowing.window_start(change.observed),
        };
        let (version_key, changes, snapshot) = match change.kind {
            WatchKind::Deleted => {
                self.states.remove(&key);
                self.selectors.remove(&obj);
                (
                    ledger_key(&key, "deleted"),
                    Vec::new(),
                    Some(change.state.clone()),
                )
            }
            _ => {
                if new_rv == old_rv || is_older(&new_rv, &old_rv) {
                    return Ok(()); // already known (the audit event came first) or stale
                }
                self.states
                    .put(key.clone(), Arc::new(change.state.clone()))?;
                if change.kind == WatchKind::Listed && old.is_none() {
                    // Seeding: index only; idle objects get no spans at startup.
                    let _ = self.selectors.update(&self.rules, &obj, &change.state);
                } else {
                    self.record_selector_links(&obj, &change.state, change.observed)
                        .await?;
                }
                if old.is_none() && change.kind == WatchKind::Modified {
                    // kube's watcher reports additions and modifications alike.
                    change.kind = WatchKind::Added;
                }
                match (&old, change.kind) {
                    // The initial list seeds what later diffs compare against.
                    (None, WatchKind::Listed) => return Ok(()),
                    (None, _) => (
                        ledger_key(&key, &new_rv),
                        Vec::new(),
                        Some(change.state.clone()),
                    ),
                    (Some(o), _) => (
                        ledger_key(&key, &new_rv),
                        diff::diff(o, &change.state),
                        None,
                    ),
                }
            }
        };
        if changes.is_empty() && snapshot.is_none() {
            return Ok(());
        }
        let entry = self.ledger.get_with(version_key, || {
            Arc::new(LedgerEntry::pending(changes, &old_rv, &new_rv))
        });
        if entry.claimed.load(std::sync::atomic::Ordering::Acquire) != CLAIM_NONE {
            return Ok(());
        }
        // Writes whose audit event carries no resourceVersion of this version
        // (a binding answers with a Status; one delete request can write two
        // versions) are matched by what they did instead.
        let mut ledger_keys = vec![version_key];
        for alias in watch_aliases(change.kind, &entry.changes) {
            let alias_key = ledger_key(&key, alias);
            match self.ledger.get(&alias_key) {
                Some(shown)
                    if shown.claimed.load(std::sync::atomic::Ordering::Acquire) == CLAIM_AUDIT =>
                {
                    entry.claim(CLAIM_AUDIT);
                    return Ok(());
                }
                _ => self.ledger.insert(alias_key, entry.clone()),
            }
            ledger_keys.push(alias_key);
        }
        self.pending
            .lock()
            .expect("pending watch changes")
            .push_back(PendingWatch {
                due: std::time::Instant::now() + self.cfg.watch_audit_wait,
                entry,
                ledger_keys,
                ow,
                change,
                old_rv,
                snapshot,
            });
        Ok(())
    }

    /// Shows the watch changes whose wait for an audit event is over (all of
    /// them when `all`, at shutdown).
    pub async fn flush_watch(&self, all: bool) -> anyhow::Result<()> {
        let now = std::time::Instant::now();
        loop {
            let next = {
                let mut q = self.pending.lock().expect("pending watch changes");
                match q.front() {
                    Some(p) if all || p.due <= now => q.pop_front(),
                    _ => None,
                }
            };
            let Some(p) = next else { return Ok(()) };
            let entry = &p.entry;
            // An audit event of this write that came after the ledger had
            // evicted the entry left a marker of its own under these keys.
            let marked = p.ledger_keys.iter().any(|k| {
                self.ledger.get(k).is_some_and(|other| {
                    !Arc::ptr_eq(&other, entry)
                        && other.claimed.load(std::sync::atomic::Ordering::Acquire) == CLAIM_AUDIT
                })
            });
            if marked {
                entry.claim(CLAIM_AUDIT);
            }
            if !entry.claim(CLAIM_WATCH) {
                continue; // the audit span shows it
            }
            // Shown now: an audit event arriving later shows its own diff
            // either way, so the entry (and its diff) need not be kept.
            self.ledger.invalidate(&p.ledger_keys[0]);
            self.ensure_object_span(&p.ow, "", false).await?;
            let at = p.change.observed;
            let new_rv = resource_version(&p.change.state).to_string();
            let mut span =
                span_model::watch_span(&p.ow, p.change.kind.as_str(), &p.old_rv, &new_rv, at);
            if p.change.kind != WatchKind::Deleted {
                add_object_status(&mut span, &p.ow.object, &p.change.state);
            }
            if let Some(snap) = &p.snapshot {
                self.add_snapshot(&mut span, snap, at);
            }
            self.add_changes(&mut span, &entry.changes, at);
            self.metrics.watch_spans.inc();
            self.emit(span).await?;
            if p.change.kind != WatchKind::Deleted {
                for (rel, uid) in
                    all_relations(&p.ow.object, &p.change.state, &self.kinds, &self.rules)
                {
                    self.record_relation(&p.ow, &rel, &uid, at, false).await?;
                }
            }
        }
    }

    /// Updates the label index with `obj`'s state and records the selector
    /// links that result, in the window of `at`.
    async fn record_selector_links(
        &self,
        obj: &ObjectRef,
        state: &Value,
        at: SystemTime,
    ) -> anyhow::Result<()> {
        for link in self.selectors.update(&self.rules, obj, state) {
            let ow = ObjectWindow {
                object: link.holder,
                window_start: self.cfg.windowing.window_start(at),
            };
            self.ensure_object_span(&ow, "", false).await?;
            self.record_relation(&ow, &link.relation, "", at, false)
                .await?;
        }
        Ok(())
    }

    /// A create refused before its object was named (e.g. a ReplicaSet's Pod
    /// denied by a quota): an audit span in error on the span of the owner
    /// the request names, else of an object named by the `generateName`
    /// prefix, saying what it tried to create, with the request object as
    /// its snapshot. Nothing was written, so no state or relation changes.
    async fn process_failed_create(
        &self,
        item: &Accepted,
        attempt: &FailedCreate,
    ) -> anyhow::Result<()> {
        let ev = &item.event;
        let tried = &item.object;
        let (holder, holder_uid) = match &attempt.owner {
            Some(o) => (
                self.kinds.referenced_object(
                    &tried.cluster,
                    &o.api_version,
                    &o.kind,
                    &tried.namespace,
                    &o.name,
                ),
                o.uid.as_str(),
            ),
            None => (tried.clone(), ""),
        };
        let ow = ObjectWindow {
            object: holder,
            window_start: self
                .cfg
                .windowing
                .window_start(ev.request_received_timestamp),
        };
        self.ensure_object_span(&ow, holder_uid, item.replayed)
            .await?;
        let write = AuditWrite {
            audit_id: &ev.audit_id,
            user: &ev.user.username,
            impersonated_user: ev.impersonated_user.as_ref().map(|u| u.username.as_str()),
            user_agent: &ev.user_agent,
            verb: &ev.verb,
            subresource: "",
            code: ev.code(),
            source_ip: ev.source_ips.first().map(String::as_str).unwrap_or(""),
            old_rv: "",
            new_rv: "",
            error: Some(failure_message(ev)),
            start: ev.request_received_timestamp,
            end: ev.stage_timestamp,
        };
        let name = format!(
            "{} {} {} (generateName {})",
            ev.user.username,
            ev.verb,
            tried.group_resource(),
            attempt.generate_name
        );
        let mut span = span_model::audit_span_named(&ow, &write, &name);
        if !tried.group.is_empty() {
            span.attr(attr::AUDIT_ATTEMPT_GROUP, &tried.group);
        }
        span.attr(attr::AUDIT_ATTEMPT_RESOURCE, &tried.resource);
        if !tried.namespace.is_empty() {
            span.attr(attr::AUDIT_ATTEMPT_NAMESPACE, &tried.namespace);
        }
        span.attr(attr::AUDIT_ATTEMPT_GENERATE_NAME, &attempt.generate_name);
        if !attempt.attempted_name.is_empty() {
            span.attr(attr::AUDIT_ATTEMPT_NAME, &attempt.attempted_name);
        }
        if let Some(mut requested) = ev
            .request_object
            .as_ref()
            .and_then(|r| diff::parse_object(r.get()).ok())
        {
            diff::strip_noise(&mut requested);
            self.redactor
                .redact(&tried.group, &tried.resource, &mut requested);
            self.add_snapshot(&mut span, &requested, ev.stage_timestamp);
        }
        self.emit(span).await?;
        self.metrics.events_processed.inc();
        Ok(())
    }

    /// Watch changes waiting for their audit event.
    pub fn pending_watch(&self) -> usize {
        self.pending.lock().map(|q| q.len()).unwrap_or(0)
    }

    pub async fn process(&self, item: &Accepted) -> anyhow::Result<()> {
        if is_event_resource(&item.object.group, &item.object.resource) {
            return self.process_event_write(item).await;
        }
        if let Some(attempt) = &item.failed_create {
            return self.process_failed_create(item, attempt).await;
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
        let old = self.states.get(&key);
        let outcome = self.apply(ev, obj, old.as_deref());

        let uid = outcome
            .state
            .as_ref()
            .and_then(|s| s.pointer("/metadata/uid"))
            .and_then(Value::as_str)
            .unwrap_or(&item.uid)
            .to_string();
        self.ensure_object_span(&ow, &uid, item.replayed).await?;

        // A binding's state is the last one with `spec.nodeName` set: its
        // version is the one before the binding, not a new one.
        let mut new_rv = if ev.subresource() == "binding" {
            String::new()
        } else {
            outcome
                .state
                .as_ref()
                .map(|s| resource_version(s).to_string())
                .unwrap_or_default()
        };
        let mut outcome = outcome;
        // The ledger keys under which the watch may hold this write's copy.
        let mut claim_keys = Vec::new();
        if self.cfg.has_watch && ev.code() < 400 {
            if ev.subresource() == "binding" {
                // Answered with a Status: no resourceVersion to match by.
                if outcome.state.is_some() {
                    claim_keys.push(ledger_key(&key, ALIAS_BINDING));
                }
            } else if ev.verb == "delete" || ev.verb == "deletecollection" {
                claim_keys.push(ledger_key(&key, "deleted"));
                if !new_rv.is_empty() {
                    claim_keys.push(ledger_key(&key, &new_rv));
                }
                if outcome.snapshot.is_some() {
                    claim_keys.push(ledger_key(&key, ALIAS_DELETING));
                }
            } else if !new_rv.is_empty() {
                claim_keys.push(ledger_key(&key, &new_rv));
            }
        }
        let mut took_watch_diff = false;
        let mut watch_old_rv = String::new();
        for lk in claim_keys {
            match self.ledger.get(&lk) {
                // The watch saw this write first: its diff between consecutive
                // versions is the write's diff, shown here rather than alone.
                Some(entry) if entry.claim(CLAIM_AUDIT) => {
                    if !took_watch_diff && !entry.changes.is_empty() {
                        outcome.changes = entry.changes.clone();
                        took_watch_diff = true;
                    }
                    if watch_old_rv.is_empty() && !entry.new_rv.is_empty() {
                        watch_old_rv = entry.old_rv.to_string();
                        if new_rv.is_empty() {
                            new_rv = entry.new_rv.to_string();
                        }
                    }
                }
                Some(_) => {}
                // A marker for the watch's copy of this write: claimed entries'
                // changes are never read, so none are kept (they were most of
                // the ledger's memory).
                None => {
                    self.ledger.insert(lk, Arc::new(LedgerEntry::claimed()));
                }
            }
        }
        let old_rv = Self::old_resource_version(ev, &watch_old_rv, old.as_deref(), &new_rv);
        let code = ev.code();
        // A write refused by optimistic concurrency is routine: its writer
        // reads the object again and retries. Shown, but not as an error.
        let conflict = is_conflict(ev).then(|| failure_message(ev));
        let error = (code >= 400 && conflict.is_none()).then(|| failure_message(ev));
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
        // Whether this write removed the object (not only requested its
        // deletion): then it has no readiness left to report.
        let deleted = matches!(ev.verb.as_str(), "delete" | "deletecollection")
            && outcome
                .state
                .as_ref()
                .is_none_or(|s| s.pointer("/metadata/deletionTimestamp").is_none());
        let mut span = span_model::audit_span(&ow, &write);
        if !deleted && let Some(state) = &outcome.state {
            add_object_status(&mut span, obj, state);
        }
        if let Some(msg) = &conflict {
            span.attr(attr::AUDIT_CONFLICT, msg);
        }
        let at = ev.stage_timestamp;
        if let Some(snap) = &outcome.snapshot {
            self.add_snapshot(&mut span, snap, at);
        }
        self.add_changes(&mut span, &outcome.changes, at);
        if outcome.changes.len() > self.cfg.max_diff_changes {
            span.attr_int(
                attr::DIFF_TRUNCATED,
                (outcome.changes.len() - self.cfg.max_diff_changes) as i64,
            );
        }
        self.emit(span).await?;

        // Relations come from the newest state known, or the snapshot of a deleted object.
        let basis = outcome
            .state
            .as_ref()
            .or(outcome.snapshot.as_ref())
            .or(old.as_deref());
        if let Some(state) = basis {
            for (rel, uid) in all_relations(obj, state, &self.kinds, &self.rules) {
                self.record_relation(
                    &ow,
                    &rel,
                    &uid,
                    ev.request_received_timestamp,
                    item.replayed,
                )
                .await?;
            }
        }

        if deleted {
            self.states.remove(&key);
            self.selectors.remove(obj);
        } else if let Some(state) = outcome.state
            && !is_older(&new_rv, old.as_deref().map(resource_version).unwrap_or(""))
        {
            self.record_selector_links(obj, &state, ev.request_received_timestamp)
                .await?;
            self.states.put(key, Arc::new(state))?;
        }
        self.metrics.events_processed.inc();
        Ok(())
    }
}

/// The object's readiness in `state` (after the write) as `object.status` and
/// `object.status.message`, when the state tells it.
fn add_object_status(span: &mut SpanBuf, obj: &ObjectRef, state: &Value) {
    if let Some(st) = status::object_status(&obj.group, &obj.resource, state) {
        span.attr(attr::OBJECT_STATUS, st.status.as_str());
        if !st.message.is_empty() {
            span.attr(attr::OBJECT_STATUS_MESSAGE, &st.message);
        }
    }
}

/// The Status message of a failed write, else its reason and code.
fn failure_message(ev: &AuditEvent) -> String {
    let code = ev.code();
    let st = ev.response_status.as_ref();
    let msg = st.map(|s| s.message.as_str()).unwrap_or("");
    let reason = st.map(|s| s.reason.as_str()).unwrap_or("");
    match (reason.is_empty(), msg.is_empty()) {
        (true, true) => format!("HTTP {code}"),
        (false, true) => format!("{reason} (HTTP {code})"),
        (_, false) => msg.to_string(),
    }
}

/// An update or patch refused with 409 Conflict ("the object has been
/// modified"): optimistic concurrency, which controllers meet and retry all
/// the time. Not a create's 409 AlreadyExists.
fn is_conflict(ev: &AuditEvent) -> bool {
    let reason = ev
        .response_status
        .as_ref()
        .map(|s| s.reason.as_str())
        .unwrap_or("");
    ev.code() == 409
        && matches!(ev.verb.as_str(), "update" | "patch")
        && (reason == "Conflict" || reason.is_empty())
}

/// core/v1 Event timestamps have whole-second precision (the time cut down
/// to its second), which would sort an Event before the writes it reports.
/// The occurrence lies in `[t, t + 1 s)` and no later than `seen`, when the
/// Event was written (its audit event) or delivered (the Event watch): the
/// latest time both allow, `min(seen, t + 1 s - 1 µs)`, never precedes a
/// write the Event reports. A precise time, or one seen earlier than it
/// (another clock), is kept.
pub fn precise_occurrence(occurred: Option<SystemTime>, seen: SystemTime) -> SystemTime {
    let Some(t) = occurred else {
        return seen;
    };
    let whole_second = t
        .duration_since(std::time::UNIX_EPOCH)
        .is_ok_and(|d| d.subsec_nanos() == 0);
    if !whole_second || seen < t {
        return t;
    }
    seen.min(t + Duration::from_secs(1) - Duration::from_micros(1))
}

const CLAIM_NONE: u8 = 0;
const CLAIM_AUDIT: u8 = 1;
const CLAIM_WATCH: u8 = 2;

impl LedgerEntry {
    fn pending(changes: Vec<Change>, old_rv: &str, new_rv: &str) -> Self {
        Self {
            changes,
            old_rv: old_rv.into(),
            new_rv: new_rv.into(),
            claimed: std::sync::atomic::AtomicU8::new(CLAIM_NONE),
        }
    }

    /// Shown by the audit span already: only marks the write as shown.
    fn claimed() -> Self {
        Self {
            changes: Vec::new(),
            old_rv: "".into(),
            new_rv: "".into(),
            claimed: std::sync::atomic::AtomicU8::new(CLAIM_AUDIT),
        }
    }

    /// Takes the diff for `by` unless someone showed it already.
    fn claim(&self, by: u8) -> bool {
        self.claimed
            .compare_exchange(
                CLAIM_NONE,
                by,
                std::sync::atomic::Ordering::AcqRel,
                std::sync::atomic::Ordering::Acquire,
            )
            .is_ok()
    }
}

/// Ledger aliases of writes that an audit event cannot name by version.
const ALIAS_BINDING: &str = "binding";
const ALIAS_DELETING: &str = "deleting";

/// The aliases a watch change is also filed under: the scheduler's binding
/// (`spec.nodeName` set), or the start of a graceful deletion (only the
/// deletion fields changed).
fn watch_aliases(kind: WatchKind, changes: &[Change]) -> Vec<&'static str> {
    if kind == WatchKind::Deleted || changes.is_empty() {
        return Vec::new();
    }
    let mut aliases = Vec::new();
    if changes
        .iter()
        .any(|c| &*c.path == "spec.nodeName" && c.old.is_none() && c.new.is_some())
    {
        aliases.push(ALIAS_BINDING);
    }
    if changes.iter().all(|c| {
        matches!(
            &*c.path,
            "metadata.deletionTimestamp"
                | "metadata.deletionGracePeriodSeconds"
                | "metadata.generation"
        )
    }) {
        aliases.push(ALIAS_DELETING);
    }
    aliases
}

/// The ledger's key of an object's version (`deleted` for its deletion).
fn ledger_key(object_key: &str, version: &str) -> u128 {
    let mut h = Xxh3::new();
    for part in [object_key, "@", version] {
        h.update(part.as_bytes());
    }
    h.digest128()
}

fn resource_version(state: &Value) -> &str {
    state
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Resource versions are opaque strings, but etcd-backed ones are integers:
/// `a` is older than `b` only when both are and `a < b`.
fn is_older(a: &str, b: &str) -> bool {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(a), Ok(b)) => a < b,
        _ => false,
    }
}
