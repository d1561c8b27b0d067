//! Mergelogs end to end in one process: a controller's `kascade-cpid`
//! tracer merges two changes and reports it; the collector authenticates,
//! checks and shows the mergelog as spans in the CPIDs' own traces.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::collector::{metric, metrics_text, serve};
use kascade_cpid::{ChangeContext, Config, Cpid, Outcome, Tracer};
use serde_json::Value;

const TOKEN: &str = "m3rge-token";

async fn collector() -> (common::collector::Server, kascade::app::Pipeline) {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let served = serve(|c| c.webhook_token_file = Some(token)).await;
    drop(dir); // the token was read at startup
    served
}

/// The spans of the OTLP/JSON output by hex trace id.
fn spans_by_trace(out: &str) -> HashMap<String, Vec<Value>> {
    let mut by = HashMap::<String, Vec<Value>>::new();
    for line in out.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        for rs in v["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for s in ss["spans"].as_array().unwrap() {
                    by.entry(s["traceId"].as_str().unwrap().to_lowercase())
                        .or_default()
                        .push(s.clone());
                }
            }
        }
    }
    by
}

fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?["value"]["stringValue"]
        .as_str()
}

fn hex(c: Cpid) -> String {
    c.to_string().replace('-', "")
}

#[tokio::test]
async fn a_controllers_merge_becomes_spans_in_each_cpids_trace() {
    let (srv, pipeline) = collector().await;
    let tracer = Tracer::new(
        Config::new(&srv.url)
            .token(TOKEN)
            .controller("config-roller")
            .flush_interval(Duration::from_millis(10)),
    );
    let (edit, roll) = (Cpid::new_random(), Cpid::new_random());
    let mut p = tracer.propagation();
    p.observe_context(ChangeContext::new(edit))
        .observe_context(ChangeContext::new(roll));
    let decision = p.decide();
    assert_eq!(decision.outcome, Outcome::Merged);
    let merged = decision.cpid().unwrap();
    tracer.flush().await;
    let stats = tracer.stats();
    assert_eq!(
        (stats.sent, stats.dropped_undeliverable),
        (1, 0),
        "{stats:?}"
    );

    // The same mergelog again (a retry after a lost answer) is shown once.
    let body = serde_json::to_string(&kascade_cpid::MergelogBatch {
        mergelogs: vec![decision.mergelog.clone().unwrap()],
    })
    .unwrap();
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{}/cpid/mergelogs", srv.url))
        .bearer_auth(TOKEN)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Processed once the duplicate is counted (polled: no timing assumed).
    loop {
        let m = metrics_text(&srv.url).await;
        if metric(&m, "kascade_mergelogs_duplicate_total") == 1 {
            assert_eq!(metric(&m, "kascade_mergelogs_accepted_total"), 2);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pipeline.finish().await;

    let by_trace = spans_by_trace(&std::fs::read_to_string(&srv.out).unwrap());
    let merge = &by_trace[&hex(merged)];
    assert_eq!(merge.len(), 1, "shown once");
    assert_eq!(merge[0]["name"], "config-roller merged 2 changes");
    assert_eq!(
        attr(&merge[0], "cpid.sources"),
        Some(format!("{edit},{roll}").as_str())
    );
    for source in [edit, roll] {
        let into = &by_trace[&hex(source)];
        assert_eq!(into.len(), 1);
        assert_eq!(
            attr(&into[0], "cpid.merged_into"),
            Some(merged.to_string().as_str())
        );
        assert_eq!(attr(&into[0], "kascade.span"), Some("merged_into"));
    }
}

#[tokio::test]
async fn bad_mergelogs_are_refused_naming_the_item_and_unauthenticated_ones_401() {
    let (srv, _pipeline) = collector().await;
    let client = reqwest::Client::new();
    let post = |token: Option<&str>, body: String| {
        let mut r = client
            .post(format!("{}/cpid/mergelogs/other-cluster", srv.url))
            .body(body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    let (a, n) = (Cpid::new_random(), Cpid::new_random());
    let cycle = format!(
        r#"{{"mergelogs":[{{"cpid":"{n}","sources":["{a}"],"time":"2026-11-24T05:00:00Z"}},{{"cpid":"{n}","sources":["{n}"],"time":"2026-11-24T05:00:00Z"}}]}}"#
    );
    let r = post(Some(TOKEN), cycle.clone()).await.unwrap();
    assert_eq!(r.status(), 400);
    let msg = r.text().await.unwrap();
    assert!(
        msg.starts_with("mergelogs[1]") && msg.contains("cycle"),
        "{msg}"
    );

    let r = post(Some(TOKEN), "{\"mergelogs\": 5}".into())
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(
        r.text()
            .await
            .unwrap()
            .starts_with("body is not a mergelog batch")
    );

    let r = post(None, cycle).await.unwrap();
    assert_eq!(r.status(), 401);

    let m = metrics_text(&srv.url).await;
    assert_eq!(metric(&m, "kascade_mergelogs_rejected_total"), 2);
    assert_eq!(metric(&m, "kascade_mergelogs_accepted_total"), 0);
}
