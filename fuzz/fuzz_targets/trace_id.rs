//! Assembled trace ids as the frontend decodes them from any request
//! (GetTraces, a bookmarked URL): 16 bytes, then a width and a hex id.
#![no_main]

use kascade::test_support::frontend::raw::{hex_trace_id, parse_hex_trace_id};
use kascade::test_support::frontend::trace_id::AssembledId;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let id: [u8; 16] = data[..16].try_into().unwrap();
    let width = data
        .get(16..24)
        .map(|b| u64::from_be_bytes(b.try_into().unwrap()))
        .unwrap_or(1800)
        .max(1);
    if let Some(decoded) = AssembledId::decode(&id, width) {
        // Any replica decodes to what was encoded.
        assert_eq!(decoded.encode(), id);
        let starts = decoded.window_starts(width);
        assert!(!starts.is_empty() && starts.len() <= 255);
        assert!(starts.windows(2).all(|w| w[0] <= w[1]));
        assert!(decoded.clip_end >= decoded.first_window);
    }
    if let Ok(text) = std::str::from_utf8(&data[16..])
        && let Some(raw) = parse_hex_trace_id(text)
    {
        assert_eq!(parse_hex_trace_id(&hex_trace_id(&raw)), Some(raw));
    }
});
