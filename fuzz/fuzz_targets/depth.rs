//! Nesting bounds (`json::depth`): whatever the input, capping never
//! recurses, what it leaves nests no deeper than the bound, text already
//! within it is left as it is, and valid JSON stays valid (sonic-rs then
//! parses it without running out of stack).
#![no_main]

use kascade::test_support::json::depth::{cap, exceeds};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Small bounds reach their edge with small inputs.
    for limit in [1, 3, 8] {
        let capped = cap(text, limit, 0);
        assert!(!exceeds(capped.text.as_bytes(), limit), "{text:?} at {limit}");
        if !exceeds(text.as_bytes(), limit) {
            assert_eq!(capped.markers, 0);
            assert_eq!(capped.text, text);
        }
        if serde_json::from_str::<serde_json::Value>(text).is_ok() {
            assert!(sonic_rs::from_str::<sonic_rs::Value>(&capped.text).is_ok(), "{text:?}");
        }
    }
});
