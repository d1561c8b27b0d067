//! Load generator for `kascade collect` (run by e2e/bench/collect.sh, which
//! starts kascade and a real OTLP receiver first).
//!
//! Posts real audit batches — the deployment fixture captured from the e2e
//! control plane, copied into fresh namespaces so every copy is a new set of
//! objects — to the audit webhook from several concurrent senders (as batches
//! of 400, the apiserver's default), retrying on 429 like the apiserver does.
//! Reports sustained events/s (until kascade has processed every event),
//! p50/p99 webhook latency, and kascade's peak RSS.
//!
//! Environment: KASCADE_URL (webhook base), KASCADE_ADMIN_URL, KASCADE_PID,
//! BENCH_COPIES (default 4000 ≈ 100k objects), BENCH_SENDERS (default 4),
//! BENCH_COPY_SPACING_MS (default 5: copy `c` happens `c × 5 ms` after the
//! first, the copies overlapping in time order; 0: all at the same times,
//! one after the other).
//! KASCADE_TOKEN: the bearer token to send (kascade's --webhook-token-file).
//! BENCH_COMPONENT_TRACES=1 also sends kube-apiserver's request traces, one
//! per audit event, as an apiserver tracing every request would
//! (`load/components.rs`: derived from captured ones), as OTLP protobuf to
//! KASCADE_COMPONENT_URL's `/v1/traces` (kascade's
//! --component-traces-listen) from BENCH_COMPONENT_SENDERS (default 2)
//! senders, each request sent once the audit senders have taken its events,
//! retried a second later when kascade sheds it (503). Then it also waits
//! until kascade has forwarded every component span, and reports kascade's
//! CPU up to then too.
//! With several replicas, the first three are comma-separated lists in the
//! same order: batches go round-robin to the replicas, as a load balancer in
//! front of them would send the apiserver's (one object's writes reach
//! several), and CPU time is summed over them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[path = "load/mod.rs"]
mod load;
use load::components::ComponentTraces;
use load::{BATCH, Stream, env_or, spacing_from_env, templates};

/// CPU seconds (user + system) the process has used so far.
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) end with ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on Linux.
    Some(ticks / 100.0)
}

