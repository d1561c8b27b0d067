//! An assembled object tree as text for the terminal (`kascade trace`):
//! object hierarchy, times relative to the first entry, who did what, diffs.

use std::fmt::Write as _;

use super::assemble::{Assembly, REPEATED_COUNT, REPEATED_TIMES, REPEATED_UNTIL};
use super::display::{DEFAULT_MAX_SIBLINGS, diff_lines, problem, select_for_text, snapshot};
use super::merge::Source;
use super::raw::{from_nanos, string_attr};
use crate::analysis::tree_text::{self, Prefixes, Row};

pub struct TextOptions {
    /// Changed paths shown per write (the rest are counted).
    pub max_diff_lines: usize,
    /// Show create/delete snapshots.
    pub snapshots: bool,
    /// Objects of one resource and relation under one object shown before
    /// the rest are said in one line, as the Jaeger UI summarises them
    /// (`--max-siblings`; 0 shows all).
    pub max_siblings: usize,
    /// Components' own traces: a traced write gets a line of its
    /// request's parts, a Pod a line per kubelet sync.
    pub components: crate::component_spans::ComponentSpans,
}

impl Default for TextOptions {
    fn default() -> Self {
        Self {
            max_diff_lines: 8,
            snapshots: false,
            max_siblings: DEFAULT_MAX_SIBLINGS,
            components: Default::default(),
        }
    }
}

fn rel(ns: u64, base: u64) -> String {
    let d = ns.saturating_sub(base) as f64 / 1e9;
    format!("+{d:.3}s")
}

pub fn render_text(asm: &Assembly, opts: &TextOptions) -> String {
    let base = asm.range.map_or(0, |r| r.0);
    let mut out = String::new();
    if base > 0 {
        let t0 = humantime::format_rfc3339_millis(from_nanos(base));
        let _ = writeln!(out, "t0 = {t0}");
    }
    for note in &asm.notes {
        let _ = writeln!(out, "note: {note}");
    }
    let selection = select_for_text(asm, opts.max_siblings);
    let rows = tree_text::rows(&asm.walk(), |i| selection.hidden[i], &selection.summaries);
    let mut prefixes = Prefixes::default();
    for (pos, (row, _)) in rows.iter().enumerate() {
        let prefix = prefixes.of(&rows, pos);
        let i = match row {
            Row::Node(i) => *i,
            Row::Rest(line) => {
                let _ = writeln!(out, "{prefix}{line}");
                continue;
            }
        };
        let n = &asm.nodes[i];
        let o = &n.history.object;
        let mut head = format!("{prefix}{} ", o.resource);
        if !o.namespace.is_empty() {
            let _ = write!(head, "{}/", o.namespace);
        }
        head.push_str(&o.name);
        if let Some(c) = &n.class {
            let _ = write!(head, "  [{c}]");
        }
        if n.parent
            .is_none_or(|p| asm.nodes[p].history.object.cluster != o.cluster)
        {
            let _ = write!(head, "  (cluster {})", o.cluster);
        }
        if i == asm.searched && asm.nodes.len() > 1 {
            head.push_str("  ◀ searched");
        }
        if let Some(first) = n.copy_of
            && !asm.nodes[first].history.entries.is_empty()
        {
            let shown = asm.nodes[first]
                .parent
                .map(|p| {
                    let o = &asm.nodes[p].history.object;
                    format!(" under {} {}", o.resource, o.name)
                })
                .unwrap_or_default();
            let _ = writeln!(out, "{head}  (shared: entries shown once{shown})");
            continue;
        }
        if n.history.entries.is_empty() && n.history.hidden_entries == 0 {
            head.push_str("  (nothing recorded in range)");
        }
        if n.history.hidden_entries > 0 {
            let _ = write!(
                head,
                "  ({} entries outside the time range not shown)",
                n.history.hidden_entries
            );
        }
        if let Some(p) = problem(n) {
            let _ = write!(head, "  ✗ {p}");
        }
        let _ = writeln!(out, "{head}");
        // Entries are indented under the object, continuing its tree line.
        let body = prefixes.under(!n.children.is_empty());
        // The kubelet's syncs of a Pod, in time order among its entries.
        let mut syncs = opts.components.syncs_of(&n.history.uid).iter().peekable();
        let mut sync_lines = |out: &mut String, until: Option<u64>| {
            while let Some(sync) = syncs.next_if(|s| {
                until.is_none_or(|t| s.first().is_some_and(|r| r.start_time_unix_nano <= t))
            }) {
                if let Some(root) = sync.first() {
                    let t = rel(root.start_time_unix_nano, base);
                    let _ = writeln!(out, "{body}{t}  {}", sync_line(sync));
                }
            }
        };
        for e in &n.history.entries {
            sync_lines(&mut out, Some(e.span.start_time_unix_nano));
            let t = rel(e.span.start_time_unix_nano, base);
            let failed = e
                .span
                .status
                .as_ref()
                .filter(|s| s.code == 2)
                .map(|s| format!("  ✗ {}", s.message))
                .unwrap_or_default();
            match e.source {
                Source::Event => {
                    let a = &e.span.attributes;
                    let kind = string_attr(a, "event.type").unwrap_or("Normal");
                    let comp = string_attr(a, "event.component").unwrap_or("");
                    let msg = string_attr(a, "event.message").unwrap_or("");
                    let _ = writeln!(
                        out,
                        "{body}{t}  event {} {kind} ({comp}): {msg}",
                        e.span.name
                    );
                    if let Some(times) = super::raw::int_attr(a, REPEATED_TIMES) {
                        let until = string_attr(a, REPEATED_UNTIL).unwrap_or_default();
                        let last = humantime::parse_rfc3339_weak(until)
                            .ok()
                            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                            .map_or_else(|| until.to_string(), |d| rel(d.as_nanos() as u64, base));
                        let count = super::raw::int_attr(a, REPEATED_COUNT)
                            .map(|c| format!(" (count {c})"))
                            .unwrap_or_default();
                        let s = if times == 1 { "" } else { "s" };
                        let _ = writeln!(
                            out,
                            "{body}            repeated {times} more time{s} until {last}{count}"
                        );
                    }
                }
                _ => {
                    let code = string_attr(&e.span.attributes, "audit.code")
                        .map(str::to_string)
                        .or_else(|| {
                            super::raw::int_attr(&e.span.attributes, "audit.code")
                                .map(|c| c.to_string())
                        })
                        .unwrap_or_default();
                    let lines = diff_lines(&e.span);
                    let summary = if opts.max_diff_lines == 0 && !lines.is_empty() {
                        format!("  ({} changes)", lines.len())
                    } else {
                        String::new()
                    };
                    let _ = writeln!(out, "{body}{t}  {} {code}{summary}{failed}", e.span.name);
                    if let Some(line) = string_attr(&e.span.attributes, "audit.id")
                        .and_then(|id| opts.components.of(id))
                        .map(request_line)
                    {
                        let _ = writeln!(out, "{body}            {line}");
                    }
                    for l in lines.iter().take(opts.max_diff_lines) {
                        let _ = writeln!(out, "{body}            {l}");
                    }
                    if opts.max_diff_lines > 0 && lines.len() > opts.max_diff_lines {
                        let _ = writeln!(
                            out,
                            "{body}            … {} more changes",
                            lines.len() - opts.max_diff_lines
                        );
                    }
                    if opts.snapshots
                        && let Some(s) = snapshot(&e.span)
                    {
                        let _ = writeln!(out, "{body}            snapshot: {s}");
                    }
                }
            }
        }
        sync_lines(&mut out, None);
    }
    out
}

