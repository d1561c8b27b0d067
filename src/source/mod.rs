//! Sources: the apiserver's audit webhook, audit log files, and list-watch
//! of objects and Events.

pub(crate) mod admission;
pub(crate) mod arrivals;
pub(crate) mod audit;
pub(crate) mod exports;
pub(crate) mod mergelog;
pub(crate) mod repeats;
pub(crate) mod replay;
pub(crate) mod server;
pub(crate) mod spool;
pub(crate) mod watch;
pub(crate) mod webhook;

use std::sync::Arc;

use crate::flow::{Accepted, AuditEvent, FilterReason};
use crate::metrics::{Metrics, RejectReason};
use crate::model::ObjectRef;
use audit::AuditFilter;

/// Who is told that audit events carry `metadata.managedFields`, and how
/// to spare them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PolicyAdvice {
    /// The collector's operator, who can change the apiserver's audit
    /// policy: logged at INFO, once per cluster.
    Operator,
    /// The user of an offline command, who reads logs someone else's
    /// policy wrote: at DEBUG only.
    DebugOnly,
}

/// Filters an event and resolves its object; `None` if it is dropped
/// (counted). As an offline command does: managedFields are mentioned at
/// DEBUG only (the collector's webhook uses [`accept_advising`]).
pub fn accept(
    ev: AuditEvent,
    cluster: &str,
    filter: &AuditFilter,
    metrics: &Arc<Metrics>,
) -> Option<Accepted> {
    accept_advising(ev, cluster, filter, metrics, PolicyAdvice::DebugOnly)
}

/// [`accept`], telling `advice` about managedFields.
pub(crate) fn accept_advising(
    ev: AuditEvent,
    cluster: &str,
    filter: &AuditFilter,
    metrics: &Arc<Metrics>,
    advice: PolicyAdvice,
) -> Option<Accepted> {
    if let Err(reason) = filter.check(&ev) {
        metrics
            .events_filtered
            .get_or_create(&Metrics::filtered(reason))
            .inc();
        return None;
    }
    let malformed = |ev: &AuditEvent, e: String| {
        metrics
            .events_rejected
            .get_or_create(&Metrics::rejected(RejectReason::Malformed))
            .inc();
        tracing::warn!(cluster, audit_id = %ev.audit_id, "audit event refused: {e}");
    };
    let (object, uid, failed_create) = match ev.object(cluster) {
        Ok(Some((object, uid))) => (object, uid, None),
        // A create refused before its object was named: shown on its owner
        // (the processor resolves the owner's kind), else under an object
        // named by the generateName prefix itself.
        Ok(None) => match ev.failed_create() {
            Ok(Some(attempt)) => {
                let r = ev
                    .object_ref
                    .as_ref()
                    .expect("failed_create needs an objectRef");
                let name = if attempt.generate_name.is_empty() {
                    crate::flow::UNNAMED_OBJECT.to_string()
                } else {
                    attempt.generate_name.clone()
                };
                let object = ObjectRef::new(cluster, &r.api_group, &r.resource, &r.namespace, name);
                (object, String::new(), Some(Box::new(attempt)))
            }
            Ok(None) => {
                // deletecollection, or a write whose object is not in the
                // event (a Metadata-level policy hides a refused create's request).
                metrics
                    .events_filtered
                    .get_or_create(&Metrics::filtered(FilterReason::NoObject))
                    .inc();
                tracing::debug!(cluster, audit_id = %ev.audit_id, verb = %ev.verb,
                    code = ev.code(), "audit event names no object: not shown");
                return None;
            }
            Err(e) => {
                malformed(&ev, e);
                return None;
            }
        },
        Err(e) => {
            malformed(&ev, e);
            return None;
        }
    };
    note_managed_fields(&ev, cluster, metrics, advice);
    note_deep_values(&ev, &object, cluster, metrics);
    Some(Accepted {
        event: ev,
        object,
        uid,
        replayed: false,
        context: false,
        arrival: 0,
        noted_through: 0,
        more_in_batch: false,
        failed_create,
        batch_span: tracing::Span::none(),
    })
}

/// Counts and says the values of an object's write left out as nested too
/// deep to read (`json::depth`): the write keeps its span, with a marker.
fn note_deep_values(ev: &AuditEvent, object: &ObjectRef, cluster: &str, metrics: &Metrics) {
    if ev.deep_values == 0 {
        return;
    }
    metrics
        .deep_values
        .get_or_create(&Metrics::cluster(cluster))
        .inc_by(u64::from(ev.deep_values));
    tracing::warn!(
        cluster,
        audit_id = %ev.audit_id,
        object = %object,
        values = ev.deep_values,
        "values nested deeper than {} levels are shown as a marker (\"{}…\")",
        crate::json::depth::MAX_OBJECT_DEPTH,
        crate::json::depth::MARKER_PREFIX,
    );
}

/// Counts an event whose objects carried `metadata.managedFields` (kascade
/// cuts them out unread), and says once per cluster how to spare them.
fn note_managed_fields(ev: &AuditEvent, cluster: &str, metrics: &Metrics, advice: PolicyAdvice) {
    let carried = [&ev.request_object, &ev.response_object]
        .into_iter()
        .flatten()
        .any(|o| o.had_managed_fields());
    if !carried {
        return;
    }
    let before = metrics
        .events_with_managed_fields
        .get_or_create(&Metrics::cluster(cluster))
        .inc();
    if before == 0 {
        const ADVICE: &str = "audit events carry metadata.managedFields, which kascade never shows: \
             `omitManagedFields: true` in the apiserver's audit policy (as in \
             kascade's example policies) spares the apiserver, the network and \
             kascade about a fifth of each event";
        match advice {
            PolicyAdvice::Operator => tracing::info!(cluster, "{ADVICE}"),
            PolicyAdvice::DebugOnly => tracing::debug!(cluster, "{ADVICE}"),
        }
    }
}

