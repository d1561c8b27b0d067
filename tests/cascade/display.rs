//! Display mode `cascade` and `kascade trace --mode cascade`.

use super::*;

#[tokio::test]
async fn display_mode_cascade_lays_out_the_patch_as_a_tree_of_writes() {
    let (f, range) = frontend("deployment").await;
    let t = search(
        &f,
        range,
        &[
            ("resource", "deployments"),
            ("namespace", "default"),
            ("name", "hello"),
        ],
    )
    .await;
    let all = spans(&t);
    let by_id: HashMap<Vec<u8>, &Span> = all.iter().map(|(_, s)| (s.span_id.clone(), s)).collect();
    // The cascades hang under one span, the trace's only root, named by
    // the latest cascade (none failed).
    let tops: Vec<&Span> = all
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(
        tops.len(),
        1,
        "{:?}",
        tops.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let top = tops[0];
    assert!(
        top.name.starts_with("default/hello: ") && top.name.contains(" cascades, latest: "),
        "{}",
        top.name
    );
    assert!(top.status.is_none(), "{:?}", top.status);
    let root = all
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.parent_span_id == top.span_id && s.name.ends_with(PATCH))
        .expect("the image patch roots a cascade under the top span");
    assert_eq!(
        string_attr(&root.attributes, "cascade.complete"),
        Some("true")
    );
    let completion = string_attr(&root.attributes, "cascade.completion").unwrap();
    // The same as offline: the frontend read the writes back from the
    // collector's spans.
    let offline = cascades("deployment").await;
    let c = rooted_at(&offline, PATCH);
    assert_eq!(completion, format_duration(c.duration().unwrap()));
    // Every write of the cascade is a span below the root; each child
    // starts when its cause's response completed and ends with its own.
    let mut below = 0;
    for (service, s) in &all {
        // Below the patch's root (which is below the top span).
        let mut at = s;
        let mut under_root = false;
        while let Some(p) = by_id.get(&at.parent_span_id) {
            under_root |= p.span_id == root.span_id;
            at = p;
        }
        if !under_root {
            continue;
        }
        below += 1;
        let parent = by_id[&s.parent_span_id];
        // A retry of a refused write starts with its own request: the
        // wait before it is its writer's back-off.
        let starts_at = if int_attr(s, "cascade.attempt").is_some() {
            "request.received"
        } else {
            "response.completed"
        };
        let from = if starts_at == "request.received" {
            s
        } else {
            parent
        };
        let start =
            humantime::parse_rfc3339_weak(string_attr(&from.attributes, starts_at).unwrap())
                .unwrap();
        assert_eq!(
            from_nanos(s.start_time_unix_nano),
            start
                .min(from_nanos(s.end_time_unix_nano))
                .max(from_nanos(parent.start_time_unix_nano))
        );
        assert!(s.end_time_unix_nano <= parent.end_time_unix_nano);
        assert_eq!(
            string_attr(&s.attributes, "resource"),
            Some(service.as_str())
        );
        assert!(string_attr(&s.attributes, "cascade.edge").is_some());
    }
    assert_eq!(below, c.changes.len() - 1);
    // The critical path is marked in the name and as an attribute, on the
    // cascade the trace is titled by only.
    let critical: Vec<_> = all
        .iter()
        .filter(|(_, s)| string_attr(&s.attributes, "cascade.critical_path") == Some("true"))
        .collect();
    let latest = top.name.split(", latest: ").nth(1).unwrap();
    let titled = rooted_at(&offline, latest);
    assert!(titled.changes.len() > 1, "{latest}");
    assert!(critical.len() >= titled.critical_path.len());
    assert!(critical.iter().all(|(_, s)| s.name.starts_with("★ ")));
    let under = |s: &Span, root: &Span| {
        let mut at = s;
        loop {
            if at.span_id == root.span_id {
                return true;
            }
            match by_id.get(&at.parent_span_id) {
                Some(p) => at = p,
                None => return false,
            }
        }
    };
    if latest != PATCH {
        assert!(
            critical.iter().all(|(_, s)| !under(s, root)),
            "the patch's cascade is not the title's: no ★ in it"
        );
    }

    // Searching one of the new Pods finds the same cascade.
    let pod = c
        .changes
        .iter()
        .find(|x| x.object.resource == "pods" && x.verb == "create" && x.subresource.is_empty())
        .unwrap();
    let t = search(
        &f,
        range,
        &[
            ("resource", "pods"),
            ("namespace", "default"),
            ("name", &pod.object.name),
        ],
    )
    .await;
    let pod_spans = spans(&t);
    let roots: HashSet<&Vec<u8>> = pod_spans
        .iter()
        .filter(|(_, s)| s.parent_span_id.is_empty())
        .map(|(_, s)| &s.span_id)
        .collect();
    assert!(
        pod_spans.iter().any(|(_, s)| {
            (s.parent_span_id.is_empty() || roots.contains(&s.parent_span_id))
                && s.name.ends_with(PATCH)
        }),
        "the Pod's trace holds the patch's cascade"
    );
    assert!(t.cascades.iter().any(|x| change_name(x.root()) == PATCH));
}

