//! Cascades as text for the terminal (`kascade trace --mode cascade`).

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use super::{Cascade, Completion, change_name};

/// `4.125ms` below a second, `1.204s` from a second on.
pub fn format_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.3}ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

fn offset(t: SystemTime, base: SystemTime) -> String {
    format!(
        "+{:.3}s",
        t.duration_since(base).unwrap_or_default().as_secs_f64()
    )
}

/// The writes of one cascade its text leaves out (a wide level's rest),
/// and the line standing for each level, said last under the write that
/// caused it.
#[derive(Debug, Clone, Default)]
pub struct InPart {
    /// `hidden[i]`: change `i` (and what it caused) is not printed; empty
    /// prints every change.
    pub hidden: Vec<bool>,
    /// (the causing change, the line standing for the rest it caused).
    pub rest: Vec<(usize, String)>,
}

/// Each cascade: root write, completion (or what it waits for), then the
/// tree of writes with their time after the root's request, response code,
/// edge and hop latency; `★` marks the critical path.
pub fn render_text(cascades: &[Cascade]) -> String {
    render_text_in_part(cascades, &[])
}

/// [`render_text`], each cascade `n` printed in part as `in_part[n]` says
/// (whole when it has none).
pub fn render_text_in_part(cascades: &[Cascade], in_part: &[InPart]) -> String {
    let mut out = String::new();
    for (n, c) in cascades.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let root = c.root();
        let _ = writeln!(
            out,
            "cascade {} of {}: {}  at {}",
            n + 1,
            cascades.len(),
            change_name(root),
            rfc3339(root.received)
        );
        if let Some(cause) = &c.missing_cause {
            let _ = writeln!(
                out,
                "partial: caused by {} ({}), which is not in range",
                cause.name, cause.edge
            );
        }
        match &c.completion {
            Completion::Complete { at } => {
                let _ = writeln!(
                    out,
                    "completed after {} (at {}), {} writes",
                    format_duration(at.duration_since(root.received).unwrap_or_default()),
                    rfc3339(*at),
                    c.changes.len()
                );
            }
            Completion::Waiting(w) => {
                let _ = writeln!(
                    out,
                    "not complete: waiting for {}",
                    w.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                );
            }
        }
        let rows = rows(c, in_part.get(n));
        let mut last_at_depth: Vec<bool> = Vec::new();
        for (pos, (row, depth)) in rows.iter().enumerate() {
            let depth = *depth;
            let is_last = !rows[pos + 1..]
                .iter()
                .take_while(|(_, d)| *d >= depth)
                .any(|(_, d)| *d == depth);
            last_at_depth.truncate(depth);
            let mut line = String::new();
            for &last in last_at_depth.iter().skip(1) {
                line.push_str(if last { "   " } else { "│  " });
            }
            if depth > 0 {
                line.push_str(if is_last { "└─ " } else { "├─ " });
            }
            last_at_depth.push(is_last);
            let i = match row {
                Row::Change(i) => *i,
                Row::Rest(rest) => {
                    let _ = writeln!(out, "{line}{rest}");
                    continue;
                }
            };
            let ch = &c.changes[i];
            let _ = write!(
                line,
                "{}  {} {}",
                offset(ch.received, root.received),
                change_name(ch),
                ch.code
            );
            if i != 0
                && let Some(k) = &ch.cause
            {
                let _ = write!(line, "  [{}, hop {}]", k.edge, format_duration(k.hop));
            }
            if let Some(r) = &ch.readiness {
                let _ = write!(line, "  → {}", r.status);
                if !r.message.is_empty() {
                    let _ = write!(line, ": {}", r.message);
                }
            } else if ch.deleted {
                line.push_str("  → removed");
            }
            if let Some(id) = &ch.cpid {
                // The CPID's first group is enough to tell changes apart here.
                let text = id.cpid.to_string();
                let _ = write!(line, "  cpid {} ({})", &text[..8], id.origin.as_str());
            }
            if c.is_critical(i) && c.changes.len() > 1 {
                line.push_str("  ★");
            }
            let _ = writeln!(out, "{line}");
        }
        if c.changes.len() > 1 {
            let _ = writeln!(out, "★ critical path: the chain of writes that ended last");
        }
    }
    if cascades.is_empty() {
        out.push_str("no cascade in range\n");
    }
    out
}

/// One line of a cascade's tree: a write, or the rest of a wide level.
enum Row<'a> {
    Change(usize),
    Rest(&'a str),
}

/// The tree's lines in order with their depths: the walk without the
/// changes `in_part` leaves out, each level's rest said last under its
/// cause.
fn rows<'a>(c: &Cascade, in_part: Option<&'a InPart>) -> Vec<(Row<'a>, usize)> {
    let hidden = |i: usize| in_part.and_then(|p| p.hidden.get(i).copied()) == Some(true);
    let walk = c.walk();
    let mut rows = Vec::with_capacity(walk.len());
    // (depth of the cause, the rest's line), in the order they close.
    let mut open: Vec<(usize, &'a str)> = Vec::new();
    let close = |open: &mut Vec<(usize, &'a str)>, rows: &mut Vec<(Row<'a>, usize)>, depth| {
        while open.last().is_some_and(|(d, _)| *d >= depth) {
            let (d, line) = open.pop().expect("checked above");
            rows.push((Row::Rest(line), d + 1));
        }
    };
    for &(i, depth) in &walk {
        if hidden(i) {
            continue;
        }
        close(&mut open, &mut rows, depth);
        rows.push((Row::Change(i), depth));
        for (_, line) in in_part
            .iter()
            .flat_map(|p| p.rest.iter())
            .filter(|(cause, _)| *cause == i)
            .rev()
        {
            open.push((depth, line.as_str()));
        }
    }
    close(&mut open, &mut rows, 0);
    rows
}
