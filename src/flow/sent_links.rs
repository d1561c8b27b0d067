//! Which link spans a previous process exported, so that a restart that
//! replays the spool does not send them again.
//!
//! A link span starts at the write that found the relation, so the same link
//! found again by a replayed write is a span with the same id and another
//! start time: the raw store keeps both. Object spans start at their window's
//! start, so a repeat overwrites the first copy; links need this journal.
//!
//! The journal never claims a link that was not exported: the emitter notes a
//! link only after its span is in the export queue ([`SentLinks::note`]); the
//! spool's release takes what was noted ([`SentLinks::take`]), waits until the
//! exporter has finished every span sent by then, and appends the records
//! with one `fdatasync` ([`SentLinks::persist`]) before it releases the
//! batches. What is lost in a crash (the last half second's notes, a full
//! pending list, an unwritable file) costs a duplicate link span, never a
//! missing one.
//!
//! File: `SPOOL_DIR/sent-links`, records of 36 bytes, little endian:
//! `window start u64 | object digest u128 | link key u64 | crc32 of the 32`.
//! A torn last record is ignored. Bounded: at start, and when the file grows
//! past [`MAX_FILE_BYTES`], it is rewritten with only the windows a span cache
//! could still hold (within `2 × ttl` of the newest window), oldest windows
//! dropped beyond the bound.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use crate::messages::LogEvery;
use crate::model::{FastHashSet as HashSet, ObjectWindow};

/// The journal's file name in the spool directory.
pub const SENT_LINKS_FILE: &str = "sent-links";

const RECORD: usize = 36;

/// The file is compacted when it grows past this (about 1.8 M links).
pub(super) const MAX_FILE_BYTES: u64 = 64 << 20;

/// Links noted and not yet persisted, at most (a release runs twice a
/// second, so this is far beyond any real rate); over it notes are dropped
/// and counted.
const MAX_PENDING: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Record {
    window_start: u64,
    digest: u128,
    link_key: u64,
}

impl Record {
    fn of(ow: &ObjectWindow, link_key: u64) -> Self {
        Record {
            window_start: ow.window_start,
            digest: ow.cache_digest(),
            link_key,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.window_start.to_le_bytes());
        out.extend_from_slice(&self.digest.to_le_bytes());
        out.extend_from_slice(&self.link_key.to_le_bytes());
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Option<Self> {
        let (body, crc) = b.split_at(32);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return None;
        }
        Some(Record {
            window_start: u64::from_le_bytes(body[..8].try_into().ok()?),
            digest: u128::from_le_bytes(body[8..24].try_into().ok()?),
            link_key: u64::from_le_bytes(body[24..32].try_into().ok()?),
        })
    }
}

/// Counters of what the journal could not keep.
#[derive(Clone, Default)]
pub struct SentLinksMetrics {
    /// Links persisted as exported.
    pub persisted: Counter,
    /// Notes dropped (pending list full, file unwritable) or records dropped
    /// by compaction beyond the bound: each may be sent again after a crash.
    pub dropped: Counter,
}

/// Link spans exported, remembered across restarts (see the module doc).
pub struct SentLinks {
    path: PathBuf,
    file: Mutex<Option<File>>,
    file_bytes: Mutex<u64>,
    pending: Mutex<Vec<Record>>,
    /// What earlier processes exported, by window start.
    exported: Mutex<BTreeMap<u64, HashSet<(u128, u64)>>>,
    has_exported: AtomicBool,
    /// The newest window noted by this process: what is older than it by
    /// `2 × ttl` no span cache holds any more.
    newest_noted: AtomicU64,
    ttl_secs: u64,
    metrics: SentLinksMetrics,
    warn: LogEvery,
}

/// The journal could not be opened or read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {what}: {source}")]
pub struct SentLinksError {
    path: String,
    what: &'static str,
    #[source]
    source: std::io::Error,
}

