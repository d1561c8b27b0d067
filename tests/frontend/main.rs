//! The frontend over the real fixtures: scopes, display modes, trace ids that
//! survive a replica without cache, the redirect endpoint and bad input.
//! Expected objects are read from the audit log itself (owner references in
//! the apiserver's responses), not from kascade's output.

#[path = "../common/mod.rs"]
mod common;

use common::int_attr;

use std::collections::{BTreeMap, BTreeSet, HashSet};

use std::sync::Arc;

use std::time::Duration;

use axum::body::Body;

use axum::http::{Request, StatusCode};

use kascade::test_support::frontend::assemble::{Limits, Scope};

use kascade::test_support::frontend::display::{Mode, render};

use kascade::test_support::frontend::http::{RedirectState, router};

use kascade::test_support::frontend::proto::{
    AnyValue, FindTracesRequest, GetTraceParams, GetTracesRequest, KeyValue, TraceQueryParameters,
    any_value,
};

use kascade::test_support::frontend::raw::{
    JaegerHttp, MemoryStore, RawStore, TimeRange, from_nanos, parse_hex_trace_id, string_attr,
};

use kascade::test_support::frontend::service::{JaegerStorage, parse_query};

use kascade::test_support::frontend::{
    AssembledTrace, Frontend, FrontendConfig, FrontendError, SearchQuery,
};

use opentelemetry_proto::tonic::trace::v1::{Span, TracesData};

use serde_json::Value;

use tower::ServiceExt;

const CLUSTER: &str = "fixture";

async fn store(scenario: &str) -> MemoryStore {
    store_of_lines(common::audit_lines(scenario)).await
}

async fn store_of_lines(lines: Vec<String>) -> MemoryStore {
    common::raw_store_of_lines(lines, CLUSTER).await
}

/// The deployment `hello`'s full tree (tree mode), as `f` finds it.
async fn hello_tree(f: &Frontend<MemoryStore>) -> Arc<AssembledTrace> {
    hello_in(f, Mode::Tree).await
}

/// The id of the deployment `hello`'s full tree, as the UI would reload it
/// on any replica.
async fn hello_tree_id(store: &Arc<MemoryStore>) -> [u8; 16] {
    hello_tree(&Frontend::new(store.clone(), FrontendConfig::default()))
        .await
        .id
}

fn whole_range(store: &MemoryStore) -> TimeRange {
    let (a, b) = store.time_span().expect("spans");
    TimeRange::new(from_nanos(a), from_nanos(b))
}

async fn frontend(scenario: &str) -> (Arc<Frontend<MemoryStore>>, TimeRange) {
    let s = store(scenario).await;
    let range = whole_range(&s);
    (
        Arc::new(Frontend::new(Arc::new(s), FrontendConfig::default())),
        range,
    )
}

fn tags(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn search_one(
    f: &Frontend<MemoryStore>,
    range: TimeRange,
    mode: Mode,
    scope: Scope,
    t: &[(&str, &str)],
) -> Arc<AssembledTrace> {
    let found = f
        .search(&SearchQuery {
            mode,
            scope,
            all_siblings: false,
            tags: tags(t),
            range,
            limit: 20,
        })
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "one trace for {t:?}");
    found[0].clone()
}

/// ReplicaSets of `hello` and the Pods of each, from the owner references the
/// apiserver returned in the audit log.
fn owned_by_fixture(scenario: &str) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut owned: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for line in common::audit_lines(scenario) {
        let ev: Value = serde_json::from_str(&line).unwrap();
        let obj = &ev["responseObject"];
        let Some(owners) = obj["metadata"]["ownerReferences"].as_array() else {
            continue;
        };
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        for o in owners {
            if o["controller"] == true {
                owned
                    .entry((
                        o["kind"].as_str().unwrap().to_string(),
                        o["name"].as_str().unwrap().to_string(),
                    ))
                    .or_default()
                    .insert(name.to_string());
            }
        }
    }
    owned
}

