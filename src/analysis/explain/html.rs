//! Placeholder until the HTML report lands (not committed).
use super::report::Report;
pub fn render_html(report: &Report) -> String {
    report.to_json()
}
