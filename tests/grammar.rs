//! One grammar across the subcommands, as a user types it: objects named
//! the same way everywhere (`-n`, `--object RES/NAME`, kubectl's resource
//! names), help texts true for their subcommand, refused combinations and
//! bad inputs said plainly, `trace --format json`, and `replay` without a
//! receiver. Every case runs the binary on the captured fixtures.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Output};

use serde_json::Value;

fn kascade() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kascade"));
    cmd.env("NO_COLOR", "1");
    cmd
}

fn run(args: &[&str]) -> Output {
    kascade().args(args).output().unwrap()
}

fn stdout_of(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "kascade {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The error of a run that must fail (exit 1), from stderr.
fn error_of(args: &[&str]) -> String {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "kascade {args:?}: {stderr}");
    stderr
}

fn fixture(scenario: &str) -> String {
    common::fixture_path(scenario, "audit.log")
        .display()
        .to_string()
}

#[test]
fn trace_takes_the_object_as_kubectl_names_it_and_as_explain_does() {
    let log = fixture("deployment");
    let expected = stdout_of(&[
        "trace",
        &log,
        "--resource",
        "deployments",
        "--name",
        "hello",
        "--namespace",
        "default",
    ]);
    assert!(expected.contains("deployments default/hello"), "{expected}");
    for resource in [
        "deploy",
        "deployment",
        "Deployment",
        "DEPLOYMENTS",
        "deployments.apps",
        "deploy.apps",
    ] {
        let by_flags = stdout_of(&[
            "trace",
            &log,
            "--resource",
            resource,
            "--name",
            "hello",
            "-n",
            "default",
        ]);
        assert_eq!(by_flags, expected, "--resource {resource}");
        let object = format!("{resource}/hello");
        let by_object = stdout_of(&["trace", &log, "--object", &object, "-n", "default"]);
        assert_eq!(by_object, expected, "--object {object}");
    }
    // Without its namespace, the object is found where it is, as explain
    // finds it.
    assert_eq!(
        stdout_of(&["trace", &log, "--object", "deploy/hello"]),
        expected
    );
    // A name in several namespaces is the user's to choose.
    let e = error_of(&[
        "trace",
        &fixture("rollout-stuck"),
        &fixture("service"),
        "--object",
        "deploy/web",
    ]);
    assert!(
        e.contains("deployments web is in 2 namespaces (rollout-demo, svc-demo): pick one with -n"),
        "{e}"
    );
    // In the wrong namespace, the right one is one flag away.
    let e = error_of(&["trace", &log, "--object", "deploy/hello", "-n", "nothere"]);
    assert!(
        e.contains(
            "no deployments nothere/hello in the audit log (cluster default); there is one with -n default"
        ),
        "{e}"
    );
    // A ReplicaSet the fixture's Deployment created, by its short name.
    let rs = common::created("deployment", "replicasets")
        .into_iter()
        .next()
        .unwrap();
    for object in [
        format!("rs/{rs}"),
        format!("replicasets.apps/{rs}"),
        format!("ReplicaSet/{rs}"),
    ] {
        let text = stdout_of(&["trace", &log, "--object", &object, "-n", "default"]);
        assert!(
            text.contains(&format!("replicasets default/{rs}  [owner]  ◀ searched")),
            "{object}: {text}"
        );
    }
}

#[test]
fn a_resource_of_the_audit_log_resolves_by_its_plural_singular_and_kind() {
    // `ipaddresses.networking.k8s.io` is not among the built-in resources:
    // it resolves because the audit log holds it, as a custom resource would.
    let log = fixture("service");
    let name = common::created("service", "ipaddresses")
        .into_iter()
        .next()
        .unwrap();
    for resource in [
        "ipaddresses",
        "ipaddress",
        "IPAddress",
        "ipaddresses.networking.k8s.io",
    ] {
        let text = stdout_of(&["trace", &log, "--resource", resource, "--name", &name]);
        assert!(
            text.contains(&format!("ipaddresses {name}")),
            "--resource {resource}: {text}"
        );
    }
}

