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
//! failed request (timeout, refused connection, Unavailable or
//! ResourceExhausted etcd) is sent again with the same value, after a
//! backoff (50 ms doubling to 1 s), each timed-out attempt given twice as
//! long as the one before (up to 8 × `--etcd-timeout`, so a slow etcd still
//! gets through), for `--etcd-retry-for` (and at least twice). Only then
//! does the replica fall back; a slow etcd costs latency, never a duplicate
//! span. `kascade_span_cache_etcd_retries_total{op}` counts the retries.
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
//! prefix; `o/` and `l/` so objects and links are counted apart. (The
//! watcher role election, `coordination::election`, uses `roles/` under the
//! same prefix.)
//!
//! # Leases ([`reserve`])
//!
//! Every key is attached to a lease, so etcd forgets it on its own. A replica
//! holds one lease at a time and grants a new one every `rotate` (a quarter
//! of window + grace, between 10 s and 5 min); each lease's TTL is
//! window + grace + rotate, so every key lives at least window + grace after
//! its reservation (as long as the local cache keeps it) and at most one
//! rotation longer. These leases are deliberately never kept alive (unlike
//! the election's): a key must end with its window, and a replica that stops
//! leaves nothing behind for longer than that. A lease etcd no longer knows
//! (NotFound, e.g. its data was wiped) is replaced and the transaction
//! retried once.
//!
//! # Local cache in front, and fallback ([`fallback`])
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
//! # Transport
//!
//! etcd's own v3 gRPC API, through the typed client of
//! `coordination::etcd` (endpoints tried in turn, TLS with a CA and an
//! optional client certificate, user/password authentication, errors told
//! apart by gRPC status code, a `tracing` span per round trip).

mod fallback;
mod reserve;

use crate::metrics::EtcdOp;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use futures::future::BoxFuture;

