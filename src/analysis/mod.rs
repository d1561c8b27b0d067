//! Analysis of the changes the processor records (`flow::ChangeRecord`):
//! cascades (which write caused which, completion, critical path:
//! `cascade`), propagation statistics (`stats`), their report and plots
//! (`report`, `plot`; `foreground`: what they count), the change log
//! (`changelog`) and the live propagation
//! metric (`live`), whether several logs' apiserver clocks agree
//! (`clocks`), `explain` (findings: what went wrong, and why, as
//! `crate::judgement` judges it), and `tree_text` (how a tree is drawn in
//! the terminal, for both of its trees). Depends on `pipeline`, `model`,
//! `judgement`, `span_model` constants and `metrics`.

pub(crate) mod cascade;
pub(crate) mod changelog;
pub(crate) mod clocks;
pub(crate) mod explain;
pub(crate) mod foreground;
pub(crate) mod live;
pub(crate) mod plot;
pub(crate) mod report;
pub(crate) mod stats;
pub(crate) mod tree_text;
