//! Durable intake with the real binary: a batch answered 200 (an
//! EventList, a shipper's lines, OTLP logs) survives `kill -9` and is
//! exported after the restart; a graceful stop leaves the spool empty.

mod common;

use common::free_port;

use std::collections::HashSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Collector {
    child: Child,
    webhook: String,
    admin: String,
}

fn start(spool: &Path, output: &[&str], log: &Path) -> Collector {
    let (w, a) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_kascade"))
        .args(["collect", "--cluster", "durable"])
        .args(["--listen", &format!("127.0.0.1:{w}")])
        .args(["--admin-listen", &format!("127.0.0.1:{a}")])
        .arg("--spool-dir")
        .arg(spool)
        .args(output)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    Collector {
        child,
        webhook: format!("http://127.0.0.1:{w}"),
        admin: format!("http://127.0.0.1:{a}"),
    }
}

/// Waits for /readyz (a readiness check: how long it takes does not matter,
/// only that the process is up before the test talks to it); false when the
/// process exited because a port it was given was taken meanwhile.
async fn ready(c: &mut Collector, log: &Path) -> bool {
    let client = reqwest::Client::new();
    loop {
        if let Some(status) = c.child.try_wait().unwrap() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if text.contains("Address in use") {
                return false;
            }
            panic!("kascade exited with {status}: {text}");
        }
        if let Ok(r) = client.get(format!("{}/readyz", c.admin)).send().await
            && r.status() == 200
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts a collector and waits until it is ready. A port found free may be
/// taken by another test's process before kascade binds it: then it is
/// started again on other ports.
async fn launch(spool: &Path, output: &[&str], log: &Path) -> Collector {
    for _ in 0..5 {
        let mut c = start(spool, output, log);
        if ready(&mut c, log).await {
            return c;
        }
    }
    panic!(
        "kascade found its ports taken 5 times: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// Every span of an OTLP/JSON output (one export request a line).
fn spans_in(out: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let mut spans = Vec::new();
    for line in text.lines() {
        let req: serde_json::Value = serde_json::from_str(line).unwrap();
        for rs in req["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                spans.extend(ss["spans"].as_array().unwrap().iter().cloned());
            }
        }
    }
    spans
}

fn audit_ids_in(out: &Path) -> HashSet<String> {
    let mut ids = HashSet::new();
    for s in spans_in(out) {
        for a in s["attributes"].as_array().unwrap() {
            if a["key"] == "audit.id" {
                ids.insert(a["value"]["stringValue"].as_str().unwrap().to_string());
            }
        }
    }
    ids
}

fn spool_segments(spool: &Path) -> usize {
    std::fs::read_dir(spool)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "seg")
        })
        .count()
}

#[tokio::test]
async fn a_batch_answered_200_survives_kill_9_and_is_exported_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    let log = dir.path().join("kascade.log");
    // Nothing listens on this port: export fails and retries, so the
    // accepted batch is still waiting when the process is killed.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let mut first = launch(
        &spool,
        &["--output", "otlp", "--otlp-endpoint", &nowhere],
        &log,
    )
    .await;
    let lines = common::audit_lines("deployment");
    // In each form a batch arrives in: the apiserver's EventList, a
    // shipper's lines, the OpenTelemetry Collector's OTLP logs (made here
    // from the lines as its filelog receiver makes them).
    let third = lines.len() / 3;
    let otlp = {
        use prost::Message as _;
        common::otlp_logs_of(&lines[2 * third..], None).encode_to_vec()
    };
    let client = reqwest::Client::new();
    for (path, content_type, body) in [
        (
            "audit",
            "application/json",
            common::event_list(&lines[..third]).into_bytes(),
        ),
        (
            "audit",
            "application/x-ndjson",
            lines[third..2 * third].join("\n").into_bytes(),
        ),
        ("v1/logs", "application/x-protobuf", otlp),
    ] {
        let r = client
            .post(format!("{}/{path}", first.webhook))
            .header("Content-Type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}: {}", r.text().await.unwrap());
    }
    first.child.kill().unwrap(); // SIGKILL
    first.child.wait().unwrap();
    assert!(spool_segments(&spool) > 0, "nothing was spooled");

    let out = dir.path().join("spans.jsonl");
    let out_arg = format!("otlp-json={}", out.display());
    // No restart context kept: a graceful stop then leaves no segment.
    let second = launch(
        &spool,
        &["--output", &out_arg, "--spool-context-bytes", "0"],
        &log,
    )
    .await;
    let client = reqwest::Client::new();
    // The replay is under way once the process is ready; wait until every
    // spooled batch is back in the pipeline.
    loop {
        let m = client
            .get(format!("{}/metrics", second.admin))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if m.lines()
            .any(|l| l == "kascade_spool_replayed_batches_total 3")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop(second, &log);

    let exported = audit_ids_in(&out);
    let mut missing = Vec::new();
    for line in &lines {
        let ev: serde_json::Value = serde_json::from_str(line).unwrap();
        // Writes become audit spans; reads and filtered events never do.
        let id = ev["auditID"].as_str().unwrap();
        let verb = ev["verb"].as_str().unwrap();
        let is_write = matches!(verb, "create" | "update" | "patch" | "delete");
        let ok = ev["responseStatus"]["code"].as_i64().unwrap_or(200) < 400;
        if is_write && ok && ev["objectRef"]["resource"] != "events" && !exported.contains(id) {
            missing.push(format!("{verb} {}", ev["objectRef"]));
        }
    }
    assert!(
        missing.is_empty(),
        "{} accepted writes never exported after the restart: {missing:?}",
        missing.len()
    );
    // A graceful stop exported everything: nothing is left to replay.
    assert_eq!(spool_segments(&spool), 0, "spool not released");
}

