//! The device view's cost per generation against what it replaced: before it, the attribution
//! join was built per encoding and again per health poll, and the kmsg GPU directory and the
//! probe scheduler each walked every served sample (the scheduler once per GPU looked up). The
//! old walks are replicated here as they were (collectors/kmsg.rs and probes.rs before issue 30,
//! item 3) to time them; the view's side is the real code.
//!
//! Paired rounds (each variant once per round, in rotating order) so the load of a shared
//! machine hits every variant alike; prints the median and 90th percentile of each.

use std::sync::Arc;
use std::time::Instant;

use criterion::black_box;
use dgx_pixels_metrics::view::{DeviceView, Join};
use dgx_pixels_metrics::{Metric, Snapshot};

mod common;

fn served(snapshots: &[Arc<Snapshot>]) -> impl Iterator<Item = &dgx_pixels_metrics::Sample> {
    snapshots
        .iter()
        .filter_map(|s| s.served())
        .flat_map(|o| o.samples.iter())
}

/// The kmsg directory's old walk: every served gpu_info, its pci_bus_id parsed.
fn old_directory(snapshots: &[Arc<Snapshot>]) -> usize {
    served(snapshots)
        .filter(|s| s.metric == Metric::GpuInfo)
        .filter_map(|s| {
            let d = s.device.as_ref()?;
            let pci = dgx_pixels_metrics::device::PciAddress::parse(s.label("pci_bus_id")?)?;
            Some((pci, d.index()))
        })
        .count()
}

/// The probe scheduler's old lookup, once per GPU: a walk to the GPU's utilization.
fn old_lookups(snapshots: &[Arc<Snapshot>], uuids: &[String]) -> usize {
    uuids
        .iter()
        .filter_map(|uuid| {
            served(snapshots)
                .filter(|s| s.metric == Metric::GpuUtilization)
                .find_map(|s| {
                    let d = s.device.as_ref().filter(|d| d.uuid() == uuid)?;
                    Some((d.index(), s.value))
                })
        })
        .count()
}

fn view_readers(view: &DeviceView, uuids: &[String]) -> usize {
    let directory = view.gpus().filter_map(|g| g.pci()).count();
    let lookups = uuids
        .iter()
        .filter_map(|u| view.gpu(u)?.reading(Metric::GpuUtilization))
        .count();
    directory + lookups
}

fn main() {
    let rounds = 400;
    for gpus in [8u32, 64] {
        let snapshots = vec![
            Arc::new(common::pods(64, gpus)),
            Arc::new(common::snapshot(gpus)),
        ];
        let uuids: Vec<String> = DeviceView::build(&snapshots)
            .gpus()
            .map(|g| g.uuid().to_string())
            .collect();
        let variants: [(&str, &dyn Fn() -> usize); 4] = [
            ("view_build", &|| {
                DeviceView::build(&snapshots).gpus().count()
            }),
            ("join_build", &|| Join::build(&snapshots).info.len()),
            ("old_directory_and_lookups", &|| {
                old_directory(&snapshots) + old_lookups(&snapshots, &uuids)
            }),
            ("view_directory_and_lookups", &{
                let view = DeviceView::build(&snapshots);
                let uuids = uuids.clone();
                move || view_readers(&view, &uuids)
            }),
        ];
        let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); variants.len()];
        for round in 0..rounds {
            for k in 0..variants.len() {
                let i = (round + k) % variants.len();
                let start = Instant::now();
                black_box((variants[i].1)());
                times[i].push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
        for ((name, _), t) in variants.iter().zip(times.iter_mut()) {
            t.sort_by(f64::total_cmp);
            println!(
                "{gpus} GPUs, 64 pods: {name}: median {:.1} µs, p90 {:.1} µs ({rounds} rounds)",
                t[t.len() / 2],
                t[t.len() * 9 / 10]
            );
        }
    }
}
