//! Offline commands: replay output, owner-only files, bad lines and
//! inputs.

use super::*;

#[test]
fn replay_writes_otlp_json_requests_one_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let log = common::fixture_path("deployment", "audit.log");
    let st = common::succeeded(
        kascade()
            .args(["replay", "--cluster", "fx", "--output"])
            .arg(format!("otlp-json={}", out.display()))
            .arg(&log),
    );
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert!(stderr.contains("0 malformed lines skipped"), "{stderr}");
    let text = std::fs::read_to_string(&out).unwrap();
    let mut spans = 0;
    let mut names = std::collections::HashSet::new();
    for line in text.lines() {
        // Each line is an ExportTraceServiceRequest in OTLP/JSON.
        let req: serde_json::Value = serde_json::from_str(line).unwrap();
        for rs in req["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for s in ss["spans"].as_array().unwrap() {
                    spans += 1;
                    assert_eq!(s["traceId"].as_str().unwrap().len(), 32, "hex trace id");
                    names.insert(s["name"].as_str().unwrap().to_string());
                }
            }
        }
    }
    assert!(spans > 100, "{spans}");
    assert!(names.contains("deployments default/hello"), "{names:?}");
    assert!(names.contains("kascade-e2e-admin create"));
}

/// What kascade writes for its user can hold what audit events carry: each
/// output file is owner-only, a file that was there before included.
#[test]
fn output_files_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let log = common::fixture_path("deployment", "audit.log");
    let (spans, changes, report) = (
        dir.path().join("spans.jsonl"),
        dir.path().join("changes.jsonl"),
        dir.path().join("report.html"),
    );
    std::fs::write(&report, "an older report").unwrap();
    std::fs::set_permissions(&report, std::fs::Permissions::from_mode(0o644)).unwrap();
    succeeded_text(
        kascade()
            .args(["replay", "--cluster", "fx", "--output"])
            .arg(format!("otlp-json={}", spans.display()))
            .arg("--output")
            .arg(format!("changelog={}", changes.display()))
            .arg(&log),
    );
    succeeded_text(
        kascade()
            .arg("explain")
            .arg("--output")
            .arg(format!("html={}", report.display()))
            .arg(&log),
    );
    for file in [spans, changes, report] {
        let meta = std::fs::metadata(&file).unwrap();
        assert!(meta.len() > 0, "{} is empty", file.display());
        assert_eq!(
            meta.permissions().mode() & 0o777,
            0o600,
            "{}",
            file.display()
        );
    }
}

#[test]
fn bad_lines_are_reported_with_file_and_line_and_skipped_unless_strict() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let lines = common::audit_lines("deployment");
    std::fs::write(
        &log,
        format!("{}\n{{\"truncated\": \n{}\n", lines[0], lines[1]),
    )
    .unwrap();
    let out = dir.path().join("out.jsonl");
    let st = kascade()
        .args(["replay", "--output"])
        .arg(format!("otlp-json={}", out.display()))
        .arg(&log)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert!(st.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:2:", log.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains("2 events accepted, 1 malformed lines skipped"),
        "{stderr}"
    );

    let st = kascade()
        .args(["replay", "--strict", "--output"])
        .arg(format!("otlp-json={}", out.display()))
        .arg(&log)
        .output()
        .unwrap();
    assert!(!st.status.success());
    assert!(String::from_utf8_lossy(&st.stderr).contains(&format!("{}:2:", log.display())));

    let st = kascade()
        .args([
            "replay",
            "/nonexistent/audit.log",
            "--output",
            "otlp-json=/dev/null",
        ])
        .output()
        .unwrap();
    assert!(!st.status.success());
    assert!(String::from_utf8_lossy(&st.stderr).contains("/nonexistent/audit.log"));
}

