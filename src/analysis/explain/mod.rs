//! `kascade explain`: what went wrong in a run, from its audit log (and
//! Events), root cause first. The collector ([`ExplainCollector`], a
//! `ChangeSink` that also takes Events) keeps a compact account of every
//! change; [`report`] turns it into findings (`findings`), merges
//! duplicates and folds symptoms under their causes (`rank`), and adds the
//! chains, triggers, cascade timelines and object tree (`build`). The
//! [`Report`] prints as text or Markdown (`render`), JSON, or HTML.

mod build;
mod changes;
mod collect;
mod findings;
pub mod html;
mod message;
mod rank;
mod render;
pub mod report;
mod scope;
mod sink;

pub use build::report;
pub use changes::change_lines;
pub use render::{render_markdown, render_text};
pub use report::*;
pub use scope::{ObjectFilter, Scope, parse_selector};
pub use sink::ExplainCollector;
