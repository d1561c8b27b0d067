//! What kube-apiserver notes of a request in its audit event's
//! `annotations`, as far as kascade reads them: the admission webhooks that
//! failed open (`failed-open.validating.webhook.admission.k8s.io/round_0_index_1:
//! policy.example.com`, written for every such call) and, for a request
//! that took over 500 ms, where its time went
//! (`apiserver.latency.k8s.io/validating-webhook: 845.749698ms`, …,
//! `apiserver.latency.k8s.io/total`). Both are in any audit log at level
//! Metadata and above, traced or not. Every other annotation is skipped
//! unread.

use std::time::Duration;

use serde::{Deserialize, Deserializer};
use sonic_rs::LazyValue;

const FAILED_OPEN_PREFIX: &str = "failed-open.";
const FAILED_OPEN_SUFFIX: &str = ".webhook.admission.k8s.io/";
const LATENCY_PREFIX: &str = "apiserver.latency.k8s.io/";
/// Layers kept per request at most (kube-apiserver writes eleven).
const MAX_LAYERS: usize = 16;
/// Failed-open webhooks kept per request at most.
const MAX_FAILED_OPEN: usize = 16;

/// No annotations: a watch-only change's, a test's.
pub(crate) static NO_ANNOTATIONS: RequestAnnotations = RequestAnnotations {
    failed_open: Vec::new(),
    latency: Vec::new(),
    total: None,
};

/// The annotations of one request that kascade reads.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RequestAnnotations {
    /// `validating webhook policy.example.com`, … (admission order).
    pub failed_open: Vec<String>,
    /// The request's layers and their time (`validating-webhook`, `etcd`,
    /// `apf-queue-wait`, …), as the apiserver named them.
    pub latency: Vec<(String, Duration)>,
    /// `apiserver.latency.k8s.io/total`: present when the request took over
    /// 500 ms.
    pub total: Option<Duration>,
}

impl RequestAnnotations {
    pub fn is_empty(&self) -> bool {
        self.failed_open.is_empty() && self.latency.is_empty() && self.total.is_none()
    }

    /// The latency annotations as one line: `total=848.98ms
    /// validating-webhook=845.75ms …` (the form spans carry and
    /// [`RequestAnnotations::with_latency_text`] reads back).
    pub fn latency_text(&self) -> String {
        let mut out = String::new();
        for (layer, d) in self
            .total
            .map(|t| ("total", t))
            .into_iter()
            .chain(self.latency.iter().map(|(l, d)| (l.as_str(), *d)))
        {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&format!("{layer}={d:?}"));
        }
        out
    }

    /// Reads back [`RequestAnnotations::latency_text`] (what does not parse
    /// is left out).
    pub fn with_latency_text(mut self, text: &str) -> Self {
        for (layer, d) in text
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .filter_map(|(l, d)| Some((l, go_duration(d)?)))
            .take(MAX_LAYERS)
        {
            if layer == "total" {
                self.total = Some(d);
            } else {
                self.latency.push((layer.to_string(), d));
            }
        }
        self
    }

    fn note(&mut self, key: &str, value: &str) {
        if let Some(layer) = key.strip_prefix(LATENCY_PREFIX) {
            let Some(d) = go_duration(value) else {
                return;
            };
            if layer == "total" {
                self.total = Some(d);
            } else if self.latency.len() < MAX_LAYERS {
                self.latency.push((layer.to_string(), d));
            }
        } else if let Some(kind) = key
            .strip_prefix(FAILED_OPEN_PREFIX)
            .and_then(|k| k.split_once(FAILED_OPEN_SUFFIX))
            .map(|(kind, _)| kind)
            && self.failed_open.len() < MAX_FAILED_OPEN
        {
            self.failed_open.push(format!("{kind} webhook {value}"));
        }
    }
}

