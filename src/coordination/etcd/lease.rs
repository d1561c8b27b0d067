//! Keeping a lease alive over one `LeaseKeepAlive` stream, rather than
//! granting a new lease per renewal.

use crate::metrics::EtcdOp;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::client::EtcdClient;
use super::error::EtcdError;
use super::proto::etcdserverpb::LeaseKeepAliveRequest;

/// Renews a lease every third of its TTL, in the background, until dropped.
/// If etcd cannot be reached the keeper keeps trying (the lease may well
/// survive a short outage); only etcd saying the lease is gone ends it.
pub(crate) struct LeaseKeeper {
    id: i64,
    lost: watch::Receiver<bool>,
    task: JoinHandle<()>,
}

impl LeaseKeeper {
    /// Starts renewing lease `id` of `ttl`; each renewal is given `timeout`.
    pub(crate) fn start(client: EtcdClient, id: i64, ttl: Duration, timeout: Duration) -> Self {
        let (tx, lost) = watch::channel(false);
        let every = (ttl / 3).max(Duration::from_millis(100));
        let task = tokio::spawn(
            async move {
                keep_alive(&client, id, every, timeout).await;
                let _ = tx.send(true);
            }
            .instrument(tracing::info_span!(target: crate::self_trace::TARGET, "etcd.lease_keeper", lease = id)),
        );
        Self { id, lost, task }
    }

    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    /// Resolves once etcd has said the lease no longer exists.
    pub(crate) async fn lost(&mut self) {
        // An error means the keeper task ended, which it does only when lost.
        let _ = self.lost.wait_for(|lost| *lost).await;
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Renews until etcd says the lease is gone (a renewal answered with TTL 0,
/// or NotFound), reopening the stream after any other failure.
async fn keep_alive(client: &EtcdClient, id: i64, every: Duration, timeout: Duration) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match renew_on_one_stream(client, id, every, timeout).await {
            Err(e) if e.lease_not_found() => return,
            Ok(()) => return,
            Err(e) => {
                client.count_error(&e);
                tracing::debug!(lease = id, error = %e, retry_in = ?backoff, "etcd lease keep-alive failed; reopening");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(every);
            }
        }
    }
}

/// `Ok` when the lease is gone; an error when the stream broke.
async fn renew_on_one_stream(
    client: &EtcdClient,
    id: i64,
    every: Duration,
    timeout: Duration,
) -> Result<(), EtcdError> {
    let (tx, mut answers) = client.lease_keep_alive(id, timeout).await?;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // The first renewal was sent with the stream's opening.
        let answer = tokio::time::timeout(timeout, answers.next())
            .instrument(tracing::info_span!(target: crate::self_trace::TARGET, "etcd.lease_keep_alive", lease = id))
            .await
            .map_err(|_| EtcdError::Timeout(timeout))?
            .ok_or_else(|| EtcdError::Decode("keep-alive stream ended".into()))?
            .map_err(EtcdError::from_status)?;
        if answer.ttl <= 0 {
            tracing::info!(lease = id, "etcd lease expired");
            return Ok(());
        }
        tick.tick().await;
        client.count_request(EtcdOp::Keepalive);
        tx.unbounded_send(LeaseKeepAliveRequest { id })
            .map_err(|_| EtcdError::Decode("keep-alive stream closed".into()))?;
    }
}
