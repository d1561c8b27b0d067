//! Rule directories added to the built-in rules; `rules list`.

use super::*;

#[test]
fn a_rules_directory_adds_to_the_built_in_rules() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("extra.yaml"), EXTRA_RULE).unwrap();
    let propagations = shipped_names("propagations").len();
    assert!(propagations >= 10);

    let check = common::succeeded(kascade().args(["rules", "check"]).arg(dir.path()));
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(
        out.contains(": 1 rules, 0 propagations, 0 timers OK"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "with the built-in rules: {} rules, {propagations} propagations",
            shipped_names("rules").len() + 1
        )),
        "{out}"
    );

    // The stuck rollout's trigger is the user's patch with or without the
    // extra rule: the built-in propagations still explain the controllers'
    // writes (replacing them made the scheduler's status patch the trigger).
    let out = kascade()
        .args(["explain", "--format", "json", "--rules"])
        .arg(dir.path())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/rollout-stuck/audit.log"
        ))
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        r["findings"][0]["trigger"]["write"],
        "kascade-e2e-admin patch deployments rollout-demo/web"
    );
}

#[test]
fn rules_list_names_every_effective_rule_and_where_it_comes_from() {
    let out = common::succeeded(kascade().args(["rules", "list"]));
    let listed = String::from_utf8_lossy(&out.stdout);
    for part in ["rules", "propagations", "timers"] {
        let names = shipped_names(part);
        assert!(!names.is_empty(), "{part}");
        assert!(
            listed.contains(&format!("{} ({})", part.to_uppercase(), names.len())),
            "{part}: {listed}"
        );
        for (name, file) in names {
            assert!(
                listed.lines().any(
                    |l| l.split_whitespace().next() == Some(name.as_str()) && l.contains(&file)
                ),
                "{name} from {file} not listed:\n{listed}"
            );
        }
    }

    // A propagation of a built-in's name replaces it in its place; the
    // list says so, and the count stays the built-in one.
    let (replaced, file) = shipped_names("propagations").remove(0);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ours.yaml"),
        format!("propagations:\n  - name: {replaced}\n    relation: owner\n    cause: parent\n    on: [create]\n    writes: [create]\n    writers: '^system:serviceaccount:team:.+$'\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join("extra.yaml"), EXTRA_RULE).unwrap();
    let out = common::succeeded(kascade().args(["rules", "list", "--rules"]).arg(dir.path()));
    let listed = String::from_utf8_lossy(&out.stdout);
    let propagations = shipped_names("propagations").len();
    assert!(
        listed.contains(&format!("PROPAGATIONS ({propagations})")),
        "{listed}"
    );
    let line = listed
        .lines()
        .find(|l| l.split_whitespace().next() == Some(replaced.as_str()))
        .unwrap();
    assert!(
        line.contains("ours.yaml") && line.contains(&format!("(replaces {file})")),
        "{line}"
    );
    assert!(listed.contains(&format!("RULES ({})", shipped_names("rules").len() + 1)));

    // Without the built-in rules only the directory's are left.
    let out = kascade()
        .args(["rules", "list", "--no-builtin-rules", "--rules"])
        .arg(dir.path())
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains("RULES (1)")
            && listed.contains("PROPAGATIONS (1)")
            && listed.contains("TIMERS (0)"),
        "{listed}"
    );
    // --no-builtin-rules alone would leave no rules at all.
    let out = kascade()
        .args(["rules", "list", "--no-builtin-rules"])
        .env_remove("KASCADE_RULES")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rules"));
}

#[test]
fn a_name_given_twice_in_one_rules_directory_names_both_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), EXTRA_RULE).unwrap();
    std::fs::write(dir.path().join("b.yaml"), EXTRA_RULE).unwrap();
    let out = kascade()
        .args(["rules", "check"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("b.yaml: rule \"team-dashboard\"")
            && err.contains("duplicate rule name (also in")
            && err.contains("a.yaml"),
        "{err}"
    );
}