#[tokio::test]
async fn an_incomplete_cascade_names_what_it_waits_for_on_its_root_span() {
    let (f, range) = frontend("unschedulable").await;
    let t = search(&f, range, &[("resource", "pods"), ("name", "stuck")]).await;
    let root = spans(&t)
        .into_iter()
        .map(|(_, s)| s)
        .find(|s| s.name.ends_with("create pods sched-demo/stuck"))
        .expect("root span");
    assert_eq!(
        string_attr(&root.attributes, "cascade.complete"),
        Some("false")
    );
    let waiting = string_attr(&root.attributes, "cascade.waiting_for").unwrap();
    assert!(
        waiting.starts_with("pods sched-demo/stuck Failed (Unschedulable: "),
        "{waiting}"
    );
    assert_eq!(root.status.as_ref().unwrap().code, 2);
}

#[test]
fn kascade_trace_mode_cascade_prints_the_tree_and_its_completion() {
    let trace = |format: &str| {
        common::succeeded(
            common::kascade()
                .args(["trace", "--resource", "deployments", "--namespace"])
                .args(["default", "--name", "hello", "--mode", "cascade"])
                .args(["--format", format])
                .arg(common::fixture_path("deployment", "audit.log")),
        )
    };
    let out = trace("text");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!(": {PATCH}  at ")), "{text}");
    assert!(text.contains("completed after "), "{text}");
    assert!(
        text.contains("[deployments → replicasets create, hop "),
        "{text}"
    );
    assert!(text.contains("[replicasets → pods create, hop "), "{text}");
    assert!(text.contains("[pods binding, hop "), "{text}");
    assert!(text.contains("[pods → Running, hop "), "{text}");
    assert!(text.contains("[replicasets → pods delete, hop "), "{text}");
    assert!(text.contains("★ critical path"), "{text}");

    let out = trace("otlp-json");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = json["resourceSpans"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rs| rs["scopeSpans"][0]["spans"].as_array().unwrap())
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(names.iter().any(|n| n.ends_with(PATCH)), "{names:?}");
}

/// The text's first line names the cascade that matters, as the UI's title
/// does: on the stuck rollout the user's patch that went wrong, on a healthy
/// rollout the latest, with no failure said.
#[test]
fn kascade_trace_mode_cascade_headline_names_the_cascade_that_matters_both_ways() {
    let headline = |fixture: &str, namespace: &str, name: &str| {
        let out = common::succeeded(
            common::kascade()
                .args(["trace", "--resource", "deploy", "--namespace", namespace])
                .args(["--name", name, "--mode", "cascade"])
                .arg(common::fixture_path(fixture, "audit.log")),
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let stuck = headline("rollout-stuck", "rollout-demo", "web");
    assert_eq!(
        stuck,
        "3 cascades; the latest to write deployments rollout-demo/web that went wrong is \
         cascade 2: kascade-e2e-admin patch deployments rollout-demo/web",
    );
    let healthy = headline("deployment", "default", "hello");
    assert!(
        healthy.contains("all complete without a failed write; the latest to write deployments default/hello is cascade"),
        "{healthy}"
    );
    assert!(!healthy.contains("went wrong"), "{healthy}");
}
