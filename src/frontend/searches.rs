//! Raw search reads: at most `--max-searches` at once (a search queues up
//! to `--search-wait` for a place), and an identical search in flight
//! joined instead of read again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use super::raw::{RawStore, TimeRange, TraceIdBytes, nanos};
use super::{FrontendConfig, FrontendError};
use crate::metrics::FrontendMetrics;
use crate::model::Windowing;

/// Raw search reads listed for joining at once (each entry is a key and a
/// future: an entry whose every waiter went away stays until an identical
/// search finishes it).
const MAX_SHARED_SEARCHES: usize = 1024;

/// Searches with the same tags whose ranges start and end within the same
/// second share one raw read (the first one's range). The raw store takes
/// longer than that to make a span searchable, so a search joined a few
/// milliseconds late misses nothing it could have found.
const SHARED_SEARCH_GRAIN: u64 = 1_000_000_000;

/// A raw search read, awaited by every identical search in flight.
type RawSearch = futures::future::Shared<
    futures::future::BoxFuture<'static, Result<Arc<Vec<TraceIdBytes>>, Arc<FrontendError>>>,
>;

/// What a raw search read depends on: its tags (sorted) and time range.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RawSearchKey {
    tags: Vec<(String, String)>,
    /// The range in whole [`SHARED_SEARCH_GRAIN`]s: the UI's searches look
    /// back from "now", so a burst of the same search (a dashboard's
    /// refresh, many users) asks for ranges a few milliseconds apart.
    start: u64,
    end: u64,
}

/// The raw reads of searches, bounded and shared.
pub(super) struct RawSearches {
    /// [`FrontendConfig::max_searches`] permits, one per raw search read.
    permits: Arc<tokio::sync::Semaphore>,
    /// Raw search reads in flight by tags and time range: an identical
    /// search joins the read instead of starting its own. At most
    /// [`MAX_SHARED_SEARCHES`] are listed; beyond, a search reads alone.
    in_flight: std::sync::Mutex<HashMap<RawSearchKey, RawSearch>>,
    wait: Duration,
    max: usize,
    limit: usize,
    /// The collector's windows: a search reads from the window its range
    /// starts in.
    windowing: Windowing,
    metrics: Arc<FrontendMetrics>,
}

impl RawSearches {
    pub(super) fn new(cfg: &FrontendConfig, metrics: Arc<FrontendMetrics>) -> Self {
        Self {
            // At least one, or every search would wait out `--search-wait`.
            permits: Arc::new(tokio::sync::Semaphore::new(
                cfg.max_searches
                    .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
            )),
            in_flight: std::sync::Mutex::new(HashMap::new()),
            wait: cfg.search_wait,
            max: cfg.max_searches,
            limit: cfg.raw_search_limit,
            windowing: Windowing::new(cfg.window),
            metrics,
        }
    }

    /// The raw store's traces for `tags` whose object window overlaps
    /// `range`, read by one of `--max-searches` (queued up to
    /// `--search-wait`), shared by identical searches in flight.
    pub(super) async fn search<S: RawStore>(
        &self,
        store: &Arc<S>,
        tags: &[(String, String)],
        range: TimeRange,
    ) -> Result<Arc<Vec<TraceIdBytes>>, FrontendError> {
        // An object span lasts its whole window and the raw store (as
        // Jaeger's search) matches a span by its start: the search starts
        // at the window the range starts in.
        let window = UNIX_EPOCH + Duration::from_secs(self.windowing.window_start(range.start));
        let range = TimeRange::new(window.min(range.start), range.end);
        let mut sorted = tags.to_vec();
        sorted.sort();
        let key = RawSearchKey {
            tags: sorted,
            start: nanos(range.start) / SHARED_SEARCH_GRAIN,
            end: nanos(range.end) / SHARED_SEARCH_GRAIN,
        };
        let (read, joined) = {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
            match in_flight.get(&key) {
                Some(read) => (read.clone(), true),
                None => {
                    let read = self.read(store.clone(), tags.to_vec(), range);
                    if in_flight.len() < MAX_SHARED_SEARCHES {
                        in_flight.insert(key.clone(), read.clone());
                    }
                    (read, false)
                }
            }
        };
        if joined {
            self.metrics.searches_shared.inc();
        }
        let result = read.clone().await;
        {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
            if in_flight.get(&key).is_some_and(|r| r.ptr_eq(&read)) {
                in_flight.remove(&key);
            }
        }
        result.map_err(FrontendError::Shared)
    }

    /// One raw search read, once one of `--max-searches` is free (waiting
    /// at most `--search-wait`).
    fn read<S: RawStore>(
        &self,
        store: Arc<S>,
        tags: Vec<(String, String)>,
        range: TimeRange,
    ) -> RawSearch {
        use futures::FutureExt as _;
        let searches = self.permits.clone();
        let metrics = self.metrics.clone();
        let (wait, max, limit) = (self.wait, self.max, self.limit);
        async move {
            let _permit = match searches.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => {
                    metrics.search_waits.inc();
                    match tokio::time::timeout(wait, searches.acquire_owned()).await {
                        Ok(Ok(p)) => p,
                        _ => {
                            metrics.searches_refused.inc();
                            return Err(Arc::new(FrontendError::Busy(format!(
                                "{max} searches were reading the raw store for longer than --search-wait ({wait:?}) \
                                 (--max-searches {max}): retry, or narrow the search"
                            ))));
                        }
                    }
                }
            };
            let ids = store
                .find(&tags, range, limit)
                .await
                .map_err(|e| Arc::new(FrontendError::Raw(e)))?;
            Ok(Arc::new(ids))
        }
        .boxed()
        .shared()
    }
}
