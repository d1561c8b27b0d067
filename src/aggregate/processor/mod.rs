//! Turns one accepted audit event into spans: the object span of its window
//! (once), an audit span with the diff or snapshot, and link spans for every
//! relation not yet recorded in that window, on both sides. A write of a
//! Kubernetes Event instead becomes an event span on the object the Event is
//! about. List-watch versions fill in what the audit log does not show.
//!
//! By concern: `state` (what a write did: apply, diff, redaction),
//! `reconcile` (the audit↔watch ledger: each write shown once), `emit`
//! (object and link spans through the span cache, span parts), `events`
//! (Kubernetes Events). This file holds the processor and the audit path
//! that uses them all; `watch` the list-watch's path, `failed_create` the
//! creates refused before their object was named.

mod applier;
mod cause;
mod emit;
mod events;
mod failed_create;
mod flow;
mod mergelog;
mod reconcile;
mod state;
#[cfg(test)]
mod test_support;
mod watch;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::json::Value;
use tokio::sync::mpsc;

use super::causes::DEFAULT_CAUSE_OBJECTS;
use super::redact::Redactor;
use super::relations::KindRegistry;
use super::rules::{Relation, RuleSet};
use super::span_cache::SpanCache;
use super::states::{StateError, StateStore};
use crate::metrics::Metrics;
use crate::model::{ObjectRef, Windowing};
use crate::pipeline::{Accepted, ChangeSink, ExportProgress, Gauges, K8sEvent, is_event_resource};
use crate::span_model::{self, EncodedSpan, attr};
use emit::{add_snapshot, add_snapshot_text, add_status, audit_write, is_conflict};
pub use flow::Emission;
use flow::{AppliedWrite, Pending};

/// An audit event's response object parsed (and redacted) ahead of the
/// event's processing: offline runs prepare it on their decode thread,
/// beside the processor's, where parsing and redacting would otherwise be
/// the largest part of the processor's work per write.
#[derive(Debug)]
pub struct ParsedResponse {
    object: Option<Value>,
    /// The values that redaction replaced.
    hidden: crate::aggregate::redact::HiddenValues,
    /// Redacted by the processor's redactor already.
    redacted: bool,
    /// That redaction replaced something: `object` is no longer the text
    /// parsed.
    changed: bool,
}

impl ParsedResponse {
    /// `item`'s response object parsed as processing parses it, if
    /// processing would (a write of an object that succeeded and answered
    /// with one), and redacted by `redactor` (pass the processor's when it
    /// redacts: [`Processor::sees_whole_objects`]); `None` otherwise.
    pub fn ahead_of(item: &Accepted, redactor: Option<&Redactor>) -> Option<ParsedResponse> {
        if is_event_resource(&item.object.group, &item.object.resource)
            || item.failed_create.is_some()
            || item.event.code() >= 400
        {
            return None;
        }
        let text = item.event.response_object.as_ref()?;
        let mut object = text.parse().ok();
        let mut changed = false;
        let mut hidden = Default::default();
        if let (Some(redactor), Some(object)) = (redactor, object.as_mut()) {
            (changed, hidden) = redactor.redact_parsed_noting(
                &item.object.group,
                &item.object.resource,
                object,
                text.get(),
            );
        }
        Some(ParsedResponse {
            object,
            hidden,
            redacted: redactor.is_some(),
            changed,
        })
    }
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
    /// Objects whose recent changes are kept as candidate causes of later
    /// writes (`aggregate/causes/`).
    pub cause_objects: u64,
    /// Only changes for the change sinks, no spans (`kascade analyze`): no
    /// span is built, no diff computed, and objects are not redacted unless
    /// a sink asks for them (nothing else of them leaves the process).
    pub changes_only: bool,
}

/// The ledger's default size: ≈ 80 MiB when full, which takes ≈ 440 writes
/// per second sustained over its 10 minutes.
pub const DEFAULT_LEDGER_ENTRIES: u64 = 1 << 18;

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
            cause_objects: DEFAULT_CAUSE_OBJECTS,
            changes_only: false,
        }
    }
}

