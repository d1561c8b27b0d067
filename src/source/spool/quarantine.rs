//! Poison batches: a spooled batch that was being replayed when two
//! processes died is moved aside at the next start, so one batch that
//! crashes processing (whatever the cause: an abort, an OOM kill) cannot
//! keep the collector down and hold back every batch behind it.
//!
//! While replaying, the spool keeps `DIR/replaying`: the sequence number of
//! the batch in flight and how many processes already died with it in
//! flight. Each replayed batch is processed before the next is read, so a
//! death during replay is the batch's the file names. A quarantined batch
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
/// Where batches are moved aside, under the spool directory.
pub const QUARANTINE_DIR: &str = "quarantine";
/// Processes that died with a batch in flight before it is moved aside:
/// one death may be the machine's (an OOM kill under other load), two
/// with the same batch are the batch's.
pub const DEATHS_TO_QUARANTINE: u32 = 2;
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

/// Replay is over: no batch is in flight.
pub(super) fn clear(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(dir.join(MARKER_FILE)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
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
