//! Why a unit of work could not be processed.

use super::super::last_states::StateError;

/// Why a unit of work could not be processed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("span exporter has stopped")]
    ExportStopped,
    #[error("span cache: {0}")]
    SpanCache(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    State(#[from] StateError),
}

impl ProcessError {
    pub(super) fn span_cache(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        ProcessError::SpanCache(e.into())
    }
}