/// An empty audit log, or a file that is no audit log, is refused by name
/// with exit 1 by each offline command that reads audit logs: a wrong path
/// or an empty CI artefact must not read as "no problems found". A good
/// log beside an empty one is read as before.
#[test]
fn an_input_without_audit_events_is_refused_by_every_offline_command() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.log");
    std::fs::write(&empty, "\n\n").unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "hello\nworld\n").unwrap();
    let good = common::fixture_path("rollout-stuck", "audit.log");
    let out = dir.path().join("out.jsonl");
    let output = format!("otlp-json={}", out.display());
    let trace = [
        "trace",
        "--resource",
        "deployments",
        "--namespace",
        "rollout-demo",
        "--name",
        "web",
    ];
    let commands: [&[&str]; 4] = [
        &["explain"],
        &["analyze"],
        &["replay", "--output", &output],
        &trace,
    ];
    for cmd in commands {
        let run = |files: &[&std::path::Path]| {
            let st = kascade().args(cmd).args(files).output().unwrap();
            (
                st.status.code(),
                String::from_utf8_lossy(&st.stderr).into_owned(),
            )
        };
        let (code, stderr) = run(&[&empty]);
        assert_eq!(code, Some(1), "{cmd:?} empty: {stderr}");
        assert!(
            stderr.contains(&format!(
                "no audit events in {}: the file is empty",
                empty.display()
            )),
            "{cmd:?}: {stderr}"
        );
        let (code, stderr) = run(&[&empty, &notes]);
        assert_eq!(code, Some(1), "{cmd:?} notes: {stderr}");
        assert!(
            stderr.contains(&format!(
                "no audit events in {}, {}: {}:1: ",
                empty.display(),
                notes.display(),
                notes.display()
            )),
            "{cmd:?}: {stderr}"
        );
        let (code, stderr) = run(&[&empty, &good]);
        assert_eq!(code, Some(0), "{cmd:?} with a good log: {stderr}");
        assert!(!stderr.contains("no audit events"), "{cmd:?}: {stderr}");
    }
}

#[test]
fn a_line_that_is_not_utf8_is_reported_and_skipped_and_the_rest_is_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = common::fixture_path("deployment", "audit.log");
    let lines = common::audit_lines("deployment");
    assert!(lines.len() > 100);
    // The real log with one line of binary garbage as line 81.
    let log = dir.path().join("garbage.log");
    let mut bytes = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if i == 80 {
            bytes.extend_from_slice(b"{\"kind\":\"Event\",\"auditID\":\"\xff\xfe\xc3\x28\"}\n");
        }
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
    }
    std::fs::write(&log, bytes).unwrap();
    let replay = |log: &std::path::Path, out: &std::path::Path, strict: bool| {
        let mut cmd = kascade();
        cmd.args(["replay", "--cluster", "fx", "--output"])
            .arg(format!("otlp-json={}", out.display()));
        if strict {
            cmd.arg("--strict");
        }
        cmd.arg(log).output().unwrap()
    };
    let clean_out = dir.path().join("clean.jsonl");
    let st = replay(&fixture, &clean_out, false);
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );

    let out = dir.path().join("out.jsonl");
    let st = replay(&log, &out, false);
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert!(st.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:81: not UTF-8", log.display())),
        "{stderr}"
    );
    assert!(stderr.contains("1 malformed lines skipped"), "{stderr}");
    // Every event, those after the bad line included, became the same spans.
    assert_eq!(span_ids(&out), span_ids(&clean_out));

    let st = replay(&log, &out, true);
    assert!(!st.status.success());
    assert!(
        String::from_utf8_lossy(&st.stderr).contains(&format!("{}:81: not UTF-8", log.display()))
    );

    // `kascade trace` skips that line too (it refused the whole file), names
    // it, and prints the tree of the log without it.
    let trace = |log: &std::path::Path| {
        kascade()
            .arg("trace")
            .arg(log)
            .args(["--resource", "deployments", "--namespace", "default"])
            .args(["--name", "hello"])
            .output()
            .unwrap()
    };
    let (clean, dirty) = (trace(&fixture), trace(&log));
    let stderr = String::from_utf8_lossy(&dirty.stderr);
    assert!(dirty.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:81: ", log.display())),
        "{stderr}"
    );
    assert!(clean.status.success());
    assert_eq!(
        String::from_utf8_lossy(&dirty.stdout),
        String::from_utf8_lossy(&clean.stdout)
    );
}
