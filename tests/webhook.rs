//! The audit webhook's HTTP behaviour: accepted batches, gzip, bad input (400),
//! size limit (413), authentication (401) and overload (429), fed with real
//! audit events captured from the e2e control plane.

mod common;

use std::io::Write;
use std::time::Duration;

use common::collector::{metric, metrics_text, serve, spawn_server};
use kascade::app::collect::{self, CollectConfig};
use kascade::test_support::export::OutputSpec;

#[tokio::test]
async fn accepts_a_real_batch_plain_and_gzipped() {
    let (srv, pipeline) = serve(|_| {}).await;
    let lines = common::audit_lines("deployment");
    let half = lines.len() / 2;
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{}/audit", srv.url))
        .body(common::event_list(&lines[..half]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(common::event_list(&lines[half..]).as_bytes())
        .unwrap();
    let r = client
        .post(format!("{}/audit/other-cluster", srv.url))
        .header("Content-Encoding", "gzip")
        .body(gz.finish().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    let m = metrics_text(&srv.url).await;
    assert_eq!(
        metric(
            &m,
            "kascade_audit_events_received_total{source=\"webhook\"}"
        ),
        lines.len() as u64
    );
    // Both batches were on disk before their 200; once exported they are
    // released while kascade runs (polled: no assumption about speed).
    assert!(metric(&m, "kascade_spool_flushes_total") >= 1, "{m}");
    loop {
        let m = metrics_text(&srv.url).await;
        if m.lines().any(|l| l == "kascade_spool_bytes 0") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pipeline.finish().await;
    let out = std::fs::read_to_string(&srv.out).unwrap();
    assert!(
        out.contains("\"stringValue\":\"test\""),
        "cluster from --cluster"
    );
    assert!(
        out.contains("\"stringValue\":\"other-cluster\""),
        "cluster from the path"
    );
}

#[tokio::test]
async fn bad_input_is_a_400_naming_the_problem_and_keeps_good_items() {
    let (srv, pipeline) = serve(|_| {}).await;
    let client = reqwest::Client::new();
    let post = |body: String| client.post(format!("{}/audit", srv.url)).body(body).send();

    let r = post("{not json".into()).await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("not a JSON EventList"));

    let r = post(r#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1beta1","items":[]}"#.into())
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("audit.k8s.io/v1beta1"));

    let r = post(r#"{"kind":"PodList","apiVersion":"audit.k8s.io/v1","items":[]}"#.into())
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("PodList"));

    let lines = common::audit_lines("deployment");
    let good: Vec<String> = lines.iter().take(3).cloned().collect();
    let mixed = vec![
        good[0].clone(),
        r#"{"kind":"Event","auditID":"x"}"#.to_string(),
        good[1].clone(),
        good[2].clone(),
    ];
    let r = post(common::event_list(&mixed)).await.unwrap();
    assert_eq!(r.status(), 400);
    let text = r.text().await.unwrap();
    assert!(text.contains("items[1]"), "{text}");
    assert!(text.contains("accepted"), "{text}");

    let r = client
        .post(format!("{}/audit/bad%20name", srv.url))
        .body(common::event_list(&good))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    let m = metrics_text(&srv.url).await;
    assert_eq!(
        metric(
            &m,
            "kascade_audit_events_rejected_total{reason=\"malformed\"}"
        ),
        4
    );
    pipeline.finish().await;
    // The three good items of the mixed batch became spans.
    let out = std::fs::read_to_string(&srv.out).unwrap();
    for line in &good {
        let id = serde_json::from_str::<serde_json::Value>(line).unwrap()["auditID"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(out.contains(&id), "audit span of {id} missing");
    }
}

#[tokio::test]
async fn oversized_body_is_413_and_missing_token_is_401() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let (srv, _p) = serve(|c| {
        c.max_body_bytes = 2048;
        c.webhook_token_file = Some(token);
    })
    .await;
    let client = reqwest::Client::new();
    let lines = common::audit_lines("deployment");
    let body = common::event_list(&lines[..5]);
    assert!(body.len() > 2048);
    let r = client
        .post(format!("{}/audit", srv.url))
        .bearer_auth("s3cret-token")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);

    let small = common::event_list(&[]);
    let r = client
        .post(format!("{}/audit", srv.url))
        .body(small.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = client
        .post(format!("{}/audit", srv.url))
        .bearer_auth("wrong-token!")
        .body(small.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = client
        .post(format!("{}/audit", srv.url))
        .bearer_auth("s3cret-token")
        .body(small.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Schemes are case-insensitive (RFC 7235); the token is not.
    for (header, status) in [
        ("bearer s3cret-token", 200),
        ("BEARER  s3cret-token", 200),
        ("Basic s3cret-token", 401),
        ("Bearer S3CRET-TOKEN", 401),
        ("Bearers3cret-token", 401),
    ] {
        let r = client
            .post(format!("{}/audit", srv.url))
            .header("Authorization", header)
            .body(small.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{header}");
    }

    // A gzip bomb is cut at the limit too.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&vec![b' '; 1 << 20]).unwrap();
    let r = client
        .post(format!("{}/audit", srv.url))
        .bearer_auth("s3cret-token")
        .header("Content-Encoding", "gzip")
        .body(gz.finish().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
}

#[tokio::test]
async fn a_full_queue_answers_429_and_readyz_turns_unready() {
    // An OTLP "receiver" that accepts connections and never answers: the
    // exporter stalls, the workers wait on it, and the intake fills up.
    let sink = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", sink.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let mut config = CollectConfig::default()
        .cluster("test")
        .spool_dir(dir.path());
    config.export = config.export.output(OutputSpec::Otlp);
    config.export.otlp_endpoint = Some(endpoint);
    config.export.otlp_timeout = Some(Duration::from_secs(60));
    config.export.queue_size = 1;
    config.export.batch_size = 1;
    config.pipeline = config.pipeline.queue_size(8).workers(1);
    let (apps, _pipeline) = collect::build(&config).unwrap();
    let url = spawn_server(apps.audit.merge(apps.admin), config.header_read_timeout);
    let client = reqwest::Client::new();
    let lines = common::audit_lines("deployment");
    // One event per batch: the 429 then means the queue is really full.
    let writes: Vec<String> = lines.into_iter().take(1).collect();
    let mut accepted = 0;
    let mut refused = None;
    for _ in 0..200 {
        let r = client
            .post(format!("{url}/audit"))
            .body(common::event_list(&writes))
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            200 => accepted += 1,
            429 => {
                assert_eq!(r.headers().get("retry-after").unwrap(), "1");
                refused = Some(r.text().await.unwrap());
                break;
            }
            other => panic!("unexpected status {other}: {}", r.text().await.unwrap()),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let msg = refused.expect("the webhook never answered 429 although the exporter is stalled");
    assert!(msg.contains("queue is full"), "{msg}");
    assert!(accepted >= 1);
    let ready = client.get(format!("{url}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503, "not ready while the queue is full");
    drop(dir);
}

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

#[tokio::test]
async fn a_wrong_token_is_refused_before_the_body_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let (srv, _pipeline) = serve(|c| c.webhook_token_file = Some(token)).await;
    // Announces 31 MiB and sends none of it: the answer must not wait for it.
    let announced = b"POST /audit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong-token!\r\n\
Content-Type: application/json\r\nContent-Length: 32505856\r\n\r\n";
    let (reply, _) = raw_exchange(&srv.url, announced, Duration::from_secs(30)).await;
    assert!(reply.starts_with("HTTP/1.1 401"), "{reply}");
    // A chunked upload without any token: 401 as well, not 413 or a read.
    let chunked =
        b"POST /audit/c1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n";
    let (reply, _) = raw_exchange(&srv.url, chunked, Duration::from_secs(30)).await;
    assert!(reply.starts_with("HTTP/1.1 401"), "{reply}");
}

#[tokio::test]
async fn slow_clients_are_cut_off_by_the_read_timeouts() {
    let (srv, _pipeline) = serve(|c| {
        c.header_read_timeout = Duration::from_secs(1);
        c.body_read_timeout = Duration::from_secs(1);
    })
    .await;
    // Headers that never end: the connection is closed.
    let (reply, closed) = raw_exchange(
        &srv.url,
        b"POST /audit HTTP/1.1\r\nHost: x\r\nX-Slow: a",
        Duration::from_secs(60),
    )
    .await;
    assert!(
        closed,
        "a connection with unfinished headers stayed open: {reply}"
    );
    // An idle keep-alive connection is closed too.
    let (_, closed) = raw_exchange(&srv.url, b"", Duration::from_secs(60)).await;
    assert!(closed, "an idle connection stayed open");
    // So is a keep-alive connection that goes quiet after a request.
    let (reply, closed) = raw_exchange(
        &srv.url,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(60),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(closed, "an idle keep-alive connection stayed open");
    // A body that stops half way: 408.
    let (reply, closed) = raw_exchange(
        &srv.url,
        b"POST /audit HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"kind\":",
        Duration::from_secs(60),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("--body-read-timeout"), "{reply}");
    assert!(closed || reply.contains("408"));
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

#[tokio::test]
async fn http2_clients_get_the_refusal_not_a_stream_reset() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let (srv, _pipeline) = serve(|c| {
        c.webhook_token_file = Some(token);
        c.max_body_bytes = 4096;
    })
    .await;
    for _ in 0..20 {
        assert_eq!(h2_answer_while_sending(&srv.url, None, None).await, 401);
        assert_eq!(
            h2_answer_while_sending(&srv.url, Some("s3cret-token"), Some(1 << 20)).await,
            413
        );
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

#[tokio::test]
async fn writes_processed_by_different_shards_find_the_same_causes_as_in_file_order() {
    // Four shards: a Pod's write and its ReplicaSet's change are processed
    // in parallel; each write was noted as a candidate cause on arrival.
    let (srv, pipeline) = serve(|c| c.pipeline = c.pipeline.clone().workers(4)).await;
    let lines = common::audit_lines("deployment");
    post_in_batches(&srv.url, &lines, 25).await;
    pipeline.finish().await;
    let live = cascade_of_spans(&std::fs::read_to_string(&srv.out).unwrap());

    // The same lines through the processor alone, one at a time.
    let records = common::changes_of_lines(lines, "test").await;
    let names: std::collections::HashMap<String, String> = records
        .iter()
        .map(|c| {
            (
                c.span.span_hex(),
                format!(
                    "{} {} {} {}/{}",
                    c.user, c.verb, c.subresource, c.object.resource, c.object.name
                ),
            )
        })
        .collect();
    let in_order: std::collections::BTreeMap<String, (String, String)> = records
        .iter()
        .filter(|c| c.source == kascade::test_support::pipeline::ChangeSource::Audit)
        .map(|c| {
            let cause = c
                .cause
                .as_ref()
                .map(|k| k.span.span_hex())
                .unwrap_or_default();
            (c.span.span_hex(), (cause, c.role.as_str().to_string()))
        })
        .collect();
    assert!(in_order.values().any(|(cause, _)| !cause.is_empty()));
    let differ: Vec<_> = in_order
        .iter()
        .filter(|(span, v)| live.get(*span) != Some(v))
        .map(|(span, v)| {
            let live = live
                .get(span)
                .map(|l| names.get(&l.0).cloned().unwrap_or_default());
            format!(
                "{}: in order {:?}, live {live:?}",
                names[span],
                names.get(&v.0)
            )
        })
        .collect();
    assert!(
        differ.is_empty(),
        "{} of {} differ: {differ:#?}",
        differ.len(),
        in_order.len()
    );
}

#[tokio::test]
async fn writes_stamped_at_the_same_instant_take_causes_only_from_earlier_arrivals() {
    // An apiserver whose clock is coarse (or a log whose stamps were
    // rounded): every write received and completed at one instant. Which
    // came first is then known only from arrival order; a write that arrived
    // later must neither be chosen as a cause nor waited for (it may be
    // queued behind the effect, in the same shard).
    let (srv, pipeline) = serve(|c| c.pipeline = c.pipeline.clone().workers(2)).await;
    let lines: Vec<String> = common::audit_lines("deployment")
        .iter()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            for k in ["requestReceivedTimestamp", "stageTimestamp"] {
                v[k] = "2026-11-26T00:00:00.000000Z".into();
            }
            v.to_string()
        })
        .collect();
    post_in_batches(&srv.url, &lines, 50).await;
    pipeline.finish().await;
    let metrics = metrics_text(&srv.url).await;
    let live = cascade_of_spans(&std::fs::read_to_string(&srv.out).unwrap());

    // Arrival order of every write's span: the same lines one at a time.
    let records = common::changes_of_lines(lines, "test").await;
    let arrival: std::collections::HashMap<String, usize> = records
        .iter()
        .enumerate()
        .map(|(i, c)| (c.span.span_hex(), i))
        .collect();
    let effects: Vec<_> = live
        .iter()
        .filter(|(_, (cause, _))| !cause.is_empty())
        .collect();
    assert!(
        effects.len() > 10,
        "writes still find causes that arrived first: {}",
        effects.len()
    );
    for (span, (cause, _)) in effects {
        assert!(
            arrival[cause] < arrival[span],
            "the write at {} caused by the one that arrived later, at {}",
            arrival[span],
            arrival[cause]
        );
    }
    assert_eq!(
        metric(&metrics, "kascade_cascade_resolve_timeouts_total"),
        0,
        "no effect waited for its cause's cascade"
    );
}

/// The collector's side of a value nested as deep as the apiserver accepts:
/// the batch is answered 200, the value becomes a marker in the write's
/// span, it is counted, and the collector goes on (a body of nothing but
/// brackets is a 400). Each of these aborted the process before.
#[tokio::test]
async fn values_nested_as_deep_as_the_apiserver_accepts_are_markers_and_the_collector_goes_on() {
    let (srv, pipeline) = serve(|_| {}).await;
    let client = reqwest::Client::new();
    let post = |body: String| client.post(format!("{}/audit", srv.url)).body(body).send();
    let mut ids = Vec::new();
    for deep in [
        common::with_deep_annotation as fn(&str) -> String,
        common::with_deep_field,
    ] {
        let (lines, audit_id) = common::config_with_deep_patch(deep);
        let r = post(common::event_list(&lines)).await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        ids.push(audit_id);
    }
    let brackets = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
    let r = post(brackets).await.unwrap();
    assert_eq!(r.status(), 400);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("items[0]") && text.contains("accepted 0 events"),
        "{text}"
    );
    let r = client
        .get(format!("{}/healthz", srv.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let m = metrics_text(&srv.url).await;
    // The deep field only: the annotation is a string to every reader.
    assert_eq!(
        metric(&m, "kascade_audit_deep_values_total{source=\"test\"}"),
        1,
        "{m}"
    );
    pipeline.finish().await;
    let out = std::fs::read_to_string(&srv.out).unwrap();
    for id in ids {
        assert!(out.contains(&id), "the span of {id} is missing");
    }
    assert!(out.contains("<nested deeper than 64 levels: "), "no marker");
}

/// Bodies being read and decoded at once are bounded in bytes: while one
/// announced body holds the room, the next is answered 429 with
/// Retry-After before a byte of its body is sent, and is read once the
/// room is free again.
#[tokio::test]
async fn bodies_beyond_the_intake_bytes_are_refused_before_they_are_read() {
    use tokio::io::AsyncWriteExt;
    let (srv, _pipeline) = serve(|c| {
        c.max_body_bytes = 1 << 20;
        c.max_intake_bytes = (2 << 20) + (100 << 10);
    })
    .await;
    let announce = |bytes: usize, encoding: &str| {
        format!(
            "POST /audit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Encoding: {encoding}\r\nContent-Length: {bytes}\r\n\r\n"
        )
    };
    // A gzipped 1 MiB holds 2 MiB (its inflated copy counts) of the
    // 2.1 MiB while it sends its body slowly.
    let addr = srv.url.strip_prefix("http://").unwrap().to_string();
    let mut holder = tokio::net::TcpStream::connect(&addr).await.unwrap();
    holder
        .write_all(announce(1 << 20, "gzip").as_bytes())
        .await
        .unwrap();
    holder.write_all(b"\x1f").await.unwrap();
    // The holder's reservation shows in the gauge before the next arrives.
    loop {
        let m = metrics_text(&srv.url).await;
        if metric(&m, "kascade_webhook_intake_bytes") > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (reply, _) = raw_exchange(
        &srv.url,
        announce(200_000, "identity").as_bytes(),
        Duration::from_secs(30),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 429"), "{reply}");
    assert!(reply.contains("retry-after: 1"), "{reply}");
    assert!(reply.contains("--max-intake-bytes"), "{reply}");
    // A small one still fits beside it.
    let lines = common::audit_lines("deployment");
    let small = common::event_list(&lines[..3]);
    let r = reqwest::Client::new()
        .post(format!("{}/audit", srv.url))
        .body(small.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The holder gone, its room is free.
    drop(holder);
    loop {
        let m = metrics_text(&srv.url).await;
        if metric(&m, "kascade_webhook_intake_bytes") == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let big = common::event_list(&lines);
    assert!(big.len() > 100_000 && big.len() < 1 << 20);
    let r = reqwest::Client::new()
        .post(format!("{}/audit", srv.url))
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let m = metrics_text(&srv.url).await;
    assert_eq!(
        metric(
            &m,
            "kascade_audit_events_rejected_total{reason=\"overload\"}"
        ),
        1,
        "{m}"
    );
}

/// Connections open at once are bounded: idle ones up to the limit hold
/// their places, one more is answered 429 and closed unread, and once they
/// close requests are served again.
#[tokio::test]
async fn connections_beyond_the_limit_are_answered_429_and_closed() {
    let (srv, _pipeline) = serve(|c| {
        c.max_connections = 4;
        c.header_read_timeout = Duration::from_secs(60);
    })
    .await;
    let addr = srv.url.strip_prefix("http://").unwrap().to_string();
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    let (reply, closed) = raw_exchange(
        &srv.url,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(30),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 429"), "{reply}");
    assert!(reply.contains("--max-connections"), "{reply}");
    assert!(closed, "the refused connection is closed");
    drop(idle);
    // Their places free up as the server sees them close (polled).
    loop {
        let (reply, _) = raw_exchange(
            &srv.url,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            Duration::from_secs(30),
        )
        .await;
        if reply.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(reply.starts_with("HTTP/1.1 429"), "{reply}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Shippers post audit events as the log has them: one per line (Fluent
/// Bit's `http` output with `format json_lines`, Vector's `http` sink), as
/// a JSON array (Fluent Bit's `format json`, each record with the `date`
/// key Fluent Bit adds), or as records holding the log line as text (`log`:
/// Fluent Bit's `tail` without a parser; `message`: Vector's `file`
/// source). The records are made here from the fixture's lines, as those
/// shippers make them (no shipper runs in this test). Each form is accepted
/// as the EventList of the same lines is: the same audit spans; a bad line
/// is named by its number and the rest is kept.
#[tokio::test]
async fn shippers_bodies_of_lines_arrays_and_wrapped_records_are_accepted() {
    let lines = common::audit_lines("deployment");
    // Writes of Events become Event spans, not audit spans: left out.
    let ids = audit_ids_of_writes(&lines);
    assert!(ids.len() > 20);
    let chunk = lines.len() / 4;
    let (a, rest) = lines.split_at(chunk);
    let (b, rest) = rest.split_at(chunk);
    let (c, d) = rest.split_at(chunk);
    let ndjson = a.join("\n") + "\n";
    let array = format!(
        "[{}]",
        b.iter()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["date"] = serde_json::json!(1733400000.123);
                v.to_string()
            })
            .collect::<Vec<_>>()
            .join(",")
    );
    let wrapped_log = c
        .iter()
        .map(|l| serde_json::json!({"date": 1733400000.5, "log": format!("{l}\n")}).to_string())
        .collect::<Vec<_>>()
        .join("\n");
    let wrapped_message = d
        .iter()
        .map(|l| serde_json::json!({"message": l, "source_type": "file"}).to_string())
        .collect::<Vec<_>>()
        .join("\n");

    let (srv, pipeline) = serve(|_| {}).await;
    let client = reqwest::Client::new();
    for (what, body) in [
        ("lines", ndjson),
        ("array", array),
        ("log records", wrapped_log),
        ("message records", wrapped_message),
    ] {
        let r = client
            .post(format!("{}/audit", srv.url))
            .header("Content-Type", "application/x-ndjson")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{what}: {}", r.text().await.unwrap());
    }
    // One bad line among good ones: 400 naming it, the others kept.
    let extra = common::audit_lines("config");
    let mixed = format!("{}\nnot an event\n{}\n", extra[0], extra[1]);
    let r = client
        .post(format!("{}/audit", srv.url))
        .body(mixed)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("accepted 2 events") && text.contains("line 2"),
        "{text}"
    );

    let m = metrics_text(&srv.url).await;
    assert_eq!(
        metric(
            &m,
            "kascade_audit_events_received_total{source=\"webhook\"}"
        ),
        lines.len() as u64 + 3
    );
    pipeline.finish().await;
    let out = std::fs::read_to_string(&srv.out).unwrap();
    for id in &ids {
        assert!(out.contains(id.as_str()), "audit span of {id} missing");
    }
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

/// The OpenTelemetry Collector's `filelog` receiver tailing `audit.log`,
/// exported with `otlphttp`: one log record per line, its body the line.
/// The requests are made here from the fixture's lines as that pipeline
/// makes them (no OpenTelemetry Collector runs in this test), protobuf and
/// OTLP/JSON. Accepted as the EventList of the same lines is; a record
/// whose body is no text is counted in OTLP's partial success; a body that
/// is not OTLP is a 400, another media type a 415.
#[tokio::test]
async fn otlp_logs_of_audit_lines_are_accepted_and_answered_as_otlp() {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
    use opentelemetry_proto::tonic::common::v1::any_value;
    use prost::Message as _;
    let request = common::otlp_logs_of;
    let lines = common::audit_lines("deployment");
    let ids = audit_ids_of_writes(&lines);
    let half = lines.len() / 2;
    let (srv, pipeline) = serve(|_| {}).await;
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{}/v1/logs", srv.url))
        .header("Content-Type", "application/x-protobuf")
        .body(request(&lines[..half], Some(any_value::Value::IntValue(7))).encode_to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let answer = ExportLogsServiceResponse::decode(r.bytes().await.unwrap()).unwrap();
    let partial = answer.partial_success.expect("the int body is rejected");
    assert_eq!(partial.rejected_log_records, 1);
    assert!(
        partial.error_message.contains("log record 1"),
        "{}",
        partial.error_message
    );
    let json = serde_json::to_string(&request(&lines[half..], None)).unwrap();
    let r = client
        .post(format!("{}/v1/logs/other-cluster", srv.url))
        .header("Content-Type", "application/json")
        .body(json)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = client
        .post(format!("{}/v1/logs", srv.url))
        .header("Content-Type", "application/x-protobuf")
        .body("not protobuf at all, surely")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = client
        .post(format!("{}/v1/logs", srv.url))
        .header("Content-Type", "text/plain")
        .body(lines[0].clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    pipeline.finish().await;
    let out = std::fs::read_to_string(&srv.out).unwrap();
    for id in &ids {
        assert!(out.contains(id.as_str()), "audit span of {id} missing");
    }
    assert!(
        out.contains("\"stringValue\":\"other-cluster\""),
        "cluster from the path"
    );
}

/// The OpenTelemetry Collector's `otlp` exporter (gRPC, `LogsService/
/// Export`) with the filelog receiver's records: here tonic's client of the
/// same generated OTLP service (no Collector runs in this test; the e2e
/// shippers test runs one). Authenticated before the body is read
/// (`UNAUTHENTICATED`), gzip as `grpc-encoding`, the cluster from the
/// `kascade-cluster` header, a record that holds no line counted in the
/// partial success, and every write becomes its span.
#[tokio::test]
async fn otlp_logs_over_grpc_are_accepted_and_answered_as_grpc() {
    use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
    use opentelemetry_proto::tonic::common::v1::any_value;
    let lines = common::audit_lines("deployment");
    let ids = audit_ids_of_writes(&lines);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "grpc-secret\n").unwrap();
    let (srv, pipeline) = serve(|c| c.webhook_token_file = Some(token)).await;
    let channel = tonic::transport::Channel::from_shared(srv.url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = LogsServiceClient::new(channel);
    let err = client
        .export(common::otlp_logs_of(&lines, None))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err}");
    let half = lines.len() / 2;
    let authorized = |req, cluster: Option<&str>| {
        let mut req = tonic::Request::new(req);
        req.metadata_mut()
            .insert("authorization", "Bearer grpc-secret".parse().unwrap());
        if let Some(c) = cluster {
            req.metadata_mut()
                .insert("kascade-cluster", c.parse().unwrap());
        }
        req
    };
    let answer = client
        .export(authorized(
            common::otlp_logs_of(&lines[..half], Some(any_value::Value::IntValue(7))),
            Some("grpc-cluster"),
        ))
        .await
        .unwrap()
        .into_inner();
    let partial = answer.partial_success.expect("the int body is rejected");
    assert_eq!(partial.rejected_log_records, 1);
    let mut gzipped = client
        .clone()
        .send_compressed(tonic::codec::CompressionEncoding::Gzip);
    let answer = gzipped
        .export(authorized(common::otlp_logs_of(&lines[half..], None), None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.partial_success, None);
    let err = client
        .export(authorized(
            common::otlp_logs_of(&lines, None),
            Some("no/slash"),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    pipeline.finish().await;
    let out = std::fs::read_to_string(&srv.out).unwrap();
    for id in &ids {
        assert!(out.contains(id.as_str()), "audit span of {id} missing");
    }
    assert!(
        out.contains("\"stringValue\":\"grpc-cluster\""),
        "cluster from the header"
    );
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

#[tokio::test]
async fn component_traces_are_authenticated_first_and_shed_when_the_raw_store_stalls() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message as _;
    // A raw store that accepts connections and never answers: what is
    // forwarded stays queued.
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let lines = captured_trace_lines();
    let first: ExportTraceServiceRequest = serde_json::from_str(&lines[0]).unwrap();
    let encoded = first.encode_to_vec();
    let mut config = CollectConfig::default()
        .cluster("test")
        .webhook_token_file(&token)
        .spool_dir(dir.path().join("spool"));
    config.export = config.export.output(OutputSpec::Otlp);
    config.export.otlp_endpoint = Some(format!("http://{}", stalled.local_addr().unwrap()));
    config.export.otlp_timeout = Some(Duration::from_secs(60));
    config.component_traces_listen = Some("127.0.0.1:0".parse().unwrap());
    // Room for one request (as forwarded: the cluster stamped), not two.
    config.component_traces_queue_bytes = encoded.len() + 200;
    let (apps, _pipeline) = collect::build(&config).unwrap();
    let url = spawn_server(
        apps.component_traces.unwrap().merge(apps.admin),
        config.header_read_timeout,
    );
    let client = reqwest::Client::new();
    let grpc_path = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    framed.extend_from_slice(&encoded);
    // No token: refused before the body is read, in each protocol's terms.
    let r = client
        .post(format!("{url}/v1/traces"))
        .header("content-type", "application/json")
        .body(lines[0].clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = client
        .post(format!("{url}{grpc_path}"))
        .header("content-type", "application/grpc")
        .body(framed.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["grpc-status"], "16", "UNAUTHENTICATED");
    // A bad cluster name is refused with what is wrong.
    let r = client
        .post(format!("{url}/v1/traces/not%20a%20cluster"))
        .bearer_auth("s3cret")
        .header("content-type", "application/json")
        .body(lines[0].clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // Accepted over HTTP (OTLP/JSON) …
    let r = client
        .post(format!("{url}/v1/traces"))
        .bearer_auth("s3cret")
        .header("content-type", "application/json")
        .body(lines[0].clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // … then the queue is full: gRPC UNAVAILABLE and HTTP 503, both retried
    // by the exporters, counted as shed.
    let r = client
        .post(format!("{url}{grpc_path}"))
        .bearer_auth("s3cret")
        .header("content-type", "application/grpc")
        .body(framed)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["grpc-status"], "14", "UNAVAILABLE");
    let r = client
        .post(format!("{url}/v1/traces"))
        .bearer_auth("s3cret")
        .header("content-type", "application/x-protobuf")
        .body(encoded.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    assert!(r.text().await.unwrap().contains("forwarding queue is full"));
    let spans: usize = first
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len())
        .sum();
    let text = metrics_text(&url).await;
    assert_eq!(
        metric(&text, "kascade_component_spans_total{outcome=\"received\"}"),
        spans as u64
    );
    assert_eq!(
        metric(&text, "kascade_component_spans_total{outcome=\"shed\"}"),
        2 * spans as u64
    );
    assert_eq!(
        metric(
            &text,
            "kascade_component_trace_requests_refused_total{reason=\"unauthorized\"}"
        ),
        2
    );
    drop(stalled);
}
