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
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::internal_events::{InternalEvent, SpoolBatchQuarantined};
use crate::metrics::Metrics;
use record::{HEADER, Recovered, record_head, recover};
use writer::{Append, writer_loop};

mod quarantine;
mod record;
mod writer;

pub(crate) use quarantine::{DEATHS_TO_QUARANTINE, QUARANTINE_DIR};

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
    /// Bytes of released segments kept as restart context: a restart reads
    /// them again, sending nothing, so that the batches it replays after
    /// them find the object states, causes and Events they followed. 0:
    /// released segments are deleted at once.
    pub context_bytes: u64,
    /// Released segments older than this are not kept as context (the
    /// cause index forgets an object left alone this long, too).
    pub context_age: std::time::Duration,
}

/// Default of [`SpoolConfig::context_bytes`].
pub(crate) const DEFAULT_CONTEXT_BYTES: u64 = 64 << 20;
/// Default of [`SpoolConfig::context_age`]: the cause index's idle time.
pub(crate) const DEFAULT_CONTEXT_AGE: std::time::Duration = std::time::Duration::from_secs(15 * 60);

impl SpoolConfig {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            max_bytes: 1 << 30,
            segment_bytes: 16 << 20,
            context_bytes: DEFAULT_CONTEXT_BYTES,
            context_age: DEFAULT_CONTEXT_AGE,
        }
    }
}

struct Segment {
    path: PathBuf,
    /// Last sequence number written into it (`first - 1` while empty).
    last: u64,
    bytes: u64,
}

/// A released segment kept as restart context.
struct ContextSegment {
    path: PathBuf,
    /// Its last sequence number.
    last: u64,
    bytes: u64,
    /// When its last record was released (or the file last written).
    closed: std::time::SystemTime,
}

struct State {
    segments: VecDeque<Segment>,
    /// Released segments kept as restart context, oldest first.
    context: VecDeque<ContextSegment>,
    context_bytes: u64,
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
    /// Every record `≤` this was processed (as of the last release's barrier).
    processed_upto: u64,
}

/// `DIR/processing` and the highest live batch noted in it.
struct LiveNote {
    file: File,
    hi: u64,
    /// A failing note is said at most this often (it is tried per batch).
    warned: crate::messages::LogEvery,
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
    /// The batch the previous process died replaying, with the deaths it
    /// has seen.
    died_replaying: Option<(u64, u32)>,
    live: Mutex<LiveNote>,
    /// Released batches found at the start, for [`Spool::take_context`].
    context: Mutex<Vec<SpooledBatch>>,
}

/// How many processes died with batch `seq` in processing: as the batch in
/// flight during a replay, and as one of the live batches in processing.
fn deaths_before(replaying: Option<(u64, u32)>, live: &[(u64, u64)], seq: u64) -> u32 {
    let replayed = match replaying {
        Some((died, deaths)) if died == seq => deaths,
        _ => 0,
    };
    let live = live
        .iter()
        .filter(|(lo, hi)| (*lo..=*hi).contains(&seq))
        .count();
    replayed.saturating_add(u32::try_from(live).unwrap_or(u32::MAX))
}

