//! Unit tests of `app::collect`.

use super::*;

#[test]
fn no_spool_wins_over_a_spool_dir_and_a_spool_smaller_than_a_batch_is_refused() {
    // The image sets KASCADE_SPOOL_DIR; the chart's spool.enabled=false
    // adds KASCADE_NO_SPOOL: that must start, without a spool.
    let config = CollectConfig::default()
        .spool_dir("/var/lib/kascade/spool")
        .no_spool();
    assert!(config.spool_config().unwrap().is_none());
    let small = CollectConfig {
        spool_bytes: 4096,
        ..CollectConfig::default().spool_dir("/tmp/s")
    };
    let err = small.spool_config().unwrap_err().to_string();
    assert!(err.contains("--spool-bytes 4096"), "{err}");
    let cfg = CollectConfig::default()
        .spool_dir("/tmp/s")
        .spool_config()
        .unwrap()
        .unwrap();
    assert_eq!(cfg.dir, PathBuf::from("/tmp/s"));
    assert_eq!(cfg.max_bytes, 1 << 30);
}

#[test]
fn the_watch_settings_reach_the_pipeline() {
    let config = CollectConfig::default();
    assert!(!config.pipeline_config().has_watch);
    let mut config = config.watch_cluster("prod", "/etc/kube/prod");
    config.watch.audit_wait = Duration::from_secs(9);
    config.watch.ledger_entries = 7;
    let p = config.pipeline_config();
    assert!(p.has_watch);
    assert_eq!(p.watch_audit_wait, Duration::from_secs(9));
    assert_eq!(p.watch_ledger_entries, 7);
}
