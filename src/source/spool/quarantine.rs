//! Poison batches: a spooled batch that was being replayed when two
//! processes died is moved aside at the next start, so one batch that
//! crashes processing (whatever the cause: an abort, an OOM kill) cannot
//! keep the collector down and hold back every batch behind it.
//!
//! While replaying, the spool keeps `DIR/replaying`: the sequence number of
//! the batch in flight and how many processes already died with it in
//! flight. Each replayed batch is processed before the next is read, so a
//! death during replay is the batch's the file names.
//!
//! Live batches are processed many at a time, so a death there cannot name
//! one of them: before each live batch goes into the queue, `DIR/processing`
//! is overwritten in place with the range of batches that may be in
//! processing (one `pwrite` of 42 bytes, no flush: from the lowest batch not
//! known to be processed, as of the last release's barrier, to this one).
//! The next start keeps that range in `DIR/processing.died` until its
//! replay ends, and counts one death against each batch in it; a batch of
//! the range that is then in flight at a death during replay has died twice
//! and is moved aside at the start after.
//! A quarantined batch
//! is written as an audit log, one event a line (`DIR/quarantine/SEQ.log`,
//! owner-only), which `kascade replay`, `explain` and `trace` read; a body
//! that is not an `EventList` is kept as received (`SEQ.body`, `.gz` when
//! gzipped).

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::{BodyEncoding, SpooledBatch};

/// Names the batch in flight during replay (see the module docs).
const MARKER_FILE: &str = "replaying";
/// The range of live batches that may be in processing (see the module docs).
const LIVE_FILE: &str = "processing";
/// The ranges of live batches in processing at earlier deaths, kept until a
/// replay ends.
const DIED_FILE: &str = "processing.died";
/// Ranges kept in [`DIED_FILE`]: one a death while a replay is unfinished.
const MAX_LIVE_DEATHS: usize = 16;
/// Where batches are moved aside, under the spool directory.
pub(crate) const QUARANTINE_DIR: &str = "quarantine";
/// Processes that died with a batch in flight before it is moved aside:
/// one death may be the machine's (an OOM kill under other load), two
/// with the same batch are the batch's.
pub(crate) const DEATHS_TO_QUARANTINE: u32 = 2;
/// A gzipped body is inflated at most this far for the log; a larger one
/// is kept as received.
const MAX_INFLATED_BYTES: u64 = 1 << 30;

/// The batch the previous process was replaying when it died, and how many
/// processes have now died with it in flight.
pub(super) fn deaths_in_flight(dir: &Path) -> Option<(u64, u32)> {
    let text = std::fs::read_to_string(dir.join(MARKER_FILE)).ok()?;
    let mut words = text.split_whitespace();
    let seq = words.next()?.parse().ok()?;
    let before: u32 = words.next()?.parse().ok()?;
    Some((seq, before.saturating_add(1)))
}

/// Notes that batch `seq` is in flight, `deaths` deaths after it was first.
/// Not flushed to disk: it guards against the process's death, which the
/// page cache outlives.
pub(super) fn note_in_flight(dir: &Path, seq: u64, deaths: u32) -> std::io::Result<()> {
    let tmp = dir.join(format!("{MARKER_FILE}.tmp"));
    std::fs::write(&tmp, format!("{seq} {deaths}\n"))?;
    std::fs::rename(&tmp, dir.join(MARKER_FILE))
}

