//! `kascade analyze`'s report: the [`Report`] (stable JSON field names, see
//! docs/offline.md), as a text table with histogram bars, JSON or
//! CSV.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::stats::{Latencies, LatencySummary, Stats};

/// One edge class's hops.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EdgeRow {
    pub edge: String,
    #[serde(flatten)]
    pub latency: LatencySummary,
}

/// Completion times of the cascades started by one kind of root write
/// (`count` of them completed), and how many did not complete.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompletionRow {
    /// The root's resource, e.g. `deployments`.
    pub kind: String,
    /// The root write's verb, e.g. `patch`.
    pub verb: String,
    #[serde(flatten)]
    pub latency: LatencySummary,
    /// Cascades that did not complete: some object they wrote had not
    /// settled when they stalled (10 min without a change) or the input
    /// ended.
    #[serde(default)]
    pub incomplete: u64,
}

/// Writes the inference found no cause for, by class.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnexplainedRow {
    /// `<resource> <verb|subresource>`.
    pub class: String,
    pub count: u64,
}

/// A histogram bucket of hop latencies, `[from_us, to_us)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Bucket {
    pub label: String,
    pub from_us: u64,
    pub to_us: u64,
    pub count: u64,
}

/// The whole report (`--format json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Audit lines read (non-empty).
    pub lines: u64,
    /// Lines that were not audit events (each reported with file:line).
    pub malformed_lines: u64,
    /// Change records (writes) seen, refused ones included.
    pub changes: u64,
    /// Refused writes (HTTP code ≥ 400), not counted as hops.
    pub refused: u64,
    /// Accepted retries of refused writes (after their writer's back-off),
    /// not counted as hops.
    #[serde(default)]
    pub retries: u64,
    /// Changes of the cluster's start-up cascades, left out (see
    /// `analysis::foreground`; `--with-background` counts them).
    #[serde(default)]
    pub background: u64,
    /// Changes outside `--namespace` or `--from`/`--to`, left out.
    #[serde(default)]
    pub out_of_scope: u64,
    /// Successful writes with no cause: cascade roots.
    pub roots: u64,
    /// Successful writes with an inferred cause (the hops below).
    pub effects: u64,
    /// Controller writes whose cause was not found (out-of-order or skewed
    /// timestamps, a cause outside the input): skipped, counted by class.
    pub unexplained: u64,
    pub unexplained_by_class: Vec<UnexplainedRow>,
    /// Per edge class, most hops first.
    pub edges: Vec<EdgeRow>,
    /// Whether completion times were tracked (needs the cascade tracker).
    pub completions_tracked: bool,
    pub completions: Vec<CompletionRow>,
}

/// The buckets of the terminal bars and the plots (microseconds).
pub(crate) const BUCKET_BOUNDS_US: &[u64] = &[
    0, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000,
    2_000_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
];

/// The latencies in [`BUCKET_BOUNDS_US`] buckets (the last one open).
pub(crate) fn buckets(l: &Latencies) -> Vec<Bucket> {
    let mut out = Vec::new();
    for (i, &from) in BUCKET_BOUNDS_US.iter().enumerate() {
        let to = BUCKET_BOUNDS_US.get(i + 1).copied().unwrap_or(u64::MAX);
        let label = if to == u64::MAX {
            format!("≥ {}", short_duration(from))
        } else {
            format!("< {}", short_duration(to))
        };
        out.push(Bucket {
            label,
            from_us: from,
            to_us: to,
            count: l.count_between(from, to),
        });
    }
    out
}

/// `850µs`, `12.3ms`, `4.05s`.
pub(crate) fn short_duration(us: u64) -> String {
    if us < 1_000 {
        format!("{us}µs")
    } else if us < 1_000_000 {
        let ms = us as f64 / 1_000.0;
        if us.is_multiple_of(1_000) {
            format!("{ms:.0}ms")
        } else {
            format!("{ms:.1}ms")
        }
    } else {
        let s = us as f64 / 1_000_000.0;
        if us.is_multiple_of(1_000_000) {
            format!("{s:.0}s")
        } else {
            format!("{s:.2}s")
        }
    }
}

