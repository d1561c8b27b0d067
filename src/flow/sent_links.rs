//! Which link spans a process sent, so that a restart that replays the
//! spool puts none in the store twice.
//!
//! A link span starts at the write that found the relation (`at`; its id
//! hashes window, link and `at`): the same link found again by a replayed
//! write would be a second span in the store. So the journal is written
//! ahead of export, with `at`:
//! - the emitter notes a link before its span goes into the export queue
//!   ([`SentLinks::note`]);
//! - the exporter writes every note to the file before a batch leaves the
//!   process ([`SentLinks::write_ahead`]: one unsynced `write` per batch; a
//!   kill -9 keeps what the kernel was given);
//! - the spool's release marks what was written ([`SentLinks::mark`]), waits
//!   until every span sent by then is exported, and appends a checkpoint
//!   with one `fdatasync` ([`SentLinks::confirm`]).
//!
//! At the next start a link under a checkpoint is not sent again. A link
//! written but not confirmed may or may not have left: it is sent again,
//! once found, with its journaled `at` — the very span sent before (id,
//! start, content), which the store keeps once, or the one that never left.
//! What the journal loses (a full pending list, an unwritable file, a power
//! cut before the checkpoint's sync) costs a duplicate, never a missing link.
//!
//! File `SPOOL_DIR/sent-links`: the 8 bytes `KSLINKS2`, then records of 44
//! bytes, little endian: `window start u64 | object digest u128 | link key
//! u64 | at u64 (ns since the epoch) | crc32 of the 40`. A checkpoint is a
//! record with window start `u64::MAX` whose link key and `at` say which link
//! records are exported: those at byte offsets `[from, to)` of the file (by
//! offset, so a damaged record moves no other). A
//! torn last record is ignored; a file without the header is the previous
//! format (36-byte records, no `at`, all exported). Bounded: at start, and
//! when a checkpoint finds the file past [`MAX_FILE_BYTES`], it is rewritten
//! with only the windows a span cache could still hold (within `2 × ttl` of
//! the newest window), oldest windows dropped beyond the bound.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use prometheus_client::metrics::counter::Counter;

use crate::messages::LogEvery;
use crate::model::{FastHashMap as HashMap, ObjectWindow};

/// The journal's file name in the spool directory.
pub const SENT_LINKS_FILE: &str = "sent-links";

/// The file's first bytes: the format with `at` and checkpoints.
const MAGIC: &[u8; 8] = b"KSLINKS2";
const RECORD: usize = 44;
/// The previous format's record: no `at`, no checkpoints, all exported.
const RECORD_V1: usize = 36;
const CHECKPOINT: u64 = u64::MAX;

/// A checkpoint finding the file past this rewrites it (about 1.5 M links).
pub(super) const MAX_FILE_BYTES: u64 = 64 << 20;

/// Notes not yet written, at most (the exporter writes them with every
/// batch, so this is far beyond any real rate); over it notes are dropped
/// and counted.
const MAX_PENDING: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Record {
    window_start: u64,
    digest: u128,
    link_key: u64,
    /// Nanoseconds since the epoch; the link span's start and end.
    at: u64,
}

impl Record {
    fn of(ow: &ObjectWindow, link_key: u64, at: SystemTime) -> Self {
        Record {
            window_start: ow.window_start,
            digest: ow.cache_digest(),
            link_key,
            at: at
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64),
        }
    }

    /// The link records at byte offsets `[from, to)` are exported.
    fn checkpoint(from: u64, to: u64) -> Self {
        Record {
            window_start: CHECKPOINT,
            digest: 0,
            link_key: from,
            at: to,
        }
    }

    fn key(&self) -> (u128, u64) {
        (self.digest, self.link_key)
    }

    fn at(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_nanos(self.at)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.window_start.to_le_bytes());
        out.extend_from_slice(&self.digest.to_le_bytes());
        out.extend_from_slice(&self.link_key.to_le_bytes());
        out.extend_from_slice(&self.at.to_le_bytes());
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    /// A record of this format (`RECORD` bytes) or of the previous one
    /// (`RECORD_V1`: no `at`, read as 0).
    fn decode(b: &[u8]) -> Option<Self> {
        let (body, crc) = b.split_at(b.len().checked_sub(4)?);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return None;
        }
        Some(Record {
            window_start: u64::from_le_bytes(body.get(..8)?.try_into().ok()?),
            digest: u128::from_le_bytes(body.get(8..24)?.try_into().ok()?),
            link_key: u64::from_le_bytes(body.get(24..32)?.try_into().ok()?),
            at: match body.get(32..40) {
                Some(at) => u64::from_le_bytes(at.try_into().ok()?),
                None => 0,
            },
        })
    }
}

