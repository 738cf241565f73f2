//! Profiling metrics through NVML's GPM interface (GPU Performance Monitoring, Hopper and newer):
//! SM activity and occupancy, tensor and FP pipe activity, DRAM bandwidth, PCIe and NVLink
//! rates, without the DCGM host engine and without the perfmon counters DCGM profiling and
//! Nsight hold exclusively.
//!
//! GPM reports counters between two samples. Each GPU's worker keeps the sample of its previous
//! poll and takes a new one every poll, so the metrics cover the interval between two polls;
//! the first poll (and the first after a failure or a loss) has no interval and serves nothing
//! rather than a made-up value. One `nvmlGpmMetricsGet` per GPU and poll answers every metric.
//! A GPU or a driver without GPM (`NOT_SUPPORTED`, no symbol), or without the permission to
//! read it, is asked once and then left alone: its profiling series are absent.
//!
//! On a GPU in MIG mode each GPU instance is sampled too (`nvmlGpmMigSampleGet`, through the
//! GPU's handle), for the instances of the MIG layout the GPU's reader saw last: the ratio
//! families per instance (`dgx_pixels_mig_*_ratio`, labelled as the MIG memory series are),
//! over the same interval. A driver without the call is asked once.

use std::collections::{HashMap, HashSet};
use std::mem::ManuallyDrop;
use std::sync::Arc;

use dgx_pixels_metrics::gpu::{GpuIdentity, GpuReadout};
use dgx_pixels_metrics::{DeviceKey, Metric, MigInstance, Sample};
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::{gpm_metrics_get, GpmSample};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::nvmlGpmSample_t;
use tracing::{debug, info, warn};

use crate::calls::{timed, Function};

const MIB: f64 = 1024.0 * 1024.0;

/// Where a GPM metric goes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    /// A `_ratio` family: GPM answers percent.
    Ratio(Metric),
    /// A `_bytes_per_second` family: GPM answers MiB/s.
    Rate(Metric),
    /// PCIe throughput, in MiB/s: replaces the driver's ~20 ms sample in the readout.
    PcieTx,
    /// As [`Target::PcieTx`], received.
    PcieRx,
}

/// The metrics read, one `nvmlGpmMetricsGet` for all of them, and where each goes.
const METRICS: [(GpmMetricId, Target); 12] = [
    (
        GpmMetricId::GraphicsUtil,
        Target::Ratio(Metric::GpuGraphicsEngineActive),
    ),
    (GpmMetricId::SmUtil, Target::Ratio(Metric::GpuSmActive)),
    (
        GpmMetricId::SmOccupancy,
        Target::Ratio(Metric::GpuSmOccupancy),
    ),
    (
        GpmMetricId::AnyTensorUtil,
        Target::Ratio(Metric::GpuTensorPipeActive),
    ),
    (
        GpmMetricId::DramBwUtil,
        Target::Ratio(Metric::GpuDramActive),
    ),
    (
        GpmMetricId::Fp64Util,
        Target::Ratio(Metric::GpuFp64PipeActive),
    ),
    (
        GpmMetricId::Fp32Util,
        Target::Ratio(Metric::GpuFp32PipeActive),
    ),
    (
        GpmMetricId::Fp16Util,
        Target::Ratio(Metric::GpuFp16PipeActive),
    ),
    (GpmMetricId::PcieTxPerSec, Target::PcieTx),
    (GpmMetricId::PcieRxPerSec, Target::PcieRx),
    (
        GpmMetricId::NvlinkTotalTxPerSec,
        Target::Rate(Metric::NvlinkTransmitRate),
    ),
    (
        GpmMetricId::NvlinkTotalRxPerSec,
        Target::Rate(Metric::NvlinkReceiveRate),
    ),
];

/// The families GPM serves beside PCIe throughput (which it also reads): the profiling families
/// the DCGM source serves when it runs. The exporter skips GPM when DCGM provides all of them.
pub const GPM_FAMILIES: [Metric; 10] = [
    Metric::GpuGraphicsEngineActive,
    Metric::GpuSmActive,
    Metric::GpuSmOccupancy,
    Metric::GpuTensorPipeActive,
    Metric::GpuDramActive,
    Metric::GpuFp64PipeActive,
    Metric::GpuFp32PipeActive,
    Metric::GpuFp16PipeActive,
    Metric::NvlinkTransmitRate,
    Metric::NvlinkReceiveRate,
];

