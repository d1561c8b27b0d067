//! Reservations: the create-if-absent transaction under the current
//! (rotating) lease, retried with the same value while etcd is away or slow.

use crate::metrics::EtcdOp;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use super::Inner;
use crate::coordination::etcd::EtcdError;
use crate::coordination::etcd::proto::etcdserverpb::{
    Compare, PutRequest, RangeRequest, RequestOp, TxnRequest, compare, request_op, response_op,
};
use crate::metrics::Metrics;

/// Who holds a key after a create-if-absent transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Claim {
    /// This reservation created it (maybe in an attempt whose answer was lost).
    Created,
    /// Another reservation did: another replica's, or this cache instance's
    /// own (a concurrent call, or an attempt given up on before a fallback).
    Taken { by_this_instance: bool },
}

/// First pause between retries of a failed etcd request; doubled each time.
pub(super) const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(50);
pub(super) const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// A request retried after a timeout gets twice as long each time, up to
/// this multiple of `--etcd-timeout` (a slow etcd still gets through).
const MAX_TIMEOUT_FACTOR: u32 = 8;

#[derive(Clone, Copy)]
pub(super) struct Lease {
    id: i64,
    granted: Instant,
}

impl Inner {
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

    /// The start of every token this cache instance writes.
    fn token_prefix(&self) -> String {
        format!("{:016x}-", self.instance)
    }

    async fn grant(&self, op: EtcdOp, timeout: Duration) -> Result<Lease, EtcdError> {
        let id = self.client.lease_grant(op, self.lease_ttl, timeout).await?;
        Ok(Lease {
            id,
            granted: Instant::now(),
        })
    }

    /// Grants a new lease and makes it the current one.
    pub(super) async fn fresh_lease(
        &self,
        op: EtcdOp,
        timeout: Duration,
    ) -> Result<i64, EtcdError> {
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
        let l = self.grant(EtcdOp::Lease, timeout).await?;
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
        op: EtcdOp,
        key: &str,
        value: &[u8],
        lease: i64,
        timeout: Duration,
    ) -> Result<Claim, EtcdError> {
        let k = key.as_bytes().to_vec();
        let txn = TxnRequest {
            compare: vec![Compare {
                key: k.clone(),
                target: compare::CompareTarget::Create as i32,
                result: compare::CompareResult::Equal as i32,
                target_union: Some(compare::TargetUnion::CreateRevision(0)),
                ..Default::default()
            }],
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: k.clone(),
                    value: value.to_vec(),
                    lease,
                    ..Default::default()
                })),
            }],
            failure: vec![RequestOp {
                request: Some(request_op::Request::RequestRange(RangeRequest {
                    key: k,
                    ..Default::default()
                })),
            }],
        };
        let r = self.client.txn(op, key.as_bytes(), txn, timeout).await?;
        if r.succeeded {
            return Ok(Claim::Created);
        }
        let stored = match r.responses.into_iter().next().and_then(|op| op.response) {
            Some(response_op::Response::ResponseRange(range)) => {
                range.kvs.into_iter().next().map(|kv| kv.value)
            }
            _ => None,
        }
        .ok_or_else(|| EtcdError::Decode(format!("failed transaction on {key} without the key")))?;
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
        op: EtcdOp,
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
    pub(super) async fn retrying<T, F, Fut>(
        &self,
        op: EtcdOp,
        mut attempt: F,
    ) -> Result<T, EtcdError>
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
            tracing::debug!(op = op.as_str(), error = %e, attempts, retry_in = ?backoff, "etcd request failed; retrying it");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
            if matches!(e, EtcdError::Timeout(_)) {
                timeout = (timeout * 2).min(self.timeout * MAX_TIMEOUT_FACTOR);
            }
        }
    }

    /// Reserves `key` (see [`Inner::retrying`]): every attempt carries the
    /// same value, so a retry recognises a first attempt that was applied.
    pub(super) async fn reserve_key(&self, op: EtcdOp, key: &str) -> Result<Claim, EtcdError> {
        let value = self.next_value();
        self.retrying(op, |timeout| self.reserve_once(op, key, &value, timeout))
            .await
    }
}
