//! The list-watch's decoding: a watch stream's line or a list page, as
//! kube's client decodes it into kascade's `RawObject` (kept as text, only
//! `metadata`'s names read), and each object as the watchers then read it
//! (its reference, its state bounded in depth, an Event). Whatever the
//! apiserver sends — objects nested 10,000 deep, odd metadata — nothing
//! panics or overflows its stack.
#![no_main]

use kascade::test_support::source::watch::fuzzing::decode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode(data);
});
