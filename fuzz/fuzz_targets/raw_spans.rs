//! Raw spans as the frontend reads them from the raw Jaeger: an answer of
//! `/api/v3/traces/{id}` (OTLP JSON, `decode_v3_trace`) when the input
//! starts with `{`, else a streamed `TracesData` message (protobuf, as
//! `GetTraces`/`FindTraces` send it: `TracesMessage`). The spans then go in
//! a raw store that the frontend searches and assembles from, as for a UI
//! search: the first object span's tags, a display mode and a scope chosen
//! by the input's length; each trace found is read again by id on a
//! replica without cache.
#![no_main]

use std::sync::{Arc, LazyLock};

use kascade::test_support::frontend::assemble::Scope;
use kascade::test_support::frontend::display::Mode;
use kascade::test_support::frontend::proto::TracesMessage;
use kascade::test_support::frontend::raw::{
    MemoryStore, TimeRange, decode_v3_trace, from_nanos, spans_of, string_attr,
};
use kascade::test_support::frontend::{Frontend, FrontendConfig, SEARCH_TAGS, SearchQuery};
use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, TracesData};
use prost::Message as _;

static RT: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
});

fn traces_data(spans: Vec<Span>) -> TracesData {
    TracesData {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fuzz_target!(|data: &[u8]| {
    let spans = if data.first() == Some(&b'{') {
        let Ok(spans) = decode_v3_trace(data) else {
            return;
        };
        // What decodes from JSON reads the same as protobuf.
        // What decodes from JSON reads the same as protobuf (compared
        // encoded: a NaN attribute is not equal to itself).
        let encoded = traces_data(spans.clone()).encode_to_vec();
        let message = TracesMessage::Encoded(encoded.clone().into());
        let decoded = message.into_decoded().unwrap();
        let again = traces_data(spans_of(decoded.resource_spans)).encode_to_vec();
        assert_eq!(again, encoded);
        spans
    } else {
        let message = TracesMessage::Encoded(bytes::Bytes::copy_from_slice(data));
        let Ok(decoded) = message.into_decoded() else {
            return;
        };
        spans_of(decoded.resource_spans)
    };
    let tags: Vec<(String, String)> = spans
        .iter()
        .find(|s| string_attr(&s.attributes, "kascade.span") == Some("object"))
        .map(|s| {
            SEARCH_TAGS
                .iter()
                .filter_map(|k| {
                    string_attr(&s.attributes, k).map(|v| (k.to_string(), v.to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    let store = Arc::new(MemoryStore::new(spans));
    let Some((first, last)) = store.time_span() else {
        return;
    };
    let query = SearchQuery {
        mode: Mode::ALL[data.len() % Mode::ALL.len()],
        scope: Scope::ALL[data.len() / Mode::ALL.len() % Scope::ALL.len()],
        all_siblings: data.len() % 2 == 0,
        tags,
        range: TimeRange::new(from_nanos(first), from_nanos(last)),
        limit: 5,
    };
    RT.block_on(async {
        let frontend = Frontend::new(store.clone(), FrontendConfig::default());
        let Ok(found) = frontend.search(&query).await else {
            return;
        };
        let replica = Frontend::new(store.clone(), FrontendConfig::default());
        for trace in found {
            let _ = replica.get(&trace.id).await;
        }
    });
});
