//! Encoding cost of external (workload) families: an image-generation workload's images
//! counter, latency histogram (15 buckets, sum, count) and batch size per GPU, as a textfile or
//! the simulated workload hands them over, for 4 and 64 GPUs. Compare with `--bench encode`,
//! which measures the catalog families of the same generation.

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use dgx_pixels_exposition::{EncodeOptions, Format, SnapshotStore};
use dgx_pixels_metrics::{
    ExternalFamily, ExternalKind, ExternalSample, PollOutput, Snapshot, SourceHealth,
};

fn families(gpus: u32) -> Vec<ExternalFamily> {
    let labels = |i: u32| -> Vec<(String, String)> {
        vec![
            ("gpu".into(), i.to_string()),
            (
                "uuid".into(),
                format!("GPU-{i:08x}-0000-0000-0000-000000000000"),
            ),
            ("model".into(), "sdxl-turbo".into()),
            ("lora".into(), "pixel-art-v2".into()),
            ("dataset".into(), "pixels-16x16".into()),
        ]
    };
    let sample =
        |name: &str, labels: Vec<(String, String)>, value| ExternalSample::new(name, labels, value);
    let mut images = Vec::new();
    let mut latency = Vec::new();
    let mut batch = Vec::new();
    let name = "dgx_pixels_workload_generation_latency_seconds";
    for i in 0..gpus {
        images.push(sample(
            "dgx_pixels_workload_images_generated_total",
            labels(i),
            123456.0,
        ));
        for (k, le) in [
            "0.025", "0.05", "0.1", "0.15", "0.175", "0.2", "0.225", "0.25", "0.3", "0.5", "1",
            "2.5", "5", "10", "+Inf",
        ]
        .iter()
        .enumerate()
        {
            let mut l = labels(i);
            l.push(("le".into(), le.to_string()));
            latency.push(sample(&format!("{name}_bucket"), l, 1000.0 * k as f64));
        }
        latency.push(sample(&format!("{name}_sum"), labels(i), 18432.25));
        latency.push(sample(&format!("{name}_count"), labels(i), 123456.0));
        batch.push(sample("dgx_pixels_workload_batch_size", labels(i), 4.0));
    }
    let family = |name: &str, kind, samples| ExternalFamily {
        name: name.into(),
        help: "Help.".into(),
        kind,
        samples,
    };
    vec![
        family(
            "dgx_pixels_workload_images_generated_total",
            ExternalKind::Counter,
            images,
        ),
        family(name, ExternalKind::Histogram, latency),
        family("dgx_pixels_workload_batch_size", ExternalKind::Gauge, batch),
    ]
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("external");
    for gpus in [4u32, 64] {
        let store = SnapshotStore::new(&["textfile"], vec![], EncodeOptions::default());
        let snap = Snapshot {
            source: "textfile".into(),
            health: SourceHealth {
                up: true,
                polls: 1,
                ..Default::default()
            },
            output: PollOutput {
                external: Arc::new(families(gpus)),
                ..PollOutput::default()
            },
        };
        let fams = &snap.output.external;
        for (name, format, gzip) in [
            ("new_generation_text", Format::Text, false),
            ("new_generation_openmetrics", Format::OpenMetrics, false),
            ("new_generation_openmetrics_gzip", Format::OpenMetrics, true),
        ] {
            group.bench_with_input(BenchmarkId::new(name, gpus), &gpus, |b, _| {
                b.iter(|| {
                    store.publish(snap.clone());
                    store.current().exposition(format, gzip).len()
                })
            });
        }
        let body = store.current().exposition(Format::Text, false);
        println!(
            "{gpus} GPUs: {} workload series, {} bytes text",
            fams.iter().map(|f| f.samples.len()).sum::<usize>(),
            body.len()
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
