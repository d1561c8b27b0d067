//! `kascade doctor`'s output: text for a newcomer (every warning and
//! failure with what to do), or one JSON document (`docs/doctor.md`).

use serde::Serialize;

use super::checks::{Check, Status};

/// The schema of the JSON report.
pub(crate) const REPORT_SCHEMA: &str = "kascade.doctor/v1";

#[derive(Serialize)]
struct JsonReport<'a> {
    schema: &'static str,
    cluster: &'a str,
    ok: bool,
    checks: &'a [Check],
}

pub(crate) fn json(cluster: &str, checks: &[Check]) -> String {
    let report = JsonReport {
        schema: REPORT_SCHEMA,
        cluster,
        ok: !super::checks::broken(checks),
        checks,
    };
    serde_json::to_string_pretty(&report).expect("a report serializes") + "\n"
}

pub(crate) fn text(cluster: &str, admin_url: &str, checks: &[Check]) -> String {
    let mut out = format!("kascade doctor: cluster {cluster}, collector {admin_url}\n\n");
    for c in checks {
        out.push_str(&format!(
            "{:<4}  {:<17} {}\n",
            c.status.label(),
            c.id,
            c.summary
        ));
        for d in &c.details {
            out.push_str(&format!("{:<24}{d}\n", ""));
        }
        if let (Some(fix), Status::Warn | Status::Fail) = (&c.fix, c.status) {
            out.push_str(&format!("{:<18}fix:  {fix}\n", ""));
        }
    }
    let fails = checks.iter().filter(|c| c.status == Status::Fail).count();
    let warns = checks.iter().filter(|c| c.status == Status::Warn).count();
    out.push('\n');
    out.push_str(&match (fails, warns) {
        (0, 0) => "All OK.\n".to_string(),
        (0, w) => format!("OK, with {w} warning{}.\n", if w == 1 { "" } else { "s" }),
        (f, _) => format!(
            "{f} problem{} found (see FAIL above).\n",
            if f == 1 { "" } else { "s" }
        ),
    });
    out
}
