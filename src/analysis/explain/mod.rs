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
pub(crate) mod html;
mod message;
mod rank;
mod render;
pub(crate) mod report;
mod scope;
mod sink;

pub(crate) use build::report;
pub(crate) use changes::change_lines;
pub use render::{render_markdown, render_text};
pub use report::*;
pub(crate) use scope::ObjectFilter;
pub use scope::Scope;
pub use scope::parse_selector;
pub use sink::ExplainCollector;
