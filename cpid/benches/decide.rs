//! What `kascade-cpid` adds to a reconcile: reading the CPID annotations of
//! the objects it observed, deciding, and stamping the object it writes;
//! for a merge also handing the mergelog to the background sender (a
//! channel send; the HTTP request is not on the reconcile's path).
//!
//! Run: `cargo bench -p kascade-cpid --bench decide` (README, Benchmarks).

use std::collections::BTreeMap;

use criterion::{Criterion, criterion_group, criterion_main};
use kascade_cpid::{ANCESTORS_ANNOTATION, CPID_ANNOTATION, Config, Cpid, Tracer};
use kube_core::ObjectMeta;

fn meta(cpid: Cpid, ancestors: &[Cpid]) -> ObjectMeta {
    let mut a = BTreeMap::from([
        (CPID_ANNOTATION.to_string(), cpid.to_string()),
        // The annotations a real object carries besides.
        (
            "deployment.kubernetes.io/revision".to_string(),
            "3".to_string(),
        ),
        (
            "kubectl.kubernetes.io/restartedAt".to_string(),
            "2026-11-24T04:00:00Z".to_string(),
        ),
    ]);
    if !ancestors.is_empty() {
        let list: Vec<String> = ancestors.iter().map(Cpid::to_string).collect();
        a.insert(ANCESTORS_ANNOTATION.to_string(), list.join(","));
    }
    ObjectMeta {
        name: Some("web".into()),
        namespace: Some("default".into()),
        annotations: Some(a),
        ..ObjectMeta::default()
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _guard = rt.enter();
    // A sender whose endpoint does not answer: mergelogs are queued (then
    // dropped when the buffer is full), never awaited by the reconcile.
    let tracer = Tracer::new(Config::new("http://127.0.0.1:9").buffer(1 << 20));
    let (a, b) = (Cpid::new_random(), Cpid::new_random());
    let m = Cpid::new_random();
    let source = meta(a, &[]);
    let other = meta(b, &[]);
    let merged_target = meta(m, &[a, b]);
    let same = meta(a, &[]);
    let mut g = c.benchmark_group("reconcile");
    g.bench_function("inherit (2 objects, 1 CPID)", |x| {
        x.iter(|| {
            let mut p = tracer.propagation();
            p.observe_meta(&source).observe_meta(&same);
            let mut out = ObjectMeta::default();
            p.decide().stamp(&mut out);
            out
        })
    });
    g.bench_function("covered by ancestors (3 objects)", |x| {
        x.iter(|| {
            let mut p = tracer.propagation();
            p.observe_meta(&source)
                .observe_meta(&other)
                .observe_meta(&merged_target);
            let mut out = ObjectMeta::default();
            p.decide().stamp(&mut out);
            out
        })
    });
    g.bench_function("merge (2 objects, mergelog queued)", |x| {
        x.iter(|| {
            let mut p = tracer.propagation();
            p.observe_meta(&source).observe_meta(&other);
            let mut out = ObjectMeta::default();
            p.decide().stamp(&mut out);
            out
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
