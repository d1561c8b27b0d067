//! The report for people: the terminal (coloured when asked) and Markdown
//! (a CI job summary or a PR comment).

use std::fmt::Write as _;

use console::Style;

use super::message::normalize;
use super::report::{Finding, Report, Severity};

/// Findings shown in full in Markdown; the rest are listed by headline.
const MARKDOWN_FULL: usize = 10;

/// Introduces the background findings (the last ones).
const BACKGROUND_HEADING: &str = "background: the cluster's own problems, there before this run's \
     changes and apart from them (not counted by --fail-on)";

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub(super) fn totals_line(r: &Report) -> String {
    let t = &r.totals;
    if t.error + t.warning + t.info == 0 {
        return match t.background {
            0 => "no problems found".to_string(),
            n => format!(
                "no problems found ({})",
                plural(n, "background finding", "background findings")
            ),
        };
    }
    let mut parts = Vec::new();
    if r.totals.error > 0 {
        parts.push(plural(r.totals.error, "error", "errors"));
    }
    if r.totals.warning > 0 {
        parts.push(plural(r.totals.warning, "warning", "warnings"));
    }
    if r.totals.info > 0 {
        parts.push(plural(r.totals.info, "note", "notes"));
    }
    if r.totals.background > 0 {
        parts.push(format!("{} background", r.totals.background));
    }
    parts.join(", ")
}

fn inputs_line(r: &Report) -> String {
    let i = &r.inputs;
    let mut s = format!(
        "{} read, {} in scope",
        plural(i.lines, "audit line", "audit lines"),
        plural(i.events_in_scope, "change or Event", "changes and Events")
    );
    if !i.from.is_empty() {
        let _ = write!(s, ", {} → {}", i.from, i.to);
    }
    if i.malformed > 0 {
        let _ = write!(
            s,
            "; {} skipped",
            plural(i.malformed, "malformed line", "malformed lines")
        );
    }
    s
}

/// The chain as `deployments ns/web (Failed) › replicasets ns/web-… › …`.
fn chain_text(f: &Finding) -> String {
    f.chain
        .iter()
        .map(|s| {
            if s.status.is_empty() {
                s.object.display.clone()
            } else {
                format!("{} ({})", s.object.display, s.status)
            }
        })
        .collect::<Vec<_>>()
        .join(" › ")
}

fn when_text(f: &Finding) -> String {
    let mut s = if f.first == f.last {
        f.first.clone()
    } else {
        format!("{} → {}", f.first, f.last)
    };
    if f.count > 1 {
        let _ = write!(s, " (×{})", f.count);
    }
    s
}

fn also_text(f: &Finding) -> Option<String> {
    if f.also_total == 0 {
        return None;
    }
    let names: Vec<&str> = f.also.iter().map(|o| o.display.as_str()).collect();
    let more = f.also_total.saturating_sub(f.also.len() as u64);
    Some(if more > 0 {
        format!("{} and {more} more", names.join(", "))
    } else {
        names.join(", ")
    })
}

/// The terminal report; `color` adds ANSI colours.
pub fn render_text(r: &Report, color: bool) -> String {
    let style = |s: Style| s.force_styling(color);
    let bold = style(Style::new().bold());
    let dim = style(Style::new().dim());
    let sev = |s: Severity| match s {
        Severity::Error => style(Style::new().red().bold()).apply_to("ERROR  "),
        Severity::Warning => style(Style::new().yellow().bold()).apply_to("WARN   "),
        Severity::Info => style(Style::new().cyan()).apply_to("NOTE   "),
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {}: {}",
        bold.apply_to("kascade explain"),
        r.scope.description,
        totals_line(r)
    );
    let _ = writeln!(out, "{}", dim.apply_to(inputs_line(r)));
    for m in &r.inputs.malformed_examples {
        let _ = writeln!(out, "{}", dim.apply_to(format!("  skipped {m}")));
    }
    for n in &r.inputs.notes {
        let _ = writeln!(
            out,
            "{}",
            style(Style::new().yellow()).apply_to(format!("note: {n}"))
        );
    }
    let mut background_said = false;
    for f in &r.findings {
        let _ = writeln!(out);
        if f.background && !background_said {
            background_said = true;
            let _ = writeln!(out, "{}", bold.apply_to(BACKGROUND_HEADING));
            let _ = writeln!(out);
        }
        let _ = writeln!(
            out,
            "{}{}  {}",
            sev(f.severity),
            f.id,
            bold.apply_to(&f.headline)
        );
        let pad = "       ";
        let _ = writeln!(out, "{pad}where  {}", chain_text(f));
        let _ = writeln!(out, "{pad}when   {}", when_text(f));
        if let Some(also) = also_text(f) {
            let _ = writeln!(out, "{pad}also   {also}");
        }
        if let Some(t) = &f.trigger {
            let _ = writeln!(out, "{pad}after  {} at {}", t.write, t.time);
            for c in &t.changes {
                let _ = writeln!(out, "{pad}         {}", dim.apply_to(c));
            }
        }
        for e in &f.evidence {
            let _ = writeln!(
                out,
                "{pad}{:<6} {} {}",
                e.kind,
                dim.apply_to(&e.time),
                e.summary
            );
            let repeats_title =
                super::message::same_message(&normalize(&e.detail), &normalize(&f.title));
            if !e.detail.is_empty() && !repeats_title {
                let _ = writeln!(out, "{pad}         {}", e.detail);
            }
        }
        if !f.symptoms.is_empty() {
            let _ = writeln!(out, "{pad}explains");
            for s in &f.symptoms {
                let _ = writeln!(out, "{pad}  - {}: {}", s.object.display, s.title);
            }
        }
    }
    for c in &r.cascades {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{} {} ({}): {}",
            bold.apply_to("cascade"),
            c.root,
            c.findings.join(", "),
            short(&c.outcome, 300)
        );
    }
    out
}

