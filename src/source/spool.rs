//! Durable intake: every audit webhook batch is appended to an on-disk log
//! and flushed (`fdatasync`) before the apiserver gets its `200`, and stays
//! there until the spans made from it have been exported. A `kill -9`, an
//! OOM kill or a node reboot with the spool on a persistent volume therefore
//! loses no event that was answered `200`: the next start replays the log.
//!
//! Layout: `DIR/spool.lock` (held while a process uses the directory) and
//! segment files `DIR/<first sequence number, 20 digits>.seg`. A record is
//! `magic u32 | payload length u32 | crc32 of seq+payload u32 | seq u64 |
//! payload`, little endian; the payload is the cluster name (u16 length +
//! bytes), the content encoding (u8: 0 identity, 1 gzip) and the request body
//! exactly as received (still compressed, so the spool costs what the
//! network did).
//!
//! Group commit: one writer thread takes every append that is waiting,
//! writes them and flushes once, then answers all of them, so many
//! concurrent batches share one flush.
//!
//! Release: records are numbered; once everything up to `n` has been
//! processed and exported, [`Spool::release`] deletes the segments that hold
//! only records `≤ n`. The spool is bounded by `max_bytes`: an append that
//! does not fit is refused ([`SpoolError::Full`]) and the webhook answers 429,
//! so the apiserver keeps the batch and retries.
//!
//! No crate fits this shape (release by sequence number from another stage,
//! group commit across async callers, a byte bound that refuses): `okaywal`
//! checkpoints on its own schedule and calls its format unstable.

use std::collections::{BTreeSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::metrics::Metrics;

const MAGIC: u32 = 0x4b53_504c; // "KSPL"
const HEADER: usize = 4 + 4 + 4 + 8;
/// A record larger than this is corrupt, not a batch (the webhook's body
/// limit is far below it).
const MAX_RECORD: usize = 256 << 20;
/// Holds the highest released sequence number.
const RELEASED_FILE: &str = "released";

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error(
        "spool is full ({used} of {limit} bytes waiting for export, --spool-bytes); retry later"
    )]
    Full { used: u64, limit: u64 },
    #[error("spool directory {dir}: {what}: {source}")]
    Io {
        dir: String,
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "spool directory {dir} is in use by another kascade process (give each process its own --spool-dir)"
    )]
    Locked { dir: String },
    #[error("spool writer has stopped")]
    Stopped,
}

/// How the body was encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEncoding {
    Identity,
    Gzip,
}

/// One accepted webhook batch as it is kept on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpooledBatch {
    pub seq: u64,
    pub cluster: String,
    pub encoding: BodyEncoding,
    pub body: Bytes,
}

#[derive(Debug, Clone)]
pub struct SpoolConfig {
    pub dir: PathBuf,
    /// Bytes of unreleased records kept at most; then appends are refused.
    pub max_bytes: u64,
    /// A segment is closed (and can be deleted once released) at this size.
    pub segment_bytes: u64,
}

impl SpoolConfig {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            max_bytes: 1 << 30,
            segment_bytes: 16 << 20,
        }
    }
}

struct Segment {
    path: PathBuf,
    /// Last sequence number written into it (`first - 1` while empty).
    last: u64,
    bytes: u64,
}

struct State {
    segments: VecDeque<Segment>,
    /// Bytes of all segments on disk.
    used: u64,
    /// Bytes promised to appends still in the writer's hands.
    reserved: u64,
    next_seq: u64,
    /// Records whose events are all in the intake queue; the lowest
    /// contiguous prefix is what a checkpoint may cover.
    enqueued_upto: u64,
    enqueued_ahead: BTreeSet<u64>,
    released_upto: u64,
}

struct Append {
    record: Vec<u8>,
    seq: u64,
    done: oneshot::Sender<Result<(), std::io::Error>>,
}

/// What the writer thread shares with the spool (not the directory lock:
/// dropping the spool unlocks at once, and ends the writer).
struct Shared {
    cfg: SpoolConfig,
    state: Mutex<State>,
    metrics: Arc<Metrics>,
}

/// The durable intake log (see the module docs).
pub struct Spool {
    shared: Arc<Shared>,
    writer: std::sync::mpsc::Sender<Append>,
    // Held for the life of the spool: a second process on the same directory
    // would delete segments this one still needs.
    _lock: File,
}

