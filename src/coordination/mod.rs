//! How `kascade collect` replicas coordinate through etcd: the typed etcd
//! client ([`etcd`]) that the shared span cache
//! (`aggregate::span_cache::EtcdSpanCache`) reserves spans with, and the
//! election of one watcher per cluster ([`election`]), which watchers
//! depend on instead of on the span cache.

pub(crate) mod election;
pub(crate) mod etcd;
