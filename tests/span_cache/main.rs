//! The span cache shared through etcd: the protocol against an in-process
//! stand-in of etcd's gRPC API (reservations, failover, fallback and
//! recovery, lost leases, timeouts, authentication), and two `collect`
//! replicas fed the same real audit batch emitting each object and link span
//! once. The same against a real etcd is in `span_cache_etcd.rs` (ignored,
//! run by e2e/scale-out.sh).
//!
//! The stand-in exists because these tests must decide *when* etcd answers,
//! which a real etcd cannot be made to do. Nothing here depends on how fast
//! the machine is: a "slow" answer is one the fake holds back until the
//! client has given up on it (it sends the retry only after its timeout), and
//! timeouts that must not fire are far longer than any local answer takes.

#[path = "../common/mod.rs"]
mod common;

use kascade::test_support::metrics::{EtcdErrorReason, EtcdOp};

use std::collections::{HashMap, HashSet};

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use std::sync::{Arc, Mutex};

use std::time::{Duration, Instant};

use kascade::app::SpanCacheConfig;

use kascade::app::collect::{self, CollectConfig};

use kascade::test_support::aggregate::span_cache::{
    EtcdConfig, EtcdSpanCache, Slot, SpanCache, etcd_key,
};

use kascade::test_support::coordination::etcd::proto::etcdserverpb::{
    AuthenticateRequest, AuthenticateResponse, LeaseGrantRequest, LeaseGrantResponse, RequestOp,
    ResponseOp, TxnRequest, TxnResponse, auth_server, compare, kv_server, lease_server, request_op,
    response_op,
};

use kascade::test_support::coordination::etcd::proto::mvccpb::KeyValue;

use kascade::test_support::export::OutputSpec;

use kascade::test_support::metrics::Metrics;

use kascade::test_support::model::{ObjectRef, ObjectWindow};

use serde_json::Value;

use tonic::{Request, Response, Status};

type Stored = (Vec<u8>, i64);

/// A transaction's (key, value): the same for each attempt of one reservation.
type TxnId = (Vec<u8>, Vec<u8>);

/// Just enough of etcd's v3 gRPC API, served by tonic from the same
/// generated code the client uses: lease grant, the create-if-absent
/// transaction, authenticate (every other method answers Unimplemented);
/// it can be made unavailable, slow (answers held back past the client's
/// timeout), or forget its leases. The real etcd runs the same protocol in
/// `span_cache_etcd.rs`; this stand-in exists for what a real etcd cannot
/// be made to do on cue.
#[derive(Default)]
struct FakeEtcd {
    /// key → (value, lease)
    kv: Mutex<HashMap<Vec<u8>, Stored>>,
    leases: Mutex<HashSet<i64>>,
    next_lease: AtomicI64,
    down: AtomicBool,
    requests: AtomicU64,
    /// `Some((user, password))`: authentication enabled.
    auth: Option<(String, String)>,
    tokens: Mutex<HashSet<String>>,
    /// Transactions received so far.
    txns: AtomicU64,
    /// The next this many transaction answers are held back.
    hold_next: AtomicU64,
    /// The answer to every n-th transaction's first attempt is held back
    /// (0: none); its retry is answered in time.
    hold_every: AtomicU64,
    /// Every transaction answer is held back (etcd answers nothing in time).
    hold_all: AtomicBool,
    /// Transactions received per (key, value): a held answer is released
    /// when the same transaction arrives again, i.e. when the client, having
    /// timed out, retries it. The transaction itself is applied at once.
    attempts: Mutex<HashMap<TxnId, u64>>,
    attempt_seen: tokio::sync::Notify,
    /// Transactions are applied but not answered until this is false again.
    answers_paused: AtomicBool,
    answers_resumed: tokio::sync::Notify,
}

/// The gRPC services over one shared state.
#[derive(Clone)]
struct Fake(Arc<FakeEtcd>);

