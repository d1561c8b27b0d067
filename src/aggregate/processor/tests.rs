use super::test_support::{
    attr, audit_values, drain, processor, processor_redacting, refused_pod_create,
};
use super::*;
use crate::json::JsonContainerTrait as _;
use crate::json::JsonValueTrait as _;
use crate::span_model::{EVENT_SNAPSHOT, SPAN_KIND_AUDIT, SPAN_KIND_OBJECT};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

#[tokio::test]
async fn a_create_refused_before_naming_is_shown_on_its_owner() {
    let (item, attempt) = refused_pod_create();
    let (p, mut rx, _) = processor(ProcessorConfig::default());
    p.process(&item).await.unwrap();
    let spans = drain(&mut rx);
    let owner = attempt.owner.as_ref().expect("a ReplicaSet's Pod");
    let object = spans
        .iter()
        .find(|s| attr(s, attr::SPAN_KIND).as_deref() == Some(SPAN_KIND_OBJECT))
        .unwrap();
    assert_eq!(
        attr(object, attr::NAME).as_deref(),
        Some(owner.name.as_str())
    );
    assert_eq!(attr(object, attr::RESOURCE).as_deref(), Some("replicasets"));
    let audit = spans
        .iter()
        .find(|s| attr(s, attr::SPAN_KIND).as_deref() == Some(SPAN_KIND_AUDIT))
        .unwrap();
    assert_eq!(audit.parent_span_id, object.span_id);
    assert!(
        audit.name.ends_with(&format!(
            "create pods (generateName {})",
            attempt.generate_name
        )),
        "{}",
        audit.name
    );
    assert_eq!(
        audit
            .status
            .as_ref()
            .map(|st| st.code())
            .unwrap_or_default(),
        StatusCode::Error
    );
    assert_eq!(
        attr(audit, attr::AUDIT_ATTEMPT_GENERATE_NAME).as_deref(),
        Some(attempt.generate_name.as_str())
    );
    assert!(audit.events.iter().any(|e| e.name == EVENT_SNAPSHOT));
}

/// A write whose entry the index compacted away between the dispatcher
/// noting it and its shard processing it (a shard lagging more than the
/// index's idle time): the shard completes the dispatcher's entry, the one
/// an effect elsewhere may already wait on, instead of recording a new one.
#[tokio::test]
async fn a_write_completes_the_entry_noted_on_arrival_even_after_it_was_compacted() {
    let (p, _rx, metrics) = processor(ProcessorConfig::default());
    let mut writes: Vec<Accepted> = audit_values("deployment")
        .iter()
        .filter_map(super::test_support::accepted)
        .filter(|a| {
            a.object.resource == "replicasets"
                && a.event.subresource() == "status"
                && a.event.code() < 300
        })
        .collect();
    assert!(
        writes.len() >= 2,
        "the fixture updates its ReplicaSet's status"
    );
    writes.truncate(2);
    for w in &mut writes {
        w.arrival = p.note_arrival(w);
    }
    let first = p
        .cause
        .index()
        .take_noted(writes[0].arrival)
        .expect("noted");
    p.cause.index().hand_to_shard(&first);
    // Both noted writes are handed to their shards.
    assert_eq!(metrics.cascade_writes_in_flight.get(), 2);
    // Idle: only the newest status write of the object stays in the index.
    assert!(p.cause.index().compact_all_now() >= 1);
    assert!(first.resolved_now().is_none());
    p.process(&writes[0]).await.unwrap();
    assert!(
        first.resolved_now().is_some(),
        "the entry noted on arrival knows its cascade"
    );
    // Its processing ended: no longer in flight; the second one still is.
    assert_eq!(metrics.cascade_writes_in_flight.get(), 1);
}

