//! The mapping from one GPU's readings to catalog samples, shared by every GPU source (NVML,
//! the simulator) so that they expose the same series for the same facts.
//!
//! A source fills a [`GpuReadout`] with what the device answered (`None` for a reading it does
//! not support or did not return) and calls [`push_gpu_samples`]. Readings that are `None` are
//! omitted, never exported as 0. The readout types and the label values ([`crate::labels`])
//! live in `dgx-pixels-readout`, which the simulator shares without the catalog; they are
//! re-exported here.
//!
//! A reading that is one series with only its device's labels is a row of `GAUGES`; a
//! labelled family is a function in `families`, listed in its `FAMILIES` table.

pub use crate::incidents::XidIncidents;
pub use dgx_pixels_readout::{
    cuda_version_string, ClockReadout, EccTotals, FabricReadout, GpuIdentity, GpuReadout,
    MigReadout, NvlinkErrors, NvlinkReadout, PlatformReadout, PowerSamples, PowerTally,
    ProcessActivity, ProcessReadout, ProcessUtilization, RailPortReadout, RemappedRowsReadout,
    RetiredPages, POWER_BUCKETS_WATTS,
};

mod activity;
mod families;
mod power;
pub use activity::{cap_activity, ActivityScope, DEFAULT_TOP_K, OTHER_PID};
use families::FAMILIES;
use power::push_power_samples;

use std::sync::Arc;

use crate::catalog::Metric;
use crate::device::{DeviceKey, MigInstance};
use crate::snapshot::Sample;

/// The own labels of a series that has only its device's.
const NO_LABELS: [&str; 0] = [];

fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// A reading of an up GPU served as one series with only its device's labels: the metric,
/// and how to read its value from the readout (`None`: not read, no series).
type Gauge = (Metric, fn(&GpuReadout) -> Option<f64>);

/// The unlabelled series of an up GPU, in the order they are pushed. A new such reading is a
/// row here.
const GAUGES: &[Gauge] = &[
    (Metric::GpuUtilization, |r| r.utilization_ratio),
    (Metric::GpuMemoryUtilization, |r| r.memory_utilization_ratio),
    (Metric::GpuEncoderUtilization, |r| {
        r.encoder_utilization_ratio
    }),
    (Metric::GpuDecoderUtilization, |r| {
        r.decoder_utilization_ratio
    }),
    (Metric::GpuBar1Used, |r| r.bar1_used_bytes),
    (Metric::GpuBar1Total, |r| r.bar1_total_bytes),
    (Metric::GpuEccEnabled, |r| r.ecc_enabled.map(flag)),
    (Metric::PcieReplays, |r| r.pcie_replays),
    (Metric::PcieLinkGeneration, |r| r.pcie_link_generation),
    (Metric::PcieLinkWidth, |r| r.pcie_link_width),
    (Metric::PcieLinkMaxGeneration, |r| {
        r.pcie_link_max_generation
    }),
    (Metric::PcieLinkMaxWidth, |r| r.pcie_link_max_width),
    (Metric::GpuProcesses, |r| r.process_count.map(|n| n as f64)),
    (Metric::GpuRetiredPagesPending, |r| {
        r.retired_pages.map(|p| flag(p.pending))
    }),
    (Metric::GpuRemappedRowsPending, |r| {
        r.remapped_rows.map(|rr| flag(rr.pending))
    }),
    (Metric::GpuRemappedRowsFailure, |r| {
        r.remapped_rows.map(|rr| flag(rr.failure))
    }),
    (Metric::GpuMemoryUsed, |r| r.memory_used_bytes),
    (Metric::GpuMemoryFree, |r| r.memory_free_bytes),
    (Metric::GpuMemoryReserved, |r| r.memory_reserved_bytes),
    (Metric::GpuMemoryTotal, |r| r.memory_total_bytes),
    (Metric::GpuPower, |r| r.power_watts),
    (Metric::GpuPowerLimit, |r| r.power_limit_watts),
    (Metric::GpuEnergy, |r| r.energy_joules),
    (Metric::GpuPerformanceState, |r| {
        r.performance_state.map(f64::from)
    }),
    (Metric::PcieTransmit, |r| r.pcie_transmit_bytes_per_second),
    (Metric::PcieReceive, |r| r.pcie_receive_bytes_per_second),
    (Metric::NvlinkTransmit, |r| r.nvlink_transmit_bytes),
    (Metric::NvlinkReceive, |r| r.nvlink_receive_bytes),
];

/// The series of one GPU that share its key (the GPU's, not a MIG instance's).
struct GpuSeries<'a> {
    key: &'a Arc<DeviceKey>,
    out: &'a mut Vec<Sample>,
}

impl GpuSeries<'_> {
    /// Pushes one series of `metric` with `labels` after the device's.
    fn push(&mut self, metric: Metric, labels: &[&str], value: f64) {
        self.out
            .push(Sample::of(self.key, metric, labels.iter().copied(), value));
    }
}

