//! What the status page shows, read from one generation: its device view, the same served
//! samples `/metrics` encodes (through [`Snapshot::served`]), borrowed, never copied.

use std::time::Duration;

use dgx_pixels_metrics::catalog::Metric;
use dgx_pixels_metrics::labels::TemperatureSensor;
use dgx_pixels_metrics::snapshot::{Sample, Snapshot, SourceError};

use super::health_series;
use crate::store::Generation;

/// The node as the page shows it.
#[derive(Debug, Default, PartialEq)]
pub struct NodeView<'g> {
    /// `dgx_pixels_exporter_build_info`'s labels, when it is served.
    pub build: Option<BuildFacts<'g>>,
    /// The `node` label added to every series, when one is configured.
    pub node: Option<&'g str>,
    /// Every GPU some served sample is about, by index.
    pub gpus: Vec<GpuView<'g>>,
    /// Every source of the generation, by name.
    pub sources: Vec<SourceView<'g>>,
    /// The health collector's XID policy in force (`codes`, `policy`), by code; empty without
    /// one.
    pub xid_policy: Vec<(&'g str, &'g str)>,
    /// The node-level probes' results and the GPUs by probe state.
    pub probes: NodeProbes<'g>,
}

/// What the probes serve about the node as a whole: the NCCL all-reduce, the storage reads,
/// and how many GPUs are in each state. Empty when the probes source serves nothing.
#[derive(Debug, Default, PartialEq)]
pub struct NodeProbes<'g> {
    /// `dgx_pixels_probe_gpus`: (state, GPUs), for the states with at least one GPU.
    pub gpus_by_state: Vec<(&'g str, f64)>,
    /// `dgx_pixels_probe_nccl_largest_bus_bandwidth_bytes_per_second`.
    pub nccl_largest: Option<f64>,
    /// `dgx_pixels_probe_nccl_expected_bus_bandwidth_bytes_per_second`.
    pub nccl_expected: Option<f64>,
    /// `dgx_pixels_probe_nccl_gpus`: the all-reduce's n.
    pub nccl_gpus: Option<f64>,
    /// `dgx_pixels_probe_nccl_bus_bandwidth_bytes_per_second`: (`message_bytes`, bus
    /// bandwidth), by message size.
    pub nccl_sizes: Vec<(&'g str, f64)>,
    /// `dgx_pixels_probe_nccl_runs_total` failures and collisions that counted: (outcome, runs).
    pub nccl_failures: Vec<(&'g str, f64)>,
    /// `dgx_pixels_probe_storage_read_bytes_per_second`: one per path.
    pub storage: Vec<StorageView<'g>>,
    /// `dgx_pixels_probe_storage_runs_total` failures that counted: (path, outcome, runs).
    pub storage_failures: Vec<(&'g str, &'g str, f64)>,
}

impl NodeProbes<'_> {
    /// Whether the probes serve anything about the node.
    pub fn is_empty(&self) -> bool {
        *self == NodeProbes::default()
    }
}

/// The last storage read of a path.
#[derive(Debug, PartialEq)]
pub struct StorageView<'g> {
    /// The `path` label.
    pub path: &'g str,
    /// The `direct` label: `true` where the page cache was bypassed.
    pub direct: &'g str,
    /// Read throughput, bytes per second.
    pub bytes_per_second: f64,
}

/// What the probes found on a GPU and last measured on it, from the probes source's series.
#[derive(Debug, Default, PartialEq)]
pub struct GpuProbes<'g> {
    /// `state` of `dgx_pixels_probe_gpu_state_info`: what its last attempt found.
    pub state: Option<&'g str>,
    /// Each fresh result: `probe` and its value (flops for GEMMs, bytes per second for copies,
    /// seconds for the launch latency), by probe.
    pub results: Vec<ProbeResult<'g>>,
    /// `dgx_pixels_probe_p2p_worst_bandwidth_bytes_per_second`: (`peer_gpu`, bytes per second).
    pub p2p_worst: Option<(&'g str, f64)>,
    /// `dgx_pixels_probe_peak_fraction_ratio`: (`probe`, fraction of the part's peak).
    pub peak_fractions: Vec<(&'g str, f64)>,
    /// `dgx_pixels_probe_runs_total`: failures and collisions that counted (no `ok`, no skip): (probe, outcome, runs).
    pub failures: Vec<(&'g str, &'g str, f64)>,
}

impl GpuProbes<'_> {
    /// Whether the probes serve anything about this GPU.
    pub fn is_empty(&self) -> bool {
        *self == GpuProbes::default()
    }

    /// The fraction of peak served for `probe`.
    pub fn peak_fraction(&self, probe: &str) -> Option<f64> {
        self.peak_fractions
            .iter()
            .find(|(p, _)| *p == probe)
            .map(|(_, f)| *f)
    }
}

