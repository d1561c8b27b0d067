//! The single writer thread: group commit of whatever appends are waiting
//! (one flush for many batches), and deleting released segments.

use std::fs::{File, OpenOptions};
use std::io::{IoSlice, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::record::segment_path;
use super::{ContextSegment, Segment, Shared};

/// One batch for the writer, answered once it is on disk.
pub(super) struct Append {
    /// The record's header (`record::record_head`); `body` follows it.
    pub head: Vec<u8>,
    pub body: Bytes,
    pub seq: u64,
    pub done: oneshot::Sender<Result<(), std::io::Error>>,
}

/// The single writer: group commit of whatever appends are waiting.
pub(super) fn writer_loop(spool: Arc<Shared>, rx: std::sync::mpsc::Receiver<Append>) {
    let mut current: Option<(File, PathBuf)> = None;
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while let Ok(more) = rx.try_recv() {
            group.push(more);
        }
        let result = write_group(&spool, &mut current, &group);
        let written: u64 = group.iter().map(Append::len).sum();
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
    let bytes: u64 = group.iter().map(Append::len).sum();
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
    // The bodies go to the file from the buffers they arrived in.
    let mut slices: Vec<IoSlice<'_>> = group
        .iter()
        .flat_map(|a| [IoSlice::new(&a.head), IoSlice::new(&a.body)])
        .collect();
    write_all_vectored(file, &mut slices)?;
    file.sync_data()?;
    let mut st = spool.state.lock().expect("spool state");
    if let Some(seg) = st.segments.iter_mut().rev().find(|s| s.path == *path) {
        seg.bytes += bytes;
        st.used += bytes;
    }
    spool.metrics.spool_bytes.set(st.used as i64);
    Ok(())
}

impl Append {
    fn len(&self) -> u64 {
        (self.head.len() + self.body.len()) as u64
    }
}

/// `Write::write_all_vectored`, which is not stable yet.
fn write_all_vectored(file: &mut File, mut slices: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    // Drops leading empty slices (as each advance drops consumed ones), so
    // that a write of nothing left is never taken for `WriteZero`.
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        match file.write_vectored(slices) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    "failed to write whole buffer",
                ));
            }
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Shared {
    /// Deletes the segments that hold only records `≤ n`. A segment being
    /// written has already claimed its new records' numbers (`write_group`),
    /// so it is never among them; the writer notices its segment is gone
    /// and opens a new one.
    /// Segments holding only records `≤ n` become restart context (the
    /// oldest deleted past its bounds), or go when it is off.
    pub(super) fn delete_released(&self, n: u64) {
        let now = std::time::SystemTime::now();
        {
            let mut st = self.state.lock().expect("spool state");
            while st.segments.front().is_some_and(|s| s.last <= n) {
                let seg = st.segments.pop_front().expect("checked");
                st.used -= seg.bytes;
                st.context_bytes += seg.bytes;
                st.context.push_back(ContextSegment {
                    path: seg.path,
                    last: seg.last,
                    bytes: seg.bytes,
                    closed: now,
                });
            }
            self.metrics.spool_bytes.set(st.used as i64);
        }
        self.prune_context(Some(now));
    }

    /// Deletes the oldest context segments past
    /// [`SpoolConfig::context_bytes`](super::SpoolConfig::context_bytes) or
    /// older than [`SpoolConfig::context_age`](super::SpoolConfig::context_age)
    /// before `now` (`None`: before the newest context segment, at a start:
    /// what an uninterrupted run would still hold, however long the process
    /// was down). Returns the first sequence number still kept as context.
    pub(super) fn prune_context(&self, now: Option<std::time::SystemTime>) -> u64 {
        let mut doomed = Vec::new();
        let kept_from;
        {
            let mut st = self.state.lock().expect("spool state");
            let newest = now
                .or_else(|| st.context.iter().map(|c| c.closed).max())
                .unwrap_or(std::time::UNIX_EPOCH);
            let oldest_kept = newest
                .checked_sub(self.cfg.context_age)
                .unwrap_or(std::time::UNIX_EPOCH);
            let mut pruned_through = 0;
            while let Some(front) = st.context.front() {
                if st.context_bytes <= self.cfg.context_bytes && front.closed >= oldest_kept {
                    break;
                }
                let seg = st.context.pop_front().expect("checked");
                st.context_bytes -= seg.bytes;
                pruned_through = seg.last;
                doomed.push(seg.path);
            }
            kept_from = pruned_through + 1;
            self.metrics
                .spool_context_bytes
                .set(st.context_bytes as i64);
        }
        for path in doomed {
            let _ = std::fs::remove_file(path);
        }
        kept_from
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// More slices than one `writev` takes (IOV_MAX is 1024 on Linux), of
    /// uneven sizes, some empty: the file holds all of them, in order.
    #[test]
    fn every_slice_is_written_in_order_past_what_one_writev_takes() {
        let parts: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| vec![(i % 251) as u8; (i % 7) as usize * 300])
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        let mut file = File::create(&path).unwrap();
        let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
        write_all_vectored(&mut file, &mut slices).unwrap();
        drop(file);
        assert_eq!(std::fs::read(&path).unwrap(), parts.concat());
    }
}