/// A file's link records, each with its byte offset and whether a
/// checkpoint covers it.
struct Parsed {
    links: Vec<(Record, u64, bool)>,
    unreadable: u64,
}

fn parse(bytes: &[u8]) -> Parsed {
    let mut unreadable = 0u64;
    let Some(body) = bytes.strip_prefix(MAGIC.as_slice()) else {
        // The previous format: every record was written once exported.
        let links = bytes
            .chunks_exact(RECORD_V1)
            .filter_map(|c| {
                let r = Record::decode(c);
                unreadable += u64::from(r.is_none());
                r.map(|r| (r, 0, true))
            })
            .collect();
        return Parsed { links, unreadable };
    };
    let mut links = Vec::with_capacity(body.len() / RECORD);
    let mut confirmed: Vec<(u64, u64)> = Vec::new();
    for (i, chunk) in body.chunks_exact(RECORD).enumerate() {
        let offset = (MAGIC.len() + i * RECORD) as u64;
        match Record::decode(chunk) {
            Some(r) if r.window_start == CHECKPOINT => confirmed.push((r.link_key, r.at)),
            Some(r) => links.push((r, offset, false)),
            None => unreadable += 1,
        }
    }
    confirmed.sort_unstable();
    for (_, offset, exported) in &mut links {
        // Ranges are disjoint: only the last one starting at or before the
        // offset can hold it (overlaps, in a damaged file, err towards
        // sending again).
        let i = confirmed.partition_point(|&(from, _)| from <= *offset);
        *exported = i > 0 && *offset < confirmed[i - 1].1;
    }
    Parsed { links, unreadable }
}

/// A link record's standing when the file is rewritten.
#[derive(Clone, Copy)]
enum Class {
    /// Under a checkpoint.
    Exported = 0,
    /// Written by an earlier process, never confirmed: it may have left.
    Earlier = 1,
    /// Written by this process since its last checkpoint.
    Ours = 2,
}

/// Counters of what the journal could not keep.
#[derive(Clone, Default)]
pub struct SentLinksMetrics {
    /// Links confirmed as exported.
    pub persisted: Counter,
    /// Notes dropped (pending list full, file unwritable) or records dropped
    /// by compaction beyond the bound: each may be sent again after a crash.
    pub dropped: Counter,
}

/// What an earlier process's journal says of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EarlierLink {
    /// Not journaled: send it as found.
    Unknown,
    /// Exported: do not send it again.
    Exported,
    /// Written ahead of an export that may not have happened: send it with
    /// this start, the span sent before if it was.
    MaybeSent(SystemTime),
}

/// One window's links an earlier process sent, by (object digest, link key).
type WindowLinks = HashMap<(u128, u64), EarlierLink>;

/// The file and what is to be written to it.
struct Writer {
    file: Option<File>,
    /// The file's length: where the next record goes.
    bytes: u64,
    /// Records before this offset are exported or an earlier process's: a
    /// checkpoint of this process covers only what it wrote after it.
    confirmed: u64,
}

/// Which link records a checkpoint may cover: those written by the time of
/// [`SentLinks::mark`].
#[must_use = "confirm the mark once everything sent by then is exported"]
pub struct Mark(u64);