/// One probe result of a GPU.
#[derive(Debug, PartialEq)]
pub struct ProbeResult<'g> {
    /// The `probe` label (`gemm_bf16`, `copy_h2d`, ...), `launch_latency` for the latency.
    pub probe: &'g str,
    /// What the value counts.
    pub unit: ProbeUnit,
    /// The value in that unit.
    pub value: f64,
}

/// What a probe result counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeUnit {
    /// Floating-point operations per second.
    Flops,
    /// Bytes per second.
    BytesPerSecond,
    /// Seconds.
    Seconds,
}

/// The labels of `dgx_pixels_exporter_build_info`.
#[derive(Debug, PartialEq)]
pub struct BuildFacts<'g> {
    /// The exporter's version.
    pub version: &'g str,
    /// The git revision it was built from.
    pub revision: &'g str,
    /// `simulated` or `hardware`.
    pub mode: &'g str,
    /// The simulated scenario's name (empty on hardware).
    pub scenario: &'g str,
}

impl BuildFacts<'_> {
    /// Whether the GPUs are simulated: the same test as `mode="simulated"` on the info metric.
    pub fn simulated(&self) -> bool {
        self.mode == "simulated"
    }
}

/// One GPU. `None` is a reading no served sample carries: shown as "—", never as 0.
#[derive(Debug, Default, PartialEq)]
pub struct GpuView<'g> {
    /// The `gpu` label.
    pub index: u32,
    /// The `uuid` label.
    pub uuid: &'g str,
    /// `model` of `dgx_pixels_gpu_info`.
    pub model: Option<&'g str>,
    /// `dgx_pixels_gpu_up`.
    pub up: Option<bool>,
    /// The verdict of the health collector; `None`: not evaluated.
    pub health: Option<Health<'g>>,
    /// Utilization, 0–1.
    pub utilization: Option<f64>,
    /// Framebuffer memory in use, bytes.
    pub memory_used: Option<f64>,
    /// Framebuffer memory, bytes.
    pub memory_total: Option<f64>,
    /// Board power, watts.
    pub power: Option<f64>,
    /// Enforced power limit, watts.
    pub power_limit: Option<f64>,
    /// Die temperature, °C.
    pub temperature: Option<f64>,
    /// MIG instances, by GPU then compute instance.
    pub mig: Vec<MigView<'g>>,
    /// The NVLink fabric the GPU registered with, where NVML reports one.
    pub fabric: Option<FabricView<'g>>,
    /// The ports of the GPU's rail NIC, by device and port.
    pub rail: Vec<RailView<'g>>,
    /// Its probe state and results.
    pub probes: GpuProbes<'g>,
}

/// A GPU's place and state in its NVLink fabric.
#[derive(Debug, Default, PartialEq)]
pub struct FabricView<'g> {
    /// `cluster_uuid` of `dgx_pixels_gpu_fabric_info`.
    pub cluster_uuid: Option<&'g str>,
    /// `clique_id`: the NVLink domain.
    pub clique_id: Option<&'g str>,
    /// `state` of the state series (`completed` once registered).
    pub state: Option<&'g str>,
    /// `status` of the state series (`success`, or NVML's error).
    pub status: Option<&'g str>,
    /// The health flags that hold now.
    pub flags: Vec<&'g str>,
}

/// One port of a GPU's rail NIC.
#[derive(Debug, Default, PartialEq)]
pub struct RailView<'g> {
    /// `device`: the NIC, `mlx5_0`.
    pub device: &'g str,
    /// `port`.
    pub port: &'g str,
    /// Whether it is active with its physical link up.
    pub up: Option<bool>,
    /// The rate it trained to, bytes per second.
    pub rate: Option<f64>,
}

/// A GPU's health verdict: its current state and the most severe action pending.
#[derive(Debug, Default, PartialEq)]
pub struct Health<'g> {
    /// The `state` whose series is 1; `None` when the collector serves states but none is 1.
    pub state: Option<&'g str>,
    /// `action` of the action series.
    pub action: Option<&'g str>,
    /// `reason` of the action series: the rule behind the action.
    pub reason: Option<&'g str>,
}