#[test]
fn an_unknown_resource_is_refused_with_the_close_names_by_every_subcommand() {
    let log = fixture("deployment");
    for args in [
        vec!["trace", &log, "--resource", "deplyo", "--name", "hello"],
        vec!["trace", &log, "--object", "deplyo/hello", "-n", "default"],
        vec!["explain", &log, "--object", "deplyo/hello", "-n", "default"],
        vec!["analyze", &log, "--object", "deplyo/hello", "-n", "default"],
    ] {
        let e = error_of(&args);
        assert!(e.contains("unknown resource \"deplyo\""), "{args:?}: {e}");
        assert!(e.contains("did you mean deployments.apps"), "{args:?}: {e}");
    }
    // Close names come from the audit log too.
    let e = error_of(&[
        "trace",
        &fixture("service"),
        "--resource",
        "ipadress",
        "--name",
        "x",
    ]);
    assert!(e.contains("ipaddresses.networking.k8s.io"), "{e}");
}

/// `analyze --format json`'s count of an edge class.
fn edge_count(report: &Value, edge: &str) -> u64 {
    report["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["edge"] == edge)
        .map_or(0, |e| e["count"].as_u64().unwrap())
}

#[test]
fn analyze_counts_only_the_cascades_of_the_object_it_is_given() {
    let log = fixture("deployment");
    let all: Value =
        serde_json::from_str(&stdout_of(&["analyze", &log, "--format", "json"])).unwrap();
    let pods = common::created("deployment", "pods");
    let replicasets = common::created("deployment", "replicasets");
    assert!(replicasets.len() >= 2, "{replicasets:?}");
    // The rollout's ReplicaSet: its cascades (the rollout's) create its
    // Pods and not the first ReplicaSet's, which the first cascade made.
    let latest = common::audit_lines("deployment")
        .iter()
        .rev()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "replicasets"
                && e["responseStatus"]["code"] == 201
        })
        .map(|e| {
            e["responseObject"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .unwrap();
    for rs in &replicasets {
        let object = format!("rs/{rs}");
        let one: Value = serde_json::from_str(&stdout_of(&[
            "analyze", &log, "--format", "json", "-n", "default", "--object", &object,
        ]))
        .unwrap();
        if *rs == latest {
            let its_pods = pods
                .iter()
                .filter(|p| p.starts_with(&format!("{rs}-")))
                .count();
            assert_eq!(
                edge_count(&one, "replicasets → pods create"),
                its_pods as u64,
                "{object}"
            );
        }
        assert_eq!(edge_count(&one, "deployments → replicasets create"), 1);
        assert!(
            one["changes"].as_u64() < all["changes"].as_u64(),
            "{object}"
        );
        assert!(one["out_of_scope"].as_u64().unwrap() > 0, "{object}");
    }
    assert_eq!(
        edge_count(&all, "replicasets → pods create"),
        pods.len() as u64
    );
    let e = error_of(&["analyze", &log, "-n", "other", "--object", "deploy/hello"]);
    assert!(e.contains("--object"), "{e}");
}

#[test]
fn each_help_shows_only_flags_that_apply_and_says_what_they_do_there() {
    let help = |sub: &str| stdout_of(&[sub, "--help"]);
    let trace = help("trace");
    for frontend_only in ["--concurrency", "--default-scope", "Raw reads"] {
        assert!(
            !trace.contains(frontend_only),
            "trace --help: {frontend_only}"
        );
    }
    for own in [
        "--object",
        "-n, --namespace",
        "--window",
        "--max-trace-bytes",
    ] {
        assert!(trace.contains(own), "trace --help lacks {own}");
    }
    assert!(!trace.contains("collector uses"), "trace --help: {trace}");
    let frontend = help("frontend");
    for flag in [
        "--concurrency",
        "--default-scope",
        "--window",
        "--max-depth",
    ] {
        assert!(frontend.contains(flag), "frontend --help lacks {flag}");
    }
    // 429 is the webhook's answer: only `collect` has a webhook.
    for sub in ["replay", "trace", "analyze", "explain", "frontend"] {
        assert!(!help(sub).contains("429"), "{sub} --help speaks of 429");
    }
    let replay = help("replay");
    assert!(replay.contains("a full queue pauses reading"), "{replay}");
    assert!(!replay.contains("replicas and restarts"), "{replay}");
    assert!(help("analyze").contains("--object <RESOURCE/NAME>"));
    assert!(help("collect").contains("429"));
}

#[test]
fn a_display_mode_text_or_json_cannot_show_is_refused_not_replaced() {
    let log = fixture("deployment");
    let object = ["--object", "deploy/hello", "-n", "default"];
    for mode in ["tree", "timeline", "grouped"] {
        let mut args = vec!["trace", log.as_str(), "--mode", mode];
        args.extend(object);
        let e = error_of(&args);
        assert!(
            e.contains(&format!(
                "--mode {mode} cannot be shown as --format text, which shows tracing and cascade"
            )),
            "{e}"
        );
        args.extend(["--format", "otlp-json"]);
        stdout_of(&args);
    }
    let mut args = vec![
        "trace",
        log.as_str(),
        "--format",
        "json",
        "--mode",
        "cascade",
    ];
    args.extend(object);
    assert!(error_of(&args).contains("which shows tracing"));
    let mut args = vec!["trace", log.as_str(), "--mode", "cascade"];
    args.extend(object);
    stdout_of(&args);
}

#[test]
fn a_line_that_is_no_audit_event_is_named_by_what_it_is_and_the_rest_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let lines = common::audit_lines("deployment");
    // An Event as `kubectl get events -o json` lists it, with the list's
    // kind and apiVersion on the item, as one Event per line would be.
    let events: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixture_path("deployment", "events.json")).unwrap(),
    )
    .unwrap();
    let mut event = events["items"][0].clone();
    event["kind"] = "Event".into();
    event["apiVersion"] = "v1".into();
    let mut text = format!("{}\n", lines[0]);
    for bad in [
        "[1,2,3]".to_string(),
        "42".to_string(),
        "\"audit\"".to_string(),
        "null".to_string(),
        "{\"a\":1}".to_string(),
        event.to_string(),
        "{\"truncated\": ".to_string(),
    ] {
        text.push_str(&bad);
        text.push('\n');
    }
    for l in &lines[1..] {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(&log, text).unwrap();
    let at = |n: usize| format!("{}:{n}: ", log.display());
    let expected = [
        (
            2,
            "expected a JSON object, an audit event (kind \"Event\", apiVersion audit.k8s.io/v1); found an array",
        ),
        (3, "found a number"),
        (4, "found a string"),
        (5, "found null"),
        (
            6,
            "a JSON object without kind and apiVersion where an audit event",
        ),
        (
            7,
            "a Kubernetes Event (kind \"Event\", apiVersion v1) where an audit event (kind \"Event\", apiVersion audit.k8s.io/v1) was expected; Events go in `kascade explain --events`",
        ),
        (8, "not valid JSON"),
    ];
    let log = log.display().to_string();
    let out_file = dir.path().join("spans.jsonl");
    let output = format!("otlp-json={}", out_file.display());
    for args in [
        vec!["trace", &log, "--object", "deploy/hello", "-n", "default"],
        vec!["analyze", &log],
        vec!["replay", &log, "--output", &output],
    ] {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The good lines around them are read.
        assert!(out.status.success(), "{args:?}: {stderr}");
        for (line, what) in expected {
            let said = stderr
                .lines()
                .find(|l| l.contains(&at(line)))
                .unwrap_or_else(|| panic!("{args:?}: line {line} not named: {stderr}"));
            assert!(said.contains(what), "{args:?}: {said}");
        }
    }
}

