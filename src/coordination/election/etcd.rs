//! The role election through etcd.
//!
//! A role is the key `{prefix}roles/<role>` (e.g.
//! `/kascade/spans/roles/watch/east`); its holder's identity
//! (`<replica>#<instance>`) is the value, attached to the holder's lease.
//! Each campaign:
//!
//! 1. grants a lease of [`ROLE_TTL`] and keeps it alive on one
//!    `LeaseKeepAlive` stream (a replica that stops renewing, e.g. because it
//!    died, loses the role once the lease expires);
//! 2. contests the key in one transaction: create it if absent
//!    (`create_revision == 0`), else read it. Created, or holding this
//!    campaign's identity: leader; else follower;
//! 3. watches the key from the next revision and contests again at its
//!    first change (the holder's lease expired: the key is deleted), so a
//!    follower takes over as soon as etcd lets it, without polling;
//! 4. when etcd says the lease is gone, starts again from 1.
//!
//! If etcd cannot be asked, the current state is kept (a watcher too many
//! is better than none) and the campaign retries with a backoff; one
//! warning per outage.

use crate::metrics::EtcdOp;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use tokio::sync::watch;
use tracing::Instrument;

use super::{Campaign, Leadership, RoleElection};
use crate::coordination::etcd::proto::etcdserverpb::{
    Compare, PutRequest, RangeRequest, RequestOp, TxnRequest, WatchCreateRequest, WatchRequest,
    compare, request_op, response_op, watch_request,
};
use crate::coordination::etcd::{EtcdClient, EtcdError, LeaseKeeper};

/// How long a role outlives its holder's last renewal.
pub(crate) const ROLE_TTL: Duration = Duration::from_secs(15);

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Role election among the replicas sharing one etcd.
pub struct EtcdElection {
    client: EtcdClient,
    prefix: String,
    identity: String,
    ttl: Duration,
    timeout: Duration,
}

impl EtcdElection {
    /// Roles are keys under `{prefix}roles/`; `replica` names this replica
    /// in them (a per-instance suffix keeps two elections apart); each
    /// request is given `timeout`.
    pub fn new(client: EtcdClient, prefix: &str, replica: &str, timeout: Duration) -> Self {
        static INSTANCES: AtomicU64 = AtomicU64::new(0);
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let n = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let instance =
            xxhash_rust::xxh3::xxh3_64(format!("{now}/{}/{n}", std::process::id()).as_bytes());
        let mut prefix = prefix.to_string();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        Self {
            client,
            prefix,
            identity: format!("{replica}#{instance:x}"),
            ttl: ROLE_TTL,
            timeout,
        }
    }

    /// A lease TTL other than [`ROLE_TTL`] (tests).
    #[cfg(feature = "test-support")]
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl.max(Duration::from_secs(1));
        self
    }

    /// The etcd key of `role`.
    pub fn role_key(&self, role: &str) -> String {
        format!("{}roles/{role}", self.prefix)
    }
}

impl RoleElection for EtcdElection {
    fn campaign(&self, role: &str) -> Campaign {
        let (tx, rx) = watch::channel(Leadership::Unknown);
        let c = Contender {
            client: self.client.clone(),
            key: self.role_key(role).into_bytes(),
            me: self.identity.clone().into_bytes(),
            ttl: self.ttl,
            timeout: self.timeout,
        };
        let span = tracing::info_span!(target: crate::self_trace::TARGET, "etcd.campaign", role);
        let task = tokio::spawn(Arc::new(c).run(tx).instrument(span));
        Campaign::new(rx, Some(task))
    }
}

struct Contender {
    client: EtcdClient,
    key: Vec<u8>,
    me: Vec<u8>,
    ttl: Duration,
    timeout: Duration,
}

/// What ended a wait for the role key to change.
enum Woken {
    KeyChanged,
    LeaseLost,
}

