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
use crate::model::{ObjectRef, ObjectWindow};
use crate::pipeline::ExportProgress;
use crate::pipeline::SentLinks;
use crate::span_model::{self, EncodedSpan, LinkFields, SpanBuf};

/// What the emitter makes of a link.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LinkClaim {
    /// To be emitted now.
    Claimed,
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
    /// `force`: see [`Accepted::replayed`](crate::pipeline::Accepted::replayed)).
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
        let forward_claim = self.claim_link(ow, forward, force).await?;
        if forward_claim == LinkClaim::Known {
            // Recorded together: the other side is known too.
            return Ok(());
        }
        let target = ObjectWindow {
            object: rel.target.clone(),
            window_start: ow.window_start,
        };
        if forward_claim == LinkClaim::Claimed {
            self.ensure_object_span(&target, target_uid, force).await?;
            self.metrics.link_spans.inc();
            let f = LinkFields {
                target: &target,
                role: rel.role.as_str(),
                class: &rel.class,
                at,
            };
            self.emit(span_model::link_span(ow, &f, forward)).await?;
            self.note_sent(ow, forward);
        }
        // Looked at also when an earlier process exported this side: a
        // release may have journaled it and not yet the other side.
        let reverse_role = rel.role.reverse();
        let backward = link_key(reverse_role.as_str(), &rel.class, &ow.object);
        if self.claim_link(&target, backward, force).await? == LinkClaim::Claimed {
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
            self.emit(span_model::link_span(&target, &b, backward))
                .await?;
            self.note_sent(&target, backward);
        }
        Ok(())
    }

    /// Whether to emit the link's span: not if an earlier process exported
    /// it (the journal); else if it is new to the span cache, or — for a
    /// replayed write (`force`), whose links may have been reserved in a
    /// shared cache and never exported — if this process has not emitted
    /// it yet. Once per process: a link span starts at the write that found
    /// it, so every further copy would be a span of its own in the store.
    async fn claim_link(
        &self,
        ow: &ObjectWindow,
        link_key: u64,
        force: bool,
    ) -> Result<LinkClaim, ProcessError> {
        if self
            .sent_links
            .as_ref()
            .is_some_and(|j| j.exported(ow, link_key))
        {
            return Ok(LinkClaim::Exported);
        }
        let emitted_here = force && self.spans.has_link_here(ow, link_key);
        let recorded = self
            .spans
            .record_link(ow, link_key)
            .await
            .map_err(ProcessError::span_cache)?;
        Ok(if recorded || (force && !emitted_here) {
            LinkClaim::Claimed
        } else {
            LinkClaim::Known
        })
    }

    /// The link's span is in the export queue: journal it.
    fn note_sent(&self, ow: &ObjectWindow, link_key: u64) {
        if let Some(j) = &self.sent_links {
            j.note(ow, link_key);
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
mod tests {
    use super::super::ProcessorConfig;
    use super::super::test_support::{
        accepted, attr, audit_values, drain, processor, repository_rules,
    };
    use super::*;
    use crate::json::JsonValueTrait as _;
    use crate::json::Value;
    use crate::pipeline::Accepted;
    use crate::span_model::{EVENT_DIFF, attr};
    use crate::span_model::{SPAN_KIND_LINK, SPAN_KIND_OBJECT, Span};

    /// The emitter stage alone, with a local span cache of the default
    /// window, its spans sent to the returned receiver.
    fn emitter() -> (Emitter, mpsc::Receiver<EncodedSpan>, Arc<Metrics>) {
        let windowing = ProcessorConfig::default().windowing;
        let metrics = Arc::new(Metrics::default());
        let (tx, rx) = mpsc::channel(1 << 16);
        let ttl = windowing.width + std::time::Duration::from_secs(300);
        let spans = Arc::new(super::super::super::span_cache::LocalSpanCache::new(
            1 << 20,
            ttl,
        ));
        (
            Emitter::new(spans, tx, windowing, metrics.clone()),
            rx,
            metrics,
        )
    }

    fn kind(s: &Span) -> String {
        attr(s, attr::SPAN_KIND).unwrap_or_default()
    }

    /// The first successful create of `resource` in the deployment scenario.
    fn created(resource: &str) -> Accepted {
        audit_values("deployment")
            .iter()
            .find(|e| {
                e["verb"] == "create"
                    && e["objectRef"]["resource"] == resource
                    && e["responseStatus"]["code"] == 201
            })
            .and_then(accepted)
            .expect("the scenario creates it")
    }

    /// The deployment scenario deletes `hello` before creating it: the
    /// refused delete (404) names no uid, and it is the window's first
    /// write. The create that follows sends the object span again, with the
    /// uid; later writes do not.
    #[tokio::test]
    async fn an_object_span_sent_without_the_uid_is_sent_again_by_the_first_write_with_it() {
        let events: Vec<serde_json::Value> = audit_values("deployment")
            .into_iter()
            .filter(|e| {
                e["objectRef"]["resource"] == "deployments" && e["objectRef"]["name"] == "hello"
            })
            .collect();
        assert_eq!(
            (&events[0]["verb"], &events[0]["responseStatus"]["code"]),
            (
                &serde_json::Value::from("delete"),
                &serde_json::Value::from(404)
            ),
            "the scenario's first write of hello"
        );
        let uid = events[1]["responseObject"]["metadata"]["uid"]
            .as_str()
            .expect("the create's uid")
            .to_string();
        let writes: Vec<Accepted> = events.iter().filter_map(accepted).collect();
        let (p, mut rx, metrics) = processor(ProcessorConfig::default());
        for w in &writes {
            p.process(w).await.unwrap();
        }
        let spans = drain(&mut rx);
        // Counted once per object window, not per send.
        let windows: std::collections::HashSet<_> = spans
            .iter()
            .filter(|s| kind(s) == SPAN_KIND_OBJECT)
            .map(|s| s.trace_id.clone())
            .collect();
        assert_eq!(metrics.object_spans.get(), windows.len() as u64);
        let objects: Vec<Option<String>> = spans
            .iter()
            .filter(|s| {
                kind(s) == SPAN_KIND_OBJECT && attr(s, attr::NAME).as_deref() == Some("hello")
            })
            .map(|s| attr(s, attr::UID))
            .collect();
        assert_eq!(
            objects,
            vec![None, Some(uid.clone())],
            "hello's object spans, in order"
        );
        assert!(writes.len() > 10, "later writes, which have the uid too");
    }

    #[tokio::test]
    async fn an_object_span_once_per_window_and_again_when_replayed() {
        let (p, mut rx, _) = emitter();
        let item = created("deployments");
        let ow = ObjectWindow {
            object: item.object.clone(),
            window_start: 1800,
        };
        p.ensure_object_span(&ow, &item.uid, false).await.unwrap();
        p.ensure_object_span(&ow, &item.uid, false).await.unwrap();
        assert_eq!(drain(&mut rx).len(), 1);
        p.ensure_object_span(&ow, &item.uid, true).await.unwrap();
        let next = ObjectWindow {
            window_start: 3600,
            ..ow.clone()
        };
        p.ensure_object_span(&next, &item.uid, false).await.unwrap();
        let spans = drain(&mut rx);
        assert_eq!(spans.len(), 2, "forced, then the next window's");
        assert!(spans.iter().all(|s| kind(s) == SPAN_KIND_OBJECT));
        assert_eq!(spans[0].trace_id.len(), 16);
        assert_ne!(spans[0].trace_id, spans[1].trace_id, "a trace per window");
    }

    #[tokio::test]
    async fn an_owner_is_linked_on_both_sides_once_per_window() {
        let (p, mut rx, _) = emitter();
        let rs = created("replicasets");
        let state: Value =
            crate::json::parse(rs.event.response_object.as_ref().unwrap().get()).unwrap();
        let ow = ObjectWindow {
            object: rs.object.clone(),
            window_start: 1800,
        };
        let at = rs.event.stage_timestamp;
        let rules = repository_rules();
        let kinds = crate::aggregate::relations::KindRegistry::default();
        let relations =
            crate::aggregate::relations::all_relations(&ow.object, &state, &kinds, &rules);
        p.record_relation_list(&ow, &relations, at, false)
            .await
            .unwrap();
        let spans = drain(&mut rx);
        let links: Vec<_> = spans.iter().filter(|s| kind(s) == SPAN_KIND_LINK).collect();
        let owner = state["metadata"]["ownerReferences"][0]["name"]
            .as_str()
            .unwrap();
        // The Deployment's object span (the window had none), then a link
        // on each side: the Deployment is the parent, the ReplicaSet the child.
        assert!(
            spans
                .iter()
                .any(|s| kind(s) == SPAN_KIND_OBJECT
                    && attr(s, attr::NAME).as_deref() == Some(owner))
        );
        let roles: Vec<_> = links
            .iter()
            .filter(|l| attr(l, attr::LINK_CLASS).as_deref() == Some("owner"))
            .map(|l| attr(l, attr::LINK_ROLE).unwrap())
            .collect();
        assert_eq!(roles, ["parent", "child"], "{spans:#?}");
        // Known in this window: nothing again, unless replayed.
        p.record_relation_list(&ow, &relations, at, false)
            .await
            .unwrap();
        assert!(drain(&mut rx).is_empty());
        // Replayed in the process that sent them: not again either (a link
        // span starts at the write that found it, so a copy found by a
        // later write would be a second span in the store).
        p.record_relation_list(&ow, &relations, at, true)
            .await
            .unwrap();
        assert!(drain(&mut rx).is_empty());
    }

    fn links_of(spans: &[Span]) -> Vec<(Vec<u8>, String)> {
        let mut links: Vec<_> = spans
            .iter()
            .filter(|s| kind(s) == SPAN_KIND_LINK)
            .map(|s| (s.span_id.clone(), attr(s, attr::LINK_ROLE).unwrap()))
            .collect();
        links.sort();
        links
    }

    /// The link journal in `dir`, as a restarted process opens it.
    fn journal_in(dir: &std::path::Path) -> Arc<SentLinks> {
        Arc::new(
            SentLinks::open(
                dir,
                std::time::Duration::from_secs(3600),
                Default::default(),
            )
            .unwrap(),
        )
    }

    /// The deployment scenario's first ReplicaSet: its window, its
    /// relations (the owner among them) and its create's time.
    fn replicaset_relations() -> (ObjectWindow, Vec<(Relation, String)>, SystemTime) {
        let rs = created("replicasets");
        let state: Value =
            crate::json::parse(rs.event.response_object.as_ref().unwrap().get()).unwrap();
        let ow = ObjectWindow {
            object: rs.object.clone(),
            window_start: 1800,
        };
        let relations = crate::aggregate::relations::all_relations(
            &ow.object,
            &state,
            &crate::aggregate::relations::KindRegistry::default(),
            &repository_rules(),
        );
        (ow, relations, rs.event.stage_timestamp)
    }

    /// A release may take a relation's first side and not yet its second
    /// (noted a moment later): after a crash the journal names one side
    /// only, and the replay sends the other.
    #[tokio::test]
    async fn a_side_the_journal_does_not_name_is_sent_though_the_other_was_exported() {
        let dir = tempfile::tempdir().unwrap();
        let open = || journal_in(dir.path());
        let (ow, relations, at) = replicaset_relations();
        let (mut first, mut rx, _) = emitter();
        let journal = open();
        first.journal_links_in(journal.clone());
        first
            .record_relation_list(&ow, &relations, at, false)
            .await
            .unwrap();
        // In emission order: each relation's first side, then its second.
        let sent: Vec<Vec<u8>> = drain(&mut rx)
            .iter()
            .filter(|s| kind(s) == SPAN_KIND_LINK)
            .map(|s| s.span_id.clone())
            .collect();
        assert!(sent.len() >= 2 && sent.len().is_multiple_of(2), "{sent:?}");
        journal.persist(journal.take().into_iter().step_by(2).collect());
        drop((first, journal));

        let (mut second, mut rx, _) = emitter();
        second.journal_links_in(open());
        second
            .record_relation_list(&ow, &relations, at, true)
            .await
            .unwrap();
        let mut again: Vec<Vec<u8>> = drain(&mut rx)
            .iter()
            .filter(|s| kind(s) == SPAN_KIND_LINK)
            .map(|s| s.span_id.clone())
            .collect();
        again.sort();
        let mut second_sides: Vec<Vec<u8>> = sent.iter().skip(1).step_by(2).cloned().collect();
        second_sides.sort();
        assert_eq!(again, second_sides);
    }

    #[tokio::test]
    async fn a_restart_sends_no_link_the_last_process_exported_and_each_other_once() {
        let dir = tempfile::tempdir().unwrap();
        let open = || journal_in(dir.path());
        let (ow, relations, at) = replicaset_relations();
        let later = at + std::time::Duration::from_secs(1);

        // A process sends the links, and the spool's release journals them.
        let (mut first, mut rx, _) = emitter();
        let journal = open();
        first.journal_links_in(journal.clone());
        first
            .record_relation_list(&ow, &relations, at, false)
            .await
            .unwrap();
        let sent = links_of(&drain(&mut rx));
        assert!(sent.len() >= 2, "the owner on both sides");
        journal.persist(journal.take());
        drop((first, journal));

        // The next process replays a later write reaching the same links.
        let (mut second, mut rx, _) = emitter();
        second.journal_links_in(open());
        second
            .record_relation_list(&ow, &relations, later, true)
            .await
            .unwrap();
        assert_eq!(links_of(&drain(&mut rx)), [], "exported before the restart");

        // Without the journal (a crash before the release): each link once,
        // however many replayed writes reach it.
        let (third, mut rx, _) = emitter();
        for t in [at, later] {
            third
                .record_relation_list(&ow, &relations, t, true)
                .await
                .unwrap();
        }
        assert_eq!(links_of(&drain(&mut rx)), sent);
    }

    #[tokio::test]
    async fn diff_events_beyond_the_cap_are_counted() {
        let cfg = ProcessorConfig {
            max_diff_changes: 1,
            ..Default::default()
        };
        let (p, mut rx, _) = processor(cfg);
        for raw in audit_values("deployment") {
            if let Some(item) = accepted(&raw) {
                p.process(&item).await.unwrap();
            }
        }
        let spans = drain(&mut rx);
        let capped = spans
            .iter()
            .find(|s| attr(s, attr::DIFF_TRUNCATED).is_some())
            .expect("a write with more than one change");
        let diffs = capped
            .events
            .iter()
            .filter(|e| e.name == EVENT_DIFF)
            .count();
        assert_eq!(diffs, 1);
        assert!(
            spans
                .iter()
                .all(|s| s.events.iter().filter(|e| e.name == EVENT_DIFF).count() <= 1)
        );
    }
}
