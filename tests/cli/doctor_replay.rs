//! `doctor`'s flags; replay's merge of files by time.

use super::*;

/// `kascade doctor`'s bad flags are named; an address nothing listens on
/// is a failed check (exit 3), not an error of doctor's own.
#[test]
fn doctor_names_bad_flags_and_fails_on_an_unreachable_collector() {
    let out = kascade()
        .args(["doctor", "--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--kubeconfig /nonexistent/kubeconfig"),
        "{err}"
    );

    let out = kascade()
        .args(["doctor", "--admin", "not a url"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--admin \"not a url\": not a URL"), "{err}");

    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = kascade()
        .args(["doctor", "--format", "json", "--admin"])
        .arg(format!("http://kascade:s3cret-pw@127.0.0.1:{port}"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    // Credentials in an address are not shown.
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        !shown.contains("s3cret-pw") && shown.contains("***@127.0.0.1"),
        "{shown}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], false);
    let collector = &report["checks"][0];
    assert_eq!(collector["id"], "collector");
    assert_eq!(collector["status"], "fail");
    assert!(
        collector["fix"]
            .as_str()
            .unwrap()
            .contains("--admin-listen"),
        "{collector}"
    );
}

/// Rotated logs given newest first, and a file given twice, replay as the
/// one log does: merged by time, each event once.
#[test]
fn replay_merges_files_by_time_and_replays_a_repeated_event_once() {
    let dir = tempfile::tempdir().unwrap();
    let whole = common::fixture_path("deployment", "audit.log");
    let text = std::fs::read_to_string(&whole).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (older, newer) = lines.split_at(lines.len() / 2);
    let (rotated, current) = (dir.path().join("audit-1.log"), dir.path().join("audit.log"));
    std::fs::write(&rotated, older.join("\n") + "\n").unwrap();
    std::fs::write(&current, newer.join("\n") + "\n").unwrap();

    let (expected, _) = replayed_spans(&[&whole]);
    assert!(expected.len() > 100);
    let (newest_first, _) = replayed_spans(&[&current, &rotated]);
    assert!(newest_first == expected, "rotated logs, newest first");
    let (twice, stderr) = replayed_spans(&[&whole, &whole]);
    assert!(twice == expected, "the same file twice");
    assert!(stderr.contains("logged more than once"), "{stderr}");
    assert!(
        stderr.contains(&format!("replayed {} lines", 2 * lines.len())),
        "{stderr}"
    );
}
