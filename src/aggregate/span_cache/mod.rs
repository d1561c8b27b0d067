//! Which object-window spans exist, and which links they already carry.
//!
//! The span IDs themselves are derived from the object window (see
//! `model`), so the cache's job is to make sure each object span and each
//! link span is emitted once. [`LocalSpanCache`] is a bounded in-process
//! cache (maps per window); [`EtcdSpanCache`] lets several `kascade collect`
//! replicas behind one webhook address agree, with the local cache in front
//! (known keys cost no round trip) and as the fallback while etcd is away.
//! (Which replica watches a cluster is not the span cache's business: see
//! `coordination::election`.)

mod etcd;
mod local;

use futures::future::BoxFuture;

use crate::model::ObjectWindow;

pub use crate::coordination::etcd::EtcdTls;
#[cfg(feature = "test-support")]
pub use etcd::etcd_key;
pub use etcd::{EtcdConfig, EtcdSpanCache};
pub use local::LocalSpanCache;

/// What the cache says about an object window's span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The caller reserved it and must emit the object span.
    Created,
    /// Somebody already emitted it.
    Existing,
    /// It was emitted without the object's uid (the window's first write
    /// had none, e.g. a refused delete, or a relation named the object
    /// without it), and the caller has the uid: the caller emits it again,
    /// with the uid. Answered once per object window (across replicas when
    /// the cache is shared).
    UidMissing,
}

/// A span cache that cannot answer. Neither cache here ever does: the local
/// one cannot fail, and the etcd one falls back to its local cache rather
/// than failing a caller.
#[derive(Debug, thiserror::Error)]
pub enum SpanCacheError {
    #[error("span cache unavailable: {0}")]
    Unavailable(String),
}

pub trait SpanCache: Send + Sync {
    /// Looks up the object window's span, reserving it if nobody has;
    /// `has_uid`: the caller knows the object's uid.
    fn fetch_or_reserve<'a>(
        &'a self,
        ow: &'a ObjectWindow,
        has_uid: bool,
    ) -> BoxFuture<'a, Result<Slot, SpanCacheError>>;

    /// Records that the object window's span carries the link identified by
    /// `link_key`; true if it did not before (the caller emits the link span).
    fn record_link<'a>(
        &'a self,
        ow: &'a ObjectWindow,
        link_key: u64,
    ) -> BoxFuture<'a, Result<bool, SpanCacheError>>;

    /// Whether this process has recorded the link (a replayed write emits
    /// a link again only once per process: see `Accepted::replayed`).
    fn has_link_here(&self, ow: &ObjectWindow, link_key: u64) -> bool;

    /// Number of object windows tracked (for metrics).
    fn entry_count(&self) -> u64;

    /// Whether answers take a round trip (a cache shared with other
    /// replicas): then callers ask for several keys at once.
    fn is_remote(&self) -> bool {
        false
    }
}
