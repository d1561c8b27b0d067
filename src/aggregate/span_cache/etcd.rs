//! The span cache shared by `kascade collect` replicas through etcd.
//!
//! # Protocol
//!
//! Issue 5 describes fetch-or-reserve as "reserve with a lease, create the
//! span, publish its context; others wait briefly then use it". In kascade a
//! span's context is not something a replica has to publish: trace and span
//! ids are derived from (object, window) and from both ends of a link, so any
//! replica computes the same context on its own. What replicas must agree on
//! is only *who emits* each object span and each link span, so here the
//! reservation *is* the creation:
//!
//! * `fetch_or_reserve` is one etcd transaction: create the object window's
//!   key if it does not exist (`create_revision == 0`), attached to a lease.
//!   The replica whose transaction created the key emits the object span
//!   (`Created`); every other replica gets `Existing` and uses the derived
//!   context at once, nobody waits.
//! * `record_link` is the same transaction on a key per (object window,
//!   link), so each link span (and its reverse) is emitted once.
//! * The published value records who reserved and when, for debugging
//!   (`etcdctl get --prefix /kascade/spans/o/`):
//!   `{"replica":"<hostname>/<pid>","token":"<instance>-<seq>","at":"<RFC 3339>"}`.
//!   The token is unique per reservation, which makes a retried transaction
//!   safe: if a first attempt was applied but its answer lost (timeout,
//!   another endpoint tried), the retry finds the key holding its own value
//!   and still answers `Created`; a key holding another value was reserved
//!   by someone else, whose span it is.
//!
//! The trade-off: a replica that reserves and then dies before exporting
//! loses that object span (its audit spans still carry the derived parent
//! id); emitting twice is never traded for losing.
//!
//! # Slow etcd: retry, never guess
//!
//! A request that times out has an unknown outcome, and deciding alone then
//! (as the fallback does) emits a span another replica may emit too. So a
//! failed request (timeout, refused connection, unavailable / overloaded
//! etcd) is sent again with the same value, after a backoff (50 ms doubling
//! to 1 s), each timed-out attempt given twice as long as the one before (up
//! to 8 × `--etcd-timeout`, so a slow etcd still gets through), for
//! `--etcd-retry-for` (and at least twice). Only then does the replica fall
//! back; a slow etcd costs latency, never a duplicate span.
//! `kascade_span_cache_etcd_retries_total{op}` counts the retries.
//!
//! # Key layout
//!
//! With the default `--etcd-prefix /kascade/spans/` and the object key
//! `cluster/group/resource/namespace/name` (group and namespace empty for the
//! core group and cluster-scoped objects):
//!
//! ```text
//! /kascade/spans/o/<window start>/<cluster>/<group>/<resource>/<namespace>/<name>
//! /kascade/spans/l/<window start>/<cluster>/<group>/<resource>/<namespace>/<name>/<link key, 16 hex>
//! ```
//!
//! Window first, so one window's keys can be listed or counted with one
//! prefix; `o/` and `l/` so objects and links are counted apart.
//!
//! # Leases
//!
//! Every key is attached to a lease, so etcd forgets it on its own. A replica
//! holds one lease at a time and grants a new one every `rotate` (a quarter
//! of window + grace, between 10 s and 5 min); each lease's TTL is
//! window + grace + rotate, so every key lives at least window + grace after
//! its reservation (as long as the local cache keeps it) and at most one
//! rotation longer. Leases are never kept alive: a replica that stops leaves
//! nothing behind for longer than that. A lease etcd no longer knows (e.g.
//! its data was wiped) is replaced and the transaction retried once.
//!
//! # Local cache in front, and fallback
//!
//! A bounded local cache (the same as [`LocalSpanCache`]) sits in front:
//! object windows and links this replica has seen answered cost no round
//! trip. If etcd keeps failing for `--etcd-retry-for` (or answers an error a
//! retry cannot fix, such as a wrong password), the replica logs one
//! warning, sets `kascade_span_cache_fallback` to 1 and
//! from then on decides with the local cache alone, without calling etcd at
//! all (no per-event timeout). A background probe grants a lease every
//! `--etcd-probe-interval`; when that works it logs the recovery, sets the
//! gauge back to 0, and republishes the keys it reserved alone (bounded), so
//! other replicas that meet those windows later do not emit them again.
//! While falling back, replicas may emit the same object or link span twice.
//!
//! # Transport: etcd's JSON gateway, not gRPC
//!
//! The `etcd-client` crate the issue names compiles etcd's protos with
//! `protoc` at build time, which kascade does not require (its own protos go
//! through `protox`). etcd serves the same v3 API as JSON over HTTP (the
//! gRPC gateway) on its client URLs, so this talks to that with `reqwest`:
//! `POST /v3/kv/txn`, `/v3/lease/grant`, `/v3/auth/authenticate`, keys and
//! values base64, 64-bit integers as strings. Several endpoints are tried in
//! turn (the one that answered last goes first); TLS with a CA, optional
//! client certificate, and user/password authentication are supported. One
//! etcd quirk of the gateway: with `--client-cert-auth` *and* authentication
//! both on, it answers 400 to a client certificate that has a CommonName
//! (its guard for CVE-2018-16886), so give kascade a certificate without CN
//! and a user and password.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::local::LocalSpanCache;
use super::{Slot, SpanCache};
use crate::metrics::Metrics;
use crate::model::ObjectWindow;