/// Link spans sent, remembered across restarts (see the module doc).
pub struct SentLinks {
    path: PathBuf,
    writer: Mutex<Writer>,
    pending: Mutex<Vec<Record>>,
    /// What earlier processes sent, by window start.
    earlier: Mutex<BTreeMap<u64, WindowLinks>>,
    has_earlier: AtomicBool,
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
        let parsed = parse(&bytes);
        if parsed.unreadable > 0 {
            tracing::warn!(path = %path.display(), records = parsed.unreadable,
                "unreadable records in the journal of sent links skipped (those links may be sent again)");
        }
        let journal = SentLinks {
            path,
            writer: Mutex::new(Writer {
                file: None,
                bytes: 0,
                confirmed: 0,
            }),
            pending: Mutex::new(Vec::new()),
            earlier: Mutex::new(BTreeMap::new()),
            has_earlier: AtomicBool::new(false),
            newest_noted: AtomicU64::new(0),
            ttl_secs: ttl.as_secs().max(1),
            metrics,
            warn: LogEvery::new(Duration::from_secs(60)),
        };
        // Nothing of this process yet: every unconfirmed record is an
        // earlier process's, never to be confirmed.
        let [exported, maybe_sent, _] =
            journal.bounded(parsed.links.into_iter().map(|(r, _, exported)| {
                (
                    r,
                    if exported {
                        Class::Exported
                    } else {
                        Class::Earlier
                    },
                )
            }));
        {
            let mut w = journal.writer.lock().expect("sent links");
            journal
                .rewrite(&mut w, &exported, &maybe_sent, &[])
                .map_err(err("cannot rewrite"))?;
        }
        let (n_exported, n_maybe) = (exported.len(), maybe_sent.len());
        {
            let mut earlier = journal.earlier.lock().expect("sent links");
            for r in maybe_sent {
                earlier
                    .entry(r.window_start)
                    .or_default()
                    .insert(r.key(), EarlierLink::MaybeSent(r.at()));
            }
            for r in exported {
                earlier
                    .entry(r.window_start)
                    .or_default()
                    .insert(r.key(), EarlierLink::Exported);
            }
            journal
                .has_earlier
                .store(!earlier.is_empty(), Ordering::Release);
        }
        if n_exported + n_maybe > 0 {
            tracing::info!(exported = n_exported, maybe_sent = n_maybe, path = %journal.path.display(),
                "links sent before the restart: the exported ones will not be sent again, the others only as they were");
        }
        Ok(journal)
    }

    /// What an earlier process's journal says of this link.
    pub(crate) fn earlier(&self, ow: &ObjectWindow, link_key: u64) -> EarlierLink {
        if !self.has_earlier.load(Ordering::Acquire) {
            return EarlierLink::Unknown;
        }
        let earlier = self.earlier.lock().expect("sent links");
        earlier
            .get(&ow.window_start)
            .and_then(|w| w.get(&(ow.cache_digest(), link_key)))
            .copied()
            .unwrap_or(EarlierLink::Unknown)
    }

    /// The link's span, starting at `at`, is about to go into the export
    /// queue.
    pub fn note(&self, ow: &ObjectWindow, link_key: u64, at: SystemTime) {
        let mut pending = self.pending.lock().expect("sent links");
        if pending.len() >= MAX_PENDING {
            drop(pending);
            self.metrics.dropped.inc();
            if self.warn.should_log() {
                tracing::warn!(
                    bound = MAX_PENDING,
                    "too many sent links waiting to be journaled; those over the bound may be sent again after a crash (said at most once a minute)"
                );
            }
            return;
        }
        pending.push(Record::of(ow, link_key, at));
        drop(pending);
        self.newest_noted
            .fetch_max(ow.window_start, Ordering::Relaxed);
    }

    /// Writes what was noted (not synced: a killed process's writes stay
    /// with the kernel). The exporter calls it before a batch leaves.
    pub fn write_ahead(&self) {
        let mut w = self.writer.lock().expect("sent links");
        self.write_pending(&mut w);
    }

    fn write_pending(&self, w: &mut Writer) {
        let pending = std::mem::take(&mut *self.pending.lock().expect("sent links"));
        if pending.is_empty() {
            return;
        }
        let n = pending.len() as u64;
        if w.bytes > 2 * MAX_FILE_BYTES {
            // No checkpoint came to compact it (export stalled for long).
            return self.write_failed(n, &std::io::Error::other("the journal is over its bound"));
        }
        let mut buf = Vec::with_capacity(pending.len() * RECORD);
        for r in &pending {
            r.encode(&mut buf);
        }
        if let Err(e) = self.append(w, &buf, false) {
            self.write_failed(n, &e);
        }
    }

    /// Appends `buf` whole or not at all (a failed write is cut off, so
    /// the records after it stay aligned).
    fn append(&self, w: &mut Writer, buf: &[u8], sync: bool) -> std::io::Result<()> {
        let Some(f) = w.file.as_mut() else {
            return Err(std::io::Error::other("the journal is not open"));
        };
        let written = f
            .write_all(buf)
            .and_then(|()| if sync { f.sync_data() } else { Ok(()) });
        match written {
            Ok(()) => {
                w.bytes += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                if f.set_len(w.bytes).is_err() {
                    w.file = None; // misaligned from here: write no more
                }
                Err(e)
            }
        }
    }

    /// Writes what was noted and marks it: once every span sent by now is
    /// exported, [`confirm`](Self::confirm) the mark.
    pub fn mark(&self) -> Mark {
        let mut w = self.writer.lock().expect("sent links");
        self.write_pending(&mut w);
        Mark(w.bytes)
    }

    /// Everything written by the time of `mark` is exported: a checkpoint,
    /// synced before it returns.
    pub fn confirm(&self, mark: Mark) {
        let mut w = self.writer.lock().expect("sent links");
        let (from, to) = (w.confirmed, mark.0);
        if to <= from {
            return;
        }
        let links = (to - from) / RECORD as u64;
        let mut buf = Vec::with_capacity(RECORD);
        Record::checkpoint(from, to).encode(&mut buf);
        if let Err(e) = self.append(&mut w, &buf, true) {
            return self.write_failed(links, &e);
        }
        w.confirmed = to;
        self.metrics.persisted.inc_by(links);
        if w.bytes > MAX_FILE_BYTES
            && let Err(e) = self.compact(&mut w)
        {
            tracing::warn!(path = %self.path.display(), error = %e,
                "cannot compact the journal of sent links; journaling stopped (links may be sent again after a crash)");
            w.file = None;
        }
        drop(w);
        self.forget_old();
    }

    fn write_failed(&self, n: u64, e: &std::io::Error) {
        self.metrics.dropped.inc_by(n);
        if self.warn.should_log() {
            tracing::warn!(path = %self.path.display(), error = %e, links = n,
                "cannot journal sent links; they may be sent again after a crash (said at most once a minute)");
        }
    }

    /// Rewrites the file with what a span cache could still need: exported
    /// links, an earlier process's unconfirmed ones, and this process's
    /// unconfirmed ones (which its next checkpoint covers).
    fn compact(&self, w: &mut Writer) -> std::io::Result<()> {
        let mut bytes = Vec::new();
        File::open(&self.path)?.read_to_end(&mut bytes)?;
        let confirmed = w.confirmed;
        let links = parse(&bytes)
            .links
            .into_iter()
            .map(|(r, offset, exported)| {
                let class = match (exported, offset < confirmed) {
                    (true, _) => Class::Exported,
                    (false, true) => Class::Earlier,
                    (false, false) => Class::Ours,
                };
                (r, class)
            });
        let [exported, earlier, ours] = self.bounded(links);
        self.rewrite(w, &exported, &earlier, &ours)
    }

    /// The records within `2 × ttl` of the newest window, by class, each
    /// sorted and without repeats, the newest windows first up to half the
    /// file bound.
    fn bounded(&self, records: impl Iterator<Item = (Record, Class)>) -> [Vec<Record>; 3] {
        let records: Vec<(Record, Class)> = records.collect();
        let Some(newest) = records.iter().map(|(r, _)| r.window_start).max() else {
            return Default::default();
        };
        let horizon = newest.saturating_sub(2 * self.ttl_secs);
        let mut classes: [Vec<Record>; 3] = Default::default();
        for (r, class) in &records {
            if r.window_start >= horizon {
                classes[*class as usize].push(*r);
            }
        }
        let mut dropped = 0;
        let mut room = (MAX_FILE_BYTES / 2) as usize / RECORD;
        for v in &mut classes {
            v.sort_unstable();
            v.dedup();
            if v.len() > room {
                let over = v.len() - room;
                v.drain(..over); // sorted by window start: oldest first
                dropped += over;
            }
            room -= v.len();
        }
        if dropped > 0 {
            self.metrics.dropped.inc_by(dropped as u64);
            tracing::warn!(path = %self.path.display(), dropped,
                "the journal of sent links is over its bound: the oldest windows' links may be sent again after a crash");
        }
        let kept: usize = classes.iter().map(Vec::len).sum();
        tracing::debug!(
            kept,
            expired = records.len() - kept - dropped,
            "journal of sent links compacted"
        );
        classes
    }

    /// Replaces the file (written beside it, synced, renamed) with the
    /// exported records, a checkpoint covering them, an earlier process's
    /// unconfirmed records and this process's; appends to it from now on.
    fn rewrite(
        &self,
        w: &mut Writer,
        exported: &[Record],
        earlier: &[Record],
        ours: &[Record],
    ) -> std::io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let n = exported.len() + earlier.len() + ours.len();
        let mut buf = Vec::with_capacity(MAGIC.len() + (n + 1) * RECORD);
        buf.extend_from_slice(MAGIC);
        exported.iter().for_each(|r| r.encode(&mut buf));
        Record::checkpoint(MAGIC.len() as u64, buf.len() as u64).encode(&mut buf);
        earlier.iter().for_each(|r| r.encode(&mut buf));
        let confirmed = buf.len() as u64;
        ours.iter().for_each(|r| r.encode(&mut buf));
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
        *w = Writer {
            file: Some(f),
            bytes: buf.len() as u64,
            confirmed,
        };
        Ok(())
    }

    /// Forgets what earlier processes sent once their windows are past any
    /// span cache's time (judged by the newest window noted since).
    fn forget_old(&self) {
        if !self.has_earlier.load(Ordering::Acquire) {
            return;
        }
        let newest = self.newest_noted.load(Ordering::Relaxed);
        let horizon = newest.saturating_sub(2 * self.ttl_secs);
        let mut earlier = self.earlier.lock().expect("sent links");
        earlier.retain(|&w, _| w >= horizon);
        self.has_earlier
            .store(!earlier.is_empty(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests;