fn all_spans(t: &AssembledTrace) -> Vec<(String, Span)> {
    t.resource_spans
        .iter()
        .flat_map(|rs| {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| string_attr(&r.attributes, "service.name"))
                .unwrap_or_default()
                .to_string();
            rs.scope_spans
                .iter()
                .flat_map(|ss| ss.spans.clone())
                .map(move |s| (service.clone(), s))
        })
        .collect()
}

/// The deployment `hello`'s full tree in `mode`, searched on `f`.
async fn hello_in(f: &Frontend<MemoryStore>, mode: Mode) -> Arc<AssembledTrace> {
    f.search(&SearchQuery {
        mode,
        scope: Scope::Full,
        all_siblings: false,
        tags: tags(&[("resource", "deployments"), ("name", "hello")]),
        range: whole_range(f.store()),
        limit: 1,
    })
    .await
    .unwrap()
    .remove(0)
}

/// Bytes of the histories an assembly loaded: its objects, not the copies
/// of shared objects made from them afterwards.
fn loaded_bytes(t: &AssembledTrace) -> u64 {
    t.assembly
        .nodes
        .iter()
        .filter(|n| n.copy_of.is_none())
        .map(|n| kascade::test_support::frontend::cache_weight::history_bytes(&n.history) as u64)
        .sum()
}

fn pods_in(t: &AssembledTrace) -> usize {
    t.assembly
        .nodes
        .iter()
        .filter(|n| n.copy_of.is_none() && n.history.object.resource == "pods")
        .count()
}

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
    }
}

/// The frontend's gRPC services on a loopback port, as Jaeger query reaches
/// them, and a channel to it.
async fn grpc_frontend<S: RawStore + 'static>(f: Arc<Frontend<S>>) -> tonic::transport::Channel {
    let incoming =
        tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = incoming.local_addr().unwrap();
    let (traces, deps) = JaegerStorage::new(f).servers();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(traces)
            .add_service(deps)
            .serve_with_incoming(incoming),
    );
    // The listener is bound already: connecting needs no wait.
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// FindTraces over the wire (the crate builds no gRPC client: the generic one).
async fn find_traces(
    channel: &tonic::transport::Channel,
    query: TraceQueryParameters,
) -> Result<usize, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unknown(e.to_string()))?;
    let resp = grpc
        .server_streaming(
            tonic::Request::new(FindTracesRequest { query: Some(query) }),
            tonic::codegen::http::uri::PathAndQuery::from_static(
                "/jaeger.storage.v2.TraceReader/FindTraces",
            ),
            tonic_prost::ProstCodec::<FindTracesRequest, TracesData>::default(),
        )
        .await?;
    let mut stream = resp.into_inner();
    let mut n = 0;
    while stream.message().await?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// A FindTracesRequest whose query's `service_name` (1) is not UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct QueryNotUtf8 {
    #[prost(message, optional, tag = "1")]
    query: Option<ServiceNameBytes>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ServiceNameBytes {
    #[prost(bytes = "vec", tag = "1")]
    service_name: Vec<u8>,
}

/// A FindTracesRequest whose query (1, a message) comes as a fixed64.
#[derive(Clone, PartialEq, prost::Message)]
struct QueryOfTheWrongWireType {
    #[prost(fixed64, tag = "1")]
    query: u64,
}

/// FindTraces with `request` as its message; the status it ends with.
async fn find_traces_raw<M: prost::Message + Default + Send + 'static>(
    channel: &tonic::transport::Channel,
    request: M,
) -> tonic::Status {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let answer = grpc
        .server_streaming(
            tonic::Request::new(request),
            tonic::codegen::http::uri::PathAndQuery::from_static(
                "/jaeger.storage.v2.TraceReader/FindTraces",
            ),
            tonic_prost::ProstCodec::<M, TracesData>::default(),
        )
        .await;
    match answer {
        Err(status) => status,
        Ok(resp) => {
            let mut stream = resp.into_inner();
            loop {
                match stream.message().await {
                    Ok(Some(_)) => {}
                    Ok(None) => return tonic::Status::ok(""),
                    Err(status) => return status,
                }
            }
        }
    }
}