/// The `annotations` of an audit event: only the keys kascade reads are
/// decoded, and only when the object's text names one.
pub(super) fn kept<'de, D: Deserializer<'de>>(d: D) -> Result<RequestAnnotations, D::Error> {
    let raw = LazyValue::deserialize(d)?;
    let text = raw.as_raw_str();
    let mut out = RequestAnnotations::default();
    let finder = |needle: &str| memchr::memmem::find(text.as_bytes(), needle.as_bytes()).is_some();
    if !(finder(LATENCY_PREFIX) || finder(FAILED_OPEN_PREFIX)) {
        return Ok(out);
    }
    // Annotations are strings; anything else (a crafted or foreign event)
    // leaves them unread, never the event undecoded: before kascade read
    // them, no event was refused for them.
    let Ok(all) = sonic_rs::from_str::<std::collections::HashMap<String, String>>(text) else {
        return Ok(out);
    };
    let mut keys: Vec<&String> = all.keys().collect();
    // Map order is not the log's: a stable order (round_0_index_0 first).
    keys.sort();
    for k in keys {
        out.note(k, &all[k]);
    }
    Ok(out)
}

/// A duration as Go prints one (`845.749698ms`, `29.783µs`, `1m2.5s`,
/// `624ns`); `None` for anything else.
pub(crate) fn go_duration(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let (unit, secs) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("μs", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .into_iter()
        .find(|(u, _)| rest.starts_with(u))?;
        total += value * secs;
        rest = &rest[unit.len()..];
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_as_the_apiserver_writes_them() {
        let ms = |s| go_duration(s).map(|d| d.as_secs_f64() * 1e3);
        assert_eq!(ms("845.749698ms"), Some(845.749698));
        assert!((ms("29.783µs").unwrap() - 0.029783).abs() < 1e-9);
        assert_eq!(ms("624ns").map(|m| (m * 1e6).round()), Some(624.0));
        assert_eq!(ms("1m2.5s"), Some(62_500.0));
        assert_eq!(ms("1.5h"), Some(5_400_000.0));
        for bad in ["", "12", "ms", "1.2.3ms", "5 ms", "-1s", "1x"] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
    }

    /// The annotations of a Pod create from the slow-webhook fixture (the
    /// real apiserver's, captured): a slow validating webhook, one failing
    /// open.
    #[test]
    fn the_latency_and_failed_open_annotations_of_a_captured_event() {
        let log = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/slow-webhook/audit.log"
        ))
        .unwrap();
        let line = log
            .lines()
            .find(|l| l.contains("failed-open.validating") && l.contains("apiserver.latency"))
            .expect("the fixture has a slow create with a webhook failing open");
        #[derive(Deserialize)]
        struct Only {
            #[serde(deserialize_with = "kept")]
            annotations: RequestAnnotations,
        }
        let a = sonic_rs::from_str::<Only>(line).unwrap().annotations;
        assert_eq!(
            a.failed_open,
            ["validating webhook failing-policy.example.com"]
        );
        let layer = |name: &str| a.latency.iter().find(|(l, _)| l == name).map(|(_, d)| *d);
        let webhook = layer("validating-webhook").unwrap();
        let total = a.total.unwrap();
        assert!(
            webhook >= Duration::from_millis(800) && webhook <= total,
            "{a:?}"
        );
        assert!(layer("apf-queue-wait").is_some());
        // What spans carry reads back the same.
        let back = RequestAnnotations::default().with_latency_text(&a.latency_text());
        assert_eq!(back.total, a.total);
        assert_eq!(back.latency.len(), a.latency.len());
        // Not strings (derived from the same line): the event still decodes,
        // its annotations unread.
        let odd = line.replacen(
            r#""apiserver.latency.k8s.io/total":""#,
            r#""apiserver.latency.k8s.io/total":{"x":[1]},"was":""#,
            1,
        );
        assert_ne!(odd, line);
        let kept_none = sonic_rs::from_str::<Only>(&odd).unwrap().annotations;
        assert!(kept_none.is_empty(), "{kept_none:?}");
        // An event without them: nothing kept.
        let plain = log
            .lines()
            .find(|l| !l.contains("apiserver.latency"))
            .unwrap();
        let none = sonic_rs::from_str::<Only>(plain)
            .map(|o| o.annotations)
            .unwrap_or_default();
        assert!(none.is_empty());
    }
}