fn io_err(dir: &Path, what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SpoolError {
    let dir = dir.display().to_string();
    let what = what.into();
    move |source| SpoolError::Io { dir, what, source }
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
        let Recovered {
            segments,
            mut pending,
            context: context_segments,
            released,
            next_seq,
            released_upto,
            used,
        } = recover(&dir, &metrics)?;
        let released_mark = released.last().map_or(0, |b| b.seq);
        // A start that died reading the context: this one goes without.
        let context_killed = quarantine::deaths_in_flight(&dir)
            .is_some_and(|(seq, _)| seq <= released_mark && seq > 0 && !released.is_empty());
        // Moved aside by an earlier start but not yet released: not again.
        let mut quarantined = quarantine::moved_aside(&dir);
        pending.retain(|b| !quarantined.contains(&b.seq));
        // Deaths so far: the batch in flight when a replay died (exact), and
        // one for each batch that may have been in processing when live
        // processing died (see `quarantine`).
        let died_replaying = quarantine::deaths_in_flight(&dir)
            .filter(|(seq, _)| pending.iter().any(|b| b.seq == *seq));
        let died_live = quarantine::live_in_flight(&dir).map_err(io_err(
            &dir,
            "cannot keep the batches in processing at the last death",
        ))?;
        let deaths = |seq: u64| deaths_before(died_replaying, &died_live, seq);
        let mut at = 0;
        while at < pending.len() {
            let seq = pending[at].seq;
            let deaths = deaths(seq);
            if deaths < DEATHS_TO_QUARANTINE {
                at += 1;
                continue;
            }
            let path = quarantine::move_aside(&dir, &pending[at]).map_err(io_err(
                &dir,
                format!("cannot move batch {seq} to {QUARANTINE_DIR}/"),
            ))?;
            pending.remove(at);
            SpoolBatchQuarantined {
                seq,
                deaths,
                file: &path,
            }
            .emit(&metrics);
            quarantined.push(seq);
        }
        let live = quarantine::open_live(&dir).map_err(io_err(&dir, "cannot open processing"))?;
        let (tx, rx) = std::sync::mpsc::channel::<Append>();
        let context_bytes = context_segments.iter().map(|s| s.bytes).sum();
        let shared = Arc::new(Shared {
            cfg,
            state: Mutex::new(State {
                segments,
                context: context_segments,
                context_bytes,
                used,
                reserved: 0,
                next_seq,
                enqueued_upto: released_upto,
                enqueued_ahead: BTreeSet::new(),
                released_upto,
                // Older batches are replayed, under their own note.
                processed_upto: next_seq.saturating_sub(1),
            }),
            metrics,
        });
        // What the bounds keep of the context, then its batches.
        let kept_from = shared.prune_context(None);
        let context: Vec<SpooledBatch> = if shared.cfg.context_bytes == 0 {
            Vec::new()
        } else if context_killed {
            tracing::warn!(dir = %dir.display(),
                "the last start died reading the restart context: this one goes without it (the batches it replays are shown without the causes and states of those before)");
            Vec::new()
        } else {
            released
                .into_iter()
                .filter(|b| b.seq >= kept_from)
                .collect()
        };
        let for_writer = shared.clone();
        std::thread::Builder::new()
            .name("kascade-spool".into())
            .spawn(move || writer_loop(for_writer, rx))
            .map_err(io_err(&dir, "cannot start the spool writer"))?;
        let spool = Arc::new(Spool {
            shared,
            writer: tx,
            _lock: lock,
            died_replaying,
            live: Mutex::new(LiveNote {
                file: live,
                hi: 0,
                warned: crate::messages::LogEvery::new(std::time::Duration::from_secs(60)),
            }),
            context: Mutex::new(context),
        });
        for seq in quarantined {
            // Moved aside: it holds back no release.
            spool.mark_enqueued(seq);
        }
        if !pending.is_empty() {
            tracing::info!(batches = pending.len(), bytes = used, dir = %dir.display(),
                "replaying audit batches a previous run accepted but had not exported");
        }
        Ok((spool, pending))
    }

    /// The released batches kept as restart context ([`SpoolConfig::context_bytes`]),
    /// oldest first, once: the caller processes them, sending nothing,
    /// before the unreleased ones.
    pub fn take_context(&self) -> Vec<SpooledBatch> {
        std::mem::take(&mut *self.context.lock().expect("spool context"))
    }

    /// Appends one batch and returns its sequence number once it is on disk.
    pub async fn append(
        &self,
        cluster: &str,
        encoding: BodyEncoding,
        body: Bytes,
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
        let head = record_head(seq, cluster, encoding, &body);
        let (done, wait) = oneshot::channel();
        let sent = self
            .writer
            .send(Append {
                head,
                body,
                seq,
                done,
            })
            .is_ok();
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

    /// Batch `seq`, left by a previous process, is being replayed: should
    /// the process die before [`Spool::replayed`] or the next call, the
    /// next start counts that against it (see `quarantine`).
    pub fn replaying(&self, seq: u64) {
        // Deaths during replay only: those in live processing stay in
        // `processing.died` until the replay ends.
        let deaths = deaths_before(self.died_replaying, &[], seq);
        if let Err(e) = quarantine::note_in_flight(&self.shared.cfg.dir, seq, deaths) {
            tracing::warn!(dir = %self.shared.cfg.dir.display(), error = %e,
                "cannot note the batch being replayed (a batch that crashes processing would not be moved aside)");
        }
    }

    /// Live batch `seq` goes into the queue now: should the process die
    /// while it (or an earlier one not yet known processed) is in
    /// processing, the next start counts that against it (see `quarantine`).
    /// One write in place of 42 bytes, not flushed.
    pub fn processing(&self, seq: u64) {
        let lo = self
            .shared
            .state
            .lock()
            .expect("spool state")
            .processed_upto
            .saturating_add(1);
        let mut live = self.live.lock().expect("spool live note");
        live.hi = live.hi.max(seq);
        if let Err(e) = quarantine::note_live(&live.file, lo.min(live.hi), live.hi)
            && live.warned.should_log()
        {
            tracing::warn!(dir = %self.shared.cfg.dir.display(), error = %e,
                "cannot note the batches being processed (a batch that crashes processing would be moved aside one restart later; said at most once a minute)");
        }
    }

    /// Every record `≤ n` was processed (a barrier passed every shard after
    /// they were in the queue).
    pub fn processed(&self, n: u64) {
        let mut st = self.shared.state.lock().expect("spool state");
        st.processed_upto = st.processed_upto.max(n);
    }

    /// Every batch left by a previous process was replayed and processed.
    pub fn replayed(&self) {
        if let Err(e) = quarantine::clear(&self.shared.cfg.dir) {
            tracing::warn!(dir = %self.shared.cfg.dir.display(), error = %e,
                "cannot clear the note of the batch being replayed");
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
        let live = self.live.lock().expect("spool live note");
        if let Err(e) = quarantine::clear_live(&live.file) {
            tracing::warn!(dir = %self.shared.cfg.dir.display(), error = %e,
                "cannot clear the note of the batches being processed");
        }
    }

    /// The spool's directory.
    pub fn dir(&self) -> &Path {
        &self.shared.cfg.dir
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

#[cfg(test)]
mod tests;
