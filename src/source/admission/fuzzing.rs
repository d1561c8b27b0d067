//! The admission source's reading of a review without a server, for the
//! fuzz target (fuzz/fuzz_targets/admission_reviews.rs); built only by
//! `cargo fuzz` (`--cfg fuzzing`).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::event;
use super::ledger::AdmittedWrites;
use super::review::{self, Review};

/// Reads `data` as a review; a write is held (its resource watched), then
/// made into each audit event it can become: stored (the review's own
/// object as the watch's version), unchanged, refused.
pub fn review(data: &[u8]) {
    let Ok(body) = crate::json::utf8(data) else {
        return;
    };
    let cluster: Arc<str> = "fuzz".into();
    let Ok((uid, Review::Write(a))) = review::decode(body, &cluster, SystemTime::now()) else {
        return;
    };
    let _ = review::allowed(&uid);
    if let Some(state) = a.new.as_ref().or(a.old.as_ref()) {
        let _ = event::persisted(&a, state, SystemTime::now());
        let _ = event::unchanged(&a, state);
    }
    for refusal in [
        event::Refusal::NotPersisted,
        event::Refusal::Conflict,
        event::Refusal::Gone,
    ] {
        let _ = event::not_persisted(&a, refusal, Duration::from_secs(30));
    }
    let writes = AdmittedWrites::new(Duration::from_secs(30), 4, 1 << 20);
    writes.watching(&a.object.cluster, &a.object.group, &a.object.resource, true);
    let _ = writes.admit(a, Instant::now());
    let _ = writes.expired(Instant::now(), true);
}
