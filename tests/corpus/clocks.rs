//! Several apiservers' logs read by one clock.

use super::*;

/// A control plane of two apiservers (run `two-apiservers`: the
/// controller-manager writes through one, the scheduler and the kubelets
/// through the other, each logging its share): the two logs given together,
/// in either order, read as one healthy cluster — merged by time, no change
/// "out of order", every cascade complete (a Pod's create whose response
/// finished after the scheduler bound it does not leave the Pod waiting),
/// the same in explain, `trace` and analyze.
#[test]
fn two_apiservers_logs_given_together_read_as_one_healthy_cluster() {
    let logs = corpus_logs("two-apiservers");
    assert_eq!(logs.len(), 2, "{logs:?}");
    for files in [logs.clone(), logs.iter().rev().cloned().collect()] {
        let report = explain_files(files.clone());
        assert_eq!(
            report.findings.iter().filter(|f| !f.background).count(),
            0,
            "{:?}",
            report.findings.iter().map(|f| &f.title).collect::<Vec<_>>()
        );
        assert!(
            report
                .inputs
                .notes
                .iter()
                .all(|n| !n.contains("out of time order") && !n.contains("clock")),
            "{:?}",
            report.inputs.notes
        );
        let out = cascade_mode_of_ha_web(&files);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.starts_with("3 cascades, all complete without a failed write"),
            "{text}"
        );
        let analyzed = std::process::Command::new(env!("CARGO_BIN_EXE_kascade"))
            .arg("analyze")
            .args(&files)
            .args(["--format", "json"])
            .output()
            .unwrap();
        let analyzed: serde_json::Value = serde_json::from_slice(&analyzed.stdout).unwrap();
        for c in analyzed["completions"].as_array().unwrap() {
            assert_eq!(c["incomplete"], 0, "{c}");
        }
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    no_cause_after(
        &rt.block_on(common::changes_of_lines(lines("two-apiservers"), CLUSTER)),
        "two apiservers",
    );
}

/// The second apiserver's clock 2 s behind the first's, far more than the
/// reader looks ahead, and 200 ms behind: its writes are logged before the
/// changes they react to. Judged by etcd's revision order, the report says how far
/// behind the clock is, and the offline commands read that log 2 s later:
/// the run reads as captured (no alarm, the rollout's cascades complete in
/// `trace --mode cascade` and in every display mode, no controller write
/// left without its cause). Read as logged, without the correction, no
/// cause is taken from the future.
#[test]
fn a_second_apiservers_clock_behind_is_measured_and_corrected() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (ms, said) in [(-2000, "2.0"), (-200, "0.2")] {
        let files = second_log_shifted_ms(dir.path(), ms, &format!("audit-2-shifted{ms}ms.log"));
        let report = explain_files(files.clone());
        assert_eq!(
            report.totals.error,
            0,
            "{ms} ms: {:?}",
            report.findings.iter().map(|f| &f.title).collect::<Vec<_>>()
        );
        let note = clock_note(&report).expect("a note on the clocks");
        assert!(
            note.contains(&format!(
                "audit-2-shifted{ms}ms.log is about {said} s behind that of"
            )) && note.contains("two-apiservers/audit.log.gz")
                && note.contains(&format!("its times are read {said} s later")),
            "{note}"
        );
        assert!(
            !report
                .inputs
                .notes
                .iter()
                .any(|n| n.contains("logged before any change they react to")),
            "{ms} ms: {:?}",
            report.inputs.notes
        );
        let out = cascade_mode_of_ha_web(&files);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.starts_with("3 cascades, all complete without a failed write"),
            "{ms} ms: {text}"
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!("is about {said} s behind")),
            "{ms} ms: the correction is said"
        );
        let corrected: Vec<String> = kascade::app::Lines::without_progress(files.clone())
            .correcting_clocks()
            .collect();
        no_cause_after(
            &rt.block_on(common::changes_of_lines(corrected.clone(), CLUSTER)),
            &format!("second apiserver {ms} ms behind, corrected"),
        );
        rt.block_on(no_error_in_any_mode_of(
            &format!("{ms} ms behind, corrected"),
            corrected,
            ("deployments", "ha-demo", "web"),
        ));
        let as_logged: Vec<String> = kascade::app::Lines::without_progress(files).collect();
        no_cause_after(
            &rt.block_on(common::changes_of_lines(as_logged, CLUSTER)),
            &format!("second apiserver {ms} ms behind, as logged"),
        );
    }
}

