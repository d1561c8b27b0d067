//! Unit tests of `spool`.

use super::*;

/// A spool that keeps no restart context (released segments deleted).
fn open(dir: &Path, max: u64, seg: u64) -> (Arc<Spool>, Vec<SpooledBatch>) {
    open_keeping(dir, max, seg, 0)
}

/// A spool that keeps `context` bytes of released segments.
fn open_keeping(dir: &Path, max: u64, seg: u64, context: u64) -> (Arc<Spool>, Vec<SpooledBatch>) {
    let mut cfg = SpoolConfig::new(dir);
    cfg.max_bytes = max;
    cfg.segment_bytes = seg;
    cfg.context_bytes = context;
    Spool::open(cfg, Arc::new(Metrics::default())).unwrap()
}

fn seqs(batches: &[SpooledBatch]) -> Vec<u64> {
    batches.iter().map(|b| b.seq).collect()
}

/// Appends `n` batches of 100 bytes (124 on disk: with segments rolling at
/// 100 bytes, one segment each), each enqueued.
async fn append_n(spool: &Spool, n: usize) {
    for _ in 0..n {
        let seq = spool
            .append("c", BodyEncoding::Identity, Bytes::from(vec![7; 100]))
            .await
            .unwrap();
        spool.mark_enqueued(seq);
    }
}

#[tokio::test]
async fn released_batches_are_kept_as_context_within_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    {
        // Two segments' worth of context.
        let (spool, _) = open_keeping(dir.path(), 1 << 20, 100, 248);
        append_n(&spool, 5).await;
        spool.release(4);
        // Segments 1 and 2 deleted, 3 and 4 kept as context, 5 unreleased.
        assert_eq!(seg_files(dir.path()), 3);
        // Released bytes are not what the bound refuses at.
        assert_eq!(spool.used_bytes(), 124);
    }
    let (spool, pending) = open_keeping(dir.path(), 1 << 20, 100, 248);
    assert_eq!(seqs(&pending), vec![5]);
    assert_eq!(seqs(&spool.take_context()), vec![3, 4]);
    assert!(spool.take_context().is_empty(), "taken once");
    // Without context kept, the same directory gives none.
    drop(spool);
    let (spool, pending) = open(dir.path(), 1 << 20, 100);
    assert_eq!(seqs(&pending), vec![5]);
    assert!(spool.take_context().is_empty());
}

#[tokio::test]
async fn context_older_than_its_age_before_the_newest_is_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (spool, _) = open_keeping(dir.path(), 1 << 20, 100, 1 << 20);
        append_n(&spool, 3).await;
        spool.release(3);
    }
    // The first segment was released an hour before the others (the
    // process then ran on); the restart comes a day later, which does not
    // age the rest: an uninterrupted run would still hold them.
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(dir.path().join(format!("{:020}.seg", 1)))
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    let (spool, pending) = open_keeping(dir.path(), 1 << 20, 100, 1 << 20);
    assert!(pending.is_empty());
    assert_eq!(seqs(&spool.take_context()), vec![2, 3]);
    assert_eq!(seg_files(dir.path()), 2);
}

#[tokio::test]
async fn a_start_that_died_reading_the_context_is_followed_by_one_without_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (spool, _) = open_keeping(dir.path(), 1 << 20, 100, 1 << 20);
        append_n(&spool, 3).await;
        spool.release(2);
    }
    {
        let (spool, pending) = open_keeping(dir.path(), 1 << 20, 100, 1 << 20);
        assert_eq!(seqs(&pending), vec![3]);
        let context = spool.take_context();
        assert_eq!(seqs(&context), vec![1, 2]);
        // Dies while reading it (as `replay_context` notes it).
        spool.replaying(context[0].seq);
    }
    let (spool, pending) = open_keeping(dir.path(), 1 << 20, 100, 1 << 20);
    assert!(spool.take_context().is_empty());
    assert_eq!(
        seqs(&pending),
        vec![3],
        "the unreleased batch is still replayed"
    );
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
                .append("c1", BodyEncoding::Gzip, Bytes::from(vec![i; 40]))
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
            .append("c1", BodyEncoding::Identity, Bytes::from_static(b"x"))
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
                .append("c", BodyEncoding::Identity, Bytes::from(vec![1; 40]))
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
                .append("c", BodyEncoding::Identity, Bytes::from(vec![2; 40]))
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
            .append("c", BodyEncoding::Identity, Bytes::from(vec![7; 100]))
            .await
            .unwrap();
        spool.mark_enqueued(seq);
    }
    assert_eq!(seg_files(dir.path()), 3);
    assert!(matches!(
        spool
            .append("c", BodyEncoding::Identity, Bytes::from(vec![7; 100]))
            .await
            .unwrap_err(),
        SpoolError::Full { .. }
    ));
    spool.release(2);
    assert_eq!(seg_files(dir.path()), 1);
    assert_eq!(spool.used_bytes(), 124);
    spool
        .append("c", BodyEncoding::Identity, Bytes::from(vec![7; 100]))
        .await
        .unwrap();
}

#[tokio::test]
async fn only_the_owner_can_read_the_spooled_batches() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("spool");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (spool, _) = open(&dir, 1 << 20, 1 << 20);
    spool
        .append("c", BodyEncoding::Identity, Bytes::from_static(b"x"))
        .await
        .unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&record::segment_path(&dir, 1)), 0o600);
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