fn io_err(dir: &Path, what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SpoolError {
    let dir = dir.display().to_string();
    let what = what.into();
    move |source| SpoolError::Io { dir, what, source }
}

fn segment_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("{first:020}.seg"))
}

fn encode_record(seq: u64, cluster: &str, encoding: BodyEncoding, body: &[u8]) -> Vec<u8> {
    let cluster = &cluster.as_bytes()[..cluster.len().min(u16::MAX as usize)];
    let payload_len = 2 + cluster.len() + 1 + body.len();
    let mut out = Vec::with_capacity(HEADER + payload_len);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&(payload_len as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]); // crc, below
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(cluster.len() as u16).to_le_bytes());
    out.extend_from_slice(cluster);
    out.push(match encoding {
        BodyEncoding::Identity => 0,
        BodyEncoding::Gzip => 1,
    });
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out[12..]);
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Why reading a segment stopped before its end.
#[derive(Debug)]
enum Torn {
    /// Fewer bytes than a header or than the record announces: a write the
    /// crash cut short.
    Short,
    Corrupt(String),
}

fn read_record(r: &mut impl Read) -> Result<Option<(SpooledBatch, u64)>, Torn> {
    let mut header = [0u8; HEADER];
    let mut got = 0;
    while got < HEADER {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(Torn::Short),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Torn::Corrupt(e.to_string())),
        }
    }
    let magic = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
    if magic != MAGIC {
        return Err(Torn::Corrupt(format!("bad record marker {magic:#x}")));
    }
    let len = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes")) as usize;
    if !(3..=MAX_RECORD).contains(&len) {
        return Err(Torn::Corrupt(format!("impossible record length {len}")));
    }
    let crc = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    let seq = u64::from_le_bytes(header[12..20].try_into().expect("8 bytes"));
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).map_err(|_| Torn::Short)?;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header[12..20]);
    hasher.update(&payload);
    if hasher.finalize() != crc {
        return Err(Torn::Corrupt(format!("checksum mismatch in record {seq}")));
    }
    let clen = u16::from_le_bytes([payload[0], payload[1]]) as usize;
    if 2 + clen + 1 > payload.len() {
        return Err(Torn::Corrupt(format!(
            "record {seq}: cluster name overruns"
        )));
    }
    let cluster = String::from_utf8_lossy(&payload[2..2 + clen]).into_owned();
    let encoding = match payload[2 + clen] {
        0 => BodyEncoding::Identity,
        1 => BodyEncoding::Gzip,
        other => return Err(Torn::Corrupt(format!("record {seq}: encoding {other}"))),
    };
    let body = Bytes::from(payload).slice(2 + clen + 1..);
    Ok(Some((
        SpooledBatch {
            seq,
            cluster,
            encoding,
            body,
        },
        (HEADER + len) as u64,
    )))
}

