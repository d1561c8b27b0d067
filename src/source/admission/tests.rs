//! The admission source on AdmissionReviews the real apiserver sent
//! (e2e/fixtures/admission/<scenario>/admission.jsonl, recorded by
//! `KASCADE_FIXTURES_ADMISSION=1 e2e/fixtures.sh`), paired with the watch
//! streams of the same runs, and checked against the audit log the same
//! apiserver wrote of the same writes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::ledger::{AdmittedWrites, Shown};
use super::review::{self, Review};
use crate::flow::{AuditEvent, WatchChange, WatchKind};
use crate::json::{JsonValueMutTrait as _, JsonValueTrait as _, Value};
use crate::metrics::AdmittedWriteOutcome as Outcome;
use crate::model::ObjectRef;

fn dir(scenario: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("e2e/fixtures/admission")
        .join(scenario)
}

fn cluster() -> Arc<str> {
    "c".into()
}

/// The reviews of a run, as the webhook received them.
fn reviews(scenario: &str) -> Vec<String> {
    std::fs::read_to_string(dir(scenario).join("admission.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The run's watch streams, each in the order delivered, as the watcher
/// makes them changes.
fn watched(scenario: &str) -> Vec<WatchChange> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir(scenario).join("watch"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files {
        let name = f.file_stem().unwrap().to_string_lossy().into_owned();
        let (group, resource) = name.split_once('.').unwrap();
        let group = if group == "core" { "" } else { group };
        for line in std::fs::read_to_string(&f).unwrap().lines() {
            let ev = crate::json::parse(line).unwrap();
            let kind = match ev["type"].as_str().unwrap_or("") {
                // As kascade's watcher reports them: kube's watcher makes
                // an added object and a modified one alike `Apply`.
                "ADDED" => WatchKind::Modified,
                "MODIFIED" => WatchKind::Modified,
                "DELETED" => WatchKind::Deleted,
                _ => continue,
            };
            let state = ev["object"].clone();
            let object = ObjectRef::new(
                "c",
                group,
                resource,
                state["metadata"]["namespace"].as_str().unwrap_or(""),
                state["metadata"]["name"].as_str().unwrap().to_string(),
            );
            out.push(WatchChange {
                object,
                kind,
                state,
                observed: SystemTime::now(),
            });
        }
    }
    out
}

/// Every review admitted (in the order received), then every watched
/// version delivered: what each showed, and what expired unshown.
struct Run {
    paired: Vec<Shown>,
    unpaired_versions: Vec<String>,
    expired: Vec<Shown>,
}

fn run(scenario: &str) -> Run {
    let writes = AdmittedWrites::new(Duration::from_secs(30), 100_000, usize::MAX);
    let changes = watched(scenario);
    for c in &changes {
        writes.watching(&c.object.cluster, &c.object.group, &c.object.resource, true);
    }
    let now = Instant::now();
    let mut paired = Vec::new();
    for body in reviews(scenario) {
        let (_, review) = review::decode(&body, &cluster(), SystemTime::now()).unwrap();
        if let Review::Write(a) = review {
            // Writes of resources the run did not watch are not held.
            if let Ok((Some(shown), _)) = writes.admit(a, now) {
                paired.push(shown);
            }
        }
    }
    let mut unpaired_versions = Vec::new();
    for c in &changes {
        match writes.pair(c) {
            Some((shown, _)) => paired.push(shown),
            // A delete whose grace period is cut to 0 (a kubelet's final
            // delete) writes two versions: this one, and the deletion the
            // delete's write stands for; the processor shows this one on
            // that write too (its ledger's `deleting` alias), as on the
            // audit path.
            None if c.kind == WatchKind::Modified
                && c.state["metadata"]["deletionGracePeriodSeconds"].as_i64() == Some(0) => {}
            None => unpaired_versions.push(format!(
                "{} {} rv {}",
                c.kind.as_str(),
                c.object,
                c.state["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
            )),
        }
    }
    let expired = writes.expired(now + Duration::from_secs(31), false);
    assert_eq!(writes.pending(), 0);
    Run {
        paired,
        unpaired_versions,
        expired,
    }
}

/// The audit events of the same run, by `(object, verb, subresource,
/// user)`: the version each wrote.
fn audited(scenario: &str) -> BTreeMap<(String, String, String, String), Vec<String>> {
    let mut out: BTreeMap<_, Vec<String>> = BTreeMap::new();
    for line in std::fs::read_to_string(dir(scenario).join("audit.log"))
        .unwrap()
        .lines()
    {
        let Ok(ev) = crate::source::audit::parse_event(line) else {
            continue;
        };
        if ev.stage != "ResponseComplete" {
            continue;
        }
        out.entry(key(&ev)).or_default().push(version(&ev));
    }
    out
}

/// An audited write's identity; a patch is an update to a webhook.
fn key(ev: &AuditEvent) -> (String, String, String, String) {
    let r = ev.object_ref.as_ref().unwrap();
    let verb = if ev.verb == "patch" {
        "update"
    } else {
        &ev.verb
    };
    // A create named by generateName is logged without a name: the
    // response names it.
    let name = match ev.object("c") {
        Ok(Some((o, _))) => o.name,
        _ => r.name.clone(),
    };
    (
        format!("{}/{}/{}/{}", r.api_group, r.resource, r.namespace, name),
        verb.to_string(),
        r.subresource.clone(),
        ev.user.username.clone(),
    )
}

fn version(ev: &AuditEvent) -> String {
    format!(
        "{} {}",
        ev.code(),
        ev.response_object
            .as_ref()
            .and_then(|o| o.resource_version())
            .map(|rv| rv.to_string())
            .unwrap_or_default()
    )
}

#[test]
fn every_version_a_rollout_stored_is_one_admitted_write_as_the_audit_log_has_it() {
    let run = run("deployment");
    assert!(
        run.unpaired_versions.is_empty(),
        "versions no admitted write stored: {:#?}",
        run.unpaired_versions
    );
    // A healthy rollout: nothing refused after admission, no conflict;
    // the kubelet's repeated deletes of a Pod found it unchanged or gone.
    let alarms: Vec<_> = run
        .expired
        .iter()
        .filter(|s| !matches!(s.outcome, Outcome::NoChange | Outcome::Gone))
        .map(|s| (s.outcome, s.event.as_ref().map(key)))
        .collect();
    assert!(alarms.is_empty(), "{alarms:#?}");
    assert!(run.expired.iter().any(|s| s.outcome == Outcome::Gone));
    let audit = audited("deployment");
    let mut matched = 0;
    for shown in run.paired.iter().chain(&run.expired) {
        let ev = shown.event.as_ref().expect("made into an audit event");
        assert!(ev.recorded_by_admission);
        let k = key(ev);
        let versions = audit
            .get(&k)
            .unwrap_or_else(|| panic!("no such write in the audit log: {k:?}"));
        // A delete is answered with the object, or with a Status naming
        // no version: then only the answer's code is compared.
        let ours = version(ev);
        let code = ours.split(' ').next().unwrap();
        // A delete admitted while the object went away finds it gone: the
        // apiserver answers 404, or 200 with a Status when another delete
        // was ending it; kascade cannot tell which and says 404.
        let gone = shown.outcome == Outcome::Gone
            && ev.verb == "delete"
            && versions.iter().any(|v| v == "404 " || v == "200 ");
        assert!(
            gone || versions.contains(&ours) || versions.contains(&format!("{code} ")),
            "{k:?} stored {ours} by admission and watch; the audit log says {versions:?}"
        );
        matched += 1;
    }
    assert!(matched > 10, "only {matched} writes");
    assert!(
        run.paired.iter().any(|s| s
            .event
            .as_ref()
            .is_some_and(|e| e.subresource() == "binding")),
        "no binding among the writes"
    );
}

#[test]
fn pod_creates_a_quota_refused_after_admission_are_refused_writes_on_their_replicaset() {
    let run = run("quota");
    let refused: Vec<&AuditEvent> = run
        .expired
        .iter()
        .filter(|s| s.outcome == Outcome::NotPersisted)
        .filter_map(|s| s.event.as_ref())
        .collect();
    assert!(!refused.is_empty(), "no write refused after admission");
    for ev in &refused {
        assert_eq!(ev.code(), 400);
        assert_eq!(ev.verb, "create");
        // Named by generateName: shown on its owner, as the audit path
        // shows a refused create.
        let attempt = ev
            .failed_create()
            .unwrap()
            .expect("a refused create of a named-by-prefix Pod");
        assert!(attempt.owner.is_some(), "{attempt:?}");
    }
    // The audit log of the same run has those creates refused (403 quota).
    let audit = std::fs::read_to_string(dir("quota").join("audit.log")).unwrap();
    assert!(audit.contains("exceeded quota"));
    assert!(
        run.unpaired_versions.is_empty(),
        "{:#?}",
        run.unpaired_versions
    );
}

fn decoded(body: &str) -> Result<Review, String> {
    review::decode(body, &cluster(), SystemTime::now()).map(|(_, r)| r)
}

#[test]
fn reviews_kascade_cannot_read_are_refused_with_what_is_wrong() {
    let one = reviews("deployment").remove(0);
    let cases = [
        ("not json", "not JSON"),
        (
            r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1"}"#,
            "admissionReviewVersions",
        ),
        (
            r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}"#,
            "without a request",
        ),
        (
            r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{}}"#,
            "request.uid",
        ),
    ];
    for (body, says) in cases {
        let e = decoded(body).unwrap_err();
        assert!(e.contains(says), "{body}: {e}");
    }
    let mut v = crate::json::parse(&one).unwrap();
    crate::json::pointer_mut(&mut v, "/request/operation")
        .map(|o| *o = Value::from("FROB"))
        .unwrap();
    let e = decoded(&crate::json::to_text(&v)).unwrap_err();
    assert!(e.contains("FROB"), "{e}");
}

#[test]
fn a_review_nested_deeper_than_kascade_reads_keeps_its_write_with_a_marker() {
    let one = reviews("deployment").remove(0);
    let mut v = crate::json::parse(&one).unwrap();
    let deep = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
    let body = crate::json::to_text(&v).replacen(
        "\"metadata\":{",
        &format!("\"deep\":{deep},\"metadata\":{{"),
        1,
    );
    assert!(body.len() > 40_000);
    match decoded(&body).unwrap() {
        Review::Write(a) => {
            let text = crate::json::to_text(a.new.as_ref().unwrap());
            assert!(text.contains(crate::json::depth::MARKER_PREFIX), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // A dry run is never shown; CONNECT writes nothing.
    crate::json::pointer_mut(&mut v, "/request")
        .and_then(|r| r.as_object_mut())
        .unwrap()
        .insert(&"dryRun", true);
    assert!(matches!(
        decoded(&crate::json::to_text(&v)).unwrap(),
        Review::DryRun
    ));
}

#[test]
fn an_update_that_changes_nothing_is_shown_at_once_and_the_pending_writes_are_bounded() {
    let writes = AdmittedWrites::new(Duration::from_secs(30), 2, usize::MAX);
    let bodies = reviews("deployment");
    let mut updates = Vec::new();
    for body in &bodies {
        if let Ok(Review::Write(a)) = decoded(body) {
            writes.watching(&a.object.cluster, &a.object.group, &a.object.resource, true);
            if a.verb == "update" && a.old.is_some() {
                updates.push(body.clone());
            }
        }
    }
    // The same object as before and after: nothing will be stored.
    let mut v = crate::json::parse(&updates[0]).unwrap();
    let old = v["request"]["oldObject"].clone();
    *crate::json::pointer_mut(&mut v, "/request/object").unwrap() = old;
    let Ok(Review::Write(a)) = decoded(&crate::json::to_text(&v)) else {
        panic!()
    };
    let (shown, shed) = writes.admit(a, Instant::now()).unwrap();
    let shown = shown.expect("shown at once");
    assert_eq!((shown.outcome, shed), (Outcome::NoChange, 0));
    assert_eq!(shown.event.unwrap().code(), 200);
    // Past the bound the oldest waiting writes are dropped, and counted.
    let mut shed_total = 0;
    for body in updates.iter().take(4) {
        let Ok(Review::Write(a)) = decoded(body) else {
            panic!()
        };
        shed_total += writes.admit(a, Instant::now()).unwrap().1;
    }
    assert_eq!(writes.pending(), 2);
    assert_eq!(shed_total, updates.len().min(4) - 2);
}

/// The whole path on the processor: each paired write (an audit event
/// made of the admitted write and the version the watch delivered) queued
/// after the watch change that showed it, as the watchers do.
#[tokio::test]
async fn through_the_processor_each_stored_version_is_shown_once_by_its_admitted_write() {
    use crate::aggregate::processor::test_support::{attr, drain, processor};
    use crate::span_model::{SPAN_KIND_AUDIT, SPAN_KIND_WATCH, attr as a};
    let cfg = crate::aggregate::processor::ProcessorConfig {
        watch_audit_wait: Duration::from_secs(3600),
        ..Default::default()
    };
    let (p, mut rx, metrics) = processor(cfg);
    let writes = AdmittedWrites::new(Duration::from_secs(30), 100_000, usize::MAX);
    let changes = watched("deployment");
    for c in &changes {
        writes.watching(&c.object.cluster, &c.object.group, &c.object.resource, true);
    }
    let filter = crate::source::audit::AuditFilter::default();
    let now = Instant::now();
    let mut shown = Vec::new();
    for body in reviews("deployment") {
        if let Ok((_, Review::Write(a))) = review::decode(&body, &cluster(), SystemTime::now())
            && let Ok((Some(s), _)) = writes.admit(a, now)
        {
            shown.push(s);
        }
    }
    for s in shown {
        if let Some(item) = crate::source::accept(s.event.unwrap(), "c", &filter, &metrics) {
            p.process(&item).await.unwrap();
        }
    }
    for c in changes {
        let paired = writes.pair(&c);
        p.process_watch(c).await.unwrap();
        if let Some((s, _)) = paired
            && let Some(item) = crate::source::accept(s.event.unwrap(), "c", &filter, &metrics)
        {
            p.process(&item).await.unwrap();
        }
    }
    for s in writes.expired(now + Duration::from_secs(31), false) {
        if let Some(item) = crate::source::accept(s.event.unwrap(), "c", &filter, &metrics) {
            p.process(&item).await.unwrap();
        }
    }
    p.flush_watch(true).await.unwrap();
    let spans = drain(&mut rx);
    let kind = |s: &crate::span_model::Span| attr(s, a::SPAN_KIND);
    let watch_only: Vec<_> = spans
        .iter()
        .filter(|s| kind(s).as_deref() == Some(SPAN_KIND_WATCH))
        .map(|s| format!("{} {:?}", s.name, attr(s, "watch.resource_version.new")))
        .collect();
    assert!(
        watch_only.is_empty(),
        "shown by the watch alone: {watch_only:#?}"
    );
    let audit: Vec<_> = spans
        .iter()
        .filter(|s| kind(s).as_deref() == Some(SPAN_KIND_AUDIT))
        .collect();
    assert!(audit.len() > 50, "{} audit spans", audit.len());
    for s in &audit {
        assert_eq!(
            attr(s, a::AUDIT_RECORDED_BY).as_deref(),
            Some(crate::span_model::RECORDED_BY_ADMISSION),
            "{s:#?}"
        );
    }
    // The rollout's cascade is inferred as from the audit log: the
    // ReplicaSet's create has the Deployment's write as its cause.
    let rs_create = audit
        .iter()
        .find(|s| {
            s.name
                .starts_with("system:serviceaccount:kube-system:deployment-controller create")
        })
        .expect("the ReplicaSet's create");
    assert_eq!(
        attr(rs_create, "cascade.role").as_deref(),
        Some("effect"),
        "{rs_create:#?}"
    );
}

#[test]
fn the_writes_waiting_are_bounded_by_the_bytes_of_their_reviews_too() {
    let bodies: Vec<String> = reviews("deployment")
        .into_iter()
        .filter(|b| matches!(decoded(b), Ok(Review::Write(ref a)) if a.verb == "create"))
        .take(6)
        .collect();
    assert_eq!(bodies.len(), 6);
    let largest = bodies.iter().map(String::len).max().unwrap();
    // Room for two of the largest reviews.
    let writes = AdmittedWrites::new(Duration::from_secs(30), 1000, 2 * largest);
    let now = Instant::now();
    let mut shed = 0;
    for body in &bodies {
        let Ok(Review::Write(a)) = decoded(body) else {
            panic!()
        };
        writes.watching(&a.object.cluster, &a.object.group, &a.object.resource, true);
        let (shown, n) = writes.admit(a, now).unwrap();
        assert!(shown.is_none(), "a create waits for the watch");
        shed += n;
    }
    let waiting = writes.pending();
    assert!((1..=2).contains(&waiting), "{waiting} waiting");
    assert_eq!(shed + waiting, bodies.len());
    // What expires frees its bytes: as much is held again without shedding.
    assert_eq!(
        writes.expired(now + Duration::from_secs(31), false).len(),
        waiting
    );
    assert_eq!(writes.pending(), 0);
    let Ok(Review::Write(a)) = decoded(&bodies[0]) else {
        panic!()
    };
    assert_eq!(writes.admit(a, now).unwrap().1, 0);
}

/// Writes shown as soon as the watch delivers them leave nothing behind:
/// the expiry queue's entries of shown writes are dropped once they
/// outnumber the writes waiting.
#[test]
fn writes_shown_at_once_leave_the_expiry_queue_bounded() {
    let create = reviews("deployment")
        .into_iter()
        .find(|b| matches!(decoded(b), Ok(Review::Write(ref a)) if a.verb == "create"))
        .unwrap();
    let writes = AdmittedWrites::new(Duration::from_secs(30), 100_000, usize::MAX);
    let now = Instant::now();
    for i in 0..5000 {
        // The same create, of another object each time.
        let mut v = crate::json::parse(&create).unwrap();
        for path in ["/request/name", "/request/object/metadata/name"] {
            if let Some(n) = crate::json::pointer_mut(&mut v, path) {
                *n = Value::from(format!("obj-{i}").as_str());
            }
        }
        *crate::json::pointer_mut(&mut v, "/request/object/metadata/uid").unwrap() =
            Value::from(format!("uid-{i}").as_str());
        let Ok(Review::Write(a)) = decoded(&crate::json::to_text(&v)) else {
            panic!()
        };
        writes.watching(&a.object.cluster, &a.object.group, &a.object.resource, true);
        let change = WatchChange {
            object: a.object.clone(),
            kind: WatchKind::Modified,
            state: a.new.clone().unwrap(),
            observed: SystemTime::now(),
        };
        writes.admit(a, now).unwrap();
        assert!(writes.pair(&change).is_some(), "write {i} paired");
    }
    assert_eq!(writes.pending(), 0);
    assert!(
        writes.due_entries() <= 1025,
        "{} entries",
        writes.due_entries()
    );
}

/// A resource whose list-watch is refused (RBAC) delivers nothing: its
/// admitted writes are not held, so none is judged never stored; once the
/// watch delivers again they are.
#[test]
fn writes_of_a_resource_the_watch_cannot_deliver_are_not_held() {
    let writes = AdmittedWrites::new(Duration::from_secs(30), 100, usize::MAX);
    let bodies = reviews("deployment");
    let write = || {
        bodies
            .iter()
            .find_map(|body| match decoded(body) {
                Ok(Review::Write(a)) => Some(a),
                _ => None,
            })
            .expect("an admitted write")
    };
    let a = write();
    let (cluster, group, resource) = (
        a.object.cluster.clone(),
        a.object.group.clone(),
        a.object.resource.clone(),
    );
    writes.watching(&cluster, &group, &resource, true);
    writes.watching(&cluster, &group, &resource, false);
    assert!(matches!(
        writes.admit(a, Instant::now()),
        Err(super::ledger::NotHeld::Unwatched)
    ));
    assert_eq!(writes.pending(), 0);
    writes.watching(&cluster, &group, &resource, true);
    assert!(writes.admit(write(), Instant::now()).is_ok());
    assert_eq!(writes.pending(), 1);
}
