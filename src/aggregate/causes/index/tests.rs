use super::super::entry::{Op, Resolved, ResolvedWakers, test_entry};
use super::*;
use std::time::UNIX_EPOCH;

fn entry(i: u64, at_ms: u64) -> Arc<ChangeEntry> {
    entry_of(ChangeClass::Status, i, at_ms)
}

fn entry_of(class: ChangeClass, i: u64, at_ms: u64) -> Arc<ChangeEntry> {
    test_entry(i, class, at_ms * 1_000, at_ms * 1_000, 0)
}

#[test]
fn changes_of_the_last_seconds_are_kept_up_to_a_cap_and_the_last_few_always() {
    let mut c = ObjectChanges::default();
    // Ten changes a minute apart: only the last few stay.
    for i in 0..10 {
        assert!(c.push(entry(i, i * 60_000), 0, None));
    }
    assert_eq!(c.of_class(ChangeClass::Status).count(), MIN_PER_CLASS);
    // A burst within 10 s: all kept up to the cap, then the oldest goes.
    for i in 0..MAX_PER_CLASS as u64 {
        assert!(c.push(entry(100 + i, 600_000 + i), 0, None));
    }
    assert!(!c.push(entry(999, 600_000 + MAX_PER_CLASS as u64), 0, None));
    let ring: Vec<_> = c.of_class(ChangeClass::Status).collect();
    assert_eq!(ring.len(), MAX_PER_CLASS);
    assert!(ring.iter().any(|e| e.span.span_id == 999u64.to_be_bytes()));
    assert!(ring.iter().all(|e| e.span.span_id != 100u64.to_be_bytes()));
}

fn spans(c: &ObjectChanges) -> Vec<(ChangeClass, u64)> {
    let mut v: Vec<_> = c
        .changes
        .iter()
        .map(|e| (e.class, u64::from_be_bytes(e.span.span_id)))
        .collect();
    v.sort_by_key(|(class, i)| (class.index(), *i));
    v
}

fn holder(name: &str) -> ObjectRef {
    ObjectRef::new("c", "", "pods", "ns", name.to_string())
}

#[test]
fn an_idle_object_keeps_its_newest_change_of_each_class_and_its_holders() {
    let mut c = ObjectChanges::default();
    c.push(entry_of(ChangeClass::Create, 1, 1_000), 5, None);
    for i in 2..6 {
        c.push(entry_of(ChangeClass::Status, i, i * 1_000), 5, None);
    }
    c.push(entry_of(ChangeClass::Update, 6, 3_500), 5, None);
    assert!(c.add_holder(&holder("a"), Role::Child, "owner"));
    // Written at second 5: not idle since second 4.
    assert!(!c.compact(4));
    assert_eq!(c.changes.len(), 6);
    assert!(c.compact(5));
    assert_eq!(
        spans(&c),
        [
            (ChangeClass::Create, 1),
            (ChangeClass::Update, 6),
            (ChangeClass::Status, 5)
        ]
    );
    assert_eq!(c.holders.len(), 1);
    // Once is enough until it is written again.
    assert!(!c.compact(100));
    c.push(entry_of(ChangeClass::Status, 7, 9_000), 50, None);
    assert!(!c.compact(49));
    assert!(c.compact(50));
    assert_eq!(spans(&c).last(), Some(&(ChangeClass::Status, 7)));
}

