//! `POST /cpid/mergelogs` bodies as the collector decodes them
//! (`decode_mergelogs`), then the spans each accepted mergelog becomes
//! (`merge_spans`); and the same bytes as a CPID and as a `traceparent`
//! (the forms a CPID arrives in).
#![no_main]

use kascade::test_support::source::mergelog::{MAX_MERGELOGS_PER_REQUEST, MAX_SOURCES, decode_mergelogs};
use kascade::test_support::span_model::merge_spans;
use kascade_cpid::Cpid;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(mergelogs) = decode_mergelogs(data) {
        assert!(mergelogs.len() <= MAX_MERGELOGS_PER_REQUEST);
        for m in &mergelogs {
            // What was accepted holds what the check promises.
            assert!(
                !m.sources.is_empty() && m.sources.len() <= MAX_SOURCES,
                "{m:?}"
            );
            assert!(!m.sources.contains(&m.cpid), "{m:?}");
            let spans = merge_spans("fuzz", m);
            assert_eq!(spans.len(), 1 + m.sources.len());
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        for cpid in [Cpid::parse(text), Cpid::from_traceparent(text)]
            .into_iter()
            .flatten()
        {
            assert_eq!(Cpid::parse(&cpid.to_string()), Ok(cpid));
        }
    }
});