impl SentLinks {
    /// Opens (or creates, owner-only) the journal in `dir` and loads what
    /// it holds; `ttl`: how long an object window stays in a span cache.
    pub fn open(
        dir: &Path,
        ttl: Duration,
        metrics: SentLinksMetrics,
    ) -> Result<Self, SentLinksError> {
        let path = dir.join(SENT_LINKS_FILE);
        let shown = path.display().to_string();
        let err = |what: &'static str| {
            let path = shown.clone();
            move |source| SentLinksError { path, what, source }
        };
        let mut bytes = Vec::new();
        match File::open(&path) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes).map_err(err("cannot read"))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err("cannot open")(e)),
        }
        let mut records: Vec<Record> = Vec::with_capacity(bytes.len() / RECORD);
        let mut unreadable = 0u64;
        for chunk in bytes.chunks(RECORD) {
            if chunk.len() < RECORD {
                break; // torn by a crash mid-append
            }
            match Record::decode(chunk) {
                Some(r) => records.push(r),
                None => unreadable += 1,
            }
        }
        if unreadable > 0 {
            tracing::warn!(path = %path.display(), records = unreadable,
                "unreadable records in the journal of exported links skipped (those links may be sent again)");
        }
        let journal = SentLinks {
            path,
            file: Mutex::new(None),
            file_bytes: Mutex::new(0),
            pending: Mutex::new(Vec::new()),
            exported: Mutex::new(BTreeMap::new()),
            has_exported: AtomicBool::new(false),
            newest_noted: AtomicU64::new(0),
            ttl_secs: ttl.as_secs().max(1),
            metrics,
            warn: LogEvery::new(Duration::from_secs(60)),
        };
        let kept = journal.bounded(records);
        let written = journal.rewrite(&kept).map_err(err("cannot rewrite"))?;
        *journal.file_bytes.lock().expect("sent links") = written;
        let loaded = kept.len();
        {
            let mut exported = journal.exported.lock().expect("sent links");
            for r in kept {
                exported
                    .entry(r.window_start)
                    .or_default()
                    .insert((r.digest, r.link_key));
            }
            journal
                .has_exported
                .store(!exported.is_empty(), Ordering::Release);
        }
        if loaded > 0 {
            tracing::info!(links = loaded, path = %journal.path.display(),
                "links exported before the restart will not be sent again");
        }
        Ok(journal)
    }

    /// Whether an earlier process exported this link.
    pub fn exported(&self, ow: &ObjectWindow, link_key: u64) -> bool {
        if !self.has_exported.load(Ordering::Acquire) {
            return false;
        }
        let exported = self.exported.lock().expect("sent links");
        exported
            .get(&ow.window_start)
            .is_some_and(|w| w.contains(&(ow.cache_digest(), link_key)))
    }

    /// The link's span is in the export queue.
    pub fn note(&self, ow: &ObjectWindow, link_key: u64) {
        let mut pending = self.pending.lock().expect("sent links");
        if pending.len() >= MAX_PENDING {
            drop(pending);
            self.metrics.dropped.inc();
            if self.warn.should_log() {
                tracing::warn!(
                    bound = MAX_PENDING,
                    "too many exported links waiting to be journaled; those over the bound may be sent again after a crash (said at most once a minute)"
                );
            }
            return;
        }
        pending.push(Record::of(ow, link_key));
        drop(pending);
        self.newest_noted
            .fetch_max(ow.window_start, Ordering::Relaxed);
    }

    /// Everything noted so far: persist it once every span sent by now is
    /// exported.
    pub fn take(&self) -> Vec<LinkNote> {
        std::mem::take(&mut *self.pending.lock().expect("sent links"))
            .into_iter()
            .map(LinkNote)
            .collect()
    }

    /// Appends links whose spans were exported, flushed before it returns.
    pub fn persist(&self, notes: Vec<LinkNote>) {
        if notes.is_empty() {
            return;
        }
        let n = notes.len() as u64;
        let mut buf = Vec::with_capacity(notes.len() * RECORD);
        for LinkNote(r) in &notes {
            r.encode(&mut buf);
        }
        let mut file_bytes = self.file_bytes.lock().expect("sent links");
        if *file_bytes + buf.len() as u64 > MAX_FILE_BYTES {
            if let Err(e) = self.compact(notes.iter().map(|n| n.0), &mut file_bytes) {
                self.write_failed(n, &e);
            } else {
                self.metrics.persisted.inc_by(n);
            }
            self.forget_old();
            return;
        }
        let mut file = self.file.lock().expect("sent links");
        let written = match file.as_mut() {
            Some(f) => f.write_all(&buf).and_then(|()| f.sync_data()),
            None => Err(std::io::Error::other("the journal is not open")),
        };
        match written {
            Ok(()) => {
                *file_bytes += buf.len() as u64;
                self.metrics.persisted.inc_by(n);
            }
            Err(e) => self.write_failed(n, &e),
        }
        drop(file);
        self.forget_old();
    }

    fn write_failed(&self, n: u64, e: &std::io::Error) {
        self.metrics.dropped.inc_by(n);
        if self.warn.should_log() {
            tracing::warn!(path = %self.path.display(), error = %e, links = n,
                "cannot journal exported links; they may be sent again after a crash (said at most once a minute)");
        }
    }

    /// Rewrites the file with what it holds and `more`, within the bound.
    fn compact(
        &self,
        more: impl Iterator<Item = Record>,
        file_bytes: &mut u64,
    ) -> std::io::Result<()> {
        let mut bytes = Vec::new();
        File::open(&self.path)?.read_to_end(&mut bytes)?;
        let mut records: Vec<Record> = bytes
            .chunks_exact(RECORD)
            .filter_map(Record::decode)
            .collect();
        records.extend(more);
        let kept = self.bounded(records);
        *file_bytes = self.rewrite(&kept)?;
        Ok(())
    }

    /// The records a span cache could still need: windows within `2 × ttl`
    /// of the newest, newest first up to half the file bound.
    fn bounded(&self, mut records: Vec<Record>) -> Vec<Record> {
        let Some(newest) = records.iter().map(|r| r.window_start).max() else {
            return records;
        };
        let horizon = newest.saturating_sub(2 * self.ttl_secs);
        let before = records.len();
        records.retain(|r| r.window_start >= horizon);
        records.sort_unstable();
        records.dedup();
        let room = (MAX_FILE_BYTES / 2) as usize / RECORD;
        if records.len() > room {
            let over = records.len() - room;
            records.drain(..over); // sorted by window start: oldest first
            self.metrics.dropped.inc_by(over as u64);
            tracing::warn!(path = %self.path.display(), dropped = over,
                "the journal of exported links is over its bound: the oldest windows' links may be sent again after a crash");
        }
        tracing::debug!(
            kept = records.len(),
            expired = before - records.len(),
            "journal of exported links compacted"
        );
        records
    }

    /// Replaces the file with `records` (written beside it, flushed,
    /// renamed) and appends to it from now on; returns its length.
    fn rewrite(&self, records: &[Record]) -> std::io::Result<u64> {
        let tmp = self.path.with_extension("tmp");
        let mut buf = Vec::with_capacity(records.len() * RECORD);
        for r in records {
            r.encode(&mut buf);
        }
        {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&buf)?;
            f.sync_data()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        let f = OpenOptions::new()
            .append(true)
            .mode(0o600)
            .open(&self.path)?;
        *self.file.lock().expect("sent links") = Some(f);
        Ok(buf.len() as u64)
    }

    /// Forgets what earlier processes exported once their windows are past
    /// any span cache's time (judged by the newest window noted since).
    fn forget_old(&self) {
        if !self.has_exported.load(Ordering::Acquire) {
            return;
        }
        let newest = self.newest_noted.load(Ordering::Relaxed);
        let horizon = newest.saturating_sub(2 * self.ttl_secs);
        let mut exported = self.exported.lock().expect("sent links");
        exported.retain(|&w, _| w >= horizon);
        self.has_exported
            .store(!exported.is_empty(), Ordering::Release);
    }
}

