//! The UI's searches as the frontend's Jaeger storage service reads them:
//! a `FindTraces`/`FindTraceIDs` request (protobuf) to `parse_query`, at
//! every default scope. What it accepts is a query the frontend can run:
//! known tags only, a time range in order, a positive limit.
#![no_main]

use kascade::test_support::frontend::assemble::Scope;
use kascade::test_support::frontend::proto::FindTracesRequest;
use kascade::test_support::frontend::service::parse_query;
use kascade::test_support::frontend::{CPID_TAG, SEARCH_TAGS};
use libfuzzer_sys::fuzz_target;
use prost::Message as _;

fuzz_target!(|data: &[u8]| {
    let Ok(request) = FindTracesRequest::decode(data) else {
        return;
    };
    for scope in Scope::ALL {
        let Ok(q) = parse_query(request.query.clone(), scope) else {
            continue;
        };
        assert!(q.range.start <= q.range.end, "{q:?}");
        assert!(q.limit > 0);
        for (k, _) in &q.tags {
            assert!(SEARCH_TAGS.contains(&k.as_str()) || k == CPID_TAG, "{k}");
        }
    }
});
