//! `POST /cpid/mergelogs[/{cluster}]`: mergelogs from controllers using
//! `kascade-cpid`, authenticated like the audit webhook (the route layer),
//! decoded and checked whole, then queued for the processor, which shows
//! each as spans in the raw store (`span_model::merge_spans`).
//!
//! Unlike audit batches they are not spooled: a 200 means queued, and a
//! crash before export loses what was queued (the sender does not retry a
//! 200); the collector's `kascade_mergelogs_accepted_total` against Jaeger's
//! spans shows such a loss.

use super::*;
use crate::flow::Work;
use crate::source::mergelog::decode_mergelogs;

pub(super) async fn mergelogs_default(
    State(st): State<Arc<WebhookState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let cluster = st.default_cluster.clone();
    handle(&st, &cluster, &headers, body).await
}

pub(super) async fn mergelogs_cluster(
    State(st): State<Arc<WebhookState>>,
    Path(cluster): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(e) = crate::source::validate_cluster_name(&cluster) {
        return error(StatusCode::BAD_REQUEST, e);
    }
    handle(&st, &cluster, &headers, body).await
}

async fn handle(st: &WebhookState, cluster: &str, headers: &HeaderMap, body: Body) -> Response {
    let refused = |(status, msg): Refusal| {
        st.metrics.mergelogs_rejected.inc();
        tracing::debug!(cluster, %status, error = %msg, "refused mergelogs");
        error(status, crate::messages::clip_message(msg))
    };
    let encoding = match body_encoding(headers) {
        Ok(e) => e,
        Err(r) => return refused(r),
    };
    let _intake = match reserve_intake(st, cluster, headers, encoding) {
        Ok(permit) => permit,
        Err(resp) => {
            st.metrics.mergelogs_rejected.inc();
            return *resp;
        }
    };
    let raw = match read_body(st, headers, body).await {
        Ok(b) => b,
        Err(r) => return refused(r),
    };
    let plain = match decompress(st.max_body_bytes, encoding, &raw) {
        Ok(p) => p,
        Err(r) => return refused(r),
    };
    let mergelogs = match decode_mergelogs(&plain) {
        Ok(m) => m,
        Err(msg) => return refused((StatusCode::BAD_REQUEST, msg)),
    };
    let n = mergelogs.len();
    if n > 0 {
        let reserved = match st.intake.reserve(n, st.admission_wait).await {
            Ok(r) => r,
            Err(e) => {
                st.metrics.mergelogs_rejected.inc_by(n as u64);
                let mut resp = error(admit_status(&e), e.to_string());
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return resp;
            }
        };
        let cluster: Arc<str> = cluster.into();
        reserved.send_work(
            mergelogs
                .into_iter()
                .map(|m| Work::Mergelog {
                    cluster: cluster.clone(),
                    mergelog: Box::new(m),
                })
                .collect(),
        );
    }
    st.metrics.mergelogs_accepted.inc_by(n as u64);
    (StatusCode::OK, format!("accepted {n} mergelogs\n")).into_response()
}
