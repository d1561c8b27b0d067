//! Unit tests of `emit`.

use super::super::ProcessorConfig;
use super::super::test_support::{
    accepted, attr, audit_values, drain, processor, repository_rules,
};
use super::*;
use crate::flow::Accepted;
use crate::json::JsonValueTrait as _;
use crate::json::Value;
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
        .filter(|s| kind(s) == SPAN_KIND_OBJECT && attr(s, attr::NAME).as_deref() == Some("hello"))
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
    let relations = crate::aggregate::relations::all_relations(&ow.object, &state, &kinds, &rules);
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
            .any(|s| kind(s) == SPAN_KIND_OBJECT && attr(s, attr::NAME).as_deref() == Some(owner))
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

/// A release may mark a relation's first side and not yet its second
/// (noted a moment later, its batch never left): after a crash the journal
/// names one side only, and the replay sends the other.
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
    journal.keep_pending_for_test(|i| i % 2 == 0);
    let mark = journal.mark();
    journal.confirm(mark);
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

    // A process sends the links, and the spool's release confirms them.
    let (mut first, mut rx, _) = emitter();
    let journal = open();
    first.journal_links_in(journal.clone());
    first
        .record_relation_list(&ow, &relations, at, false)
        .await
        .unwrap();
    let sent = links_of(&drain(&mut rx));
    assert!(sent.len() >= 2, "the owner on both sides");
    let mark = journal.mark();
    journal.confirm(mark);
    drop((first, journal));

    // The next process replays a later write reaching the same links.
    let (mut second, mut rx, _) = emitter();
    second.journal_links_in(open());
    second
        .record_relation_list(&ow, &relations, later, true)
        .await
        .unwrap();
    assert_eq!(links_of(&drain(&mut rx)), [], "exported before the restart");

    // Without the journal: each link once, however many replayed writes
    // reach it.
    let (third, mut rx, _) = emitter();
    for t in [at, later] {
        third
            .record_relation_list(&ow, &relations, t, true)
            .await
            .unwrap();
    }
    assert_eq!(links_of(&drain(&mut rx)), sent);
}

/// Killed after a batch of link spans left and before a release confirmed
/// it: the replay reaches the links through a later write and sends the
/// very spans sent before (id, start, attributes), which the store keeps
/// once. Links whose batch never left are sent as the replay finds them.
#[tokio::test]
async fn links_sent_before_a_kill_are_sent_again_as_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let open = || journal_in(dir.path());
    let (ow, relations, at) = replicaset_relations();
    let later = at + std::time::Duration::from_secs(1);
    let link_spans = |spans: Vec<Span>| -> Vec<Span> {
        let mut links: Vec<Span> = spans
            .into_iter()
            .filter(|s| kind(s) == SPAN_KIND_LINK)
            .collect();
        links.sort_by(|a, b| a.span_id.cmp(&b.span_id));
        links
    };

    let (mut first, mut rx, _) = emitter();
    let journal = open();
    first.journal_links_in(journal.clone());
    first
        .record_relation_list(&ow, &relations, at, false)
        .await
        .unwrap();
    let sent = link_spans(drain(&mut rx));
    assert!(sent.len() >= 2, "the owner on both sides");
    journal.write_ahead(); // their batch leaves; kill -9, no release
    drop((first, journal));

    let (mut second, mut rx, _) = emitter();
    second.journal_links_in(open());
    second
        .record_relation_list(&ow, &relations, later, true)
        .await
        .unwrap();
    assert_eq!(
        link_spans(drain(&mut rx)),
        sent,
        "the same spans, starting as before"
    );

    // Their batch never left: the journal holds nothing, so the replay's
    // write gives them its own time.
    let other = tempfile::tempdir().unwrap();
    let (mut first, mut rx, _) = emitter();
    first.journal_links_in(journal_in(other.path()));
    first
        .record_relation_list(&ow, &relations, at, false)
        .await
        .unwrap();
    drop((first, drain(&mut rx)));
    let (mut second, mut rx, _) = emitter();
    second.journal_links_in(journal_in(other.path()));
    second
        .record_relation_list(&ow, &relations, later, true)
        .await
        .unwrap();
    let again = link_spans(drain(&mut rx));
    assert_eq!(again.len(), sent.len());
    assert!(
        again
            .iter()
            .all(|a| sent.iter().all(|s| a.span_id != s.span_id)
                && a.start_time_unix_nano > sent[0].start_time_unix_nano),
        "sent at the replayed write's time: other spans"
    );
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