/// One MIG instance of a GPU.
#[derive(Debug, Default, PartialEq)]
pub struct MigView<'g> {
    /// `gpu_instance`.
    pub gpu_instance: u32,
    /// `compute_instance`, when the series names one.
    pub compute_instance: Option<u32>,
    /// `mig_profile` of `dgx_pixels_mig_info`.
    pub profile: Option<&'g str>,
    /// Memory in use in the instance, bytes.
    pub memory_used: Option<f64>,
    /// Memory of the instance, bytes.
    pub memory_total: Option<f64>,
}

/// One source and how its polls are going.
#[derive(Debug, PartialEq)]
pub struct SourceView<'g> {
    /// The `source` label.
    pub name: &'g str,
    /// Up, down or not polled yet.
    pub state: SourceState,
    /// When its last successful poll ended.
    pub last_success: Option<std::time::SystemTime>,
    /// How long its last completed poll took.
    pub poll_duration: Option<Duration>,
    /// Polls completed.
    pub polls: u64,
    /// Polls failed or overrun.
    pub errors: u64,
    /// Its latest failure, if it ever failed.
    pub last_error: Option<&'g SourceError>,
}

/// Whether a source is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceState {
    /// Its last poll succeeded: its series are served.
    Up,
    /// Its last poll failed or overran: it contributes nothing.
    Down,
    /// No poll has completed yet.
    Pending,
}

impl SourceState {
    fn of(snapshot: &Snapshot) -> SourceState {
        let h = &snapshot.health;
        if h.up {
            SourceState::Up
        } else if h.polls == 0 && h.errors == 0 {
            SourceState::Pending
        } else {
            SourceState::Down
        }
    }

    /// The word the page shows.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceState::Up => "up",
            SourceState::Down => "down",
            SourceState::Pending => "pending",
        }
    }
}

/// The rows that describe a MIG instance itself.
const MIG_ROWS: [Metric; 3] = [
    Metric::MigInfo,
    Metric::MigMemoryUsed,
    Metric::MigMemoryTotal,
];

/// Reads the page's view of `generation`, from its device view.
pub fn view(generation: &Generation) -> NodeView<'_> {
    let devices = generation.device_view();
    let mut gpus: Vec<GpuView<'_>> = devices
        .gpus()
        .map(|device| {
            let mut gpu = GpuView {
                index: device.index(),
                uuid: device.uuid(),
                ..GpuView::default()
            };
            for sample in device.samples() {
                gpu.read(sample);
            }
            // A process in a MIG instance names it too: only the instance's own rows make one.
            for instance in device.instances() {
                let mut rows = MIG_ROWS
                    .iter()
                    .flat_map(|m| instance.readings(*m))
                    .peekable();
                if rows.peek().is_none() {
                    continue;
                }
                let m = instance.mig();
                let mut mig = MigView {
                    gpu_instance: m.gpu_instance,
                    compute_instance: m.compute_instance,
                    ..MigView::default()
                };
                for sample in rows {
                    mig.read(sample);
                }
                gpu.mig.push(mig);
            }
            gpu
        })
        .collect();
    gpus.sort_by(|a, b| (a.index, a.uuid).cmp(&(b.index, b.uuid)));
    for gpu in &mut gpus {
        gpu.mig
            .sort_by_key(|m| (m.gpu_instance, m.compute_instance));
        gpu.rail
            .sort_by(|a, b| (a.device, a.port).cmp(&(b.device, b.port)));
        gpu.probes.results.sort_by(|a, b| a.probe.cmp(b.probe));
        gpu.probes
            .failures
            .sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    }
    let build = generation
        .statics()
        .iter()
        .find(|s| s.metric == Metric::ExporterBuildInfo)
        .map(|s| BuildFacts {
            version: s.label("version").unwrap_or_default(),
            revision: s.label("revision").unwrap_or_default(),
            mode: s.label("mode").unwrap_or_default(),
            scenario: s.label("scenario").unwrap_or_default(),
        });
    let node = generation
        .const_labels()
        .iter()
        .find(|(k, _)| k == "node")
        .map(|(_, v)| v.as_str());
    let sources = generation
        .snapshots()
        .iter()
        .map(|s| SourceView {
            name: &s.source,
            state: SourceState::of(s),
            last_success: s.health.last_success,
            poll_duration: s.health.last_poll_duration,
            polls: s.health.polls,
            errors: s.health.errors,
            last_error: s.health.last_error.as_ref(),
        })
        .collect();
    let mut xid_policy: Vec<(&str, &str)> = generation
        .snapshots()
        .iter()
        .filter_map(|s| s.served())
        .flat_map(|o| &o.samples)
        .filter(|s| s.metric == health_series::XID_POLICY)
        .map(|s| {
            (
                s.label("codes").unwrap_or_default(),
                s.label("policy").unwrap_or_default(),
            )
        })
        .collect();
    // By first code: "9" before "13-20".
    xid_policy
        .sort_by_key(|(codes, _)| codes.split('-').next().and_then(|c| c.parse::<u32>().ok()));
    let probes = node_probes(generation);
    NodeView {
        build,
        node,
        gpus,
        sources,
        xid_policy,
        probes,
    }
}

