//! The writes of a cascade left out of its display, as one summary: a
//! wide level's rest ([`siblings`](super::siblings)) or a long run of
//! retries ([`retries`](super::retries)).

/// What a [`Summary`]'s writes have in common.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Folded {
    /// Writes of one wide level (one verb on one resource, one cause).
    Level,
    /// Attempts `from`..=`to` of one refused write (`retries`).
    Retries { from: u32, to: u32 },
}

/// Writes of one wide level, or of one run of retries, that are not shown.
pub(super) struct Summary {
    /// The write that caused them.
    pub parent: usize,
    pub resource: String,
    pub verb: String,
    pub subresource: String,
    /// Change indices, by request received.
    pub members: Vec<usize>,
    /// Writes of the level (attempts of the run) that are shown.
    pub shown: usize,
    pub folded: Folded,
}
