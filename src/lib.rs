//! kascade: the Kubernetes control plane as distributed traces.
//!
//! Data flow: `source` (audit webhook, audit files, list-watch) → `aggregate`
//! (windows, span cache, diffs, relations, rules) → `export` (OTLP,
//! OTLP/JSON); what passes between them is defined in `pipeline`.

pub mod aggregate;
pub mod analysis;
pub mod app;
pub mod bounds;
pub mod cli;
pub mod client_tls;
pub mod component_spans;
pub mod coordination;
pub mod cpid_webhook;
mod doctor;
pub mod export;
pub mod frontend;
pub mod json;
pub mod judgement;
pub mod metrics;
pub mod model;
pub mod offline;
pub mod output_file;
pub mod pipeline;
pub mod resources;
pub mod self_trace;
pub mod source;
pub mod span_model;
pub mod telemetry;
pub mod terminal;

// The pipeline allocates many small strings per event, and memory freed
// on one thread is often allocated on another (the webhook decodes, the
// shards free). jemalloc, purging freed pages from a background thread,
// measured as fast per event as mimalloc and kept the collector's peak RSS
// 40–60 MiB lower (measured with the collector benchmark, docs/benchmarks.md).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Has jemalloc's background thread return freed pages to the OS once they
/// have been unused for `ms` milliseconds (jemalloc's default is 10 s),
/// in every arena, present and future — unless `_RJEM_MALLOC_CONF` is set,
/// whose settings are then left as they are. `kascade frontend` frees tens
/// of MB at the end of each assembly; kept 10 s, they stood beside the
/// trace cache and doubled its resident size (docs/benchmarks.md, *The frontend's peak
/// memory*). Returns the setting in force afterwards.
pub fn return_freed_pages_after(ms: u32) -> Result<isize, tikv_jemalloc_ctl::Error> {
    use tikv_jemalloc_ctl::raw;
    if std::env::var_os("_RJEM_MALLOC_CONF").is_none() {
        let ms = ms as isize;
        // SAFETY: the names are jemalloc's `ssize_t` settings, written as
        // `isize`.
        unsafe { raw::write(b"arenas.dirty_decay_ms\0", ms)? };
        // The arenas made already, one by one (there is no "all" for this
        // setting); an index not made yet is refused, and takes the default
        // just set when it is. Only to shorten: the arena of huge
        // allocations returns them at once (0) and keeps doing so.
        for i in 0..tikv_jemalloc_ctl::arenas::narenas::read()? {
            let name = format!("arena.{i}.dirty_decay_ms\0");
            // SAFETY: as above.
            unsafe {
                if raw::read::<isize>(name.as_bytes()).is_ok_and(|now| now > ms) {
                    raw::write(name.as_bytes(), ms)?;
                }
            }
        }
    }
    // SAFETY: an `ssize_t` setting read as `isize`.
    unsafe { raw::read(b"arenas.dirty_decay_ms\0") }
}

/// Turns transparent huge pages off for this process (Linux), unless
/// `KASCADE_ALLOW_THP` is set: a 2 MiB page partly used by long-lived small
/// objects stays resident whole — the collector's peak RSS was ≈ 50 MiB
/// higher with them, for no measurable speed (see docs/benchmarks.md). Call
/// first thing in `main`, before the runtime allocates much.
pub fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("KASCADE_ALLOW_THP").is_none() {
        // SAFETY: PR_SET_THP_DISABLE takes plain integer arguments and only
        // sets a flag on this process.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}
