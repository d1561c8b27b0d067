//! Unit tests of `lines`.

use super::*;

/// Writes `lines` to a file in `dir`, gzipped when `name` ends in .gz.
fn file(dir: &std::path::Path, name: &str, lines: &[String]) -> PathBuf {
    let path = dir.join(name);
    let text = lines.concat();
    if name.ends_with(".gz") {
        let mut gz =
            flate2::write::GzEncoder::new(File::create(&path).unwrap(), Default::default());
        std::io::Write::write_all(&mut gz, text.as_bytes()).unwrap();
        gz.finish().unwrap();
    } else {
        std::fs::write(&path, text).unwrap();
    }
    path
}

fn line(id: &str, received: &str, stage: &str) -> String {
    format!(
        "{{\"auditID\":\"{id}\",\"requestReceivedTimestamp\":\"{received}\",\"stageTimestamp\":\"{stage}\"}}\n"
    )
}

fn read(files: Vec<PathBuf>) -> (Vec<String>, Arc<Mutex<LinesState>>) {
    let shared = Arc::new(Mutex::new(LinesState::default()));
    let lines = Lines::new(files, ProgressBar::hidden(), shared.clone()).collect();
    (lines, shared)
}

fn ids(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).map_or_else(
                |_| l.trim().to_string(),
                |v| v["auditID"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Two apiservers' logs of one cluster (each in its own completion
/// order) are read as the requests completed, whatever order the files
/// are given in, and each line is located in its own file. (Shapes of
/// audit lines reduced to the times the merge reads: the merge of real
/// logs is tested on the corpus's two-apiserver run.)
#[test]
fn several_apiservers_logs_are_merged_by_completion_time() {
    let dir = tempfile::tempdir().unwrap();
    let t = |s: u32| format!("2026-12-06T03:11:{s:02}.000000Z");
    let a = file(
        dir.path(),
        "a.log",
        &[
            line("a1", &t(1), &t(1)),
            line("a2", &t(3), &t(4)),
            "not json\n".into(),
            line("a3", &t(6), &t(6)),
        ],
    );
    let b = file(
        dir.path(),
        "b.log.gz",
        &[
            line("b1", &t(2), &t(2)),
            line("b2", &t(2), &t(5)).replace("\":\"", "\": \""),
            line("b3", &t(7), &t(7)),
        ],
    );
    for files in [vec![a.clone(), b.clone()], vec![b.clone(), a.clone()]] {
        let (lines, shared) = read(files);
        assert_eq!(
            ids(&lines),
            ["a1", "b1", "a2", "not json", "b2", "a3", "b3"],
            "{lines:?}"
        );
        let st = shared.lock().unwrap();
        assert_eq!(st.locate(4), format!("{}:3", a.display()));
        assert_eq!(st.locate(5), format!("{}:2", b.display()));
        assert_eq!(st.locate(7), format!("{}:3", b.display()));
    }
}

/// Rotated logs (one after the other in time) come out oldest first;
/// one file is read straight through, in its own order.
#[test]
fn rotated_logs_come_out_oldest_first_and_one_file_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let t = |s: u32| format!("2026-12-06T03:11:{s:02}.000000Z");
    let new = file(
        dir.path(),
        "audit.log",
        &[line("n1", &t(5), &t(5)), line("n2", &t(6), &t(6))],
    );
    let old = file(
        dir.path(),
        "audit.log.1",
        &[line("o1", &t(1), &t(1)), line("o2", &t(2), &t(2))],
    );
    let (lines, shared) = read(vec![new.clone(), old.clone()]);
    assert_eq!(ids(&lines), ["o1", "o2", "n1", "n2"]);
    assert_eq!(
        shared.lock().unwrap().locate(3),
        format!("{}:1", new.display())
    );
    let unordered = file(
        dir.path(),
        "one.log",
        &[line("x", &t(9), &t(9)), line("y", &t(1), &t(1))],
    );
    assert_eq!(ids(&read(vec![unordered]).0), ["x", "y"]);
}

#[test]
fn lines_read_with_memchr_are_the_lines_read_until_reads() {
    let input: &[u8] = b"{\"a\":1}\n\n  \r\n{\"b\":\"\xff\"}\r\nno newline at the end";
    // A 3-byte buffer splits lines across refills.
    for capacity in [3, 8, 1 << 10] {
        let mut ours = BufReader::with_capacity(capacity, input);
        let mut std = BufReader::with_capacity(capacity, input);
        loop {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let n = read_line(&mut ours, &mut a).unwrap();
            let m = std.read_until(b'\n', &mut b).unwrap();
            assert_eq!((n, &a), (m, &b), "buffer of {capacity} bytes");
            if n == 0 {
                break;
            }
        }
    }
}
