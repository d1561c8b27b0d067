//! What a search asks (tags, time range, mode, scope) and what it found,
//! handed over one assembled trace at a time.

use std::sync::Arc;

use tracing::Instrument as _;

use super::assemble::Scope;
use super::display::Mode;
use super::raw::{RawStore, TimeRange, TraceIdBytes};
use super::{AssembledTrace, Frontend, FrontendError};

/// Search tags users can type (Kelemetry-compatible), plus `scope`.
pub const SEARCH_TAGS: [&str; 5] = ["cluster", "group", "resource", "namespace", "name"];
/// Searching by change (`cpid=<id>`) instead of by object: one trace with
/// every write of that change and of the changes merged from it.
pub const CPID_TAG: &str = "cpid";

/// A search tag's value within Kubernetes' bounds (names and resources 253
/// bytes, namespaces 63; cluster names as the collector accepts them).
pub(crate) fn check_tag(key: &str, value: &str) -> Result<(), String> {
    if key == "cluster" && !value.is_empty() {
        return crate::source::validate_cluster_name(value)
            .map_err(|e| format!("tag \"cluster\": {e}"));
    }
    crate::bounds::check_len(
        &format!("tag {key:?}"),
        value,
        crate::bounds::max_name_bytes(key),
    )
}

/// A search from the UI (or the redirect endpoint).
#[derive(Clone, Debug)]
pub struct SearchQuery {
    pub mode: Mode,
    pub scope: Scope,
    /// Every object of a wide level shown instead of a summary (the tag
    /// `siblings=all`; [`FrontendConfig::max_siblings`](super::FrontendConfig::max_siblings)).
    pub all_siblings: bool,
    /// `(key, value)` over [`SEARCH_TAGS`].
    pub tags: Vec<(String, String)>,
    pub range: TimeRange,
    /// Objects (= traces) returned at most.
    pub limit: usize,
}

/// What a search found, assembled one trace at a time by [`Found::next`]
/// (from [`Frontend::find`]).
#[derive(Debug)]
pub struct Found {
    /// A search by change: its trace, assembled by the search.
    pub(super) change: Option<Arc<AssembledTrace>>,
    /// The found objects' trace ids, in order, not assembled yet.
    pub(super) ids: std::vec::IntoIter<TraceIdBytes>,
    pub(super) limit: usize,
    pub(super) yielded: usize,
    /// The search's self-tracing span, the parent of each `get`.
    pub(super) span: tracing::Span,
}

impl Found {
    /// Traces by id (GetTraces), in order, unknown ones skipped, each
    /// assembled under `span`.
    pub fn of_ids(ids: Vec<TraceIdBytes>, span: tracing::Span) -> Self {
        Self {
            change: None,
            ids: ids.into_iter(),
            limit: usize::MAX,
            yielded: 0,
            span,
        }
    }

    /// The next trace, assembled now (or taken from the cache); `None` once
    /// the query's limit is reached or no object is left. Objects with
    /// nothing recorded in range are skipped.
    pub async fn next<S: RawStore>(
        &mut self,
        frontend: &Frontend<S>,
    ) -> Result<Option<Arc<AssembledTrace>>, FrontendError> {
        if let Some(t) = self.change.take() {
            self.yielded += 1;
            return Ok(Some(t));
        }
        while self.yielded < self.limit {
            let Some(id) = self.ids.next() else { break };
            if let Some(t) = frontend.get(&id).instrument(self.span.clone()).await? {
                self.yielded += 1;
                self.span.record("found", self.yielded);
                return Ok(Some(t));
            }
        }
        Ok(None)
    }
}
