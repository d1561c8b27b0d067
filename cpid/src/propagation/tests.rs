use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use kube_core::ObjectMeta;

use super::*;
use crate::{CPID_ANNOTATION, Config, MergelogBatch};

fn ctx(cpid: Cpid, ancestors: &[Cpid]) -> ChangeContext {
    ChangeContext {
        cpid,
        ancestors: ancestors.to_vec(),
        from_traceparent: false,
    }
}

fn meta_with(c: &ChangeContext) -> ObjectMeta {
    let mut m = ObjectMeta::default();
    c.stamp(&mut m, 8);
    m
}

#[test]
fn one_change_is_inherited_without_a_mergelog() {
    let a = Cpid::new_random();
    let d = decide(&[ctx(a, &[]), ctx(a, &[])], 8, "c");
    assert_eq!(d.outcome, Outcome::Inherited);
    assert_eq!(d.cpid(), Some(a));
    assert!(d.mergelog.is_none());
}

#[test]
fn no_observed_change_stamps_nothing() {
    let d = decide(&[], 8, "c");
    assert_eq!(d.outcome, Outcome::NoChange);
    let mut meta = ObjectMeta::default();
    d.stamp(&mut meta);
    assert_eq!(meta, ObjectMeta::default());
}

#[test]
fn independent_changes_merge_into_a_new_cpid_with_a_mergelog() {
    let (a, b) = (Cpid::new_random(), Cpid::new_random());
    let (a1, b1, b2) = (Cpid::new_random(), Cpid::new_random(), Cpid::new_random());
    let d = decide(&[ctx(a, &[a1]), ctx(b, &[b1, b2])], 4, "roller");
    assert_eq!(d.outcome, Outcome::Merged);
    let m = d.mergelog.clone().unwrap();
    assert_ne!(m.cpid, a);
    assert_ne!(m.cpid, b);
    assert_eq!(d.cpid(), Some(m.cpid));
    assert_eq!(m.sources, vec![a, b]);
    assert_eq!(m.controller, "roller");
    // Nearest first: both sources, then each one's nearest ancestor; bounded.
    assert_eq!(d.context.unwrap().ancestors, vec![a, b, a1, b1]);
}

#[test]
fn a_cpid_whose_ancestors_cover_the_others_is_inherited() {
    let (a, b) = (Cpid::new_random(), Cpid::new_random());
    let m = Cpid::new_random();
    let d = decide(&[ctx(a, &[]), ctx(b, &[]), ctx(m, &[a, b])], 8, "c");
    assert_eq!(d.outcome, Outcome::Covered);
    assert_eq!(d.cpid(), Some(m));
    assert!(d.mergelog.is_none());
    // Not covered when one source is missing from the list.
    let c = Cpid::new_random();
    let d = decide(&[ctx(a, &[]), ctx(c, &[]), ctx(m, &[a, b])], 8, "c");
    assert_eq!(d.outcome, Outcome::Merged);
}

/// The paper's Figure 8 situation: after a merge, each further reconcile of
/// the same object (a resync, a status write) sees the sources again next to
/// the merged CPID. With ancestor lists the merged CPID covers them; without
/// (`max_ancestors` 0) every reconcile merges anew: 1 + k mergelogs for k
/// reconciles after the first, against 1.
#[test]
fn ancestor_cpids_cut_the_mergelogs_of_repeated_reconciles() {
    fn mergelogs(max_ancestors: usize, reconciles: usize) -> usize {
        let tracer = Tracer::new(Config::default().max_ancestors(max_ancestors));
        let source = meta_with(&ctx(Cpid::new_random(), &[]));
        let config = meta_with(&ctx(Cpid::new_random(), &[]));
        let mut target = ObjectMeta::default();
        for _ in 0..reconciles {
            let mut p = tracer.propagation();
            p.observe_meta(&source)
                .observe_meta(&config)
                .observe_meta(&target);
            p.decide().stamp(&mut target);
        }
        tracer.stats().merged as usize
    }
    assert_eq!(mergelogs(8, 6), 1);
    assert_eq!(mergelogs(0, 6), 6);
}

#[test]
fn malformed_annotations_are_counted_and_skipped() {
    let tracer = Tracer::new(Config::default());
    let bad = ObjectMeta {
        annotations: Some([(CPID_ANNOTATION.to_string(), "x".repeat(500))].into()),
        ..ObjectMeta::default()
    };
    let good = meta_with(&ctx(Cpid::new_random(), &[]));
    let mut p = tracer.propagation();
    p.observe_meta(&bad).observe_meta(&good);
    assert_eq!(p.decide().outcome, Outcome::Inherited);
    assert_eq!(tracer.stats().malformed, 1);
}

