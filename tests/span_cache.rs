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

/// 600 concurrent callers on two replicas, with every fifth transaction
/// answered only after the client's timeout (its retry in time) (the write itself happened):
/// the timed-out reservations are retried, so each object window and each
/// link is still reserved exactly once and nobody falls back. This is what
/// a loaded machine did to the test before (202–205 windows reserved).
#[tokio::test]
async fn two_replicas_reserve_each_window_and_link_once() {
    let (fake, url) = start_fake(None).await;
    fake.hold_every.store(5, Ordering::SeqCst);
    let mut cfg = config(vec![url]);
    cfg.timeout = Duration::from_millis(300);
    let (a, ma) = replica(cfg.clone());
    let (b, mb) = replica(cfg);
    let mut tasks = Vec::new();
    for i in 0..200 {
        for c in [a.clone(), b.clone(), a.clone()] {
            tasks.push(tokio::spawn(async move {
                let o = ow(i);
                let slot = c.fetch_or_reserve(&o, true).await.unwrap();
                let link = c.record_link(&o, 42).await.unwrap();
                (slot == Slot::Created, link)
            }));
        }
    }
    let mut created = 0;
    let mut linked = 0;
    for t in tasks {
        let (c, l) = t.await.unwrap();
        created += c as usize;
        linked += l as usize;
    }
    assert!(!a.falling_back() && !b.falling_back());
    assert_eq!(created, 200, "each object window reserved exactly once");
    assert_eq!(linked, 200, "each link recorded exactly once");
    assert!(count(&ma, "timeout") + count(&mb, "timeout") > 0);
    assert_eq!(ma.span_cache_local_reservations.get(), 0);
    assert_eq!(mb.span_cache_local_reservations.get(), 0);
    let v = fake
        .get(&etcd_key("/kascade/spans/", &ow(7), None))
        .unwrap();
    assert!(v["replica"].as_str().unwrap().contains('/'), "{v}");
    assert!(v["at"].as_str().unwrap().ends_with('Z'), "{v}");
    assert!(
        fake.get(&etcd_key("/kascade/spans/", &ow(7), Some(42)))
            .is_some()
    );
    // Known windows and links cost no round trip.
    let before = fake.requests.load(Ordering::SeqCst);
    assert_eq!(
        a.fetch_or_reserve(&ow(7), true).await.unwrap(),
        Slot::Existing
    );
    assert!(!b.record_link(&ow(7), 42).await.unwrap());
    assert_eq!(fake.requests.load(Ordering::SeqCst), before);
}

/// A replica sends an object window's span without the object's uid (its
/// first write there had none, e.g. a refused delete): whichever replica
/// first has the uid sends the span again, once between them — the other
/// replica too, not only the one that sent it without (before, only that
/// one did). A window first sent with the uid is never sent again.
#[tokio::test]
async fn a_span_sent_without_the_uid_is_sent_again_once_by_whichever_replica_has_it() {
    let (fake, url) = start_fake(None).await;
    let (a, _) = replica(config(vec![url.clone()]));
    let (b, _) = replica(config(vec![url]));
    let fetch = |c: &Arc<EtcdSpanCache>, i: usize, has_uid: bool| {
        let c = c.clone();
        async move { c.fetch_or_reserve(&ow(i), has_uid).await.unwrap() }
    };
    // Sent without the uid by a; b has it first.
    assert_eq!(fetch(&a, 1, false).await, Slot::Created);
    let v = fake
        .get(&etcd_key("/kascade/spans/", &ow(1), None))
        .unwrap();
    assert_eq!(v["without_uid"], true, "{v}");
    assert_eq!(fetch(&b, 1, false).await, Slot::Existing);
    assert_eq!(fetch(&b, 1, true).await, Slot::UidMissing);
    assert_eq!(fetch(&b, 1, true).await, Slot::Existing);
    assert_eq!(fetch(&a, 1, true).await, Slot::Existing);
    // Sent without the uid by a; a has it first.
    assert_eq!(fetch(&a, 2, false).await, Slot::Created);
    assert_eq!(fetch(&a, 2, true).await, Slot::UidMissing);
    assert_eq!(fetch(&b, 2, true).await, Slot::Existing);
    // Both have it at once: one of them sends it again.
    assert_eq!(fetch(&b, 3, false).await, Slot::Created);
    let (x, y) = tokio::join!(fetch(&a, 3, true), fetch(&b, 3, true));
    let mut both = [x, y];
    both.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(both, [Slot::Existing, Slot::UidMissing]);
    // Sent with the uid: never again, and the value says nothing of it.
    assert_eq!(fetch(&a, 4, true).await, Slot::Created);
    let v = fake
        .get(&etcd_key("/kascade/spans/", &ow(4), None))
        .unwrap();
    assert!(v.get("without_uid").is_none(), "{v}");
    assert_eq!(fetch(&b, 4, true).await, Slot::Existing);
    assert_eq!(fetch(&a, 4, true).await, Slot::Existing);
}

