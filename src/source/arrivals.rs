//! What has arrived at the collector's intake, per cluster: how many audit
//! events, when the last came, the audit levels writes arrive at, whether
//! they carry `managedFields`. Served as JSON on the admin listener
//! (`GET /intake`) with the export's health, for `kascade doctor`.
//!
//! Cluster names are what webhook paths say (user input): at most
//! [`MAX_CLUSTERS`] are tracked, events of further names are counted
//! together and the first such name is logged.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::flow::{AuditEvent, AuditLevel, OutputHealth, unix_ms};

/// Cluster names tracked; events of names beyond these are only counted.
pub(crate) const MAX_CLUSTERS: usize = 64;
/// Resources named per cluster among the writes that arrived at `Metadata`.
pub(crate) const MAX_METADATA_RESOURCES: usize = 32;

/// The schema of [`IntakeReport`], so a reader can tell a collector that
/// speaks another.
pub(crate) const INTAKE_SCHEMA: &str = "kascade.intake/v1";

/// The verbs whose events kascade turns into spans and whose level matters.
fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// The audit events of one cluster name, as far as `kascade doctor` cares.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ClusterIntake {
    pub name: String,
    /// Audit events received under this name (every stage and verb).
    pub events: u64,
    /// When the last batch with events arrived (collector's clock, ms since
    /// the epoch).
    pub last_seen_ms: u64,
    /// The newest `stageTimestamp` among them (apiserver's clock).
    pub last_stage_timestamp_ms: u64,
    /// Write events (create, update, patch, delete) by audit level.
    pub writes_by_level: BTreeMap<String, u64>,
    /// Events whose objects carried `metadata.managedFields`.
    pub managed_fields: u64,
    /// Writes at `Metadata` level by resource (`resource` or
    /// `resource/subresource`, with `.group`): at most
    /// [`MAX_METADATA_RESOURCES`] named.
    pub metadata_writes: BTreeMap<String, u64>,
    /// Metadata-level writes of resources beyond those named.
    pub metadata_writes_unnamed: u64,
}

/// `GET /intake` on the admin listener.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IntakeReport {
    pub schema: String,
    /// The collector's clock when it answered (ms since the epoch).
    pub now_ms: u64,
    /// `--cluster`: the name of plain `/audit` and `/v1/logs`.
    pub default_cluster: String,
    /// Names the collector is configured with: `--cluster` and the
    /// `--watch-cluster` names.
    pub configured_clusters: Vec<String>,
    /// Of those, the clusters it list-watches.
    pub watched_clusters: Vec<String>,
    /// Per cluster: resources the list-watch is refused by RBAC right now.
    pub watch_forbidden: BTreeMap<String, i64>,
    pub clusters: Vec<ClusterIntake>,
    /// Events under names beyond the [`MAX_CLUSTERS`] tracked.
    pub untracked_events: u64,
    /// The export outputs (OTLP, files), in configured order.
    pub outputs: Vec<OutputHealth>,
    /// The admission source is served (`--admission-listen`).
    #[serde(default)]
    pub admission_source: bool,
    /// Per watched cluster: its admitted writes by what the list-watch
    /// showed of them (`persisted`, `not_persisted`, …), when the admission
    /// source is served.
    #[serde(default)]
    pub admitted: BTreeMap<String, BTreeMap<String, u64>>,
}

/// Per-cluster intake state, bounded; shared by the webhook handlers.
pub(crate) struct Arrivals {
    clusters: Mutex<Clusters>,
    shed_log: crate::messages::LogEvery,
}

#[derive(Default)]
struct Clusters {
    by_name: BTreeMap<String, ClusterIntake>,
    untracked_events: u64,
}

impl Default for Arrivals {
    fn default() -> Self {
        Arrivals {
            clusters: Mutex::default(),
            shed_log: crate::messages::LogEvery::new(std::time::Duration::from_secs(60)),
        }
    }
}