/// A run outcome the page lists: a failure or a collision. A skip is the probes being polite
/// (the state says which), and `ok` is the result itself.
fn is_failure(outcome: &str) -> bool {
    outcome != "ok" && !outcome.starts_with("skipped_")
}

/// The node-level probe series of the served samples (no `gpu` label: not in the device view).
fn node_probes(generation: &Generation) -> NodeProbes<'_> {
    let mut p = NodeProbes::default();
    let samples = generation
        .snapshots()
        .iter()
        .filter_map(|s| s.served())
        .flat_map(|o| &o.samples);
    for s in samples {
        let v = s.value;
        match s.metric {
            Metric::ProbeGpus if v > 0.0 => {
                if let Some(state) = s.label("state") {
                    p.gpus_by_state.push((state, v));
                }
            }
            Metric::ProbeNcclLargestBusBandwidth => keep(&mut p.nccl_largest, v),
            Metric::ProbeNcclExpectedBusBandwidth => keep(&mut p.nccl_expected, v),
            Metric::ProbeNcclGpus => keep(&mut p.nccl_gpus, v),
            Metric::ProbeNcclBusBandwidth if v.is_finite() => {
                p.nccl_sizes
                    .push((s.label("message_bytes").unwrap_or_default(), v));
            }
            Metric::ProbeNcclRuns if v > 0.0 => {
                if let Some(outcome) = s.label("outcome").filter(|o| is_failure(o)) {
                    p.nccl_failures.push((outcome, v));
                }
            }
            Metric::ProbeStorageRead if v.is_finite() => p.storage.push(StorageView {
                path: s.label("path").unwrap_or_default(),
                direct: s.label("direct").unwrap_or_default(),
                bytes_per_second: v,
            }),
            Metric::ProbeStorageRuns if v > 0.0 => {
                let outcome = s.label("outcome").unwrap_or_default();
                if is_failure(outcome) {
                    p.storage_failures
                        .push((s.label("path").unwrap_or_default(), outcome, v));
                }
            }
            _ => {}
        }
    }
    // Smallest message first, as nccl-tests prints them.
    p.nccl_sizes
        .sort_by_key(|(bytes, _)| bytes.parse::<u64>().unwrap_or(u64::MAX));
    p.storage.sort_by(|a, b| a.path.cmp(b.path));
    p.storage_failures
        .sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    p
}

/// The first served value of a reading wins (one source owns a reading; should two serve it,
/// the page shows one of them rather than flip between them).
fn keep(slot: &mut Option<f64>, value: f64) {
    if slot.is_none() && value.is_finite() {
        *slot = Some(value);
    }
}

