//! What the rules read about one GPU, gathered from served samples whichever source serves them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use dgx_pixels_metrics::{DeviceKey, Metric, Sample};

/// One GPU's readings that the rules look at; `None` where no source serves the reading.
#[derive(Debug, Clone, Default)]
pub(crate) struct GpuFacts {
    /// Whether it answers queries.
    pub up: Option<bool>,
    /// XID occurrences per code.
    pub xids: BTreeMap<u32, f64>,
    /// Whether some origin observes the GPU's XIDs (`None`: not said).
    pub xid_observed: Option<bool>,
    /// Kernel-log messages that the GPU fell off the bus (without an XID line).
    pub fallen_off_bus: Option<f64>,
    /// Uncorrected ECC errors since the last reset (volatile counter).
    pub ecc_uncorrected_volatile: Option<f64>,
    /// Corrected ECC errors since the last reset (volatile): read only to see a reset.
    pub ecc_corrected_volatile: Option<f64>,
    /// Energy since the driver was loaded: read only to see a reset.
    pub energy: Option<f64>,
    pub remap_failure: Option<bool>,
    pub remap_pending: Option<bool>,
    pub retired_pages_pending: Option<bool>,
    /// Links the GPU has, and those up.
    pub nvlinks: Option<f64>,
    pub nvlinks_up: Option<f64>,
    /// Recovery and data CRC errors over all links (NVLink 5: failed recoveries and errors left
    /// after FEC).
    pub nvlink_serious_errors: Option<f64>,
    pub pcie_generation: Option<f64>,
    pub pcie_max_generation: Option<f64>,
    pub pcie_width: Option<f64>,
    pub pcie_max_width: Option<f64>,
    pub utilization: Option<f64>,
    /// Whether the GPU's NVLink fabric registration completed successfully (`None`: no fabric).
    pub fabric_ready: Option<bool>,
    /// Fabric health flags that hold now.
    pub fabric_flags: Vec<String>,
    /// A port of the GPU's rail NIC is down.
    pub rail_port_down: bool,
    /// The rates of the GPU's rail ports that are up, bytes per second, by `device/port`.
    pub rail_up_rates: Vec<(String, f64)>,
    /// Rail ports seen down, by `device/port` (their rate is no measure of the link).
    pub rail_down_ports: Vec<String>,
    /// The NVLink domain the fabric puts the GPU in: `(cluster_uuid, clique_id)`.
    pub fabric_domain: Option<(String, String)>,
    /// Set by the node-level pass: a rail port up runs below the node's fastest rail port.
    pub rail_port_slow: bool,
    /// Set by the node-level pass: the GPU is outside the NVLink domain of most of the node's
    /// GPUs.
    pub clique_split: bool,
    /// The driver's recovery action (`none` when it needs nothing).
    pub recovery_action: Option<String>,
    /// Throttle reasons active now.
    pub hw_slowdown: bool,
    pub thermal_slowdown: bool,
}

/// Gathers the facts of every whole GPU (MIG instance samples are skipped: the rules are about
/// the physical GPU) in `samples`, keyed by UUID, with the device key to publish under.
pub(crate) fn gather<'a>(
    samples: impl Iterator<Item = &'a Sample>,
) -> HashMap<Arc<str>, (Arc<DeviceKey>, GpuFacts)> {
    let mut gpus: HashMap<Arc<str>, (Arc<DeviceKey>, GpuFacts)> = HashMap::new();
    for s in samples {
        let Some(device) = s.device.as_ref().filter(|d| d.mig().is_none()) else {
            continue;
        };
        if !is_read(s.metric) || !s.value.is_finite() {
            continue;
        }
        let uuid: Arc<str> = device.uuid().into();
        let (_, f) = gpus
            .entry(uuid)
            .or_insert_with(|| (Arc::clone(device), GpuFacts::default()));
        let on = s.value > 0.0;
        match s.metric {
            Metric::GpuUp => f.up = Some(on),
            Metric::GpuXidErrors => {
                if let Some(code) = s.label("xid").and_then(|x| x.parse().ok()) {
                    f.xids.insert(code, s.value);
                }
            }
            Metric::GpuEccErrors if s.label("counter") == Some("volatile") => {
                match s.label("error_type") {
                    Some("uncorrected") => f.ecc_uncorrected_volatile = Some(s.value),
                    Some("corrected") => f.ecc_corrected_volatile = Some(s.value),
                    _ => {}
                }
            }
            Metric::GpuEnergy => f.energy = Some(s.value),
            Metric::GpuFallenOffBus => f.fallen_off_bus = Some(s.value),
            Metric::GpuXidObserved => f.xid_observed = Some(on),
            Metric::GpuRemappedRowsFailure => f.remap_failure = Some(on),
            Metric::GpuRemappedRowsPending => f.remap_pending = Some(on),
            Metric::GpuRetiredPagesPending => f.retired_pages_pending = Some(on),
            Metric::NvlinkLinks => f.nvlinks = Some(s.value),
            Metric::NvlinkLinksUp => f.nvlinks_up = Some(s.value),
            Metric::NvlinkErrors => {
                // Up to Hopper a retrained link or corrupted data; on Blackwell (NVLink 5) a
                // failed recovery or an error forward error correction left. Symbol errors are
                // what FEC corrects: counted at every healthy link's bit error rate.
                if matches!(
                    s.label("error_type"),
                    Some("recovery" | "crc_data" | "recovery_failed" | "effective")
                ) {
                    *f.nvlink_serious_errors.get_or_insert(0.0) += s.value;
                }
            }
            Metric::PcieLinkGeneration => f.pcie_generation = Some(s.value),
            Metric::PcieLinkMaxGeneration => f.pcie_max_generation = Some(s.value),
            Metric::PcieLinkWidth => f.pcie_width = Some(s.value),
            Metric::PcieLinkMaxWidth => f.pcie_max_width = Some(s.value),
            Metric::GpuUtilization => f.utilization = Some(s.value),
            Metric::GpuFabricState => {
                f.fabric_ready = Some(
                    s.label("state") == Some("completed") && s.label("status") == Some("success"),
                );
            }
            Metric::GpuRailPortUp if !on => {
                f.rail_port_down = true;
                f.rail_down_ports.push(port_of(s));
            }
            Metric::GpuRailPortRate => f.rail_up_rates.push((port_of(s), s.value)),
            Metric::GpuFabricInfo => {
                f.fabric_domain = Some((
                    s.label("cluster_uuid").unwrap_or_default().to_string(),
                    s.label("clique_id").unwrap_or_default().to_string(),
                ));
            }
            Metric::GpuFabricHealth if on => {
                if let Some(flag) = s.label("flag") {
                    f.fabric_flags.push(flag.to_string());
                }
            }
            Metric::GpuRecoveryAction => {
                f.recovery_action = s.label("action").map(str::to_string);
            }
            Metric::GpuThrottleReason if on => match s.label("reason") {
                Some("hw_slowdown" | "hw_power_brake_slowdown") => f.hw_slowdown = true,
                Some("hw_thermal_slowdown" | "sw_thermal_slowdown") => f.thermal_slowdown = true,
                _ => {}
            },
            _ => {}
        }
    }
    // A port down reports some rate too; it is no measure of the link.
    for (_, f) in gpus.values_mut() {
        let down = &f.rail_down_ports;
        f.rail_up_rates.retain(|(port, _)| !down.contains(port));
    }
    gpus
}

