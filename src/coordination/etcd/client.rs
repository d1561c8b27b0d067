//! etcd's v3 gRPC API on one or more endpoints: each request goes to the
//! endpoint that answered last, then to the others while they are away;
//! user/password authentication (a token per endpoint, renewed once when
//! etcd rejects it); every round trip under its own `tracing` span and
//! counted in the `kascade_span_cache_etcd_*` metrics.

use crate::metrics::EtcdOp;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::metadata::AsciiMetadataValue;
use tonic::transport::Channel;
use tracing::Instrument;

use super::error::{EtcdConfigError, EtcdError};
use super::proto::etcdserverpb::{
    AuthenticateRequest, LeaseGrantRequest, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
    TxnRequest, TxnResponse, WatchRequest, WatchResponse, auth_client::AuthClient,
    kv_client::KvClient, lease_client::LeaseClient, watch_client::WatchClient,
};
use super::tls::{EtcdTls, channel, normalize_endpoint};
use crate::metrics::Metrics;

/// Where etcd is and how to talk to it.
#[derive(Clone, Debug)]
pub struct EtcdClientConfig {
    /// Client URLs, e.g. `http://etcd-0:2379`; tried in turn.
    pub endpoints: Vec<String>,
    /// Longest a connection may take to set up.
    pub connect_timeout: Duration,
    pub tls: Option<EtcdTls>,
    /// User and password for etcd authentication.
    pub auth: Option<(String, String)>,
}

/// A request stream of a bidirectional call: what is sent on it reaches
/// etcd in order; dropping it ends the call.
pub(crate) type RequestSender<T> = futures::channel::mpsc::UnboundedSender<T>;

struct Member {
    url: String,
    channel: Channel,
}

struct Shared {
    members: Vec<Member>,
    /// The endpoint tried first (the last that answered).
    current: AtomicUsize,
    auth: Option<(String, String)>,
    /// Auth token per endpoint (simple tokens are valid only where issued).
    tokens: Mutex<Vec<Option<AsciiMetadataValue>>>,
    metrics: Arc<Metrics>,
}

/// A cheap handle (clones share connections and tokens).
#[derive(Clone)]
pub struct EtcdClient {
    shared: Arc<Shared>,
}

/// Adds the auth token, if any, to a request.
fn request<T>(message: T, token: Option<AsciiMetadataValue>) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    if let Some(t) = token {
        r.metadata_mut().insert("token", t);
    }
    r
}

/// One answer within `timeout`, or why not.
async fn answer<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, EtcdError> {
    match tokio::time::timeout(timeout, call).await {
        Err(_) => Err(EtcdError::Timeout(timeout)),
        Ok(r) => r.map_err(EtcdError::from_status),
    }
}

impl EtcdClient {
    /// Checks the endpoints and TLS files; connects on first use.
    pub fn new(cfg: &EtcdClientConfig, metrics: Arc<Metrics>) -> Result<Self, EtcdConfigError> {
        if cfg.endpoints.is_empty() {
            return Err(EtcdConfigError::NoEndpoint);
        }
        let urls = cfg
            .endpoints
            .iter()
            .map(|e| normalize_endpoint(e))
            .collect::<Result<Vec<_>, _>>()?;
        if cfg.tls.is_none() && urls.iter().any(|e| e.starts_with("https://")) {
            return Err(EtcdConfigError::HttpsWithoutCa);
        }
        let tls = cfg.tls.as_ref().map(EtcdTls::rustls_config).transpose()?;
        let members = urls
            .into_iter()
            .map(|url| {
                Ok(Member {
                    channel: channel(&url, tls.as_ref(), cfg.connect_timeout)?,
                    url,
                })
            })
            .collect::<Result<Vec<_>, EtcdConfigError>>()?;
        Ok(Self {
            shared: Arc::new(Shared {
                tokens: Mutex::new(vec![None; members.len()]),
                members,
                current: AtomicUsize::new(0),
                auth: cfg.auth.clone(),
                metrics,
            }),
        })
    }

