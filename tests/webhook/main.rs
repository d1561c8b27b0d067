//! The audit webhook's HTTP behaviour: accepted batches, gzip, bad input (400),
//! size limit (413), authentication (401) and overload (429), fed with real
//! audit events captured from the e2e control plane.

#[path = "../common/mod.rs"]
mod common;

use std::io::Write;

use std::time::Duration;

use common::collector::{metric, metrics_text, serve, spawn_server};

use kascade::app::collect::{self, CollectConfig};

use kascade::test_support::export::OutputSpec;

/// Sends raw bytes on a fresh connection and reads until the server closes
/// it or `limit` passes (the limit only matters when the behaviour is broken).
async fn raw_exchange(url: &str, request: &[u8], limit: Duration) -> (String, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.strip_prefix("http://").unwrap();
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(request).await.unwrap();
    let mut got = Vec::new();
    let closed = tokio::time::timeout(limit, async {
        let mut buf = [0u8; 4096];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok();
    (String::from_utf8_lossy(&got).into_owned(), closed)
}

/// An HTTP/2 request whose body the client is still sending when the server
/// answers: the status must reach the client (the apiserver's webhook
/// client speaks HTTP/2 and logs a bare stream error otherwise).
async fn h2_answer_while_sending(url: &str, token: Option<&str>, announced: Option<u64>) -> u16 {
    let addr = url.strip_prefix("http://").unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let mut req = axum::http::Request::post(format!("{url}/audit"));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if let Some(n) = announced {
        req = req.header("content-length", n.to_string());
    }
    let (response, mut body) = client.send_request(req.body(()).unwrap(), false).unwrap();
    // Part of a body, never its end: the server answers mid-upload.
    body.send_data(bytes::Bytes::from_static(b"{\"kind\":"), false)
        .unwrap();
    match response.await {
        Ok(r) => r.status().as_u16(),
        Err(e) => panic!("no HTTP/2 response, the stream was reset: {e}"),
    }
}

/// Posts `lines` to the webhook in batches of `size`, each answered 200.
async fn post_in_batches(url: &str, lines: &[String], size: usize) {
    let client = reqwest::Client::new();
    for chunk in lines.chunks(size) {
        let r = client
            .post(format!("{url}/audit"))
            .body(common::event_list(chunk))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
}

/// (span id, cause span id or "", role) of every audit span in an OTLP/JSON file.
fn cascade_of_spans(otlp_json_lines: &str) -> std::collections::BTreeMap<String, (String, String)> {
    let mut out = std::collections::BTreeMap::new();
    for line in otlp_json_lines.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for rs in v["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for s in ss["spans"].as_array().unwrap() {
                    let attr = |k: &str| {
                        s["attributes"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .find(|a| a["key"] == k)
                            .and_then(|a| a["value"]["stringValue"].as_str())
                            .unwrap_or("")
                            .to_string()
                    };
                    if attr("kascade.span") == "audit" && !attr("cascade.role").is_empty() {
                        out.insert(
                            s["spanId"].as_str().unwrap().to_string(),
                            (attr("cascade.cause.span_id"), attr("cascade.role")),
                        );
                    }
                }
            }
        }
    }
    out
}

/// The audit IDs of the lines that become audit spans (all but Events').
fn audit_ids_of_writes(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["objectRef"]["resource"] != "events")
        .map(|v| v["auditID"].as_str().unwrap().to_string())
        .collect()
}

/// kube-apiserver's captured traces (e2e/fixtures/slow-webhook), one
/// OTLP/JSON request per line.
fn captured_trace_lines() -> Vec<String> {
    std::fs::read_to_string(common::fixture_path(
        "slow-webhook",
        "apiserver-traces.jsonl",
    ))
    .unwrap()
    .lines()
    .map(str::to_string)
    .collect()
}

mod intake;
mod limits;
mod shards;
mod shippers;
