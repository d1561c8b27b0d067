//! Kubernetes components' own spans, by the request they served: kube-apiserver
//! exports one trace per request whose spans carry the request's audit ID
//! (tag `audit-id`), so a write's audit event names its trace exactly. What
//! the frontend joins to the object traces (`frontend::components`) and what
//! explain reads for a slow write (which inner span took its time) come
//! from here; depends on no stage.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;

/// The service kube-apiserver's traces are stored under.
pub const APISERVER_SERVICE: &str = "apiserver";
/// The tag kube-apiserver's request spans carry the audit ID in.
pub const AUDIT_ID_TAG: &str = "audit-id";
/// The service the kubelet's traces are stored under.
pub const KUBELET_SERVICE: &str = "kubelet";
/// The tag the kubelet's pod syncs (`syncPod`, `syncTerminatingPod`,
/// `syncTerminatedPod`) carry the Pod's uid in.
pub const POD_UID_TAG: &str = "k8s.pod.uid";

fn string_attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.as_str()),
            _ => None,
        }
    })
}

/// Component spans by the audit ID of the request they served, and the
/// kubelet's pod syncs by the Pod's uid.
#[derive(Default, Debug)]
pub struct ComponentSpans {
    by_audit_id: HashMap<String, Vec<Span>>,
    /// Each sync a trace of its own (its spans, earliest first), earliest
    /// sync first.
    syncs_by_pod: HashMap<String, Vec<Vec<Span>>>,
    /// Writes not looked up: past the bound of the reader (the frontend's
    /// `MAX_JOINED_WRITES`, `MAX_EXPLAINED_WRITES`).
    pub not_read: usize,
}

impl ComponentSpans {
    /// Groups spans (of any traces) by the audit ID their trace carries.
    pub fn from_spans(spans: impl IntoIterator<Item = Span>) -> Self {
        let mut by_trace: HashMap<Vec<u8>, Vec<Span>> = HashMap::new();
        for s in spans {
            by_trace.entry(s.trace_id.clone()).or_default().push(s);
        }
        let mut by_audit_id: HashMap<String, Vec<Span>> = HashMap::new();
        let mut syncs_by_pod: HashMap<String, Vec<Vec<Span>>> = HashMap::new();
        for (_, mut spans) in by_trace {
            spans.sort_by_key(|s| (s.start_time_unix_nano, s.span_id.clone()));
            if let Some(id) = spans
                .iter()
                .find_map(|s| string_attr(&s.attributes, AUDIT_ID_TAG))
                .map(str::to_string)
            {
                by_audit_id.entry(id).or_default().extend(spans);
            } else if let Some(uid) = spans
                .iter()
                .find_map(|s| string_attr(&s.attributes, POD_UID_TAG))
                .map(str::to_string)
            {
                syncs_by_pod.entry(uid).or_default().push(spans);
            }
        }
        for syncs in syncs_by_pod.values_mut() {
            syncs.sort_by_key(|t| {
                t.first()
                    .map(|s| (s.start_time_unix_nano, s.span_id.clone()))
            });
        }
        Self {
            by_audit_id,
            syncs_by_pod,
            not_read: 0,
        }
    }

    /// The kubelet's syncs of the Pod with this uid, each a trace's spans,
    /// earliest first.
    pub fn syncs_of(&self, pod_uid: &str) -> &[Vec<Span>] {
        self.syncs_by_pod.get(pod_uid).map_or(&[], Vec::as_slice)
    }

    /// The key under which `audit_id`'s spans are kept.
    pub fn key_of(&self, audit_id: &str) -> Option<&str> {
        self.by_audit_id
            .get_key_value(audit_id)
            .map(|(k, _)| k.as_str())
    }

    /// The spans of the request with this audit ID, earliest first.
    pub fn of(&self, audit_id: &str) -> Option<&[Span]> {
        self.by_audit_id.get(audit_id).map(Vec::as_slice)
    }

    pub fn is_empty(&self) -> bool {
        self.by_audit_id.is_empty() && self.syncs_by_pod.is_empty()
    }

    #[cfg(feature = "test-support")]
    pub fn requests(&self) -> usize {
        self.by_audit_id.len()
    }
}

/// What took a request's time, by the parts a person acts on: admission
/// webhooks, conversion webhooks, etcd (a request's compact line in
/// `kascade trace`, and what explain names for a slow write).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// `validating webhook policy.example.com`, `etcd Create`, …
    pub label: String,
    pub took: Duration,
    /// The part failed (its span, or its HTTP call's, in error).
    pub failed: bool,
}

