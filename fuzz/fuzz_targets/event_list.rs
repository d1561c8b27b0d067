//! The audit webhook's body decoder (`decode_event_list`) and what the intake
//! does next with each decoded event: filter, resolve the object.
#![no_main]

use kascade::test_support::messages::MAX_MESSAGE_BYTES;
use kascade::test_support::source::audit::{AuditFilter, decode_event_list};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let filter = AuditFilter::default();
    match decode_event_list(data) {
        Ok(batch) => {
            for ev in &batch.events {
                let _ = filter.check(ev);
                let _ = ev.object("fuzz");
                let _ = (ev.code(), ev.subresource());
            }
            for e in &batch.errors {
                // Messages go back in the 400 answer: never the whole input.
                assert!(e.len() <= MAX_MESSAGE_BYTES + 64, "{} bytes", e.len());
            }
        }
        Err(e) => assert!(e.len() <= MAX_MESSAGE_BYTES + 64, "{} bytes", e.len()),
    }
});
