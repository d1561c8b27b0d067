//! The webhook's body paths after authentication: an audit batch
//! (`POST /audit`) and an OTLP logs export (`POST /v1/logs` as protobuf or
//! JSON, `LogsService/Export` over gRPC), each plain or gzipped. The first
//! byte picks the path and the encoding; the rest is the body. Whatever it
//! holds — a gzip bomb, a cut stream, a wrong gRPC prefix, deep nesting —
//! the answer is an error or lines, never a panic; nothing inflates past the
//! body bound; every message sent back is bounded.
#![no_main]

use kascade::test_support::messages::MAX_MESSAGE_BYTES;
use kascade::test_support::source::webhook::fuzzing::{audit_batch, otlp_logs};
use libfuzzer_sys::fuzz_target;

/// `--max-body-bytes`, small: a bomb reaches it at once.
const LIMIT: usize = 64 << 10;

fn bounded(msg: &str) {
    let head: String = msg.chars().take(200).collect();
    assert!(msg.len() <= MAX_MESSAGE_BYTES + 64, "{} bytes: {head}", msg.len());
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let gzip = pick & 1 == 1;
    match (pick >> 1) % 4 {
        0 => match audit_batch(LIMIT, gzip, body) {
            Ok(batch) => batch.errors.iter().for_each(|e| bounded(e)),
            Err((status, msg)) => {
                assert!((400..500).contains(&status), "{status}: {msg}");
                bounded(&msg);
            }
        },
        path => match otlp_logs(LIMIT, path == 3, path == 2, gzip, body) {
            Ok((lines, unreadable)) => {
                // The records' text and a line break each: never more than
                // twice what came in or was inflated.
                assert!(lines.len() <= 2 * LIMIT.max(body.len()), "{} bytes of lines", lines.len());
                unreadable.iter().for_each(|e| bounded(e));
            }
            Err((status, msg)) => {
                assert!((400..500).contains(&status), "{status}: {msg}");
                bounded(&msg);
            }
        },
    }
});