/// Two clusters' logs given together (two corpus runs, each its own
/// control plane, about 12 minutes apart): their etcds count revisions
/// alike, so revision order pairs their writes as if their clocks were 700 s
/// apart, but no object is in both, so neither log is read by the other's
/// clock (and explain says the input mixes clusters).
#[test]
fn two_clusters_logs_are_not_read_by_one_clock() {
    let files = vec![
        corpus_log("controller-fight"),
        corpus_log("multi-healthy-a"),
    ];
    let report = explain_files(files);
    assert_eq!(clock_note(&report), None);
    assert!(
        report
            .inputs
            .notes
            .iter()
            .any(|n| n.contains("the input seems to mix several clusters' logs")),
        "{:?}",
        report.inputs.notes
    );
}

/// The second apiserver's clock behind the first's by 50 ms and by 80 ms
/// (too little to measure and correct, under 100 ms): the scheduler's bindings and the
/// kubelets' writes are logged before the writes they react to, so they
/// have no cause and the rollout's cascades cannot be told complete. Not
/// judged wrong either: `trace --mode cascade` says why their completion is
/// not known, and no display mode marks an error. (As captured, the same
/// run is "all complete": `two_apiservers_logs_given_together_…`.)
#[test]
fn a_skewed_apiservers_writes_leave_cascades_not_known_rather_than_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (what, files) in [
        (
            "50 ms behind",
            second_log_shifted_ms(dir.path(), -50, "audit-2-shifted-50ms.log"),
        ),
        (
            "80 ms behind",
            second_log_shifted_ms(dir.path(), -80, "audit-2-shifted-80ms.log"),
        ),
    ] {
        let out = cascade_mode_of_ha_web(&files);
        let text = String::from_utf8_lossy(&out.stdout);
        let first = text.lines().next().unwrap_or_default();
        assert!(first.contains("none went wrong"), "{what}: {text}");
        assert!(text.contains("completion not known: "), "{what}: {text}");
        assert!(!text.contains("not complete: waiting"), "{what}: {text}");
        let lines: Vec<String> = kascade::app::Lines::without_progress(files).collect();
        rt.block_on(no_error_in_any_mode_of(
            what,
            lines,
            ("deployments", "ha-demo", "web"),
        ));
    }
}

/// A clock ahead gives no cause from the future to find missing — its
/// writes' hops just grow by the offset — so only etcd's revision order
/// tells it: the report says which log's clock is ahead and by how much,
/// whatever order the files are given in (explain reads them in time
/// order: the reference is the log that starts first), and the hops are
/// measured by one clock.
#[test]
fn a_second_apiservers_clock_ahead_is_said_with_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let files = second_log_shifted(dir.path(), 2);
    for files in [files.clone(), files.iter().rev().cloned().collect()] {
        let report = explain_files(files.clone());
        assert_eq!(report.totals.error, 0);
        let note = clock_note(&report).expect("a note on the clocks");
        assert!(
            note.contains("audit-2-shifted2.log is about 2.0 s ahead of that of")
                && note.contains("two-apiservers/audit.log.gz")
                && note.contains("its times are read 2.0 s earlier"),
            "{note}"
        );
        // Read by one clock, the scheduler's bindings (logged by the second
        // apiserver) follow the Pods' creates by milliseconds, not by the
        // offset, in analyze's hop statistics.
        let out = common::succeeded(
            common::kascade()
                .arg("analyze")
                .args(&files)
                .args(["--format", "json"]),
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("is about 2.0 s ahead of"));
        let analyzed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let binding = analyzed["edges"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["edge"] == "pods binding")
            .expect("the bindings' hops");
        assert!(binding["max_us"].as_u64().unwrap() < 1_000_000, "{binding}");
    }
}
