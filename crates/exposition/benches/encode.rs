//! Encoding cost of one snapshot generation for 8 and 64 GPUs with every GPU reading present:
//! the worst case of a scrape (a generation nobody has encoded yet), and the cached case.

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use dgx_pixels_exposition::{EncodeOptions, Format, Generation, SnapshotStore};
use dgx_pixels_metrics::gpu::{
    push_gpu_samples, ClockReadout, EccTotals, GpuIdentity, GpuReadout, NvlinkReadout,
    ProcessReadout, RemappedRowsReadout,
};
use dgx_pixels_metrics::labels::{NvlinkErrorType, ThrottleReason, ViolationPolicy};
use dgx_pixels_metrics::{DeviceRef, Holder, PollOutput, Snapshot, SourceHealth};

fn snapshot(gpus: u32) -> Snapshot {
    let mut samples = Vec::new();
    for i in 0..gpus {
        let id = GpuIdentity {
            index: i,
            uuid: format!("GPU-{i:08x}-0000-0000-0000-000000000000"),
            model: "NVIDIA H100 80GB HBM3".into(),
            serial: format!("16500000{i:05}"),
            pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i),
            vbios_version: "96.00.74.00.0D".into(),
            driver_version: "550.54.15".into(),
            cuda_driver_version: "12.4".into(),
            minor_number: i,
        };
        let clocks = ClockReadout {
            graphics: Some(1.98e9),
            sm: Some(1.98e9),
            memory: Some(2.619e9),
            video: Some(1.755e9),
        };
        let r = GpuReadout {
            up: true,
            utilization_ratio: Some(0.93),
            memory_utilization_ratio: Some(0.41),
            memory_used_bytes: Some(6.1e10),
            memory_free_bytes: Some(2.4e10),
            memory_reserved_bytes: Some(5.4e8),
            memory_total_bytes: Some(8.589934592e10),
            power_watts: Some(612.25),
            power_limit_watts: Some(700.0),
            energy_joules: Some(1.234_567_89e9),
            temperature_gpu_celsius: Some(67.0),
            temperature_memory_celsius: Some(71.0),
            clocks,
            max_clocks: clocks,
            performance_state: Some(0),
            fan_speed_ratios: vec![],
            throttle_reasons: vec![
                (ThrottleReason::GpuIdle, false),
                (ThrottleReason::SwPowerCap, true),
                (ThrottleReason::HwSlowdown, false),
                (ThrottleReason::SwThermalSlowdown, false),
                (ThrottleReason::HwThermalSlowdown, false),
                (ThrottleReason::HwPowerBrakeSlowdown, false),
            ],
            xid_counts: Default::default(),
            xid_incidents: Default::default(),
            ecc: Some(EccTotals::default()),
            pcie_transmit_bytes_per_second: Some(1.2e9),
            pcie_receive_bytes_per_second: Some(3.4e9),
            nvlink_transmit_bytes: Some(9.9e14),
            nvlink_receive_bytes: Some(9.8e14),
            mig: vec![],
            encoder_utilization_ratio: Some(0.0),
            decoder_utilization_ratio: Some(0.0),
            bar1_used_bytes: Some(3.3e8),
            bar1_total_bytes: Some(1.37e11),
            ecc_enabled: Some(true),
            retired_pages: None,
            remapped_rows: Some(RemappedRowsReadout::default()),
            throttle_violations: vec![
                (ViolationPolicy::Power, 1234.5),
                (ViolationPolicy::Thermal, 0.0),
            ],
            pcie_replays: Some(0.0),
            pcie_link_generation: Some(5.0),
            pcie_link_width: Some(16.0),
            pcie_link_max_generation: Some(5.0),
            pcie_link_max_width: Some(16.0),
            // An H100 SXM has 18 NVLinks, each with 4 error counters.
            nvlinks: (0..18)
                .map(|link| NvlinkReadout {
                    link,
                    up: true,
                    errors: NvlinkErrorType::ALL.map(|e| (e, 0.0)).into_iter().collect(),
                })
                .collect(),
            process_count: Some(1),
            processes: vec![ProcessReadout {
                pid: 20_000 + i,
                used_memory_bytes: 6.0e10,
                ..Default::default()
            }],
        };
        push_gpu_samples(&id, &r, &mut samples);
    }
    Snapshot {
        source: "nvml".into(),
        health: SourceHealth {
            up: true,
            polls: 1,
            last_poll_duration: Some(Duration::from_millis(3)),
            ..Default::default()
        },
        output: PollOutput::samples(samples),
    }
}

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
    let set = (0..pods)
        .map(|p| {
            let gpu = p % 8;
            (
                DeviceRef::Uuid(format!(
                    "GPU-{gpu:08x}-0000-0000-0000-000000000000::{}",
                    p / 8
                )),
                Holder::Pod {
                    namespace: format!("team-{}", p % 5),
                    pod: format!("job-{p:04}-7d9f8c6b5-x2k4q"),
                    container: "worker".into(),
                },
            )
        })
        .map(|(d, h)| match d {
            // The source strips the replica suffix; do the same here.
            DeviceRef::Uuid(u) => (
                DeviceRef::Uuid(u.split("::").next().unwrap_or("").into()),
                h,
            ),
            other => (other, h),
        })
        .collect();
    Snapshot {
        source: "kubernetes".into(),
        health: SourceHealth {
            up: true,
            polls: 1,
            ..Default::default()
        },
        output: PollOutput {
            attribution: Some(Arc::new(set)),
            ..PollOutput::default()
        },
    }
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
/// pods and with 8 exclusive pods, in rotating order, so load changes hit every variant alike.
/// Prints the median and 90th percentile of each.
fn paired(snap: &Snapshot) {
    let stores: Vec<(&str, SnapshotStore)> = [
        ("off", None),
        ("64_pods_shared", Some(64)),
        ("8_pods_exclusive", Some(8)),
    ]
    .into_iter()
    .map(|(name, n)| {
        let store = match n {
            None => SnapshotStore::new(&["nvml"], vec![], EncodeOptions::default()),
            Some(n) => {
                let store =
                    SnapshotStore::new(&["nvml", "kubernetes"], vec![], EncodeOptions::default());
                store.publish(pods(n));
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
