//! Secrets planted in a log never reach an explain report.

use super::*;

#[test]
fn planted_secrets_never_reach_an_explain_report() {
    use kascade::app::explain::{ExplainConfig, explain};
    use kascade::test_support::analysis::explain::{
        Scope, html::render_html, render_markdown, render_text,
    };
    let mut p = Planter::default();
    let mut all = String::new();
    for scenario in SCENARIOS {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        std::fs::write(
            &path,
            planted_audit_lines(scenario, &mut p).join("\n") + "\n",
        )
        .unwrap();
        let config = ExplainConfig {
            files: vec![path],
            scope: Scope::default(),
            ..ExplainConfig::default()
        };
        let r = tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(explain(&config))
            .unwrap();
        let text = [
            r.to_json(),
            render_markdown(&r),
            render_text(&r, false),
            render_html(&r),
        ]
        .concat();
        for needle in [SECRET, SECRET_B64] {
            if let Some(at) = text.find(needle) {
                panic!(
                    "{scenario}: a planted secret leaked: {}",
                    context(&text, at)
                );
            }
        }
        all.push_str(&text);
    }
    assert!(p.secrets > 0);
    // Not vacuous: what the user's writes changed, planted values among it,
    // is in the reports.
    assert!(all.contains(VISIBLE), "no planted value reached a report");
}
