//! Causes named through owners: failed Jobs, pending claims, finalizers;
//! the same report every time.

use super::*;

#[test]
fn a_failed_jobs_pods_are_the_cause_and_the_job_their_symptom() {
    let r = fixture("job-failed");
    let f = &r.findings[0];
    assert_eq!(f.severity, Severity::Error);
    assert_eq!(f.kind, FindingKind::NotCompleted);
    assert_eq!(f.object.resource, "pods");
    assert!(f.object.name.starts_with("migrate-"), "{}", f.object.name);
    assert!(
        f.title
            .starts_with("Failed: container migrate: Error (exit code 1)"),
        "{}",
        f.title
    );
    // Both Pods (backoffLimit 1) are one finding.
    assert_eq!(f.also_total, 1, "{:#?}", f.also);
    assert_eq!(f.chain[0].object.display, "jobs jobfail-demo/migrate");
    assert!(
        f.symptoms
            .iter()
            .any(|s| s.object.display == "jobs jobfail-demo/migrate"
                && s.title.contains("BackoffLimitExceeded")),
        "{:#?}",
        f.symptoms
    );
    assert_eq!(
        f.trigger.as_ref().unwrap().write,
        "kascade-e2e-admin create jobs jobfail-demo/migrate"
    );
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
}

#[test]
fn a_pending_claim_is_the_cause_of_its_pods_failed_scheduling() {
    let r = fixture("pvc-pending");
    let f = &r.findings[0];
    assert_eq!(f.severity, Severity::Error);
    assert_eq!(f.object.display, "persistentvolumeclaims pvc-demo/data");
    assert_eq!(
        f.title,
        "ProvisioningFailed: storageclass.storage.k8s.io \"no-such-class\" not found"
    );
    // Under the Pod that mounts it (link class `pvc`).
    let chain: Vec<(&str, &str)> = f
        .chain
        .iter()
        .map(|s| (s.object.display.as_str(), s.via.as_str()))
        .collect();
    assert_eq!(
        chain,
        [
            ("pods pvc-demo/db", ""),
            ("persistentvolumeclaims pvc-demo/data", "pvc")
        ]
    );
    assert!(
        f.symptoms
            .iter()
            .any(|s| s.object.display == "pods pvc-demo/db"
                && s.title.contains("unbound immediate PersistentVolumeClaims")),
        "{:#?}",
        f.symptoms
    );
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
}

#[test]
fn a_delete_held_by_a_finalizer_names_the_finalizer_and_the_delete() {
    let r = fixture("finalizer-blocked");
    let f = &r.findings[0];
    assert_eq!(f.object.display, "deployments fin-demo/held");
    assert_eq!(f.kind, FindingKind::NotCompleted);
    assert!(
        f.title.starts_with("deletion requested ")
            && f.title.ends_with(" is held by finalizer kascade.io/hold"),
        "{}",
        f.title
    );
    assert_eq!(f.chain[0].status, "Terminating");
    assert_eq!(
        f.trigger.as_ref().unwrap().write,
        "kascade-e2e-admin delete deployments fin-demo/held"
    );
    // Nothing else went wrong: the ReplicaSet and Pod stay until it goes.
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
}

/// The same log gives the same report, in every process: which of several
/// failing siblings names a group used to follow a map's random order (the
/// corpus's crash-loop run named one of two Pods, now one, now the other).
/// Each run is its own process, with its own hash seeds.
#[test]
fn the_same_whole_cluster_log_gives_the_same_report_every_time() {
    for run in ["crash-loop", "image-pull-error"] {
        let log = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("e2e/corpus")
            .join(run)
            .join("audit.log.gz");
        let reports: Vec<Vec<u8>> = (0..6)
            .map(|_| {
                let out = common::succeeded(
                    kascade()
                        .arg("explain")
                        .arg(&log)
                        .args(["--format", "json"]),
                );
                out.stdout
            })
            .collect();
        for (i, r) in reports.iter().enumerate().skip(1) {
            assert!(
                *r == reports[0],
                "{run}: report {i} differs from the first:\n{}\n---\n{}",
                String::from_utf8_lossy(&reports[0]),
                String::from_utf8_lossy(r)
            );
        }
    }
}