impl Spool {
    /// Opens (creating it if needed) and locks the spool directory, and
    /// returns the spool with every record a previous process left unreleased,
    /// oldest first: the caller feeds them through the pipeline again and
    /// calls [`Spool::mark_enqueued`] for each.
    pub fn open(
        cfg: SpoolConfig,
        metrics: Arc<Metrics>,
    ) -> Result<(Arc<Spool>, Vec<SpooledBatch>), SpoolError> {
        let dir = cfg.dir.clone();
        // Batches are kept as received, Secret values included (the audit
        // policy decides what the apiserver sends): only this user may read them.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io_err(&dir, "cannot create"))?;
        // A mounted volume may belong to another user (an emptyDir is root's):
        // then the files alone are private.
        if let Err(e) = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)) {
            tracing::warn!(dir = %dir.display(), error = %e,
                "cannot make the spool directory owner-only; its files are (0600)");
        }
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("spool.lock"))
            .map_err(io_err(&dir, "cannot open spool.lock"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(SpoolError::Locked {
                    dir: dir.display().to_string(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(io_err(&dir, "cannot lock spool.lock")(e));
            }
        }
        let mut firsts = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(io_err(&dir, "cannot list"))? {
            let entry = entry.map_err(io_err(&dir, "cannot list"))?;
            let name = entry.file_name();
            let Some(first) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".seg"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            firsts.push(first);
        }
        firsts.sort_unstable();
        let mut segments = VecDeque::new();
        let mut pending = Vec::new();
        let mut next_seq = 1;
        for first in firsts {
            let path = segment_path(&dir, first);
            let (records, valid_bytes, torn) = Self::read_segment(&path)?;
            if let Some(why) = torn {
                metrics.spool_records_lost.inc();
                tracing::error!(segment = %path.display(), offset = valid_bytes, reason = %why,
                    "spool segment is damaged after this offset; the rest of it is skipped (a write cut short by a crash was never answered 200)");
                // Cut the damage off so later appends are never read behind it.
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|f| f.set_len(valid_bytes))
                    .map_err(io_err(&dir, format!("cannot truncate {}", path.display())))?;
            }
            let last = records.last().map_or(first.saturating_sub(1), |r| r.seq);
            next_seq = next_seq.max(last + 1);
            if records.is_empty() {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            segments.push_back(Segment {
                path,
                last,
                bytes: valid_bytes,
            });
            pending.extend(records);
        }
        // Records released before the crash but still in a kept segment are
        // not replayed again (losing this file only means replaying them).
        let released_mark = std::fs::read_to_string(dir.join(RELEASED_FILE))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0);
        pending.retain(|r| r.seq > released_mark);
        // Numbering goes on after everything ever released, also when every
        // segment is gone: a new record numbered at or below the mark would
        // be taken for released at the next start, and never replayed.
        next_seq = next_seq.max(released_mark + 1);
        let used = segments.iter().map(|s| s.bytes).sum();
        metrics.spool_bytes.set(used as i64);
        let released_upto = pending
            .first()
            .map_or(next_seq - 1, |r| r.seq - 1)
            .max(released_mark.min(next_seq - 1));
        let (tx, rx) = std::sync::mpsc::channel::<Append>();
        let shared = Arc::new(Shared {
            cfg,
            state: Mutex::new(State {
                segments,
                used,
                reserved: 0,
                next_seq,
                enqueued_upto: released_upto,
                enqueued_ahead: BTreeSet::new(),
                released_upto,
            }),
            metrics,
        });
        let for_writer = shared.clone();
        std::thread::Builder::new()
            .name("kascade-spool".into())
            .spawn(move || writer_loop(for_writer, rx))
            .map_err(io_err(&dir, "cannot start the spool writer"))?;
        let spool = Arc::new(Spool {
            shared,
            writer: tx,
            _lock: lock,
        });
        if !pending.is_empty() {
            tracing::info!(batches = pending.len(), bytes = used, dir = %dir.display(),
                "replaying audit batches a previous run accepted but had not exported");
        }
        Ok((spool, pending))
    }

    fn read_segment(path: &Path) -> Result<(Vec<SpooledBatch>, u64, Option<String>), SpoolError> {
        let file = File::open(path).map_err(io_err(
            path.parent().unwrap_or(path),
            format!("cannot open {}", path.display()),
        ))?;
        let mut r = BufReader::new(file);
        let mut records = Vec::new();
        let mut valid = 0u64;
        loop {
            match read_record(&mut r) {
                Ok(Some((rec, len))) => {
                    valid += len;
                    records.push(rec);
                }
                Ok(None) => return Ok((records, valid, None)),
                Err(Torn::Short) => {
                    return Ok((records, valid, Some("record cut short".into())));
                }
                Err(Torn::Corrupt(why)) => return Ok((records, valid, Some(why))),
            }
        }
    }

    /// Appends one batch and returns its sequence number once it is on disk.
    pub async fn append(
        &self,
        cluster: &str,
        encoding: BodyEncoding,
        body: &[u8],
    ) -> Result<u64, SpoolError> {
        let len = (HEADER + 2 + cluster.len() + 1 + body.len()) as u64;
        let seq = {
            let mut st = self.shared.state.lock().expect("spool state");
            if st.used + st.reserved + len > self.shared.cfg.max_bytes {
                self.shared.metrics.spool_full.inc();
                return Err(SpoolError::Full {
                    used: st.used + st.reserved,
                    limit: self.shared.cfg.max_bytes,
                });
            }
            st.reserved += len;
            let seq = st.next_seq;
            st.next_seq += 1;
            seq
        };
        // If the caller goes away while the flush is awaited (its client
        // hung up), the record must not hold back every later release: it
        // counts as enqueued; it was never answered 200, so the apiserver
        // sends it again.
        let mut unanswered = Unanswered {
            spool: self,
            seq: Some(seq),
        };
        let record = encode_record(seq, cluster, encoding, body);
        let (done, wait) = oneshot::channel();
        let sent = self.writer.send(Append { record, seq, done }).is_ok();
        let result = if sent {
            wait.await.unwrap_or_else(|_| {
                Err(std::io::Error::other(
                    "spool writer stopped before the flush",
                ))
            })
        } else {
            Err(std::io::Error::other("spool writer has stopped"))
        };
        match result {
            Ok(()) => {
                unanswered.seq = None;
                Ok(seq)
            }
            // Never answered 200: the apiserver retries (`unanswered` lets
            // the sequence number go).
            Err(e) => Err(io_err(&self.shared.cfg.dir, "cannot write a batch")(e)),
        }
    }

    /// Every event of record `seq` is in the intake queue (or it had none).
    pub fn mark_enqueued(&self, seq: u64) {
        let mut st = self.shared.state.lock().expect("spool state");
        if seq <= st.enqueued_upto {
            return;
        }
        st.enqueued_ahead.insert(seq);
        loop {
            let next = st.enqueued_upto + 1;
            if st.enqueued_ahead.remove(&next) {
                st.enqueued_upto = next;
            } else {
                break;
            }
        }
    }

    /// The highest `n` such that every record `≤ n` is in the intake queue.
    pub fn enqueued_upto(&self) -> u64 {
        self.shared.state.lock().expect("spool state").enqueued_upto
    }

    pub fn released_upto(&self) -> u64 {
        self.shared.state.lock().expect("spool state").released_upto
    }

    /// Everything made from records `≤ n` has been exported: their segments
    /// can go.
    pub fn release(&self, n: u64) {
        {
            let mut st = self.shared.state.lock().expect("spool state");
            if n <= st.released_upto {
                return;
            }
            st.released_upto = n;
        }
        let tmp = self.shared.cfg.dir.join(format!("{RELEASED_FILE}.tmp"));
        if let Err(e) = std::fs::write(&tmp, n.to_string())
            .and_then(|()| std::fs::rename(&tmp, self.shared.cfg.dir.join(RELEASED_FILE)))
        {
            tracing::warn!(dir = %self.shared.cfg.dir.display(), error = %e, "cannot record the spool's release mark (a restart would replay released batches again)");
        }
        self.shared.delete_released(n);
    }

    /// At a graceful stop, after everything accepted was exported.
    pub fn release_all(&self) {
        self.release(self.enqueued_upto());
    }

    /// Bytes of unreleased records on disk.
    pub fn used_bytes(&self) -> u64 {
        self.shared.state.lock().expect("spool state").used
    }
}