/// TLS towards etcd.
#[derive(Clone, Debug)]
pub struct EtcdTls {
    /// CA bundle (PEM) that signed etcd's serving certificate.
    pub ca_file: PathBuf,
    /// Client certificate chain and key (PEM), when etcd wants one.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// Client URLs, e.g. `http://etcd-0:2379`; tried in turn.
    pub endpoints: Vec<String>,
    /// Every key starts with it (ends with `/`).
    pub prefix: String,
    /// Longest one request may take (per endpoint tried); a request retried
    /// after a timeout gets up to 8 times as long.
    pub timeout: Duration,
    /// How long a failed request (timeout, unreachable, unavailable) is
    /// retried before the replica falls back to deciding alone.
    pub retry_for: Duration,
    /// While falling back, how often etcd is probed.
    pub probe_interval: Duration,
    /// How long a key must live after its reservation: window + grace.
    pub key_ttl: Duration,
    pub tls: Option<EtcdTls>,
    /// User and password for etcd authentication.
    pub auth: Option<(String, String)>,
    /// Who reserves (recorded in the values).
    pub replica: String,
    /// Most keys reserved alone during an outage that are republished after it.
    pub max_republish: usize,
}

impl EtcdConfig {
    pub fn new(endpoints: Vec<String>, key_ttl: Duration) -> Self {
        Self {
            endpoints,
            prefix: "/kascade/spans/".to_string(),
            timeout: Duration::from_millis(500),
            retry_for: Duration::from_secs(10),
            probe_interval: Duration::from_secs(5),
            key_ttl,
            tls: None,
            auth: None,
            replica: default_replica(),
            max_republish: 100_000,
        }
    }

    /// How often a new lease is granted, and the lease TTL.
    fn lease_plan(&self) -> (Duration, i64) {
        let rotate = (self.key_ttl / 4).clamp(Duration::from_secs(10), Duration::from_secs(300));
        let ttl = (self.key_ttl + rotate).as_secs_f64().ceil() as i64;
        (rotate, ttl.max(10))
    }
}

/// `<hostname>/<pid>`: the replica recorded in reservations.
fn default_replica() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string());
    format!("{host}/{}", std::process::id())
}

/// A value no other cache instance has: start time, pid and a process-wide
/// counter, hashed.
fn instance_id() -> u64 {
    static INSTANCES: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let n = INSTANCES.fetch_add(1, Ordering::Relaxed);
    xxhash_rust::xxh3::xxh3_64(format!("{now}/{}/{n}", std::process::id()).as_bytes())
}

/// The etcd key of an object window (`link: None`) or of one of its links.
pub fn etcd_key(prefix: &str, ow: &ObjectWindow, link: Option<u64>) -> String {
    match link {
        None => format!("{prefix}o/{}/{}", ow.window_start, ow.object.key()),
        Some(k) => format!("{prefix}l/{}/{}/{k:016x}", ow.window_start, ow.object.key()),
    }
}

/// `http://host:2379`, `https://host:2379/` or `host:2379` → a base URL
/// without trailing slash.
fn normalize_endpoint(e: &str) -> anyhow::Result<String> {
    let e = e.trim().trim_end_matches('/');
    let url = if e.contains("://") {
        e.to_string()
    } else {
        format!("http://{e}")
    };
    let parsed = reqwest::Url::parse(&url).with_context(|| format!("{e:?} is not a URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        bail!("{e:?} is not an http(s)://host:port URL");
    }
    if parsed.path() != "/" && !parsed.path().is_empty() {
        bail!("{e:?}: an etcd endpoint has no path");
    }
    Ok(url)
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum EtcdError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("cannot reach etcd: {0}")]
    Connect(String),
    #[error("etcd answered HTTP {http}: {message} (gRPC code {code})")]
    Status {
        http: u16,
        code: i64,
        message: String,
    },
    #[error("unexpected answer from etcd: {0}")]
    Decode(String),
}

impl EtcdError {
    fn reason(&self) -> &'static str {
        match self {
            EtcdError::Timeout(_) => "timeout",
            EtcdError::Connect(_) => "connect",
            EtcdError::Status { .. } => "status",
            EtcdError::Decode(_) => "decode",
        }
    }

    /// Worth trying another endpoint: this one is away or cut off from the
    /// cluster (gRPC Unavailable / DeadlineExceeded, gateway 5xx).
    fn try_elsewhere(&self) -> bool {
        match self {
            EtcdError::Timeout(_) | EtcdError::Connect(_) => true,
            EtcdError::Status { http, code, .. } => *code == 14 || *code == 4 || *http >= 502,
            EtcdError::Decode(_) => false,
        }
    }

    /// Worth sending again: the endpoints were away, slow, overloaded or
    /// between leaders. After a timeout the outcome is unknown, so only an
    /// idempotent request may be retried (a reservation carries its value).
    fn transient(&self) -> bool {
        self.try_elsewhere()
            || matches!(self, EtcdError::Status { http, code, .. } if *code == 8 || *http == 429)
    }

    fn lease_not_found(&self) -> bool {
        matches!(self, EtcdError::Status { message, .. } if message.contains("lease not found"))
    }

    fn auth_invalid(&self) -> bool {
        matches!(self, EtcdError::Status { code: 16, .. })
            || matches!(self, EtcdError::Status { message, .. } if message.contains("invalid auth token"))
    }
}

