//! The daemon's probe scheduler against a scripted backend: politeness rules and metrics.
//!
//! One module a topic; the run log, the utilization view and the look-ups they share are here.
#![allow(clippy::unwrap_used)]

mod first_pass;
mod gpu_states;
mod politeness;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dgx_pixels_metrics::{Metric, Sample};
use dgx_pixels_probe_source::{Backend, GpuId, ProbeSource, ScheduleSettings, UtilizationView};
use dgx_pixels_probes::{ProbeError, ProbeKind};

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(usize, ProbeKind)>>>);

struct Fake {
    log: Log,
    run_time: Duration,
    fail: Option<ProbeKind>,
}

impl Backend for Fake {
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError> {
        Ok(vec![
            GpuId {
                ordinal: 0,
                uuid: "GPU-a".into(),
                model: "NVIDIA H100 80GB HBM3".into(),
            },
            GpuId {
                ordinal: 1,
                uuid: "GPU-b".into(),
                model: "NVIDIA GB10".into(),
            },
        ])
    }
    fn run(&mut self, gpu: &GpuId, kind: ProbeKind) -> Result<Vec<f64>, ProbeError> {
        self.log.0.lock().unwrap().push((gpu.ordinal, kind));
        std::thread::sleep(self.run_time);
        if self.fail == Some(kind) {
            return Err(ProbeError::Cuda(
                "cublasGemmEx: CUBLAS_STATUS_EXECUTION_FAILED".into(),
            ));
        }
        Ok(match kind.unit() {
            dgx_pixels_probes::ProbeUnit::Flops => vec![690e12, 700e12, 710e12],
            dgx_pixels_probes::ProbeUnit::BytesPerSecond => vec![3.0e12, 2.9e12, 3.1e12],
            dgx_pixels_probes::ProbeUnit::Seconds => vec![5e-6, 4e-6, 6e-6],
        })
    }
}

#[derive(Clone, Default)]
struct Util(Arc<Mutex<HashMap<String, (u32, f64)>>>);

impl UtilizationView for Util {
    fn lookup(&self, uuid: &str) -> Option<(u32, f64)> {
        self.0.lock().unwrap().get(uuid).cloned()
    }
}

fn value(samples: &[Sample], metric: Metric, labels: &[&str]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            // The device key's labels, then the sample's own.
            let device = s
                .device
                .iter()
                .flat_map(|d| [d.index().to_string(), d.uuid().to_string()]);
            s.metric == metric
                && device
                    .chain(s.labels.iter().cloned())
                    .eq(labels.iter().copied())
        })
        .map(|s| s.value)
}

fn source(
    run_time: Duration,
    fail: Option<ProbeKind>,
    duty: f64,
) -> (ProbeSource<Fake, Util>, Log, Util) {
    let log = Log::default();
    let util = Util::default();
    let s = ProbeSource::new(
        Fake {
            log: log.clone(),
            run_time,
            fail,
        },
        util.clone(),
        ScheduleSettings {
            probes: vec![
                ProbeKind::GemmBf16,
                ProbeKind::CopyD2D,
                ProbeKind::LaunchLatency,
            ],
            duty_cycle: duty,
            settle: Duration::ZERO,
            ..Default::default()
        },
    )
    .unwrap();
    (s, log, util)
}

fn state(samples: &[Sample], state: &str) -> f64 {
    samples
        .iter()
        .find(|s| s.metric == Metric::ProbeGpus && s.labels == [state])
        .map(|s| s.value)
        .unwrap_or_else(|| panic!("no dgx_pixels_probe_gpus{{state={state:?}}}"))
}
