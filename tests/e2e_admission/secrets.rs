//! Secrets, which kascade may not read (least privilege: the chart's
//! ClusterRole leaves them out): the admission source sees their writes
//! but nothing would show what became of them.

use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;

use super::{CLUSTER, admitted, kubectl, spans_of};

/// A Secret created and changed by the user: the writes are counted, not
/// recorded — neither judged "not stored" nor holding the planted values,
/// nor their base64 (a Secret's `data`), anywhere in Jaeger.
pub(crate) async fn writes_are_counted_not_recorded(ns: &str, me: &str, admin: u16) {
    let unwatched = || {
        let metrics = Command::new("curl")
            .args(["-s", &format!("http://127.0.0.1:{admin}/metrics")])
            .output()
            .unwrap();
        let line = format!(
            "kascade_admission_requests_total{{cluster=\"{CLUSTER}\",outcome=\"unwatched\"}} "
        );
        String::from_utf8_lossy(&metrics.stdout)
            .lines()
            .find_map(|l| l.strip_prefix(&line)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = unwatched();
    let planted = format!("planted-{}-{ns}", std::process::id());
    kubectl(&[
        "create",
        "secret",
        "generic",
        "creds",
        "-n",
        ns,
        &format!("--from-literal=password={planted}-create"),
    ]);
    kubectl(&[
        "patch",
        "secret",
        "creds",
        "-n",
        ns,
        "-p",
        &format!(r#"{{"stringData":{{"token":"{planted}-update"}}}}"#),
    ]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while unwatched() < before + 2.0 {
        assert!(
            Instant::now() < deadline,
            "the Secret's writes were not counted as unwatched"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Past the persist wait, a held write would have been shown by now.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let secret = spans_of(ns, "secrets", "creds").await;
    assert!(
        admitted(&secret, me, "create").is_empty() && admitted(&secret, me, "update").is_empty(),
        "Secret writes recorded though nothing watches Secrets: {secret:#?}"
    );
    let held = serde_json::to_string(&secret).unwrap();
    for value in [format!("{planted}-create"), format!("{planted}-update")] {
        let encoded = base64::engine::general_purpose::STANDARD.encode(&value);
        assert!(
            !held.contains(&value) && !held.contains(&encoded),
            "the Secret's value {value} left the collector: {held}"
        );
    }
}
