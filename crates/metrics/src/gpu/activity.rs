//! Per-process activity on shared GPUs: which processes get series (the top K by SM activity)
//! and the remainder summed under `pid="other"`, so a GPU time-sliced between many pods still
//! serves a bounded number of series.

use std::sync::Arc;

use dgx_pixels_readout::{ProcessActivity, ProcessUtilization};

use crate::catalog::Metric;
use crate::device::{DeviceKey, MigInstance};
use crate::snapshot::Sample;

/// Default of how many processes per GPU get their own activity series.
pub const DEFAULT_TOP_K: usize = 3;
/// The `pid` label of the remainder series.
pub const OTHER_PID: &str = "other";

/// Which GPUs get per-process activity series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ActivityScope {
    /// Only GPUs with more than one compute process (the question is "who uses it").
    #[default]
    Shared,
    /// Every GPU with a process.
    All,
    /// None.
    Off,
}

/// The activity series of one GPU from its per-process samples (one per process; `samples`
/// in any order), given how many compute processes run on it (`None` when unknown: the
/// samples' count stands in). At most `top_k` processes, the most SM-active first (ties by
/// pid, so the choice is stable), and one remainder entry when some were left out.
pub fn cap_activity(
    samples: Vec<ProcessActivity>,
    running: Option<usize>,
    scope: ActivityScope,
    top_k: usize,
) -> Vec<ProcessActivity> {
    let processes = running.unwrap_or(samples.len()).max(samples.len());
    let wanted = match scope {
        ActivityScope::Off => false,
        ActivityScope::All => true,
        ActivityScope::Shared => processes > 1,
    };
    if !wanted || samples.is_empty() {
        return Vec::new();
    }
    let mut samples = samples;
    samples.sort_by(|a, b| {
        b.utilization
            .sm
            .total_cmp(&a.utilization.sm)
            .then(a.pid.cmp(&b.pid))
    });
    if samples.len() <= top_k {
        return samples;
    }
    let rest = samples.split_off(top_k);
    // Shares of one GPU: their sum is the rest's share, at most the whole engine.
    let sum = |f: fn(&ProcessUtilization) -> f64| {
        rest.iter().map(|p| f(&p.utilization)).sum::<f64>().min(1.0)
    };
    samples.push(ProcessActivity {
        pid: None,
        utilization: ProcessUtilization {
            sm: sum(|u| u.sm),
            memory: sum(|u| u.memory),
            encoder: sum(|u| u.encoder),
            decoder: sum(|u| u.decoder),
        },
        ..ProcessActivity::default()
    });
    samples
}

/// `dgx_pixels_process_utilization_ratio`, four engines per entry.
pub(super) fn push_activity_samples(
    key: &DeviceKey,
    activity: &[ProcessActivity],
    out: &mut Vec<Sample>,
) {
    for p in activity {
        // A process in a MIG instance is that instance's, as for its memory series.
        let mig = p.gpu_instance.map(|gpu_instance| MigInstance {
            gpu_instance,
            compute_instance: p.compute_instance,
        });
        let key = Arc::new(key.with_mig(mig));
        let pid = p
            .pid
            .map_or_else(|| OTHER_PID.to_string(), |p| p.to_string());
        let u = &p.utilization;
        for (engine, v) in [
            ("sm", u.sm),
            ("memory", u.memory),
            ("encoder", u.encoder),
            ("decoder", u.decoder),
        ] {
            out.push(Sample::of(
                &key,
                Metric::ProcessUtilization,
                [pid.as_str(), p.container_id.as_str(), engine],
                v,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(pid: u32, sm: f64) -> ProcessActivity {
        ProcessActivity {
            pid: Some(pid),
            container_id: format!("c{pid}"),
            utilization: ProcessUtilization {
                sm,
                memory: sm / 2.0,
                encoder: 0.0,
                decoder: 0.1,
            },
            ..ProcessActivity::default()
        }
    }

    #[test]
    fn the_top_k_by_sm_activity_and_the_rest_summed_as_other() {
        let samples = vec![
            proc(5, 0.1),
            proc(1, 0.3),
            proc(2, 0.05),
            proc(3, 0.3),
            proc(4, 0.2),
        ];
        let out = cap_activity(samples, Some(5), ActivityScope::Shared, 3);
        let pids: Vec<_> = out.iter().map(|p| p.pid).collect();
        // Ties (1 and 3 at 0.3) in pid order.
        assert_eq!(pids, [Some(1), Some(3), Some(4), None]);
        let other = &out[3];
        assert!((other.utilization.sm - 0.15).abs() < 1e-12);
        assert!((other.utilization.memory - 0.075).abs() < 1e-12);
        // Two decoder shares of 0.1.
        assert!((other.utilization.decoder - 0.2).abs() < 1e-12);
        assert!(other.container_id.is_empty());
    }

    #[test]
    fn the_remainder_never_exceeds_the_whole_engine() {
        let samples = (0..6).map(|p| proc(p, 0.5)).collect();
        let out = cap_activity(samples, None, ActivityScope::Shared, 1);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].utilization.sm, 1.0);
    }

    #[test]
    fn scope_decides_which_gpus_get_series() {
        let one = || vec![proc(7, 0.9)];
        assert!(cap_activity(one(), Some(1), ActivityScope::Shared, 3).is_empty());
        // Two processes run, one sampled: the GPU is shared.
        assert_eq!(
            cap_activity(one(), Some(2), ActivityScope::Shared, 3).len(),
            1
        );
        assert_eq!(cap_activity(one(), Some(1), ActivityScope::All, 3).len(), 1);
        let two = vec![proc(1, 0.5), proc(2, 0.5)];
        assert!(cap_activity(two, Some(2), ActivityScope::Off, 3).is_empty());
        // No samples: no series, never zeros.
        assert!(cap_activity(Vec::new(), Some(4), ActivityScope::All, 3).is_empty());
    }

    #[test]
    fn each_entry_serves_four_engines_and_the_remainder_is_pid_other() {
        let key = DeviceKey::gpu(0, "GPU-a");
        let activity = cap_activity(
            vec![proc(1, 0.6), proc(2, 0.3), proc(3, 0.1)],
            None,
            ActivityScope::Shared,
            2,
        );
        let mut out = Vec::new();
        push_activity_samples(&key, &activity, &mut out);
        assert_eq!(out.len(), 12);
        let sm: Vec<_> = out
            .iter()
            .filter(|s| s.label("engine") == Some("sm"))
            .map(|s| (s.label("pid").unwrap_or_default().to_string(), s.value))
            .collect();
        assert_eq!(
            sm,
            [
                ("1".to_string(), 0.6),
                ("2".to_string(), 0.3),
                ("other".to_string(), 0.1)
            ]
        );
    }
}