/// One kubelet sync in a line: `kubelet syncPod 231ms: PullImage 118ms ✗,
/// ExecSync ×12 (3 ✗)  ✗ <why the sync failed>` (its CRI calls by kind).
fn sync_line(spans: &[opentelemetry_proto::tonic::trace::v1::Span]) -> String {
    let ms = |s: &opentelemetry_proto::tonic::trace::v1::Span| {
        (s.end_time_unix_nano.saturating_sub(s.start_time_unix_nano)) as f64 / 1e6
    };
    let failed = |s: &opentelemetry_proto::tonic::trace::v1::Span| {
        s.status.as_ref().is_some_and(|st| st.code == 2)
    };
    let Some(root) = spans.first() else {
        return String::new();
    };
    // The kubelet's calls to the container runtime, by method.
    let mut calls: Vec<(&str, usize, usize, f64)> = Vec::new();
    for s in spans.iter().filter(|s| s.parent_span_id == root.span_id) {
        let Some((_, method)) = s.name.rsplit_once('/') else {
            continue;
        };
        match calls.iter_mut().find(|c| c.0 == method) {
            Some(c) => {
                c.1 += 1;
                c.2 += usize::from(failed(s));
                c.3 += ms(s);
            }
            None => calls.push((method, 1, usize::from(failed(s)), ms(s))),
        }
    }
    let listed: Vec<String> = calls
        .iter()
        .map(|&(method, n, bad, took)| match (n, bad) {
            (1, 0) => format!("{method} {took:.0}ms"),
            (1, _) => format!("{method} {took:.0}ms ✗"),
            (_, 0) => format!("{method} ×{n}"),
            (_, _) => format!("{method} ×{n} ({bad} ✗)"),
        })
        .collect();
    let mut line = format!("kubelet {} {:.0}ms", root.name, ms(root));
    if !listed.is_empty() {
        let _ = write!(line, ": {}", listed.join(", "));
    }
    if let Some(st) = root.status.as_ref().filter(|st| st.code == 2) {
        let why: String = st.message.chars().take(300).collect();
        let _ = write!(line, "  ✗ {why}");
    }
    line
}

/// One traced request in a line: `apiserver 812ms: validating webhook
/// policy.example.com 805ms, etcd Create 2ms` (a failed part marked ✗).
fn request_line(spans: &[opentelemetry_proto::tonic::trace::v1::Span]) -> String {
    let (total, parts) = crate::component_spans::parts(spans);
    let ms = |d: std::time::Duration| format!("{:.0}ms", d.as_secs_f64() * 1e3);
    let listed: Vec<String> = parts
        .iter()
        .map(|p| {
            let failed = if p.failed { " ✗" } else { "" };
            format!("{} {}{failed}", p.label, ms(p.took))
        })
        .collect();
    if listed.is_empty() {
        format!("apiserver {}", ms(total))
    } else {
        format!("apiserver {}: {}", ms(total), listed.join(", "))
    }
}
