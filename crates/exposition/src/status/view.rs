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
    NodeView {
        build,
        node,
        gpus,
        sources,
        xid_policy,
    }
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
