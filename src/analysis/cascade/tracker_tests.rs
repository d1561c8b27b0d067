//! Unit tests of the cascade tracker: what it observes, when, and what it
//! drops past its bounds.

use std::sync::Arc;

use super::testing::*;
use super::*;
use crate::flow::ChangeSink;
use crate::metrics::CascadeMetrics;

fn histogram_count(m: &CascadeMetrics, kind: &str) -> u64 {
    let mut registry = prometheus_client::registry::Registry::default();
    m.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let key = format!("kascade_cascade_completion_seconds_count{{kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// A tracker keeping at most `max_open` cascades, observing complete ones
/// once quiet for `quiet`, and its metrics.
fn tracker(max_open: usize, quiet: std::time::Duration) -> (CascadeTracker, Arc<CascadeMetrics>) {
    let m = Arc::new(CascadeMetrics::default());
    let cfg = TrackerConfig {
        max_open,
        quiet,
        ..TrackerConfig::default()
    };
    (CascadeTracker::new(cfg, m.clone()), m)
}

#[test]
fn the_tracker_observes_a_complete_cascade_once_it_is_quiet() {
    let (t, m) = tracker(10, std::time::Duration::from_millis(1000));
    let mut v = rollout();
    v.sort_by_key(|c| c.completed);
    for c in v {
        t.record(&c);
    }
    assert_eq!(t.open(), 1, "complete, not yet quiet");
    assert_eq!(histogram_count(&m, "deployments"), 0);
    // Another cascade's change 2 s later moves the clock on.
    t.record(&change(
        9,
        obj("configmaps", "x"),
        "update",
        2000,
        2001,
        None,
    ));
    assert_eq!(histogram_count(&m, "deployments"), 1);
    assert_eq!(t.open(), 1);
    t.flush();
    assert_eq!(histogram_count(&m, "configmaps"), 1);
    assert_eq!(t.open(), 0);
}

#[test]
fn the_tracker_keeps_at_most_max_open_and_counts_what_it_drops() {
    let (t, m) = tracker(2, std::time::Duration::from_secs(60));
    for n in 1..=5u8 {
        let c = change(
            n,
            obj("deployments", &format!("d{n}")),
            "patch",
            n.into(),
            u64::from(n) + 1,
            Some(("InProgress", "")),
        );
        t.record(&c);
    }
    assert_eq!(t.open(), 2);
    assert_eq!(m.evicted.get(), 3);
    // A change of an evicted cascade is left out, not reopened.
    let rs = caused_by(
        change(
            20,
            obj("replicasets", "r"),
            "create",
            10,
            11,
            Some(("Current", "")),
        ),
        &change(1, obj("deployments", "d1"), "patch", 1, 2, None),
        "e",
    );
    t.record(&rs);
    assert_eq!(t.open(), 2);
}

#[test]
fn past_the_bound_a_complete_cascade_is_observed_early_before_an_incomplete_one_is_dropped() {
    let (t, m) = tracker(2, std::time::Duration::from_secs(60));
    // A Deployment patch whose rollout is still in progress, at `ms`.
    let rollout = |n: u8, ms: u64| {
        change(
            n,
            obj("deployments", &format!("d{n}")),
            "patch",
            ms,
            ms + 1,
            Some(("InProgress", "")),
        )
    };
    // Oldest: a rollout in progress; then a ConfigMap update, complete at
    // once but not yet quiet.
    t.record(&rollout(1, 1));
    t.record(&change(2, obj("configmaps", "c"), "update", 3, 4, None));
    assert_eq!(t.open(), 2);
    assert_eq!(histogram_count(&m, "configmaps"), 0, "not quiet yet");
    // A third cascade: the complete one makes room, the rollout stays.
    t.record(&rollout(3, 5));
    assert_eq!(t.open(), 2);
    assert_eq!(m.evicted.get(), 0, "nothing incomplete dropped");
    assert_eq!(histogram_count(&m, "configmaps"), 1, "observed early");
    // A fourth, with nothing complete left: the oldest incomplete goes.
    t.record(&rollout(4, 7));
    assert_eq!(t.open(), 2);
    assert_eq!(m.evicted.get(), 1);
}

#[test]
fn an_incomplete_cascade_quiet_for_the_stall_time_is_closed_as_stalled() {
    let m = Arc::new(CascadeMetrics::default());
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let t = {
        let told = told.clone();
        CascadeTracker::new(
            TrackerConfig {
                max_open: 10,
                quiet: std::time::Duration::from_secs(1),
                stall: std::time::Duration::from_secs(60),
            },
            m.clone(),
        )
        .with_completion_listener(Arc::new(move |kind, verb, took| {
            told.lock()
                .unwrap()
                .push((kind.to_string(), verb.to_string(), took))
        }))
    };
    let stuck = change(
        1,
        obj("deployments", "stuck"),
        "patch",
        0,
        1,
        Some(("InProgress", "")),
    );
    t.record(&stuck);
    // 59 s later by the changes' clock: not yet.
    t.record(&change(
        2,
        obj("configmaps", "a"),
        "update",
        59_000,
        59_001,
        None,
    ));
    assert_eq!(m.stalled.get_or_create(&m.kind("deployments")).get(), 0);
    // 61 s later: the stuck one is closed and counted, the bound untouched.
    t.record(&change(
        3,
        obj("configmaps", "b"),
        "update",
        61_000,
        61_001,
        None,
    ));
    assert_eq!(m.stalled.get_or_create(&m.kind("deployments")).get(), 1);
    assert_eq!(m.evicted.get(), 0);
    assert_eq!(histogram_count(&m, "deployments"), 0);
    let told_now = told.lock().unwrap().clone();
    assert!(
        told_now.contains(&("deployments".into(), "patch".into(), None)),
        "{told_now:?}"
    );
    // A later change of it is left out, not reopened.
    t.record(&caused_by(
        change(4, obj("replicasets", "r"), "update", 62_000, 62_001, None),
        &stuck,
        "e",
    ));
    assert_eq!(m.stalled.get_or_create(&m.kind("deployments")).get(), 1);
    // The end of the input: the complete ones observed, none stalled.
    t.flush();
    assert_eq!(t.open(), 0);
    assert_eq!(histogram_count(&m, "configmaps"), 2);
    assert_eq!(m.stalled.get_or_create(&m.kind("configmaps")).get(), 0);
}

#[test]
fn the_end_of_the_input_tells_the_listener_of_the_incomplete_cascades() {
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let m = Arc::new(CascadeMetrics::default());
    let t = {
        let told = told.clone();
        CascadeTracker::new(TrackerConfig::default(), m.clone()).with_completion_listener(Arc::new(
            move |kind, verb, took: Option<std::time::Duration>| {
                told.lock()
                    .unwrap()
                    .push((kind.to_string(), verb.to_string(), took.is_some()))
            },
        ))
    };
    t.record(&change(
        1,
        obj("deployments", "d"),
        "patch",
        0,
        1,
        Some(("InProgress", "")),
    ));
    t.record(&change(2, obj("configmaps", "c"), "update", 5, 6, None));
    assert!(told.lock().unwrap().is_empty(), "nothing closed yet");
    t.flush();
    let mut told = told.lock().unwrap().clone();
    told.sort();
    assert_eq!(
        told,
        [
            ("configmaps".into(), "update".into(), true),
            ("deployments".into(), "patch".into(), false)
        ]
    );
    // Not stalled: the input ended first.
    assert_eq!(m.stalled.get_or_create(&m.kind("deployments")).get(), 0);
}

#[test]
fn an_object_another_cascade_removes_has_settled_for_the_tracker_as_offline() {
    // A user deletes a Deployment held by a finalizer (cascade 1 waits for
    // it, Terminating); a second actor removes the finalizer and the
    // Deployment is gone (cascade 2). Offline, `build` settles cascade 1 at
    // the removal; the live tracker must judge it the same.
    let d = obj("deployments", "api");
    let delete = change(
        1,
        d.clone(),
        "delete",
        0,
        1,
        Some(("Terminating", "waiting for finalizers")),
    );
    let mut unblock = change(2, d.clone(), "patch", 100, 101, None);
    unblock.deleted = true;
    let offline = build([delete.clone(), unblock.clone()]);
    assert!(offline.iter().all(|c| c.completion.is_complete()));

    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let m = Arc::new(CascadeMetrics::default());
    let t = {
        let told = told.clone();
        CascadeTracker::new(TrackerConfig::default(), m.clone()).with_completion_listener(Arc::new(
            move |kind, verb, took: Option<std::time::Duration>| {
                told.lock()
                    .unwrap()
                    .push((kind.to_string(), verb.to_string(), took))
            },
        ))
    };
    t.record(&delete);
    t.record(&unblock);
    t.flush();
    let mut told = told.lock().unwrap().clone();
    told.sort();
    assert_eq!(
        told,
        [
            (
                "deployments".into(),
                "delete".into(),
                Some(std::time::Duration::from_millis(101))
            ),
            (
                "deployments".into(),
                "patch".into(),
                Some(std::time::Duration::from_millis(1))
            ),
        ]
    );
    // A removal before the wait began settles nothing: a later create
    // under the name is a new object, waited for anew.
    let t = CascadeTracker::new(TrackerConfig::default(), m);
    t.record(&unblock);
    let mut recreated = change(3, d, "create", 200, 201, Some(("InProgress", "")));
    recreated.root = span(3);
    t.record(&recreated);
    assert_eq!(t.open(), 2);
}

/// Cascades told of by the tracker's listener after `changes` and the end
/// of the input: (root verb, took).
fn told_of(changes: &[ChangeRecord]) -> Vec<(String, Option<std::time::Duration>)> {
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let t = {
        let told = told.clone();
        CascadeTracker::new(
            TrackerConfig::default(),
            Arc::new(CascadeMetrics::default()),
        )
        .with_completion_listener(Arc::new(move |_, verb, took| {
            told.lock().unwrap().push((verb.to_string(), took))
        }))
    };
    for c in changes {
        t.record(c);
    }
    t.flush();
    let mut told = told.lock().unwrap().clone();
    told.sort();
    told
}

#[test]
fn a_cascade_that_left_an_object_as_it_found_it_ends_when_other_work_settles_it() {
    // A kubelet registers its Node NotReady (cascade 1); another controller
    // annotates it, NotReady still (cascade 2); the kubelet reports it
    // Ready (cascade 1 again). Cascade 2 changed nothing of the Node's
    // readiness: it ends when the Node is Ready, offline and live.
    let n = obj("nodes", "n1");
    let not_ready = Some(("InProgress", "not ready yet: KubeletNotReady"));
    let create = change(1, n.clone(), "create", 0, 1, not_ready);
    let annotate = change(2, n.clone(), "patch", 10, 11, not_ready);
    let ready = caused_by(
        change(3, n.clone(), "patch", 200, 201, Some(("Current", "Ready"))),
        &create,
        "nodes status",
    );
    let all = [create.clone(), annotate.clone(), ready.clone()];
    let offline = build(all.clone());
    assert_eq!(offline.len(), 2);
    assert!(
        offline
            .iter()
            .all(|c| c.completion == Completion::Complete { at: at(201) }),
        "{:?}",
        offline.iter().map(|c| &c.completion).collect::<Vec<_>>()
    );
    let ms = std::time::Duration::from_millis;
    assert_eq!(
        told_of(&all),
        [
            ("create".into(), Some(ms(201))),
            ("patch".into(), Some(ms(191)))
        ]
    );

    // A cascade whose write made the object unsettled (a rollout from a
    // Ready state) waits for its own work: a later, other settling does not
    // end it — nor one that changed the readiness it found.
    let d = obj("deployments", "web");
    let ready_before = change(
        4,
        d.clone(),
        "create",
        0,
        1,
        Some(("Current", "1/1 available")),
    );
    let rollout = change(
        5,
        d.clone(),
        "patch",
        10,
        11,
        Some(("InProgress", "0/1 updated")),
    );
    let other = change(
        6,
        d.clone(),
        "patch",
        20,
        21,
        Some(("InProgress", "0/1 updated, paused")),
    );
    let settled = change(7, d, "patch", 300, 301, Some(("Current", "1/1 available")));
    let all = [ready_before, rollout, other, settled];
    let offline = build(all.clone());
    let waiting: Vec<_> = offline
        .iter()
        .filter(|c| matches!(c.completion, Completion::Waiting(_)))
        .map(|c| c.root().span)
        .collect();
    assert_eq!(waiting, [span(5), span(6)]);
    let told = told_of(&all);
    assert_eq!(
        told.iter().filter(|(_, took)| took.is_none()).count(),
        2,
        "{told:?}"
    );
}
