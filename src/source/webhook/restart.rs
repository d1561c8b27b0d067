//! What a start feeds through the pipeline again from the spool (the
//! restart context, then the batches not yet exported), and the release of
//! spooled batches once their spans are exported.

use std::sync::Arc;
use std::time::Duration;

use super::WebhookState;
use super::body::decode_off_runtime;
use crate::flow::{ExportProgress, Intake, SentLinks};
use crate::metrics::{Metrics, Source};
use crate::source::spool::{Spool, SpooledBatch};

/// Feeds batches a previous run accepted but had not exported through the
/// pipeline again (before anything new is accepted from them), after the
/// released batches kept as context ([`Spool::take_context`]).
/// Says so on `done` when it ends (however it ends): new batches wait
/// for it.
pub(crate) async fn replay_spool(
    st: Arc<WebhookState>,
    pending: Vec<SpooledBatch>,
    done: tokio::sync::watch::Sender<bool>,
) {
    replay_spooled(&st, pending).await;
    done.send_replace(true);
}

async fn replay_spooled(st: &Arc<WebhookState>, pending: Vec<SpooledBatch>) {
    let Some(spool) = st.spool.clone() else {
        return;
    };
    if !replay_context(st, &spool).await {
        return;
    }
    for batch in pending {
        spool.replaying(batch.seq);
        match decode_off_runtime(st, &batch.cluster, batch.encoding, batch.body, true).await {
            Ok(decoded) => {
                let n = decoded.accepted.len() as u64;
                for item in decoded.accepted {
                    if st.intake.submit(item).await.is_err() {
                        return;
                    }
                }
                st.metrics
                    .events_accepted
                    .get_or_create(&Metrics::source(Source::Spool))
                    .inc_by(n);
            }
            // It was decoded once before it was spooled: only a change of
            // version or flags gets here.
            Err((_, msg)) => {
                tracing::error!(seq = batch.seq, error = %crate::messages::clip_message(msg), "a spooled batch no longer decodes; skipped")
            }
        }
        // Processed before the next batch is read: should processing
        // die, the batch noted as in flight is the one that killed it.
        if st.intake.barrier().await.is_err() {
            return;
        }
        st.metrics.spool_replayed.inc();
        spool.mark_enqueued(batch.seq);
    }
    spool.replayed();
}

/// Processes the spool's restart context, sending nothing: the released
/// batches before those replayed, so that these find the object states,
/// causes and Events an uninterrupted run would have. One barrier at the
/// end; should processing die meanwhile, the next start goes without
/// context (`Spool::open`). False when the pipeline has stopped.
async fn replay_context(st: &Arc<WebhookState>, spool: &Spool) -> bool {
    let context = spool.take_context();
    let Some(first) = context.first().map(|b| b.seq) else {
        return true;
    };
    let (batches, bytes) = (
        context.len(),
        context.iter().map(|b| b.body.len()).sum::<usize>(),
    );
    tracing::info!(
        batches,
        bytes,
        "reading the batches released before the restart again, sending nothing: the context of those replayed after them"
    );
    spool.replaying(first);
    for batch in context {
        match decode_off_runtime(st, &batch.cluster, batch.encoding, batch.body, true).await {
            Ok(decoded) => {
                for mut item in decoded.accepted {
                    item.context = true;
                    if st.intake.submit(item).await.is_err() {
                        return false;
                    }
                }
            }
            Err((_, msg)) => {
                tracing::warn!(seq = batch.seq, error = %crate::messages::clip_message(msg), "a released batch kept as context no longer decodes; skipped")
            }
        }
        st.metrics.spool_context_batches.inc();
    }
    st.intake.barrier().await.is_ok()
}

/// Releases spooled batches once everything made from them is exported:
/// waits until every shard has processed what was queued, then until the
/// exporter has finished every span sent by then. The link spans journaled
/// by then are confirmed as exported first, so that a restart replaying
/// later batches does not send them again.
pub(crate) async fn release_spool(
    spool: Arc<Spool>,
    sent_links: Option<Arc<SentLinks>>,
    intake: Intake,
    progress: Arc<ExportProgress>,
    every: Duration,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let upto = spool.enqueued_upto();
        if upto <= spool.released_upto() {
            continue;
        }
        // Marked before the barrier: every link journaled by then was noted
        // by a write the barrier waits for, so its span is in the export
        // queue when `sent` is read.
        let mark = sent_links.as_ref().map(|j| j.mark());
        if intake.barrier().await.is_err() {
            return;
        }
        spool.processed(upto);
        progress.wait_finished(progress.sent()).await;
        if let (Some(j), Some(mark)) = (&sent_links, mark) {
            j.confirm(mark);
        }
        spool.release(upto);
    }
}
