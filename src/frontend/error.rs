//! Why the frontend could not answer.

use std::sync::Arc;
use std::time::Duration;

use super::raw::RawError;

/// Why a search or a trace could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum FrontendError {
    #[error(transparent)]
    Raw(#[from] RawError),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("assembling the trace took longer than --assembly-timeout ({0:?})")]
    Timeout(Duration),
    /// A search queued longer than `--search-wait` for a place among
    /// `--max-searches`.
    #[error("{0}")]
    Busy(String),
    /// A search's answer stopped at `--max-search-bytes`.
    #[error("{0}")]
    AnswerCut(String),
    /// The failure of an assembly that concurrent requests for the same
    /// trace waited for together.
    #[error(transparent)]
    Shared(Arc<FrontendError>),
}

impl FrontendError {
    /// The error itself, through the [`FrontendError::Shared`] layers of
    /// work that concurrent requests waited for together.
    #[cfg(feature = "test-support")]
    pub fn root(&self) -> &FrontendError {
        match self {
            FrontendError::Shared(inner) => inner.root(),
            other => other,
        }
    }
}
