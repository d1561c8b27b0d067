//! The checks made through the cluster and the frontend, not the
//! collector's intake report: list-watch permissions, the apiserver's
//! clock, the frontend's raw store.

use super::super::{Inputs, Probe};
use super::{Check, NEEDED_RESOURCES, Status, check};
use crate::source::arrivals::IntakeReport;

pub(super) fn rbac(inputs: &Inputs, intake: Option<&IntakeReport>, cluster: &str) -> Check {
    const ID: &str = "watch-rbac";
    let Some(probe) = &inputs.rbac else {
        return check(
            ID,
            Status::Skip,
            "no --kubeconfig: list-watch permissions not checked",
        );
    };
    let access = match probe {
        Probe::Ok(a) => a,
        Probe::Failed(e) => {
            return check(ID, Status::Fail, format!("cannot ask the apiserver: {e}")).fix(
                "--kubeconfig must reach the cluster's apiserver as the identity the collector watches with \
                 (its --watch-cluster NAME=KUBECONFIG)",
            );
        }
    };
    let denied: Vec<&super::super::ResourceAccess> =
        access.iter().filter(|a| !(a.list && a.watch)).collect();
    let (broken, on_purpose): (Vec<_>, Vec<_>) = denied
        .into_iter()
        .partition(|a| NEEDED_RESOURCES.contains(&a.resource.as_str()));
    let forbidden_now = intake
        .and_then(|r| r.watch_forbidden.get(cluster))
        .copied()
        .unwrap_or(0);
    let mut c = if broken.is_empty() {
        check(
            ID,
            Status::Ok,
            format!(
                "list and watch allowed on every resource traces need ({} of {} served)",
                access.len() - on_purpose.len(),
                access.len()
            ),
        )
    } else {
        let list = broken
            .iter()
            .map(|a| {
                let verbs = match (a.list, a.watch) {
                    (false, false) => "list, watch",
                    (false, true) => "list",
                    _ => "watch",
                };
                format!("{} ({verbs})", a.resource)
            })
            .collect::<Vec<_>>()
            .join(", ");
        check(
            ID,
            Status::Fail,
            format!("the watch's identity may not list/watch: {list}"),
        )
        .detail("those objects' changes are missing from traces unless audit logs them")
        .fix(format!(
            "grant get, list and watch on them to the identity of --kubeconfig (the Helm chart's \
             ClusterRole `kascade-reader` (`<fullname>-reader`) has them): e.g. `kubectl create clusterrole kascade-extra --verb=get,list,watch --resource={}` \
             and bind it to that user or ServiceAccount; the collector checks again with backoff (≤ 5 min)",
            broken.iter().map(|a| a.resource.as_str()).collect::<Vec<_>>().join(",")
        ))
    };
    if !on_purpose.is_empty() {
        const SHOWN: usize = 8;
        let mut list = on_purpose
            .iter()
            .take(SHOWN)
            .map(|a| a.resource.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        if on_purpose.len() > SHOWN {
            list.push_str(&format!(" and {} more", on_purpose.len() - SHOWN));
        }
        c = c.detail(format!(
            "not readable, as the Helm chart's ClusterRole intends (Secrets on purpose): {list}"
        ));
    }
    if let Some(r) = intake {
        if !r.watched_clusters.iter().any(|w| w == cluster) {
            c = c.detail(format!(
                "the collector does not list-watch {cluster} (no --watch-cluster {cluster}=KUBECONFIG): \
                 traces show audit writes only, no Events"
            ));
        } else {
            c = c.detail(format!(
                "the collector's list-watch of {cluster} is refused {forbidden_now} resources right now, \
                 those not readable on purpose included (kascade_watch_forbidden_resources)"
            ));
        }
    }
    c
}

pub(super) fn clock_skew(inputs: &Inputs, max_skew_ms: i64) -> Check {
    const ID: &str = "clock-skew";
    let Some(api) = &inputs.apiserver_clock else {
        return check(
            ID,
            Status::Skip,
            "no --kubeconfig: apiserver clock not read",
        );
    };
    let api = match api {
        Probe::Ok(r) => r,
        Probe::Failed(e) => {
            return check(ID, Status::Skip, format!("apiserver clock not read: {e}"));
        }
    };
    let Some(col) = &inputs.collector_clock else {
        return check(ID, Status::Skip, "collector clock not read");
    };
    // apiserver − collector = (apiserver − doctor) − (collector − doctor).
    let (a_lo, a_hi) = api.offset_range();
    let (c_lo, c_hi) = col.offset_range();
    let (lo, hi) = (a_lo - c_hi, a_hi - c_lo);
    if lo > max_skew_ms || hi < -max_skew_ms {
        let (ahead, by) = if lo > 0 {
            ("ahead of", lo)
        } else {
            ("behind", -hi)
        };
        return check(
            ID,
            Status::Fail,
            format!(
                "the apiserver's clock is {ahead} the collector's by at least {:.1}s (more than {:.1}s)",
                by as f64 / 1000.0,
                max_skew_ms as f64 / 1000.0
            ),
        )
        .detail(
            "audit times are the apiserver's, watch and Event delivery times the collector's: \
             skew misorders causes and effects",
        )
        .fix("synchronise both hosts' clocks (NTP, chrony or systemd-timesyncd)");
    }
    check(
        ID,
        Status::Ok,
        format!(
            "apiserver − collector between {:.1}s and {:.1}s (the apiserver's Date header has whole seconds)",
            lo as f64 / 1000.0,
            hi as f64 / 1000.0
        ),
    )
}

pub(super) fn frontend(inputs: &Inputs) -> Check {
    const ID: &str = "frontend";
    let (Some(url), Some(probe)) = (&inputs.frontend_url, &inputs.frontend) else {
        return check(ID, Status::Skip, "no --frontend: not checked");
    };
    match probe {
        Probe::Ok(p) if p.status == 200 => {
            check(ID, Status::Ok, format!("{url} reaches its raw store"))
        }
        Probe::Ok(p) => check(
            ID,
            Status::Fail,
            format!("{url} cannot read its raw store: {}", p.body.trim()),
        )
        .fix(
            "the frontend's --jaeger-grpc-url (remote storage API) or --jaeger-url must reach the Jaeger \
             the collector exports to; see its log",
        ),
        Probe::Failed(e) => check(ID, Status::Fail, format!("cannot reach {url}: {e}")).fix(
            "--frontend must be the frontend's --http-listen address (/readyz/raw; a frontend older than \
             kascade doctor lacks it)",
        ),
    }
}
