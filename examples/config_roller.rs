//! config-roller: a small kube-rs controller instrumented with `kascade-cpid`.
//!
//! A Deployment annotated `config-roller.kascade.io/configmap: <name>` is
//! rolled (its Pod template gets the ConfigMap's content hash) whenever that
//! ConfigMap in its namespace changes. The roll carries the change's CPID:
//!
//! - the ConfigMap's change alone → its CPID is inherited;
//! - the Deployment was also changed by someone else since the last roll
//!   (its CPID is not the one this controller last stamped) → both changes
//!   are in the new rollout: they are merged into a new CPID, and the
//!   mergelog goes to kascade.
//!
//! ```sh
//! cargo run --example config_roller -- --kascade-url https://kascade:8090 \
//!     --token-file token --ca-file ca.crt
//! ```
//!
//! (Uses the kubeconfig of the environment, like kubectl.)

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kascade_cpid::{CPID_ANNOTATION, Config, Tracer};
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

/// The Deployment names its ConfigMap here.
const CONFIGMAP: &str = "config-roller.kascade.io/configmap";
/// The Pod template's hash of the ConfigMap it was rolled for.
const HASH: &str = "config-roller.kascade.io/hash";
/// The CPID this controller last stamped on the Deployment (in the template,
/// so a user's change of the Deployment's own annotation shows up).
const ROLLED_CPID: &str = "config-roller.kascade.io/cpid";

struct Context {
    client: Client,
    tracer: Tracer,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
}

fn content_hash(cm: &ConfigMap) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    cm.data.hash(&mut h);
    cm.binary_data
        .as_ref()
        .map(|b| b.iter().map(|(k, v)| (k, &v.0)).collect::<Vec<_>>())
        .hash(&mut h);
    format!("{:016x}", h.finish())
}

fn template_annotation<'a>(d: &'a Deployment, key: &str) -> Option<&'a str> {
    d.spec
        .as_ref()?
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

async fn reconcile(cached: Arc<Deployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = cached.namespace().unwrap_or_default();
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    // Read again: the cache may not show a change made just before the
    // ConfigMap's, and a change missed here would be missing from the merge.
    let Some(d) = deployments.get_opt(&cached.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let Some(cm_name) = d.annotations().get(CONFIGMAP) else {
        return Ok(Action::await_change());
    };
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(cm) = cms.get_opt(cm_name).await? else {
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    let hash = content_hash(&cm);
    if template_annotation(&d, HASH) == Some(hash.as_str()) {
        return Ok(Action::await_change());
    }
    // What this rollout reflects: the ConfigMap's change, and the
    // Deployment's own if someone changed it since the last roll.
    let mut propagation = ctx.tracer.propagation();
    propagation.observe(&cm);
    let own = d.annotations().get(CPID_ANNOTATION).map(String::as_str);
    if own.is_some() && own != template_annotation(&d, ROLLED_CPID) {
        propagation.observe(&d);
    }
    let decision = propagation.decide();
    let mut meta = ObjectMeta::default();
    decision.stamp(&mut meta);
    let mut template = BTreeMap::from([(HASH.to_string(), hash.clone())]);
    if let Some(cpid) = decision.cpid() {
        template.insert(ROLLED_CPID.to_string(), cpid.to_string());
    }
    let patch = serde_json::json!({
        "metadata": { "annotations": meta.annotations.unwrap_or_default() },
        "spec": { "template": { "metadata": { "annotations": template } } },
    });
    deployments
        .patch(
            &d.name_any(),
            &PatchParams {
                field_manager: Some("config-roller".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(&patch),
        )
        .await?;
    tracing::info!(deployment = %d.name_any(), configmap = %cm_name, %hash,
        outcome = ?decision.outcome, cpid = ?decision.cpid(), "rolled");
    Ok(Action::await_change())
}

fn error_policy(_d: Arc<Deployment>, e: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %e, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

struct Args {
    kascade_url: Option<String>,
    token_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
}

fn args() -> Args {
    let mut a = Args {
        kascade_url: None,
        token_file: None,
        ca_file: None,
        client_cert: None,
        client_key: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next();
        match flag.as_str() {
            "--kascade-url" => a.kascade_url = value,
            "--token-file" => a.token_file = value.map(PathBuf::from),
            "--ca-file" => a.ca_file = value.map(PathBuf::from),
            "--client-cert" => a.client_cert = value.map(PathBuf::from),
            "--client-key" => a.client_key = value.map(PathBuf::from),
            other => {
                eprintln!("unknown flag {other}");
                std::process::exit(2);
            }
        }
    }
    a
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let a = args();
    let mut config = match a.kascade_url {
        Some(url) => Config::new(url),
        None => Config::default(),
    }
    .controller("config-roller");
    if let Some(f) = a.token_file {
        config = config.token(std::fs::read_to_string(f)?.trim());
    }
    if let Some(f) = a.ca_file {
        config = config.ca_pem(std::fs::read(f)?);
    }
    if let (Some(c), Some(k)) = (a.client_cert, a.client_key) {
        let mut pem = std::fs::read(c)?;
        pem.extend(std::fs::read(k)?);
        config = config.identity_pem(pem);
    }
    let client = Client::try_default().await?;
    let ctx = Arc::new(Context {
        client: client.clone(),
        tracer: Tracer::new(config),
    });
    let deployments: Api<Deployment> = Api::all(client.clone());
    let controller = Controller::new(deployments, watcher::Config::default());
    let store = controller.store();
    tracing::info!("config-roller running");
    controller
        .watches(
            Api::<ConfigMap>::all(client),
            watcher::Config::default(),
            move |cm: ConfigMap| {
                let ns = cm.namespace().unwrap_or_default();
                let name = cm.name_any();
                store
                    .state()
                    .into_iter()
                    .filter(|d| {
                        d.namespace().as_deref() == Some(ns.as_str())
                            && d.annotations().get(CONFIGMAP) == Some(&name)
                    })
                    .map(|d| ObjectRef::from_obj(d.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| async {})
        .await;
    ctx.tracer.flush().await;
    Ok(())
}
