//! Writes processed by several shards find the causes file order gives.

use super::*;

#[tokio::test]
async fn writes_processed_by_different_shards_find_the_same_causes_as_in_file_order() {
    // Four shards: a Pod's write and its ReplicaSet's change are processed
    // in parallel; each write was noted as a candidate cause on arrival.
    let (srv, pipeline) = serve(|c| c.pipeline = c.pipeline.clone().workers(4)).await;
    let lines = common::audit_lines("deployment");
    post_in_batches(&srv.url, &lines, 25).await;
    pipeline.finish().await;
    let live = cascade_of_spans(&std::fs::read_to_string(&srv.out).unwrap());

    // The same lines through the processor alone, one at a time.
    let records = common::changes_of_lines(lines, "test").await;
    let names: std::collections::HashMap<String, String> = records
        .iter()
        .map(|c| {
            (
                c.span.span_hex(),
                format!(
                    "{} {} {} {}/{}",
                    c.user, c.verb, c.subresource, c.object.resource, c.object.name
                ),
            )
        })
        .collect();
    let in_order: std::collections::BTreeMap<String, (String, String)> = records
        .iter()
        .filter(|c| c.source == kascade::test_support::flow::ChangeSource::Audit)
        .map(|c| {
            let cause = c
                .cause
                .as_ref()
                .map(|k| k.span.span_hex())
                .unwrap_or_default();
            (c.span.span_hex(), (cause, c.role.as_str().to_string()))
        })
        .collect();
    assert!(in_order.values().any(|(cause, _)| !cause.is_empty()));
    let differ: Vec<_> = in_order
        .iter()
        .filter(|(span, v)| live.get(*span) != Some(v))
        .map(|(span, v)| {
            let live = live
                .get(span)
                .map(|l| names.get(&l.0).cloned().unwrap_or_default());
            format!(
                "{}: in order {:?}, live {live:?}",
                names[span],
                names.get(&v.0)
            )
        })
        .collect();
    assert!(
        differ.is_empty(),
        "{} of {} differ: {differ:#?}",
        differ.len(),
        in_order.len()
    );
}

#[tokio::test]
async fn writes_stamped_at_the_same_instant_take_causes_only_from_earlier_arrivals() {
    // An apiserver whose clock is coarse (or a log whose stamps were
    // rounded): every write received and completed at one instant. Which
    // came first is then known only from arrival order; a write that arrived
    // later must neither be chosen as a cause nor waited for (it may be
    // queued behind the effect, in the same shard).
    let (srv, pipeline) = serve(|c| c.pipeline = c.pipeline.clone().workers(2)).await;
    let lines: Vec<String> = common::audit_lines("deployment")
        .iter()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            for k in ["requestReceivedTimestamp", "stageTimestamp"] {
                v[k] = "2026-11-26T00:00:00.000000Z".into();
            }
            v.to_string()
        })
        .collect();
    post_in_batches(&srv.url, &lines, 50).await;
    pipeline.finish().await;
    let metrics = metrics_text(&srv.url).await;
    let live = cascade_of_spans(&std::fs::read_to_string(&srv.out).unwrap());

    // Arrival order of every write's span: the same lines one at a time.
    let records = common::changes_of_lines(lines, "test").await;
    let arrival: std::collections::HashMap<String, usize> = records
        .iter()
        .enumerate()
        .map(|(i, c)| (c.span.span_hex(), i))
        .collect();
    let effects: Vec<_> = live
        .iter()
        .filter(|(_, (cause, _))| !cause.is_empty())
        .collect();
    assert!(
        effects.len() > 10,
        "writes still find causes that arrived first: {}",
        effects.len()
    );
    for (span, (cause, _)) in effects {
        assert!(
            arrival[cause] < arrival[span],
            "the write at {} caused by the one that arrived later, at {}",
            arrival[span],
            arrival[cause]
        );
    }
    assert_eq!(
        metric(&metrics, "kascade_cascade_resolve_timeouts_total"),
        0,
        "no effect waited for its cause's cascade"
    );
}