#[test]
fn an_audit_log_given_as_events_is_named_as_one() {
    let log = fixture("deployment");
    let e = error_of(&["explain", &log, "--events", &log]);
    assert!(
        e.contains(&format!(
            "{log}:1: an audit event (kind \"Event\", apiVersion audit.k8s.io/v1) where a Kubernetes Event"
        )),
        "{e}"
    );
    assert!(e.contains("audit logs go in FILES, not --events"), "{e}");
}

#[test]
fn an_events_file_with_items_that_are_no_event_is_read_around_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = fixture("rollout-stuck");
    let events: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixture_path("rollout-stuck", "events.json")).unwrap(),
    )
    .unwrap();
    // One Event per line (`kubectl get events -o json | jq -c '.items[]'`),
    // with an audit event and an array among them.
    let items: Vec<String> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| serde_json::to_string(item).unwrap())
        .collect();
    let audit = common::audit_lines("rollout-stuck")[0].clone();
    let mut text = format!("{}\n{audit}\n[1,2,3]\nnot json\n", items[0]);
    for item in &items[1..] {
        text += &format!("{item}\n");
    }
    let mixed = dir.path().join("events.jsonl");
    std::fs::write(&mixed, text).unwrap();
    let mixed = mixed.display().to_string();

    let out = run(&["explain", &log, "--events", &mixed]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for (line, what) in [
        (
            2,
            "an audit event (kind \"Event\", apiVersion audit.k8s.io/v1) where a Kubernetes Event",
        ),
        (3, "an array where a Kubernetes Event"),
        (4, "not an Event list or JSON line"),
    ] {
        let said = stderr
            .lines()
            .find(|l| l.starts_with(&format!("{mixed}:{line}: ")))
            .unwrap_or_else(|| panic!("line {line} not named: {stderr}"));
        assert!(said.contains(what) && said.ends_with("(skipped)"), "{said}");
    }
    // Every Event read: the findings are those of the whole list.
    let findings = |stdout: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(stdout)
            .lines()
            .filter(|l| l.starts_with("ERROR") || l.starts_with("WARN") || l.starts_with("NOTE"))
            .map(str::to_string)
            .collect()
    };
    let whole = run(&[
        "explain",
        &log,
        "--events",
        &common::fixture_path("rollout-stuck", "events.json")
            .display()
            .to_string(),
    ]);
    assert!(!findings(&whole.stdout).is_empty());
    assert_eq!(findings(&out.stdout), findings(&whole.stdout));
}