/// Marks its sequence number enqueued when dropped unanswered (see `append`).
struct Unanswered<'a> {
    spool: &'a Spool,
    seq: Option<u64>,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let Some(seq) = self.seq {
            self.spool.mark_enqueued(seq);
        }
    }
}

/// The single writer: group commit of whatever appends are waiting.
fn writer_loop(spool: Arc<Shared>, rx: std::sync::mpsc::Receiver<Append>) {
    let mut current: Option<(File, PathBuf)> = None;
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while let Ok(more) = rx.try_recv() {
            group.push(more);
        }
        let result = write_group(&spool, &mut current, &group);
        let written: u64 = group.iter().map(|a| a.record.len() as u64).sum();
        {
            let mut st = spool.state.lock().expect("spool state");
            st.reserved -= written;
        }
        match result {
            Ok(()) => {
                spool.metrics.spool_flushes.inc();
                for a in group {
                    let _ = a.done.send(Ok(()));
                }
            }
            Err(e) => {
                tracing::error!(dir = %spool.cfg.dir.display(), error = %e, "spool write failed; the batches are refused (the apiserver retries them)");
                // The file may now end in a partial record: start a new one.
                current = None;
                for a in group {
                    let _ = a
                        .done
                        .send(Err(std::io::Error::new(e.kind(), e.to_string())));
                }
            }
        }
    }
}

