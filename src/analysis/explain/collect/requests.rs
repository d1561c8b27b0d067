//! What kube-apiserver's own traces say of the log's writes (`explain
//! --component-traces`): the traced writes kept for findings (slow ones,
//! ones a webhook failed open on), and how long the log's writes usually
//! take, which a slow write is judged against.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use super::{Idx, State};
use crate::analysis::stats::Latencies;
use crate::component_spans::{Part, parts};
use crate::flow::{ChangeRecord, ChangeSource, RequestAnnotations, SpanRef};

/// A write whose request the apiserver traced, with what its trace says.
pub(in crate::analysis::explain) struct RequestNote {
    pub obj: Idx,
    pub write: String,
    pub verb: String,
    pub received: SystemTime,
    pub root: SpanRef,
    pub code: i32,
    /// The request's own duration (its root span's).
    pub total: Duration,
    pub parts: Vec<Part>,
    /// The parts come from the apiserver's trace of the request, not from
    /// its audit event's annotations.
    pub traced: bool,
}

/// Traced writes kept for findings.
const MAX_REQUEST_NOTES: usize = 4096;

/// …and from this many times the usual duration of its verb's writes in
/// the log, so that a cluster whose every write is slow (a remote etcd) is
/// not reported write by write. The baseline is the log's writes of the
/// verb, not those of the write's own edge: a webhook that slows every Pod
/// create would otherwise hide behind the edge it slows.
const SLOW_WRITE_FACTOR: u32 = 10;

/// Writes of a verb needed before their median counts as the usual (below,
/// the floor alone judges).
const MIN_USUAL_SAMPLES: u64 = 20;

/// Verbs whose durations are kept (the write verbs; a log has no more).
const MAX_VERBS: usize = 8;

/// How long the log's writes took (received → response complete, as the
/// audit events say), by verb.
#[derive(Default)]
pub(in crate::analysis::explain) struct WriteDurations {
    by_verb: HashMap<String, Latencies>,
}

/// Writes looked up in the apiserver's traces, and those found there.
#[derive(Default, Clone, Copy)]
pub(in crate::analysis::explain) struct TracedWrites {
    pub looked_up: u64,
    pub traced: u64,
}

/// What a verb's writes usually take in the log.
#[derive(Clone, Copy, Debug)]
pub(in crate::analysis::explain) struct Usual {
    pub median: Duration,
    pub writes: u64,
}

impl WriteDurations {
    fn record(&mut self, c: &ChangeRecord) {
        if c.source != ChangeSource::Audit {
            return;
        }
        let Ok(took) = c.completed.duration_since(c.received) else {
            return;
        };
        if let Some(l) = self.by_verb.get_mut(&c.verb) {
            l.record(took);
        } else if self.by_verb.len() < MAX_VERBS {
            self.by_verb.entry(c.verb.clone()).or_default().record(took);
        }
    }

    /// The median of the verb's writes, once there are enough of them.
    pub(in crate::analysis::explain) fn usual(&mut self, verb: &str) -> Option<Usual> {
        let l = self.by_verb.get_mut(verb)?;
        (l.count() >= MIN_USUAL_SAMPLES).then(|| Usual {
            median: Duration::from_micros(l.quantile_us(0.5)),
            writes: l.count(),
        })
    }
}

/// The part that made a write slow: the write took at least
/// [`SLOW_REQUEST`](crate::component_spans::SLOW_REQUEST) and
/// [`SLOW_WRITE_FACTOR`] times its verb's usual duration (when the log has
/// one), and the part at least half of it.
pub(in crate::analysis::explain) fn slow_part(
    total: Duration,
    parts: &[Part],
    usual: Option<Usual>,
) -> Option<&Part> {
    if usual.is_some_and(|u| total < u.median * SLOW_WRITE_FACTOR) {
        return None;
    }
    crate::component_spans::slowest_part(total, parts)
}

impl State {
    /// Counts the write's duration, and keeps it when its request was
    /// traced and may be slow (at least the floor, one part taking at least
    /// half of it: judged against the usual once the whole log is read) or
    /// admitted although a webhook failed.
    pub(super) fn note_request(&mut self, c: &ChangeRecord, obj: Idx) {
        self.write_durations.record(c);
        let mut traced = None;
        if let Some(comps) = self.components.as_ref().filter(|_| !c.audit_id.is_empty()) {
            self.traced_writes.looked_up += 1;
            traced = comps.of(&c.audit_id).map(parts);
            self.traced_writes.traced += u64::from(traced.is_some());
        }
        let from_trace = traced.is_some();
        let Some((total, parts)) = traced.or_else(|| annotated_parts(&c.annotations)) else {
            return;
        };
        let may_be_slow = slow_part(total, &parts, None).is_some();
        let failed_open = c.code < 400 && parts.iter().any(|p| p.failed && p.is_webhook());
        if !(may_be_slow || failed_open) {
            return;
        }
        if self.request_notes.len() >= MAX_REQUEST_NOTES {
            self.request_notes_dropped += 1;
            return;
        }
        self.request_notes.push(RequestNote {
            obj,
            write: crate::analysis::cascade::change_name(c),
            verb: c.verb.clone(),
            received: c.received,
            root: c.root,
            code: c.code,
            total,
            parts,
            traced: from_trace,
        });
    }
}

/// What the audit event's annotations say of the request, as parts: where
/// a request over 500 ms spent its time (by layer: `validating webhooks`
/// is every validating webhook's calls together), and the webhooks that
/// failed open. `None` when they say neither.
fn annotated_parts(a: &RequestAnnotations) -> Option<(Duration, Vec<Part>)> {
    if a.is_empty() {
        return None;
    }
    let mut parts: Vec<Part> = a
        .latency
        .iter()
        .map(|(layer, took)| Part {
            label: match layer.as_str() {
                "validating-webhook" => "validating webhooks".to_string(),
                "mutating-webhook" => "mutating webhooks".to_string(),
                "apf-queue-wait" => "priority and fairness queue".to_string(),
                other => other.to_string(),
            },
            took: *took,
            failed: false,
        })
        .collect();
    parts.extend(a.failed_open.iter().map(|label| Part {
        label: label.clone(),
        took: Duration::ZERO,
        failed: true,
    }));
    Some((a.total.unwrap_or_default(), parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(label: &str, ms: u64) -> Part {
        Part {
            label: label.into(),
            took: Duration::from_millis(ms),
            failed: false,
        }
    }

    #[test]
    fn a_write_is_slow_against_the_floor_and_its_verbs_usual_time() {
        let parts = [
            part("validating webhook slow.example.com", 780),
            part("etcd Create", 3),
        ];
        let total = Duration::from_millis(812);
        let usual = |ms| {
            Some(Usual {
                median: Duration::from_millis(ms),
                writes: 100,
            })
        };
        // Writes usually take 4 ms: 812 ms is slow, the webhook took it.
        assert_eq!(
            slow_part(total, &parts, usual(4)).map(|p| p.label.as_str()),
            Some("validating webhook slow.example.com")
        );
        // Without a usual (too few writes), the floor alone judges.
        assert!(slow_part(total, &parts, None).is_some());
        // A cluster whose creates usually take 100 ms: 812 ms is not 10×.
        assert!(slow_part(total, &parts, usual(100)).is_none());
        // Under the floor, never slow.
        assert!(slow_part(Duration::from_millis(250), &parts[..1], usual(1)).is_none());
        // No part took half of it: nothing to name.
        let spread = [
            part("validating webhook a", 300),
            part("validating webhook b", 300),
        ];
        assert!(slow_part(total, &spread, usual(4)).is_none());
    }
}
