//! Caps on the series whose labels come from outside: each pod or job named by the kubelet or
//! a job file becomes an info series (`dgx_pixels_gpu_pod_info`, `dgx_pixels_gpu_hpc_job_info`),
//! so their number must not grow with what others create. Past a cap the rest is left out and
//! counted (`dgx_pixels_source_series_dropped_total{source, family}`).

use std::collections::{HashMap, HashSet};

use dgx_pixels_metrics::{DeviceRef, Holder};

/// Most pods' containers named per device (GPU or MIG instance): far above the time-slicing
/// replicas anyone configures (the GPU operator's examples use 4 to 48).
pub const MAX_PODS_PER_DEVICE: usize = 64;
/// Most `dgx_pixels_gpu_pod_info` series: 8 GPUs x 64, or 56 MIG instances and their GPUs with
/// room to spare; 20,000 pods cost the daemon no more than these (docs/security.md).
pub const MAX_POD_INFO: usize = 1024;
/// Most jobs named per device: a job file lists the few jobs sharing a GPU.
pub const MAX_JOBS_PER_DEVICE: usize = 16;
/// Most `dgx_pixels_gpu_hpc_job_info` series.
pub const MAX_JOB_INFO: usize = 1024;

/// `pairs` without duplicates, at most `per_device` holders per device and `total` in all
/// (the first ones, in the order given), and how many distinct pairs were left out.
pub fn cap(
    pairs: Vec<(DeviceRef, Holder)>,
    per_device: usize,
    total: usize,
) -> (Vec<(DeviceRef, Holder)>, u64) {
    let mut seen: HashSet<(DeviceRef, Holder)> = HashSet::new();
    let mut per: HashMap<DeviceRef, usize> = HashMap::new();
    let mut kept = Vec::new();
    let mut dropped = 0u64;
    for pair in pairs {
        if seen.contains(&pair) {
            continue;
        }
        let n = per.entry(pair.0.clone()).or_default();
        if *n >= per_device || kept.len() >= total {
            dropped += 1;
        } else {
            *n += 1;
            kept.push(pair.clone());
        }
        seen.insert(pair);
    }
    (kept, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(i: u32) -> DeviceRef {
        DeviceRef::Index {
            gpu: i,
            gpu_instance: None,
        }
    }

    #[test]
    fn caps_per_device_and_in_all_counting_distinct_pairs_left_out() {
        let job = |j: usize| Holder::Job(j.to_string());
        let mut pairs: Vec<_> = (0..10).map(|j| (gpu(0), job(j))).collect();
        pairs.extend((0..3).map(|j| (gpu(1), job(j))));
        pairs.push((gpu(1), job(0))); // a duplicate is neither kept twice nor dropped
        let (kept, dropped) = cap(pairs.clone(), 4, 100);
        assert_eq!(kept.len(), 4 + 3);
        assert_eq!(dropped, 6);
        let (kept, dropped) = cap(pairs, 4, 5);
        assert_eq!(kept.len(), 5);
        assert_eq!(kept[4], (gpu(1), job(0)));
        assert_eq!(dropped, 8);
    }
}