fn peak_rss_kib(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Summed over the series `name` starts (e.g. every drop reason) and over
/// the replicas.
async fn metric(client: &reqwest::Client, admins: &[String], name: &str) -> f64 {
    let mut sum = 0.0;
    for admin in admins {
        let text = client
            .get(format!("{admin}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        sum += text
            .lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    sum
}

fn list(var: &str) -> Vec<String> {
    env_or(var, "")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") || std::env::var("KASCADE_URL").is_err() {
        // `cargo bench` without the harness around it: nothing to measure.
        eprintln!(
            "collect_load: run e2e/bench/collect.sh (needs KASCADE_URL, KASCADE_ADMIN_URL, KASCADE_PID)"
        );
        return;
    }
    let urls: Arc<Vec<String>> = Arc::new(
        list("KASCADE_URL")
            .iter()
            .map(|u| format!("{u}/audit/bench"))
            .collect(),
    );
    let admin = list("KASCADE_ADMIN_URL");
    let pids = list("KASCADE_PID");
    assert!(
        !urls.is_empty() && urls.len() == admin.len(),
        "one KASCADE_ADMIN_URL per KASCADE_URL"
    );
    let auth = std::env::var("KASCADE_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .map(|t| format!("Bearer {t}"));
    let component_urls: Arc<Vec<String>> = Arc::new(
        list("KASCADE_COMPONENT_URL")
            .iter()
            .map(|u| format!("{u}/v1/traces"))
            .collect(),
    );
    let components_on = env_or("BENCH_COMPONENT_TRACES", "0") == "1";
    assert!(
        !components_on || !component_urls.is_empty(),
        "BENCH_COMPONENT_TRACES=1 needs KASCADE_COMPONENT_URL"
    );
    let copies: usize = env_or("BENCH_COPIES", "4000").parse().unwrap();
    let senders: usize = env_or("BENCH_SENDERS", "4").parse().unwrap();
    let templates = templates();
    let objects_per_copy = templates.objects_per_copy;
    let spacing = spacing_from_env();
    let stream = Arc::new(Stream::new(&templates, copies, spacing));
    let total_events = stream.len();
    eprintln!(
        "collect_load: {copies} copies × {} events ({objects_per_copy} objects each) = {total_events} events, {} objects, {senders} senders, copies {spacing:?} apart",
        templates.texts.len(),
        copies * objects_per_copy
    );
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(senders)
        .build()
        .unwrap();
    let base_processed = metric(&client, &admin, "kascade_audit_events_processed_total").await;
    let base_accepted = metric(
        &client,
        &admin,
        "kascade_audit_events_accepted_total{source=\"webhook\"}",
    )
    .await;
    let cpu_of = |pids: &[String]| pids.iter().map(|p| cpu_seconds(p)).sum::<Option<f64>>();
    let cpu_before = cpu_of(&pids);
    let next = Arc::new(AtomicUsize::new(0));
    let retries = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..senders {
        let (stream, next, retries, client, urls, auth) = (
            stream.clone(),
            next.clone(),
            retries.clone(),
            client.clone(),
            urls.clone(),
            auth.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                // Work item = BATCH consecutive events of the stream.
                let first = next.fetch_add(BATCH, Ordering::Relaxed);
                if first >= stream.len() {
                    break;
                }
                let last = (first + BATCH).min(stream.len());
                let body = stream.batch_body(first..last, "bench-");
                let url = &urls[(first / BATCH) % urls.len()];
                loop {
                    let t = Instant::now();
                    let mut post = client.post(url).body(body.clone());
                    if let Some(auth) = &auth {
                        post = post.header("authorization", auth);
                    }
                    let r = post.send().await.expect("kascade answers");
                    let status = r.status().as_u16();
                    let _ = r.bytes().await;
                    if status == 429 || status == 503 {
                        retries.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                    assert_eq!(status, 200, "webhook refused a batch");
                    latencies.push(t.elapsed());
                    break;
                }
            }
            latencies
        }));
    }
    let components = components_on.then(|| {
        let senders: usize = env_or("BENCH_COMPONENT_SENDERS", "2").parse().unwrap();
        component_senders(
            senders,
            ComponentTraces::new(&templates.texts),
            stream.clone(),
            next.clone(),
            client.clone(),
            component_urls.clone(),
            auth.clone(),
        )
    });
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.unwrap());
    }
    let posted = start.elapsed();
    // Sustained rate: until kascade has processed everything it accepted.
    let accepted = metric(
        &client,
        &admin,
        "kascade_audit_events_accepted_total{source=\"webhook\"}",
    )
    .await
        - base_accepted;
    assert_eq!(
        accepted as usize, total_events,
        "kascade filtered some of the load"
    );
    let target = base_processed + accepted;
    loop {
        if metric(&client, &admin, "kascade_audit_events_processed_total").await >= target {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "kascade did not finish processing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let processed = start.elapsed();
    let cpu = cpu_before
        .zip(cpu_of(&pids))
        .map(|(before, after)| after - before);
    // With component traces: until kascade has forwarded (or dropped) every
    // component span it was sent.
    let components = match components {
        None => None,
        Some(tasks) => {
            let mut sent = ComponentStats::default();
            for t in tasks {
                sent.add(t.await.unwrap());
            }
            let outcome = |o: &'static str| {
                let (client, admin) = (client.clone(), admin.clone());
                async move {
                    metric(
                        &client,
                        &admin,
                        &format!("kascade_component_spans_total{{outcome=\"{o}\"}}"),
                    )
                    .await
                }
            };
            loop {
                if outcome("forwarded").await + outcome("dropped").await >= sent.spans as f64 {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(1200),
                    "kascade did not forward every component span"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let done = start.elapsed();
            let cpu_all = cpu_before
                .zip(cpu_of(&pids))
                .map(|(before, after)| after - before);
            let counts = [
                outcome("received").await,
                outcome("forwarded").await,
                outcome("shed").await,
                outcome("dropped").await,
            ];
            Some((sent, done, cpu_all, counts))
        }
    };
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p) as usize];
    let exported = metric(
        &client,
        &admin,
        "kascade_spans_exported_total{output=\"otlp\"}",
    )
    .await;
    let dropped = metric(
        &client,
        &admin,
        "kascade_spans_dropped_total{output=\"otlp\",",
    )
    .await;
    println!("events:            {total_events}");
    println!("objects tracked:   {}", copies * objects_per_copy);
    println!("posted in:         {:.2}s", posted.as_secs_f64());
    println!("processed in:      {:.2}s", processed.as_secs_f64());
    println!(
        "sustained rate:    {:.0} events/s",
        total_events as f64 / processed.as_secs_f64()
    );
    println!(
        "webhook latency:   p50 {:.1} ms, p99 {:.1} ms (per batch of {BATCH})",
        pct(0.5).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3
    );
    println!("429 retries:       {}", retries.load(Ordering::Relaxed));
    println!(
        "spans exported:    {exported:.0} (dropped {dropped:.0}, export may still be draining)"
    );
    if let Some(cpu) = cpu {
        // What kascade itself costs, independent of the generator and the
        // receiver sharing the machine.
        println!(
            "kascade CPU:       {cpu:.1} s ({:.0} events per CPU-second)",
            total_events as f64 / cpu
        );
    }
    if let Some((sent, done, cpu_all, [received, forwarded, shed, dropped])) = components {
        println!(
            "component traces:  {} traces, {} spans in {} requests, {} retried after a 503 (shed)",
            sent.traces, sent.spans, sent.requests, sent.retries
        );
        println!(
            "component spans:   received {received:.0}, forwarded {forwarded:.0}, shed {shed:.0}, dropped {dropped:.0} (kascade_component_spans_total)"
        );
        println!("all forwarded in:  {:.2}s", done.as_secs_f64());
        if let Some(cpu) = cpu_all {
            println!(
                "kascade CPU, all:  {cpu:.1} s, until every component span was forwarded ({:.0} events per CPU-second)",
                total_events as f64 / cpu
            );
        }
    }
    for pid in &pids {
        if let Some(kib) = peak_rss_kib(pid) {
            println!("kascade peak RSS:  {:.0} MiB", kib as f64 / 1024.0);
        }
    }
}

#[derive(Default)]
struct ComponentStats {
    traces: usize,
    spans: usize,
    requests: usize,
    retries: usize,
}

impl ComponentStats {
    fn add(&mut self, o: ComponentStats) {
        self.traces += o.traces;
        self.spans += o.spans;
        self.requests += o.requests;
        self.retries += o.retries;
    }
}

/// The apiserver's exporters: each request holds the traces of the next
/// events of the stream (whole traces, at most 512 spans), sent once the
/// audit senders have taken those events (`audit_next`), as the apiserver
/// exports a request's trace when the request ends; a request kascade sheds
/// (503) is sent again after its Retry-After (1 s).
fn component_senders(
    senders: usize,
    traces: ComponentTraces,
    stream: Arc<Stream>,
    audit_next: Arc<AtomicUsize>,
    client: reqwest::Client,
    urls: Arc<Vec<String>>,
    auth: Option<String>,
) -> Vec<tokio::task::JoinHandle<ComponentStats>> {
    let next = Arc::new(AtomicUsize::new(0));
    let per = traces.traces_per_request;
    (0..senders)
        .map(|_| {
            let (mut traces, stream, audit_next, client, urls, auth, next) = (
                traces.clone(),
                stream.clone(),
                audit_next.clone(),
                client.clone(),
                urls.clone(),
                auth.clone(),
                next.clone(),
            );
            tokio::spawn(async move {
                let mut stats = ComponentStats::default();
                loop {
                    let first = next.fetch_add(per, Ordering::Relaxed);
                    if first >= stream.len() {
                        break;
                    }
                    let last = (first + per).min(stream.len());
                    while audit_next.load(Ordering::Relaxed) < last {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    let (body, spans) = traces.request(&stream, first..last);
                    let body = bytes::Bytes::from(body);
                    let url = &urls[stats.requests % urls.len()];
                    loop {
                        let mut post = client
                            .post(url)
                            .header("content-type", "application/x-protobuf")
                            .body(body.clone());
                        if let Some(auth) = &auth {
                            post = post.header("authorization", auth);
                        }
                        let r = post.send().await.expect("kascade answers");
                        let status = r.status().as_u16();
                        let _ = r.bytes().await;
                        if status == 503 || status == 429 {
                            stats.retries += 1;
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            continue;
                        }
                        assert_eq!(status, 200, "the component port refused a request");
                        break;
                    }
                    stats.traces += last - first;
                    stats.spans += spans;
                    stats.requests += 1;
                }
                stats
            })
        })
        .collect()
}