/// The writes of `resource`/`name` in a fixture as (verb, subresource, user, code, auditID),
/// read from the audit log itself.
fn audit_writes(
    scenario: &str,
    resource: &str,
    name: &str,
) -> BTreeSet<(String, String, String, i64, String)> {
    common::audit_lines(scenario)
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && ["create", "update", "patch", "delete"].contains(&e["verb"].as_str().unwrap())
                && e["objectRef"]["resource"] == resource
                && (e["objectRef"]["name"] == name
                    || e["responseObject"]["metadata"]["name"] == name)
        })
        .map(|e| {
            (
                e["verb"].as_str().unwrap().to_string(),
                e["objectRef"]["subresource"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                e["user"]["username"].as_str().unwrap().to_string(),
                e["responseStatus"]["code"].as_i64().unwrap(),
                e["auditID"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn json_writes(object: &Value) -> BTreeSet<(String, String, String, i64, String)> {
    object["writes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["verb"].as_str().unwrap().to_string(),
                w["subresource"].as_str().unwrap_or("").to_string(),
                w["user"].as_str().unwrap().to_string(),
                w["code"].as_i64().unwrap(),
                w["audit_id"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn trace_json_is_the_object_tree_with_the_audit_logs_writes_and_events() {
    let log = fixture("deployment");
    let doc: Value = serde_json::from_str(&stdout_of(&[
        "trace",
        &log,
        "--object",
        "deploy/hello",
        "-n",
        "default",
        "--format",
        "json",
    ]))
    .unwrap();
    assert_eq!(doc["schema"], "kascade.trace/v1");
    assert!(doc["notes"].is_array());
    let root = &doc["root"];
    assert_eq!(
        (
            &root["group"],
            &root["resource"],
            &root["namespace"],
            &root["name"]
        ),
        (
            &"apps".into(),
            &"deployments".into(),
            &"default".into(),
            &"hello".into()
        )
    );
    assert_eq!(root["searched"], true);
    assert!(root["link_class"].is_null());
    assert_eq!(
        json_writes(root),
        audit_writes("deployment", "deployments", "hello")
    );
    // The created Deployment's uid, as the apiserver answered.
    let uid = common::audit_lines("deployment")
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "deployments"
                && e["responseStatus"]["code"] == 201
        })
        .map(|e| e["responseObject"]["metadata"]["uid"].clone())
        .unwrap();
    assert_eq!(root["uid"], uid);
    // Its ReplicaSets below it, owned, each with the Pods it created.
    let children: BTreeSet<String> = root["children"]
        .as_array()
        .unwrap()
        .iter()
        .inspect(|c| assert_eq!(c["link_class"], "owner"))
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(children, common::created("deployment", "replicasets"));
    let pods = common::created("deployment", "pods");
    for rs in root["children"].as_array().unwrap() {
        let name = rs["name"].as_str().unwrap();
        assert_eq!(rs["searched"], false);
        assert_eq!(
            json_writes(rs),
            audit_writes("deployment", "replicasets", name)
        );
        let its_pods: BTreeSet<&str> = rs["children"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["resource"] == "pods")
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        let created: BTreeSet<&str> = pods
            .iter()
            .map(String::as_str)
            .filter(|p| p.starts_with(&format!("{name}-")))
            .collect();
        assert_eq!(its_pods, created, "{name}");
        // The controller's Events about it: one SuccessfulCreate per Pod.
        let said: BTreeSet<String> = rs["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["reason"] == "SuccessfulCreate")
            .inspect(|e| {
                assert_eq!(e["type"], "Normal");
                assert_eq!(e["component"], "replicaset-controller");
            })
            .map(|e| e["message"].as_str().unwrap().to_string())
            .collect();
        let expected: BTreeSet<String> = created
            .iter()
            .map(|p| format!("Created pod: {p}"))
            .collect();
        assert_eq!(said, expected, "{name}");
    }
    // Diffs: the ReplicaSets' status.replicas as their controller counted.
    let scaled = root["children"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rs| rs["writes"].as_array().unwrap())
        .flat_map(|w| w["diff"].as_array().unwrap())
        .any(|d| d["path"] == "status.replicas" && d["op"].is_string());
    assert!(scaled, "no status.replicas change in {root}");
    // Times are RFC 3339.
    for w in root["writes"].as_array().unwrap() {
        let t = w["time"].as_str().unwrap();
        assert!(humantime::parse_rfc3339(t).is_ok(), "{t}");
    }
}

#[test]
fn replay_without_a_receiver_fails_naming_the_address() {
    // A port nothing listens on: bound, then closed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let e = error_of(&[
        "replay",
        &fixture("deployment"),
        "--otlp-endpoint",
        &endpoint,
        "--otlp-wait",
        "2s",
    ]);
    assert!(
        e.contains(&format!(
            "cannot reach the OTLP receiver at {endpoint} (--otlp-endpoint)"
        )),
        "{e}"
    );
    assert!(e.contains("--otlp-wait"), "{e}");
}

#[test]
fn replay_stops_when_its_receiver_stops_answering() {
    // A receiver whose port still takes connections but whose process
    // answers none (stuck, or gone behind a proxy): every connection is
    // accepted and closed at once. A plain TCP peer, not a fake receiver.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kascade"))
        .args([
            "replay",
            &fixture("deployment"),
            "--otlp-endpoint",
            &endpoint,
        ])
        .args(["--otlp-wait", "2s"])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut pipe, &mut text).unwrap();
        text
    });
    // Bounded: 2 s of retries, not --export-retry-for (5 minutes) for each
    // batch. The limit is far above the 2 s, for a busy machine.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("replay still retrying after 2 minutes");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let stderr = stderr.join().unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the OTLP receiver at {endpoint} (--otlp-endpoint) stopped taking spans:"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("after 2s of retries (0 were)"), "{stderr}");
}
