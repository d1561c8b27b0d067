//! Sources: the apiserver's audit webhook, audit log files, and list-watch
//! of objects and Events.

pub mod audit;
pub mod replay;
pub mod server;
pub mod spool;
pub mod watch;
pub mod webhook;

use std::sync::Arc;

use crate::aggregate::Accepted;
use crate::metrics::Metrics;
use audit::{AuditEvent, AuditFilter};

/// Filters an event and resolves its object; `None` if it is dropped (counted).
pub fn accept(
    ev: AuditEvent,
    cluster: &str,
    filter: &AuditFilter,
    metrics: &Arc<Metrics>,
) -> Option<Accepted> {
    if let Err(reason) = filter.check(&ev) {
        metrics
            .events_filtered
            .get_or_create(&Metrics::reason(reason.as_str()))
            .inc();
        return None;
    }
    let Some((object, uid)) = ev.object(cluster) else {
        metrics
            .events_filtered
            .get_or_create(&Metrics::reason(audit::FilterReason::NoObject.as_str()))
            .inc();
        return None;
    };
    Some(Accepted {
        event: ev,
        object,
        uid,
        replayed: false,
    })
}

/// Cluster names go into span attributes and URL paths: keep them DNS-like.
pub fn validate_cluster_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "cluster name {name:?} must be 1-253 characters of letters, digits, '-', '.', '_'"
        ))
    }
}