/// One row per (root kind, verb) that completed or did not, in order.
fn completion_rows(stats: &mut Stats) -> Vec<CompletionRow> {
    let mut keys: Vec<(String, String)> = stats
        .completions
        .keys()
        .chain(stats.incomplete.keys())
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|key| {
            let latency = stats
                .completions
                .get_mut(&key)
                .map_or_else(|| Latencies::default().summary(), Latencies::summary);
            let incomplete = stats.incomplete.get(&key).copied().unwrap_or(0);
            CompletionRow {
                kind: key.0,
                verb: key.1,
                latency,
                incomplete,
            }
        })
        .collect()
}

impl Report {
    pub fn new(
        stats: &mut Stats,
        lines: u64,
        malformed_lines: u64,
        completions_tracked: bool,
    ) -> Self {
        let mut edges: Vec<EdgeRow> = stats
            .edges
            .iter_mut()
            .map(|(edge, l)| EdgeRow {
                edge: edge.clone(),
                latency: l.summary(),
            })
            .collect();
        edges.sort_by(|a, b| {
            b.latency
                .count
                .cmp(&a.latency.count)
                .then(a.edge.cmp(&b.edge))
        });
        Report {
            lines,
            malformed_lines,
            changes: stats.changes,
            refused: stats.refused,
            retries: stats.retries,
            background: 0,
            out_of_scope: 0,
            roots: stats.roots,
            effects: stats.effects,
            unexplained: stats.unexplained_total(),
            unexplained_by_class: stats
                .unexplained
                .iter()
                .map(|(class, &count)| UnexplainedRow {
                    class: class.clone(),
                    count,
                })
                .collect(),
            edges,
            completions_tracked,
            completions: completion_rows(stats),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serializes")
    }

    /// One row per edge class, completion class and unexplained class:
    /// `table,class,count,p50_us,p90_us,p99_us,max_us` (`table` is `edge`,
    /// `completion`, `incomplete` (cascades that did not complete, by root
    /// class) or `unexplained`; the latencies of `incomplete` and
    /// `unexplained` rows are empty).
    pub fn to_csv(&self) -> String {
        let mut out = String::from("table,class,count,p50_us,p90_us,p99_us,max_us\n");
        let mut row = |table: &str, class: &str, l: Option<&LatencySummary>, count: u64| {
            let _ = write!(out, "{table},{},{count}", csv_field(class));
            match l {
                Some(l) => {
                    let _ = writeln!(out, ",{},{},{},{}", l.p50_us, l.p90_us, l.p99_us, l.max_us);
                }
                None => out.push_str(",,,,\n"),
            }
        };
        for e in &self.edges {
            row("edge", &e.edge, Some(&e.latency), e.latency.count);
        }
        for c in &self.completions {
            let class = format!("{} {}", c.kind, c.verb);
            if c.latency.count > 0 {
                row("completion", &class, Some(&c.latency), c.latency.count);
            }
            if c.incomplete > 0 {
                row("incomplete", &class, None, c.incomplete);
            }
        }
        for u in &self.unexplained_by_class {
            row("unexplained", &u.class, None, u.count);
        }
        out
    }

    /// A table for the terminal, then each edge class's histogram as bars.
    /// With a `width` (the terminal's), the bars shrink to fit it and a
    /// table wider than it puts each edge's figures on a line of their own
    /// under its name; prose lines are left to the caller to wrap.
    pub fn to_text(&self, stats: &Stats, width: Option<usize>) -> String {
        // `  {label:>9} │` before a bar, ` {count}` after it.
        let bar_width = width.map_or(MAX_BAR_WIDTH, |w| {
            let count_digits = stats_max_count(stats).to_string().len();
            w.saturating_sub(13 + 1 + count_digits)
                .clamp(MIN_BAR_WIDTH, MAX_BAR_WIDTH)
        });
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} changes ({} refused, {} retries after a back-off), {} roots, {} hops, {} unexplained; {} lines, {} malformed",
            self.changes,
            self.refused,
            self.retries,
            self.roots,
            self.effects,
            self.unexplained,
            self.lines,
            self.malformed_lines
        );
        if self.background + self.out_of_scope > 0 {
            let _ = writeln!(
                out,
                "left out: {} changes of the cluster's start-up (--with-background counts them), {} outside the scope",
                self.background, self.out_of_scope
            );
        }
        out.push('\n');
        let width_of_names = self
            .edges
            .iter()
            .map(|e| e.edge.chars().count())
            .chain(std::iter::once(10))
            .max()
            .unwrap_or(10);
        // The figures' columns: "  {:>8}  {:>9}" and four more "  {:>9}".
        const FIGURES_WIDTH: usize = 2 + 8 + 4 * (2 + 9);
        // Stacked: the name on its line, the figures under it.
        let stacked = width.is_some_and(|w| width_of_names + FIGURES_WIDTH > w);
        let name_column = if stacked { 0 } else { width_of_names };
        let mut row = |name: &str, figures: [&str; 5]| {
            if stacked {
                let _ = writeln!(out, "{name}");
            }
            let _ = writeln!(
                out,
                "{:<name_column$}  {:>8}  {:>9}  {:>9}  {:>9}  {:>9}",
                if stacked { "" } else { name },
                figures[0],
                figures[1],
                figures[2],
                figures[3],
                figures[4]
            );
        };
        row("edge", ["count", "p50", "p90", "p99", "max"]);
        for e in &self.edges {
            let l = &e.latency;
            row(
                &e.edge,
                [
                    &l.count.to_string(),
                    &short_duration(l.p50_us),
                    &short_duration(l.p90_us),
                    &short_duration(l.p99_us),
                    &short_duration(l.max_us),
                ],
            );
        }
        out.push('\n');
        if self.completions_tracked {
            let _ = writeln!(out, "cascade completion by root kind and verb:");
            for c in &self.completions {
                let l = &c.latency;
                let _ = write!(out, "  {} {}: ", c.kind, c.verb);
                if l.count > 0 {
                    let _ = write!(
                        out,
                        "{} cascades, p50 {}, p90 {}, p99 {}, max {}",
                        l.count,
                        short_duration(l.p50_us),
                        short_duration(l.p90_us),
                        short_duration(l.p99_us),
                        short_duration(l.max_us)
                    );
                }
                match (l.count, c.incomplete) {
                    (_, 0) => {}
                    (0, n) => {
                        let _ = write!(out, "{n} did not complete (kascade explain tells why)");
                    }
                    (_, n) => {
                        let _ = write!(out, "; {n} did not complete");
                    }
                }
                out.push('\n');
            }
        } else {
            let _ = writeln!(out, "cascade completion: not tracked in this build");
        }
        if !self.unexplained_by_class.is_empty() {
            let _ = writeln!(
                out,
                "\nwrites whose cause was not found (skipped, not guessed):"
            );
            for u in &self.unexplained_by_class {
                let _ = writeln!(out, "  {}: {}", u.class, u.count);
            }
        }
        for e in &self.edges {
            let Some(l) = stats.edges.get(&e.edge) else {
                continue;
            };
            let _ = writeln!(out, "\n{} ({} hops)", e.edge, e.latency.count);
            let bs = buckets(l);
            let first = bs.iter().position(|b| b.count > 0).unwrap_or(0);
            let last = bs.iter().rposition(|b| b.count > 0).unwrap_or(0);
            let most = bs.iter().map(|b| b.count).max().unwrap_or(0).max(1);
            for b in &bs[first..=last] {
                let n = (b.count as f64 / most as f64 * bar_width as f64).round() as usize;
                let bar = if b.count > 0 {
                    "█".repeat(n.max(1))
                } else {
                    String::new()
                };
                let _ = writeln!(out, "  {:>9} │{bar} {}", b.label, b.count);
            }
        }
        out
    }
}

/// Histogram bars on a wide terminal, when piped, and in files.
const MAX_BAR_WIDTH: usize = 40;
/// Bars on a narrow terminal keep this much resolution (the line overflows
/// rather than lose it).
const MIN_BAR_WIDTH: usize = 10;

/// The largest bucket count of any histogram (its digits follow the bar).
fn stats_max_count(stats: &Stats) -> u64 {
    stats
        .edges
        .values()
        .flat_map(|l| buckets(l).into_iter().map(|b| b.count))
        .max()
        .unwrap_or(0)
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