/// The link spans in an OTLP/JSON output: (span id, start time) of each.
fn links_in(out: &Path) -> Vec<(String, String)> {
    let mut links = Vec::new();
    for s in spans_in(out) {
        let is_link = s["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["key"] == "kascade.span" && a["value"]["stringValue"] == "link");
        if is_link {
            links.push((
                s["spanId"].as_str().unwrap().to_string(),
                s["startTimeUnixNano"].to_string(),
            ));
        }
    }
    links.sort();
    links
}

async fn metric(c: &Collector, name: &str) -> u64 {
    let m = reqwest::get(format!("{}/metrics", c.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    m.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

async fn post(c: &Collector, lines: &[String]) {
    let r = reqwest::Client::new()
        .post(format!("{}/audit", c.webhook))
        .header("Content-Type", "application/json")
        .body(common::event_list(lines))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

fn stop(mut c: Collector, log: &Path) {
    let st = Command::new("kill")
        .args(["-TERM", &c.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let status = c.child.wait().unwrap();
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(log).unwrap()
    );
}

/// A link span starts at the write that found the relation: sent again by
/// a later write after a restart, it would be a second span in the store.
/// The spool journals the links it released, so a kill -9 and a restart
/// send each link once, as an uninterrupted run does.
#[tokio::test]
async fn after_kill_9_no_link_exported_before_is_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kascade.log");
    let lines = common::audit_lines("deployment");
    let (early, late) = lines.split_at(lines.len() / 2);
    let output = |name: &str| {
        let path = dir.path().join(name);
        (path.clone(), format!("otlp-json={}", path.display()))
    };
    let one_worker = ["--workers", "1"];

    // Uninterrupted: both halves, one process.
    let (whole, whole_arg) = output("whole.jsonl");
    let c = launch(
        &dir.path().join("spool-whole"),
        &["--output", &whole_arg, one_worker[0], one_worker[1]],
        &log,
    )
    .await;
    post(&c, early).await;
    post(&c, late).await;
    stop(c, &log);

    // Interrupted: the first half released (exported, journaled), kill -9,
    // then the second half to the next process.
    let spool = dir.path().join("spool");
    let (first_out, first_arg) = output("first.jsonl");
    let mut first = launch(
        &spool,
        &["--output", &first_arg, one_worker[0], one_worker[1]],
        &log,
    )
    .await;
    post(&first, early).await;
    // Released once its spans are exported (a readiness check, not a wait
    // for time): the journal is written before the segments go.
    while metric(&first, "kascade_spool_bytes").await > 0
        || metric(&first, "kascade_spool_sent_links_persisted_total").await == 0
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    first.child.kill().unwrap(); // SIGKILL
    first.child.wait().unwrap();
    let (second_out, second_arg) = output("second.jsonl");
    let second = launch(
        &spool,
        &["--output", &second_arg, one_worker[0], one_worker[1]],
        &log,
    )
    .await;
    post(&second, late).await;
    stop(second, &log);

    let (a, b) = (links_in(&first_out), links_in(&second_out));
    assert!(!a.is_empty() && !b.is_empty(), "links in both runs");
    let again: Vec<_> = b
        .iter()
        .filter(|(id, _)| a.iter().any(|(x, _)| x == id))
        .collect();
    assert!(
        again.is_empty(),
        "links sent again after the restart: {again:?}"
    );
    let mut both = [a, b].concat();
    both.sort();
    assert_eq!(both, links_in(&whole), "the uninterrupted run's links");
}

/// The audit spans of the writes `audit_ids` in an OTLP/JSON output, each
/// with its trace and span id, name, times and attributes.
fn spans_of_writes(out: &Path, audit_ids: &HashSet<String>) -> Vec<String> {
    let mut spans = Vec::new();
    for s in spans_in(out) {
        let attrs = s["attributes"].as_array().unwrap();
        let of_write = attrs.iter().any(|a| {
            a["key"] == "audit.id"
                && a["value"]["stringValue"]
                    .as_str()
                    .is_some_and(|id| audit_ids.contains(id))
        });
        if of_write {
            let mut attrs: Vec<String> = attrs.iter().map(|a| a.to_string()).collect();
            attrs.sort();
            spans.push(format!(
                "{} {} {} {} {} {:?}",
                s["traceId"],
                s["spanId"],
                s["name"],
                s["startTimeUnixNano"],
                s["endTimeUnixNano"],
                attrs
            ));
        }
    }
    spans.sort();
    spans.dedup();
    spans
}

/// A restart replays the batches not yet exported after reading the
/// exported ones it kept (restart context), sending nothing for those: the
/// replayed writes, and the new ones sent as it starts, are shown as an
/// uninterrupted run shows them, diffs against the states before, causes
/// and cascades included.
#[tokio::test]
async fn a_restart_shows_the_replayed_writes_as_an_uninterrupted_run_does() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kascade.log");
    let lines = common::audit_lines("deployment");
    let (early, rest) = lines.split_at(lines.len() / 2);
    let (late, later) = rest.split_at(rest.len() / 2);
    let late_ids: HashSet<String> = rest
        .iter()
        .map(|l| {
            let ev: serde_json::Value = serde_json::from_str(l).unwrap();
            ev["auditID"].as_str().unwrap().to_string()
        })
        .collect();
    let output = |name: &str| {
        let path = dir.path().join(name);
        (path.clone(), format!("otlp-json={}", path.display()))
    };

    // Uninterrupted: both halves, one process.
    let (whole, whole_arg) = output("whole.jsonl");
    let c = launch(
        &dir.path().join("spool-whole"),
        &["--output", &whole_arg],
        &log,
    )
    .await;
    post(&c, early).await;
    post(&c, late).await;
    post(&c, later).await;
    stop(c, &log);

    // The first half exported and released by a process that stops.
    let spool = dir.path().join("spool");
    let (_, first_arg) = output("first.jsonl");
    let first = launch(&spool, &["--output", &first_arg], &log).await;
    post(&first, early).await;
    stop(first, &log);
    // The second half accepted by the next, which cannot export (nothing
    // listens there), and is killed.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let mut second = launch(
        &spool,
        &["--output", "otlp", "--otlp-endpoint", &nowhere],
        &log,
    )
    .await;
    post(&second, late).await;
    second.child.kill().unwrap(); // SIGKILL
    second.child.wait().unwrap();
    // The third replays it, after reading the first half again; what the
    // apiserver sends meanwhile waits for that.
    let (third_out, third_arg) = output("third.jsonl");
    let third = launch(&spool, &["--output", &third_arg], &log).await;
    post(&third, later).await;
    while metric(&third, "kascade_spool_replayed_batches_total").await < 1 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(metric(&third, "kascade_spool_context_batches_total").await >= 1);
    stop(third, &log);

    let (want, got) = (
        spans_of_writes(&whole, &late_ids),
        spans_of_writes(&third_out, &late_ids),
    );
    assert!(want.len() > 10, "{} spans of the second half", want.len());
    let missing: Vec<_> = want.iter().filter(|s| !got.contains(s)).collect();
    let other: Vec<_> = got.iter().filter(|s| !want.contains(s)).collect();
    assert!(
        missing.is_empty() && other.is_empty(),
        "the uninterrupted run's spans not sent after the restart:\n{}\n\nsent instead:\n{}",
        missing
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}
