//! Redaction keys and deep values in every offline command.

use super::*;

#[test]
fn replays_sharing_a_redaction_key_give_the_same_markers_others_their_own() {
    let dir = tempfile::tempdir().unwrap();
    // One key written with a newline, one without: the same key.
    let (with_newline, without) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&with_newline, "7f3c9a1e5b2d4c6f8e0a1b3c5d7e9f21\n").unwrap();
    std::fs::write(&without, "7f3c9a1e5b2d4c6f8e0a1b3c5d7e9f21").unwrap();
    let keyed = replay_markers(Some(&with_newline));
    assert!(
        !keyed.is_empty(),
        "the config fixture's Secrets give markers"
    );
    assert_eq!(keyed, replay_markers(Some(&without)));
    // Unkeyed runs have a key of their own each.
    let unkeyed = replay_markers(None);
    assert!(keyed.is_disjoint(&unkeyed), "{keyed:?} {unkeyed:?}");
    assert!(unkeyed.is_disjoint(&replay_markers(None)));
    // Offline, `trace` with the key shows the markers the replay exported.
    let st = kascade()
        .args(["trace", "--cluster", "fx", "--resource", "secrets"])
        .args(["--namespace", "config-demo", "--name", "app-secret"])
        .args(["--snapshots", "--redaction-key-file"])
        .arg(&without)
        .arg(common::fixture_path("config", "audit.log"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&st.stdout);
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let traced = markers(&stdout);
    assert!(traced.len() >= 2, "the Secret was written twice: {stdout}");
    assert!(traced.is_subset(&keyed), "{traced:?} {keyed:?}");
}

#[test]
fn a_missing_or_short_redaction_key_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short-key");
    std::fs::write(&short, "hunter2\n").unwrap();
    let missing = dir.path().join("missing-key");
    let out = dir.path().join("out.jsonl");
    let replay = [
        "replay",
        "--output",
        &format!("otlp-json={}", out.display()),
    ];
    let trace = ["trace", "--resource", "secrets", "--name", "app-secret"];
    for (file, why) in [
        (&short, "the key has 7 bytes, at least 16 are needed"),
        (&missing, "No such file or directory"),
    ] {
        for command in [&replay[..], &trace[..], &["explain"]] {
            let st = kascade()
                .args(command)
                .arg("--redaction-key-file")
                .arg(file)
                .arg(common::fixture_path("config", "audit.log"))
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&st.stderr);
            assert_eq!(st.status.code(), Some(1), "{command:?}: {stderr}");
            let named = format!("--redaction-key-file {}", file.display());
            assert!(stderr.contains(&named), "{command:?}: {stderr}");
            assert!(stderr.contains(why), "{command:?}: {stderr}");
            assert!(!stderr.contains("hunter2"), "the key is shown: {stderr}");
            assert!(st.stdout.is_empty(), "{command:?}");
            assert!(!out.exists(), "nothing replayed");
        }
    }
}

/// A value nested as deep as the apiserver accepts, in an object's
/// annotation or field, or a log line of nothing but brackets: every
/// offline command handles the event as the collector does (the value a
/// marker, the write kept), exits 0 and loses nothing else.
#[test]
fn values_nested_as_deep_as_the_apiserver_accepts_are_markers_in_every_offline_command() {
    let dir = tempfile::tempdir().unwrap();
    let brackets = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
    for (name, deep) in [
        (
            "annotation",
            common::with_deep_annotation as fn(&str) -> String,
        ),
        ("field", common::with_deep_field),
    ] {
        let (mut lines, audit_id) = common::config_with_deep_patch(deep);
        lines.push(brackets.clone());
        let log = dir.path().join(format!("{name}.log"));
        std::fs::write(&log, lines.join("\n") + "\n").unwrap();
        let run = |args: &[&str]| succeeded_text(kascade().args(args).arg(&log));
        let out = dir.path().join(format!("{name}.jsonl"));
        let (_, stderr) = run(&[
            "replay",
            "--cluster",
            "fx",
            "--output",
            &format!("otlp-json={}", out.display()),
        ]);
        // Only the line of brackets (not an event) is skipped.
        assert!(
            stderr.contains("1 malformed lines skipped"),
            "{name}: {stderr}"
        );
        let spans = std::fs::read_to_string(&out).unwrap();
        assert!(
            spans.contains(&audit_id),
            "{name}: the deep write lost its span"
        );
        if name == "field" {
            assert!(
                stderr.contains("values nested deeper than 64 levels"),
                "{stderr}"
            );
            assert!(
                spans.contains("nested deeper than 64 levels: "),
                "{name}: no marker"
            );
        }
        let (tree, _) = run(&[
            "trace",
            "--resource",
            "configmaps",
            "--namespace",
            "config-demo",
            "--name",
            "app-config",
        ]);
        assert!(tree.contains("patch"), "{name}: {tree}");
        run(&["explain"]);
        run(&["analyze"]);
    }
}
