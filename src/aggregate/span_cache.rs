//! Which object-window spans exist, and which links they already carry.
//!
//! The span IDs themselves are derived from the object window (see
//! `model`), so the cache's job is to make sure each object span and each
//! link span is emitted once. The local implementation is a bounded `moka`
//! cache; a shared one (etcd) lets several replicas agree.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;

use crate::model::ObjectWindow;

/// What the cache says about an object window's span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The caller reserved it and must emit the object span.
    Created,
    /// Somebody already emitted it.
    Existing,
}

pub trait SpanCache: Send + Sync {
    /// Looks up the object window's span, reserving it if nobody has.
    fn fetch_or_reserve<'a>(&'a self, ow: &'a ObjectWindow) -> BoxFuture<'a, anyhow::Result<Slot>>;

    /// Records that the object window's span carries the link identified by
    /// `link_key`; true if it did not before (the caller emits the link span).
    fn record_link<'a>(
        &'a self,
        ow: &'a ObjectWindow,
        link_key: u64,
    ) -> BoxFuture<'a, anyhow::Result<bool>>;

    /// Number of object windows tracked (for metrics).
    fn entry_count(&self) -> u64;
}

#[derive(Default)]
struct Entry {
    links: Mutex<HashSet<u64>>,
}

/// In-process span cache: bounded by entries, each kept for the window plus a
/// grace period (late audit events for a window still find its span).
pub struct LocalSpanCache {
    cache: moka::sync::Cache<String, Arc<Entry>>,
}

impl LocalSpanCache {
    pub fn new(max_entries: u64, ttl: Duration) -> Self {
        Self {
            cache: moka::sync::Cache::builder()
                .max_capacity(max_entries)
                .time_to_live(ttl)
                .build(),
        }
    }
}

impl SpanCache for LocalSpanCache {
    fn fetch_or_reserve<'a>(&'a self, ow: &'a ObjectWindow) -> BoxFuture<'a, anyhow::Result<Slot>> {
        let entry = self
            .cache
            .entry(ow.cache_key())
            .or_insert_with(|| Arc::new(Entry::default()));
        let slot = if entry.is_fresh() {
            Slot::Created
        } else {
            Slot::Existing
        };
        Box::pin(std::future::ready(Ok(slot)))
    }

    fn record_link<'a>(
        &'a self,
        ow: &'a ObjectWindow,
        link_key: u64,
    ) -> BoxFuture<'a, anyhow::Result<bool>> {
        let entry = self
            .cache
            .get_with(ow.cache_key(), || Arc::new(Entry::default()));
        let new = entry.links.lock().unwrap().insert(link_key);
        Box::pin(std::future::ready(Ok(new)))
    }

    fn entry_count(&self) -> u64 {
        self.cache.entry_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ObjectRef;

    #[tokio::test]
    async fn reserves_once_and_records_links_once() {
        let c = LocalSpanCache::new(100, Duration::from_secs(60));
        let ow = ObjectWindow {
            object: ObjectRef::new("c", "", "pods", "ns", "p"),
            window_start: 0,
        };
        assert_eq!(c.fetch_or_reserve(&ow).await.unwrap(), Slot::Created);
        assert_eq!(c.fetch_or_reserve(&ow).await.unwrap(), Slot::Existing);
        let next = ObjectWindow {
            window_start: 1800,
            ..ow.clone()
        };
        assert_eq!(c.fetch_or_reserve(&next).await.unwrap(), Slot::Created);
        assert!(c.record_link(&ow, 7).await.unwrap());
        assert!(!c.record_link(&ow, 7).await.unwrap());
        assert!(c.record_link(&next, 7).await.unwrap());
    }
}
