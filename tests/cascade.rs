//! Cascades over the fixtures captured from the real control plane: the
//! changes the real processor records, assembled into trees with their
//! completion (`analysis::cascade`), and `kascade trace --mode cascade`.

mod common;

use std::sync::{Arc, Mutex};

use kascade::aggregate::ProcessorConfig;
use kascade::aggregate::redact::Redactor;
use kascade::analysis::cascade::{self, Cascade};
use kascade::app::load_rules;
use kascade::offline::changes_from_audit_lines;
use kascade::pipeline::{ChangeRecord, ChangeSink};
use kascade::source::audit::AuditFilter;

#[derive(Default)]
struct Collect(Mutex<Vec<ChangeRecord>>);

impl ChangeSink for Collect {
    fn record(&self, change: ChangeRecord) {
        self.0.lock().unwrap().push(change);
    }
}

async fn cascades(scenario: &str) -> Vec<Cascade> {
    let sink = Arc::new(Collect::default());
    let errors = changes_from_audit_lines(
        common::audit_lines(scenario),
        "fixture",
        Arc::new(load_rules(None).unwrap()),
        &AuditFilter::default(),
        ProcessorConfig::default(),
        Redactor::new(None),
        sink.clone(),
    )
    .await;
    assert!(errors.is_empty(), "{errors:?}");
    let changes = std::mem::take(&mut *sink.0.lock().unwrap());
    cascade::build(changes)
}

#[tokio::test]
async fn print_all() {
    for s in ["deployment", "service", "job", "cronjob", "config", "quota", "rollout-stuck", "statefulset", "unschedulable"] {
        let c = cascades(s).await;
        println!("===== {s}\n{}", cascade::render_text(&c));
    }
}
