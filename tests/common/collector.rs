//! `kascade collect` served in-process, as `kascade collect` serves it,
//! writing its spans to an OTLP/JSON file.

use std::time::Duration;

use kascade::app::collect::{self, CollectConfig, serve_webhook};
use kascade::test_support::export::OutputSpec;
use kascade::test_support::source::server::ConnectionLimits;

pub struct Server {
    pub url: String,
    pub _dir: tempfile::TempDir,
    /// The OTLP/JSON file the spans are written to.
    pub out: std::path::PathBuf,
}

/// Serves `collect` the way `kascade collect` does (same server settings).
pub fn spawn_server(app: axum::Router, header_read_timeout: Duration) -> String {
    spawn_server_limited(
        app,
        header_read_timeout,
        CollectConfig::default().max_connections,
    )
}

/// [`spawn_server`] keeping at most `max_connections` open.
pub fn spawn_server_limited(
    app: axum::Router,
    header_read_timeout: Duration,
    max_connections: usize,
) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve_webhook(
        listener,
        None,
        app,
        ConnectionLimits {
            header_read_timeout,
            max_connections,
            refused: Default::default(),
        },
        std::future::pending(),
    ));
    url
}

pub async fn serve(configure: impl FnOnce(&mut CollectConfig)) -> (Server, kascade::app::Pipeline) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let mut config = CollectConfig::default()
        .cluster("test")
        .spool_dir(dir.path().join("spool"));
    config.export = config.export.output(OutputSpec::OtlpJson(out.clone()));
    configure(&mut config);
    let (apps, pipeline) = collect::build(&config).unwrap();
    let app = apps.audit.merge(apps.admin);
    let url = spawn_server_limited(app, config.header_read_timeout, config.max_connections);
    (
        Server {
            url,
            _dir: dir,
            out,
        },
        pipeline,
    )
}

pub fn metric(text: &str, name_and_labels: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or(0)
}

/// The collector's `/metrics` text.
pub async fn metrics_text(url: &str) -> String {
    reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}
