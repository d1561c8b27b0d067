//! Evictions of kascade's bounded in-process caches: counted by cache and
//! cause, and warned about when a cache is too small.

use prometheus_client::metrics::counter::Counter;

use super::{Cache, CacheEvictionLabel, EvictionCause, Metrics};

/// Counts the evictions of one moka cache by cause, for its
/// `eviction_listener`, and warns (at most once a minute, with the count
/// since the last warning) when entries go for lack of room, naming the flag
/// that gives it more. Removals by the program itself (invalidated,
/// replaced) are not evictions.
pub(crate) struct CacheEvictions {
    cache: Cache,
    remedy: &'static str,
    size: Counter,
    expired: Counter,
    unreported: std::sync::atomic::AtomicU64,
    last_warning: std::sync::Mutex<Option<std::time::Instant>>,
}

impl CacheEvictions {
    const WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

    pub(crate) fn new(metrics: &Metrics, cache: Cache, remedy: &'static str) -> Self {
        let counter = |cause| {
            metrics
                .cache_evictions
                .get_or_create(&CacheEvictionLabel { cache, cause })
                .clone()
        };
        Self {
            cache,
            remedy,
            size: counter(EvictionCause::Size),
            expired: counter(EvictionCause::Expired),
            unreported: Default::default(),
            last_warning: Default::default(),
        }
    }

    pub(crate) fn record(&self, cause: moka::notification::RemovalCause) {
        self.record_many(cause, 1);
    }

    pub(crate) fn record_many(&self, cause: moka::notification::RemovalCause, n: u64) {
        use moka::notification::RemovalCause;
        match cause {
            RemovalCause::Expired => {
                self.expired.inc_by(n);
            }
            RemovalCause::Size => {
                self.size.inc_by(n);
                if let Some(evicted) = self.warning_due(n, std::time::Instant::now()) {
                    tracing::warn!(
                        cache = self.cache.as_str(),
                        evicted,
                        "the {} cache is full: {evicted} entries evicted before they were done with \
                         (kascade_cache_evictions_total); {}",
                        self.cache.as_str(),
                        self.remedy
                    );
                }
            }
            RemovalCause::Explicit | RemovalCause::Replaced => {}
        }
    }

    /// Adds `n` evictions to those not yet warned about; returns them all
    /// when the last warning is a minute old (or there was none).
    fn warning_due(&self, n: u64, now: std::time::Instant) -> Option<u64> {
        use std::sync::atomic::Ordering;
        let unreported = self.unreported.fetch_add(n, Ordering::Relaxed) + n;
        let mut last = self.last_warning.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|t| now.saturating_duration_since(t) < Self::WARN_EVERY) {
            return None;
        }
        *last = Some(now);
        self.unreported.fetch_sub(unreported, Ordering::Relaxed);
        Some(unreported)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Cache, CacheEvictionLabel, EvictionCause, Metrics};
    use moka::notification::RemovalCause;
    use std::time::{Duration, Instant};

    #[test]
    fn evictions_are_counted_by_cause_and_warned_about_once_a_minute() {
        let metrics = Metrics::default();
        let ev = CacheEvictions::new(&metrics, Cache::Ledger, "raise it");
        for cause in [
            RemovalCause::Size,
            RemovalCause::Expired,
            RemovalCause::Size,
        ] {
            ev.record(cause);
        }
        // The program's own removals lose nothing.
        ev.record(RemovalCause::Explicit);
        ev.record(RemovalCause::Replaced);
        let count = |cause| {
            metrics
                .cache_evictions
                .get_or_create(&CacheEvictionLabel {
                    cache: Cache::Ledger,
                    cause,
                })
                .get()
        };
        assert_eq!(
            (count(EvictionCause::Size), count(EvictionCause::Expired)),
            (2, 1)
        );

        let ev = CacheEvictions::new(&metrics, Cache::States, "raise it");
        let t0 = Instant::now();
        assert_eq!(
            ev.warning_due(3, t0),
            Some(3),
            "the first eviction is reported"
        );
        assert_eq!(ev.warning_due(5, t0 + Duration::from_secs(30)), None);
        assert_eq!(ev.warning_due(1, t0 + Duration::from_secs(59)), None);
        assert_eq!(
            ev.warning_due(2, t0 + Duration::from_secs(60)),
            Some(8),
            "a minute later, with everything since"
        );
        assert_eq!(ev.warning_due(1, t0 + Duration::from_secs(61)), None);
    }
}