/// etcd applies a reservation but its answer comes after the client's
/// timeout (outcome unknown): the retry finds the key holding this call's
/// value, so it is this replica's; a window another replica reserved while
/// this one's answer was late is not reserved again; and nobody falls back
/// to deciding alone.
#[tokio::test]
async fn a_reservation_answered_after_the_timeout_is_not_reserved_twice() {
    let (fake, url) = start_fake(None).await;
    let mut slow = config(vec![url.clone()]);
    slow.timeout = Duration::from_millis(200);
    let (a, ma) = replica(slow);
    let (b, mb) = replica(config(vec![url]));

    // Written, answer late: still ours, and only ours.
    fake.hold_next.store(1, Ordering::SeqCst);
    assert_eq!(
        a.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    assert!(count(&ma, "timeout") >= 1, "the first answer came too late");
    assert_eq!(
        b.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Existing
    );

    // Reserved by `b`; `a`'s answer late: `a` must not emit it too.
    assert_eq!(
        b.fetch_or_reserve(&ow(2), true).await.unwrap(),
        Slot::Created
    );
    fake.hold_next.store(1, Ordering::SeqCst);
    assert_eq!(
        a.fetch_or_reserve(&ow(2), true).await.unwrap(),
        Slot::Existing
    );
    assert!(b.record_link(&ow(2), 7).await.unwrap());
    fake.hold_next.store(1, Ordering::SeqCst);
    assert!(!a.record_link(&ow(2), 7).await.unwrap());

    assert!(!a.falling_back(), "a late answer is not an outage");
    assert_eq!(ma.span_cache_fallback.get(), 0);
    assert_eq!(ma.span_cache_local_reservations.get(), 0);
    assert!(
        ma.span_cache_etcd_retries
            .get_or_create(&Metrics::op(EtcdOp::Reserve))
            .get()
            >= 2
    );
    // Later windows are still decided together, once each.
    let mut created = 0;
    for i in 3..20 {
        for c in [&a, &b] {
            created += (c.fetch_or_reserve(&ow(i), true).await.unwrap() == Slot::Created) as usize;
        }
    }
    assert_eq!(created, 17);
    assert_eq!(mb.span_cache_local_reservations.get(), 0);
}

#[tokio::test]
async fn a_dead_endpoint_is_skipped() {
    let (_fake, url) = start_fake(None).await;
    let (a, m) = replica(config(vec![dead_endpoint(), url]));
    assert_eq!(
        a.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    assert!(!a.falling_back());
    assert_eq!(m.span_cache_fallback.get(), 0);
    assert_eq!(count(&m, "connect"), 1);
    // The endpoint that answered goes first from now on.
    assert_eq!(
        a.fetch_or_reserve(&ow(2), true).await.unwrap(),
        Slot::Created
    );
    assert_eq!(count(&m, "connect"), 1);
}

#[tokio::test]
async fn an_outage_falls_back_then_recovers_and_republishes() {
    let (fake, url) = start_fake(None).await;
    let mut cfg = config(vec![url.clone()]);
    // etcd answers "unavailable" at once: retried for this long, then the
    // replica decides alone.
    cfg.retry_for = Duration::from_millis(200);
    let (a, ma) = replica(cfg);
    let (b, _) = replica(config(vec![url]));
    assert_eq!(
        a.fetch_or_reserve(&ow(0), true).await.unwrap(),
        Slot::Created
    );

    fake.down.store(true, Ordering::SeqCst);
    assert_eq!(
        a.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    assert!(a.falling_back());
    assert_eq!(ma.span_cache_fallback.get(), 1);
    assert!(
        ma.span_cache_etcd_retries
            .get_or_create(&Metrics::op(EtcdOp::Reserve))
            .get()
            >= 1,
        "retried before falling back"
    );
    assert!(a.record_link(&ow(1), 9).await.unwrap());
    // Known before the outage: still known.
    assert_eq!(
        a.fetch_or_reserve(&ow(0), true).await.unwrap(),
        Slot::Existing
    );
    assert_eq!(a.pending_republish(), 2);
    assert_eq!(ma.span_cache_local_reservations.get(), 2);

    fake.down.store(false, Ordering::SeqCst);
    wait_until("recovery", || ma.span_cache_fallback.get() == 0).await;
    wait_until("republishing", || {
        fake.get(&etcd_key("/kascade/spans/", &ow(1), Some(9)))
            .is_some()
    })
    .await;
    assert!(!a.falling_back());
    // What `a` emitted alone is not emitted again by `b`.
    assert_eq!(
        b.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Existing
    );
    assert!(!b.record_link(&ow(1), 9).await.unwrap());
    // And `a` shares new windows again.
    assert_eq!(
        a.fetch_or_reserve(&ow(2), true).await.unwrap(),
        Slot::Created
    );
    assert_eq!(
        b.fetch_or_reserve(&ow(2), true).await.unwrap(),
        Slot::Existing
    );
}

/// etcd answers nothing in time, ever: after retrying for `retry_for` the
/// replica falls back, and from then on asks etcd nothing (no per-event
/// timeout) until the probe finds it again.
#[tokio::test]
async fn a_silent_etcd_is_retried_then_costs_nothing() {
    let (fake, url) = start_fake(None).await;
    fake.hold_all.store(true, Ordering::SeqCst);
    let mut cfg = config(vec![url]);
    cfg.timeout = Duration::from_millis(100);
    cfg.retry_for = Duration::from_millis(500);
    cfg.probe_interval = Duration::from_secs(3600);
    let (a, m) = replica(cfg);
    assert_eq!(
        a.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    assert!(a.falling_back());
    assert!(count(&m, "timeout") >= 2, "retried before falling back");
    let requests = fake.requests.load(Ordering::SeqCst);
    for i in 2..100 {
        a.fetch_or_reserve(&ow(i), true).await.unwrap();
        a.record_link(&ow(i), 1).await.unwrap();
    }
    assert_eq!(fake.requests.load(Ordering::SeqCst), requests);
    assert_eq!(m.span_cache_local_reservations.get(), 1 + 98 * 2);
}

#[tokio::test]
async fn a_lost_lease_is_replaced_without_falling_back() {
    let (fake, url) = start_fake(None).await;
    let (a, m) = replica(config(vec![url]));
    assert_eq!(
        a.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    fake.leases.lock().unwrap().clear();
    assert_eq!(
        a.fetch_or_reserve(&ow(2), true).await.unwrap(),
        Slot::Created
    );
    assert!(!a.falling_back());
    assert_eq!(
        m.span_cache_etcd_requests
            .get_or_create(&Metrics::op(EtcdOp::Lease))
            .get(),
        2
    );
}

#[tokio::test]
async fn authenticates_and_renews_a_rejected_token() {
    let (fake, url) = start_fake(Some(("kascade", "s3cret"))).await;
    let mut cfg = config(vec![url.clone()]);
    cfg.auth = Some(("kascade".into(), "s3cret".into()));
    let (a, m) = replica(cfg);
    assert_eq!(
        a.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    fake.tokens.lock().unwrap().clear();
    assert_eq!(
        a.fetch_or_reserve(&ow(2), true).await.unwrap(),
        Slot::Created
    );
    assert!(!a.falling_back());
    assert_eq!(
        m.span_cache_etcd_requests
            .get_or_create(&Metrics::op(EtcdOp::Auth))
            .get(),
        2
    );
    // A wrong password is an outage like any other: local fallback.
    let mut cfg = config(vec![url]);
    cfg.auth = Some(("kascade".into(), "wrong".into()));
    let (b, _) = replica(cfg);
    assert_eq!(
        b.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    assert!(b.falling_back());
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

#[tokio::test]
async fn two_collect_replicas_fed_the_same_batch_emit_each_span_once() {
    let (_fake, url) = start_fake(None).await;
    let dir = tempfile::tempdir().unwrap();
    let body = common::event_list(&common::audit_lines("deployment"));
    let etcd = patient_etcd(url);
    // Both replicas at once, as behind one webhook address.
    let (a, b) = tokio::join!(
        run_replica(etcd.clone(), body.clone(), dir.path(), "a"),
        run_replica(etcd, body.clone(), dir.path(), "b"),
    );
    let alone = run_replica(SpanCacheConfig::default(), body, dir.path(), "alone").await;

    let mut shared = spans_by_kind(&a);
    shared.extend(spans_by_kind(&b));
    let alone = spans_by_kind(&alone);
    // A span sent again is a duplicate only if it matches in carrying the
    // uid too; which spans are sent without it first depends on which
    // worker reaches the object first, so the sets compare span ids.
    let ids = |spans: &[(String, String, String, String)], kind: &str| {
        spans
            .iter()
            .filter(|s| s.0 == kind)
            .map(|s| (s.1.clone(), s.2.clone()))
            .collect::<HashSet<_>>()
    };
    for kind in ["object", "link"] {
        let sends: Vec<_> = shared.iter().filter(|s| s.0 == kind).collect();
        let distinct: HashSet<_> = sends.iter().collect();
        assert_eq!(sends.len(), distinct.len(), "a {kind} span emitted twice");
        let expected = ids(&alone, kind);
        assert!(!expected.is_empty());
        assert_eq!(
            ids(&shared, kind),
            expected,
            "the replicas together emit every {kind} span one replica alone does"
        );
    }
}

/// With a shared span cache a shard goes on with the next writes while a
/// write's reservations wait for etcd: with one shard and etcd answering
/// nothing, the reservations of several writes' objects still reach it. Once etcd answers, the spans are
/// those the local cache gives, each once.
#[tokio::test]
async fn a_shard_goes_on_while_etcd_has_not_answered() {
    let (fake, url) = start_fake(None).await;
    fake.answers_paused.store(true, Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let body = common::event_list(&common::audit_lines("deployment"));
    let etcd = patient_etcd(url);
    let path = dir.path().to_path_buf();
    let metrics = Arc::new(std::sync::OnceLock::new());
    let run = tokio::spawn({
        let body = body.clone();
        let metrics = metrics.clone();
        async move {
            run_replica_with(
                etcd,
                body,
                &path,
                "one",
                |c| c.pipeline = c.pipeline.clone().workers(1),
                move |m| drop(metrics.set(m)),
            )
            .await
        }
    });
    let object_keys = || {
        fake.kv
            .lock()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with(b"/kascade/spans/o/"))
            .count()
    };
    // A shard that waited would have sent one object window; four is what
    // the batching lets through unanswered (at most four requests on their
    // way, each with at least one window), however the writes are batched.
    wait_until("reservations of 4 objects' windows", || object_keys() >= 4).await;
    assert!(!run.is_finished());
    let waiting = || metrics.get().unwrap().emissions_waiting.get();
    assert!(waiting() >= 4, "{} writes waiting", waiting());
    fake.answers_paused.store(false, Ordering::SeqCst);
    fake.answers_resumed.notify_waiters();
    let out = run.await.unwrap();
    assert_eq!(waiting(), 0);
    let alone = run_replica(SpanCacheConfig::default(), body, dir.path(), "alone").await;
    let sent = spans_by_kind(&out);
    let distinct: HashSet<_> = sent.iter().collect();
    assert_eq!(sent.len(), distinct.len(), "a span emitted twice");
    let set = |spans: Vec<(String, String, String, String)>| {
        spans
            .into_iter()
            .map(|(kind, trace, span, _uid)| (kind, trace, span))
            .collect::<HashSet<_>>()
    };
    assert_eq!(set(sent), set(spans_by_kind(&alone)));
}

#[tokio::test]
async fn a_writes_relations_are_reserved_together() {
    // One shard: requests share a transaction when one write asks for
    // several keys at once (its links, then their objects' spans), or
    // writes whose spans are still being sent ask at the same time.
    let (fake, url) = start_fake(None).await;
    let dir = tempfile::tempdir().unwrap();
    let body = common::event_list(&common::audit_lines("deployment"));
    let etcd = patient_etcd(url);
    let out = run_replica_with(
        etcd,
        body.clone(),
        dir.path(),
        "one",
        |c| c.pipeline = c.pipeline.clone().workers(1),
        |_| {},
    )
    .await;
    let keys = fake.kv.lock().unwrap().len() as u64;
    let txns = fake.txns.load(Ordering::SeqCst);
    assert!(
        txns < keys,
        "{keys} keys reserved in {txns} transactions: one per key"
    );
    // The same spans as the local cache gives.
    let alone = run_replica(SpanCacheConfig::default(), body, dir.path(), "alone").await;
    // By span id: which object spans go out without the uid first depends
    // on which worker reaches the object first.
    let set = |p: &std::path::Path| {
        spans_by_kind(p)
            .into_iter()
            .map(|(kind, trace, span, _uid)| (kind, trace, span))
            .collect::<HashSet<_>>()
    };
    assert_eq!(set(&out), set(&alone));
}
