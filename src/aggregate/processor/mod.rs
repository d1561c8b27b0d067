//! Turns one accepted audit event into spans: the object span of its window
//! (once), an audit span with the diff or snapshot, and link spans for every
//! relation not yet recorded in that window, on both sides. A write of a
//! Kubernetes Event instead becomes an event span on the object the Event is
//! about. List-watch versions fill in what the audit log does not show.
//!
//! `chain` composes the stages, each owning its state: `applier` (the last
//! states, redaction, the label index; `state` its pure parts), `reconcile`
//! (the audit↔watch ledger: each write shown once), `cause` (the cause
//! index and change sinks), `events` and `mergelog` (what was seen
//! already), `emit` (the span cache and the exporter's channel). `flow`
//! holds the values passed between them; `watch` and `failed_create` the
//! parts of those paths no stage owns.

mod applier;
mod cause;
mod chain;
mod config;
mod emit;
mod error;
mod events;
mod failed_create;
mod flow;
mod mergelog;
mod parsed;
mod plan;
mod reconcile;
mod state;
#[cfg(test)]
mod test_support;
mod watch;

pub use chain::Processor;
pub use config::{DEFAULT_LEDGER_ENTRIES, ProcessorConfig};
pub use error::ProcessError;
pub use flow::Emission;
pub use parsed::ParsedResponse;