impl FakeEtcd {
    /// What etcd answers before looking at a request: no leader while
    /// down; with authentication on, a token it issued (metadata `token`).
    fn gate<T>(&self, req: &Request<T>) -> Result<(), Status> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Err(Status::unavailable("etcdserver: no leader"));
        }
        if self.auth.is_some() {
            let token = req
                .metadata()
                .get("token")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if !self.tokens.lock().unwrap().contains(token) {
                return Err(Status::unauthenticated("etcdserver: invalid auth token"));
            }
        }
        Ok(())
    }

    /// Whether the answer to `attempt` (1: the first) of the `n`-th
    /// transaction received (1-based) is held back.
    fn holds(&self, n: u64, attempt: u64) -> bool {
        let every = self.hold_every.load(Ordering::SeqCst);
        let next = self
            .hold_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| h.checked_sub(1))
            .is_ok();
        next || self.hold_all.load(Ordering::SeqCst)
            || (every > 0 && attempt == 1 && n.is_multiple_of(every))
    }

    /// Holds `reply` until the transaction `id` arrives again (the client's
    /// retry after its timeout) when told to, then answers it (to nobody:
    /// the client has cancelled the call).
    async fn deliver<T>(&self, id: TxnId, attempt: u64, reply: T) -> T {
        if !self.holds(self.txns.fetch_add(1, Ordering::SeqCst) + 1, attempt) {
            return reply;
        }
        loop {
            let retried = self.attempt_seen.notified();
            if self.attempts.lock().unwrap().get(&id).copied().unwrap_or(0) > attempt {
                return reply;
            }
            retried.await;
        }
    }

    fn get(&self, key: &str) -> Option<Value> {
        self.kv
            .lock()
            .unwrap()
            .get(key.as_bytes())
            .map(|(v, _)| serde_json::from_slice(v).unwrap())
    }
}

/// The put of a create-if-absent transaction (of the first one, for a
/// batch of them nested in one transaction).
fn put_of(txn: &TxnRequest) -> (Vec<u8>, Vec<u8>, i64) {
    match txn.success.first().and_then(|op| op.request.as_ref()) {
        Some(request_op::Request::RequestPut(p)) => (p.key.clone(), p.value.clone(), p.lease),
        Some(request_op::Request::RequestTxn(nested)) => put_of(nested),
        other => panic!("not a create-if-absent transaction: {other:?}"),
    }
}