fn write_group(
    spool: &Shared,
    current: &mut Option<(File, PathBuf)>,
    group: &[Append],
) -> std::io::Result<()> {
    let newest = group
        .iter()
        .map(|a| a.seq)
        .max()
        .expect("a group has one append");
    let bytes: u64 = group.iter().map(|a| a.record.len() as u64).sum();
    // Under the lock, the segment about to be written claims the group's
    // sequence numbers first, so a concurrent release never deletes it.
    let open_new = {
        let mut st = spool.state.lock().expect("spool state");
        let reuse = match (st.segments.back(), current.as_ref()) {
            (Some(seg), Some((_, path))) => {
                seg.path == *path && seg.bytes < spool.cfg.segment_bytes
            }
            _ => false,
        };
        if reuse {
            let seg = st.segments.back_mut().expect("checked");
            seg.last = seg.last.max(newest);
            None
        } else {
            let path = segment_path(&spool.cfg.dir, group[0].seq);
            st.segments.push_back(Segment {
                path: path.clone(),
                last: newest,
                bytes: 0,
            });
            Some(path)
        }
    };
    if let Some(path) = open_new {
        *current = None;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)?;
        // The directory entry must survive a crash too.
        File::open(&spool.cfg.dir)?.sync_all()?;
        *current = Some((file, path));
    }
    let (file, path) = current.as_mut().expect("a segment is open");
    let mut buf = Vec::with_capacity(bytes as usize);
    for a in group {
        buf.extend_from_slice(&a.record);
    }
    file.write_all(&buf)?;
    file.sync_data()?;
    let mut st = spool.state.lock().expect("spool state");
    if let Some(seg) = st.segments.iter_mut().rev().find(|s| s.path == *path) {
        seg.bytes += bytes;
        st.used += bytes;
    }
    spool.metrics.spool_bytes.set(st.used as i64);
    Ok(())
}

