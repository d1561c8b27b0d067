//! The list-watch's side of the processor: each version diffed against the
//! last state, filed in the [ledger](super::reconcile) for the audit event
//! of the same write, and shown as a `watch` span when none claims it.

use std::time::Instant;

use super::super::causes::{Op, Revision};
use super::super::diff::{self, Change};
use super::super::rules::ChangeClass;
use super::cause::{NewState, Write, add_cascade};
use super::emit::{self, add_snapshot, add_status};
use super::reconcile::{PendingWatch, ledger_key};
use super::state::{is_older, resource_version};
use super::{ProcessError, Processor};
use crate::model::ObjectWindow;
use crate::pipeline::{ChangeSource, SpanRef, WatchChange, WatchKind};
use crate::span_model;

impl Processor {
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
            let class = watch_class(p.change.kind, &p.entry.changes);
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
            let uid = crate::json::pointer(&p.change.state, "/metadata/uid")
                .and_then(crate::json::JsonValueTrait::as_str)
                .unwrap_or("");
            let readiness = (!deleted)
                .then(|| {
                    super::super::status::object_status(
                        &p.ow.object.group,
                        &p.ow.object.resource,
                        &p.change.state,
                    )
                })
                .flatten();
            let inference = self
                .cause
                .infer_cause(
                    self.applier.selectors(),
                    &Write {
                        object: &p.ow.object,
                        span: span_ref,
                        arrival: own.arrival,
                        user: "",
                        verb: kind,
                        subresource: "",
                        class: Some(class),
                        code: 200,
                        received: at,
                        completed: at,
                        source: ChangeSource::Watch,
                        uid,
                        deleted,
                        failure: None,
                    },
                    Some(&own),
                    &relations,
                    None,
                    (!deleted).then_some(NewState::Borrowed(&p.change.state)),
                    readiness.as_ref(),
                )
                .await;
            let mut span = span_model::watch_span(&p.ow, kind, &p.old_rv, &new_rv, at);
            add_cascade(&mut span, &inference);
            if let Some(st) = &readiness {
                add_status(&mut span, st);
            }
            if let Some(snap) = &p.snapshot {
                add_snapshot(&mut span, snap, at);
            }
            emit::add_changes(&mut span, &p.entry.changes, self.cfg.max_diff_changes, at);
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
}

/// The class of a change only the watch saw: a modification that touched
/// nothing but `status` is a status write.
fn watch_class(kind: WatchKind, changes: &[Change]) -> ChangeClass {
    match kind {
        WatchKind::Added | WatchKind::Listed => ChangeClass::Create,
        WatchKind::Deleted => ChangeClass::Delete,
        WatchKind::Modified
            if !changes.is_empty()
                && changes
                    .iter()
                    .all(|c| c.path.as_ref() == "status" || c.path.starts_with("status.")) =>
        {
            ChangeClass::Status
        }
        WatchKind::Modified => ChangeClass::Update,
    }
}

#[cfg(test)]
mod tests {
    use super::super::ProcessorConfig;
    use super::super::test_support::{accepted, attr, audit_values, drain, fixture, processor};
    use crate::json::JsonValueTrait as _;
    use crate::model::ObjectRef;
    use crate::pipeline::{WatchChange, WatchKind};
    use crate::span_model::{EVENT_DIFF, EVENT_SNAPSHOT, SPAN_KIND_AUDIT, SPAN_KIND_WATCH, attr};

    /// The deployment scenario's Deployment as the list-watch delivered it.
    fn watched_deployment() -> Vec<WatchChange> {
        fixture("deployment", "watch/apps.deployments.jsonl")
            .lines()
            .map(|l| crate::json::parse(l).unwrap())
            .filter_map(|ev| {
                let kind = match ev["type"].as_str()? {
                    "ADDED" => WatchKind::Added,
                    "MODIFIED" => WatchKind::Modified,
                    "DELETED" => WatchKind::Deleted,
                    _ => return None,
                };
                let state = ev.get("object")?.clone();
                let object = ObjectRef::new(
                    "c",
                    "apps",
                    "deployments",
                    state["metadata"]["namespace"].as_str()?,
                    state["metadata"]["name"].as_str()?.to_string(),
                );
                Some(WatchChange {
                    object,
                    kind,
                    state,
                    observed: std::time::SystemTime::now(),
                })
            })
            .collect()
    }

    fn of_kind<'a>(
        spans: &'a [crate::span_model::Span],
        k: &str,
    ) -> Vec<&'a crate::span_model::Span> {
        spans
            .iter()
            .filter(|s| attr(s, attr::SPAN_KIND).as_deref() == Some(k))
            .collect()
    }

    #[tokio::test]
    async fn without_audit_events_each_version_is_a_watch_span_once_due() {
        let cfg = ProcessorConfig {
            watch_audit_wait: std::time::Duration::from_secs(3600),
            ..Default::default()
        };
        let (p, mut rx, _) = processor(cfg);
        let changes = watched_deployment();
        let versions = changes.len();
        assert!(versions > 3, "a rollout has several versions");
        for c in changes {
            p.process_watch(c).await.unwrap();
        }
        // Not due yet: they wait for their audit events.
        p.flush_watch(false).await.unwrap();
        assert!(of_kind(&drain(&mut rx), SPAN_KIND_WATCH).is_empty());
        assert_eq!(p.pending_watch(), versions);
        p.flush_watch(true).await.unwrap();
        let spans = drain(&mut rx);
        let watch = of_kind(&spans, SPAN_KIND_WATCH);
        assert_eq!(watch.len(), versions);
        for s in watch {
            let shows = if attr(s, attr::WATCH_TYPE).as_deref() == Some("modified") {
                EVENT_DIFF
            } else {
                EVENT_SNAPSHOT
            };
            assert!(s.events.iter().any(|e| e.name == shows), "{s:#?}");
        }
    }

    #[tokio::test]
    async fn a_write_seen_by_both_is_shown_once_by_its_audit_span() {
        let (p, mut rx, _) = processor(ProcessorConfig::default());
        for c in watched_deployment() {
            p.process_watch(c).await.unwrap();
        }
        for raw in audit_values("deployment") {
            if raw["objectRef"]["resource"] == "deployments"
                && let Some(item) = accepted(&raw)
            {
                p.process(&item).await.unwrap();
            }
        }
        p.flush_watch(true).await.unwrap();
        let spans = drain(&mut rx);
        let audit = of_kind(&spans, SPAN_KIND_AUDIT);
        assert!(!audit.is_empty());
        // Every version the watch saw was written by an audited request.
        assert!(of_kind(&spans, SPAN_KIND_WATCH).is_empty(), "{spans:#?}");
    }
}
