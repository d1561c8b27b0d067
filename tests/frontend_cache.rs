//! The frontend's trace cache is bounded in bytes (`--cache-bytes`), so what
//! it counts for a trace must be what the trace holds. Measured here with
//! jemalloc's own count of allocated bytes (kascade's allocator), around
//! assembling and streaming the real deployment fixture's trace, with
//! hundreds of Pods copied in, in every display mode. Alone in its test
//! binary: the count is the whole process's.

mod common;

use std::sync::Arc;

use kascade::frontend::assemble::Scope;
use kascade::frontend::display::Mode;
use kascade::frontend::raw::{MemoryStore, TimeRange, from_nanos};
use kascade::frontend::{Frontend, FrontendConfig, SearchQuery};

/// Bytes allocated in the process now.
fn allocated() -> i64 {
    tikv_jemalloc_ctl::epoch::advance().expect("jemalloc epoch");
    tikv_jemalloc_ctl::stats::allocated::read().expect("jemalloc stats.allocated") as i64
}

async fn store(pods: usize) -> MemoryStore {
    common::raw_store_of_lines(common::deployment_with_pods(pods), "fixture").await
}

#[tokio::test]
async fn a_cached_traces_weight_is_the_memory_it_holds() {
    for pods in [0, 300] {
        let s = Arc::new(store(pods).await);
        let (a, b) = s.time_span().unwrap();
        let range = TimeRange::new(from_nanos(a), from_nanos(b));
        for mode in [Mode::Tracing, Mode::Tree, Mode::Grouped, Mode::Cascade] {
            let before = allocated();
            let f = Frontend::new(s.clone(), FrontendConfig::default());
            let trace = f
                .search(&SearchQuery {
                    mode,
                    scope: Scope::Full,
                    tags: vec![
                        ("resource".into(), "deployments".into()),
                        ("name".into(), "hello".into()),
                    ],
                    range,
                    limit: 1,
                })
                .await
                .unwrap()
                .remove(0);
            assert!(
                trace.assembly.nodes.len() > pods,
                "{mode:?}: the Pods are in"
            );
            // What the trace holds once streamed, the frontend (and its
            // cache, and every buffer of the assembly) gone.
            kascade::frontend::service::encoded_chunks(&trace);
            drop(f);
            let held = allocated() - before;
            let ratio = trace.bytes as f64 / held as f64;
            assert!(
                (0.8..=1.2).contains(&ratio),
                "{pods} Pods, {mode:?}: weighed {} bytes, holds {held} ({ratio:.2})",
                trace.bytes
            );
        }
    }
}