#[test]
fn a_deleted_idle_object_keeps_only_its_delete() {
    let mut c = ObjectChanges::default();
    c.push(entry_of(ChangeClass::Create, 1, 1_000), 0, None);
    c.push(entry_of(ChangeClass::Status, 2, 2_000), 0, None);
    c.push(entry_of(ChangeClass::Delete, 3, 3_000), 0, None);
    c.push(entry_of(ChangeClass::Status, 4, 3_500), 0, None);
    c.push(entry_of(ChangeClass::Delete, 5, 4_000), 0, None);
    assert!(c.add_holder(&holder("a"), Role::Child, "owner"));
    assert!(c.compact(0));
    assert_eq!(spans(&c), [(ChangeClass::Delete, 5)]);
    assert!(c.holders.is_empty());
    // Deleted, then created again under the same name: not deleted.
    let mut c = ObjectChanges::default();
    c.push(entry_of(ChangeClass::Delete, 1, 1_000), 0, None);
    c.push(entry_of(ChangeClass::Create, 2, 2_000), 0, None);
    assert!(c.compact(0));
    assert_eq!(
        spans(&c),
        [(ChangeClass::Create, 2), (ChangeClass::Delete, 1)]
    );
}

#[test]
fn holders_are_registered_once_whether_scanned_or_hashed() {
    let mut c = ObjectChanges::default();
    for round in 0..2 {
        for i in 0..100 {
            assert!(c.add_holder(&holder(&format!("p{i}")), Role::Child, "owner"));
        }
        assert_eq!(c.holders.len(), 100, "round {round}");
    }
    assert!(c.holder_keys.is_some());
    assert!(c.add_holder(&holder("p1"), Role::Parent, "owner"));
    assert!(c.add_holder(&holder("p1"), Role::Child, "other"));
    assert_eq!(c.holders.len(), 102);
    assert_eq!(c.holders("owner", Role::Child).len(), 100);
}

#[test]
fn a_sweep_compacts_idle_objects_of_its_shard() {
    let metrics = Arc::new(Metrics::default());
    let objects = Objects::new(1 << 16, Duration::from_secs(900), &metrics);
    let hashes: Vec<u64> = (0..4u64).map(|i| i << 58).collect();
    for h in &hashes {
        let c = objects.get_or_insert(*h);
        let mut c = c.lock().unwrap();
        c.push(entry_of(ChangeClass::Status, 1, 1_000), 3, None);
        c.push(entry_of(ChangeClass::Status, 2, 2_000), 3, None);
    }
    // Shard 1 holds only the second object.
    assert_eq!(objects.compact_shard(1, 2), 0, "written since");
    assert_eq!(objects.compact_shard(1, 3), 1);
    assert_eq!(
        objects
            .get(hashes[1])
            .unwrap()
            .lock()
            .unwrap()
            .changes
            .len(),
        1
    );
    assert_eq!(
        objects
            .get(hashes[2])
            .unwrap()
            .lock()
            .unwrap()
            .changes
            .len(),
        2
    );
}

#[test]
fn sweeps_in_the_first_seconds_compact_nothing_and_later_ones_what_is_idle() {
    let metrics = Arc::new(Metrics::default());
    let objects = Objects::new(1 << 16, Duration::from_secs(900), &metrics);
    let hashes: Vec<u64> = (0..SHARDS as u64).map(|i| i << 58).collect();
    for h in &hashes {
        let c = objects.get_or_insert(*h);
        let mut c = c.lock().unwrap();
        // Written in the collector's first second.
        c.push(entry_of(ChangeClass::Status, 1, 1_000), 0, None);
        c.push(entry_of(ChangeClass::Status, 2, 2_000), 0, None);
    }
    let kept = |objects: &Objects| {
        hashes
            .iter()
            .map(|h| objects.get(*h).unwrap().lock().unwrap().changes.len())
            .sum::<usize>()
    };
    let every = SWEEP_EVERY.as_millis() as u64;
    // Every shard swept more than once before 10 s: not idle yet.
    let mut at = every;
    while at < KEEP_FOR.as_millis() as u64 {
        objects.maintain_at(at);
        at += every;
    }
    assert_eq!(kept(&objects), 2 * SHARDS);
    // From 11 s on, one shard per sweep: all compacted after a round.
    let mut at = 11_000;
    for _ in 0..SHARDS {
        objects.maintain_at(at);
        at += every;
    }
    assert_eq!(kept(&objects), SHARDS);
}

