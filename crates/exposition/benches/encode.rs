//! Encoding cost of one snapshot generation for 8 and 64 GPUs with every GPU reading present:
//! the worst case of a scrape (a generation nobody has encoded yet), and the cached case.

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use dgx_pixels_exposition::{EncodeOptions, Format, Generation, SnapshotStore};
use dgx_pixels_metrics::Snapshot;

mod common;
use common::snapshot;

/// Publishes a copy of `snap` and returns the new, not yet encoded, generation.
fn fresh(store: &SnapshotStore, snap: &Snapshot) -> Arc<Generation> {
    store.publish(snap.clone());
    store.current()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("scrape");
    for gpus in [8u32, 64] {
        let store = Arc::new(SnapshotStore::new(
            &["nvml"],
            vec![],
            EncodeOptions::default(),
        ));
        let snap = snapshot(gpus);
        // A fresh generation per iteration, encoded (+ gzip): what the first scrape after a poll
        // pays. Building and publishing the snapshot happen on the source's thread: untimed.
        for (name, format, gzip) in [
            ("new_generation_text", Format::Text, false),
            ("new_generation_openmetrics", Format::OpenMetrics, false),
            ("new_generation_openmetrics_gzip", Format::OpenMetrics, true),
        ] {
            group.bench_with_input(BenchmarkId::new(name, gpus), &gpus, |b, _| {
                b.iter_batched_ref(
                    || fresh(&store, &snap),
                    |generation| generation.exposition(format, gzip).len(),
                    BatchSize::SmallInput,
                )
            });
        }
        // The lean profile (`--metrics.detail=lean`): the same readings, fewer series written.
        let lean = Arc::new(SnapshotStore::new(
            &["nvml"],
            vec![],
            EncodeOptions {
                detail: dgx_pixels_metrics::catalog::Detail::Lean,
                ..EncodeOptions::default()
            },
        ));
        for (name, format, gzip) in [
            ("new_generation_text_lean", Format::Text, false),
            (
                "new_generation_openmetrics_gzip_lean",
                Format::OpenMetrics,
                true,
            ),
        ] {
            group.bench_with_input(BenchmarkId::new(name, gpus), &gpus, |b, _| {
                b.iter_batched_ref(
                    || fresh(&lean, &snap),
                    |generation| generation.exposition(format, gzip).len(),
                    BatchSize::SmallInput,
                )
            });
        }
        group.bench_with_input(
            BenchmarkId::new("cached_generation", gpus),
            &gpus,
            |b, _| {
                store.publish(snap.clone());
                b.iter(|| store.current().exposition(Format::OpenMetrics, true).len())
            },
        );
        let body = store.current().exposition(Format::Text, false);
        println!(
            "{gpus} GPUs: {} series, {} bytes text, {} bytes gzip",
            body.split(|b| *b == b'\n')
                .filter(|l| !l.is_empty() && l[0] != b'#')
                .count(),
            body.len(),
            store.current().exposition(Format::Text, true).len()
        );
    }
    group.finish();
}

/// A kubernetes snapshot (up) and its attribution set: `pods` pods spread over 8 GPUs,
/// time-sliced when there are more pods than GPUs.
fn pods(pods: u32) -> Snapshot {
    common::pods(pods, 8)
}

/// Scrape cost of 8 GPUs with and without pod attribution (the join runs when a generation is
/// encoded; a cached scrape serves bytes either way).
fn attribution(c: &mut Criterion) {
    let mut group = c.benchmark_group("attribution");
    let snap = snapshot(8);
    for (name, pod_count) in [
        ("off", None),
        ("64_pods_shared", Some(64)),
        ("8_pods_exclusive", Some(8)),
    ] {
        let store = match pod_count {
            None => SnapshotStore::new(&["nvml"], vec![], EncodeOptions::default()),
            Some(n) => {
                let store =
                    SnapshotStore::new(&["nvml", "kubernetes"], vec![], EncodeOptions::default());
                store.publish(pods(n));
                store
            }
        };
        group.bench_function(
            BenchmarkId::new("new_generation_openmetrics_gzip", name),
            |b| {
                b.iter_batched_ref(
                    || fresh(&store, &snap),
                    |generation| generation.exposition(Format::OpenMetrics, true).len(),
                    BatchSize::SmallInput,
                )
            },
        );
        group.bench_function(BenchmarkId::new("cached_generation", name), |b| {
            store.publish(snap.clone());
            b.iter(|| store.current().exposition(Format::OpenMetrics, true).len())
        });
        let body = store.current().exposition(Format::Text, false);
        println!(
            "attribution {name}: {} series, {} bytes text",
            body.split(|b| *b == b'\n')
                .filter(|l| !l.is_empty() && l[0] != b'#')
                .count(),
            body.len(),
        );
    }
    group.finish();
    paired(&snap);
}

/// On a shared, loaded machine criterion's sequential runs drift with the load. This pairs
/// them: each round encodes a fresh generation with attribution off, then with 64 time-sliced
/// pods, with 8 exclusive pods, and with 64 shared pods carrying 8 pod labels each (the most
/// `[kubernetes] pod_labels` takes), in rotating order, so load changes hit every variant
/// alike. Prints the median and 90th percentile of each.
fn paired(snap: &Snapshot) {
    let stores: Vec<(&str, SnapshotStore)> = [
        ("off", None),
        ("64_pods_shared", Some((64, 0))),
        ("8_pods_exclusive", Some((8, 0))),
        ("64_pods_shared_8_pod_labels", Some((64, 8))),
    ]
    .into_iter()
    .map(|(name, n)| {
        let store = match n {
            None => SnapshotStore::new(&["nvml"], vec![], EncodeOptions::default()),
            Some((n, labels)) => {
                let store =
                    SnapshotStore::new(&["nvml", "kubernetes"], vec![], EncodeOptions::default());
                store.publish(common::labelled_pods(n, 8, labels));
                store
            }
        };
        (name, store)
    })
    .collect();
    let rounds = 1500;
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); stores.len()];
    for round in 0..rounds {
        for k in 0..stores.len() {
            let i = (round + k) % stores.len();
            let store = &stores[i].1;
            let generation = fresh(store, snap);
            let start = std::time::Instant::now();
            criterion::black_box(generation.exposition(Format::OpenMetrics, true).len());
            times[i].push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    for ((name, _), t) in stores.iter().zip(times.iter_mut()) {
        t.sort_by(f64::total_cmp);
        println!(
            "paired new_generation_openmetrics_gzip/{name}: median {:.0} µs, p90 {:.0} µs ({rounds} rounds)",
            t[t.len() / 2],
            t[t.len() * 9 / 10]
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench, attribution
}
criterion_main!(benches);
