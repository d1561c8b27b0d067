//! The on-disk format: segment files of checksummed records (see the
//! parent module for the layout), and reading them back after a restart.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::{
    BodyEncoding, ContextSegment, RELEASED_FILE, Segment, SpoolError, SpooledBatch, io_err,
};
use crate::internal_events::{InternalEvent, SpoolSegmentDamaged};
use crate::metrics::Metrics;

pub(super) const MAGIC: u32 = 0x4b53_504c; // "KSPL"
pub(super) const HEADER: usize = 4 + 4 + 4 + 8;
/// A record larger than this is corrupt, not a batch (the webhook's body
/// limit is far below it).
const MAX_RECORD: usize = 256 << 20;
pub(super) fn segment_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("{first:020}.seg"))
}

/// A record's header and payload head (cluster name and encoding): the
/// body follows as received, written from its own buffer, so a batch is not
/// copied into the record; the checksum covers it all the same.
pub(super) fn record_head(seq: u64, cluster: &str, encoding: BodyEncoding, body: &[u8]) -> Vec<u8> {
    let cluster = &cluster.as_bytes()[..cluster.len().min(u16::MAX as usize)];
    let payload_len = 2 + cluster.len() + 1 + body.len();
    let mut out = Vec::with_capacity(HEADER + 2 + cluster.len() + 1);
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
    let mut crc = crc32fast::Hasher::new();
    crc.update(&out[12..]);
    crc.update(body);
    out[8..12].copy_from_slice(&crc.finalize().to_le_bytes());
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

/// What a previous process left in the spool directory.
pub(super) struct Recovered {
    pub segments: VecDeque<Segment>,
    /// Unreleased records, oldest first.
    pub pending: Vec<SpooledBatch>,
    /// Segments whose records were all released, kept as restart context
    /// (`Spool::take_context`), oldest first.
    pub context: VecDeque<ContextSegment>,
    /// Released records of the context segments and of the first kept
    /// segments, oldest first.
    pub released: Vec<SpooledBatch>,
    pub next_seq: u64,
    pub released_upto: u64,
    /// Bytes of the segments kept.
    pub used: u64,
}

/// Reads every segment in `dir`: damage after a crash is cut off (and
/// counted), empty segments are deleted, released records skipped.
pub(super) fn recover(dir: &Path, metrics: &Metrics) -> Result<Recovered, SpoolError> {
    let mut firsts = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(dir, "cannot list"))? {
        let entry = entry.map_err(io_err(dir, "cannot list"))?;
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
    let mut found = Vec::new();
    let mut next_seq = 1;
    for first in firsts {
        let path = segment_path(dir, first);
        let (records, valid_bytes, torn) = read_segment(&path)?;
        if let Some(why) = torn {
            SpoolSegmentDamaged {
                segment: &path,
                offset: valid_bytes,
                reason: &why,
            }
            .emit(metrics);
            // Cut the damage off so later appends are never read behind it.
            OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_len(valid_bytes))
                .map_err(io_err(dir, format!("cannot truncate {}", path.display())))?;
        }
        let last = records.last().map_or(first.saturating_sub(1), |r| r.seq);
        next_seq = next_seq.max(last.saturating_add(1));
        if records.is_empty() {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        found.push((
            Segment {
                path,
                last,
                bytes: valid_bytes,
            },
            records,
        ));
    }
    // Records released before the crash but still in a kept segment are
    // not replayed again (losing this file only means replaying them).
    let released_mark = std::fs::read_to_string(dir.join(RELEASED_FILE))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let mut segments = VecDeque::new();
    let mut context = VecDeque::new();
    let mut pending = Vec::new();
    let mut released = Vec::new();
    for (segment, records) in found {
        if segment.last <= released_mark {
            let closed = std::fs::metadata(&segment.path)
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            context.push_back(ContextSegment {
                path: segment.path,
                last: segment.last,
                bytes: segment.bytes,
                closed,
            });
        } else {
            segments.push_back(segment);
        }
        for r in records {
            if r.seq > released_mark {
                pending.push(r);
            } else {
                released.push(r);
            }
        }
    }
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
    Ok(Recovered {
        segments,
        pending,
        context,
        released,
        next_seq,
        released_upto,
        used,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole record as the writer puts it on disk.
    fn encode_record(seq: u64, cluster: &str, encoding: BodyEncoding, body: &[u8]) -> Vec<u8> {
        let mut out = record_head(seq, cluster, encoding, body);
        out.extend_from_slice(body);
        out
    }

    /// A webhook body as the apiserver sent one (e2e/fixtures), gzip-framed
    /// or not, is what a record carries.
    fn body() -> Vec<u8> {
        let line = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/deployment/audit.log"
        ))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
        format!("{{\"kind\":\"EventList\",\"apiVersion\":\"audit.k8s.io/v1\",\"items\":[{line}]}}")
            .into_bytes()
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let body = body();
        let mut log = encode_record(7, "prod-1", BodyEncoding::Identity, &body);
        log.extend(encode_record(8, "", BodyEncoding::Gzip, b""));
        let mut r = &log[..];
        let (first, len) = read_record(&mut r).unwrap().unwrap();
        assert_eq!(len as usize, HEADER + 2 + 6 + 1 + body.len());
        assert_eq!(
            (first.seq, &*first.cluster, first.encoding, &first.body[..]),
            (7, "prod-1", BodyEncoding::Identity, &body[..])
        );
        let (second, _) = read_record(&mut r).unwrap().unwrap();
        assert_eq!((second.seq, second.encoding), (8, BodyEncoding::Gzip));
        assert!(read_record(&mut r).unwrap().is_none(), "the end");
    }

    #[test]
    fn a_cut_or_damaged_record_is_torn_not_read() {
        let record = encode_record(1, "c", BodyEncoding::Identity, &body());
        // Cut anywhere: in the header or in the payload.
        for cut in [3, HEADER - 1, HEADER + 1, record.len() - 1] {
            let err = read_record(&mut &record[..cut]).unwrap_err();
            assert!(matches!(err, Torn::Short), "cut at {cut}: {err:?}");
        }
        // One flipped bit in the body fails the checksum.
        let mut flipped = record.clone();
        *flipped.last_mut().unwrap() ^= 1;
        match read_record(&mut &flipped[..]).unwrap_err() {
            Torn::Corrupt(why) => assert!(why.contains("checksum"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Not a record at all.
        let mut garbage = record;
        garbage[0] ^= 0xff;
        assert!(matches!(
            read_record(&mut &garbage[..]).unwrap_err(),
            Torn::Corrupt(_)
        ));
    }

    #[tokio::test]
    async fn a_torn_last_record_is_cut_off_at_a_restart_and_the_rest_kept() {
        use super::super::{Spool, SpoolConfig};
        use std::sync::Arc;
        let open =
            |dir: &Path| Spool::open(SpoolConfig::new(dir), Arc::new(Metrics::default())).unwrap();
        let dir = tempfile::tempdir().unwrap();
        {
            let (spool, _) = open(dir.path());
            spool
                .append("c", BodyEncoding::Identity, Bytes::from_static(b"one"))
                .await
                .unwrap();
            spool
                .append("c", BodyEncoding::Identity, Bytes::from_static(b"two"))
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
        let metrics = Arc::new(Metrics::default());
        let log = crate::internal_events::tests::logged(|| {
            let (spool, pending) =
                Spool::open(SpoolConfig::new(dir.path()), metrics.clone()).unwrap();
            drop(spool);
            assert_eq!(pending.len(), 1);
        });
        // Counted and said, naming the segment.
        assert_eq!(metrics.spool_records_lost.get(), 1);
        assert!(
            log.contains("ERROR") && log.contains(&path.display().to_string()),
            "{log}"
        );
        let (spool, pending) = open(dir.path());
        assert_eq!(pending.len(), 1);
        assert_eq!(&pending[0].body[..], b"one");
        assert_eq!(
            spool
                .append("c", BodyEncoding::Identity, Bytes::from_static(b"3"))
                .await
                .unwrap(),
            2
        );
        drop(spool);
        let (_, pending) = open(dir.path());
        let bodies: Vec<&[u8]> = pending.iter().map(|b| &b.body[..]).collect();
        assert_eq!(bodies, vec![&b"one"[..], &b"3"[..]]);
    }
}
