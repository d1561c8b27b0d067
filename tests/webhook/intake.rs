//! The audit webhook's answers: batches, bad input, size limits,
//! authentication, back-pressure, timeouts, HTTP/2.

use super::*;

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
