//! Audit logs as the offline commands read them, from a file: `Lines`
//! (`kascade trace`, `explain`, `analyze`), the bytes as a plain log, the
//! same bytes gzipped and the bytes taken for a `.gz` (damage is read up
//! to), and two files read by one clock (`Lines::correcting_clocks`, with
//! the rewrite of a line's times); `replay_files` (`kascade replay`, its own reader) over the plain
//! and the `.gz` file; then the lines through the collector's processing
//! in memory (`offline::spans_from_audit_lines`: parse, filter, windows,
//! diffs, causes, spans).
#![no_main]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use kascade::test_support::aggregate::ProcessorConfig;
use kascade::test_support::aggregate::redact::Redactor;
use kascade::test_support::aggregate::rules::RuleSet;
use kascade::app::{Lines, LinesState, PipelineConfig};
use kascade::test_support::metrics::Metrics;
use kascade::test_support::offline::spans_from_audit_lines;
use kascade::test_support::flow::Intake;
use kascade::test_support::source::audit::AuditFilter;
use kascade::test_support::source::replay::replay_files;
use libfuzzer_sys::fuzz_target;

struct Setup {
    rt: tokio::runtime::Runtime,
    dir: PathBuf,
    rules: Arc<RuleSet>,
    filter: AuditFilter,
    cfg: ProcessorConfig,
    redactor: Redactor,
}

/// What `kascade analyze` and `trace` run with: the offline pipeline's
/// defaults and the built-in rules.
static SETUP: LazyLock<Setup> = LazyLock::new(|| {
    let pipeline = PipelineConfig::offline();
    let dir = std::env::temp_dir().join(format!("kascade-fuzz-audit-lines-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Setup {
        rt: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        dir,
        rules: Arc::new(pipeline.rules.load().unwrap()),
        filter: pipeline.filter().unwrap(),
        cfg: pipeline.processor_config().unwrap(),
        redactor: pipeline.redactor().unwrap(),
    }
});

fn write(path: &Path, data: &[u8]) {
    std::fs::write(path, data).unwrap();
}

/// The file's lines as the offline commands get them, and what reading found.
fn read_lines(path: &Path) -> (Vec<String>, LinesState) {
    let shared = Arc::new(Mutex::new(LinesState::default()));
    let lines: Vec<String> = Lines::new(
        vec![path.to_path_buf()],
        indicatif::ProgressBar::hidden(),
        shared.clone(),
    )
    .collect();
    let state = std::mem::take(&mut *shared.lock().unwrap());
    assert!(state.io_error.is_none(), "{:?}", state.io_error);
    (lines, state)
}

/// `kascade replay` over the file; returns the lines it read (not blank).
fn replay(s: &Setup, path: &Path) -> u64 {
    s.rt.block_on(async {
        let metrics = Arc::new(Metrics::default());
        let (intake, mut rx) = Intake::new(1 << 16, Default::default());
        let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let stats = replay_files(
            &[path.to_path_buf()],
            "fuzz",
            &s.filter,
            &intake,
            false,
            &metrics,
        )
        .await
        .unwrap();
        drop(intake);
        drain.await.unwrap();
        assert!(stats.accepted + stats.bad_lines <= stats.lines, "{stats:?}");
        stats.lines
    })
}

fuzz_target!(|data: &[u8]| {
    let s = &*SETUP;
    let plain = s.dir.join("audit.log");
    let gzipped = s.dir.join("audit.log.gz");
    let raw_gz = s.dir.join("raw.log.gz");
    write(&plain, data);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).unwrap();
    write(&gzipped, &gz.finish().unwrap());
    write(&raw_gz, data);

    let (lines, state) = read_lines(&plain);
    // Gzipped, the log reads the same.
    let (unzipped, zstate) = read_lines(&gzipped);
    assert_eq!(lines, unzipped);
    assert!(zstate.damaged.is_empty(), "{:?}", zstate.damaged);
    // Any bytes taken for a .gz: read up to the damage.
    let _ = read_lines(&raw_gz);

    // Two files, read by one clock (`correcting_clocks`: the first pass
    // over both, and their times corrected when it finds an offset): the
    // halves of the bytes, and the bytes with both halves again.
    let (first, second) = data.split_at(data.len() / 2);
    let half = s.dir.join("half.log");
    write(&half, first);
    let other = s.dir.join("other.log");
    write(&other, second);
    for files in [vec![half.clone(), other.clone()], vec![plain.clone(), half, other]] {
        let shared = Arc::new(Mutex::new(LinesState::default()));
        let read = Lines::new(files, indicatif::ProgressBar::hidden(), shared.clone())
            .correcting_clocks()
            .count();
        let state = shared.lock().unwrap();
        assert!(state.io_error.is_none(), "{:?}", state.io_error);
        assert!(state.non_empty <= read as u64);
        let _ = state.clock_notes();
    }
    // The rewrite of a line's audit times, by any amount: text stays text.
    for by in [1, -1_500_000_000, i64::MAX, i64::MIN] {
        let moved = kascade::app::lines::fuzzing::shift_times(data, by);
        assert_eq!(std::str::from_utf8(&moved).is_ok(), std::str::from_utf8(data).is_ok());
    }

    // replay reads as many lines as the other commands.
    assert_eq!(replay(s, &plain), state.non_empty);
    let _ = replay(s, &raw_gz);

    let (_spans, errors) = s.rt.block_on(spans_from_audit_lines(
        lines,
        "fuzz",
        s.rules.clone(),
        &s.filter,
        s.cfg.clone(),
        s.redactor.clone(),
    ));
    assert!(errors.len() as u64 <= state.non_empty);
    let _ = state.located(&errors);
});
