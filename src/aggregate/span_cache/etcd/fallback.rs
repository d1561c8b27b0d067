//! The fallback while etcd is away: the local cache decides alone, the keys
//! it reserved are remembered, a background probe looks for etcd, and on
//! recovery those keys are republished.

use crate::metrics::EtcdOp;
use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Instant;

use futures::StreamExt;

use super::reserve::Claim;
use super::{Inner, ReservedAlone, UID_SENT_LINK, etcd_key};
use crate::aggregate::span_cache::Slot;
use crate::coordination::etcd::EtcdError;
use crate::internal_events::{InternalEvent, SpanCacheFallingBack, SpanCacheRecovered};
use crate::model::ObjectWindow;

impl Inner {
    pub(super) fn enter_fallback(&self, e: &EtcdError) {
        if self.fallback.swap(true, Ordering::SeqCst) {
            return;
        }
        *self.outage_started.lock().unwrap() = Some(Instant::now());
        SpanCacheFallingBack {
            endpoints: &self.endpoints,
            error: e,
            probe_every: self.probe_interval,
            retried_for: self.retry_for,
        }
        .emit(&self.metrics);
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
        let pending = std::mem::take(&mut *self.pending.lock().unwrap());
        SpanCacheRecovered {
            endpoints: &self.endpoints,
            outage: outage.unwrap_or_default(),
            republishing: pending.len(),
        }
        .emit(&self.metrics);
        let results: Vec<(ReservedAlone, Result<Claim, EtcdError>)> =
            futures::stream::iter(pending)
                .map(|p| async move {
                    let r = self
                        .reserve_key(EtcdOp::Republish, &p.key, p.without_uid)
                        .await;
                    (p, r)
                })
                .buffer_unordered(8)
                .collect()
                .await;
        let mut conflicts = 0usize;
        let mut failed = Vec::new();
        let mut error = None;
        for (pending, r) in results {
            match r {
                // Ours: an attempt whose answer was lost when etcd went away.
                Ok(
                    Claim::Created
                    | Claim::Taken {
                        by_this_instance: true,
                        ..
                    },
                ) => {}
                Ok(Claim::Taken { .. }) => conflicts += 1,
                Err(e) => {
                    failed.push(pending);
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
    fn remember(&self, key: String, without_uid: bool) {
        self.metrics.span_cache_local_reservations.inc();
        let mut p = self.pending.lock().unwrap();
        if p.len() < self.max_republish {
            p.push(ReservedAlone { key, without_uid });
        }
    }

    pub(super) fn reserve_alone(&self, ow: &ObjectWindow, has_uid: bool) -> Slot {
        match self.front.reserve(ow, has_uid) {
            Slot::Created => {
                self.remember(etcd_key(&self.prefix, ow, None), !has_uid);
                Slot::Created
            }
            // Sent again with the uid only by whoever claims that first.
            Slot::UidMissing if self.link_alone(ow, UID_SENT_LINK) => Slot::UidMissing,
            Slot::UidMissing | Slot::Existing => Slot::Existing,
        }
    }

    pub(super) fn link_alone(&self, ow: &ObjectWindow, link_key: u64) -> bool {
        let new = self.front.add_link(ow, link_key);
        if new {
            self.remember(etcd_key(&self.prefix, ow, Some(link_key)), false);
        }
        new
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
        match inner.fresh_lease(EtcdOp::Probe, inner.timeout).await {
            Ok(_) => {
                inner.recover().await;
                return;
            }
            Err(e) => tracing::debug!(error = %e, "etcd span cache still unavailable"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::reserve::RETRY_BACKOFF_MAX;
    use super::super::tests::ow;
    use super::super::{EtcdConfig, EtcdSpanCache};
    use crate::aggregate::span_cache::{Slot, SpanCache};
    use crate::metrics::Metrics;
    use crate::metrics::{EtcdErrorReason, EtcdOp};

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
        assert_eq!(c.fetch_or_reserve(&a, true).await.unwrap(), Slot::Created);
        assert!(c.falling_back());
        assert!(
            started.elapsed() + RETRY_BACKOFF_MAX >= Duration::from_secs(10),
            "fell back after {:?}, before retrying for 10s",
            started.elapsed()
        );
        let retries = metrics
            .span_cache_etcd_retries
            .get_or_create(&Metrics::op(EtcdOp::Reserve))
            .get();
        assert!(retries >= 10, "{retries} retries");
        assert_eq!(metrics.span_cache_fallback.get(), 1);
        let errors = |m: &Metrics| {
            [EtcdErrorReason::Connect, EtcdErrorReason::Timeout]
                .iter()
                .map(|r| {
                    m.span_cache_etcd_errors
                        .get_or_create(&Metrics::reason(*r))
                        .get()
                })
                .sum::<u64>()
        };
        let errors_after_first = errors(&metrics);
        assert_eq!(errors_after_first, retries + 1);
        assert_eq!(c.fetch_or_reserve(&a, true).await.unwrap(), Slot::Existing);
        assert_eq!(
            c.fetch_or_reserve(&ow("ns", "b", 0), true).await.unwrap(),
            Slot::Created
        );
        assert!(c.record_link(&a, 1).await.unwrap());
        assert!(!c.record_link(&a, 1).await.unwrap());
        // No more requests while falling back.
        assert_eq!(errors(&metrics), errors_after_first);
        assert_eq!(c.pending_republish(), 3);
        assert_eq!(metrics.span_cache_local_reservations.get(), 3);
    }
}