fn ts(seconds: i64, nanos: i32) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp { seconds, nanos })
}

/// Pods' nodes (from the scheduler's bindings) and service accounts (from
/// the apiserver's responses) in a fixture's audit log.
fn pod_uses(scenario: &str) -> BTreeMap<String, (String, String)> {
    let mut sa: BTreeMap<String, String> = BTreeMap::new();
    for line in common::audit_lines(scenario) {
        let ev: Value = serde_json::from_str(&line).unwrap();
        let obj = &ev["responseObject"];
        if ev["objectRef"]["resource"] == "pods"
            && let (Some(n), Some(s)) = (
                obj["metadata"]["name"].as_str(),
                obj["spec"]["serviceAccountName"].as_str(),
            )
        {
            sa.insert(n.into(), s.into());
        }
    }
    common::bindings(scenario)
        .into_iter()
        .map(|(pod, n)| {
            let s = sa.get(&pod).cloned().unwrap_or_default();
            (pod, (n, s))
        })
        .collect()
}

fn children_of(
    asm: &kascade::test_support::frontend::assemble::Assembly,
    i: usize,
) -> BTreeSet<(String, String)> {
    asm.nodes[i]
        .children
        .iter()
        .map(|&c| {
            let o = &asm.nodes[c].history.object;
            (o.resource.clone(), o.name.clone())
        })
        .collect()
}

/// requestReceivedTimestamp of an audit line, in ns since the epoch.
fn received_ns(ev: &Value) -> u64 {
    let t = ev["requestReceivedTimestamp"].as_str().unwrap();
    kascade::test_support::frontend::raw::nanos(humantime::parse_rfc3339(t).unwrap())
}

/// Object spans of an assembled trace in error, by `resource name`, with
/// their status message.
fn spans_in_error(t: &AssembledTrace) -> BTreeMap<String, String> {
    all_spans(t)
        .into_iter()
        .filter(|(_, s)| s.status.as_ref().is_some_and(|st| st.code == 2))
        .map(|(service, s)| {
            let name = s.name.split(" ▸ ").next().unwrap().to_string();
            (format!("{service} {name}"), s.status.unwrap().message)
        })
        .collect()
}

/// The URL of a raw Jaeger that accepts connections and never answers (a
/// real socket): a read from it lasts until its client's timeout.
async fn silent_jaeger_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    url
}

/// Pods of each ReplicaSet, read from the owner references the apiserver
/// returned in `lines` (its audit log).
fn pods_by_replicaset(lines: &[String]) -> BTreeMap<String, BTreeSet<String>> {
    let mut owned: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in lines {
        let ev: Value = serde_json::from_str(line).unwrap();
        let obj = &ev["responseObject"];
        let Some(owners) = obj["metadata"]["ownerReferences"].as_array() else {
            continue;
        };
        for o in owners {
            if o["controller"] == true && o["kind"] == "ReplicaSet" {
                owned
                    .entry(o["name"].as_str().unwrap().to_string())
                    .or_default()
                    .insert(obj["metadata"]["name"].as_str().unwrap().to_string());
            }
        }
    }
    owned
}

/// How long each Pod in `lines` (an audit log) took to get ready, in ns:
/// from its first write's request to the end of the first write whose
/// response has its `Ready` condition true (kwok's status patch).
fn ready_after_by_pod(lines: &[String]) -> BTreeMap<String, u64> {
    let mut first: BTreeMap<String, u64> = BTreeMap::new();
    let mut ready: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in lines {
        let ev: Value = serde_json::from_str(line).unwrap();
        let obj = &ev["responseObject"];
        if ev["stage"] != "ResponseComplete"
            || ev["objectRef"]["resource"] != "pods"
            || obj["kind"] != "Pod"
        {
            continue;
        }
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        let ns = |t: &Value| {
            kascade::test_support::frontend::raw::nanos(
                humantime::parse_rfc3339(t.as_str().unwrap()).unwrap(),
            )
        };
        let (received, done) = (
            ns(&ev["requestReceivedTimestamp"]),
            ns(&ev["stageTimestamp"]),
        );
        let f = first.entry(name.clone()).or_insert(received);
        *f = (*f).min(received);
        let is_ready = obj["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        if is_ready {
            let r = ready.entry(name).or_insert((received, done));
            if received < r.0 {
                *r = (received, done);
            }
        }
    }
    ready
        .into_iter()
        .map(|(name, (_, done))| {
            let since = first[&name];
            (name, done - since)
        })
        .collect()
}

