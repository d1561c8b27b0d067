//! The admission source's reading of an AdmissionReview (what the
//! apiserver sends a validating webhook; any caller reaching the port can
//! send anything), and the audit events made of what it holds: the write
//! as stored (with the review's own object as the watch's version), as
//! unchanged and as refused. Whatever arrives — objects nested 10,000
//! deep, odd operations, names beyond bounds — nothing panics or overflows
//! its stack.
#![no_main]

use kascade::test_support::source::admission::fuzzing::review;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = review(data);
});