#[tokio::test]
async fn a_change_not_yet_processed_is_waited_for_and_then_known() {
    let e = entry(1, 0);
    let ready = Arc::new(ResolvedWakers::default());
    let waiter = {
        let (e, ready) = (e.clone(), ready.clone());
        tokio::spawn(async move { e.resolved(Duration::from_secs(60), &ready).await })
    };
    tokio::task::yield_now().await;
    let root = SpanRef {
        trace_id: [2; 16],
        span_id: [3; 8],
    };
    e.resolve(
        Resolved {
            root,
            depth: 4,
            cpid: None,
            pod_end: None,
        },
        &ready,
    );
    let r = waiter
        .await
        .unwrap()
        .expect("resolved before the wait ended");
    assert_eq!((r.root, r.depth), (root, 4));
}

/// Waits on one slot of the wakers (arrivals 1 and 65) and on another
/// (2): each wait ends with its own change's cascade, not a neighbour's.
/// (Paused time: a wake that never comes ends the wait at once, empty.)
#[tokio::test(start_paused = true)]
async fn each_wait_ends_with_its_own_change_whatever_shares_its_slot() {
    let ready = Arc::new(ResolvedWakers::default());
    let (first, same_slot, other_slot) = (entry(1, 0), entry(65, 0), entry(2, 0));
    let wait = |e: &Arc<ChangeEntry>| {
        let (e, ready) = (e.clone(), ready.clone());
        tokio::spawn(async move { e.resolved(Duration::from_secs(600), &ready).await })
    };
    let (w_first, w_same, w_other) = (wait(&first), wait(&same_slot), wait(&other_slot));
    tokio::task::yield_now().await;
    let resolved = |depth| Resolved {
        root: SpanRef {
            trace_id: [depth as u8; 16],
            span_id: [depth as u8; 8],
        },
        depth,
        cpid: None,
        pod_end: None,
    };
    same_slot.resolve(resolved(65), &ready);
    other_slot.resolve(resolved(2), &ready);
    assert_eq!(w_same.await.unwrap().map(|r| r.depth), Some(65));
    assert_eq!(w_other.await.unwrap().map(|r| r.depth), Some(2));
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!w_first.is_finished(), "woken by a neighbour, it waits on");
    first.resolve(resolved(1), &ready);
    assert_eq!(w_first.await.unwrap().map(|r| r.depth), Some(1));
}

/// A propagation of the built-in rules triggered by `class`.
fn builtin_propagation(class: ChangeClass) -> Propagation {
    let rules = crate::aggregate::rules::RuleSet::load_dir(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/rules"
    )))
    .unwrap();
    rules
        .propagations()
        .iter()
        .find(|p| p.triggered_by(class))
        .unwrap_or_else(|| panic!("no built-in propagation reacts to {class:?}"))
        .clone()
}

#[test]
fn at_the_same_instant_only_an_earlier_arrival_is_a_cause() {
    let p = &builtin_propagation(ChangeClass::Status);
    let effect = |arrival: u64, at_ms: u64| EffectTimes {
        span: SpanRef {
            trace_id: [9; 16],
            span_id: [9; 8],
        },
        arrival,
        noted_through: 0,
        received: Nanos::of(UNIX_EPOCH + Duration::from_millis(at_ms)),
        completed: Nanos::of(UNIX_EPOCH + Duration::from_millis(at_ms)),
        revision: Revision::default(),
    };
    let found = |c: &ObjectChanges, e: &EffectTimes| {
        let found = c.latest_before(p, e, false);
        (found.seen.map(|f| f.arrival), found.later)
    };
    let mut c = ObjectChanges::default();
    // Arrivals 5 and 7, both stamped at 1 s.
    c.push(entry(5, 1_000), 0, None);
    c.push(entry(7, 1_000), 0, None);
    assert_eq!(found(&c, &effect(6, 1_000)), (Some(5), false));
    assert_eq!(found(&c, &effect(4, 1_000)), (None, false));
    assert_eq!(found(&c, &effect(8, 1_000)), (Some(7), false));
    // Stamped strictly earlier, a later arrival is still a cause (input out
    // of order); stamped later, none is.
    assert_eq!(found(&c, &effect(1, 2_000)), (Some(7), false));
    assert_eq!(found(&c, &effect(9, 500)), (None, true));
}