/// The error and its sources on one line (reqwest hides the cause in them).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// etcd's v3 JSON gateway on one or more endpoints.
struct Gateway {
    http: reqwest::Client,
    endpoints: Vec<String>,
    /// The endpoint tried first (the last that answered).
    current: AtomicUsize,
    auth: Option<(String, String)>,
    /// Auth token per endpoint (simple tokens are valid only where issued).
    tokens: Mutex<Vec<Option<String>>>,
    metrics: Arc<Metrics>,
}

impl Gateway {
    fn new(cfg: &EtcdConfig, metrics: Arc<Metrics>) -> anyhow::Result<Self> {
        if cfg.endpoints.is_empty() {
            bail!("no etcd endpoint");
        }
        let endpoints = cfg
            .endpoints
            .iter()
            .map(|e| normalize_endpoint(e))
            .collect::<anyhow::Result<Vec<_>>>()?;
        if cfg.tls.is_none() && endpoints.iter().any(|e| e.starts_with("https://")) {
            bail!("an https:// etcd endpoint needs --etcd-ca-file");
        }
        let mut b = reqwest::Client::builder()
            .connect_timeout(cfg.timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .no_proxy();
        if let Some(tls) = &cfg.tls {
            b = b.use_preconfigured_tls(tls_client_config(tls)?);
        }
        let http = b.build().context("cannot build the etcd HTTP client")?;
        Ok(Self {
            http,
            tokens: Mutex::new(vec![None; endpoints.len()]),
            endpoints,
            current: AtomicUsize::new(0),
            auth: cfg.auth.clone(),
            metrics,
        })
    }

    /// One request to one endpoint, given `timeout` to answer.
    async fn send(
        &self,
        idx: usize,
        path: &str,
        body: &Value,
        token: Option<&str>,
        timeout: Duration,
    ) -> Result<Value, EtcdError> {
        let url = format!("{}{}", self.endpoints[idx], path);
        let mut req = self.http.post(url).timeout(timeout).json(body);
        if let Some(t) = token {
            req = req.header(reqwest::header::AUTHORIZATION, t);
        }
        let classify = |e: reqwest::Error| {
            if e.is_timeout() {
                EtcdError::Timeout(timeout)
            } else {
                EtcdError::Connect(error_chain(&e))
            }
        };
        let resp = req.send().await.map_err(classify)?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(classify)?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| EtcdError::Decode(e.to_string()));
        }
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Err(EtcdError::Status {
            http: status.as_u16(),
            code: v.get("code").and_then(Value::as_i64).unwrap_or(-1),
            message: v
                .get("message")
                .or_else(|| v.get("error"))
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(200).collect()),
        })
    }

    async fn token(
        &self,
        idx: usize,
        renew: bool,
        timeout: Duration,
    ) -> Result<Option<String>, EtcdError> {
        let Some((user, password)) = &self.auth else {
            return Ok(None);
        };
        if !renew && let Some(t) = self.tokens.lock().unwrap()[idx].clone() {
            return Ok(Some(t));
        }
        self.metrics
            .span_cache_etcd_requests
            .get_or_create(&Metrics::op("auth"))
            .inc();
        let v = self
            .send(
                idx,
                "/v3/auth/authenticate",
                &json!({"name": user, "password": password}),
                None,
                timeout,
            )
            .await?;
        let t = v
            .get("token")
            .and_then(Value::as_str)
            .ok_or_else(|| EtcdError::Decode("authenticate answered no token".into()))?
            .to_string();
        self.tokens.lock().unwrap()[idx] = Some(t.clone());
        Ok(Some(t))
    }

    /// One request to one endpoint, authenticated if configured (a rejected
    /// token is renewed once).
    async fn post_one(
        &self,
        idx: usize,
        path: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, EtcdError> {
        let token = self.token(idx, false, timeout).await?;
        match self.send(idx, path, body, token.as_deref(), timeout).await {
            Err(e) if token.is_some() && e.auth_invalid() => {
                let token = self.token(idx, true, timeout).await?;
                self.send(idx, path, body, token.as_deref(), timeout).await
            }
            r => r,
        }
    }

    /// The request on the current endpoint, then on the others while they
    /// are away, each given `timeout`; counted under `op`.
    async fn post(
        &self,
        op: &str,
        path: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, EtcdError> {
        self.metrics
            .span_cache_etcd_requests
            .get_or_create(&Metrics::op(op))
            .inc();
        let started = Instant::now();
        let n = self.endpoints.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut result = Err(EtcdError::Decode("no endpoint".into()));
        for i in 0..n {
            let idx = (first + i) % n;
            result = self.post_one(idx, path, body, timeout).await;
            match &result {
                Ok(_) => {
                    if i > 0 {
                        self.current.store(idx, Ordering::Relaxed);
                    }
                    break;
                }
                Err(e) => {
                    self.metrics
                        .span_cache_etcd_errors
                        .get_or_create(&Metrics::reason(e.reason()))
                        .inc();
                    if !e.try_elsewhere() {
                        break;
                    }
                    tracing::debug!(endpoint = %self.endpoints[idx], error = %e, "etcd endpoint failed");
                }
            }
        }
        self.metrics
            .span_cache_etcd_seconds
            .0
            .observe(started.elapsed().as_secs_f64());
        result
    }
}

fn tls_client_config(tls: &EtcdTls) -> anyhow::Result<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let ca = &tls.ca_file;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca)
        .map_err(|e| anyhow::anyhow!("--etcd-ca-file {}: {e}", ca.display()))?
    {
        let c = c.map_err(|e| anyhow::anyhow!("--etcd-ca-file {}: {e}", ca.display()))?;
        roots
            .add(c)
            .with_context(|| format!("--etcd-ca-file {}", ca.display()))?;
    }
    if roots.is_empty() {
        bail!("--etcd-ca-file {}: no certificate in it", ca.display());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    Ok(match &tls.client_cert {
        Some((cert, key)) => {
            let certs = CertificateDer::pem_file_iter(cert)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| anyhow::anyhow!("--etcd-cert-file {}: {e}", cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| anyhow::anyhow!("--etcd-key-file {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(certs, key)
                .context("--etcd-cert-file and --etcd-key-file do not form a usable certificate")?
        }
        None => builder.with_no_client_auth(),
    })
}

/// Who holds a key after a create-if-absent transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    /// This reservation created it (maybe in an attempt whose answer was lost).
    Created,
    /// Another reservation did: another replica's, or this cache instance's
    /// own (a concurrent call, or an attempt given up on before a fallback).
    Taken { by_this_instance: bool },
}

/// First pause between retries of a failed etcd request; doubled each time.
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(50);
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// A request retried after a timeout gets twice as long each time, up to
/// this multiple of `--etcd-timeout` (a slow etcd still gets through).
const MAX_TIMEOUT_FACTOR: u32 = 8;

#[derive(Clone, Copy)]
struct Lease {
    id: i64,
    granted: Instant,
}

struct Inner {
    gw: Gateway,
    prefix: String,
    replica: String,
    endpoints: String,
    probe_interval: Duration,
    /// What one request may take at first (retries get longer).
    timeout: Duration,
    /// How long failed requests are retried before falling back.
    retry_for: Duration,
    rotate: Duration,
    lease_ttl: i64,
    max_republish: usize,
    front: LocalSpanCache,
    metrics: Arc<Metrics>,
    fallback: AtomicBool,
    outage_started: Mutex<Option<Instant>>,
    lease: Mutex<Option<Lease>>,
    grant_lock: tokio::sync::Mutex<()>,
    /// Unique per cache instance (two in one process, or a restart with the
    /// same pid, never share tokens).
    instance: u64,
    seq: AtomicU64,
    /// Keys reserved alone while falling back, republished on recovery.
    pending: Mutex<Vec<String>>,
    me: Weak<Inner>,
}

/// The span cache shared through etcd (see the module documentation).
pub struct EtcdSpanCache {
    inner: Arc<Inner>,
}

impl EtcdSpanCache {
    /// `max_entries` bounds the local cache in front; `cfg.key_ttl` is also
    /// how long it keeps an entry.
    pub fn new(cfg: EtcdConfig, max_entries: u64, metrics: Arc<Metrics>) -> anyhow::Result<Self> {
        let gw = Gateway::new(&cfg, metrics.clone())?;
        let (rotate, lease_ttl) = cfg.lease_plan();
        let mut prefix = cfg.prefix.clone();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        let inner = Arc::new_cyclic(|me| Inner {
            endpoints: gw.endpoints.join(","),
            gw,
            prefix,
            replica: cfg.replica.clone(),
            probe_interval: cfg.probe_interval.max(Duration::from_millis(100)),
            timeout: cfg.timeout,
            retry_for: cfg.retry_for,
            rotate,
            lease_ttl,
            max_republish: cfg.max_republish,
            front: LocalSpanCache::new(max_entries, cfg.key_ttl).count_evictions(&metrics),
            metrics,
            fallback: AtomicBool::new(false),
            outage_started: Mutex::new(None),
            lease: Mutex::new(None),
            grant_lock: tokio::sync::Mutex::new(()),
            instance: instance_id(),
            seq: AtomicU64::new(0),
            pending: Mutex::new(Vec::new()),
            me: me.clone(),
        });
        Ok(Self { inner })
    }

    /// Checks etcd in the background (when called inside a Tokio runtime):
    /// logs that the cache is shared, or falls back with the warning.
    pub fn start(&self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.inner.clone();
        rt.spawn(async move {
            match inner
                .retrying("lease", |timeout| inner.fresh_lease("lease", timeout))
                .await
            {
                Ok(_) => tracing::info!(endpoints = %inner.endpoints, prefix = %inner.prefix,
                    lease_ttl_s = inner.lease_ttl, "span cache shared with other replicas through etcd"),
                Err(e) => inner.enter_fallback(&e),
            }
        });
    }

    /// True while etcd is away and the local cache decides alone.
    pub fn falling_back(&self) -> bool {
        self.inner.fallback.load(Ordering::SeqCst)
    }

    /// Keys reserved alone during the current outage, waiting to be republished.
    pub fn pending_republish(&self) -> usize {
        self.inner.pending.lock().unwrap().len()
    }
}

impl Inner {
    fn falling_back(&self) -> bool {
        self.fallback.load(Ordering::SeqCst)
    }

    /// The value a reservation publishes; unique per call.
    fn next_value(&self) -> Vec<u8> {
        let at = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        json!({
            "replica": self.replica,
            "token": format!("{}{seq}", self.token_prefix()),
            "at": at,
        })
        .to_string()
        .into_bytes()
    }

    async fn grant(&self, op: &str, timeout: Duration) -> Result<Lease, EtcdError> {
        let v = self
            .gw
            .post(
                op,
                "/v3/lease/grant",
                &json!({"TTL": self.lease_ttl.to_string()}),
                timeout,
            )
            .await?;
        if let Some(err) = v
            .get("error")
            .and_then(Value::as_str)
            .filter(|e| !e.is_empty())
        {
            return Err(EtcdError::Status {
                http: 200,
                code: -1,
                message: err.to_string(),
            });
        }
        let id = match v.get("ID") {
            Some(Value::String(s)) => s.parse::<i64>().ok(),
            Some(Value::Number(n)) => n.as_i64(),
            _ => None,
        }
        .ok_or_else(|| EtcdError::Decode(format!("lease grant answered no ID: {v}")))?;
        Ok(Lease {
            id,
            granted: Instant::now(),
        })
    }

    /// Grants a new lease and makes it the current one.
    async fn fresh_lease(&self, op: &str, timeout: Duration) -> Result<i64, EtcdError> {
        let _g = self.grant_lock.lock().await;
        let l = self.grant(op, timeout).await?;
        *self.lease.lock().unwrap() = Some(l);
        Ok(l.id)
    }

    /// The current lease, granting a new one when it is due for rotation.
    async fn lease(&self, timeout: Duration) -> Result<i64, EtcdError> {
        let usable = |l: &Option<Lease>| {
            l.filter(|l| l.granted.elapsed() < self.rotate)
                .map(|l| l.id)
        };
        if let Some(id) = usable(&self.lease.lock().unwrap()) {
            return Ok(id);
        }
        let _g = self.grant_lock.lock().await;
        if let Some(id) = usable(&self.lease.lock().unwrap()) {
            return Ok(id);
        }
        let l = self.grant("lease", timeout).await?;
        *self.lease.lock().unwrap() = Some(l);
        Ok(l.id)
    }

    fn forget_lease(&self, id: i64) {
        let mut l = self.lease.lock().unwrap();
        if l.is_some_and(|l| l.id == id) {
            *l = None;
        }
    }

    /// Creates `key` holding `value` unless it exists. Sending the same
    /// `value` again is safe: a key that holds it was created by an earlier
    /// attempt of this very reservation whose answer was lost.
    async fn create_if_absent(
        &self,
        op: &str,
        key: &str,
        value: &[u8],
        lease: i64,
        timeout: Duration,
    ) -> Result<Claim, EtcdError> {
        let k = B64.encode(key);
        let body = json!({
            "compare": [{"key": k, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": {"key": k, "value": B64.encode(value), "lease": lease.to_string()}}],
            "failure": [{"request_range": {"key": k}}],
        });
        let r = self.gw.post(op, "/v3/kv/txn", &body, timeout).await?;
        if r.get("succeeded").and_then(Value::as_bool) == Some(true) {
            return Ok(Claim::Created);
        }
        let stored = r
            .pointer("/responses/0/response_range/kvs/0/value")
            .and_then(Value::as_str)
            .ok_or_else(|| EtcdError::Decode(format!("failed transaction without the key: {r}")))?;
        let stored = B64
            .decode(stored)
            .map_err(|e| EtcdError::Decode(format!("value is not base64: {e}")))?;
        if stored == value {
            return Ok(Claim::Created);
        }
        let token = serde_json::from_slice::<Value>(&stored)
            .ok()
            .and_then(|v| v.get("token")?.as_str().map(str::to_string))
            .unwrap_or_default();
        Ok(Claim::Taken {
            by_this_instance: token.starts_with(&self.token_prefix()),
        })
    }

    /// One attempt at reserving `key` with `value` under the current lease
    /// (replacing a lease etcd lost: that transaction was not applied).
    async fn reserve_once(
        &self,
        op: &str,
        key: &str,
        value: &[u8],
        timeout: Duration,
    ) -> Result<Claim, EtcdError> {
        let lease = self.lease(timeout).await?;
        match self.create_if_absent(op, key, value, lease, timeout).await {
            Err(e) if e.lease_not_found() => {
                self.forget_lease(lease);
                let lease = self.lease(timeout).await?;
                self.create_if_absent(op, key, value, lease, timeout).await
            }
            r => r,
        }
    }

    /// Runs `attempt` (given its timeout) until it succeeds, fails for a
    /// reason a retry cannot fix, or has failed for `retry_for` (and at
    /// least twice): a timeout leaves the outcome unknown, so the same
    /// request is sent again, with a longer timeout in case etcd is just
    /// slow, rather than deciding alone. Stops early once the replica falls
    /// back (another request found etcd gone).
    async fn retrying<T, F, Fut>(&self, op: &str, mut attempt: F) -> Result<T, EtcdError>
    where
        F: FnMut(Duration) -> Fut,
        Fut: std::future::Future<Output = Result<T, EtcdError>>,
    {
        let started = tokio::time::Instant::now();
        let mut timeout = self.timeout;
        let mut backoff = RETRY_BACKOFF_MIN;
        let mut attempts = 0u32;
        loop {
            let e = match attempt(timeout).await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            attempts += 1;
            let over = started.elapsed() + backoff >= self.retry_for && attempts >= 2;
            if !e.transient() || over || self.falling_back() {
                return Err(e);
            }
            self.metrics
                .span_cache_etcd_retries
                .get_or_create(&Metrics::op(op))
                .inc();
            tracing::debug!(op, error = %e, attempts, retry_in = ?backoff, "etcd request failed; retrying it");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
            if matches!(e, EtcdError::Timeout(_)) {
                timeout = (timeout * 2).min(self.timeout * MAX_TIMEOUT_FACTOR);
            }
        }
    }

    /// Reserves `key` (see [`Inner::retrying`]): every attempt carries the
    /// same value, so a retry recognises a first attempt that was applied.
    async fn reserve_key(&self, op: &str, key: &str) -> Result<Claim, EtcdError> {
        let value = self.next_value();
        self.retrying(op, |timeout| self.reserve_once(op, key, &value, timeout))
            .await
    }

    /// The start of every token this cache instance writes.
    fn token_prefix(&self) -> String {
        format!("{:016x}-", self.instance)
    }

    /// The role key `{prefix}roles/<role>` holds this replica's identity
    /// under a lease of `ttl`: created if absent, re-attached to a fresh lease
    /// if it is ours (the old lease then simply expires). A holder that stops
    /// renewing loses the role after `ttl`.
    async fn hold(&self, role: &str, ttl: Duration) -> Result<bool, EtcdError> {
        let key = B64.encode(format!("{}roles/{role}", self.prefix));
        let me = B64.encode(format!("{}#{:x}", self.replica, self.instance));
        let v = self
            .gw
            .post(
                "role",
                "/v3/lease/grant",
                &json!({"TTL": ttl.as_secs().max(1).to_string()}),
                self.timeout,
            )
            .await?;
        let lease = match v.get("ID") {
            Some(Value::String(s)) => s.parse::<i64>().ok(),
            Some(Value::Number(n)) => n.as_i64(),
            _ => None,
        }
        .ok_or_else(|| EtcdError::Decode(format!("lease grant answered no ID: {v}")))?;
        let put = json!([{"request_put": {"key": key, "value": me, "lease": lease.to_string()}}]);
        for compare in [
            json!([{"key": key, "target": "VALUE", "result": "EQUAL", "value": me}]),
            json!([{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}]),
        ] {
            let r = self
                .gw
                .post(
                    "role",
                    "/v3/kv/txn",
                    &json!({"compare": compare, "success": put}),
                    self.timeout,
                )
                .await?;
            if r.get("succeeded").and_then(Value::as_bool) == Some(true) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn enter_fallback(&self, e: &EtcdError) {
        if self.fallback.swap(true, Ordering::SeqCst) {
            return;
        }
        *self.outage_started.lock().unwrap() = Some(Instant::now());
        self.metrics.span_cache_fallback.set(1);
        tracing::warn!(
            endpoints = %self.endpoints,
            error = %e,
            probe_every = ?self.probe_interval,
            retried_for = ?self.retry_for,
            "etcd span cache unavailable: FALLING BACK to this replica's local span cache; \
             until etcd returns, replicas may emit the same object and link spans twice"
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(probe_loop(self.me.clone()));
        }
    }

    /// etcd answered again: share again, and republish what was reserved alone.
    async fn recover(&self) {
        let outage = self
            .outage_started
            .lock()
            .unwrap()
            .take()
            .map(|t| t.elapsed());
        self.fallback.store(false, Ordering::SeqCst);
        self.metrics.span_cache_fallback.set(0);
        let pending = std::mem::take(&mut *self.pending.lock().unwrap());
        tracing::info!(
            endpoints = %self.endpoints,
            outage = ?outage.unwrap_or_default(),
            republishing = pending.len(),
            "etcd span cache is reachable again: spans are deduplicated across replicas again"
        );
        let results: Vec<(String, Result<Claim, EtcdError>)> = futures::stream::iter(pending)
            .map(|key| async move {
                let r = self.reserve_key("republish", &key).await;
                (key, r)
            })
            .buffer_unordered(8)
            .collect()
            .await;
        let mut conflicts = 0usize;
        let mut failed = Vec::new();
        let mut error = None;
        for (key, r) in results {
            match r {
                // Ours: an attempt whose answer was lost when etcd went away.
                Ok(
                    Claim::Created
                    | Claim::Taken {
                        by_this_instance: true,
                    },
                ) => {}
                Ok(Claim::Taken { .. }) => conflicts += 1,
                Err(e) => {
                    failed.push(key);
                    error = Some(e);
                }
            }
        }
        if conflicts > 0 {
            tracing::warn!(
                conflicts,
                "while etcd was away, this replica emitted {conflicts} object/link spans that another replica had reserved too"
            );
        }
        if let Some(e) = error {
            self.pending.lock().unwrap().extend(failed);
            self.enter_fallback(&e);
        }
    }

    /// Remembers a key reserved alone, to republish it after the outage.
    fn remember(&self, key: String) {
        self.metrics.span_cache_local_reservations.inc();
        let mut p = self.pending.lock().unwrap();
        if p.len() < self.max_republish {
            p.push(key);
        }
    }

    fn reserve_alone(&self, ow: &ObjectWindow) -> Slot {
        let slot = self.front.reserve(ow);
        if slot == Slot::Created {
            self.remember(etcd_key(&self.prefix, ow, None));
        }
        slot
    }

    fn link_alone(&self, ow: &ObjectWindow, link_key: u64) -> bool {
        let new = self.front.add_link(ow, link_key);
        if new {
            self.remember(etcd_key(&self.prefix, ow, Some(link_key)));
        }
        new
    }

    async fn fetch_or_reserve(&self, ow: &ObjectWindow) -> Slot {
        if self.front.contains(ow) {
            return Slot::Existing;
        }
        if self.falling_back() {
            return self.reserve_alone(ow);
        }
        match self
            .reserve_key("reserve", &etcd_key(&self.prefix, ow, None))
            .await
        {
            Ok(claim) => {
                self.front.mark(ow);
                if claim == Claim::Created {
                    Slot::Created
                } else {
                    Slot::Existing
                }
            }
            Err(e) => {
                self.enter_fallback(&e);
                self.reserve_alone(ow)
            }
        }
    }

    async fn record_link(&self, ow: &ObjectWindow, link_key: u64) -> bool {
        if self.front.has_link(ow, link_key) {
            return false;
        }
        if self.falling_back() {
            return self.link_alone(ow, link_key);
        }
        match self
            .reserve_key("link", &etcd_key(&self.prefix, ow, Some(link_key)))
            .await
        {
            Ok(claim) => {
                self.front.add_link(ow, link_key);
                claim == Claim::Created
            }
            Err(e) => {
                self.enter_fallback(&e);
                self.link_alone(ow, link_key)
            }
        }
    }
}

/// While falling back: a lease grant every probe interval until one works.
async fn probe_loop(me: Weak<Inner>) {
    loop {
        let Some(interval) = me.upgrade().map(|i| i.probe_interval) else {
            return;
        };
        tokio::time::sleep(interval).await;
        let Some(inner) = me.upgrade() else {
            return;
        };
        match inner.fresh_lease("probe", inner.timeout).await {
            Ok(_) => {
                inner.recover().await;
                return;
            }
            Err(e) => tracing::debug!(error = %e, "etcd span cache still unavailable"),
        }
    }
}

impl SpanCache for EtcdSpanCache {
    fn fetch_or_reserve<'a>(&'a self, ow: &'a ObjectWindow) -> BoxFuture<'a, anyhow::Result<Slot>> {
        Box::pin(async move { Ok(self.inner.fetch_or_reserve(ow).await) })
    }

    fn record_link<'a>(
        &'a self,
        ow: &'a ObjectWindow,
        link_key: u64,
    ) -> BoxFuture<'a, anyhow::Result<bool>> {
        Box::pin(async move { Ok(self.inner.record_link(ow, link_key).await) })
    }

    fn entry_count(&self) -> u64 {
        self.inner.front.len()
    }

    fn hold<'a>(&'a self, role: &'a str, ttl: Duration) -> BoxFuture<'a, anyhow::Result<bool>> {
        Box::pin(async move {
            self.inner
                .hold(role, ttl)
                .await
                .map_err(anyhow::Error::from)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ObjectRef;

    fn ow(ns: &str, name: &str, w: u64) -> ObjectWindow {
        ObjectWindow {
            object: ObjectRef::new("prod", "apps", "deployments", ns, name),
            window_start: w,
        }
    }

    #[test]
    fn key_layout() {
        let p = "/kascade/spans/";
        assert_eq!(
            etcd_key(p, &ow("default", "web", 1800), None),
            "/kascade/spans/o/1800/prod/apps/deployments/default/web"
        );
        assert_eq!(
            etcd_key(p, &ow("default", "web", 1800), Some(0xabc)),
            "/kascade/spans/l/1800/prod/apps/deployments/default/web/0000000000000abc"
        );
        let node = ObjectWindow {
            object: ObjectRef::new("prod", "", "nodes", "", "n1"),
            window_start: 0,
        };
        assert_eq!(
            etcd_key(p, &node, None),
            "/kascade/spans/o/0/prod//nodes//n1"
        );
        // Object keys never collide with link keys, nor windows with each other.
        assert_ne!(
            etcd_key(p, &ow("a", "b", 1), None),
            etcd_key(p, &ow("a", "b", 18), None)
        );
    }

    #[test]
    fn endpoints_are_normalized_and_checked() {
        assert_eq!(
            normalize_endpoint("http://e:2379/").unwrap(),
            "http://e:2379"
        );
        assert_eq!(normalize_endpoint(" e:2379 ").unwrap(), "http://e:2379");
        assert_eq!(
            normalize_endpoint("https://10.0.0.1:2379").unwrap(),
            "https://10.0.0.1:2379"
        );
        assert!(normalize_endpoint("ftp://e:2379").is_err());
        assert!(normalize_endpoint("http://e:2379/v3").is_err());
        let cfg = EtcdConfig::new(vec!["https://e:2379".into()], Duration::from_secs(60));
        let err = EtcdSpanCache::new(cfg, 10, Arc::new(Metrics::default()))
            .err()
            .unwrap();
        assert!(err.to_string().contains("--etcd-ca-file"), "{err}");
    }

    #[test]
    fn leases_outlive_window_plus_grace() {
        let cfg = EtcdConfig::new(vec!["e:1".into()], Duration::from_secs(35 * 60));
        let (rotate, ttl) = cfg.lease_plan();
        assert_eq!(rotate, Duration::from_secs(300));
        assert_eq!(ttl, 35 * 60 + 300);
        let cfg = EtcdConfig::new(vec!["e:1".into()], Duration::from_secs(2));
        let (rotate, ttl) = cfg.lease_plan();
        assert_eq!(rotate, Duration::from_secs(10));
        assert_eq!(ttl, 12);
    }

    #[test]
    fn errors_are_classified() {
        let unavailable = EtcdError::Status {
            http: 503,
            code: 14,
            message: "etcdserver: no leader".into(),
        };
        assert!(unavailable.try_elsewhere());
        let lease = EtcdError::Status {
            http: 404,
            code: 5,
            message: "etcdserver: requested lease not found".into(),
        };
        assert!(lease.lease_not_found() && !lease.try_elsewhere());
        let auth = EtcdError::Status {
            http: 401,
            code: 16,
            message: "etcdserver: invalid auth token".into(),
        };
        assert!(auth.auth_invalid());
        assert!(EtcdError::Timeout(Duration::from_millis(1)).try_elsewhere());
        assert_eq!(EtcdError::Connect("refused".into()).reason(), "connect");
    }

    /// Nothing listens on the endpoint: the first call retries for
    /// `retry_for` (on tokio's paused clock: the ten seconds pass at once),
    /// then falls back (one warning, gauge 1); later calls never wait on
    /// etcd, the local cache still reserves each window once, and the keys
    /// wait for republishing.
    #[tokio::test(start_paused = true)]
    async fn unreachable_etcd_is_retried_then_falls_back_to_the_local_cache() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let metrics = Arc::new(Metrics::default());
        let mut cfg = EtcdConfig::new(
            vec![format!("http://127.0.0.1:{port}")],
            Duration::from_secs(60),
        );
        cfg.retry_for = Duration::from_secs(10);
        cfg.probe_interval = Duration::from_secs(3600);
        let c = EtcdSpanCache::new(cfg, 100, metrics.clone()).unwrap();
        let a = ow("ns", "a", 0);
        let started = tokio::time::Instant::now();
        assert_eq!(c.fetch_or_reserve(&a).await.unwrap(), Slot::Created);
        assert!(c.falling_back());
        assert!(
            started.elapsed() + RETRY_BACKOFF_MAX >= Duration::from_secs(10),
            "fell back after {:?}, before retrying for 10s",
            started.elapsed()
        );
        let retries = metrics
            .span_cache_etcd_retries
            .get_or_create(&Metrics::op("reserve"))
            .get();
        assert!(retries >= 10, "{retries} retries");
        assert_eq!(metrics.span_cache_fallback.get(), 1);
        let errors = |m: &Metrics| {
            ["connect", "timeout"]
                .iter()
                .map(|r| {
                    m.span_cache_etcd_errors
                        .get_or_create(&Metrics::reason(r))
                        .get()
                })
                .sum::<u64>()
        };
        let errors_after_first = errors(&metrics);
        assert_eq!(errors_after_first, retries + 1);
        assert_eq!(c.fetch_or_reserve(&a).await.unwrap(), Slot::Existing);
        assert_eq!(
            c.fetch_or_reserve(&ow("ns", "b", 0)).await.unwrap(),
            Slot::Created
        );
        assert!(c.record_link(&a, 1).await.unwrap());
        assert!(!c.record_link(&a, 1).await.unwrap());
        // No more requests while falling back.
        assert_eq!(errors(&metrics), errors_after_first);
        assert_eq!(c.pending_republish(), 3);
        assert_eq!(metrics.span_cache_local_reservations.get(), 3);
    }

    #[test]
    fn only_what_a_retry_can_fix_is_retried() {
        let transient = [
            EtcdError::Timeout(Duration::from_millis(1)),
            EtcdError::Connect("refused".into()),
            EtcdError::Status {
                http: 503,
                code: 14,
                message: "etcdserver: leader changed".into(),
            },
            EtcdError::Status {
                http: 429,
                code: 8,
                message: "etcdserver: too many requests".into(),
            },
        ];
        assert!(transient.iter().all(EtcdError::transient));
        let permanent = [
            EtcdError::Status {
                http: 400,
                code: 3,
                message: "etcdserver: authentication failed, invalid user ID or password".into(),
            },
            EtcdError::Decode("garbage".into()),
        ];
        assert!(!permanent.iter().any(EtcdError::transient));
    }
}