/// The metrics read per MIG instance (GPM answers percent) and the family each goes to: the
/// ratio families; PCIe and NVLink are the GPU's.
const MIG_METRICS: [(GpmMetricId, Metric); 8] = [
    (GpmMetricId::GraphicsUtil, Metric::MigGraphicsEngineActive),
    (GpmMetricId::SmUtil, Metric::MigSmActive),
    (GpmMetricId::SmOccupancy, Metric::MigSmOccupancy),
    (GpmMetricId::AnyTensorUtil, Metric::MigTensorPipeActive),
    (GpmMetricId::DramBwUtil, Metric::MigDramActive),
    (GpmMetricId::Fp64Util, Metric::MigFp64PipeActive),
    (GpmMetricId::Fp32Util, Metric::MigFp32PipeActive),
    (GpmMetricId::Fp16Util, Metric::MigFp16PipeActive),
];

/// A GPU has at most seven GPU instances; more in a layout is not believed.
const MAX_MIG_INSTANCES: usize = 8;

/// One MIG instance of a GPU's layout: GPU instance, compute instance, profile (`3g.40gb`).
pub type MigSlot = (u32, u32, String);

/// What GPM measured on one MIG instance over the interval between two polls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MigGpm {
    /// The GPU instance.
    pub gpu_instance: u32,
    /// Its compute instance when it is the GPU instance's only one; GPM measures a GPU
    /// instance, so one split into several compute instances is served without this label.
    pub compute_instance: Option<u32>,
    /// Its profile (`mig_profile` label).
    pub profile: String,
    /// The `dgx_pixels_mig_*` ratio series.
    pub series: Vec<(Metric, f64)>,
}

/// What GPM measured on one GPU over the interval between two polls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpmReading {
    /// Profiling series (no labels beyond the GPU's), in base units.
    pub series: Vec<(Metric, f64)>,
    /// Per MIG instance, on a GPU in MIG mode.
    pub mig: Vec<MigGpm>,
    /// PCIe transmit and receive rates over the interval, bytes per second.
    pub pcie_tx: Option<f64>,
    /// See `pcie_tx`.
    pub pcie_rx: Option<f64>,
}

impl GpmReading {
    /// From GPM's per-metric answers in [`METRICS`] order: a metric that failed, or answered a
    /// value that is not a number, is left out.
    fn from_answers(answers: &[Result<f64, NvmlError>]) -> GpmReading {
        let mut r = GpmReading::default();
        for ((_, target), answer) in METRICS.iter().zip(answers) {
            let Some(v) = answer.as_ref().ok().copied().filter(|v| v.is_finite()) else {
                continue;
            };
            match target {
                Target::Ratio(m) => r.series.push((*m, v / 100.0)),
                Target::Rate(m) => r.series.push((*m, v * MIB)),
                Target::PcieTx => r.pcie_tx = Some(v * MIB),
                Target::PcieRx => r.pcie_rx = Some(v * MIB),
            }
        }
        r
    }

    /// PCIe throughput over the whole interval replaces the driver's short sample.
    pub fn apply(&self, readout: &mut GpuReadout) {
        if self.pcie_tx.is_some() {
            readout.pcie_transmit_bytes_per_second = self.pcie_tx;
        }
        if self.pcie_rx.is_some() {
            readout.pcie_receive_bytes_per_second = self.pcie_rx;
        }
    }

    /// The profiling samples of GPU `id` and of its MIG instances.
    pub fn push(&self, id: &GpuIdentity, out: &mut Vec<Sample>) {
        if self.series.is_empty() && self.mig.is_empty() {
            return;
        }
        let key = DeviceKey::gpu(id.index, id.uuid.as_str());
        let gpu = Arc::new(key.clone());
        for (metric, v) in &self.series {
            out.push(Sample::of(&gpu, *metric, [] as [&str; 0], *v));
        }
        for m in &self.mig {
            // The instance's key: the labels of its memory series (and of DCGM's MIG rows).
            let instance = Arc::new(key.with_mig(Some(MigInstance {
                gpu_instance: m.gpu_instance,
                compute_instance: m.compute_instance,
            })));
            for (metric, v) in &m.series {
                out.push(Sample::of(&instance, *metric, [m.profile.as_str()], *v));
            }
        }
    }
}

/// The GPU instances of a MIG layout (one slot per compute instance), each once, in layout
/// order: GPM samples a GPU instance, so two compute instances of one must not each take a
/// sample (the second would measure the moment since the first). The compute instance is kept
/// where it is the GPU instance's only one, so the series share the memory series' labels.
fn gpu_instances(layout: &[MigSlot]) -> Vec<(u32, Option<u32>, String)> {
    let mut out: Vec<(u32, Option<u32>, String)> = Vec::new();
    for (gi, ci, profile) in layout {
        match out.iter_mut().find(|(g, _, _)| g == gi) {
            Some(seen) => {
                // The GPU instance's own profile: "1c.3g.40gb" names a compute instance of it.
                seen.1 = None;
                if let Some((_, gi_profile)) = seen.2.split_once("c.") {
                    seen.2 = gi_profile.to_string();
                }
            }
            None => out.push((*gi, Some(*ci), profile.clone())),
        }
    }
    out
}

