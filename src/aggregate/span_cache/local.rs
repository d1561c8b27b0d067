//! The in-process span cache (also the front and the fallback of the etcd one).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;

use super::{Slot, SpanCache};
use crate::model::ObjectWindow;

#[derive(Default)]
struct Entry {
    links: Mutex<HashSet<u64>>,
}

/// In-process span cache: bounded by entries, each kept for the window plus a
/// grace period (late audit events for a window still find its span).
pub struct LocalSpanCache {
    cache: moka::sync::Cache<u128, Arc<Entry>>,
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

    /// Reserves the object window here alone: `Created` the first time.
    pub fn reserve(&self, ow: &ObjectWindow) -> Slot {
        let entry = self
            .cache
            .entry(ow.cache_digest())
            .or_insert_with(|| Arc::new(Entry::default()));
        if entry.is_fresh() {
            Slot::Created
        } else {
            Slot::Existing
        }
    }

    /// Whether the object window is known to have its span.
    pub fn contains(&self, ow: &ObjectWindow) -> bool {
        self.cache.contains_key(&ow.cache_digest())
    }

    /// Remembers that the object window has its span (somebody else's or ours).
    pub fn mark(&self, ow: &ObjectWindow) {
        self.cache
            .get_with(ow.cache_digest(), || Arc::new(Entry::default()));
    }

    /// Whether the link is known to be recorded on the object window's span.
    pub fn has_link(&self, ow: &ObjectWindow, link_key: u64) -> bool {
        self.cache
            .get(&ow.cache_digest())
            .is_some_and(|e| e.links.lock().unwrap().contains(&link_key))
    }

    /// Records the link here alone; true if it was not recorded before.
    pub fn add_link(&self, ow: &ObjectWindow, link_key: u64) -> bool {
        let entry = self
            .cache
            .get_with(ow.cache_digest(), || Arc::new(Entry::default()));
        entry.links.lock().unwrap().insert(link_key)
    }

    pub fn len(&self) -> u64 {
        self.cache.entry_count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl SpanCache for LocalSpanCache {
    fn fetch_or_reserve<'a>(&'a self, ow: &'a ObjectWindow) -> BoxFuture<'a, anyhow::Result<Slot>> {
        Box::pin(std::future::ready(Ok(self.reserve(ow))))
    }

    fn record_link<'a>(
        &'a self,
        ow: &'a ObjectWindow,
        link_key: u64,
    ) -> BoxFuture<'a, anyhow::Result<bool>> {
        Box::pin(std::future::ready(Ok(self.add_link(ow, link_key))))
    }

    fn entry_count(&self) -> u64 {
        self.len()
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

    #[test]
    fn mark_and_links_make_the_window_known() {
        let c = LocalSpanCache::new(100, Duration::from_secs(60));
        let ow = ObjectWindow {
            object: ObjectRef::new("c", "apps", "deployments", "ns", "d"),
            window_start: 1800,
        };
        assert!(!c.contains(&ow));
        assert!(!c.has_link(&ow, 1));
        c.mark(&ow);
        assert!(c.contains(&ow));
        assert_eq!(c.reserve(&ow), Slot::Existing);
        assert!(c.add_link(&ow, 1));
        assert!(c.has_link(&ow, 1));
        assert!(!c.add_link(&ow, 1));
    }
}