/// A create-if-absent transaction, or a batch of them nested in one
/// transaction (as etcd does: all or none when a lease is unknown).
fn apply_request(f: &FakeEtcd, txn: &TxnRequest) -> Result<TxnResponse, Status> {
    let nested: Vec<&TxnRequest> = txn
        .success
        .iter()
        .filter_map(|op| match &op.request {
            Some(request_op::Request::RequestTxn(t)) => Some(t),
            _ => None,
        })
        .collect();
    if nested.is_empty() {
        return apply_txn(f, txn);
    }
    assert!(txn.compare.is_empty() && nested.len() == txn.success.len());
    let leases = f.leases.lock().unwrap().clone();
    if nested.iter().any(|t| !leases.contains(&put_of(t).2)) {
        return Err(Status::not_found("etcdserver: requested lease not found"));
    }
    let responses = nested
        .into_iter()
        .map(|t| {
            apply_txn(f, t).map(|r| ResponseOp {
                response: Some(response_op::Response::ResponseTxn(r)),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(TxnResponse {
        succeeded: true,
        responses,
        ..Default::default()
    })
}

/// The create-if-absent transaction, applied.
fn apply_txn(f: &FakeEtcd, txn: &TxnRequest) -> Result<TxnResponse, Status> {
    let (key, value, lease) = put_of(txn);
    let c = &txn.compare[0];
    assert_eq!(c.key, key);
    assert_eq!(c.target, compare::CompareTarget::Create as i32);
    assert_eq!(
        c.target_union,
        Some(compare::TargetUnion::CreateRevision(0))
    );
    assert!(matches!(
        txn.failure.first(),
        Some(RequestOp {
            request: Some(request_op::Request::RequestRange(_))
        })
    ));
    if !f.leases.lock().unwrap().contains(&lease) {
        return Err(Status::not_found("etcdserver: requested lease not found"));
    }
    let mut kv = f.kv.lock().unwrap();
    match kv.get(&key) {
        None => {
            kv.insert(key, (value, lease));
            Ok(TxnResponse {
                succeeded: true,
                responses: vec![ResponseOp {
                    response: Some(response_op::Response::ResponsePut(Default::default())),
                }],
                ..Default::default()
            })
        }
        Some((v, l)) => Ok(TxnResponse {
            succeeded: false,
            responses: vec![ResponseOp {
                response: Some(response_op::Response::ResponseRange(
                    kascade::test_support::coordination::etcd::proto::etcdserverpb::RangeResponse {
                        kvs: vec![KeyValue {
                            key: key.clone(),
                            value: v.clone(),
                            lease: *l,
                            ..Default::default()
                        }],
                        count: 1,
                        ..Default::default()
                    },
                )),
            }],
            ..Default::default()
        }),
    }
}

#[tonic::async_trait]
impl kv_server::Kv for Fake {
    async fn txn(&self, req: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        let f = &self.0;
        f.gate(&req)?;
        let txn = req.into_inner();
        let (key, value, _) = put_of(&txn);
        let id = (key, value);
        let attempt = {
            let mut attempts = f.attempts.lock().unwrap();
            let n = attempts.entry(id.clone()).or_default();
            *n += 1;
            *n
        };
        f.attempt_seen.notify_waiters();
        let reply = apply_request(f, &txn);
        loop {
            let resumed = f.answers_resumed.notified();
            tokio::pin!(resumed);
            resumed.as_mut().enable();
            if !f.answers_paused.load(Ordering::SeqCst) {
                break;
            }
            resumed.await;
        }
        f.deliver(id, attempt, reply).await.map(Response::new)
    }
}

#[tonic::async_trait]
impl lease_server::Lease for Fake {
    async fn lease_grant(
        &self,
        req: Request<LeaseGrantRequest>,
    ) -> Result<Response<LeaseGrantResponse>, Status> {
        let f = &self.0;
        f.gate(&req)?;
        let id = f.next_lease.fetch_add(1, Ordering::SeqCst) + 1000;
        f.leases.lock().unwrap().insert(id);
        Ok(Response::new(LeaseGrantResponse {
            id,
            ttl: req.get_ref().ttl,
            ..Default::default()
        }))
    }
}

#[tonic::async_trait]
impl auth_server::Auth for Fake {
    async fn authenticate(
        &self,
        req: Request<AuthenticateRequest>,
    ) -> Result<Response<AuthenticateResponse>, Status> {
        let f = &self.0;
        let Some((user, password)) = &f.auth else {
            return Err(Status::failed_precondition(
                "etcdserver: authentication is not enabled",
            ));
        };
        let b = req.get_ref();
        if b.name != *user || b.password != *password {
            return Err(Status::invalid_argument(
                "etcdserver: authentication failed, invalid user ID or password",
            ));
        }
        let token = format!("tok{}", f.requests.fetch_add(1, Ordering::SeqCst));
        f.tokens.lock().unwrap().insert(token.clone());
        Ok(Response::new(AuthenticateResponse {
            token,
            ..Default::default()
        }))
    }
}

async fn start_fake(auth: Option<(&str, &str)>) -> (Arc<FakeEtcd>, String) {
    let f = Arc::new(FakeEtcd {
        auth: auth.map(|(u, p)| (u.to_string(), p.to_string())),
        ..FakeEtcd::default()
    });
    let fake = Fake(f.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(kv_server::KvServer::new(fake.clone()))
            .add_service(lease_server::LeaseServer::new(fake.clone()))
            .add_service(auth_server::AuthServer::new(fake))
            .serve_with_incoming(incoming)
            .await
            .unwrap()
    });
    (f, url)
}

/// A port nothing listens on.
fn dead_endpoint() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

/// A replica's configuration for tests that are not about timeouts: no
/// answer of the local fake takes a minute, however loaded the machine, and
/// a failure is retried for an hour before the replica falls back.
fn config(endpoints: Vec<String>) -> EtcdConfig {
    let mut cfg = EtcdConfig::new(endpoints, Duration::from_secs(600));
    cfg.timeout = Duration::from_secs(60);
    cfg.retry_for = Duration::from_secs(3600);
    cfg.probe_interval = Duration::from_millis(100);
    cfg
}

fn replica(cfg: EtcdConfig) -> (Arc<EtcdSpanCache>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::default());
    (
        Arc::new(EtcdSpanCache::new(cfg, 10_000, metrics.clone()).unwrap()),
        metrics,
    )
}

fn ow(i: usize) -> ObjectWindow {
    ObjectWindow {
        object: ObjectRef::new("c", "", "pods", "ns", format!("p{i}")),
        window_start: 1800 * (i as u64 % 3),
    }
}

/// Errors counted with the `reason` label spelt `reason`.
fn count(m: &Metrics, reason: &str) -> u64 {
    let reason = *EtcdErrorReason::ALL
        .iter()
        .find(|r| r.as_str() == reason)
        .unwrap_or_else(|| panic!("no etcd error reason {reason:?}"));
    m.span_cache_etcd_errors
        .get_or_create(&Metrics::reason(reason))
        .get()
}

/// Waits for something a background task does (recovery after an outage).
/// The deadline only keeps a broken build from hanging the suite; it is far
/// beyond what the work takes on any machine.
async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Object and link spans in an OTLP/JSON output: (kind, trace id, span id).
/// (kind, trace id, span id, uid) of every span written to `path`: an
/// object span sent before its uid was known is sent again with it.
fn spans_by_kind(path: &std::path::Path) -> Vec<(String, String, String, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    for line in text.lines() {
        let req: Value = serde_json::from_str(line).unwrap();
        for rs in req["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for s in ss["spans"].as_array().unwrap() {
                    let attr = |key: &str| {
                        s["attributes"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .find(|a| a["key"] == key)
                            .and_then(|a| a["value"]["stringValue"].as_str())
                            .unwrap_or("")
                            .to_string()
                    };
                    out.push((
                        attr("kascade.span"),
                        s["traceId"].as_str().unwrap().to_string(),
                        s["spanId"].as_str().unwrap().to_string(),
                        attr("uid"),
                    ));
                }
            }
        }
    }
    out
}

/// The fake etcd at `url`, its answers never given up on however loaded
/// the machine: a replica that fell back would count local reservations
/// (asserted 0 by [`run_replica`]).
fn patient_etcd(url: String) -> SpanCacheConfig {
    SpanCacheConfig {
        etcd_timeout: Duration::from_secs(60),
        etcd_retry_for: Duration::from_secs(3600),
        ..SpanCacheConfig::default().etcd_endpoints([url])
    }
}

/// Serves one `collect` replica on an ephemeral port; posts `body` to
/// `/audit/{cluster}`, then flushes it.
async fn run_replica(
    span_cache: SpanCacheConfig,
    body: String,
    dir: &std::path::Path,
    name: &str,
) -> std::path::PathBuf {
    run_replica_with(span_cache, body, dir, name, |_| {}, |_| {}).await
}

/// [`run_replica`], its configuration changed by `configure`; `started`
/// gets its metrics before the batch is posted.
async fn run_replica_with(
    span_cache: SpanCacheConfig,
    body: String,
    dir: &std::path::Path,
    name: &str,
    configure: impl FnOnce(&mut CollectConfig),
    started: impl FnOnce(Arc<Metrics>),
) -> std::path::PathBuf {
    let out = dir.join(format!("{name}.jsonl"));
    let mut config = CollectConfig::default().spool_dir(dir.join(format!("{name}-spool")));
    config.export = config.export.output(OutputSpec::OtlpJson(out.clone()));
    config.span_cache = span_cache;
    configure(&mut config);
    let (apps, pipeline) = collect::build(&config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, apps.audit).await.unwrap() });
    started(pipeline.metrics.clone());
    let r = reqwest::Client::new()
        .post(format!("{url}/audit/replicas"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let metrics = pipeline.metrics.clone();
    pipeline.finish().await;
    assert_eq!(
        metrics.span_cache_local_reservations.get(),
        0,
        "replica {name} fell back to its local cache"
    );
    out
}

mod outages;
mod pipeline;
mod replicas;