/// One instance's series from GPM's per-metric answers in [`MIG_METRICS`] order (percent): a
/// metric that failed or is not a number is left out.
fn mig_series(answers: &[Result<f64, NvmlError>]) -> Vec<(Metric, f64)> {
    MIG_METRICS
        .iter()
        .zip(answers)
        .filter_map(|((_, m), a)| {
            let v = a.as_ref().ok().copied().filter(|v| v.is_finite())?;
            Some((*m, v / 100.0))
        })
        .collect()
}

/// The previous poll's sample, owned (freed on drop) with the library it came from.
struct Held {
    nvml: Arc<Nvml>,
    sample: nvmlGpmSample_t,
}

// SAFETY: a GPM sample may move between threads (nvml-wrapper's `GpmSample` is `Send`); it is
// only ever used by the one worker that owns this value.
unsafe impl Send for Held {}

impl Held {
    /// The sample as nvml-wrapper's type, without taking ownership (never freed by the view).
    fn view(&self) -> ManuallyDrop<GpmSample<'_>> {
        // SAFETY: `sample` was allocated by this library and is live until `self` drops.
        ManuallyDrop::new(unsafe { GpmSample::from_handle(&self.nvml, self.sample) })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: we own the handle; this frees it once (`nvmlGpmSampleFree`, present: checked
        // before any sample is kept).
        let sample = unsafe { GpmSample::from_handle(&self.nvml, self.sample) };
        timed(Function::GpmSampleFree, || drop(sample));
    }
}

/// Whether a GPU reads GPM.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Support {
    /// Not asked yet, or the question failed for a reason that may pass.
    Unknown,
    Supported,
    /// Unsupported, denied or not exported by this driver: not asked again.
    No,
}

/// One GPU's GPM state, kept by its worker thread between polls.
pub struct GpmReader {
    index: u32,
    enabled: bool,
    support: Support,
    prev: Option<Held>,
    /// The previous poll's sample of each MIG GPU instance.
    mig_prev: HashMap<u32, Held>,
    /// Whether the driver answers `nvmlGpmMigSampleGet` (false once it said it never will).
    mig_support: bool,
    /// Whether the whole GPU is sampled: false once a GPU in MIG mode refused for good (its
    /// instances may still answer).
    whole: bool,
    /// Errors already logged (once each).
    logged: HashSet<String>,
}

impl GpmReader {
    /// A reader for GPU `index`; `enabled` false reads nothing (DCGM provides these families).
    pub fn new(index: u32, enabled: bool) -> GpmReader {
        GpmReader {
            index,
            enabled,
            support: Support::Unknown,
            prev: None,
            mig_prev: HashMap::new(),
            mig_support: true,
            whole: true,
            logged: HashSet::new(),
        }
    }

    /// Takes this poll's sample and returns the metrics since the previous poll's, if any.
    /// `answered` says whether the GPU answered this poll: a GPU that did not starts afresh.
    /// `layout` is the GPU's MIG layout as last read (empty when not in MIG mode): each
    /// instance is sampled as well.
    pub fn poll(
        &mut self,
        nvml: &Arc<Nvml>,
        answered: bool,
        layout: &[MigSlot],
    ) -> Option<GpmReading> {
        if !self.enabled || !answered || self.support == Support::No {
            self.prev = None;
            self.mig_prev.clear();
            return None;
        }
        let dev = match timed(Function::HandleByIndex, || nvml.device_by_index(self.index)) {
            Ok(d) => d,
            Err(e) => {
                self.mig_prev.clear();
                return self.failed("device handle", e);
            }
        };
        if self.support == Support::Unknown {
            self.support = match timed(Function::GpmQueryDeviceSupport, || dev.gpm_support()) {
                Ok(true) if symbols_present(nvml) => Support::Supported,
                Ok(_) => self.refuse(&NvmlError::NotSupported),
                Err(e) if permanent(&e) => self.refuse(&e),
                Err(e) => return self.failed("nvmlGpmQueryDeviceSupport", e),
            };
            if self.support == Support::No {
                return None;
            }
        }
        let mig = self.poll_mig(nvml, &dev, layout);
        let gpu = if self.whole {
            self.poll_gpu(nvml, &dev, !layout.is_empty())
        } else {
            None
        };
        match (gpu, mig.is_empty()) {
            (Some(mut r), _) => {
                r.mig = mig;
                Some(r)
            }
            (None, false) => Some(GpmReading {
                mig,
                ..GpmReading::default()
            }),
            (None, true) => None,
        }
    }