impl Contender {
    async fn run(self: Arc<Self>, state: watch::Sender<Leadership>) {
        let role = String::from_utf8_lossy(&self.key).into_owned();
        let mut warned = false;
        let mut backoff = BACKOFF_MIN;
        let fail = |e: &EtcdError, warned: &mut bool, backoff: &mut Duration| {
            if !*warned {
                tracing::warn!(role, error = %e, "cannot renew the watcher role; keeping the current state");
                *warned = true;
            }
            let wait = *backoff;
            *backoff = (*backoff * 2).min(BACKOFF_MAX);
            wait
        };
        loop {
            let ttl_s = self.ttl.as_secs().max(1) as i64;
            let lease = match self
                .client
                .lease_grant(EtcdOp::Role, ttl_s, self.timeout)
                .await
            {
                Ok(id) => id,
                Err(e) => {
                    tokio::time::sleep(fail(&e, &mut warned, &mut backoff)).await;
                    continue;
                }
            };
            let mut keeper = LeaseKeeper::start(self.client.clone(), lease, self.ttl, self.timeout);
            loop {
                let contested = tokio::select! {
                    r = self.contest(lease) => r,
                    () = keeper.lost() => break,
                };
                let revision = match contested {
                    Ok((leader, revision)) => {
                        warned = false;
                        backoff = BACKOFF_MIN;
                        let now = if leader {
                            Leadership::Leader
                        } else {
                            Leadership::Follower
                        };
                        state.send_if_modified(|s| std::mem::replace(s, now) != now);
                        revision
                    }
                    Err(e) if e.lease_not_found() => break,
                    Err(e) => {
                        tokio::time::sleep(fail(&e, &mut warned, &mut backoff)).await;
                        continue;
                    }
                };
                let woken = tokio::select! {
                    r = self.wait_for_change(revision + 1) => r,
                    () = keeper.lost() => Ok(Woken::LeaseLost),
                };
                match woken {
                    Ok(Woken::KeyChanged) => {}
                    Ok(Woken::LeaseLost) => break,
                    Err(e) => tokio::time::sleep(fail(&e, &mut warned, &mut backoff)).await,
                }
            }
            tracing::info!(
                role,
                lease = keeper.id(),
                "the role's lease ended; campaigning with a new one"
            );
        }
    }

    fn put(&self, lease: i64) -> Vec<RequestOp> {
        vec![RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: self.key.clone(),
                value: self.me.clone(),
                lease,
                ..Default::default()
            })),
        }]
    }

    fn range(&self) -> Vec<RequestOp> {
        vec![RequestOp {
            request: Some(request_op::Request::RequestRange(RangeRequest {
                key: self.key.clone(),
                ..Default::default()
            })),
        }]
    }

    /// One round of the contest: (leader, the revision it was decided at).
    async fn contest(&self, lease: i64) -> Result<(bool, i64), EtcdError> {
        let absent = Compare {
            key: self.key.clone(),
            target: compare::CompareTarget::Create as i32,
            result: compare::CompareResult::Equal as i32,
            target_union: Some(compare::TargetUnion::CreateRevision(0)),
            ..Default::default()
        };
        let txn = TxnRequest {
            compare: vec![absent],
            success: self.put(lease),
            failure: self.range(),
        };
        let r = self
            .client
            .txn(EtcdOp::Role, &self.key, txn, self.timeout)
            .await?;
        let revision = r.header.map(|h| h.revision).unwrap_or_default();
        if r.succeeded {
            return Ok((true, revision));
        }
        let held = match r.responses.into_iter().next().and_then(|op| op.response) {
            Some(response_op::Response::ResponseRange(range)) => range.kvs.into_iter().next(),
            _ => None,
        }
        .ok_or_else(|| EtcdError::Decode("a failed role transaction without the key".into()))?;
        if held.value != self.me {
            return Ok((false, revision));
        }
        if held.lease == lease {
            // An earlier attempt whose answer was lost.
            return Ok((true, revision));
        }
        // Ours, under a lease of an earlier campaign round: move it onto this one.
        let unchanged = Compare {
            key: self.key.clone(),
            target: compare::CompareTarget::Mod as i32,
            result: compare::CompareResult::Equal as i32,
            target_union: Some(compare::TargetUnion::ModRevision(held.mod_revision)),
            ..Default::default()
        };
        let txn = TxnRequest {
            compare: vec![unchanged],
            success: self.put(lease),
            failure: vec![],
        };
        let r = self
            .client
            .txn(EtcdOp::Role, &self.key, txn, self.timeout)
            .await?;
        Ok((
            r.succeeded,
            r.header.map(|h| h.revision).unwrap_or(revision),
        ))
    }

    /// Waits until the role key changes at or after `revision` (or the
    /// watch is cancelled, e.g. that revision was compacted away: contest
    /// again all the same).
    async fn wait_for_change(&self, revision: i64) -> Result<Woken, EtcdError> {
        let create = WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(
                WatchCreateRequest {
                    key: self.key.clone(),
                    start_revision: revision,
                    ..Default::default()
                },
            )),
        };
        // Dropping the sender ends the watch with this function.
        let (_requests, mut events) = self
            .client
            .watch(EtcdOp::Watch, create, self.timeout)
            .await?;
        let ended = loop {
            let answer = match events.next().await {
                None => break EtcdError::Decode("the watch stream ended".into()),
                Some(Err(status)) => break EtcdError::from_status(status),
                Some(Ok(answer)) => answer,
            };
            if answer.canceled && answer.compact_revision == 0 {
                break EtcdError::WatchCancelled(answer.cancel_reason);
            }
            if answer.canceled || !answer.events.is_empty() {
                return Ok(Woken::KeyChanged);
            }
        };
        self.client.count_error(&ended);
        Err(ended)
    }
}
