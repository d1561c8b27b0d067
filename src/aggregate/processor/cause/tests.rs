//! Unit tests of the cause stage.

use super::super::applier::applier;
use super::super::test_support::{Records, accepted, audit_values, repository_rules};
use super::*;

/// The cause stage alone, with the repository's rules.
fn cause_inferrer() -> (CauseInferrer, Arc<Metrics>) {
    let cfg = super::super::ProcessorConfig::default();
    let metrics = Arc::new(Metrics::default());
    let stage = CauseInferrer::new(
        Arc::new(repository_rules()),
        Arc::new(KindRegistry::default()),
        cfg.windowing,
        cfg.cause_objects,
        metrics.clone(),
    );
    (stage, metrics)
}

/// The deployment scenario's first successful create of `resource`.
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

/// Infers the cause of an audited write on its own, as the audit path
/// does, with the relations the applier finds.
async fn infer(stage: &CauseInferrer, item: &Accepted) -> Inference {
    let a = applier();
    let w = a.apply(item, None, true);
    let own = stage.arrival_entry(item);
    let span = own.as_ref().map(|e| e.span).unwrap();
    let arrival = own.as_ref().map(|e| e.arrival).unwrap();
    let write = Write::audit(item, span, arrival, &w.uid, false);
    let inference = stage
        .infer_cause(
            a.selectors(),
            &write,
            own.as_ref(),
            &w.relations,
            w.old.as_ref(),
            w.outcome.state.as_ref().map(NewState::Shared),
            None,
        )
        .await;
    stage.settle(arrival);
    inference
}

#[tokio::test]
async fn a_user_create_is_a_root_and_the_replicaset_it_causes_an_effect() {
    let (mut stage, metrics) = cause_inferrer();
    let sink = Arc::new(Records::default());
    stage.add_sink(sink.clone());
    let deployment = created("deployments");
    let root = infer(&stage, &deployment).await;
    assert_eq!(root.role, CascadeRole::Root);
    let rs = created("replicasets");
    let effect = infer(&stage, &rs).await;
    assert_eq!(effect.role, CascadeRole::Effect);
    let cause = effect.cause.expect("its cause");
    assert!(cause.name.contains("deployments"), "{}", cause.name);
    assert_eq!(effect.root, root.root, "one cascade");
    let records = sink.0.lock().unwrap();
    assert_eq!(records.len(), 2, "each change handed to the sink");
    assert_eq!(records[0].user, deployment.event.user.username);
    assert_eq!(records[1].role, CascadeRole::Effect);
    let roles = |role| {
        metrics
            .cascade_writes
            .get_or_create(&crate::metrics::CascadeRoleLabel { role })
            .get()
    };
    assert_eq!(
        (roles(CascadeRole::Root), roles(CascadeRole::Effect)),
        (1, 1)
    );
}

#[test]
fn refused_writes_are_no_candidate_causes_but_take_a_place_in_order() {
    let (stage, _) = cause_inferrer();
    let refused = audit_values("deployment")
        .iter()
        .find(|e| e["responseStatus"]["code"].as_i64().unwrap_or(0) >= 400)
        .and_then(accepted)
        .expect("a refused write");
    let first = stage.note_arrival(&refused);
    let created = created("deployments");
    let second = stage.note_arrival(&created);
    assert!(second > first, "arrival order");
    assert!(stage.index().take_noted(first).is_none(), "no entry");
    assert!(stage.index().take_noted(second).is_some());
}