/// At most `max` characters, `…` when cut.
fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let head: String = s.chars().take(max).collect();
        format!("{head}…")
    }
}

fn md_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        if matches!(
            ch,
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '#'
        ) {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

fn md_code(s: &str) -> String {
    format!("`{}`", s.replace('`', "'"))
}

/// Markdown for a CI job summary or a PR comment.
pub fn render_markdown(r: &Report) -> String {
    let mut out = String::new();
    let icon = match r.worst() {
        Some(Severity::Error) => "❌",
        Some(Severity::Warning) => "⚠️",
        Some(Severity::Info) | None => "✅",
    };
    let _ = writeln!(
        out,
        "## {icon} kascade explain: {}\n",
        md_escape(&totals_line(r))
    );
    let _ = writeln!(
        out,
        "Scope: {} · {}\n",
        md_escape(&r.scope.description),
        md_escape(&inputs_line(r))
    );
    for n in &r.inputs.notes {
        let _ = writeln!(out, "> **Note:** {}\n", md_escape(n));
    }
    let foreground = r.findings.iter().filter(|f| !f.background).count();
    for (n, f) in r.findings.iter().enumerate() {
        if f.background {
            if n == foreground {
                let _ = writeln!(out, "#### Background\n");
                let _ = writeln!(out, "{}\n", md_escape(BACKGROUND_HEADING));
            }
            let _ = writeln!(
                out,
                "- **{}** {}",
                f.severity.as_str(),
                md_escape(&f.headline)
            );
            continue;
        }
        if n == MARKDOWN_FULL {
            let _ = writeln!(out, "#### More findings\n");
        }
        if n >= MARKDOWN_FULL {
            let _ = writeln!(
                out,
                "- **{}** {}",
                f.severity.as_str(),
                md_escape(&f.headline)
            );
            continue;
        }
        let _ = writeln!(
            out,
            "### {} {} — {}\n",
            f.id,
            f.severity.as_str().to_uppercase(),
            md_escape(&f.title)
        );
        let _ = writeln!(out, "- **Where:** {}", md_code(&chain_text(f)));
        let _ = writeln!(out, "- **When:** {}", md_escape(&when_text(f)));
        if let Some(also) = also_text(f) {
            let _ = writeln!(out, "- **Also:** {}", md_escape(&also));
        }
        if let Some(t) = &f.trigger {
            let _ = writeln!(
                out,
                "- **After:** {} at {}",
                md_code(&t.write),
                md_escape(&t.time)
            );
        }
        let _ = writeln!(out);
        if let Some(t) = f.trigger.as_ref().filter(|t| !t.changes.is_empty()) {
            let _ = writeln!(out, "```diff");
            for c in &t.changes {
                // `~` lines are shown as changed (diff has no such marker).
                let line = c
                    .strip_prefix("~ ")
                    .map_or(c.clone(), |rest| format!("! {rest}"));
                let _ = writeln!(out, "{}", line.replace("```", "'''"));
            }
            let _ = writeln!(out, "```\n");
        }
        let _ = writeln!(
            out,
            "<details><summary>Evidence ({})</summary>\n",
            f.evidence.len()
        );
        for e in &f.evidence {
            let _ = writeln!(
                out,
                "- {} {}: {}",
                md_escape(&e.time),
                md_escape(&e.kind),
                md_escape(&e.summary)
            );
            if !e.detail.is_empty() {
                let _ = writeln!(out, "  > {}", md_escape(&e.detail));
            }
        }
        let _ = writeln!(out, "\n</details>\n");
        if !f.symptoms.is_empty() {
            let _ = writeln!(out, "Explains:\n");
            for s in &f.symptoms {
                let _ = writeln!(
                    out,
                    "- {}: {}",
                    md_code(&s.object.display),
                    md_escape(&s.title)
                );
            }
            let _ = writeln!(out);
        }
    }
    if !r.cascades.is_empty() {
        let _ = writeln!(out, "### Cascades\n");
        for c in &r.cascades {
            let _ = writeln!(
                out,
                "- {} ({}): {}",
                md_code(&c.root),
                c.findings.join(", "),
                md_escape(&c.outcome)
            );
        }
    }
    out
}
