//! `kascade explain`: what went wrong in a run, from its audit log (and
//! Events), root cause first. The collector ([`ExplainCollector`], a
//! `ChangeSink`) keeps a compact account of every change and Warning Event;
//! [`findings`] turns it into findings, folds symptoms under their causes
//! and merges duplicates; renderers print the [`Report`] as text,
//! Markdown, JSON or HTML.

pub mod report;

pub use report::*;