#[test]
fn changes_noted_after_the_effect_was_handed_to_its_shard_are_not_candidates() {
    let p = &builtin_propagation(ChangeClass::Status);
    let effect = |noted_through: u64| EffectTimes {
        span: SpanRef {
            trace_id: [9; 16],
            span_id: [9; 8],
        },
        arrival: 6,
        noted_through,
        received: Nanos::of(UNIX_EPOCH + Duration::from_millis(2_000)),
        completed: Nanos::of(UNIX_EPOCH + Duration::from_millis(2_000)),
        revision: Revision::default(),
    };
    let mut c = ObjectChanges::default();
    c.push(entry(5, 1_000), 0, None);
    // Arrived after the effect, stamped before it (out-of-order input).
    c.push(entry(8, 1_500), 0, None);
    let seen = |noted_through| c.latest_before(p, &effect(noted_through), false).seen;
    assert_eq!(seen(8).map(|e| e.arrival), Some(8));
    assert_eq!(seen(7).map(|e| e.arrival), Some(5));
    // Processed without a dispatcher ahead of it: all it finds counts.
    assert_eq!(seen(0).map(|e| e.arrival), Some(8));
}

#[test]
fn changes_of_the_seconds_before_the_oldest_write_in_flight_stay_however_far_ahead_others_are_noted()
 {
    let mut c = ObjectChanges::default();
    // A write in flight received at 110 s; the dispatcher notes a change
    // every second for a minute past it.
    let processing = Some(Nanos::of(UNIX_EPOCH + Duration::from_secs(110)));
    for i in 90..170 {
        assert!(c.push(entry(i, i * 1_000), 0, processing));
    }
    let kept = |c: &ObjectChanges| {
        let mut kept: Vec<u64> = c.of_class(ChangeClass::Status).map(|e| e.arrival).collect();
        kept.sort();
        kept
    };
    // All of the 10 s before it, and all after.
    assert_eq!(kept(&c), (100..170).collect::<Vec<_>>());
    // After a quiet spell: the last few received before it stay too (the
    // cause of the write in flight), however many are noted ahead.
    let mut c = ObjectChanges::default();
    for i in (80..96).chain(112..170) {
        assert!(c.push(entry(i, i * 1_000), 0, processing));
    }
    let few = MIN_PER_CLASS as u64 - 1;
    assert_eq!(kept(&c), (96 - few..96).chain(112..170).collect::<Vec<_>>());
    // Nothing in flight: recent is measured from the newest change.
    let mut c = ObjectChanges::default();
    for i in 90..170 {
        assert!(c.push(entry(i, i * 1_000), 0, None));
    }
    assert!(!c.of_class(ChangeClass::Status).any(|e| e.arrival == 110));
}

