//! Propagation statistics over change records: per edge class
//! (`cascade.edge`) the number of hops and their latency distribution, the
//! writes whose cause was not found (by class), and cascade completion times
//! per root kind and verb. Memory is bounded: one HDR histogram per class
//! (3 significant digits), plus the exact samples of a class while it has
//! at most [`EXACT_SAMPLES`] of them, so small inputs get exact percentiles.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::analysis::cascade::{Attempt, Retries, SerialCreates};
use crate::flow::{CascadeRole, ChangeRecord, ChangeSink};

/// Samples kept exactly per class; past this, percentiles come from the
/// histogram (within 0.1 %).
pub(crate) const EXACT_SAMPLES: usize = 100_000;

/// Longest latency the histograms tell apart (longer ones count as this).
const MAX_MICROS: u64 = 24 * 3600 * 1_000_000;

/// The latency distribution of one class, in microseconds.
#[derive(Clone, Debug)]
pub struct Latencies {
    histogram: Histogram<u64>,
    exact: Option<Vec<u64>>,
    /// Exact, unlike the histogram's.
    max: u64,
}

impl Default for Latencies {
    fn default() -> Self {
        Self {
            histogram: Histogram::new_with_bounds(1, MAX_MICROS, 3)
                .expect("static histogram bounds are valid"),
            exact: Some(Vec::new()),
            max: 0,
        }
    }
}

impl Latencies {
    pub fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros())
            .unwrap_or(u64::MAX)
            .min(MAX_MICROS);
        self.histogram.saturating_record(us);
        self.max = self.max.max(us);
        if let Some(exact) = &mut self.exact {
            if exact.len() < EXACT_SAMPLES {
                exact.push(us);
            } else {
                self.exact = None;
            }
        }
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The nearest-rank `q` quantile (0 < q ≤ 1) in microseconds.
    pub fn quantile_us(&mut self, q: f64) -> u64 {
        if let Some(exact) = &mut self.exact {
            if exact.is_empty() {
                return 0;
            }
            exact.sort_unstable();
            let rank = ((q * exact.len() as f64).ceil() as usize).clamp(1, exact.len());
            return exact[rank - 1];
        }
        self.histogram
            .highest_equivalent(self.histogram.value_at_quantile(q))
            .min(self.max)
    }

    pub fn max_us(&self) -> u64 {
        self.max
    }

    /// How many samples fall in `[lo, hi)` microseconds.
    pub fn count_between(&self, lo: u64, hi: u64) -> u64 {
        if hi == 0 || lo >= hi {
            return 0;
        }
        self.histogram
            .iter_recorded()
            .filter(|v| {
                let x = v.value_iterated_to();
                x >= lo && x < hi
            })
            .map(|v| v.count_at_value())
            .sum()
    }

    pub fn summary(&mut self) -> LatencySummary {
        LatencySummary {
            count: self.count(),
            p50_us: self.quantile_us(0.50),
            p90_us: self.quantile_us(0.90),
            p99_us: self.quantile_us(0.99),
            max_us: self.max_us(),
        }
    }
}

/// Count and percentiles of one class (microseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// Everything counted so far.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Every change record seen (refused writes included).
    pub changes: u64,
    /// Refused writes (code ≥ 400): not counted as hops.
    pub refused: u64,
    /// Accepted writes that retried a refused one (after their writer's
    /// back-off): one intent with the first attempt, not hops.
    pub retries: u64,
    pub roots: u64,
    pub effects: u64,
    /// Controller writes whose cause the inference did not find (out of
    /// order, clock skew, a cause outside the input), by class
    /// `<resource> <verb|subresource>`.
    pub unexplained: BTreeMap<String, u64>,
    /// Hop latency per edge class.
    pub edges: BTreeMap<String, Latencies>,
    /// Completion time per (root resource, root verb).
    pub completions: BTreeMap<(String, String), Latencies>,
    /// Cascades that did not complete (stalled, or not complete at the end
    /// of the input) per (root resource, root verb).
    pub incomplete: BTreeMap<(String, String), u64>,
}

impl Stats {
    pub fn unexplained_total(&self) -> u64 {
        self.unexplained.values().sum()
    }

    /// `after_sibling`: the hop from the sibling's answer a create waited
    /// for (its writer's previous batch), counted instead of the cause's.
    fn add(&mut self, c: &ChangeRecord, attempt: Attempt, after_sibling: Option<Duration>) {
        self.changes += 1;
        if c.code >= 400 {
            self.refused += 1;
            return;
        }
        if attempt.is_retry() {
            self.retries += 1;
            return;
        }
        match c.role {
            CascadeRole::Root => self.roots += 1,
            CascadeRole::Effect => self.effects += 1,
            CascadeRole::Unexplained => {
                *self.unexplained.entry(write_class(c)).or_default() += 1;
            }
        }
        if let Some(cause) = &c.cause {
            self.edges
                .entry(cause.edge.clone())
                .or_default()
                .record(after_sibling.unwrap_or(cause.hop));
        }
    }
}

/// `<resource> <verb|subresource>`, e.g. `pods binding`.
pub(crate) fn write_class(c: &ChangeRecord) -> String {
    let op = if c.subresource.is_empty() {
        &c.verb
    } else {
        &c.subresource
    };
    format!("{} {op}", c.object.resource)
}

/// A [`ChangeSink`] that counts into [`Stats`].
#[derive(Default)]
pub struct PropagationStats {
    stats: Mutex<Stats>,
    retries: Mutex<Retries>,
    serial: Mutex<SerialCreates>,
}

impl PropagationStats {
    /// A cascade closed: `kind` is its root's resource, `verb` the root
    /// write's verb, `took` how long it took to complete (`None`: it did
    /// not). The seam for the cascade completion tracker
    /// (`analysis::cascade`), which knows when a cascade has settled.
    pub fn record_completion(&self, kind: &str, verb: &str, took: Option<Duration>) {
        let key = (kind.to_string(), verb.to_string());
        let mut stats = self.lock();
        match took {
            Some(took) => stats.completions.entry(key).or_default().record(took),
            None => *stats.incomplete.entry(key).or_default() += 1,
        }
    }

    pub fn snapshot(&self) -> Stats {
        self.lock().clone()
    }

    pub fn into_stats(self) -> Stats {
        self.stats.into_inner().unwrap_or_else(|e| e.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ChangeSink for PropagationStats {
    fn record(&self, change: &ChangeRecord) {
        let attempt = self
            .retries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(change);
        let after_sibling = self
            .serial
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(change)
            .map(|a| a.gap);
        self.lock().add(change, attempt, after_sibling);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_percentiles_are_nearest_rank() {
        let mut l = Latencies::default();
        for ms in 1..=100u64 {
            l.record(Duration::from_millis(ms));
        }
        let s = l.summary();
        assert_eq!(s.count, 100);
        assert_eq!(s.p50_us, 50_000);
        assert_eq!(s.p90_us, 90_000);
        assert_eq!(s.p99_us, 99_000);
        assert_eq!(s.max_us, 100_000);
        assert_eq!(l.count_between(10_000, 20_000), 10);
    }

    #[test]
    fn past_the_exact_samples_percentiles_come_from_the_histogram() {
        let mut l = Latencies::default();
        for i in 0..(EXACT_SAMPLES as u64 + 10) {
            l.record(Duration::from_micros(1_000 + i % 1000));
        }
        assert!(l.exact.is_none());
        let p50 = l.quantile_us(0.5);
        assert!((1_495..=1_505).contains(&p50), "{p50}");
        assert_eq!(l.max_us(), 1_999);
    }
}
