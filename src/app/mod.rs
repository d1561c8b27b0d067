//! The wiring of every subcommand: build the parts from a config and run
//! them. Each config has a `Default` (the command line's defaults) and
//! knows nothing of clap; `crate::cli` maps the flags onto them.

pub mod analyze;
pub mod collect;
pub mod cpid_webhook;
pub mod explain;
pub mod frontend;
mod lines;
mod pipeline;
pub mod replay;
mod span_cache;
pub mod trace;

use std::path::Path;

use anyhow::Context as _;

pub use collect::{CollectApps, CollectConfig, WatchersConfig};
pub use cpid_webhook::CpidWebhookConfig;
pub use frontend::{AssemblyConfig, FrontendServerConfig};
pub use pipeline::{Pipeline, PipelineConfig};
pub use replay::ReplayConfig;
pub use span_cache::SpanCacheConfig;
pub use trace::{TraceConfig, TraceFormat};

use crate::aggregate::rules::RuleSet;

/// The rules shipped in `rules/`, used when no rules directory is given.
pub const BUILTIN_RULES: &[(&str, &str)] = &[
    ("rules/links.yaml", include_str!("../../rules/links.yaml")),
    (
        "rules/networking.yaml",
        include_str!("../../rules/networking.yaml"),
    ),
    ("rules/pods.yaml", include_str!("../../rules/pods.yaml")),
    (
        "rules/propagation.yaml",
        include_str!("../../rules/propagation.yaml"),
    ),
    ("rules/policy.yaml", include_str!("../../rules/policy.yaml")),
    (
        "rules/storage.yaml",
        include_str!("../../rules/storage.yaml"),
    ),
    ("rules/timers.yaml", include_str!("../../rules/timers.yaml")),
];

/// The rules of `dir`, or the built-in ones; every problem named.
pub fn load_rules(dir: Option<&Path>) -> anyhow::Result<RuleSet> {
    let result = match dir {
        Some(d) => RuleSet::load_dir(d),
        None => {
            let mut set = RuleSet::default();
            let mut errors = Vec::new();
            for (name, text) in BUILTIN_RULES {
                if let Err(mut e) = set.add_yaml(name, text) {
                    errors.append(&mut e);
                }
            }
            if errors.is_empty() {
                Ok(set)
            } else {
                Err(errors)
            }
        }
    };
    result.map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        anyhow::anyhow!("invalid rules:\n  {}", lines.join("\n  "))
    })
}

/// `kascade rules check DIR`.
pub fn run_rules_check(dir: &Path) -> anyhow::Result<()> {
    let set = load_rules(Some(dir))?;
    crate::terminal::print(&format!(
        "{}: {} rules, {} propagations, {} timers OK\n",
        dir.display(),
        set.len(),
        set.propagations().len(),
        set.timers().len()
    ))
    .context("writing the rules check")?;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
}