impl Part {
    /// An admission or conversion webhook's call.
    pub fn is_webhook(&self) -> bool {
        self.label.contains(" webhook ")
    }
}

/// A request is slow from this long at the least (below it a write is
/// within what an apiserver's writes take on a busy machine, and far within
/// Kubernetes' 1 s objective for mutating calls).
pub(crate) const SLOW_REQUEST: Duration = Duration::from_millis(300);

/// The part that made a request slow: the request took at least
/// [`SLOW_REQUEST`], the part at least half of it.
pub(crate) fn slowest_part(total: Duration, parts: &[Part]) -> Option<&Part> {
    if total < SLOW_REQUEST {
        return None;
    }
    parts
        .iter()
        .max_by_key(|p| p.took)
        .filter(|p| p.took * 2 >= total)
}

/// `validating webhook policy.example.com` for kube-apiserver's span of a
/// webhook call (`Call validating webhook`, its `webhook` tag naming it).
fn webhook_label(s: &Span) -> Option<String> {
    let kind = s.name.strip_prefix("Call ")?.strip_suffix(" webhook")?;
    let name = string_attr(&s.attributes, "webhook").unwrap_or("?");
    Some(format!("{kind} webhook {name}"))
}

/// The span failed, or its HTTP call did (a webhook call's `HTTP POST`).
fn in_error(spans: &[Span], s: &Span) -> bool {
    let failed = |x: &Span| x.status.as_ref().is_some_and(|st| st.code == 2);
    failed(s)
        || spans
            .iter()
            .filter(|c| c.parent_span_id == s.span_id)
            .any(failed)
}

/// Names each webhook call of a request's spans after its webhook (`Call
/// validating webhook policy.example.com`: the UI's row says which), and
/// marks a call in error whose HTTP call failed (kube-apiserver marks only
/// the `HTTP POST` under it, which names no webhook).
pub(crate) fn name_webhook_calls(spans: &mut [Span]) {
    for i in 0..spans.len() {
        let Some(label) = webhook_label(&spans[i]) else {
            continue;
        };
        let failed = in_error(spans, &spans[i]);
        let s = &mut spans[i];
        s.name = format!("Call {label}");
        if failed && s.status.as_ref().is_none_or(|st| st.code != 2) {
            s.status = Some(opentelemetry_proto::tonic::trace::v1::Status {
                code: 2,
                message: format!("the {label} call failed"),
            });
        }
    }
}

/// The parts of one request's spans, earliest first; and the request's own
/// duration (its root span's).
pub fn parts(spans: &[Span]) -> (Duration, Vec<Part>) {
    let own: std::collections::HashSet<&[u8]> =
        spans.iter().map(|s| s.span_id.as_slice()).collect();
    let took = |s: &Span| {
        Duration::from_nanos(s.end_time_unix_nano.saturating_sub(s.start_time_unix_nano))
    };
    let total = spans
        .iter()
        .filter(|s| !own.contains(s.parent_span_id.as_slice()))
        .map(took)
        .max()
        .unwrap_or_default();
    let parts = spans
        .iter()
        .filter_map(|s| {
            let label = if let Some(label) = webhook_label(s) {
                label
            } else if let Some(op) = s.name.strip_suffix(" etcd3") {
                format!("etcd {op}")
            } else {
                return None;
            };
            Some(Part {
                label,
                took: took(s),
                failed: in_error(spans, s),
            })
        })
        .collect();
    (total, parts)
}

/// The spans of a file of OTLP/JSON traces, one `TracesData` (or
/// `ExportTraceServiceRequest`, the same shape) per line: what the
/// OpenTelemetry Collector's `file` exporter writes and Jaeger's
/// `/api/v3/traces/{id}` answers (its `result`). Errors name the line.
pub fn spans_from_otlp_json_lines(text: &str) -> Result<Vec<Span>, String> {
    let mut spans = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let capped = crate::json::depth::cap(line, crate::json::depth::MAX_OBJECT_DEPTH, 8);
        let data: opentelemetry_proto::tonic::trace::v1::TracesData =
            serde_json::from_str(&capped.text).map_err(|e| {
                crate::messages::clip_message(format!(
                    "line {}: not OTLP/JSON traces (a TracesData per line): {e}",
                    i + 1
                ))
            })?;
        spans.extend(
            data.resource_spans
                .into_iter()
                .flat_map(|rs| rs.scope_spans)
                .flat_map(|ss| ss.spans),
        );
    }
    Ok(spans)
}