/// Offline runs parse and redact response objects on their decode thread
/// (`ParsedResponse::ahead_of`); what the processor makes of them must be
/// what it makes when it parses and redacts them itself: Secrets (config),
/// a `kubectl scale` (deployment), status writes and refused ones.
#[tokio::test]
async fn responses_parsed_ahead_give_the_spans_of_responses_parsed_in_place() {
    use crate::aggregate::redact::MARKER_PREFIX;
    for scenario in ["config", "deployment", "statefulset", "quota"] {
        let redactor = Redactor::new(None);
        let (in_place, mut in_place_rx, _) =
            processor_redacting(ProcessorConfig::default(), redactor.clone());
        let (ahead, mut ahead_rx, _) =
            processor_redacting(ProcessorConfig::default(), redactor.clone());
        assert!(ahead.sees_whole_objects());
        let mut parsed_ahead = 0;
        let mut secrets_redacted = 0;
        for v in audit_values(scenario) {
            let Some(item) = super::test_support::accepted(&v) else {
                continue;
            };
            in_place.process(&item).await.unwrap();
            let response = ParsedResponse::ahead_of(&item, Some(&redactor));
            if let Some(ParsedResponse {
                object: Some(object),
                redacted,
                changed,
                ..
            }) = &response
            {
                assert!(redacted);
                parsed_ahead += 1;
                if item.object.resource == "secrets" {
                    assert!(changed, "a Secret's values replaced: no longer its text");
                    let data = object["data"].as_object().expect("a Secret's data");
                    assert!(!data.is_empty());
                    for (_, value) in data.iter() {
                        assert!(
                            value.as_str().unwrap().starts_with(MARKER_PREFIX),
                            "{value}"
                        );
                    }
                    secrets_redacted += 1;
                }
            }
            ahead.process_parsed(&item, response).await.unwrap();
        }
        assert!(parsed_ahead > 0, "{scenario}");
        if scenario == "config" {
            assert_eq!(secrets_redacted, 2, "the Secret's create and patch");
        }
        let (in_place, ahead) = (drain(&mut in_place_rx), drain(&mut ahead_rx));
        assert!(!in_place.is_empty());
        assert_eq!(in_place, ahead, "{scenario}");
    }
}

/// A sink that wants objects gets each audited write's new state as the
/// processor keeps it (the same `Arc`), not a copy of the whole object per
/// change (`kascade explain`, the change log).
#[tokio::test]
async fn change_records_share_the_kept_state_instead_of_copying_it() {
    use crate::flow::{ChangeRecord, ChangeSink};
    use std::sync::Mutex;
    #[derive(Default)]
    struct Records(Mutex<Vec<ChangeRecord>>);
    impl ChangeSink for Records {
        fn wants_objects(&self) -> bool {
            true
        }
        fn record(&self, change: &ChangeRecord) {
            self.0.lock().unwrap().push(change.clone());
        }
    }
    let sink = Arc::new(Records::default());
    let (p, _rx, _) = processor(ProcessorConfig::default());
    let p = p.with_change_sink(sink.clone());
    let mut shared = 0;
    for v in audit_values("deployment") {
        let Some(item) = super::test_support::accepted(&v) else {
            continue;
        };
        let before = sink.0.lock().unwrap().len();
        p.process(&item).await.unwrap();
        let records = sink.0.lock().unwrap();
        let Some(new) = records.get(before).and_then(|r| r.new.as_ref()) else {
            continue;
        };
        if let Some(kept) = p.applier.last_state(&item.object.key()) {
            assert!(
                Arc::ptr_eq(new, &kept),
                "{}: the record's state is a copy",
                item.object
            );
            shared += 1;
        }
    }
    assert!(shared > 20, "{shared} records checked");
}

/// Keeps every change record, for tests that read the inferred causes.
#[derive(Default)]
struct CauseRecords(std::sync::Mutex<Vec<crate::flow::ChangeRecord>>);

impl crate::flow::ChangeSink for CauseRecords {
    fn record(&self, change: &crate::flow::ChangeRecord) {
        self.0.lock().unwrap().push(change.clone());
    }
}

/// The volumes scenario noted in arrival order as the dispatcher notes it,
/// its first claim create taken apart.
struct ClaimApart {
    p: Arc<Processor>,
    records: Arc<CauseRecords>,
    metrics: Arc<crate::metrics::Metrics>,
    /// What arrived before the claim.
    earlier: Vec<Accepted>,
    claim: Accepted,
    /// Kept open: the processor stops when its spans have nowhere to go.
    _spans: tokio::sync::mpsc::Receiver<crate::span_model::EncodedSpan>,
}

