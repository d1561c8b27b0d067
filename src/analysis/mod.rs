//! Analysis of the changes the processor records (`pipeline::ChangeRecord`):
//! cascades (which write caused which, completion, critical path).
//! Depends on `pipeline`, `model`, `span_model` constants and `metrics` only.

pub mod cascade;