impl Arrivals {
    /// Notes a decoded batch of `cluster`, received at `now`.
    pub(crate) fn note(&self, cluster: &str, events: &[AuditEvent], now: SystemTime) {
        if events.is_empty() {
            return;
        }
        let mut g = self.clusters.lock().expect("arrivals");
        if !g.by_name.contains_key(cluster) && g.by_name.len() >= MAX_CLUSTERS {
            g.untracked_events += events.len() as u64;
            drop(g);
            if self.shed_log.should_log() {
                tracing::warn!(
                    cluster,
                    tracked = MAX_CLUSTERS,
                    "audit events arrive under more cluster names than are tracked for `kascade doctor`; \
                     this name's are only counted (untracked_events in GET /intake)"
                );
            }
            return;
        }
        let c = g
            .by_name
            .entry(cluster.to_string())
            .or_insert_with(|| ClusterIntake {
                name: cluster.to_string(),
                ..Default::default()
            });
        c.events += events.len() as u64;
        c.last_seen_ms = c.last_seen_ms.max(unix_ms(now));
        for ev in events {
            c.last_stage_timestamp_ms = c.last_stage_timestamp_ms.max(unix_ms(ev.stage_timestamp));
            let carried = [&ev.request_object, &ev.response_object]
                .into_iter()
                .flatten()
                .any(|o| o.had_managed_fields());
            if carried {
                c.managed_fields += 1;
            }
            if !is_write(&ev.verb) || ev.stage != "ResponseComplete" {
                continue;
            }
            *c.writes_by_level
                .entry(ev.level.as_str().to_string())
                .or_default() += 1;
            if ev.level == AuditLevel::Metadata {
                let name = ev.object_ref.as_ref().map_or_else(
                    || "(no object)".to_string(),
                    |r| {
                        let mut n = r.resource.clone();
                        if !r.subresource.is_empty() {
                            n = format!("{n}/{}", r.subresource);
                        }
                        if !r.api_group.is_empty() {
                            n = format!("{n}.{}", r.api_group);
                        }
                        n
                    },
                );
                let named = c.metadata_writes.len();
                match c.metadata_writes.get_mut(&name) {
                    Some(n) => *n += 1,
                    None if named < MAX_METADATA_RESOURCES => {
                        c.metadata_writes.insert(name, 1);
                    }
                    None => c.metadata_writes_unnamed += 1,
                }
            }
        }
    }

    /// The clusters seen so far, by name, and the events of untracked names.
    pub(crate) fn snapshot(&self) -> (Vec<ClusterIntake>, u64) {
        let g = self.clusters.lock().expect("arrivals");
        (g.by_name.values().cloned().collect(), g.untracked_events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn fixture_events(scenario: &str) -> Vec<AuditEvent> {
        log_events(&format!("{scenario}/audit.log"))
    }

    fn log_events(under_fixtures: &str) -> Vec<AuditEvent> {
        let path = format!(
            "{}/e2e/fixtures/{under_fixtures}",
            env!("CARGO_MANIFEST_DIR")
        );
        // Decoded as the webhook decodes a shipper's lines.
        let batch = crate::source::exports::decode_body(&std::fs::read(&path).unwrap()).unwrap();
        assert!(batch.errors.is_empty());
        batch.events
    }

    #[test]
    fn counts_levels_and_managed_fields_of_a_captured_log() {
        let events = fixture_events("deployment");
        let a = Arrivals::default();
        a.note(
            "e2e",
            &events,
            UNIX_EPOCH + std::time::Duration::from_secs(5),
        );
        let (clusters, untracked) = a.snapshot();
        assert_eq!(untracked, 0);
        let c = &clusters[0];
        assert_eq!(c.name, "e2e");
        assert_eq!(c.events, events.len() as u64);
        assert_eq!(c.last_seen_ms, 5000);
        assert!(c.writes_by_level["RequestResponse"] > 100, "{c:?}");
        assert!(!c.writes_by_level.contains_key("Metadata"), "{c:?}");
        assert!(c.metadata_writes.is_empty());
        // The fixture was captured with managedFields in the responses.
        assert!(c.managed_fields > 0);
    }

    /// Lines of the harness's cluster B, whose policy logs Pods at
    /// Metadata (captured unedited from its audit log).
    #[test]
    fn metadata_level_writes_are_named_by_resource() {
        let events = log_events("doctor/metadata-pods-audit.log");
        let a = Arrivals::default();
        a.note("remote", &events, SystemTime::now());
        let c = &a.snapshot().0[0];
        assert_eq!(c.writes_by_level["Metadata"], 3, "{c:?}");
        assert_eq!(c.writes_by_level["RequestResponse"], 2, "{c:?}");
        let named: Vec<&str> = c.metadata_writes.keys().map(String::as_str).collect();
        assert_eq!(named, ["pods", "pods/binding", "pods/status"]);
        assert_eq!(c.metadata_writes_unnamed, 0);
    }

    #[test]
    fn cluster_names_beyond_the_cap_are_counted_not_kept() {
        let events = fixture_events("unschedulable");
        let a = Arrivals::default();
        for i in 0..MAX_CLUSTERS + 3 {
            a.note(&format!("c{i}"), &events[..1], SystemTime::now());
        }
        let (clusters, untracked) = a.snapshot();
        assert_eq!(clusters.len(), MAX_CLUSTERS);
        assert_eq!(untracked, 3);
        // A tracked name still counts.
        a.note("c0", &events[..1], SystemTime::now());
        assert_eq!(
            a.snapshot()
                .0
                .iter()
                .find(|c| c.name == "c0")
                .unwrap()
                .events,
            2
        );
    }
}