    /// The whole GPU's sample and its metrics since the previous one; `in_mig` says the GPU is
    /// in MIG mode, where a refusal for good leaves its instances to be sampled.
    fn poll_gpu(&mut self, nvml: &Arc<Nvml>, dev: &Device<'_>, in_mig: bool) -> Option<GpmReading> {
        // nvml-wrapper allocates the buffer (nvmlGpmSampleAlloc) and takes the sample.
        let sample = match timed(Function::GpmSampleGet, || dev.gpm_sample()) {
            Ok(s) => s,
            Err(e) if permanent(&e) && in_mig && self.mig_support => {
                self.prev = None;
                self.whole = false;
                self.log_once("nvmlGpmSampleGet (GPU in MIG mode)", &e);
                return None;
            }
            Err(e) if permanent(&e) => {
                self.prev = None;
                self.support = self.refuse(&e);
                return None;
            }
            Err(e) => return self.failed("nvmlGpmSampleGet", e),
        };
        let reading = match &self.prev {
            Some(prev) => {
                let ids = METRICS.map(|(id, _)| id);
                match timed(Function::GpmMetricsGet, || {
                    gpm_metrics_get(nvml, &prev.view(), &sample, &ids)
                }) {
                    Ok(results) => {
                        let answers: Vec<Result<f64, NvmlError>> =
                            results.into_iter().map(|r| r.map(|m| m.value)).collect();
                        self.note_unanswered(&answers);
                        Some(GpmReading::from_answers(&answers))
                    }
                    Err(e) => {
                        self.log_once("nvmlGpmMetricsGet", &e);
                        None
                    }
                }
            }
            None => None,
        };
        // This poll's sample starts the next interval; the previous one is freed here.
        self.prev = Some(Held {
            nvml: Arc::clone(nvml),
            sample: sample.into_handle(),
        });
        reading
    }

    /// Each MIG instance's sample of this poll and its metrics since the previous poll's.
    fn poll_mig(&mut self, nvml: &Arc<Nvml>, dev: &Device<'_>, layout: &[MigSlot]) -> Vec<MigGpm> {
        let layout = gpu_instances(&layout[..layout.len().min(MAX_MIG_INSTANCES)]);
        // An instance gone from the layout starts afresh should it come back.
        self.mig_prev
            .retain(|gi, _| layout.iter().any(|(g, _, _)| g == gi));
        if !self.mig_support {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (gi, ci, profile) in &layout {
            let sample = match timed(Function::GpmMigSampleGet, || dev.gpm_mig_sample(*gi)) {
                Ok(s) => s,
                Err(e) if permanent(&e) => {
                    info!(gpu = self.index, reason = %e, "no GPM per MIG instance on this GPU; per-instance profiling series omitted");
                    self.mig_support = false;
                    self.mig_prev.clear();
                    return Vec::new();
                }
                Err(e) => {
                    self.mig_prev.remove(gi);
                    self.log_once("nvmlGpmMigSampleGet", &e);
                    continue;
                }
            };
            if let Some(prev) = self.mig_prev.get(gi) {
                let ids = MIG_METRICS.map(|(id, _)| id);
                match timed(Function::GpmMetricsGet, || {
                    gpm_metrics_get(nvml, &prev.view(), &sample, &ids)
                }) {
                    Ok(results) => {
                        let answers: Vec<Result<f64, NvmlError>> =
                            results.into_iter().map(|r| r.map(|m| m.value)).collect();
                        out.push(MigGpm {
                            gpu_instance: *gi,
                            compute_instance: *ci,
                            profile: profile.clone(),
                            series: mig_series(&answers),
                        });
                    }
                    Err(e) => self.log_once("nvmlGpmMetricsGet (MIG)", &e),
                }
            }
            self.mig_prev.insert(
                *gi,
                Held {
                    nvml: Arc::clone(nvml),
                    sample: sample.into_handle(),
                },
            );
        }
        out
    }

    fn refuse(&mut self, why: &NvmlError) -> Support {
        if matches!(why, NvmlError::NoPermission) {
            warn!(
                gpu = self.index,
                reason = %why,
                "GPM denied (NVreg_RestrictProfilingToAdminUsers?): profiling series omitted; see docs/metrics.md, \"Profiling metrics\""
            );
        } else {
            info!(
                gpu = self.index,
                reason = %why,
                "no GPM on this GPU; profiling series need DCGM (--collector.dcgm)"
            );
        }
        Support::No
    }

    /// A call that failed for a reason that may pass: no interval until the next good sample.
    fn failed(&mut self, what: &str, e: NvmlError) -> Option<GpmReading> {
        self.prev = None;
        self.log_once(what, &e);
        None
    }

    fn log_once(&mut self, what: &str, e: &NvmlError) {
        let line = format!("{what}: {e}");
        if self.logged.len() < 32 && self.logged.insert(line.clone()) {
            warn!(gpu = self.index, error = %line, "GPM reading failed; its series are omitted");
        }
    }

    fn note_unanswered(&mut self, answers: &[Result<f64, NvmlError>]) {
        for ((id, _), a) in METRICS.iter().zip(answers) {
            if let Err(e) = a {
                let line = format!("{id:?}: {e}");
                if self.logged.len() < 32 && self.logged.insert(line.clone()) {
                    debug!(gpu = self.index, metric = %line, "GPM metric not available; omitted");
                }
            }
        }
    }
}

/// Errors that will not pass by asking again.
fn permanent(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::NotSupported | NvmlError::NoPermission | NvmlError::FailedToLoadSymbol(_)
    )
}

