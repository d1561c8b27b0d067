//! Which object-window spans exist, and which links they already carry.
//!
//! The span IDs themselves are derived from the object window (see
//! `model`), so the cache's job is to make sure each object span and each
//! link span is emitted once. [`LocalSpanCache`] is a bounded in-process
//! cache (maps per window); [`EtcdSpanCache`] lets several `kascade collect`
//! replicas behind one webhook address agree, with the local cache in front
//! (known keys cost no round trip) and as the fallback while etcd is away.

mod etcd;
mod local;

use futures::future::BoxFuture;

use crate::model::ObjectWindow;

pub use etcd::{EtcdConfig, EtcdSpanCache, EtcdTls, etcd_key};
pub use local::LocalSpanCache;

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

    /// Holds the named role (the watcher of a cluster) for this replica for
    /// `ttl`, renewing it when already held; false while another replica
    /// holds it. Without a shared backend every replica holds every role.
    fn hold<'a>(
        &'a self,
        _role: &'a str,
        _ttl: std::time::Duration,
    ) -> BoxFuture<'a, anyhow::Result<bool>> {
        Box::pin(std::future::ready(Ok(true)))
    }
}
