//! The report as one self-contained HTML page (inline CSS and a few lines
//! of JS, no network): findings (collapsible, the first open, each
//! deep-linkable as `#F<n>`), the cascades as timelines, the objects as a
//! tree. Rendered with minijinja from `report.html.j2`, values escaped.

use std::collections::BTreeMap;

use minijinja::{AutoEscape, Environment, context};

use super::report::Report;

const TEMPLATE: &str = include_str!("report.html.j2");

/// The page for `report`.
pub fn render_html(report: &Report) -> String {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    let page = env
        .add_template("report.html", TEMPLATE)
        .and_then(|()| env.get_template("report.html"));
    // Finding id → the number of the cascade timeline it happened in.
    let timeline_of: BTreeMap<&str, usize> = report
        .cascades
        .iter()
        .enumerate()
        .flat_map(|(i, c)| c.findings.iter().map(move |f| (f.as_str(), i + 1)))
        .collect();
    let rendered = page.and_then(|t| {
        t.render(context! {
            report => minijinja::value::Serde(report),
            totals_line => super::render::totals_line(report),
            timeline_of => timeline_of,
        })
    });
    rendered.unwrap_or_else(|e| {
        // The template is built in and tested: this is a bug, shown plainly.
        let msg = e.to_string().replace('&', "&amp;").replace('<', "&lt;");
        format!("<!DOCTYPE html><meta charset=\"utf-8\"><title>kascade explain</title><pre>cannot render the report: {msg}</pre>")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::explain::{
        ChainStep, Evidence, Finding, FindingKind, Inputs, ObjectName, ScopeSummary, Severity,
        Totals, TreeNode, Trigger,
    };

    fn name(resource: &str, n: &str) -> ObjectName {
        ObjectName {
            cluster: "c".into(),
            group: String::new(),
            resource: resource.into(),
            namespace: "ns".into(),
            name: n.into(),
            display: format!("{resource} ns/{n}"),
        }
    }

    fn report(findings: Vec<Finding>) -> Report {
        Report {
            schema_version: 1,
            generator: "kascade test".into(),
            scope: ScopeSummary {
                description: "everything".into(),
            },
            inputs: Inputs::default(),
            totals: Totals::default(),
            tree: vec![TreeNode {
                object: name("pods", "p"),
                via: String::new(),
                status: "Failed".into(),
                status_message: String::new(),
                findings: findings.iter().map(|f| f.id.clone()).collect(),
                children: Vec::new(),
            }],
            findings,
            cascades: Vec::new(),
            tree_omitted: 0,
        }
    }

    fn finding(id: &str, title: &str) -> Finding {
        Finding {
            id: id.into(),
            severity: Severity::Error,
            kind: FindingKind::WarningEvent,
            title: title.into(),
            headline: title.into(),
            object: name("pods", "p"),
            chain: vec![ChainStep {
                object: name("pods", "p"),
                via: String::new(),
                status: "Failed".into(),
                status_message: String::new(),
            }],
            first: "2026-11-23T00:00:00Z".into(),
            last: "2026-11-23T00:00:01Z".into(),
            count: 2,
            also: Vec::new(),
            also_total: 0,
            evidence: vec![Evidence {
                kind: "event".into(),
                time: "2026-11-23T00:00:00Z".into(),
                summary: "Warning X".into(),
                detail: "<b>detail</b>".into(),
            }],
            trigger: Some(Trigger {
                write: "u patch deployments ns/web".into(),
                time: "2026-11-23T00:00:00Z".into(),
                changes: vec!["+ spec.a = \"b\"".into()],
            }),
            symptoms: Vec::new(),
            background: false,
        }
    }

    #[test]
    fn values_are_escaped_and_findings_are_anchored() {
        let page = render_html(&report(vec![
            finding("F1", "<script>alert(1)</script>"),
            finding("F2", "second"),
        ]));
        assert!(!page.contains("<script>alert(1)"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;"));
        assert!(page.contains("&lt;b&gt;detail&lt;"));
        assert!(page.contains(r#"<details class="finding" id="F1" open>"#));
        assert!(page.contains(r#"<details class="finding" id="F2">"#));
        assert!(page.contains(r##"href="#F2""##));
        assert!(
            page.contains(r#"<span class="add">+ spec.a = &quot;b&quot;</span>"#),
            "{page}"
        );
        assert!(!page.contains("cannot render"));
        // Nothing is loaded from elsewhere.
        assert!(!page.contains("src=\"http") && !page.contains("href=\"http"));
    }

    #[test]
    fn a_report_without_findings_says_so() {
        let page = render_html(&report(Vec::new()));
        assert!(page.contains("No problems found."));
        assert!(page.contains("<title>kascade explain: no problems found</title>"));
    }
}
