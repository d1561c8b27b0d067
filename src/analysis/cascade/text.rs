//! Cascades as text for the terminal (`kascade trace --mode cascade`).

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use super::{Cascade, Completion, change_name};
use crate::analysis::tree_text::{self, Prefixes, Row};

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
pub(crate) struct InPart {
    /// `hidden[i]`: change `i` (and what it caused) is not printed; empty
    /// prints every change.
    pub hidden: Vec<bool>,
    /// (the causing change, the line standing for the rest it caused).
    pub rest: Vec<(usize, String)>,
}

/// Each cascade: root write, completion (or what it waits for), then the
/// tree of writes with their time after the root's request, response code,
/// edge and hop latency; `★` marks the critical path.
#[cfg(feature = "test-support")]
pub fn render_text(cascades: &[Cascade]) -> String {
    render_text_in_part(cascades, &[], None)
}

/// [`render_text`], each cascade `n` printed in part as `in_part[n]` says
/// (whole when it has none), titled as the UI titles them for `searched`.
pub(crate) fn render_text_in_part(
    cascades: &[Cascade],
    in_part: &[InPart],
    searched: Option<&crate::model::ObjectRef>,
) -> String {
    let mut out = String::new();
    if cascades.len() > 1 {
        // The one that matters first (`the_one_that_matters`).
        let matters = super::the_one_that_matters(cascades, searched, Cascade::went_wrong);
        // Chosen among the cascades that wrote the searched object: said.
        let of_searched = |k: usize| match searched {
            Some(o) if cascades[k].changes.iter().any(|ch| &ch.object == o) => {
                let name = match o.namespace.as_str() {
                    "" => o.name.clone(),
                    ns => format!("{ns}/{}", o.name),
                };
                format!(" to write {} {name}", o.resource)
            }
            _ => String::new(),
        };
        let _ = match matters {
            Some((k, true)) => writeln!(
                out,
                "{} cascades; the latest{} that went wrong is cascade {}: {}\n",
                cascades.len(),
                of_searched(k),
                k + 1,
                change_name(cascades[k].root())
            ),
            Some((k, false)) => {
                let not_known = cascades
                    .iter()
                    .filter(|c| matches!(c.completion, Completion::NotKnown(_)))
                    .count();
                let wrong = cascades.iter().filter(|c| c.went_wrong()).count();
                if wrong > 0 {
                    writeln!(
                        out,
                        "{} cascades; none{of} went wrong ({wrong} of the others did); the latest{of} is cascade {}\n",
                        cascades.len(),
                        k + 1,
                        of = of_searched(k),
                    )
                } else if not_known == 0 {
                    writeln!(
                        out,
                        "{} cascades, all complete without a failed write; the latest{} is cascade {}\n",
                        cascades.len(),
                        of_searched(k),
                        k + 1
                    )
                } else {
                    writeln!(
                        out,
                        "{} cascades, none went wrong ({not_known} of them with a completion not known: writes logged before their causes); the latest{} is cascade {}\n",
                        cascades.len(),
                        of_searched(k),
                        k + 1
                    )
                }
            }
            None => Ok(()),
        };
    }
    for (n, c) in cascades.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let root = c.root();
        let timer = root
            .timer
            .as_ref()
            .map(|t| format!("  (timer {t}: a clock, not a change, made it)"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "cascade {} of {}: {}  at {}{timer}",
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
            Completion::NotKnown(w) => {
                let _ = writeln!(out, "{}", super::not_known_text(w));
            }
        }
        let part = in_part.get(n);
        let hidden = |i: usize| part.and_then(|p| p.hidden.get(i).copied()) == Some(true);
        let rows = tree_text::rows(&c.walk(), hidden, part.map_or(&[], |p| &p.rest));
        let mut prefixes = Prefixes::default();
        for (pos, (row, _)) in rows.iter().enumerate() {
            let mut line = prefixes.of(&rows, pos);
            let i = match row {
                Row::Node(i) => *i,
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
                match c.attempts[i] {
                    super::Attempt::Retry {
                        attempt, backoff, ..
                    } => {
                        let _ = write!(
                            line,
                            "  [{}, retry {attempt} after a back-off of {}]",
                            k.edge,
                            format_duration(backoff)
                        );
                    }
                    super::Attempt::First => match super::after_sibling_text(c, i) {
                        Some(after) => {
                            let _ = write!(line, "  [{}, {after}]", k.edge);
                        }
                        None => {
                            let _ = write!(line, "  [{}, hop {}]", k.edge, format_duration(k.hop));
                        }
                    },
                }
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
            let _ = writeln!(
                out,
                "★ critical path: the chain of writes whose work ended last (a write tried again ends with its last attempt, the waits between attempts are back-off; a write its writer sent once an earlier one was answered follows that one)"
            );
        }
    }
    if cascades.is_empty() {
        out.push_str("no cascade in range\n");
    }
    out
}
