//! Reservations: the create-if-absent transaction under the current
//! (rotating) lease, retried with the same value while etcd is away or slow.

use crate::metrics::EtcdOp;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use super::Inner;
use crate::coordination::etcd::EtcdError;
use crate::coordination::etcd::proto::etcdserverpb::{
    Compare, PutRequest, RangeRequest, RequestOp, ResponseOp, TxnRequest, compare, request_op,
    response_op,
};
use crate::metrics::Metrics;

/// Who holds a key after a create-if-absent transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Claim {
    /// This reservation created it (maybe in an attempt whose answer was lost).
    Created,
    /// Another reservation did: another replica's, or this cache instance's
    /// own (a concurrent call, or an attempt given up on before a fallback).
    Taken {
        by_this_instance: bool,
        /// The holder published that it sent the object window's span
        /// without the object's uid (see [`Inner::next_value`]).
        without_uid: bool,
    },
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
    /// The value a reservation publishes; unique per call. `without_uid`:
    /// the reserving replica sends the object window's span without the
    /// object's uid, so a replica that knows it sends the span again
    /// (after winning the window's [`super::UID_SENT_LINK`]). Values
    /// without the field (older builds) read as sent with the uid.
    fn next_value(&self, without_uid: bool) -> Vec<u8> {
        let at = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut v = json!({
            "replica": self.replica,
            "token": format!("{}{seq}", self.token_prefix()),
            "at": at,
        });
        if without_uid {
            v["without_uid"] = Value::Bool(true);
        }
        v.to_string().into_bytes()
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
        let txn = create_if_absent_txn(key, value, lease);
        let r = self.client.txn(op, key.as_bytes(), txn, timeout).await?;
        self.claim_of(key, value, r.succeeded, r.responses)
    }

    /// Who holds `key` after its create-if-absent transaction answered
    /// `succeeded` with `responses` (the failure branch's range).
    fn claim_of(
        &self,
        key: &str,
        value: &[u8],
        succeeded: bool,
        responses: Vec<ResponseOp>,
    ) -> Result<Claim, EtcdError> {
        if succeeded {
            return Ok(Claim::Created);
        }
        let stored = match responses.into_iter().next().and_then(|op| op.response) {
            Some(response_op::Response::ResponseRange(range)) => {
                range.kvs.into_iter().next().map(|kv| kv.value)
            }
            _ => None,
        }
        .ok_or_else(|| EtcdError::Decode(format!("failed transaction on {key} without the key")))?;
        if stored == value {
            return Ok(Claim::Created);
        }
        let stored = serde_json::from_slice::<Value>(&stored).unwrap_or_default();
        let token = stored
            .get("token")
            .and_then(Value::as_str)
            .unwrap_or_default();
        Ok(Claim::Taken {
            by_this_instance: token.starts_with(&self.token_prefix()),
            without_uid: stored.get("without_uid") == Some(&Value::Bool(true)),
        })
    }

    /// Creates each key holding its value unless it exists, in one request:
    /// a transaction of one nested create-if-absent transaction per key
    /// (etcd ≥ 3.3), each with its own outcome. Keys must be distinct.
    async fn create_many_if_absent(
        &self,
        op: EtcdOp,
        items: &[(String, Vec<u8>)],
        lease: i64,
        timeout: Duration,
    ) -> Result<Vec<Claim>, EtcdError> {
        let txn = TxnRequest {
            compare: Vec::new(),
            success: items
                .iter()
                .map(|(k, v)| RequestOp {
                    request: Some(request_op::Request::RequestTxn(create_if_absent_txn(
                        k, v, lease,
                    ))),
                })
                .collect(),
            failure: Vec::new(),
        };
        let first = items.first().map(|(k, _)| k.as_str()).unwrap_or_default();
        let r = self.client.txn(op, first.as_bytes(), txn, timeout).await?;
        if r.responses.len() != items.len() {
            return Err(EtcdError::Decode(format!(
                "{} answers to a transaction of {} reservations",
                r.responses.len(),
                items.len()
            )));
        }
        items
            .iter()
            .zip(r.responses)
            .map(|((key, value), answer)| match answer.response {
                Some(response_op::Response::ResponseTxn(t)) => {
                    self.claim_of(key, value, t.succeeded, t.responses)
                }
                _ => Err(EtcdError::Decode(format!(
                    "no nested transaction answer for {key}"
                ))),
            })
            .collect()
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

    /// One attempt at reserving several keys in one request (see
    /// [`Inner::reserve_once`]).
    async fn reserve_many_once(
        &self,
        op: EtcdOp,
        items: &[(String, Vec<u8>)],
        timeout: Duration,
    ) -> Result<Vec<Claim>, EtcdError> {
        let lease = self.lease(timeout).await?;
        match self.create_many_if_absent(op, items, lease, timeout).await {
            Err(e) if e.lease_not_found() => {
                self.forget_lease(lease);
                let lease = self.lease(timeout).await?;
                self.create_many_if_absent(op, items, lease, timeout).await
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
    ///
    /// Reservations asked for while [`MAX_IN_FLIGHT`] requests are on their
    /// way wait and then go together in one request (at most [`MAX_BATCH`]):
    /// a worker waits for its reservation before going on, so concurrent
    /// ones come from different workers (or republishing), and one etcd
    /// commit serves them all. The wait is bounded by those callers: each
    /// has one reservation queued at most.
    /// `without_uid`: see [`Inner::next_value`].
    ///
    /// A key this replica is already reserving is not asked for again: the
    /// caller waits for that reservation and gets its answer as one that
    /// came second (`Taken` by this instance). Writes whose spans are sent
    /// concurrently ask for the same windows and links.
    pub(super) async fn reserve_key(
        &self,
        op: EtcdOp,
        key: &str,
        without_uid: bool,
    ) -> Result<Claim, EtcdError> {
        let waiting = {
            let mut asking = self.asking.lock().unwrap();
            match asking.get_mut(key) {
                Some(followers) => {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    followers.push(tx);
                    Some(rx)
                }
                None => {
                    asking.insert(key.to_string(), Vec::new());
                    None
                }
            }
        };
        if let Some(answer) = waiting {
            // The first caller gave up without an answer (dropped): ask.
            return match answer.await {
                Ok(r) => r,
                Err(_) => self.send_reservation(op, key, without_uid).await,
            };
        }
        let leading = Leading { inner: self, key };
        let r = self.send_reservation(op, key, without_uid).await;
        let followers = leading.finish();
        let second = r.clone().map(|claim| match claim {
            Claim::Created => Claim::Taken {
                by_this_instance: true,
                without_uid,
            },
            taken => taken,
        });
        for f in followers {
            let _ = f.send(second.clone());
        }
        r
    }

    /// Sends one reservation to the batching loop and waits for its answer.
    async fn send_reservation(
        &self,
        op: EtcdOp,
        key: &str,
        without_uid: bool,
    ) -> Result<Claim, EtcdError> {
        let value = self.next_value(without_uid);
        let (done, answer) = tokio::sync::oneshot::channel();
        let queued = Queued {
            op,
            key: key.to_string(),
            value,
            done,
        };
        let batches = self.batches.get_or_init(|| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(batch_loop(self.me.clone(), rx));
            tx
        });
        if let Err(tokio::sync::mpsc::error::SendError(q)) = batches.send(queued) {
            // The loop is gone (only while this cache is being dropped).
            return self
                .retrying(op, |timeout| {
                    self.reserve_once(op, &q.key, &q.value, timeout)
                })
                .await;
        }
        answer.await.unwrap_or_else(|_| {
            Err(EtcdError::Decode(format!(
                "reservation of {key} dropped before etcd answered"
            )))
        })
    }

    /// Sends one batch (see [`Inner::reserve_key`]), retried as one request,
    /// and answers each reservation in it.
    async fn reserve_batch(&self, batch: Vec<Queued>) {
        let op = batch[0].op;
        if let [one] = &batch[..] {
            let r = self
                .retrying(op, |timeout| {
                    self.reserve_once(op, &one.key, &one.value, timeout)
                })
                .await;
            let one = batch.into_iter().next().expect("one");
            let _ = one.done.send(r);
            return;
        }
        let items: Vec<(String, Vec<u8>)> = batch
            .iter()
            .map(|q| (q.key.clone(), q.value.clone()))
            .collect();
        match self
            .retrying(op, |timeout| self.reserve_many_once(op, &items, timeout))
            .await
        {
            Ok(claims) => {
                for (q, claim) in batch.into_iter().zip(claims) {
                    let _ = q.done.send(Ok(claim));
                }
            }
            Err(e) => {
                for q in batch {
                    let _ = q.done.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Puts `key` holding `value` under `lease` if it does not exist; else
/// reads it (who holds it).
fn create_if_absent_txn(key: &str, value: &[u8], lease: i64) -> TxnRequest {
    let k = key.as_bytes().to_vec();
    TxnRequest {
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
    }
}

/// Most reservations sent in one request (etcd's default limit on the
/// operations of one transaction is 128).
pub(super) const MAX_BATCH: usize = 64;

/// A caller waiting for another caller's reservation of the same key.
pub(super) type Follower = tokio::sync::oneshot::Sender<Result<Claim, EtcdError>>;

/// The first caller reserving a key: takes the key out of
/// [`Inner::reserve_key`]'s map when done, or when dropped unanswered (its
/// followers then ask themselves).
struct Leading<'a> {
    inner: &'a Inner,
    key: &'a str,
}

impl Leading<'_> {
    fn finish(self) -> Vec<Follower> {
        let followers = self.take();
        std::mem::forget(self);
        followers
    }

    fn take(&self) -> Vec<Follower> {
        self.inner
            .asking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(self.key)
            .unwrap_or_default()
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        drop(self.take());
    }
}

/// A reservation waiting for its batch.
pub(super) struct Queued {
    op: EtcdOp,
    key: String,
    value: Vec<u8>,
    done: tokio::sync::oneshot::Sender<Result<Claim, EtcdError>>,
}

/// Requests on their way to etcd at once; reservations asked for beyond
/// that wait and go together in the next one.
const MAX_IN_FLIGHT: usize = 4;

/// Takes what is waiting (same op, distinct keys, at most [`MAX_BATCH`]) and
/// sends it as one request, at most [`MAX_IN_FLIGHT`] at a time (so a few
/// workers' reservations go out as soon as they are asked for, as they did
/// alone, and many are gathered); ends with the cache.
async fn batch_loop(
    inner: std::sync::Weak<Inner>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Queued>,
) {
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut held: Option<Queued> = None;
    loop {
        let first = match held.take() {
            Some(q) => q,
            None => match rx.recv().await {
                Some(q) => q,
                None => return,
            },
        };
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(q) if q.op == batch[0].op && batch.iter().all(|b| b.key != q.key) => {
                    batch.push(q)
                }
                Ok(q) => {
                    held = Some(q);
                    break;
                }
                Err(_) => break,
            }
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            inner.reserve_batch(batch).await;
            drop(permit);
        });
    }
}
