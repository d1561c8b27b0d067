//! `kascade explain` over the audit logs captured from the real control
//! plane (`e2e/fixtures/`): the first finding names the true cause, the
//! run that succeeded has no error, scopes narrow, bad input is named.

#[path = "../common/mod.rs"]
mod common;

use std::path::PathBuf;

use kascade::app::explain::{ExplainConfig, explain};

use kascade::test_support::analysis::explain::{FindingKind, Report, Scope, Severity};

fn run(files: Vec<PathBuf>, scope: Scope) -> Report {
    let config = ExplainConfig {
        files,
        scope,
        ..ExplainConfig::default()
    };
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(explain(&config))
        .unwrap()
}

fn fixture(name: &str) -> Report {
    run(
        vec![common::fixture_path(name, "audit.log")],
        Scope::default(),
    )
}

use common::kascade;

mod causes;
mod findings;
mod inputs;
mod scope;
