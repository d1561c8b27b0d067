//! Deep values, large bodies and too many connections.

use super::*;

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