impl<'g> GpuView<'g> {
    fn read(&mut self, sample: &'g Sample) {
        let v = sample.value;
        match sample.metric {
            Metric::GpuInfo => self.model = self.model.or(sample.label("model")),
            Metric::GpuUp => self.up = self.up.or(Some(v == 1.0)),
            Metric::GpuUtilization => keep(&mut self.utilization, v),
            Metric::GpuMemoryUsed => keep(&mut self.memory_used, v),
            Metric::GpuMemoryTotal => keep(&mut self.memory_total, v),
            Metric::GpuPower => keep(&mut self.power, v),
            Metric::GpuPowerLimit => keep(&mut self.power_limit, v),
            Metric::GpuTemperature
                if sample.label("sensor") == Some(TemperatureSensor::Gpu.as_str()) =>
            {
                keep(&mut self.temperature, v);
            }
            Metric::GpuFabricInfo => {
                let f = self.fabric.get_or_insert_with(FabricView::default);
                f.cluster_uuid = f.cluster_uuid.or(sample.label("cluster_uuid"));
                f.clique_id = f.clique_id.or(sample.label("clique_id"));
            }
            Metric::GpuFabricState if v == 1.0 => {
                let f = self.fabric.get_or_insert_with(FabricView::default);
                f.state = f.state.or(sample.label("state"));
                f.status = f.status.or(sample.label("status"));
            }
            Metric::GpuFabricHealth if v == 1.0 => {
                let f = self.fabric.get_or_insert_with(FabricView::default);
                if let Some(flag) = sample.label("flag").filter(|g| !f.flags.contains(g)) {
                    f.flags.push(flag);
                }
            }
            Metric::GpuRailPortUp => {
                if let Some(r) = self.rail_port(sample) {
                    r.up = r.up.or(Some(v == 1.0));
                }
            }
            Metric::GpuRailPortRate => {
                if let Some(r) = self.rail_port(sample) {
                    keep(&mut r.rate, v);
                }
            }
            Metric::ProbeGpuState if v == 1.0 => {
                self.probes.state = self.probes.state.or(sample.label("state"));
            }
            Metric::ProbeGemm => self.probe_result(sample, ProbeUnit::Flops),
            Metric::ProbeBandwidth => self.probe_result(sample, ProbeUnit::BytesPerSecond),
            Metric::ProbeLaunchLatency => self.probe_result(sample, ProbeUnit::Seconds),
            Metric::ProbeP2pWorstBandwidth if v.is_finite() => {
                let peer = sample.label("peer_gpu").unwrap_or_default();
                self.probes.p2p_worst = self.probes.p2p_worst.or(Some((peer, v)));
            }
            Metric::ProbePeakFraction if v.is_finite() => {
                if let Some(probe) = sample.label("probe") {
                    self.probes.peak_fractions.push((probe, v));
                }
            }
            Metric::ProbeRuns if v > 0.0 => {
                let outcome = sample.label("outcome").unwrap_or_default();
                if is_failure(outcome) {
                    let probe = sample.label("probe").unwrap_or_default();
                    self.probes.failures.push((probe, outcome, v));
                }
            }
            health_series::STATE => {
                let health = self.health.get_or_insert_with(Health::default);
                if v == 1.0 && health.state.is_none() {
                    health.state = sample.label(health_series::STATE_LABEL);
                }
            }
            health_series::ACTION => {
                let health = self.health.get_or_insert_with(Health::default);
                if health.action.is_none() {
                    health.action = sample.label(health_series::ACTION_LABEL);
                    health.reason = sample.label(health_series::REASON_LABEL);
                }
            }
            _ => {}
        }
    }
}

impl<'g> GpuView<'g> {
    /// Adds a probe result; the latency has no `probe` label, it is the launch_latency probe.
    fn probe_result(&mut self, sample: &'g Sample, unit: ProbeUnit) {
        if !sample.value.is_finite() {
            return;
        }
        let probe = sample.label("probe").unwrap_or("launch_latency");
        if self.probes.results.iter().any(|r| r.probe == probe) {
            return;
        }
        self.probes.results.push(ProbeResult {
            probe,
            unit,
            value: sample.value,
        });
    }

    /// The rail port `sample` is about, added when first seen.
    fn rail_port(&mut self, sample: &'g Sample) -> Option<&mut RailView<'g>> {
        let device = sample.label("device").unwrap_or_default();
        let port = sample.label("port").unwrap_or_default();
        let this = |r: &RailView<'_>| r.device == device && r.port == port;
        if !self.rail.iter().any(this) {
            self.rail.push(RailView {
                device,
                port,
                ..RailView::default()
            });
        }
        self.rail.iter_mut().find(|r| this(r))
    }
}

impl<'g> MigView<'g> {
    fn read(&mut self, sample: &'g Sample) {
        match sample.metric {
            Metric::MigInfo => self.profile = self.profile.or(sample.label("mig_profile")),
            Metric::MigMemoryUsed => keep(&mut self.memory_used, sample.value),
            Metric::MigMemoryTotal => keep(&mut self.memory_total, sample.value),
            _ => {}
        }
    }
}