/// The ranges of live batches (`lo..=hi`) that were in processing when
/// earlier processes died and that no replay has processed since: the one
/// the previous process noted, after those kept by the starts before it
/// (at most [`MAX_LIVE_DEATHS`], the latest). Kept in `DIR/processing.died`
/// until a replay ends (see [`clear`]), then `DIR/processing` is emptied by
/// [`open_live`].
pub(super) fn live_in_flight(dir: &Path) -> std::io::Result<Vec<(u64, u64)>> {
    let range = |line: &str| -> Option<(u64, u64)> {
        let mut words = line.split_whitespace();
        let lo = words.next()?.parse().ok()?;
        let hi = words.next()?.parse().ok()?;
        (lo <= hi).then_some((lo, hi))
    };
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let mut ranges: Vec<(u64, u64)> = read(DIED_FILE).lines().filter_map(range).collect();
    if let Some(latest) = read(LIVE_FILE).lines().find_map(range)
        && !ranges.contains(&latest)
    {
        ranges.push(latest);
    }
    let cut = ranges.len().saturating_sub(MAX_LIVE_DEATHS);
    ranges.drain(..cut);
    if ranges.is_empty() {
        remove(&dir.join(DIED_FILE))?;
    } else {
        let text: String = ranges
            .iter()
            .map(|(lo, hi)| format!("{lo} {hi}\n"))
            .collect();
        let tmp = dir.join(format!("{DIED_FILE}.tmp"));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, dir.join(DIED_FILE))?;
    }
    Ok(ranges)
}

fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Opens `DIR/processing` for this process's notes, emptied: what the
/// previous process noted was read by [`live_in_flight`] first.
pub(super) fn open_live(dir: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(dir.join(LIVE_FILE))
}

/// Notes that live batches `lo..=hi` may be in processing: one write in
/// place, of a fixed width, so the file never holds a mix of two notes. Not
/// flushed to disk, as [`note_in_flight`].
pub(super) fn note_live(file: &std::fs::File, lo: u64, hi: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut note = [b' '; 42];
    let text = format!("{lo:020} {hi:020}\n");
    note.copy_from_slice(text.as_bytes());
    file.write_all_at(&note, 0)
}

/// A graceful stop: no live batch is in processing.
pub(super) fn clear_live(file: &std::fs::File) -> std::io::Result<()> {
    file.set_len(0)
}

/// Replay is over: no batch is in flight, and every batch that was in
/// live processing at an earlier death was processed.
pub(super) fn clear(dir: &Path) -> std::io::Result<()> {
    remove(&dir.join(MARKER_FILE))?;
    remove(&dir.join(DIED_FILE))
}

/// The sequence numbers of the batches already moved aside.
pub(super) fn moved_aside(dir: &Path) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(dir.join(QUARANTINE_DIR)) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            let name = e.ok()?.file_name();
            name.to_str()?.split('.').next()?.parse().ok()
        })
        .collect()
}

/// Writes `batch` under `DIR/quarantine` (see the module docs) and returns
/// the file written.
pub(super) fn move_aside(dir: &Path, batch: &SpooledBatch) -> std::io::Result<PathBuf> {
    let aside = dir.join(QUARANTINE_DIR);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&aside)?;
    let inflated = match batch.encoding {
        BodyEncoding::Identity => Some(batch.body.to_vec()),
        BodyEncoding::Gzip => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&batch.body[..])
                .take(MAX_INFLATED_BYTES + 1)
                .read_to_end(&mut out)
                .ok()
                .filter(|_| out.len() as u64 <= MAX_INFLATED_BYTES)
                .map(|_| out)
        }
    };
    // serde_json skips the items without recursion (they may be what
    // crashed processing): each is written as it came, on one line.
    let list = inflated.as_deref().and_then(|body| {
        serde_json::from_slice::<crate::source::audit::EventListEnvelope>(body).ok()
    });
    let (path, content) = match list {
        Some(list) => {
            let mut log = String::new();
            for item in &list.items {
                // Raw newlines in JSON are only whitespace between tokens.
                log.extend(item.get().chars().map(|c| match c {
                    '\n' | '\r' => ' ',
                    c => c,
                }));
                log.push('\n');
            }
            (aside.join(format!("{}.log", batch.seq)), log.into_bytes())
        }
        None => {
            let name = match batch.encoding {
                BodyEncoding::Identity => format!("{}.body", batch.seq),
                BodyEncoding::Gzip => format!("{}.body.gz", batch.seq),
            };
            (aside.join(name), batch.body.to_vec())
        }
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&path)?;
    file.write_all(&content)?;
    file.sync_all()?;
    Ok(path)
}