/// `device/port` of a rail series.
fn port_of(s: &Sample) -> String {
    format!(
        "{}/{}",
        s.label("device").unwrap_or_default(),
        s.label("port").unwrap_or_default()
    )
}

/// The node-level pass over every GPU's facts: marks the rail ports that run below the
/// node's fastest rail port up (a node's rails are alike, and sysfs gives a port's current
/// rate, not the most it could train to), and the GPUs outside the NVLink domain that most of
/// the node's GPUs share (ties go to the domain of the lowest GPU index).
pub(crate) fn compare_across_node(gpus: &mut [(&Arc<DeviceKey>, &mut GpuFacts)]) {
    let fastest = gpus
        .iter()
        .flat_map(|(_, f)| f.rail_up_rates.iter().map(|(_, r)| *r))
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))));
    if let Some(fastest) = fastest {
        for (_, f) in gpus.iter_mut() {
            f.rail_port_slow = f.rail_up_rates.iter().any(|(_, r)| *r < fastest);
        }
    }
    gpus.sort_by(|a, b| (a.0.index(), a.0.uuid()).cmp(&(b.0.index(), b.0.uuid())));
    let mut counts: Vec<(&(String, String), usize)> = Vec::new();
    for (_, f) in gpus.iter() {
        if let Some(d) = registered_domain(f) {
            match counts.iter_mut().find(|(c, _)| *c == d) {
                Some((_, n)) => *n += 1,
                None => counts.push((d, 1)),
            }
        }
    }
    // The first domain (by GPU index) among those with the most GPUs.
    let most = counts.iter().map(|(_, n)| *n).max().unwrap_or(0);
    let Some(main) = counts
        .iter()
        .find(|(_, n)| *n == most)
        .map(|(d, _)| (*d).clone())
    else {
        return;
    };
    for (_, f) in gpus.iter_mut() {
        f.clique_split = registered_domain(f).is_some_and(|d| *d != main);
    }
}

/// The GPU's NVLink domain once its fabric registration completed with success: before, NVML
/// answers a zeroed cluster and clique, which is no domain (a GPU still registering is judged by
/// the fabric rules, not counted as split).
fn registered_domain(f: &GpuFacts) -> Option<&(String, String)> {
    f.fabric_domain
        .as_ref()
        .filter(|_| f.fabric_ready == Some(true))
}

/// The metrics the rules read; a GPU seen only through others (a probe result, a pod's info)
/// has no facts, and is not given a verdict from them.
fn is_read(metric: Metric) -> bool {
    matches!(
        metric,
        Metric::GpuUp
            | Metric::GpuXidErrors
            | Metric::GpuEccErrors
            | Metric::GpuEnergy
            | Metric::GpuFallenOffBus
            | Metric::GpuXidObserved
            | Metric::GpuRemappedRowsFailure
            | Metric::GpuRemappedRowsPending
            | Metric::GpuRetiredPagesPending
            | Metric::NvlinkLinks
            | Metric::NvlinkLinksUp
            | Metric::NvlinkErrors
            | Metric::PcieLinkGeneration
            | Metric::PcieLinkMaxGeneration
            | Metric::PcieLinkWidth
            | Metric::PcieLinkMaxWidth
            | Metric::GpuUtilization
            | Metric::GpuThrottleReason
            | Metric::GpuRecoveryAction
            | Metric::GpuFabricState
            | Metric::GpuFabricHealth
            | Metric::GpuRailPortUp
            | Metric::GpuRailPortRate
            | Metric::GpuFabricInfo
    )
}