/// A link taken from the pending list, to persist once exported.
pub struct LinkNote(Record);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ObjectRef;

    fn ow(name: &str, window_start: u64) -> ObjectWindow {
        ObjectWindow {
            object: ObjectRef::new("c", "", "pods", "ns", name),
            window_start,
        }
    }

    fn open(dir: &Path) -> SentLinks {
        SentLinks::open(dir, Duration::from_secs(1800), SentLinksMetrics::default()).unwrap()
    }

    #[test]
    fn only_persisted_links_are_known_to_the_next_process() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(dir.path());
        j.note(&ow("a", 0), 1);
        let taken = j.take();
        j.note(&ow("b", 0), 2); // noted after the take: not exported yet
        j.persist(taken);
        drop(j);
        let next = open(dir.path());
        assert!(next.exported(&ow("a", 0), 1));
        assert!(!next.exported(&ow("a", 0), 2), "another link of the object");
        assert!(!next.exported(&ow("a", 1800), 1), "the next window");
        assert!(!next.exported(&ow("b", 0), 2), "noted, never persisted");
    }

    #[test]
    fn a_torn_or_damaged_record_is_skipped_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(dir.path());
        for i in 0..3 {
            j.note(&ow("a", 0), i);
        }
        j.persist(j.take());
        drop(j);
        let path = dir.path().join(SENT_LINKS_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[RECORD + 3] ^= 0xff; // the second record's window start
        bytes.extend_from_slice(&[1, 2, 3]); // a torn append
        std::fs::write(&path, &bytes).unwrap();
        let next = open(dir.path());
        assert!(next.exported(&ow("a", 0), 0));
        assert!(!next.exported(&ow("a", 0), 1));
        assert!(next.exported(&ow("a", 0), 2));
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            2 * RECORD as u64,
            "rewritten with what was readable"
        );
    }

    #[test]
    fn windows_past_any_cache_are_dropped_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(dir.path());
        j.note(&ow("old", 0), 1);
        j.note(&ow("new", 10 * 3600), 1);
        j.persist(j.take());
        drop(j);
        let next = open(dir.path());
        assert!(!next.exported(&ow("old", 0), 1));
        assert!(next.exported(&ow("new", 10 * 3600), 1));
    }

    #[test]
    fn what_an_earlier_process_exported_is_forgotten_once_past_any_cache() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(dir.path());
        j.note(&ow("a", 0), 1);
        j.persist(j.take());
        drop(j);
        let next = open(dir.path());
        next.note(&ow("b", 3600), 1);
        next.persist(next.take());
        assert!(
            next.exported(&ow("a", 0), 1),
            "within 2 × ttl of the newest"
        );
        next.note(&ow("b", 4 * 3600), 1);
        next.persist(next.take());
        assert!(!next.exported(&ow("a", 0), 1));
    }

    #[test]
    fn the_file_is_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let j = open(dir.path());
        j.note(&ow("a", 0), 1);
        j.persist(j.take());
        let mode = std::fs::metadata(dir.path().join(SENT_LINKS_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