    /// The endpoints, comma-separated (for logs).
    pub fn endpoints(&self) -> String {
        let urls: Vec<&str> = self.shared.members.iter().map(|m| m.url.as_str()).collect();
        urls.join(",")
    }

    /// Counts a failure seen outside a request (on an open stream).
    pub(crate) fn count_error(&self, e: &EtcdError) {
        self.shared
            .metrics
            .span_cache_etcd_errors
            .get_or_create(&Metrics::reason(e.reason()))
            .inc();
    }

    pub(crate) fn count_request(&self, op: EtcdOp) {
        self.shared
            .metrics
            .span_cache_etcd_requests
            .get_or_create(&Metrics::op(op))
            .inc();
    }

    /// The token for endpoint `idx` (authenticating when there is none yet,
    /// or `renew`); `None` without authentication.
    async fn token(
        &self,
        idx: usize,
        renew: bool,
        timeout: Duration,
    ) -> Result<Option<AsciiMetadataValue>, EtcdError> {
        let Some((user, password)) = &self.shared.auth else {
            return Ok(None);
        };
        if !renew && let Some(t) = self.shared.tokens.lock().unwrap()[idx].clone() {
            return Ok(Some(t));
        }
        self.count_request(EtcdOp::Auth);
        let mut client = AuthClient::new(self.shared.members[idx].channel.clone());
        let req = AuthenticateRequest {
            name: user.clone(),
            password: password.clone(),
        };
        let span = tracing::info_span!(target: crate::self_trace::TARGET, "etcd.authenticate", endpoint = %self.shared.members[idx].url);
        let token = answer(timeout, client.authenticate(req).instrument(span))
            .await?
            .into_inner()
            .token;
        let token = AsciiMetadataValue::try_from(token.as_str())
            .map_err(|_| EtcdError::Decode("authenticate answered an unusable token".into()))?;
        self.shared.tokens.lock().unwrap()[idx] = Some(token.clone());
        Ok(Some(token))
    }

