//! The last stage: spans out. Each object span once per window (the span
//! cache decides), link spans for every relation not yet recorded in the
//! window, on both sides, each span counted as sent.

use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::mpsc;

use crate::metrics::Metrics;
use crate::model::{KeyHasher, Windowing};

use super::super::rules::Relation;
use super::super::span_cache::{Slot, SpanCache};
use super::ProcessError;
use super::handoff::Pending;
use crate::flow::ExportProgress;
use crate::flow::{EarlierLink, SentLinks};
use crate::model::{ObjectRef, ObjectWindow};
use crate::span_model::{self, EncodedSpan, LinkFields, SpanBuf};

/// What the emitter makes of a link.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LinkClaim {
    /// To be emitted now, starting then: when the write that found it
    /// happened, or when the span an earlier process may have sent started.
    Claimed(SystemTime),
    /// Emitted already (by this process, or another replica).
    Known,
    /// Exported by an earlier process (the spool's journal).
    Exported,
}

/// Sends spans to the exporter: owns the span cache (which object and link
/// spans a window has already) and the exporter's channel.
pub(super) struct Emitter {
    spans: Arc<dyn SpanCache>,
    out: mpsc::Sender<EncodedSpan>,
    export_progress: Option<Arc<ExportProgress>>,
    /// Links exported before a restart, and where to note those sent now.
    sent_links: Option<Arc<SentLinks>>,
    windowing: Windowing,
    metrics: Arc<Metrics>,
}

impl Emitter {
    pub(super) fn new(
        spans: Arc<dyn SpanCache>,
        out: mpsc::Sender<EncodedSpan>,
        windowing: Windowing,
        metrics: Arc<Metrics>,
    ) -> Self {
        Emitter {
            spans,
            out,
            export_progress: None,
            sent_links: None,
            windowing,
            metrics,
        }
    }

    /// Sends one write's or Event's planned spans: the object span first
    /// (once per window), then the span, then the write's relations.
    pub(super) async fn send(&self, pending: Pending) -> Result<(), ProcessError> {
        match pending {
            Pending::Write {
                ow,
                uid,
                replayed,
                span,
                relations,
                selector_links,
                at,
            } => {
                self.ensure_object_span(&ow, &uid, replayed).await?;
                self.emit(span).await?;
                self.record_relation_list(&ow, &relations, at, replayed)
                    .await?;
                self.record_selector_link_list(selector_links, at).await?;
            }
            Pending::Event {
                ow,
                involved_uid,
                span,
            } => {
                self.ensure_object_span(&ow, &involved_uid, false).await?;
                self.metrics.event_spans.inc();
                self.emit(span).await?;
            }
        }
        Ok(())
    }

    /// Counts every span sent to the exporter (for the durable intake).
    pub(super) fn count_sent_in(&mut self, progress: Arc<ExportProgress>) {
        self.export_progress = Some(progress);
    }

    /// Journals the link spans sent, and sends none an earlier process
    /// exported (for the durable intake).
    pub(super) fn journal_links_in(&mut self, journal: Arc<SentLinks>) {
        self.sent_links = Some(journal);
    }

    /// Whether the span cache is shared (its answers take a round trip).
    pub(super) fn is_remote(&self) -> bool {
        self.spans.is_remote()
    }

    /// Object windows the span cache holds.
    pub(super) fn span_cache_entries(&self) -> u64 {
        self.spans.entry_count()
    }

    pub(super) async fn emit(&self, span: SpanBuf) -> Result<(), ProcessError> {
        self.out
            .send(span.finish())
            .await
            .map_err(|_| ProcessError::ExportStopped)?;
        if let Some(p) = &self.export_progress {
            p.add_sent(1);
        }
        Ok(())
    }

    /// Emits the object span of `ow` unless it already exists (or again when
    /// `force`: see [`Accepted::replayed`](crate::flow::Accepted::replayed)).
    pub(super) async fn ensure_object_span(
        &self,
        ow: &ObjectWindow,
        uid: &str,
        force: bool,
    ) -> Result<(), ProcessError> {
        let slot = self
            .spans
            .fetch_or_reserve(ow, !uid.is_empty())
            .await
            .map_err(ProcessError::span_cache)?;
        // Sent again when it went out without the uid this write has: the
        // frontend's merge takes the uid from any of the object's spans.
        if slot != Slot::Existing || force {
            let (_, end) = self.windowing.bounds(ow.window_start);
            if slot != Slot::UidMissing {
                self.metrics.object_spans.inc();
            }
            self.emit(span_model::object_span(ow, uid, end)).await?;
        }
        Ok(())
    }

    /// Records `relations` (computed by the caller), in `ow`'s window; with a
    /// shared span cache all at once, so that it asks for their links (and
    /// then their objects' spans) in one round trip, not one per relation.
    /// (The local cache answers at once: one after the other costs less.)
    pub(super) async fn record_relation_list(
        &self,
        ow: &ObjectWindow,
        relations: &[(Relation, String)],
        at: SystemTime,
        force: bool,
    ) -> Result<(), ProcessError> {
        self.record_each(relations.iter(), |(rel, uid)| {
            self.record_relation(ow, rel, uid, at, force)
        })
        .await
    }

