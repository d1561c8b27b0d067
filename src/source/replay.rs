//! `kascade replay`: audit log files (JSON lines, as the apiserver's log
//! backend writes them) fed through the same pipeline as the webhook.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::audit::{AuditFilter, parse_event};
use crate::aggregate::Intake;
use crate::metrics::Metrics;

#[derive(Debug, Default, Clone, Copy)]
pub struct ReplayStats {
    pub lines: u64,
    pub accepted: u64,
    pub bad_lines: u64,
}

pub async fn replay_files(
    files: &[PathBuf],
    cluster: &str,
    filter: &AuditFilter,
    intake: &Intake,
    strict: bool,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<ReplayStats> {
    let mut total = 0;
    for f in files {
        total += std::fs::metadata(f)
            .with_context(|| format!("cannot read audit log {}", f.display()))?
            .len();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {msg}",
        )
        .expect("static template"),
    );
    let mut stats = ReplayStats::default();
    let source = Metrics::source("replay");
    for f in files {
        let file = tokio::fs::File::open(f)
            .await
            .with_context(|| format!("cannot open audit log {}", f.display()))?;
        let mut lines = BufReader::new(file).lines();
        let mut line_no = 0u64;
        while let Some(line) = lines
            .next_line()
            .await
            .with_context(|| format!("{}:{}: cannot read", f.display(), line_no + 1))?
        {
            line_no += 1;
            bar.inc(line.len() as u64 + 1);
            if line.trim().is_empty() {
                continue;
            }
            stats.lines += 1;
            metrics.events_received.get_or_create(&source).inc();
            let ev = match parse_event(&line) {
                Ok(ev) => ev,
                Err(e) => {
                    stats.bad_lines += 1;
                    metrics
                        .events_rejected
                        .get_or_create(&Metrics::reason("malformed"))
                        .inc();
                    let msg = format!("{}:{line_no}: not an audit event: {e}", f.display());
                    if strict {
                        bar.abandon();
                        bail!(msg);
                    }
                    bar.suspend(|| tracing::warn!("{msg} (skipped)"));
                    continue;
                }
            };
            if let Some(item) = super::accept(ev, cluster, filter, metrics) {
                stats.accepted += 1;
                metrics.events_accepted.get_or_create(&source).inc();
                intake.submit(item).await?;
            }
            if line_no.is_multiple_of(1024) {
                bar.set_message(format!("{} events", stats.accepted));
            }
        }
    }
    bar.finish_with_message(format!("{} events", stats.accepted));
    Ok(stats)
}