fn merge(tracer: &Tracer) -> Decision {
    let mut p = tracer.propagation();
    p.observe_context(ctx(Cpid::new_random(), &[]))
        .observe_context(ctx(Cpid::new_random(), &[]));
    p.decide()
}

/// A closed port: nothing listens there.
fn unreachable_endpoint() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}

#[tokio::test]
async fn an_unreachable_trace_server_drops_and_counts_without_failing_the_reconcile() {
    let tracer = Tracer::new(
        Config::new(unreachable_endpoint())
            .retries(1)
            .flush_interval(Duration::from_millis(10))
            .request_timeout(Duration::from_secs(2)),
    );
    let decisions: Vec<Decision> = (0..3).map(|_| merge(&tracer)).collect();
    // The reconcile got its CPIDs at once, whatever became of the mergelogs.
    assert!(decisions.iter().all(|d| d.outcome == Outcome::Merged));
    tracer.flush().await;
    let s = tracer.stats();
    assert_eq!(s.sent, 0);
    assert_eq!(s.dropped_undeliverable, 3);
    assert!(s.failed_requests >= 2, "first attempt and one retry: {s:?}");
}

#[tokio::test]
async fn a_full_buffer_drops_and_counts() {
    // Single-threaded runtime: the sender task cannot drain the buffer
    // before these sends return.
    let tracer = Tracer::new(Config::new(unreachable_endpoint()).buffer(2).retries(0));
    for _ in 0..10 {
        merge(&tracer);
    }
    assert_eq!(tracer.stats().dropped_buffer_full, 8);
}

type Received = Arc<Mutex<Vec<(Option<String>, MergelogBatch)>>>;

/// A trace server answering each request with the next status of `answers`
/// (then 200), recording what was sent.
async fn trace_server(answers: Vec<StatusCode>) -> (String, Received) {
    let received: Received = Default::default();
    let answers = Arc::new(Mutex::new(answers.into_iter()));
    let r = received.clone();
    let app = axum::Router::new().route(
        "/cpid/mergelogs",
        axum::routing::post(
            move |h: HeaderMap, axum::Json(b): axum::Json<MergelogBatch>| {
                let (r, answers) = (r.clone(), answers.clone());
                async move {
                    let auth = h
                        .get("authorization")
                        .map(|v| v.to_str().unwrap().to_string());
                    r.lock().unwrap().push((auth, b));
                    answers.lock().unwrap().next().unwrap_or(StatusCode::OK)
                }
            },
        ),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (format!("http://{addr}"), received)
}

#[tokio::test]
async fn mergelogs_are_batched_authenticated_and_retried_when_transient() {
    let (url, received) = trace_server(vec![StatusCode::SERVICE_UNAVAILABLE]).await;
    let tracer = Tracer::new(
        Config::new(url)
            .token("t0ken")
            .controller("roller")
            .flush_interval(Duration::from_secs(30)),
    );
    let decided: Vec<Cpid> = (0..3).map(|_| merge(&tracer).cpid().unwrap()).collect();
    tracer.flush().await;
    let got = received.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "one 503, then the same batch again");
    assert_eq!(got[0].1, got[1].1);
    assert_eq!(got[1].0.as_deref(), Some("Bearer t0ken"));
    let cpids: Vec<Cpid> = got[1].1.mergelogs.iter().map(|m| m.cpid).collect();
    assert_eq!(cpids, decided);
    assert!(got[1].1.mergelogs.iter().all(|m| m.controller == "roller"));
    let s = tracer.stats();
    assert_eq!(
        (s.sent, s.failed_requests, s.dropped_undeliverable),
        (3, 1, 0)
    );
}

#[tokio::test]
async fn a_refused_batch_is_not_retried() {
    let (url, received) = trace_server(vec![StatusCode::UNAUTHORIZED]).await;
    let tracer = Tracer::new(Config::new(url).flush_interval(Duration::from_millis(10)));
    merge(&tracer);
    tracer.flush().await;
    assert_eq!(received.lock().unwrap().len(), 1);
    let s = tracer.stats();
    assert_eq!((s.sent, s.dropped_undeliverable), (0, 1));
}