    /// Runs `record` for each item: one after the other with the local span
    /// cache (it answers at once; that costs less), all at once with a
    /// shared one (so that their reservations go to it together).
    async fn record_each<T, F, Fut>(
        &self,
        items: impl ExactSizeIterator<Item = T>,
        record: F,
    ) -> Result<(), ProcessError>
    where
        F: Fn(T) -> Fut,
        Fut: std::future::Future<Output = Result<(), ProcessError>>,
    {
        if items.len() < 2 || !self.spans.is_remote() {
            for item in items {
                record(item).await?;
            }
            return Ok(());
        }
        futures::future::try_join_all(items.map(record))
            .await
            .map(drop)
    }

    /// A link span on each side of `rel`, unless the window has it already
    /// (again when `force`), and the other object's span if it has none.
    async fn record_relation(
        &self,
        ow: &ObjectWindow,
        rel: &Relation,
        target_uid: &str,
        at: SystemTime,
        force: bool,
    ) -> Result<(), ProcessError> {
        // The hash of `<role>|<class>|<other object's key>`.
        let link_key = |role: &str, class: &str, other: &ObjectRef| {
            let mut h = KeyHasher::new();
            h.update(role.as_bytes());
            h.update(b"|");
            h.update(class.as_bytes());
            h.update(b"|");
            other.hash_key(&mut h);
            h.digest()
        };
        let forward = link_key(rel.role.as_str(), &rel.class, &rel.target);
        let forward_claim = self.claim_link(ow, forward, at, force).await?;
        if forward_claim == LinkClaim::Known {
            // Recorded together: the other side is known too.
            return Ok(());
        }
        let target = ObjectWindow {
            object: rel.target.clone(),
            window_start: ow.window_start,
        };
        if let LinkClaim::Claimed(at) = forward_claim {
            self.ensure_object_span(&target, target_uid, force).await?;
            self.metrics.link_spans.inc();
            let f = LinkFields {
                target: &target,
                role: rel.role.as_str(),
                class: &rel.class,
                at,
            };
            // Journaled before it can leave (the exporter writes the
            // journal ahead of each batch).
            self.note_sent(ow, forward, at);
            self.emit(span_model::link_span(ow, &f, forward)).await?;
        }
        // Looked at also when an earlier process exported this side: a
        // release may have journaled it and not yet the other side.
        let reverse_role = rel.role.reverse();
        let backward = link_key(reverse_role.as_str(), &rel.class, &ow.object);
        if let LinkClaim::Claimed(at) = self.claim_link(&target, backward, at, force).await? {
            if forward_claim == LinkClaim::Exported {
                self.ensure_object_span(&target, target_uid, force).await?;
            }
            self.metrics.link_spans.inc();
            let b = LinkFields {
                target: ow,
                role: reverse_role.as_str(),
                class: &rel.class,
                at,
            };
            self.note_sent(&target, backward, at);
            self.emit(span_model::link_span(&target, &b, backward))
                .await?;
        }
        Ok(())
    }

    /// Whether to emit the link's span, found by a write at `at`: not if
    /// an earlier process exported it (the journal); else if it is new to
    /// the span cache, or — for a replayed write (`force`), whose links may
    /// have been reserved in a shared cache and never exported — if this
    /// process has not emitted it yet. Once per process: a link span starts
    /// at the write that found it, so a copy found by another write would
    /// be a span of its own in the store. For the same reason a link an
    /// earlier process may have sent starts when that one did: the same
    /// span again, which the store keeps once.
    async fn claim_link(
        &self,
        ow: &ObjectWindow,
        link_key: u64,
        at: SystemTime,
        force: bool,
    ) -> Result<LinkClaim, ProcessError> {
        let earlier = self
            .sent_links
            .as_ref()
            .map_or(EarlierLink::Unknown, |j| j.earlier(ow, link_key));
        let at = match earlier {
            EarlierLink::Exported => return Ok(LinkClaim::Exported),
            EarlierLink::MaybeSent(started) => started,
            EarlierLink::Unknown => at,
        };
        let emitted_here = force && self.spans.has_link_here(ow, link_key);
        let recorded = self
            .spans
            .record_link(ow, link_key)
            .await
            .map_err(ProcessError::span_cache)?;
        Ok(if recorded || (force && !emitted_here) {
            LinkClaim::Claimed(at)
        } else {
            LinkClaim::Known
        })
    }

    /// The link's span, starting at `at`, goes into the export queue next:
    /// journal it.
    fn note_sent(&self, ow: &ObjectWindow, link_key: u64, at: SystemTime) {
        if let Some(j) = &self.sent_links {
            j.note(ow, link_key, at);
        }
    }

    /// Records selector links the label index returned, in the window of `at`.
    pub(super) async fn record_selector_link_list(
        &self,
        links: Vec<super::super::selectors::SelectorLink>,
        at: SystemTime,
    ) -> Result<(), ProcessError> {
        let window_start = self.windowing.window_start(at);
        self.record_each(links.into_iter(), |link| async move {
            let ow = ObjectWindow {
                object: link.holder,
                window_start,
            };
            self.ensure_object_span(&ow, "", false).await?;
            self.record_relation(&ow, &link.relation, "", at, false)
                .await
        })
        .await
    }
}

#[cfg(test)]
mod tests;