/// Every GPM symbol a kept sample needs: nvml-wrapper frees a sample through an unchecked
/// symbol lookup on drop, which would panic on a library that lacks it.
fn symbols_present(nvml: &Nvml) -> bool {
    let lib = nvml.lib();
    lib.nvmlGpmSampleAlloc.is_ok()
        && lib.nvmlGpmSampleGet.is_ok()
        && lib.nvmlGpmSampleFree.is_ok()
        && lib.nvmlGpmMetricsGet.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_instance_is_sampled_once_whatever_its_compute_instances() {
        let slot = |gi, ci, p: &str| (gi, ci, p.to_string());
        let layout = [
            slot(1, 0, "1c.3g.40gb"),
            slot(2, 0, "3g.40gb"),
            slot(1, 1, "1c.3g.40gb"),
            slot(1, 2, "1c.3g.40gb"),
        ];
        assert_eq!(
            gpu_instances(&layout),
            [
                (1, None, "3g.40gb".to_string()),
                (2, Some(0), "3g.40gb".to_string()),
            ]
        );
    }

    #[test]
    fn percent_becomes_a_ratio_and_mib_per_second_bytes() {
        let mut answers: Vec<Result<f64, NvmlError>> = (0..12).map(|i| Ok(f64::from(i))).collect();
        answers[2] = Err(NvmlError::NotSupported);
        answers[3] = Ok(f64::NAN);
        let r = GpmReading::from_answers(&answers);
        assert_eq!(r.series[0], (Metric::GpuGraphicsEngineActive, 0.0));
        assert_eq!(r.series[1], (Metric::GpuSmActive, 0.01));
        assert!(
            !r.series
                .iter()
                .any(|(m, _)| matches!(m, Metric::GpuSmOccupancy | Metric::GpuTensorPipeActive)),
            "a failed or non-numeric metric is omitted, not 0: {r:?}"
        );
        assert_eq!(r.pcie_tx, Some(8.0 * MIB));
        assert_eq!(r.pcie_rx, Some(9.0 * MIB));
        assert!(r.series.contains(&(Metric::NvlinkTransmitRate, 10.0 * MIB)));
        assert!(r.series.contains(&(Metric::NvlinkReceiveRate, 11.0 * MIB)));
        // Every family GPM serves is listed, and nothing else.
        let mut served: Vec<Metric> = r.series.iter().map(|(m, _)| *m).collect();
        served.extend([Metric::GpuSmOccupancy, Metric::GpuTensorPipeActive]);
        served.sort_by_key(|m| m.def().name);
        let mut families = GPM_FAMILIES.to_vec();
        families.sort_by_key(|m| m.def().name);
        assert_eq!(served, families);
    }

    #[test]
    fn pcie_over_the_interval_replaces_the_short_sample_only_when_read() {
        let mut readout = GpuReadout {
            pcie_transmit_bytes_per_second: Some(1.0),
            pcie_receive_bytes_per_second: Some(2.0),
            ..GpuReadout::default()
        };
        let r = GpmReading {
            pcie_tx: Some(5.0),
            ..GpmReading::default()
        };
        r.apply(&mut readout);
        assert_eq!(readout.pcie_transmit_bytes_per_second, Some(5.0));
        assert_eq!(readout.pcie_receive_bytes_per_second, Some(2.0));
    }
}
