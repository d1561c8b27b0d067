//! Unit tests of `watch`.

use super::*;
use axum::http::{Request, Response};

/// The custom resource `e2e/scenarios/deep.sh` writes (its `spec.tree`
/// nests 9,000 levels, under the apiserver's 10,000), as the apiserver
/// serves it: with the metadata it adds.
fn deep_thing(resource_version: u32) -> String {
    let depth = 9000;
    format!(
        r#"{{"apiVersion":"e2e.kascade.io/v1","kind":"DeepThing","metadata":{{"name":"deep","namespace":"deep-demo","uid":"5d6f0c1e-9d47-4bd4-a3a5-7f1d8b8f1c2e","resourceVersion":"{resource_version}","generation":1}},"spec":{{"tree":{}1{}}}}}"#,
        r#"{"a":"#.repeat(depth),
        "}".repeat(depth)
    )
}

/// An apiserver serving the list (the deep object beside a plain one),
/// then one watch event modifying the deep object, then empty watches.
fn client() -> kube::Client {
    let watched = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let watched = watched.clone();
        async move {
            let watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
            let body = if !watch {
                let plain = r#"{"apiVersion":"e2e.kascade.io/v1","kind":"DeepThing","metadata":{"name":"plain","namespace":"deep-demo","uid":"0b7a3c55-4f0e-4a57-9bd8-e0b0c4b5d1a2","resourceVersion":"99"},"spec":{"tree":1}}"#;
                format!(
                    r#"{{"apiVersion":"e2e.kascade.io/v1","kind":"DeepThingList","metadata":{{"resourceVersion":"100"}},"items":[{plain},{}]}}"#,
                    deep_thing(100)
                )
            } else if !watched.swap(true, std::sync::atomic::Ordering::SeqCst) {
                format!("{{\"type\":\"MODIFIED\",\"object\":{}}}\n", deep_thing(101))
            } else {
                tokio::time::sleep(Duration::from_secs(60)).await;
                String::new()
            };
            Ok::<_, std::convert::Infallible>(Response::new(kube::client::Body::from(
                body.into_bytes(),
            )))
        }
    });
    kube::Client::new(service, "default")
}

/// A listed or watched object nested deeper than serde_json's 128
/// levels reaches processing, its deep part a marker counted as the
/// audit path counts it; the watch goes on with no error.
#[tokio::test]
async fn an_object_nested_deeper_than_serde_json_reads_is_watched_with_a_marker() {
    let ar = ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("e2e.kascade.io", "v1", "DeepThing"),
        "deepthings",
    );
    let metrics = Arc::new(Metrics::default());
    let (intake, mut rx) = Intake::new(16, metrics.queue_depth.clone());
    let cfg = WatchConfig {
        cluster: "c1".into(),
        kubeconfig: PathBuf::new(),
        include: HashSet::new(),
        exclude: HashSet::new(),
        event_max_age: Duration::from_secs(3600),
        watch_events: false,
        admissions: None,
    };
    let task = tokio::spawn(watch_objects(cfg, client(), ar, intake, metrics.clone()));
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let work = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "only {seen:?} reached processing; watch errors: {}",
                    metrics
                        .watch_errors
                        .get_or_create(&Metrics::cluster("c1"))
                        .get()
                )
            })
            .expect("the watch goes on");
        let Work::Watch(change) = work else {
            continue;
        };
        let text = crate::json::to_text(&change.state);
        let name = change.object.name.clone();
        if name == "deep" {
            assert!(
                text.contains(r#""<nested deeper than 64 levels: "#),
                "{}",
                &text[..text.len().min(300)]
            );
            assert!(text.contains(r#""kind":"DeepThing""#));
        }
        seen.push((name, change.kind));
    }
    task.abort();
    assert_eq!(
        seen,
        vec![
            ("plain".to_string(), WatchKind::Listed),
            ("deep".to_string(), WatchKind::Listed),
            ("deep".to_string(), WatchKind::Modified),
        ]
    );
    let label = Metrics::cluster("c1");
    assert_eq!(metrics.deep_values.get_or_create(&label).get(), 2);
    assert_eq!(metrics.watch_errors.get_or_create(&label).get(), 0);
}
