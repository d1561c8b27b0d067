//! Analysis of the changes the processor records (`pipeline::ChangeRecord`):
//! cascades (which write caused which, completion, critical path:
//! `cascade`), propagation statistics (`stats`), their report and plots
//! (`report`, `plot`), the change log (`changelog`) and the live propagation
//! metric (`live`). Depends on `pipeline`, `model`, `span_model` constants
//! and `metrics` only.

pub mod cascade;
pub mod changelog;
pub mod live;
pub mod plot;
pub mod report;
pub mod stats;
