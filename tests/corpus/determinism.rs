use super::*;

/// The change log `replay` writes for a run with these options, sorted
/// (lines of changes processed in parallel come in any order).
fn replayed_changes(run: &str, key: &std::path::Path, options: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("changes.jsonl");
    common::succeeded(
        common::kascade()
            .arg("replay")
            .arg("--quiet")
            .args(options)
            .arg("--redaction-key-file")
            .arg(key)
            .arg("--output")
            .arg(format!("changelog={}", out.display()))
            .args(corpus_logs(run)),
    );
    let mut lines: Vec<String> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// The same log gives the same causes, cascades and CPIDs however far the
/// dispatcher runs ahead of the shards and however many there are: in
/// lockstep (one worker, one queued event), with a long queue, in parallel.
/// Runs where writes race: two controllers fighting over one field (a
/// candidate noted far ahead pushed out the one an effect needed), a Job
/// replacing finished Pods (whether the Pod's status write was placed yet),
/// a rollout whose kubelet deletes arrive after their effects.
#[test]
fn replaying_a_run_gives_the_same_causes_whatever_the_workers_and_queue() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, [7u8; 32]).unwrap();
    for run in ["controller-fight", "job-complete", "config-roller"] {
        let lockstep = replayed_changes(run, &key, &["--workers", "1", "--queue-size", "1"]);
        assert!(lockstep.len() > 300, "{run}: {} changes", lockstep.len());
        for options in [&["--workers", "1"][..], &["--workers", "3"]] {
            let other = replayed_changes(run, &key, options);
            let differing: Vec<_> = other.iter().filter(|l| !lockstep.contains(l)).collect();
            assert!(
                differing.is_empty() && other.len() == lockstep.len(),
                "{run} with {options:?}: {} of {} changes differ from lockstep, e.g. {}",
                differing.len(),
                lockstep.len(),
                differing
                    .first()
                    .map_or(String::new(), |l| l.chars().take(400).collect())
            );
        }
    }
}
