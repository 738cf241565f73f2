//! Cost of one OTLP push's CPU work against the `/metrics` encoding of the same generation, in
//! the same run: the simulated DGX H100 (8 GPUs, one poll of the `sim` source, the default
//! series profile), a fresh generation per iteration (nothing cached). The network is not
//! timed: `push_once` against a collector adds one request on a thread of its own.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use dgx_pixels_exposition::{EncodeOptions, Format, SnapshotStore};
use dgx_pixels_metrics::{Snapshot, Source, SourceHealth};
use dgx_pixels_otlp::{PushConfig, PushCounters, Pusher};
use dgx_pixels_sim::{Node, Scenario};
use dgx_pixels_sim_source::SimSource;

fn bench(c: &mut Criterion) {
    let scenario = Scenario::builtin("dgx-h100").expect("built-in scenario");
    let mut sim = SimSource::new(Node::new(scenario));
    let output = sim.poll().expect("a simulated poll");
    let snapshot = Snapshot {
        source: "sim".into(),
        health: SourceHealth {
            up: true,
            polls: 1,
            ..Default::default()
        },
        output,
    };
    let store = Arc::new(SnapshotStore::new(
        &["sim"],
        vec![],
        EncodeOptions::default(),
    ));
    let fresh = || {
        store.publish(snapshot.clone());
        store.current()
    };
    for gzip in [false, true] {
        let vars = if gzip { "gzip" } else { "none" };
        let config = PushConfig::from_env(Some("http://127.0.0.1:9/v1/metrics"), |k| {
            (k == "OTEL_EXPORTER_OTLP_COMPRESSION").then(|| vars.to_string())
        })
        .expect("config");
        let pusher = Pusher {
            store: Arc::clone(&store),
            config,
            resource: vec![("service.name".into(), "dgx-pixels-exporter".into())],
            start: SystemTime::now(),
            counters: Arc::new(PushCounters::default()),
        };
        let name = if gzip { "otlp_body_gzip" } else { "otlp_body" };
        // `body` converts and encodes the store's current generation: published untimed.
        c.bench_function(name, |b| {
            b.iter_batched(
                || store.publish(snapshot.clone()),
                |()| pusher.body().len(),
                BatchSize::SmallInput,
            )
        });
        println!("{name}: {} bytes", pusher.body().len());
    }
    c.bench_function("metrics_text", |b| {
        b.iter_batched(
            fresh,
            |g| g.exposition(Format::Text, false).len(),
            BatchSize::SmallInput,
        )
    });
    c.bench_function("metrics_openmetrics_gzip", |b| {
        b.iter_batched(
            fresh,
            |g| g.exposition(Format::OpenMetrics, true).len(),
            BatchSize::SmallInput,
        )
    });
    let text = store.current().exposition(Format::Text, false);
    println!(
        "metrics_text: {} bytes, {} series",
        text.len(),
        text.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty() && l[0] != b'#')
            .count()
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
