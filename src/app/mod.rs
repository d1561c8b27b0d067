//! The wiring of every subcommand: build the parts from a config and run
//! them. Each config has a `Default` (the command line's defaults) and
//! knows nothing of clap; `crate::cli` maps the flags onto them.

pub mod analyze;
pub mod collect;
pub mod cpid_webhook;
pub mod doctor;
pub mod explain;
pub mod frontend;
#[cfg(not(fuzzing))]
mod lines;
#[cfg(fuzzing)]
pub mod lines;
mod pipeline;
pub mod replay;
pub mod rules;
mod span_cache;
pub mod trace;

pub use collect::{CollectApps, CollectConfig, WatchersConfig};
pub use cpid_webhook::CpidWebhookConfig;
pub use frontend::{AssemblyConfig, FrontendServerConfig};
// The offline commands' reader of audit logs (`.gz` too), for the fuzz
// targets (fuzz/).
pub use lines::{Lines, LinesState};
pub use pipeline::{Pipeline, PipelineConfig};
pub use replay::ReplayConfig;
pub use rules::{BUILTIN_RULES, RuleSources, run_rules_check, run_rules_list};
pub use span_cache::SpanCacheConfig;
pub use trace::{TraceConfig, TraceFormat};

// The vocabulary of the configs above: what their fields and builders take.
pub use crate::aggregate::LookAhead;
pub use crate::analysis::explain::Scope as ExplainScope;
pub use crate::analysis::foreground::ForegroundScope;
pub use crate::export::OtlpProtocol;
pub use crate::export::OutputSpec;
pub use crate::export::config::{Compression, ExportSettings};
pub use crate::frontend::assemble::Scope as TraceScope;
pub use crate::frontend::display::Mode;

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
