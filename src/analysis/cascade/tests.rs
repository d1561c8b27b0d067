use std::sync::Arc;

use super::testing::*;
use super::*;
use crate::flow::ChangeSink;
use crate::metrics::CascadeMetrics;
use crate::model::ObjectRef;

#[test]
fn a_rollout_is_one_tree_complete_when_the_last_object_settled() {
    let cascades = build(rollout());
    assert_eq!(cascades.len(), 1);
    let c = &cascades[0];
    assert_eq!(c.root().span, span(1));
    assert_eq!(c.missing_cause, None);
    let order: Vec<u8> = c
        .walk()
        .iter()
        .map(|(i, _)| c.changes[*i].span.span_id[0])
        .collect();
    assert_eq!(order, vec![1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(c.completion, Completion::Complete { at: at(125) });
    assert_eq!(c.duration(), Some(std::time::Duration::from_millis(125)));
    let path: Vec<u8> = c
        .critical_path
        .iter()
        .map(|i| c.changes[*i].span.span_id[0])
        .collect();
    assert_eq!(path, vec![1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn children_are_ordered_by_time_and_the_critical_path_follows_the_last_end() {
    let root = change(
        1,
        obj("deployments", "d"),
        "patch",
        0,
        1,
        Some(("Current", "")),
    );
    let late = caused_by(
        change(2, obj("configmaps", "a"), "update", 50, 300, None),
        &root,
        "e",
    );
    let early = caused_by(
        change(3, obj("configmaps", "b"), "update", 10, 20, None),
        &root,
        "e",
    );
    let under_early = caused_by(
        change(4, obj("configmaps", "c"), "update", 30, 200, None),
        &early,
        "e",
    );
    let c = &build(vec![late, under_early, early, root])[0];
    let kids: Vec<u8> = c.children[0]
        .iter()
        .map(|i| c.changes[*i].span.span_id[0])
        .collect();
    assert_eq!(kids, vec![3, 2]);
    let path: Vec<u8> = c
        .critical_path
        .iter()
        .map(|i| c.changes[*i].span.span_id[0])
        .collect();
    assert_eq!(path, vec![1, 2]);
    assert_eq!(c.completion, Completion::Complete { at: at(300) });
}

#[test]
fn an_object_that_stays_unready_is_waited_for_with_its_readiness() {
    let mut changes = rollout();
    // No kubelet: the Pod stays unschedulable; no status writes after it.
    changes.retain(|c| ![5u8, 6, 7].contains(&c.span.span_id[0]));
    let unsched = caused_by(
        change(
            8,
            obj("pods", "d-1-a"),
            "patch",
            40,
            41,
            Some(("Failed", "Unschedulable: 0/1 nodes")),
        ),
        changes.iter().find(|c| c.span == span(3)).unwrap(),
        "pods status",
    );
    changes.push(unsched);
    let c = &build(changes)[0];
    let Completion::Waiting(w) = &c.completion else {
        panic!("complete: {:?}", c.completion)
    };
    let text: Vec<String> = w.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        vec![
            "deployments default/d InProgress (0/1 updated)",
            "replicasets default/d-1 InProgress (0/1 ready)",
            "pods default/d-1-a Failed (Unschedulable: 0/1 nodes)",
        ]
    );
    assert_eq!(c.duration(), None);
    let out = render_text(&build(vec![c.changes[0].clone()]));
    assert!(
        out.contains("not complete: waiting for deployments default/d InProgress"),
        "{out}"
    );
}

#[test]
fn a_pod_in_a_terminal_phase_and_a_removed_object_have_settled() {
    let root = change(1, obj("jobs", "j"), "create", 0, 1, Some(("Current", "")));
    let failed = caused_by(
        change(
            2,
            obj("pods", "j-a"),
            "patch",
            10,
            11,
            Some(("Failed", "Failed: container c exited with code 1")),
        ),
        &root,
        "pods → Failed",
    );
    let later = caused_by(
        change(
            3,
            obj("pods", "j-a"),
            "patch",
            20,
            21,
            Some(("Failed", "Failed: container c exited with code 1")),
        ),
        &failed,
        "pods status",
    );
    let mut gone = caused_by(
        change(
            4,
            obj("pods", "k"),
            "delete",
            30,
            31,
            Some(("Terminating", "")),
        ),
        &root,
        "e",
    );
    let mut removed = caused_by(
        change(5, obj("pods", "k"), "delete", 40, 41, None),
        &gone,
        "e",
    );
    removed.deleted = true;
    gone.deleted = false;
    let c = &build(vec![root, failed, later, gone, removed])[0];
    // j-a settled at its first terminal write (11), k when removed (41).
    assert_eq!(c.completion, Completion::Complete { at: at(41) });

    // Unschedulable is Failed too, but not terminal: waited for.
    let root = change(1, obj("jobs", "j"), "create", 0, 1, Some(("Current", "")));
    let unsched = caused_by(
        change(
            2,
            obj("pods", "j-a"),
            "patch",
            10,
            11,
            Some(("Failed", "Unschedulable: no nodes")),
        ),
        &root,
        "pods status",
    );
    assert!(!build(vec![root, unsched])[0].completion.is_complete());
}

#[test]
fn a_change_whose_cause_is_missing_roots_a_partial_cascade() {
    let all = rollout();
    let without_root: Vec<ChangeRecord> = all.into_iter().filter(|c| c.span != span(1)).collect();
    let cascades = build(without_root);
    assert_eq!(cascades.len(), 1);
    let c = &cascades[0];
    assert_eq!(c.root().span, span(2));
    let cause = c.missing_cause.as_ref().expect("partial");
    assert_eq!(cause.span, span(1));
    assert_eq!(cause.name, "u patch deployments default/d");
    let out = render_text(&cascades);
    assert!(
        out.contains("partial: caused by u patch deployments default/d"),
        "{out}"
    );
}

#[test]
fn duplicates_are_taken_once_and_a_cause_loop_is_cut() {
    let mut v = rollout();
    v.push(v[0].clone());
    assert_eq!(build(v)[0].changes.len(), 7);
    // a ⇄ b (inconsistent input): no hang, every change shown once.
    let a = change(1, obj("configmaps", "a"), "update", 0, 1, None);
    let b = caused_by(
        change(2, obj("configmaps", "b"), "update", 2, 3, None),
        &a,
        "e",
    );
    let a = caused_by(a, &b, "e");
    let cascades = build(vec![a, b]);
    assert_eq!(cascades.iter().map(|c| c.changes.len()).sum::<usize>(), 2);
}

#[test]
fn text_shows_hops_edges_completion_and_the_critical_path() {
    let out = render_text(&build(rollout()));
    let want = [
        "cascade 1 of 1: u patch deployments default/d  at ",
        "completed after 125.000ms (at ",
        "+0.000s  u patch deployments default/d 200  → InProgress: 0/1 updated  ★",
        "└─ +0.010s  u create replicasets default/d-1 200  [deployments → replicasets create, hop 5.000ms]  → InProgress: 0/1 ready  ★",
        "   └─ +0.020s  u create pods default/d-1-a 200  [replicasets → pods create, hop 8.000ms]",
        "★ critical path",
    ];
    for w in want {
        assert!(out.contains(w), "missing {w:?} in\n{out}");
    }
}

#[test]
fn effects_recorded_before_their_late_cause_join_its_cascade() {
    // A user creates a ReplicaSet (root 1); its Pod's create (2, stored as
    // version 100) is answered late: the scheduler's binding (3) and the
    // kubelet's status (4, version 102) are recorded first, naming the
    // create as their root (its cascade was not known yet), and so is the
    // ReplicaSet's status (5) that follows from them, after the create.
    let rs = obj("replicasets", "web");
    let pod = obj("pods", "web-1");
    let root = change(1, rs.clone(), "create", 0, 1, Some(("Current", "")));
    let mut create = caused_by(
        change(
            2,
            pod.clone(),
            "create",
            5,
            30,
            Some(("InProgress", "Pending")),
        ),
        &root,
        "replicasets → pods create",
    );
    create.version = Some(100);
    let mut bind = change(
        3,
        pod.clone(),
        "create",
        10,
        12,
        Some(("InProgress", "Pending")),
    );
    bind.subresource = "binding".into();
    let early = |mut c: ChangeRecord| {
        c.role = CascadeRole::Effect;
        c.root = create.span;
        c.depth = 2;
        c.cause = create.cause.clone().map(|mut k| {
            k.span = create.span;
            k
        });
        c
    };
    let bind = early(bind);
    let mut running = early(change(
        4,
        pod,
        "patch",
        15,
        16,
        Some(("Current", "Running")),
    ));
    running.version = Some(102);
    let status = early(change(5, rs, "update", 20, 21, Some(("Current", ""))));

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
    t.record(&root);
    t.record(&bind);
    t.record(&running);
    t.record(&create);
    t.record(&status);
    assert_eq!(t.open(), 1, "one cascade, the root's");
    t.flush();
    // Complete when the Pod ran: the create's late answer (an older
    // version) does not put it back to Pending.
    assert_eq!(
        told.lock().unwrap().clone(),
        [(
            "replicasets".to_string(),
            "create".to_string(),
            Some(std::time::Duration::from_millis(16))
        )]
    );
    assert_eq!(m.early_effects_dropped.get(), 0);
}

/// The rollout with its binding logged before the Pod's create (an
/// apiserver whose clock is behind): the binding has no cause and roots a
/// cascade of its own, with what it caused (the kubelet's status, the
/// ReplicaSet's and Deployment's status after it).
fn rollout_with_an_early_binding() -> Vec<ChangeRecord> {
    let mut changes = rollout();
    let bind = changes.iter_mut().find(|c| c.span == span(4)).unwrap();
    bind.role = CascadeRole::Unexplained;
    bind.cause = None;
    bind.cause_logged_after = true;
    bind.root = bind.span;
    for c in &mut changes {
        if [5u8, 6, 7].contains(&c.span.span_id[0]) {
            c.root = span(4);
        }
    }
    changes
}

#[test]
fn a_cascade_settled_only_by_writes_logged_before_their_causes_is_not_known() {
    let cascades = build(rollout_with_an_early_binding());
    assert_eq!(cascades.len(), 2);
    let rollout = &cascades[0];
    assert_eq!(rollout.root().span, span(1));
    let Completion::NotKnown(w) = &rollout.completion else {
        panic!("{:?}", rollout.completion)
    };
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(!rollout.went_wrong());
    assert_eq!(rollout.duration(), None);
    // The binding's own cascade settled everything.
    assert!(cascades[1].completion.is_complete());
    let text = render_text(&cascades);
    assert!(
        text.starts_with("2 cascades, none went wrong (1 of them"),
        "{text}"
    );
    assert!(
        text.contains("completion not known: deployments default/d InProgress (0/1 updated)"),
        "{text}"
    );
    // Told of the binding's cascade though it is out of range.
    let only_rollout: Vec<ChangeRecord> = rollout_with_an_early_binding()
        .into_iter()
        .filter(|c| c.root == span(1))
        .collect();
    let objects: HashSet<ObjectRef> = rollout_with_an_early_binding()
        .into_iter()
        .filter(|c| c.root == span(4))
        .map(|c| c.object)
        .collect();
    let told = build_with_early_writes(only_rollout.clone(), &objects);
    assert!(matches!(told[0].completion, Completion::NotKnown(_)));
    // Not told: the rollout waits, and went wrong.
    let untold = build(only_rollout);
    assert!(matches!(untold[0].completion, Completion::Waiting(_)));
    assert!(untold[0].went_wrong());
}

#[test]
fn a_cascade_waiting_also_for_an_object_no_early_write_touched_went_wrong() {
    let mut changes = rollout_with_an_early_binding();
    // The Deployment's own status write is gone: nothing settled it.
    changes.retain(|c| c.span != span(7));
    let rollout = &build(changes)[0];
    // The Deployment was written only in the rollout's cascade.
    let Completion::Waiting(w) = &rollout.completion else {
        panic!("{:?}", rollout.completion)
    };
    assert!(
        w.iter().any(|w| w.object.resource == "deployments"),
        "{w:?}"
    );
    assert!(rollout.went_wrong());
}
