//! `kascade doctor`: why no data (or poor data) arrives. What is gathered
//! from the collector's admin listener, the cluster and the frontend
//! ([`probe`]) is judged by pure functions ([`checks`]), so the judgement
//! is tested on inputs captured from real runs (`e2e/fixtures/doctor/`),
//! and printed for a newcomer or as JSON ([`report`]).

pub(crate) mod checks;
pub(crate) mod probe;
pub(crate) mod report;

use serde::{Deserialize, Serialize};

use crate::source::arrivals::IntakeReport;

/// The schema of the inputs `--save-inputs` writes (and the tests read).
pub(crate) const INPUTS_SCHEMA: &str = "kascade.doctor.inputs/v1";

/// A probe's answer, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Probe<T> {
    Ok(T),
    Failed(String),
}

/// One moment read on another clock: `remote_ms` was read between
/// `local_before_ms` and `local_after_ms` on ours (all ms since the
/// epoch); `remote_resolution_ms` is how coarse the remote reading is
/// (an HTTP `Date` header: whole seconds, cut down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ClockReading {
    pub local_before_ms: u64,
    pub local_after_ms: u64,
    pub remote_ms: u64,
    pub remote_resolution_ms: u64,
}

impl ClockReading {
    /// The remote clock minus ours, as the range of values the reading
    /// allows (ms).
    pub(crate) fn offset_range(&self) -> (i64, i64) {
        let r = self.remote_ms as i64;
        (
            r - self.local_after_ms as i64,
            r + self.remote_resolution_ms as i64 - self.local_before_ms as i64,
        )
    }
}

/// The list-watch identity's access to one resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ResourceAccess {
    /// `resource` or `resource.group`.
    pub resource: String,
    pub list: bool,
    pub watch: bool,
    /// The authorizer's reason or evaluation error, when it gave one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// What the frontend says of its raw store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FrontendProbe {
    /// HTTP status of `GET /readyz/raw`.
    pub status: u16,
    pub body: String,
}

/// Everything `kascade doctor` judges (no credentials: addresses, names,
/// counts, messages).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Inputs {
    pub schema: String,
    /// The cluster judged; empty: the collector's `--cluster`.
    pub cluster: String,
    pub admin_url: String,
    pub intake: Probe<IntakeReport>,
    /// When `/intake` was asked and answered, on doctor's clock.
    pub collector_clock: Option<ClockReading>,
    /// The kubeconfig's path (None: no cluster checks).
    pub kubeconfig: Option<String>,
    pub rbac: Option<Probe<Vec<ResourceAccess>>>,
    /// The apiserver's `Date` header, read on doctor's clock.
    pub apiserver_clock: Option<Probe<ClockReading>>,
    pub frontend_url: Option<String>,
    pub frontend: Option<Probe<FrontendProbe>>,
    /// Doctor's clock when it judged (ms since the epoch).
    pub now_ms: u64,
}