/// Cluster names go into span attributes and URL paths: keep them DNS-like.
pub(crate) fn validate_cluster_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "cluster name {} must be 1-253 characters of letters, digits, '-', '.', '_'",
            crate::messages::quote(name)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn an_object_name_beyond_bounds_is_counted_as_malformed_not_accepted() {
        // A real generateName create (a ReplicaSet's Pod), its response forged.
        let mut ev: Value = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/deployment/audit.log"
        ))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| {
            e["verb"] == "create" && e["responseObject"]["metadata"]["generateName"].is_string()
        })
        .unwrap();
        ev["responseObject"]["metadata"]["name"] = Value::String("p".repeat(254));
        let metrics = Arc::new(Metrics::default());
        let parsed = audit::parse_event(&ev.to_string()).unwrap();
        assert!(accept(parsed, "c", &AuditFilter::default(), &metrics).is_none());
        let malformed = metrics
            .events_rejected
            .get_or_create(&Metrics::rejected(RejectReason::Malformed))
            .get();
        assert_eq!(malformed, 1);
    }

    /// The lines logged while the deployment fixture's events are accepted
    /// telling `advice`, at DEBUG and above.
    fn logged_while_accepting(advice: PolicyAdvice) -> String {
        let log = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/deployment/audit.log"
        ))
        .unwrap();
        let metrics = Arc::new(Metrics::default());
        crate::internal_events::tests::logged(|| {
            for line in log.lines() {
                let parsed = audit::parse_event(line).unwrap();
                accept_advising(parsed, "east", &AuditFilter::default(), &metrics, advice);
            }
        })
    }

    #[test]
    fn only_the_collectors_operator_is_told_at_info_to_leave_managed_fields_out() {
        let advice = |text: &str, level: &str| {
            text.lines()
                .filter(|l| l.contains(level) && l.contains("omitManagedFields: true"))
                .count()
        };
        // Once per cluster, however many events carried them.
        let operator = logged_while_accepting(PolicyAdvice::Operator);
        assert_eq!(advice(&operator, " INFO "), 1, "{operator}");
        let offline = logged_while_accepting(PolicyAdvice::DebugOnly);
        assert_eq!(advice(&offline, " INFO "), 0, "{offline}");
        assert_eq!(advice(&offline, "DEBUG "), 1, "{offline}");
    }

    #[test]
    fn accepted_events_whose_objects_carried_managed_fields_are_counted_by_cluster() {
        // The real control plane's log (its policy of then kept
        // managedFields); counted independently of the cutting.
        let log = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/deployment/audit.log"
        ))
        .unwrap();
        let metrics = Arc::new(Metrics::default());
        let (mut expected, mut accepted, mut without) = (0, 0, 0);
        for line in log.lines() {
            let ev: Value = serde_json::from_str(line).unwrap();
            let carried = ["/requestObject", "/responseObject"]
                .iter()
                .any(|o| ev.pointer(&format!("{o}/metadata/managedFields")).is_some());
            let parsed = audit::parse_event(line).unwrap();
            if accept(parsed, "east", &AuditFilter::default(), &metrics).is_some() {
                accepted += 1;
                expected += usize::from(carried);
                without += usize::from(!carried);
            }
        }
        let counted = |cluster: &str| {
            metrics
                .events_with_managed_fields
                .get_or_create(&Metrics::cluster(cluster))
                .get()
        };
        assert!(expected > 50 && without > 10, "{expected} of {accepted}");
        assert_eq!(counted("east"), expected as u64);
        assert_eq!(counted("west"), 0);
    }

    #[test]
    fn a_refused_create_with_fields_beyond_bounds_is_malformed() {
        // A real quota-refused generateName create (a ReplicaSet's Pod).
        let real: Value = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/quota/audit.log"
        ))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["verb"] == "create" && e["responseStatus"]["code"] == 403)
        .unwrap();
        for pointer in [
            "/requestObject/metadata/generateName",
            "/requestObject/metadata/ownerReferences/0/name",
            "/responseStatus/details/name",
        ] {
            let metrics = Arc::new(Metrics::default());
            let parsed = audit::parse_event(&real.to_string()).unwrap();
            assert!(accept(parsed, "c", &AuditFilter::default(), &metrics).is_some());
            let mut forged = real.clone();
            *forged.pointer_mut(pointer).unwrap() = Value::String("p".repeat(254));
            let parsed = audit::parse_event(&forged.to_string()).unwrap();
            assert!(
                accept(parsed, "c", &AuditFilter::default(), &metrics).is_none(),
                "{pointer}"
            );
            let malformed = metrics
                .events_rejected
                .get_or_create(&Metrics::rejected(RejectReason::Malformed))
                .get();
            assert_eq!(malformed, 1, "{pointer}");
        }
    }

    #[test]
    fn bad_cluster_names_are_quoted_short() {
        let e = validate_cluster_name(&"c".repeat(1 << 20)).unwrap_err();
        assert!(
            e.len() < 400 && e.contains("1048576 bytes"),
            "{}",
            &e[..100]
        );
    }
}