#[test]
fn a_status_write_that_may_finish_a_pod_counts_when_its_shard_said_so_and_only_if_it_came_first() {
    let rules = crate::aggregate::rules::RuleSet::load_dir(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/rules"
    )))
    .unwrap();
    let p = rules
        .propagations()
        .iter()
        .find(|q| q.finished_pods_only())
        .expect("a built-in rule counts finished Pods only");
    let effect = EffectTimes {
        span: SpanRef {
            trace_id: [9; 16],
            span_id: [9; 8],
        },
        arrival: 6,
        noted_through: 0,
        received: Nanos::of(UNIX_EPOCH + Duration::from_millis(2_000)),
        completed: Nanos::of(UNIX_EPOCH + Duration::from_millis(2_000)),
        revision: Revision::default(),
    };
    let finished = Resolved {
        root: SpanRef {
            trace_id: [1; 16],
            span_id: [1; 8],
        },
        depth: 1,
        cpid: None,
        pod_end: Some(super::super::entry::PodEnd::Succeeded),
    };
    let ready = ResolvedWakers::default();
    let mut c = ObjectChanges::default();
    let earlier = entry(5, 1_000);
    let later = entry(8, 1_500);
    c.push(earlier.clone(), 0, None);
    c.push(later.clone(), 0, None);
    // Neither processed yet: the earlier one is to be waited for.
    let found = c.latest_before(p, &effect, false);
    assert!(found.seen.is_none());
    assert_eq!(found.undecided.map(|e| e.arrival), Some(5));
    // The later one finished a Pod first: it still does not count.
    later.resolve(finished, &ready);
    let found = c.latest_before(p, &effect, false);
    assert!(found.seen.is_none());
    assert_eq!(found.undecided.map(|e| e.arrival), Some(5));
    // The earlier one finished a Pod: the cause.
    earlier.resolve(finished, &ready);
    let found = c.latest_before(p, &effect, false);
    assert_eq!(found.seen.map(|e| e.arrival), Some(5));
    assert!(found.undecided.is_none());
}

#[test]
fn a_change_received_first_but_completed_after_the_effect_is_offered_apart() {
    let p = &builtin_propagation(ChangeClass::Create);
    let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
    let create = |i: u64, received_ms: u64, completed_ms: u64| {
        test_entry(
            i,
            ChangeClass::Create,
            received_ms * 1_000,
            completed_ms * 1_000,
            0,
        )
    };
    // As a loaded apiserver logged it: a ReplicaSet's create received at
    // 259 ms, its response done at 338 ms and logged after the Pod create
    // its controller made meanwhile (received 274 ms, done 288 ms).
    let effect = EffectTimes {
        span: SpanRef {
            trace_id: [9; 16],
            span_id: [9; 8],
        },
        arrival: 951,
        noted_through: 0,
        received: Nanos::of(at(274)),
        completed: Nanos::of(at(288)),
        revision: Revision::default(),
    };
    let mut c = ObjectChanges::default();
    c.push(create(955, 259, 338), 0, None);
    let found = c.latest_before(p, &effect, false);
    assert!(found.seen.is_none());
    assert_eq!(found.late.map(|e| e.arrival), Some(955));
    assert!(!found.later);
    // Received after the effect: not a cause at all.
    let mut c = ObjectChanges::default();
    c.push(create(960, 280, 338), 0, None);
    let found = c.latest_before(p, &effect, false);
    assert!(found.seen.is_none() && found.late.is_none() && found.later);
    // A change completed before the effect is offered as seen, the late
    // one beside it (the index prefers the seen one).
    let mut c = ObjectChanges::default();
    c.push(create(955, 259, 338), 0, None);
    c.push(create(900, 100, 120), 0, None);
    let found = c.latest_before(p, &effect, false);
    assert_eq!(found.seen.map(|e| e.arrival), Some(900));
    assert_eq!(found.late.map(|e| e.arrival), Some(955));
}

#[test]
fn writes_in_flight_together_are_ordered_by_their_revisions() {
    // From e2e/fixtures/overlapping-writes: the deployment controller's
    // ReplicaSet update (stored as revision 447, its response done at
    // 250.068 ms) and the ReplicaSet controller's graceful delete of a Pod
    // it caused (received at 242.484 ms, stored as 448, done at 245.069).
    let update = test_entry(1, ChangeClass::Update, 238_251, 250_068, 447);
    let delete = test_entry(2, ChangeClass::Delete, 242_484, 245_069, 448);
    assert!(delete.stored_after(&update, true) && !update.stored_after(&delete, true));
    // Another cluster's revisions are another etcd's: the times decide.
    assert!(update.stored_after(&delete, false) && !delete.stored_after(&update, false));
    // Without revisions, the completions decide.
    let update_unknown = test_entry(1, ChangeClass::Update, 238_251, 250_068, 0);
    assert!(
        update_unknown.stored_after(&delete, true) && !delete.stored_after(&update_unknown, true)
    );
    // Apart in time, the times decide whatever the revisions say (another
    // storage's numbers, e.g. an aggregated API).
    let earlier = test_entry(3, ChangeClass::Update, 100_000, 101_000, 900);
    assert!(delete.stored_after(&earlier, true) && !earlier.stored_after(&delete, true));
    // Revisions compare modulo 2³² across the wrap of their low 32 bits.
    let before_wrap = Revision::of(Some(u64::from(u32::MAX) - 2));
    let after_wrap = Revision::of(Some(u64::from(u32::MAX) + 3));
    assert_eq!(after_wrap.after(before_wrap), Some(true));
    assert_eq!(before_wrap.after(after_wrap), Some(false));
    assert_eq!(after_wrap.after(Revision::default()), None);
    assert_eq!(after_wrap.after(after_wrap), None);
}

