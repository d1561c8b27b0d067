//! kascade: the Kubernetes control plane as distributed traces.
//!
//! Data flow: `source` (audit webhook, audit files, list-watch) → `aggregate`
//! (windows, span cache, diffs, relations, rules) → `export` (OTLP,
//! OTLP/JSON); what passes between them is defined in `pipeline`.

pub mod aggregate;
pub mod analysis;
pub mod app;
pub mod bounds;
pub mod cli;
pub mod client_tls;
pub mod coordination;
pub mod cpid_webhook;
pub mod export;
pub mod frontend;
pub mod metrics;
pub mod model;
pub mod offline;
pub mod pipeline;
pub mod self_trace;
pub mod source;
pub mod span_model;
pub mod telemetry;

// The pipeline allocates many small strings per event; mimalloc measured
// faster than the system allocator for it (see README, Benchmarks).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
