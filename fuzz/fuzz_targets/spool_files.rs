//! What a restart reads back from its spool directory, as a crash, a full
//! disk or a damaged volume leaves it: a segment file (`Spool::open`
//! replays the records whose checksums hold and stops at damage) and the
//! journal of exported link spans (`SentLinks::open`, rewritten with the
//! whole records it could read). The input's first byte says how many
//! journal records (44 bytes each, after its 8-byte header) follow; the
//! rest is the segment. The header is the input's own: with it the current
//! format is read, without it the previous one.
#![no_main]

use std::path::PathBuf;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use kascade::test_support::metrics::Metrics;
use kascade::test_support::flow::{SENT_LINKS_FILE, SentLinks};
use kascade::test_support::source::spool::{Spool, SpoolConfig};
use libfuzzer_sys::fuzz_target;

static DIR: LazyLock<PathBuf> =
    LazyLock::new(|| std::env::temp_dir().join(format!("kascade-fuzz-spool-{}", std::process::id())));

/// A journal record's size: window start, object digest, link key, start
/// time, crc32; after the header.
const JOURNAL_RECORD: u64 = 44;
const JOURNAL_HEADER: u64 = 8;

fuzz_target!(|data: &[u8]| {
    let dir = &*DIR;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let rest = data.get(1..).unwrap_or_default();
    let split = data
        .first()
        .map_or(0, |&b| (JOURNAL_HEADER + b as u64 * JOURNAL_RECORD) as usize);
    let (journal, segment) = rest.split_at(split.min(rest.len()));
    std::fs::write(dir.join(format!("{:020}.seg", 1)), segment).unwrap();
    std::fs::write(dir.join(SENT_LINKS_FILE), journal).unwrap();
    // Whatever the bytes: an answer, no panic (damage is cut off and counted).
    let _ = Spool::open(SpoolConfig::new(dir), Arc::new(Metrics::default()));
    if SentLinks::open(dir, Duration::from_secs(3600), Default::default()).is_ok() {
        let len = std::fs::metadata(dir.join(SENT_LINKS_FILE)).unwrap().len();
        assert_eq!((len - JOURNAL_HEADER) % JOURNAL_RECORD, 0, "a header and whole records only");
    }
});