    /// One call to one endpoint, authenticated if configured (a rejected
    /// token is renewed once).
    async fn call_one<T, F, Fut>(
        &self,
        idx: usize,
        timeout: Duration,
        rpc: &mut F,
    ) -> Result<T, EtcdError>
    where
        F: FnMut(Channel, Option<AsciiMetadataValue>) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let channel = &self.shared.members[idx].channel;
        let token = self.token(idx, false, timeout).await?;
        let had_token = token.is_some();
        match answer(timeout, rpc(channel.clone(), token)).await {
            Err(e) if had_token && e.auth_invalid() => {
                let token = self.token(idx, true, timeout).await?;
                answer(timeout, rpc(channel.clone(), token)).await
            }
            r => r,
        }
    }

    /// The call on the current endpoint, then on the others while they are
    /// away, each given `timeout`; counted under `op`.
    async fn call<T, F, Fut>(
        &self,
        op: EtcdOp,
        timeout: Duration,
        mut rpc: F,
    ) -> Result<T, EtcdError>
    where
        F: FnMut(Channel, Option<AsciiMetadataValue>) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let s = &self.shared;
        self.count_request(op);
        let started = Instant::now();
        let n = s.members.len();
        let first = s.current.load(Ordering::Relaxed) % n;
        let mut result = Err(EtcdError::Decode("no endpoint".into()));
        for i in 0..n {
            let idx = (first + i) % n;
            result = self.call_one(idx, timeout, &mut rpc).await;
            match &result {
                Ok(_) => {
                    if i > 0 {
                        s.current.store(idx, Ordering::Relaxed);
                    }
                    break;
                }
                Err(e) => {
                    self.count_error(e);
                    tracing::debug!(endpoint = %s.members[idx].url, error = %e, "etcd endpoint failed");
                    if !e.try_elsewhere() {
                        break;
                    }
                }
            }
        }
        s.metrics
            .span_cache_etcd_seconds
            .0
            .observe(started.elapsed().as_secs_f64());
        result
    }

    /// A transaction (`KV.Txn`).
    pub async fn txn(
        &self,
        op: EtcdOp,
        key: &[u8],
        txn: TxnRequest,
        timeout: Duration,
    ) -> Result<TxnResponse, EtcdError> {
        let span = tracing::info_span!(target: crate::self_trace::TARGET, "etcd.txn", op = op.as_str(), key = %String::from_utf8_lossy(key));
        self.call(op, timeout, |ch, token| {
            let req = request(txn.clone(), token);
            async move { KvClient::new(ch).txn(req).await.map(|r| r.into_inner()) }
        })
        .instrument(span)
        .await
    }

    /// A new lease of `ttl` seconds (`Lease.LeaseGrant`): its id.
    pub async fn lease_grant(
        &self,
        op: EtcdOp,
        ttl: i64,
        timeout: Duration,
    ) -> Result<i64, EtcdError> {
        let span = tracing::info_span!(target: crate::self_trace::TARGET, "etcd.lease_grant", op = op.as_str(), ttl);
        let r = self
            .call(op, timeout, |ch, token| {
                let req = request(LeaseGrantRequest { ttl, id: 0 }, token);
                async move {
                    LeaseClient::new(ch)
                        .lease_grant(req)
                        .await
                        .map(|r| r.into_inner())
                }
            })
            .instrument(span)
            .await?;
        if !r.error.is_empty() {
            return Err(EtcdError::Decode(format!(
                "lease grant failed: {}",
                r.error
            )));
        }
        if r.id == 0 {
            return Err(EtcdError::Decode("lease grant answered no ID".into()));
        }
        Ok(r.id)
    }

    /// Opens a bidirectional call with `first` already queued (etcd answers
    /// the call's headers with its first answer): the sender for more
    /// requests and the answers.
    async fn open_stream<Req, Resp, F, Fut>(
        &self,
        op: EtcdOp,
        first: Req,
        timeout: Duration,
        mut rpc: F,
    ) -> Result<(RequestSender<Req>, tonic::Streaming<Resp>), EtcdError>
    where
        Req: Clone,
        F: FnMut(Channel, tonic::Request<futures::channel::mpsc::UnboundedReceiver<Req>>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<tonic::Streaming<Resp>>, tonic::Status>>,
    {
        self.call(op, timeout, |ch, token| {
            let (tx, rx) = futures::channel::mpsc::unbounded();
            // Cannot fail: the receiver is right here.
            let _ = tx.unbounded_send(first.clone());
            let call = rpc(ch, request(rx, token));
            async move { call.await.map(|r| (tx, r.into_inner())) }
        })
        .await
    }

    /// A `Lease.LeaseKeepAlive` stream for lease `id`, its first renewal sent.
    pub async fn lease_keep_alive(
        &self,
        id: i64,
        timeout: Duration,
    ) -> Result<
        (
            RequestSender<LeaseKeepAliveRequest>,
            tonic::Streaming<LeaseKeepAliveResponse>,
        ),
        EtcdError,
    > {
        let span = tracing::info_span!(target: crate::self_trace::TARGET, "etcd.lease_keep_alive.open", lease = id);
        self.open_stream(
            EtcdOp::Keepalive,
            LeaseKeepAliveRequest { id },
            timeout,
            |ch, req| async move { LeaseClient::new(ch).lease_keep_alive(req).await },
        )
        .instrument(span)
        .await
    }

    /// A `Watch.Watch` stream, its create request sent.
    pub async fn watch(
        &self,
        op: EtcdOp,
        create: WatchRequest,
        timeout: Duration,
    ) -> Result<(RequestSender<WatchRequest>, tonic::Streaming<WatchResponse>), EtcdError> {
        let span = tracing::info_span!(target: crate::self_trace::TARGET, "etcd.watch.open", op = op.as_str());
        self.open_stream(op, create, timeout, |ch, req| async move {
            WatchClient::new(ch).watch(req).await
        })
        .instrument(span)
        .await
    }
}