fn volumes_with_claim_apart() -> ClaimApart {
    let records = Arc::new(CauseRecords::default());
    let (p, spans, metrics) = processor(ProcessorConfig::default());
    let p = Arc::new(p.with_change_sink(records.clone()));
    let mut items: Vec<Accepted> = audit_values("volumes")
        .iter()
        .filter_map(super::test_support::accepted)
        .collect();
    for item in &mut items {
        item.arrival = p.note_arrival(item);
    }
    let claim_at = items
        .iter()
        .position(|i| i.object.resource == "persistentvolumeclaims" && i.event.verb == "create")
        .expect("the volumes scenario's StatefulSet creates claims");
    let claim = items.remove(claim_at);
    items.truncate(claim_at);
    ClaimApart {
        p,
        records,
        metrics,
        earlier: items,
        claim,
        _spans: spans,
    }
}

/// A StatefulSet's first claim is created 16 ms after the StatefulSet and
/// is found related to it only through the StatefulSet's selector, which
/// the StatefulSet's shard indexes when it processes the create. With
/// several shards the claim's may get there first: it then waits for the
/// writes that arrived before it instead of rooting a cascade of its own.
#[tokio::test]
async fn a_claim_processed_before_its_statefulset_waits_for_it_and_finds_its_cause() {
    let ClaimApart {
        p,
        records,
        metrics,
        earlier,
        claim,
        _spans,
    } = volumes_with_claim_apart();
    let claim_object = claim.object.clone();
    let ahead = {
        let p = p.clone();
        tokio::spawn(async move { p.process(&claim).await })
    };
    // The claim's shard runs first, until it waits (or ends).
    while !ahead.is_finished() && metrics.cascade_waits_for_earlier.get() == 0 {
        tokio::task::yield_now().await;
    }
    for item in &earlier {
        p.process(item).await.unwrap();
    }
    ahead.await.unwrap().unwrap();
    let records = records.0.lock().unwrap();
    let claim = records
        .iter()
        .find(|r| r.object == claim_object && r.verb == "create")
        .expect("the claim's create recorded");
    assert_eq!(claim.role, crate::flow::CascadeRole::Effect);
    let cause = claim.cause.as_ref().expect("a cause");
    assert_eq!(cause.object.resource, "statefulsets", "{}", cause.name);
    assert!(cause.name.contains("create"), "{}", cause.name);
    assert_eq!(metrics.cascade_waits_for_earlier.get(), 1);
    assert_eq!(metrics.cascade_resolve_timeouts.get(), 0);
}

/// The wait is bounded: an earlier write whose shard never gets to it
/// holds a write that found no cause at most the resolve wait (the clock is
/// paused and jumps ahead while everything waits), which then goes on as
/// unexplained, counted.
#[tokio::test(start_paused = true)]
async fn a_write_waits_for_an_earlier_arrival_never_processed_at_most_the_bound() {
    let ClaimApart {
        p,
        records,
        metrics,
        claim,
        _spans,
        ..
    } = volumes_with_claim_apart();
    let before = tokio::time::Instant::now();
    p.process(&claim).await.unwrap();
    assert!(before.elapsed() >= crate::aggregate::causes::RESOLVE_WAIT);
    let records = records.0.lock().unwrap();
    assert_eq!(records[0].role, crate::flow::CascadeRole::Unexplained);
    assert_eq!(metrics.cascade_resolve_timeouts.get(), 1);
}

/// A write whose processing failed still leaves the writes in flight, and
/// stands for its own cascade: nothing waits for it any longer.
#[tokio::test]
async fn settling_a_write_never_inferred_places_it_in_its_own_cascade() {
    let ClaimApart {
        p, earlier, _spans, ..
    } = volumes_with_claim_apart();
    let create = earlier
        .iter()
        .find(|i| i.object.resource == "statefulsets")
        .expect("the StatefulSet's create");
    let entry = p.cause.index().take_noted(create.arrival).expect("noted");
    assert!(entry.resolved_now().is_none());
    p.cause.index().settle(create.arrival);
    assert_eq!(entry.resolved_now().map(|r| r.root), Some(entry.span));
    assert!(p.cause.index().take_noted(create.arrival).is_none());
}
