//! Turns one accepted audit event into spans: the object span of its window
//! (once), an audit span with the diff or snapshot, and link spans for every
//! relation not yet recorded in that window, on both sides; a write of a
//! Kubernetes Event, an event span on the object it is about; list-watch
//! versions fill in what the audit log does not show. This file composes
//! the stages ([`Processor`]), each owning its state: `applier` (last
//! states, redaction, label index; `applied` its pure parts), `reconcile` (the
//! audit↔watch ledger), `cause` (cause index, change sinks), `events` and
//! `mergelog` (what was seen), `emit` (span cache, exporter channel); `plan`
//! builds spans, `handoff` holds the values passed between stages.

mod applied;
mod applier;
mod cause;
mod config;
mod emit;
mod error;
mod events;
mod failed_create;
mod gauges;
mod handoff;
mod mergelog;
mod parsed;
mod plan;
mod reconcile;
#[cfg(test)]
pub(crate) mod test_support;
mod watch;

pub(crate) use config::DEFAULT_LEDGER_ENTRIES;
pub use config::ProcessorConfig;
pub(crate) use error::ProcessError;
pub(crate) use handoff::Emission;
pub(crate) use parsed::ParsedResponse;

use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::mpsc;

use super::causes::{Op, Revision};
use super::diff;
use super::last_states::StateStore;
use super::redact::Redactor;
use super::relations::KindRegistry;
use super::rules::RuleSet;
use super::span_cache::SpanCache;
use crate::flow::{
    Accepted, ChangeSink, ExportProgress, FailedCreate, Gauges, K8sEvent, is_event_resource,
};
use crate::flow::{SpanRef, WatchChange, WatchKind};
use crate::metrics::Metrics;
use crate::model::ObjectRef;
use crate::model::ObjectWindow;
use crate::span_model::{self, EncodedSpan, attr};
use applied::{is_older, resource_version};
use handoff::Pending;
use plan::add_status;
use reconcile::{PendingWatch, ledger_key};
use std::time::Instant;

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
        let states = self.applier.states();
        gauges::report(
            &self.metrics,
            self.cause.entry_count(),
            states,
            &self.emitter,
        );
    }

    /// Counts every span sent to the exporter (for the durable intake).
    pub fn with_export_progress(mut self, progress: Arc<ExportProgress>) -> Self {
        self.emitter.count_sent_in(progress);
        self
    }

    /// Journals exported link spans so that a restart sends none again
    /// (see [`SentLinks`](crate::flow::SentLinks)).
    pub fn with_sent_links(mut self, journal: Arc<crate::flow::SentLinks>) -> Self {
        self.emitter.journal_links_in(journal);
        self
    }

    /// Notes an audit write as a candidate cause in arrival order (the
    /// dispatcher calls this before the write is sharded); returns its place
    /// in that order.
    pub fn note_arrival(&self, item: &Accepted) -> u64 {
        self.cause.note_arrival(item)
    }

    /// The last place in arrival order given out: what a write handed to
    /// its shard now may find as causes ([`Accepted::noted_through`]).
    pub fn arrivals_noted(&self) -> u64 {
        self.cause.arrivals_noted()
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
    fn failure_message(&self, ev: &crate::flow::AuditEvent) -> String {
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
        if item.context {
            // Exported before the restart: its effect on the stages is
            // what was wanted.
            return result.map(|_| None);
        }
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
        let object_status = w
            .outcome
            .state
            .as_ref()
            .filter(|_| !w.deleted)
            .and_then(|s| super::readiness::object_status(&obj.group, &obj.resource, s));
        let inference = self
            .cause
            .infer_audit(
                self.applier.selectors(),
                item,
                &w,
                &selector_links,
                object_status.as_ref(),
            )
            .await;
        if self.cfg.changes_only {
            self.applier.keep(w)?;
            self.metrics.events_processed.inc();
            return Ok(None);
        }
        let mut span = plan::audit_span(
            item,
            &w,
            |ev| self.failure_message(ev),
            self.cfg.max_diff_changes,
        );
        plan::add_cascade(&mut span, &inference);
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
        self.emitter.send(e.0).await?;
        self.metrics.events_processed.inc();
        Ok(())
    }

    /// A version of an object from the list-watch. Its diff against the
    /// previous version is kept for the audit event of the same write; if that
    /// does not claim it within `watch_audit_wait` (a Metadata-level audit
    /// policy, no audit webhook), it is shown as a `watch` span on its own.
    pub async fn process_watch(&self, mut change: WatchChange) -> Result<(), ProcessError> {
        let obj = change.object.clone();
        let key = obj.key();
        let hidden = self.applier.prepare_watched(&obj, &mut change.state);
        self.events.note_hidden(&obj, hidden);
        let new_rv = resource_version(&change.state).to_string();
        let old = self.applier.last_state(&key);
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
                self.applier.forget(&key, &obj);
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
                self.applier.keep_watched(key.clone(), &change.state)?;
                if change.kind == WatchKind::Listed && old.is_none() {
                    // Seeding: index only; idle objects get no spans at startup.
                    let _ = self.applier.index_state(&obj, &change.state);
                } else {
                    let links = self.applier.index_state(&obj, &change.state);
                    self.emitter
                        .record_selector_link_list(links, change.observed)
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
        let Some((entry, ledger_keys)) =
            self.ledger
                .file(&key, version_key, change.kind, changes, &old_rv, &new_rv)
        else {
            return Ok(());
        };
        self.ledger.wait(PendingWatch {
            due: Instant::now() + self.ledger.wait,
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
    pub async fn flush_watch(&self, all: bool) -> Result<(), ProcessError> {
        let now = Instant::now();
        while let Some(p) = self.ledger.next_due(now, all) {
            self.emitter.ensure_object_span(&p.ow, "", false).await?;
            let at = p.change.observed;
            let new_rv = resource_version(&p.change.state).to_string();
            let kind = p.change.kind.as_str();
            let deleted = p.change.kind == WatchKind::Deleted;
            let relations = self.applier.relations(&p.ow.object, &p.change.state);
            let class = watch::watch_class(p.change.kind, &p.entry.changes);
            let span_ref = SpanRef {
                trace_id: p.ow.trace_id().to_bytes(),
                span_id: span_model::watch_span_id(&p.ow, kind, &new_rv).to_bytes(),
            };
            let own = self.cause.note_watched(
                &p.ow.object,
                span_ref,
                class,
                Op::of(kind, ""),
                at,
                Revision::of(new_rv.parse().ok()),
            );
            let readiness = watch::readiness(&p);
            let write = cause::Write::watched(&p, span_ref, own.arrival, class);
            let inference = self
                .cause
                .infer_cause(
                    self.applier.selectors(),
                    &write,
                    Some(&own),
                    &relations,
                    None,
                    (!deleted).then_some(cause::NewState::Borrowed(&p.change.state)),
                    readiness.as_ref(),
                )
                .await;
            let max = self.cfg.max_diff_changes;
            let span = watch::watch_span(&p, &new_rv, &inference, readiness.as_ref(), max);
            self.metrics.watch_spans.inc();
            self.emitter.emit(span).await?;
            if p.change.kind != WatchKind::Deleted {
                self.emitter
                    .record_relation_list(&p.ow, &relations, at, false)
                    .await?;
            }
        }
        Ok(())
    }

    /// A create refused before its object was named (e.g. a ReplicaSet's Pod
    /// denied by a quota): an audit span in error on the span of the owner
    /// the request names ([`failed_create::holder`]). Nothing was written,
    /// so no state or relation changes.
    async fn process_failed_create(
        &self,
        item: &Accepted,
        attempt: &FailedCreate,
    ) -> Result<(), ProcessError> {
        let ev = &item.event;
        let (ow, holder_uid, relations) =
            failed_create::holder(&self.kinds, self.cfg.windowing, item, attempt);
        let span = cause::audit_span_ref(&ow, &ev.audit_id);
        let arrival = self.cause.arrival_of(item);
        let write = cause::Write::audit(item, span, arrival, "", false);
        let inference = self
            .cause
            .infer_cause(
                self.applier.selectors(),
                &write,
                None,
                &relations,
                None,
                None,
                None,
            )
            .await;
        if item.context {
            return Ok(());
        }
        if self.cfg.changes_only {
            self.metrics.events_processed.inc();
            return Ok(());
        }
        self.emitter
            .ensure_object_span(&ow, holder_uid, item.replayed)
            .await?;
        let write = plan::audit_write(ev, "", "", "", Some(self.failure_message(ev)));
        let span = failed_create::attempt_span(
            item,
            attempt,
            &ow,
            &write,
            &inference,
            self.applier.redactor(),
        );
        self.emitter.emit(span).await?;
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
        if item.context {
            // Seen, so that its next report is not shown again.
            self.events.admit(&item.object, &item.uid, e, at, false);
            return None;
        }
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
        let admitted = self.events.admit(own, own_uid, e, at, true)?;
        if self.cfg.changes_only {
            self.metrics.events_processed.inc();
            return None;
        }
        Some(events::event_emission(admitted, own, own_uid))
    }
}

impl Gauges for Processor {
    fn update_gauges(&self) {
        Processor::update_gauges(self);
    }
}

#[cfg(test)]
mod tests;
