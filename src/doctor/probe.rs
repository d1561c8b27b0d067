//! What `kascade doctor` gathers: the collector's `GET /intake`, the
//! list-watch identity's permissions and the apiserver's clock (through
//! the kubeconfig, as the list-watch loads it), the frontend's
//! `GET /readyz/raw`. Each probe's failure is an input to judge, not an
//! error; only unusable flags are errors.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use futures::StreamExt as _;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use super::{ClockReading, FrontendProbe, INPUTS_SCHEMA, Inputs, Probe, ResourceAccess};
use crate::flow::unix_ms;
use crate::source::arrivals::IntakeReport;
use crate::source::watch;

/// What to probe.
#[derive(Clone)]
pub(crate) struct Targets {
    pub admin_url: String,
    pub cluster: String,
    pub kubeconfig: Option<PathBuf>,
    pub frontend_url: Option<String>,
    /// Resources the watch leaves out (`--watch-exclude`), as it names them.
    pub watch_exclude: HashSet<String>,
    pub timeout: Duration,
}

/// Access reviews in flight at once.
const REVIEWS_AT_ONCE: usize = 8;
/// Largest answer read from the collector or the frontend.
const MAX_ANSWER_BYTES: usize = 4 << 20;

pub(crate) async fn gather(t: &Targets) -> anyhow::Result<Inputs> {
    let http = reqwest::Client::builder()
        .timeout(t.timeout)
        .build()
        .map_err(|e| anyhow::anyhow!("cannot build an HTTP client: {e}"))?;
    let admin_url = t.admin_url.trim_end_matches('/').to_string();
    let before = unix_ms(SystemTime::now());
    let intake = fetch_intake(&http, &admin_url).await;
    let after = unix_ms(SystemTime::now());
    let collector_clock = match &intake {
        Probe::Ok(r) => Some(ClockReading {
            local_before_ms: before,
            local_after_ms: after,
            remote_ms: r.now_ms,
            remote_resolution_ms: 0,
        }),
        Probe::Failed(_) => None,
    };
    let (rbac, apiserver_clock) = match &t.kubeconfig {
        None => (None, None),
        Some(path) => {
            let name = if t.cluster.is_empty() {
                "(doctor)"
            } else {
                &t.cluster
            };
            match watch::client_from_kubeconfig(name, path).await {
                Err(e) => {
                    let msg = crate::messages::error_chain(&e);
                    (Some(Probe::Failed(msg.clone())), Some(Probe::Failed(msg)))
                }
                Ok(client) => {
                    let clock = apiserver_clock(&client, t.timeout).await;
                    let rbac = access(&client, name, &t.watch_exclude, t.timeout).await;
                    (Some(rbac), Some(clock))
                }
            }
        }
    };
    let frontend = match &t.frontend_url {
        None => None,
        Some(url) => Some(fetch_frontend(&http, url.trim_end_matches('/')).await),
    };
    Ok(Inputs {
        schema: INPUTS_SCHEMA.to_string(),
        cluster: t.cluster.clone(),
        admin_url: shown_url(&admin_url),
        intake,
        collector_clock,
        kubeconfig: t.kubeconfig.as_ref().map(|p| p.display().to_string()),
        rbac,
        apiserver_clock,
        frontend_url: t.frontend_url.as_deref().map(shown_url),
        frontend,
        now_ms: unix_ms(SystemTime::now()),
    })
}

/// `url` as it may be shown: credentials in it (`user:password@`) masked.
pub(crate) fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("***");
            let _ = u.set_password(None);
            u.as_str().trim_end_matches('/').to_string()
        }
        _ => url.to_string(),
    }
}

/// A reqwest error without its URL (which may carry credentials; the
/// report names the address already).
fn http_error(e: reqwest::Error) -> String {
    crate::messages::error_chain(&e.without_url())
}

