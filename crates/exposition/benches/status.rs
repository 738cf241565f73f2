//! Cost of rendering the status page at `/` for 8 and 64 GPUs (every GPU reading present, a
//! health verdict per GPU, a failed source), measured beside what a first scrape of the same
//! generation pays to encode OpenMetrics, so the two compare within one run.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use dgx_pixels_exposition::status::{health_series, render, PageContext};
use dgx_pixels_exposition::{EncodeOptions, Format, SnapshotStore};
use dgx_pixels_metrics::{
    DeviceKey, Metric, PollErrorKind, Sample, Snapshot, SourceError, SourceHealth,
};

mod common;

/// The `health` source's verdicts for `gpus` GPUs: one unhealthy, the rest healthy.
fn verdicts(gpus: u32) -> Snapshot {
    let mut samples = Vec::new();
    for i in 0..gpus {
        let key = Arc::new(DeviceKey::gpu(
            i,
            format!("GPU-{i:08x}-0000-0000-0000-000000000000"),
        ));
        let (state, action, reason) = if i == 3 {
            ("unhealthy", "reset_gpu", "xid_79")
        } else {
            ("healthy", "none", "none")
        };
        for s in ["healthy", "degraded", "unhealthy", "unknown"] {
            let v = if s == state { 1.0 } else { 0.0 };
            samples.push(Sample::of(&key, health_series::STATE, [s], v));
        }
        samples.push(Sample::of(
            &key,
            health_series::ACTION,
            [action, reason],
            1.0,
        ));
    }
    Snapshot {
        source: "health".into(),
        health: SourceHealth {
            up: true,
            polls: 1,
            ..Default::default()
        },
        output: samples.into(),
    }
}

fn store(gpus: u32) -> SnapshotStore {
    let build = Sample::new(
        Metric::ExporterBuildInfo,
        ["0.1.0", "abc", "1.95", "simulated", "dgx-h100"],
        1.0,
    );
    let options = EncodeOptions {
        const_labels: vec![("node".into(), "dgx-01".into())],
        ..Default::default()
    };
    let store = SnapshotStore::new(&["health", "nvml", "textfile"], vec![build], options);
    store.publish(common::snapshot(gpus));
    store.publish(verdicts(gpus));
    store.publish(Snapshot::down(
        "textfile",
        SourceHealth {
            polls: 3,
            errors: 3,
            last_error: Some(SourceError::new(
                PollErrorKind::DirectoryUnreadable,
                "textfile directory /var/lib/dgx-pixels/textfile: cannot read: Permission denied (os error 13)",
                SystemTime::now(),
            )),
            ..Default::default()
        },
    ));
    store
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("status_page");
    let ctx = PageContext {
        telemetry_path: "/metrics",
        now: SystemTime::now(),
        uptime: Duration::from_secs(3600),
        refresh: Duration::from_secs(10),
    };
    for gpus in [8u32, 64] {
        let store = store(gpus);
        let generation = store.current();
        group.bench_with_input(BenchmarkId::new("render", gpus), &gpus, |b, _| {
            b.iter(|| render(&generation, &ctx).len())
        });
        // The same generation's first scrape, for comparison: a fresh generation each time.
        let nvml = common::snapshot(gpus);
        group.bench_with_input(
            BenchmarkId::new("encode_openmetrics_new_generation", gpus),
            &gpus,
            |b, _| {
                b.iter_batched_ref(
                    || {
                        store.publish(nvml.clone());
                        store.current()
                    },
                    |g| g.exposition(Format::OpenMetrics, false).len(),
                    BatchSize::SmallInput,
                )
            },
        );
        let page = render(&store.current(), &ctx);
        println!(
            "{gpus} GPUs: {} samples served, page {} bytes",
            store
                .current()
                .snapshots()
                .iter()
                .filter_map(|s| s.served())
                .map(|o| o.samples.len())
                .sum::<usize>(),
            page.len()
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