/// A frontend over `s` showing at most `max` objects of a level.
fn showing_siblings(s: &Arc<MemoryStore>, max: usize) -> Frontend<MemoryStore> {
    Frontend::new(
        s.clone(),
        FrontendConfig {
            max_siblings: max,
            ..FrontendConfig::default()
        },
    )
}

/// A raw store whose searches wait until the test lets them through, and
/// count themselves: a real Jaeger cannot be made to hold a read for as
/// long as a test needs (a fake for timing only; the traces are the
/// deployment scenario's, captured).
struct GatedStore {
    inner: MemoryStore,
    gate: tokio::sync::Semaphore,
    finds: std::sync::atomic::AtomicUsize,
    /// Holds trace reads while closed (open unless a test closes it).
    get_gate: tokio::sync::Semaphore,
    gets: std::sync::atomic::AtomicUsize,
}

impl GatedStore {
    fn open(&self) {
        self.gate
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }

    fn finds(&self) -> usize {
        self.finds.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Raw traces read so far (each id of a batch counts).
    fn gets(&self) -> usize {
        self.gets.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl RawStore for GatedStore {
    async fn find(
        &self,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<
        Vec<kascade::test_support::frontend::raw::TraceIdBytes>,
        kascade::test_support::frontend::raw::RawError,
    > {
        self.finds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.gate.acquire().await.unwrap().forget();
        self.inner.find(tags, range, limit).await
    }

    async fn get(
        &self,
        id: kascade::test_support::frontend::raw::TraceIdBytes,
    ) -> Result<Vec<Span>, kascade::test_support::frontend::raw::RawError> {
        self.gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        drop(self.get_gate.acquire().await.unwrap());
        self.inner.get(id).await
    }

    async fn relation_counts(
        &self,
        range: TimeRange,
        limit: usize,
    ) -> Result<
        kascade::test_support::frontend::raw::RelationCounts,
        kascade::test_support::frontend::raw::RawError,
    > {
        self.inner.relation_counts(range, limit).await
    }

    async fn clusters(
        &self,
        range: TimeRange,
        limit: usize,
    ) -> Result<BTreeSet<String>, kascade::test_support::frontend::raw::RawError> {
        self.inner.clusters(range, limit).await
    }

    fn describe(&self) -> String {
        "gated memory store".into()
    }
}

async fn gated(cfg: FrontendConfig) -> (Arc<Frontend<GatedStore>>, Arc<GatedStore>, TimeRange) {
    let s = Arc::new(gated_store(0, usize::MAX >> 4).await);
    let range = whole_range(&s.inner);
    (Arc::new(Frontend::new(s.clone(), cfg)), s, range)
}

/// The deployment scenario's raw traces behind gates letting `finds`
/// searches and `gets` trace reads through.
async fn gated_store(finds: usize, gets: usize) -> GatedStore {
    GatedStore {
        inner: store("deployment").await,
        gate: tokio::sync::Semaphore::new(finds),
        finds: Default::default(),
        get_gate: tokio::sync::Semaphore::new(gets),
        gets: Default::default(),
    }
}

fn query_of(range: TimeRange, t: &[(&str, &str)]) -> SearchQuery {
    SearchQuery {
        mode: Mode::Tracing,
        scope: Scope::Full,
        all_siblings: false,
        tags: tags(t),
        range,
        limit: 20,
    }
}

mod cache;
mod grpc;
mod http;
mod raw_reads;
mod scopes;
mod searches;
mod shared_reads;
mod siblings;
mod streaming;