#[test]
fn a_change_whose_response_finished_after_the_effect_is_seen_when_its_revision_is_earlier() {
    let p = &builtin_propagation(ChangeClass::Update);
    // The graceful delete above as the effect of the ReplicaSet's updates:
    // one 1.1 s before, and the one in flight with it (stored first).
    let effect = |rv: u64| EffectTimes {
        span: SpanRef {
            trace_id: [9; 16],
            span_id: [9; 8],
        },
        arrival: 20,
        noted_through: 0,
        received: Nanos::of(UNIX_EPOCH + Duration::from_micros(242_484)),
        completed: Nanos::of(UNIX_EPOCH + Duration::from_micros(245_069)),
        revision: Revision::of((rv != 0).then_some(rv)),
    };
    let mut c = ObjectChanges::default();
    c.push(
        test_entry(10, ChangeClass::Update, 100_000, 121_000, 435),
        0,
        None,
    );
    c.push(
        test_entry(11, ChangeClass::Update, 238_251, 250_068, 447),
        0,
        None,
    );
    let found = c.latest_before(p, &effect(448), false);
    assert_eq!(found.seen.map(|e| e.arrival), Some(11));
    assert!(found.late.is_none());
    // The effect's revision not known: the earlier update is seen, the one
    // in flight offered apart.
    let found = c.latest_before(p, &effect(0), false);
    assert_eq!(found.seen.map(|e| e.arrival), Some(10));
    assert_eq!(found.late.map(|e| e.arrival), Some(11));
    // A later revision than the effect's says nothing (a write that changed
    // nothing answers with the object's old one): as without revisions.
    let found = c.latest_before(p, &effect(446), false);
    assert_eq!(found.seen.map(|e| e.arrival), Some(10));
    assert_eq!(found.late.map(|e| e.arrival), Some(11));
    // Completed before the effect was received, a change is seen whatever
    // its revision says.
    let mut c = ObjectChanges::default();
    c.push(
        test_entry(12, ChangeClass::Update, 200_000, 240_000, 9_999),
        0,
        None,
    );
    let found = c.latest_before(p, &effect(448), false);
    assert_eq!(found.seen.map(|e| e.arrival), Some(12));
}

#[test]
fn an_entry_fills_one_128_byte_allocation_and_keeps_its_times_to_the_nanosecond() {
    // Arc counts (16 bytes) plus the entry.
    assert!(std::mem::size_of::<ChangeEntry>() + 16 <= 128);
    let t = UNIX_EPOCH + Duration::new(1_795_000_000, 123_456_789);
    assert_eq!(Nanos::of(t).time(), t);
    assert_eq!(
        Nanos::of(UNIX_EPOCH - Duration::from_secs(1)),
        Nanos::of(UNIX_EPOCH)
    );
    for (verb, sub, name) in [
        ("create", "binding", "create binding"),
        ("patch", "status", "patch status"),
        ("update", "", "update"),
        ("modified", "", "watch modified"),
        ("get", "", "write"),
    ] {
        assert_eq!(Op::of(verb, sub).as_str(), name);
    }
}