/// Appends the samples of one GPU to `out`, all sharing one [`DeviceKey`].
pub fn push_gpu_samples(id: &GpuIdentity, r: &GpuReadout, out: &mut Vec<Sample>) {
    let key = Arc::new(DeviceKey::gpu(id.index, id.uuid.as_str()));
    push_identity(&key, id, r.up, out);
    push_xids(&key, r, out);
    if !r.up {
        return;
    }
    let mut gpu = GpuSeries { key: &key, out };
    for (metric, read) in GAUGES {
        if let Some(v) = read(r) {
            gpu.push(*metric, &NO_LABELS, v);
        }
    }
    if let Some(p) = &r.power_samples {
        push_power_samples(&key, p, gpu.out);
    }
    for family in FAMILIES {
        family(r, &mut gpu);
    }
    push_processes(&key, &r.processes, out);
    activity::push_activity_samples(&key, &r.process_activity, out);
    push_mig(&key, &r.mig, out);
}

/// `dgx_pixels_gpu_info` and `dgx_pixels_gpu_up`: served for a GPU that is lost too.
fn push_identity(key: &Arc<DeviceKey>, id: &GpuIdentity, up: bool, out: &mut Vec<Sample>) {
    let minor = id.minor_number.to_string();
    let cuda = id.cuda_driver_version.as_str();
    let device = format!("nvidia{}", id.minor_number);
    out.push(Sample::of(
        key,
        Metric::GpuInfo,
        [
            &id.model,
            &id.serial,
            &id.pci_bus_id,
            &id.vbios_version,
            &id.driver_version,
            cuda,
            &minor,
            &device,
        ],
        1.0,
    ));
    out.push(Sample::of(key, Metric::GpuUp, NO_LABELS, flag(up)));
}

/// Per XID code: its info series, its incidents where counted and its counter. Served for a
/// GPU that is lost too (the XID that took it says why).
fn push_xids(key: &Arc<DeviceKey>, r: &GpuReadout, out: &mut Vec<Sample>) {
    for (xid, count) in &r.xid_counts {
        let code = xid.to_string();
        // What NVIDIA says the code is and what to do about it, once per code on this GPU
        // (not copied onto the counter, whose series stays one per code).
        let (mnemonic, action) = match dgx_pixels_xid::lookup(*xid) {
            Some(e) => (e.mnemonic, e.action.as_str()),
            None => ("", dgx_pixels_xid::Action::Unknown.as_str()),
        };
        out.push(Sample::of(
            key,
            Metric::GpuXidInfo,
            [code.as_str(), mnemonic, action],
            1.0,
        ));
        if let Some(n) = r.xid_incidents.get(xid) {
            out.push(Sample::of(
                key,
                Metric::GpuXidIncidents,
                [code.as_str()],
                *n as f64,
            ));
        }
        out.push(Sample::of(key, Metric::GpuXidErrors, [code], *count as f64));
    }
}

/// The memory each process uses. A process in a MIG instance is that instance's: its key
/// names it, so the attribution join finds the pod holding the instance.
fn push_processes(key: &DeviceKey, processes: &[ProcessReadout], out: &mut Vec<Sample>) {
    for p in processes {
        let mig = p.gpu_instance.map(|gpu_instance| MigInstance {
            gpu_instance,
            compute_instance: p.compute_instance,
        });
        out.push(Sample::of(
            &Arc::new(key.with_mig(mig)),
            Metric::ProcessMemoryUsed,
            [p.pid.to_string(), p.container_id.clone(), p.pod_uid.clone()],
            p.used_memory_bytes,
        ));
    }
}

/// Each MIG instance's info and readings, under the instance's own key.
fn push_mig(key: &DeviceKey, mig: &[MigReadout], out: &mut Vec<Sample>) {
    for m in mig {
        let instance = Arc::new(key.with_mig(Some(MigInstance {
            gpu_instance: m.gpu_instance,
            compute_instance: Some(m.compute_instance),
        })));
        out.push(Sample::of(
            &instance,
            Metric::MigInfo,
            [&m.profile, &m.mig_uuid],
            1.0,
        ));
        for (metric, v) in [
            (
                Metric::MigGraphicsEngineActive,
                m.graphics_engine_active_ratio,
            ),
            (Metric::MigMemoryUsed, m.memory_used_bytes),
            (Metric::MigMemoryTotal, m.memory_total_bytes),
        ] {
            if let Some(v) = v {
                out.push(Sample::of(&instance, metric, [&m.profile], v));
            }
        }
    }
}

/// The `status` label: `success`, or NVML's return code (a small number; anything past 999 is
/// `nvml_other`, so a garbage value cannot add label values without bound).
pub fn fabric_status(code: u32) -> String {
    match code {
        0 => "success".to_string(),
        1..=999 => format!("nvml_{code}"),
        _ => "nvml_other".to_string(),
    }
}

#[cfg(test)]
mod tests;