async fn read_capped(mut resp: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(http_error)? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!("answer larger than {MAX_ANSWER_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

async fn fetch_intake(http: &reqwest::Client, admin_url: &str) -> Probe<IntakeReport> {
    let url = format!("{admin_url}/intake");
    let resp = match http.get(&url).send().await {
        Ok(r) => r,
        Err(e) => return Probe::Failed(http_error(e)),
    };
    let status = resp.status();
    let body = match read_capped(resp).await {
        Ok(b) => b,
        Err(e) => return Probe::Failed(e),
    };
    if !status.is_success() {
        return Probe::Failed(format!(
            "answered {status}: {}",
            crate::messages::clip_message(String::from_utf8_lossy(&body).trim().to_string())
        ));
    }
    match serde_json::from_slice(&body) {
        Ok(r) => Probe::Ok(r),
        Err(e) => Probe::Failed(format!("the answer is not kascade's intake report: {e}")),
    }
}

async fn fetch_frontend(http: &reqwest::Client, url: &str) -> Probe<FrontendProbe> {
    let resp = match http.get(format!("{url}/readyz/raw")).send().await {
        Ok(r) => r,
        Err(e) => return Probe::Failed(http_error(e)),
    };
    let status = resp.status().as_u16();
    match read_capped(resp).await {
        Ok(body) => Probe::Ok(FrontendProbe {
            status,
            body: crate::messages::clip_message(String::from_utf8_lossy(&body).into_owned()),
        }),
        Err(e) => Probe::Failed(e),
    }
}

/// The apiserver's `Date` header on `GET /version`, read on our clock.
async fn apiserver_clock(client: &kube::Client, timeout: Duration) -> Probe<ClockReading> {
    let req = match axum::http::Request::get("/version").body(kube::client::Body::empty()) {
        Ok(r) => r,
        Err(e) => return Probe::Failed(e.to_string()),
    };
    let before = unix_ms(SystemTime::now());
    let resp = match tokio::time::timeout(timeout, client.send(req)).await {
        Err(_) => return Probe::Failed(format!("no answer within {timeout:?}")),
        Ok(Err(e)) => return Probe::Failed(crate::messages::error_chain(&e)),
        Ok(Ok(r)) => r,
    };
    let after = unix_ms(SystemTime::now());
    let Some(date) = resp
        .headers()
        .get(axum::http::header::DATE)
        .and_then(|v| v.to_str().ok())
    else {
        return Probe::Failed("the apiserver's answer has no Date header".to_string());
    };
    match httpdate::parse_http_date(date) {
        Ok(t) => Probe::Ok(ClockReading {
            local_before_ms: before,
            local_after_ms: after,
            remote_ms: unix_ms(t),
            remote_resolution_ms: 1000,
        }),
        Err(e) => Probe::Failed(format!("Date header {date:?}: {e}")),
    }
}

/// SelfSubjectAccessReviews of list and watch, in every namespace, for
/// each resource the list-watch would watch (and Events).
async fn access(
    client: &kube::Client,
    cluster: &str,
    exclude: &HashSet<String>,
    timeout: Duration,
) -> Probe<Vec<ResourceAccess>> {
    let watched = match tokio::time::timeout(
        timeout * 3,
        watch::watched_resources(cluster, client, &HashSet::new(), exclude),
    )
    .await
    {
        Err(_) => {
            return Probe::Failed(format!("API discovery took longer than {:?}", timeout * 3));
        }
        Ok(Err(e)) => return Probe::Failed(crate::messages::error_chain(&e)),
        Ok(Ok(w)) => w,
    };
    let resources: Vec<kube::api::ApiResource> =
        watched.objects.into_iter().chain(watched.events).collect();
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let reviews = futures::stream::iter(resources.into_iter().map(|ar| {
        let api = api.clone();
        async move {
            let ask = |verb: &str| SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(ar.group.clone()),
                        resource: Some(ar.plural.clone()),
                        verb: Some(verb.to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let mut allowed = [false; 2];
            let mut reason = String::new();
            for (i, verb) in ["list", "watch"].into_iter().enumerate() {
                let answer =
                    tokio::time::timeout(timeout, api.create(&PostParams::default(), &ask(verb)))
                        .await
                        .map_err(|_| format!("no answer within {timeout:?}"))
                        .and_then(|r| r.map_err(|e| crate::messages::error_chain(&e)))?;
                let status = answer.status.unwrap_or_default();
                allowed[i] = status.allowed;
                if !status.allowed && reason.is_empty() {
                    reason = status
                        .evaluation_error
                        .filter(|e| !e.is_empty())
                        .or(status.reason)
                        .unwrap_or_default();
                }
            }
            Ok::<_, String>(ResourceAccess {
                resource: watch::watched_name(&ar),
                list: allowed[0],
                watch: allowed[1],
                reason: crate::messages::clip_message(reason),
            })
        }
    }))
    .buffer_unordered(REVIEWS_AT_ONCE)
    .collect::<Vec<_>>()
    .await;
    let mut out = Vec::with_capacity(reviews.len());
    for r in reviews {
        match r {
            Ok(a) => out.push(a),
            Err(e) => return Probe::Failed(format!("SelfSubjectAccessReview: {e}")),
        }
    }
    out.sort_by(|a, b| a.resource.cmp(&b.resource));
    Probe::Ok(out)
}