/// A batch in flight each time two processes died is moved aside as an
/// audit log the offline commands read; the others are replayed, and
/// one death alone moves nothing.
#[tokio::test]
async fn a_batch_two_processes_died_replaying_is_moved_aside_and_the_rest_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<String> = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/e2e/fixtures/config/audit.log"
    ))
    .unwrap()
    .lines()
    .take(2)
    .map(str::to_string)
    .collect();
    // As an apiserver may send it: pretty-printed across lines.
    let poison = format!(
        "{{\n \"kind\": \"EventList\",\n \"apiVersion\": \"audit.k8s.io/v1\",\n \"items\": [\n{}\n]}}",
        lines.join(",\n")
    );
    {
        let (spool, _) = open(dir.path(), 1 << 20, 1 << 20);
        for body in ["a", poison.as_str(), "c"] {
            let body = Bytes::from(body.to_string());
            spool
                .append("c1", BodyEncoding::Identity, body)
                .await
                .unwrap();
        }
    }
    for death in 1..=DEATHS_TO_QUARANTINE {
        let (spool, pending) = open(dir.path(), 1 << 20, 1 << 20);
        let seqs: Vec<u64> = pending.iter().map(|b| b.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3], "after {death} deaths");
        spool.replaying(1);
        spool.replaying(2);
        // Dropped mid-replay: as when processing aborts.
    }
    let metrics = Arc::new(Metrics::default());
    let (spool, pending) = Spool::open(SpoolConfig::new(dir.path()), metrics.clone()).unwrap();
    let seqs: Vec<u64> = pending.iter().map(|b| b.seq).collect();
    assert_eq!(seqs, vec![1, 3]);
    assert_eq!(metrics.spool_quarantined.get(), 1);
    let aside = dir.path().join(QUARANTINE_DIR).join("2.log");
    let mode = std::fs::metadata(&aside).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let log = std::fs::read_to_string(&aside).unwrap();
    let events: Vec<_> = log
        .lines()
        .map(|l| crate::source::audit::parse_event(l).unwrap().audit_id)
        .collect();
    let expected: Vec<String> = lines
        .iter()
        .map(|l| crate::source::audit::parse_event(l).unwrap().audit_id)
        .collect();
    assert_eq!(events, expected);
    // Moved aside, it holds back no release.
    spool.mark_enqueued(1);
    spool.mark_enqueued(3);
    assert_eq!(spool.enqueued_upto(), 3);
    spool.replaying(3);
    spool.replayed();
    drop(spool);
    // A clean replay leaves nothing in flight: nothing more is moved.
    let (_, pending) = open(dir.path(), 1 << 20, 1 << 20);
    assert_eq!(pending.len(), 2);
    assert_eq!(
        std::fs::read_dir(dir.path().join(QUARANTINE_DIR))
            .unwrap()
            .count(),
        1
    );
}

/// A death in live processing counts too: a batch that may have been in
/// processing when the process died live, then in flight when the next
/// one died replaying it, is moved aside at the start after; one that
/// a release's barrier had seen processed is not.
#[tokio::test]
async fn a_live_death_and_a_replay_death_move_the_batch_aside() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (spool, _) = open(dir.path(), 1 << 20, 1 << 20);
        for body in ["a", "b", "c"] {
            // As the webhook admits a batch.
            let seq = spool
                .append("c1", BodyEncoding::Identity, Bytes::from(body))
                .await
                .unwrap();
            spool.processing(seq);
            spool.mark_enqueued(seq);
            if seq == 1 {
                // A release's barrier saw batch 1 processed.
                spool.processed(1);
            }
        }
        // Dropped with 2 and 3 in processing: as when processing aborts.
    }
    {
        let (spool, pending) = open(dir.path(), 1 << 20, 1 << 20);
        let seqs: Vec<u64> = pending.iter().map(|b| b.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3], "one death moves nothing aside");
        spool.replaying(1);
        // Dropped replaying 1, which was processed before the first death.
    }
    {
        let (spool, pending) = open(dir.path(), 1 << 20, 1 << 20);
        let seqs: Vec<u64> = pending.iter().map(|b| b.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3], "batch 1 died once, in replay");
        spool.replaying(1);
        spool.replaying(2);
        // Dropped replaying 2: its second death.
    }
    let metrics = Arc::new(Metrics::default());
    let (spool, pending) = Spool::open(SpoolConfig::new(dir.path()), metrics.clone()).unwrap();
    let seqs: Vec<u64> = pending.iter().map(|b| b.seq).collect();
    assert_eq!(seqs, vec![1, 3]);
    assert_eq!(metrics.spool_quarantined.get(), 1);
    assert!(dir.path().join(QUARANTINE_DIR).join("2.body").exists());
    // A graceful stop leaves no live batch in processing.
    for seq in [1, 3] {
        spool.replaying(seq);
        spool.mark_enqueued(seq);
    }
    spool.replayed();
    let seq = spool
        .append("c1", BodyEncoding::Identity, Bytes::from("d"))
        .await
        .unwrap();
    spool.processing(seq);
    spool.mark_enqueued(seq);
    spool.release_all();
    drop(spool);
    let (_, pending) = open(dir.path(), 1 << 20, 1 << 20);
    assert!(pending.is_empty());
    assert!(!dir.path().join("processing.died").exists());
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