/// Why a unit of work could not be processed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("span exporter has stopped")]
    ExportStopped,
    #[error("span cache: {0}")]
    SpanCache(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    State(#[from] StateError),
}

impl ProcessError {
    fn span_cache(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        ProcessError::SpanCache(e.into())
    }
}

pub struct Processor {
    cfg: ProcessorConfig,
    kinds: Arc<KindRegistry>,
    /// The first stage: each write applied to its object's last state.
    applier: applier::Applier,
    /// The last stage: spans out, through the span cache.
    emitter: emit::Emitter,
    metrics: Arc<Metrics>,
    /// Admits each Kubernetes Event occurrence once.
    events: events::EventStage,
    /// Diffs the watch saw, for the audit event of the same write, and the
    /// watch changes waiting for it.
    ledger: reconcile::Ledger,
    /// Infers each write's cause and hands it to the change sinks.
    cause: cause::CauseInferrer,
    /// Where each change goes with its cause (change log, analysis, metrics).
    change_sinks: Vec<Arc<dyn ChangeSink>>,
    /// Admits each mergelog once.
    mergelogs: mergelog::MergelogStage,
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
        // Learnt from the writes, used by every stage that names objects.
        let kinds = Arc::new(KindRegistry::default());
        Self {
            applier: applier::Applier::new(
                StateStore::new(cfg.state_cache_bytes, cfg.hot_states, &metrics),
                redactor,
                rules.clone(),
                kinds.clone(),
                cfg.windowing,
            ),
            events: events::EventStage::new(kinds.clone(), cfg.windowing, metrics.clone()),
            ledger: reconcile::Ledger::new(cfg.ledger_entries, cfg.watch_audit_wait, &metrics),
            cause: cause::CauseInferrer::new(
                rules.clone(),
                kinds.clone(),
                cfg.windowing,
                cfg.cause_objects,
                metrics.clone(),
            ),
            change_sinks: Vec::new(),
            mergelogs: mergelog::MergelogStage::new(metrics.clone()),
            emitter: emit::Emitter::new(spans, out, cfg.windowing, metrics.clone()),
            cfg,
            kinds,
            metrics,
        }
    }

    /// Hands every change, with its inferred cause, to `sink` (as well as
    /// to the sinks added before).
    pub fn with_change_sink(mut self, sink: Arc<dyn ChangeSink>) -> Self {
        self.cause.add_sink(sink.clone());
        self.events.add_sink(sink.clone());
        self.change_sinks.push(sink);
        self
    }

    pub fn update_gauges(&self) {
        self.metrics
            .cascade_objects
            .set(self.cause.entry_count() as i64);
        self.metrics
            .state_cache_entries
            .set(self.applier.states().entry_count() as i64);
        self.metrics
            .state_cache_hot_entries
            .set(self.applier.states().hot_entries() as i64);
        self.metrics
            .state_cache_bytes
            .set(self.applier.states().cold_bytes() as i64);
        self.metrics
            .span_cache_entries
            .set(self.emitter.span_cache_entries() as i64);
    }

    /// Counts every span sent to the exporter (for the durable intake).
    pub fn with_export_progress(mut self, progress: Arc<ExportProgress>) -> Self {
        self.emitter.count_sent_in(progress);
        self
    }

    /// Notes an audit write as a candidate cause in arrival order (the
    /// dispatcher calls this before the write is sharded); returns its place
    /// in that order.
    pub fn note_arrival(&self, item: &Accepted) -> u64 {
        self.cause.note_arrival(item)
    }

    /// Watch changes waiting for their audit event.
    pub fn pending_watch(&self) -> usize {
        self.ledger.pending()
    }

    /// Whether objects are seen whole (redacted, diffed): unless only
    /// changes are wanted by sinks that do not look at objects.
    pub fn sees_whole_objects(&self) -> bool {
        !self.cfg.changes_only || self.change_sinks.iter().any(|s| s.wants_objects())
    }

    /// The failure message of a refused write, without the values
    /// redaction hides in its objects.
    fn failure_message(&self, ev: &crate::pipeline::AuditEvent) -> String {
        self.applier.failure_message(ev, self.sees_whole_objects())
    }

    pub async fn process(&self, item: &Accepted) -> Result<(), ProcessError> {
        self.process_parsed(item, None).await
    }

    /// [`Processor::process`] with the response object already parsed
    /// ([`ParsedResponse::ahead_of`], on another thread): the same result.
    pub async fn process_parsed(
        &self,
        item: &Accepted,
        response: Option<ParsedResponse>,
    ) -> Result<(), ProcessError> {
        match self.process_until_emission_parsed(item, response).await? {
            Some(rest) => self.send_emission(rest).await,
            None => Ok(()),
        }
    }

    /// Whether a shard should send a write's spans ([`Processor::send_emission`])
    /// while it goes on with the next writes: with a shared span cache, whose
    /// answers take a round trip, so that many writes' reservations reach it
    /// together instead of one write's at a time.
    pub fn pipelines_emission(&self) -> bool {
        self.emitter.is_remote()
    }

    /// Processes `item` up to the spans that wait on the span cache, which
    /// are returned to be sent by [`Processor::send_emission`] (`None`: all
    /// done). Everything order matters for (the object's state, its cause,
    /// the label index) is done here, so the next write of the same object
    /// can be processed before the returned spans are sent.
    pub async fn process_until_emission(
        &self,
        item: &Accepted,
    ) -> Result<Option<Emission>, ProcessError> {
        self.process_until_emission_parsed(item, None).await
    }

    async fn process_until_emission_parsed(
        &self,
        item: &Accepted,
        response: Option<ParsedResponse>,
    ) -> Result<Option<Emission>, ProcessError> {
        let result = self.process_audit(item, response).await;
        // However it ended: no later write waits for this one any more.
        self.cause.settle(item.arrival);
        result
    }

    async fn process_audit(
        &self,
        item: &Accepted,
        response: Option<ParsedResponse>,
    ) -> Result<Option<Emission>, ProcessError> {
        if is_event_resource(&item.object.group, &item.object.resource) {
            if self.cfg.changes_only && !self.events.sinks_want_events() {
                return Ok(None);
            }
            return Ok(self.process_event_write(item));
        }
        if let Some(attempt) = &item.failed_create {
            return self
                .process_failed_create(item, attempt)
                .await
                .map(|()| None);
        }
        let ev = &item.event;
        let obj = &item.object;
        let mut w = self
            .applier
            .apply(item, response, self.sees_whole_objects());
        self.events
            .note_hidden(obj, std::mem::take(&mut w.outcome.hidden));
        if self.cfg.has_watch && ev.code() < 400 {
            w = self.ledger.reconcile_audit(ev, w);
        }
        // The label index learns the new labels and selectors now, so that a
        // selector's holder is a relation of this very write (a
        // StatefulSet's new claim); the links are recorded further down.
        let selector_links = self.applier.index_labels(&w);
        // Only a write that joined a selector copies its relations.
        let holders_by_selector = cause::holder_relations(&selector_links, obj);
        let cause_relations: std::borrow::Cow<'_, [(Relation, String)]> =
            if holders_by_selector.is_empty() {
                std::borrow::Cow::Borrowed(&w.relations)
            } else {
                std::borrow::Cow::Owned([w.relations.as_slice(), &holders_by_selector].concat())
            };
        let object_status = w
            .outcome
            .state
            .as_ref()
            .filter(|_| !w.deleted)
            .and_then(|s| super::status::object_status(&obj.group, &obj.resource, s));
        // Before anything that can fail: writes caused by this one wait for it.
        let own = self.cause.arrival_entry(item);
        // The entry already names this write's span (a refused write has none).
        let (span, arrival) = match &own {
            Some(e) => (e.span, e.arrival),
            None => (
                cause::audit_span_ref(&w.ow, &ev.audit_id),
                self.cause.arrival_of(item),
            ),
        };
        let inference = self
            .cause
            .infer_cause(
                self.applier.selectors(),
                &cause::Write::audit(ev, obj, span, arrival, &w.uid, w.deleted),
                own.as_ref(),
                &cause_relations,
                w.old.as_ref(),
                w.outcome
                    .state
                    .as_ref()
                    .filter(|_| !w.deleted)
                    .map(cause::NewState::Shared),
                object_status.as_ref(),
            )
            .await;
        if self.cfg.changes_only {
            self.applier.keep(w)?;
            self.metrics.events_processed.inc();
            return Ok(None);
        }
        let mut span = self.audit_span(item, &w);
        cause::add_cascade(&mut span, &inference);
        if let Some(st) = &object_status {
            add_status(&mut span, st);
        }
        if w.deleted {
            span.attr(attr::OBJECT_REMOVED, "true");
        }
        let relations = std::mem::take(&mut w.relations);
        let uid = std::mem::take(&mut w.uid);
        let ow = self.applier.keep(w)?;
        Ok(Some(Emission(Pending::Write {
            ow,
            uid,
            replayed: item.replayed,
            span,
            relations,
            selector_links,
            at: ev.request_received_timestamp,
        })))
    }

    /// Sends what [`Processor::process_until_emission`] left.
    pub async fn send_emission(&self, e: Emission) -> Result<(), ProcessError> {
        match e.0 {
            Pending::Write {
                ow,
                uid,
                replayed,
                span,
                relations,
                selector_links,
                at,
            } => {
                self.emitter.ensure_object_span(&ow, &uid, replayed).await?;
                self.emitter.emit(span).await?;
                self.emitter
                    .record_relation_list(&ow, &relations, at, replayed)
                    .await?;
                self.emitter
                    .record_selector_link_list(selector_links, at)
                    .await?;
            }
            Pending::Event {
                ow,
                involved_uid,
                span,
            } => {
                self.emitter
                    .ensure_object_span(&ow, &involved_uid, false)
                    .await?;
                self.metrics.event_spans.inc();
                self.emitter.emit(span).await?;
            }
        }
        self.metrics.events_processed.inc();
        Ok(())
    }

    /// A mergelog from an instrumented controller, shown once.
    pub async fn process_mergelog(
        &self,
        cluster: &str,
        m: &kascade_cpid::Mergelog,
    ) -> Result<(), ProcessError> {
        if !self.mergelogs.admit(m) || self.cfg.changes_only {
            return Ok(());
        }
        for span in span_model::merge_spans(cluster, m) {
            self.emitter.emit(span).await?;
        }
        Ok(())
    }

    /// A write of a Kubernetes Event: an event span on the object the Event
    /// is about. Returns the span to send ([`Processor::send_emission`]), if any.
    fn process_event_write(&self, item: &Accepted) -> Option<Emission> {
        let (e, at) = self.events.written(item)?;
        self.k8s_event_until_emission(&item.object, &item.uid, e, at)
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
        match self.k8s_event_until_emission(own, own_uid, e, at) {
            Some(rest) => self.send_emission(rest).await,
            None => Ok(()),
        }
    }

    /// [`Processor::process_k8s_event`] up to the span to send.
    fn k8s_event_until_emission(
        &self,
        own: &ObjectRef,
        own_uid: &str,
        e: K8sEvent,
        at: SystemTime,
    ) -> Option<Emission> {
        let admitted = self.events.admit(own, own_uid, e, at)?;
        if self.cfg.changes_only {
            self.metrics.events_processed.inc();
            return None;
        }
        Some(events::event_emission(admitted, own, own_uid))
    }

    /// The audit span of an applied write, without its cascade and status.
    fn audit_span(&self, item: &Accepted, w: &AppliedWrite) -> span_model::SpanBuf {
        let ev = &item.event;
        // A write refused by optimistic concurrency is routine: its writer
        // reads the object again and retries. Shown, but not as an error.
        let conflict = is_conflict(ev).then(|| self.failure_message(ev));
        let error = (ev.code() >= 400 && conflict.is_none()).then(|| self.failure_message(ev));
        let write = audit_write(ev, ev.subresource(), &w.old_rv, &w.new_rv, error);
        let mut span = span_model::audit_span(&w.ow, &write);
        if let Some(msg) = &conflict {
            span.attr(attr::AUDIT_CONFLICT, msg);
        }
        let at = ev.stage_timestamp;
        match (&w.outcome.snapshot, &w.outcome.state, &w.outcome.state_text) {
            // The new state, and its text as logged: written as it is.
            (Some(snap), Some(state), Some(text)) if Arc::ptr_eq(snap, state) => {
                add_snapshot_text(&mut span, text, at);
            }
            (Some(snap), _, _) => add_snapshot(&mut span, snap, at),
            (None, _, _) => {}
        }
        emit::add_changes(&mut span, &w.outcome.changes, self.cfg.max_diff_changes, at);
        if w.outcome.changes.len() > self.cfg.max_diff_changes {
            span.attr_int(
                attr::DIFF_TRUNCATED,
                (w.outcome.changes.len() - self.cfg.max_diff_changes) as i64,
            );
        }
        span
    }
}

impl Gauges for Processor {
    fn update_gauges(&self) {
        Processor::update_gauges(self);
    }
}

#[cfg(test)]
mod tests;
