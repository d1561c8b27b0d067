//! Logs given twice, cut gzip, empty scopes, standard input.

use super::*;

/// Inputs as CI leaves them: the same log given twice (or rotated logs that
/// overlap) is read once, not counted twice with a trigger invented from
/// the repeat; a gzipped log cut short is read up to its damage, said on
/// stderr, instead of losing the whole report.
#[test]
fn a_log_given_twice_is_read_once_and_a_cut_gz_up_to_its_damage() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let log = common::fixture_path("rollout-stuck", "audit.log");
    let explain = |files: &[&std::path::Path]| succeeded_text(kascade().arg("explain").args(files));
    let (once, _) = explain(&[&log]);
    let (twice, stderr) = explain(&[&log, &log]);
    assert!(once.contains("ERROR"), "{once}");
    // Twice the lines are read; the report is the same.
    assert_eq!(
        twice.replacen("80 audit lines read", "40 audit lines read", 1),
        once
    );
    assert!(stderr.contains("counted once"), "{stderr}");

    let text = std::fs::read(&log).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&text).unwrap();
    let gz = gz.finish().unwrap();
    let cut = dir.path().join("audit.log.gz");
    std::fs::write(&cut, &gz[..gz.len() * 3 / 4]).unwrap();
    let (report, stderr) = explain(&[&cut]);
    assert!(
        stderr.contains(&format!("{}: damaged after line ", cut.display())),
        "{stderr}"
    );
    assert!(report.contains("deployments"), "{report}");
}

/// A scope that matches nothing — a namespace or object typo, a time range
/// outside the log, `--from` after `--to` — is an error naming it, never
/// "no problems found"; the same scopes spelled right explain as before.
#[test]
fn a_scope_that_matches_nothing_is_an_error_not_an_all_clear() {
    let log = common::fixture_path("quota", "audit.log");
    let explain = |args: &[&str]| {
        let st = kascade()
            .arg("explain")
            .arg(&log)
            .args(args)
            .args(["--fail-on", "error"])
            .output()
            .unwrap();
        (
            st.status.code(),
            String::from_utf8_lossy(&st.stdout).to_string(),
            String::from_utf8_lossy(&st.stderr).to_string(),
        )
    };
    for (args, named) in [
        (vec!["-n", "quota-dem0"], "namespace quota-dem0"),
        (vec!["--object", "deploy/nothere"], "nothere"),
        (
            vec!["--from", "2099-01-01T00:00:00Z"],
            "--from 2099-01-01T00:00:00Z is outside the log",
        ),
        (
            vec!["--to", "2020-01-01T00:00:00Z"],
            "nothing in scope (until 2020-01-01T00:00:00Z)",
        ),
        (
            vec![
                "--from",
                "2026-11-23T16:00:00Z",
                "--to",
                "2026-11-23T15:00:00Z",
            ],
            "later than --to",
        ),
    ] {
        let (code, out, err) = explain(&args);
        assert_eq!(code, Some(1), "{args:?}: {out}{err}");
        assert!(err.contains(named), "{args:?}: {err}");
        assert!(!out.contains("no problems found"), "{args:?}: {out}");
    }
    // Spelled right: the quota refusals are found (exit 3 with --fail-on).
    let (code, out, err) = explain(&["-n", "quota-demo"]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(out.contains("ERROR"), "{out}");
}

/// `replay` reads gzipped logs as `explain` does: the same spans as from
/// the plain log, and a log cut short replayed up to its damage.
#[test]
fn replay_reads_gzipped_logs_and_a_cut_one_up_to_its_damage() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let plain = common::fixture_path("deployment", "audit.log");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&std::fs::read(&plain).unwrap()).unwrap();
    let gz = gz.finish().unwrap();
    let whole = dir.path().join("audit.log.gz");
    std::fs::write(&whole, &gz).unwrap();
    let cut = dir.path().join("cut.log.gz");
    std::fs::write(&cut, &gz[..gz.len() / 2]).unwrap();
    let replay = |log: &std::path::Path, name: &str| {
        let out = dir.path().join(name);
        let (_, stderr) = succeeded_text(
            kascade()
                .args(["replay", "--cluster", "fx", "--output"])
                .arg(format!("otlp-json={}", out.display()))
                .arg(log),
        );
        (span_ids(&out), stderr)
    };
    let (from_plain, _) = replay(&plain, "plain.jsonl");
    let (from_gz, _) = replay(&whole, "gz.jsonl");
    assert_eq!(from_gz, from_plain);
    let (from_cut, stderr) = replay(&cut, "cut.jsonl");
    assert!(stderr.contains("damaged after line"), "{stderr}");
    assert!(!from_cut.is_empty() && from_cut.len() < from_plain.len());
}

/// `-` reads standard input, as a pipe gives it (`zcat audit.log.gz |
/// kascade explain -`): the same report and the same spans as the file.
#[test]
fn standard_input_is_read_as_the_file_would_be() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let log = common::fixture_path("rollout-stuck", "audit.log");
    let piped = |args: &[&str]| {
        let mut child = kascade()
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&std::fs::read(&log).unwrap())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let from_file = common::succeeded(kascade().arg("explain").arg(&log));
    assert_eq!(
        piped(&["explain", "-"]),
        String::from_utf8_lossy(&from_file.stdout)
    );

    let (file_out, stdin_out) = (
        dir.path().join("file.jsonl"),
        dir.path().join("stdin.jsonl"),
    );
    common::succeeded(
        kascade()
            .args(["replay", "--cluster", "fx", "--output"])
            .arg(format!("otlp-json={}", file_out.display()))
            .arg(&log),
    );
    piped(&[
        "replay",
        "--cluster",
        "fx",
        "--output",
        &format!("otlp-json={}", stdin_out.display()),
        "-",
    ]);
    assert_eq!(span_ids(&stdin_out), span_ids(&file_out));
}