use super::local::LocalSpanCache;
use super::{Slot, SpanCache, SpanCacheError};
use crate::coordination::etcd::{EtcdClient, EtcdClientConfig, EtcdConfigError, EtcdTls};
use crate::metrics::Metrics;
use crate::model::ObjectWindow;
use reserve::{Claim, Lease};

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

    /// The client's part: where etcd is and how to reach it.
    pub fn client(&self) -> EtcdClientConfig {
        EtcdClientConfig {
            endpoints: self.endpoints.clone(),
            connect_timeout: self.timeout,
            tls: self.tls.clone(),
            auth: self.auth.clone(),
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

/// The link key an object window's resend with the uid is reserved under
/// (see [`Slot::UidMissing`]): whoever records it sends the span again, so
/// replicas send it once between them. Real link keys are hashes of the
/// link; this one is out of their way by convention.
pub(super) const UID_SENT_LINK: u64 = u64::MAX;

/// A key reserved alone while etcd was away, to republish.
struct ReservedAlone {
    key: String,
    /// See [`reserve::Claim::Taken`].
    without_uid: bool,
}

/// The etcd key of an object window (`link: None`) or of one of its links.
pub fn etcd_key(prefix: &str, ow: &ObjectWindow, link: Option<u64>) -> String {
    match link {
        None => format!("{prefix}o/{}/{}", ow.window_start, ow.object.key()),
        Some(k) => format!("{prefix}l/{}/{}/{k:016x}", ow.window_start, ow.object.key()),
    }
}

struct Inner {
    client: EtcdClient,
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
    pending: Mutex<Vec<ReservedAlone>>,
    /// Reservations on their way to the batching loop (started on first use).
    batches: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<reserve::Queued>>,
    /// Keys being reserved, with the callers that asked for the same key
    /// meanwhile (see [`Inner::reserve_key`]).
    asking: Mutex<std::collections::HashMap<String, Vec<reserve::Follower>>>,
    me: Weak<Inner>,
}

/// The span cache shared through etcd (see the module documentation).
pub struct EtcdSpanCache {
    inner: Arc<Inner>,
}

impl EtcdSpanCache {
    /// `max_entries` bounds the local cache in front; `cfg.key_ttl` is also
    /// how long it keeps an entry.
    pub fn new(
        cfg: EtcdConfig,
        max_entries: u64,
        metrics: Arc<Metrics>,
    ) -> Result<Self, EtcdConfigError> {
        let client = EtcdClient::new(&cfg.client(), metrics.clone())?;
        let (rotate, lease_ttl) = cfg.lease_plan();
        let mut prefix = cfg.prefix.clone();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        let inner = Arc::new_cyclic(|me| Inner {
            endpoints: client.endpoints(),
            client,
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
            batches: std::sync::OnceLock::new(),
            asking: Mutex::new(std::collections::HashMap::new()),
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
                .retrying(EtcdOp::Lease, |timeout| inner.fresh_lease(EtcdOp::Lease, timeout))
                .await
            {
                Ok(_) => tracing::info!(endpoints = %inner.endpoints, prefix = %inner.prefix,
                    lease_ttl_s = inner.lease_ttl, "span cache shared with other replicas through etcd"),
                Err(e) => inner.enter_fallback(&e),
            }
        });
    }

    /// True while etcd is away and the local cache decides alone.
    #[cfg(feature = "test-support")]
    pub fn falling_back(&self) -> bool {
        self.inner.fallback.load(Ordering::SeqCst)
    }

    /// Keys reserved alone during the current outage, waiting to be republished.
    #[cfg(feature = "test-support")]
    pub fn pending_republish(&self) -> usize {
        self.inner.pending.lock().unwrap().len()
    }
}

impl Inner {
    fn falling_back(&self) -> bool {
        self.fallback.load(Ordering::SeqCst)
    }

    async fn fetch_or_reserve(&self, ow: &ObjectWindow, has_uid: bool) -> Slot {
        if let Some(slot) = self.front.existing(ow, has_uid) {
            return match slot {
                Slot::UidMissing => self.claim_uid_resend(ow).await,
                slot => slot,
            };
        }
        if self.falling_back() {
            return self.reserve_alone(ow, has_uid);
        }
        match self
            .reserve_key(EtcdOp::Reserve, &etcd_key(&self.prefix, ow, None), !has_uid)
            .await
        {
            Ok(Claim::Created) => {
                self.front.mark(ow, !has_uid);
                Slot::Created
            }
            Ok(Claim::Taken { without_uid, .. }) => {
                // Sent without the uid (by any replica): the first replica
                // with it to claim the resend sends the span again.
                self.front.mark(ow, without_uid && !has_uid);
                if without_uid && has_uid {
                    self.claim_uid_resend(ow).await
                } else {
                    Slot::Existing
                }
            }
            Err(e) => {
                self.enter_fallback(&e);
                self.reserve_alone(ow, has_uid)
            }
        }
    }

    /// The object window's span went out without the uid, and the caller
    /// has it: `UidMissing` (send it again) for the one replica that
    /// records the window's [`UID_SENT_LINK`], `Existing` for the others.
    async fn claim_uid_resend(&self, ow: &ObjectWindow) -> Slot {
        if self.record_link(ow, UID_SENT_LINK).await {
            Slot::UidMissing
        } else {
            Slot::Existing
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
            .reserve_key(
                EtcdOp::Link,
                &etcd_key(&self.prefix, ow, Some(link_key)),
                false,
            )
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

impl SpanCache for EtcdSpanCache {
    fn fetch_or_reserve<'a>(
        &'a self,
        ow: &'a ObjectWindow,
        has_uid: bool,
    ) -> BoxFuture<'a, Result<Slot, SpanCacheError>> {
        Box::pin(async move { Ok(self.inner.fetch_or_reserve(ow, has_uid).await) })
    }

    fn record_link<'a>(
        &'a self,
        ow: &'a ObjectWindow,
        link_key: u64,
    ) -> BoxFuture<'a, Result<bool, SpanCacheError>> {
        Box::pin(async move { Ok(self.inner.record_link(ow, link_key).await) })
    }

    fn has_link_here(&self, ow: &ObjectWindow, link_key: u64) -> bool {
        self.inner.front.has_link(ow, link_key)
    }

    fn entry_count(&self) -> u64 {
        self.inner.front.len()
    }

    fn is_remote(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ObjectRef;

    pub(super) fn ow(ns: &str, name: &str, w: u64) -> ObjectWindow {
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
    fn endpoints_are_checked() {
        let cfg = EtcdConfig::new(vec!["https://e:2379".into()], Duration::from_secs(60));
        let err = EtcdSpanCache::new(cfg, 10, Arc::new(Metrics::default()))
            .err()
            .unwrap();
        assert!(err.to_string().contains("--etcd-ca-file"), "{err}");
        let cfg = EtcdConfig::new(vec!["http://e:2379/v3".into()], Duration::from_secs(60));
        assert!(EtcdSpanCache::new(cfg, 10, Arc::new(Metrics::default())).is_err());
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
}