impl Shared {
    /// Deletes the segments that hold only records `≤ n`. A segment being
    /// written has already claimed its new records' numbers (`write_group`),
    /// so it is never among them; the writer notices its segment is gone
    /// and opens a new one.
    fn delete_released(&self, n: u64) {
        let mut doomed = Vec::new();
        {
            let mut st = self.state.lock().expect("spool state");
            while st.segments.front().is_some_and(|s| s.last <= n) {
                let seg = st.segments.pop_front().expect("checked");
                st.used -= seg.bytes;
                doomed.push(seg.path);
            }
            self.metrics.spool_bytes.set(st.used as i64);
        }
        for path in doomed {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &Path, max: u64, seg: u64) -> (Arc<Spool>, Vec<SpooledBatch>) {
        let mut cfg = SpoolConfig::new(dir);
        cfg.max_bytes = max;
        cfg.segment_bytes = seg;
        Spool::open(cfg, Arc::new(Metrics::default())).unwrap()
    }

    fn seg_files(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".seg")
            })
            .count()
    }

    #[tokio::test]
    async fn unreleased_batches_come_back_after_a_restart_in_order() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (spool, pending) = open(dir.path(), 1 << 20, 64);
            assert!(pending.is_empty());
            for i in 0..5u8 {
                let seq = spool
                    .append("c1", BodyEncoding::Gzip, &[i; 40])
                    .await
                    .unwrap();
                assert_eq!(seq, u64::from(i) + 1);
                spool.mark_enqueued(seq);
            }
            spool.release(2);
            // Dropped without releasing 3..5: as after kill -9.
        }
        let (spool, pending) = open(dir.path(), 1 << 20, 64);
        let seqs: Vec<u64> = pending.iter().map(|b| b.seq).collect();
        assert_eq!(seqs, vec![3, 4, 5]);
        assert_eq!(pending[0].cluster, "c1");
        assert_eq!(pending[0].encoding, BodyEncoding::Gzip);
        assert_eq!(&pending[2].body[..], &[4u8; 40][..]);
        // Numbering continues after the replayed records.
        assert_eq!(
            spool
                .append("c1", BodyEncoding::Identity, b"x")
                .await
                .unwrap(),
            6
        );
    }

    #[tokio::test]
    async fn numbering_continues_after_a_fully_released_spool_so_a_crash_replays() {
        let dir = tempfile::tempdir().unwrap();
        {
            // A run that ends with everything exported: no segment is left,
            // only the release mark.
            let (spool, _) = open(dir.path(), 1 << 20, 64);
            for _ in 0..5 {
                let seq = spool
                    .append("c", BodyEncoding::Identity, &[1; 40])
                    .await
                    .unwrap();
                spool.mark_enqueued(seq);
            }
            spool.release_all();
            assert_eq!(seg_files(dir.path()), 0);
        }
        {
            // The next run is killed with two batches not yet exported.
            let (spool, pending) = open(dir.path(), 1 << 20, 64);
            assert!(pending.is_empty());
            for _ in 0..2 {
                let seq = spool
                    .append("c", BodyEncoding::Identity, &[2; 40])
                    .await
                    .unwrap();
                assert!(seq > 5, "sequence number {seq} reused");
                spool.mark_enqueued(seq);
            }
        }
        let (_, pending) = open(dir.path(), 1 << 20, 64);
        assert_eq!(pending.len(), 2, "accepted batches not replayed");
        assert!(pending.iter().all(|b| b.body[..] == [2u8; 40][..]));
    }

    #[tokio::test]
    async fn released_segments_are_deleted_and_the_bound_refuses() {
        let dir = tempfile::tempdir().unwrap();
        // Each record is 20 + 2 + 1 + 1 + 100 = 124 bytes; segments roll at 100.
        let (spool, _) = open(dir.path(), 400, 100);
        for _ in 0..3 {
            let seq = spool
                .append("c", BodyEncoding::Identity, &[7; 100])
                .await
                .unwrap();
            spool.mark_enqueued(seq);
        }
        assert_eq!(seg_files(dir.path()), 3);
        assert!(matches!(
            spool
                .append("c", BodyEncoding::Identity, &[7; 100])
                .await
                .unwrap_err(),
            SpoolError::Full { .. }
        ));
        spool.release(2);
        assert_eq!(seg_files(dir.path()), 1);
        assert_eq!(spool.used_bytes(), 124);
        spool
            .append("c", BodyEncoding::Identity, &[7; 100])
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_torn_last_record_is_cut_off_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (spool, _) = open(dir.path(), 1 << 20, 1 << 20);
            spool
                .append("c", BodyEncoding::Identity, b"one")
                .await
                .unwrap();
            spool
                .append("c", BodyEncoding::Identity, b"two")
                .await
                .unwrap();
        }
        let path = segment_path(dir.path(), 1);
        let len = std::fs::metadata(&path).unwrap().len();
        // A crash in the middle of writing the second record.
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 2)
            .unwrap();
        let (spool, pending) = open(dir.path(), 1 << 20, 1 << 20);
        assert_eq!(pending.len(), 1);
        assert_eq!(&pending[0].body[..], b"one");
        assert_eq!(
            spool
                .append("c", BodyEncoding::Identity, b"3")
                .await
                .unwrap(),
            2
        );
        drop(spool);
        let (_, pending) = open(dir.path(), 1 << 20, 1 << 20);
        let bodies: Vec<&[u8]> = pending.iter().map(|b| &b.body[..]).collect();
        assert_eq!(bodies, vec![&b"one"[..], &b"3"[..]]);
    }

    #[tokio::test]
    async fn only_the_owner_can_read_the_spooled_batches() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("spool");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (spool, _) = open(&dir, 1 << 20, 1 << 20);
        spool
            .append("c", BodyEncoding::Identity, b"x")
            .await
            .unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&segment_path(&dir, 1)), 0o600);
    }

    #[tokio::test]
    async fn a_second_process_on_the_same_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (_spool, _) = open(dir.path(), 1 << 20, 1 << 20);
        let err = Spool::open(SpoolConfig::new(dir.path()), Arc::new(Metrics::default()))
            .err()
            .unwrap();
        assert!(matches!(err, SpoolError::Locked { .. }), "{err}");
    }

    #[test]
    fn checkpoints_cover_only_a_contiguous_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, _) = open(dir.path(), 1 << 20, 1 << 20);
        spool.mark_enqueued(2);
        spool.mark_enqueued(3);
        assert_eq!(spool.enqueued_upto(), 0);
        spool.mark_enqueued(1);
        assert_eq!(spool.enqueued_upto(), 3);
    }
}
