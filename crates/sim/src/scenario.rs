#![doc = include_str!("../scenarios/README.md")]

use std::time::Duration;

use serde::Deserialize;

use crate::error::ScenarioError;
use crate::locate;
use crate::noise;
use crate::types::{Clocks, GpuStatic, MigInstance};

/// Names of the scenarios built into the crate; each is also a readable example file under
/// `crates/sim/scenarios/`.
pub const BUILTIN_SCENARIOS: &[&str] = &[
    "dgx-h100",
    "dgx-a100-mig",
    "dgx-spark",
    "fault-gpu-lost",
    "fault-xid-storm",
    "fault-ecc",
    "fault-thermal",
];

const BUILTIN_TEXT: &[(&str, &str)] = &[
    ("dgx-h100", include_str!("../scenarios/dgx-h100.toml")),
    (
        "dgx-a100-mig",
        include_str!("../scenarios/dgx-a100-mig.toml"),
    ),
    ("dgx-spark", include_str!("../scenarios/dgx-spark.toml")),
    (
        "fault-gpu-lost",
        include_str!("../scenarios/fault-gpu-lost.toml"),
    ),
    (
        "fault-xid-storm",
        include_str!("../scenarios/fault-xid-storm.toml"),
    ),
    ("fault-ecc", include_str!("../scenarios/fault-ecc.toml")),
    (
        "fault-thermal",
        include_str!("../scenarios/fault-thermal.toml"),
    ),
];

/// Most GPUs a scenario may define.
pub const MAX_GPUS: usize = 64;

/// The XID that means "GPU has fallen off the bus".
pub const XID_GPU_LOST: u32 = 79;

const MIB: u64 = 1024 * 1024;
const MAX_RATE: f64 = 1e13;

// ---------------------------------------------------------------------------------------------
// The file format, as serde sees it.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    node: RawNode,
    #[serde(default)]
    workload: RawWorkload,
    gpus: Vec<RawGpu>,
    #[serde(default)]
    mig: Vec<RawMig>,
    #[serde(default)]
    phases: Vec<RawPhase>,
    #[serde(default)]
    faults: Vec<RawFault>,
    /// Kept as written: its keys are the exporter's `[cost]` settings, checked there.
    #[serde(default)]
    cost: Option<toml::Table>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    seed: u64,
    driver_version: Option<String>,
    cuda_driver_version: Option<u32>,
    ambient_celsius: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    repeat_after_s: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    count: Option<u32>,
    name: String,
    architecture: String,
    vbios_version: Option<String>,
    memory_total_bytes: Option<u64>,
    memory_reserved_bytes: Option<u64>,
    memory_temperature_sensor: Option<bool>,
    memory_temperature_offset_celsius: Option<f64>,
    power_limit_watts: f64,
    idle_power_watts: f64,
    max_power_watts: Option<f64>,
    max_graphics_clock_hz: f64,
    max_sm_clock_hz: Option<f64>,
    max_memory_clock_hz: f64,
    max_video_clock_hz: f64,
    idle_graphics_clock_hz: Option<f64>,
    idle_video_clock_hz: Option<f64>,
    #[serde(default)]
    nvlink_count: u32,
    slowdown_temperature_celsius: f64,
    shutdown_temperature_celsius: f64,
    max_operating_temperature_celsius: Option<f64>,
    thermal_resistance_celsius_per_watt: Option<f64>,
    thermal_time_constant_s: Option<f64>,
    #[serde(default)]
    fan: bool,
    pci_bus_ids: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMig {
    gpu: u32,
    profiles: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPhase {
    name: Option<String>,
    start_s: f64,
    gpus: Option<Vec<u32>>,
    utilization: f64,
    memory_used_ratio: Option<f64>,
    memory_used_bytes: Option<u64>,
    memory_bandwidth_ratio: Option<f64>,
    #[serde(default)]
    pcie_tx_bytes_per_second: f64,
    #[serde(default)]
    pcie_rx_bytes_per_second: f64,
    #[serde(default)]
    nvlink_tx_bytes_per_second: f64,
    #[serde(default)]
    nvlink_rx_bytes_per_second: f64,
    #[serde(default)]
    ramp_s: f64,
    spread: Option<f64>,
    noise: Option<f64>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
enum RawFaultKind {
    Xid,
    Lost,
    Ecc,
    Thermal,
}

impl RawFaultKind {
    fn as_str(self) -> &'static str {
        match self {
            RawFaultKind::Xid => "xid",
            RawFaultKind::Lost => "lost",
            RawFaultKind::Ecc => "ecc",
            RawFaultKind::Thermal => "thermal",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    kind: RawFaultKind,
    gpu: u32,
    at_s: f64,
    xid: Option<u32>,
    repeat_every_s: Option<f64>,
    count: Option<u64>,
    recover_at_s: Option<f64>,
    corrected: Option<u64>,
    uncorrected: Option<u64>,
    until_s: Option<f64>,
    ambient_rise_celsius: Option<f64>,
    thermal_resistance_factor: Option<f64>,
}

// ---------------------------------------------------------------------------------------------
// The validated model.

/// Physical parameters of one GPU, after defaults were applied.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GpuModel {
    pub idle_power: f64,
    pub max_power: f64,
    pub power_limit: f64,
    pub idle_clocks: Clocks,
    pub max_clocks: Clocks,
    pub thermal_resistance: f64,
    pub time_constant_s: f64,
    pub max_operating_temperature: f64,
    pub slowdown_temperature: f64,
    pub memory_total: Option<u64>,
    pub memory_reserved: Option<u64>,
    pub memory_temperature_offset: Option<f64>,
    pub fan: bool,
    pub nvlink_count: u32,
}

/// How much memory a phase uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum PhaseMemory {
    /// Fraction of the usable memory (total - reserved).
    Ratio(f64),
    /// Absolute bytes.
    Bytes(u64),
}

/// One workload phase.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Phase {
    /// Position in the file (for noise streams).
    pub index: usize,
    pub start: Duration,
    pub ramp: Duration,
    pub gpus: Option<Vec<u32>>,
    pub utilization: f64,
    pub memory: PhaseMemory,
    pub memory_bandwidth: Option<f64>,
    pub pcie_tx: f64,
    pub pcie_rx: f64,
    pub nvlink_tx: f64,
    pub nvlink_rx: f64,
    pub spread: f64,
    pub noise: f64,
}

/// How often an event fires.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Repeat {
    pub at: Duration,
    pub every: Option<Duration>,
    /// Total occurrences; `None` = unlimited (only with `every`).
    pub count: Option<u64>,
}

impl Repeat {
    /// Occurrences at or before `t`.
    pub fn occurrences(&self, t: Duration) -> u64 {
        if t < self.at {
            return 0;
        }
        let n = match self.every {
            None => 1,
            Some(every) => {
                let per = every.as_nanos().max(1);
                let k = (t - self.at).as_nanos() / per;
                u64::try_from(k).unwrap_or(u64::MAX).saturating_add(1)
            }
        };
        match self.count {
            Some(c) => n.min(c),
            None => n,
        }
    }
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Fault {
    Xid {
        gpu: usize,
        xid: u32,
        when: Repeat,
    },
    Lost {
        gpu: usize,
        xid: u32,
        at: Duration,
        recover: Option<Duration>,
    },
    Ecc {
        gpu: usize,
        corrected: u64,
        uncorrected: u64,
        when: Repeat,
    },
    Thermal {
        gpu: usize,
        at: Duration,
        until: Duration,
        ambient_rise: f64,
        resistance_factor: f64,
    },
}

impl Fault {
    pub fn gpu(&self) -> usize {
        match self {
            Fault::Xid { gpu, .. }
            | Fault::Lost { gpu, .. }
            | Fault::Ecc { gpu, .. }
            | Fault::Thermal { gpu, .. } => *gpu,
        }
    }
}

/// A validated scenario: GPUs, workload phases and faults of one simulated node.
///
/// Build one with [`Scenario::builtin`], [`Scenario::load`] or [`Scenario::from_toml_str`]; all
/// three go through the same parser and validation, so a `Scenario` is always consistent and a
/// [`Node`](crate::Node) built from it never fails.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    origin: String,
    name: String,
    description: String,
    seed: u64,
    driver_version: String,
    cuda_driver_version: u32,
    pub(crate) ambient_celsius: f64,
    pub(crate) repeat_after: Option<Duration>,
    pub(crate) gpus: Vec<GpuStatic>,
    pub(crate) models: Vec<GpuModel>,
    /// Sorted by start time (stable).
    pub(crate) phases: Vec<Phase>,
    pub(crate) faults: Vec<Fault>,
    cost: Option<toml::Table>,
}

impl Scenario {
    /// The built-in scenario called `name` (see [`BUILTIN_SCENARIOS`]), or `None`.
    pub fn builtin(name: &str) -> Option<Scenario> {
        let (_, text) = BUILTIN_TEXT.iter().find(|(n, _)| *n == name)?;
        // Built-ins are checked by the test suite; should one ever fail, it is simply unknown.
        Scenario::from_toml_str(text, &format!("builtin:{name}")).ok()
    }

    /// The TOML text of a built-in scenario, e.g. to write it out as a starting point.
    pub fn builtin_text(name: &str) -> Option<&'static str> {
        BUILTIN_TEXT
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| *t)
    }

    /// Loads a built-in by name, or else a TOML scenario file at that path.
    pub fn load(name_or_path: &str) -> Result<Scenario, ScenarioError> {
        if let Some((name, text)) = BUILTIN_TEXT.iter().find(|(n, _)| *n == name_or_path) {
            return Scenario::from_toml_str(text, &format!("builtin:{name}"));
        }
        let path = std::path::Path::new(name_or_path);
        if name_or_path.is_empty() || !path.exists() {
            return Err(ScenarioError::Unknown {
                name: name_or_path.to_string(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            origin: name_or_path.to_string(),
            source,
        })?;
        Scenario::from_toml_str(&text, name_or_path)
    }

    /// Parses and validates scenario TOML; `origin` (a file name) is used in error messages.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        let ctx = Ctx { origin, text };
        let raw: RawScenario = toml::from_str(text).map_err(|e| ctx.toml_error(&e))?;
        validate(&ctx, raw)
    }

    /// The scenario's name (`[node] name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The scenario's description (`[node] description`).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Where it came from: the file path, or `builtin:NAME`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Seed of all pseudo-random values (identifiers, noise).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Driver version string, e.g. `550.54.15`.
    pub fn driver_version(&self) -> &str {
        &self.driver_version
    }

    /// CUDA driver version in NVML's encoding (`12040` for 12.4).
    pub fn cuda_driver_version(&self) -> u32 {
        self.cuda_driver_version
    }

    /// Static facts of every GPU, by index.
    pub fn gpus(&self) -> &[GpuStatic] {
        &self.gpus
    }

    /// The `[cost]` table as written, if the scenario has one: the same keys as the exporter's
    /// config file `[cost]`, which checks them.
    pub fn cost(&self) -> Option<&toml::Table> {
        self.cost.as_ref()
    }

    /// Period after which the workload phases start over, if they repeat.
    pub fn repeat_after(&self) -> Option<Duration> {
        self.repeat_after
    }
}

// ---------------------------------------------------------------------------------------------
// Validation.

struct Ctx<'a> {
    origin: &'a str,
    text: &'a str,
}

fn join_key(table: &str, key: Option<&str>) -> Option<String> {
    match (table.is_empty(), key) {
        (true, None) => None,
        (true, Some(k)) => Some(k.to_string()),
        (false, None) => Some(table.to_string()),
        (false, Some(k)) => Some(format!("{table}.{k}")),
    }
}

impl Ctx<'_> {
    fn err(&self, table: &str, key: Option<&str>, message: impl Into<String>) -> ScenarioError {
        ScenarioError::Invalid {
            origin: self.origin.to_string(),
            line: locate::line_of_key(self.text, table, key),
            key: join_key(table, key),
            message: message.into(),
        }
    }

    fn toml_error(&self, e: &toml::de::Error) -> ScenarioError {
        let message = e
            .message()
            .trim()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        let (line, mut key) = match e.span() {
            Some(span) => (
                Some(locate::line_of_offset(self.text, span.start)),
                locate::key_path_at(self.text, span.start),
            ),
            None => (None, None),
        };
        // "missing field `x`" points at the table; name the field too.
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|r| r.split('`').next())
        {
            let table = key.take().unwrap_or_default();
            if table.is_empty() {
                key = Some(field.to_string());
            } else if table.ends_with(field) {
                key = Some(table);
            } else {
                key = Some(format!("{table}.{field}"));
            }
        }
        ScenarioError::Invalid {
            origin: self.origin.to_string(),
            line,
            key,
            message,
        }
    }

    fn positive(&self, table: &str, key: &str, v: f64) -> Result<f64, ScenarioError> {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(self.err(table, Some(key), "expected a number > 0"))
        }
    }

    fn non_negative(&self, table: &str, key: &str, v: f64, max: f64) -> Result<f64, ScenarioError> {
        if v.is_finite() && (0.0..=max).contains(&v) {
            Ok(v)
        } else {
            Err(self.err(
                table,
                Some(key),
                format!("expected a number between 0 and {max}"),
            ))
        }
    }

    fn ratio(&self, table: &str, key: &str, v: f64) -> Result<f64, ScenarioError> {
        if v.is_finite() && (0.0..=1.0).contains(&v) {
            Ok(v)
        } else {
            Err(self.err(table, Some(key), "expected a ratio between 0 and 1"))
        }
    }

    fn time(&self, table: &str, key: &str, v: f64) -> Result<Duration, ScenarioError> {
        const MAX_S: f64 = 1e10;
        if v.is_finite() && (0.0..=MAX_S).contains(&v) {
            if let Ok(d) = Duration::try_from_secs_f64(v) {
                return Ok(d);
            }
        }
        Err(self.err(
            table,
            Some(key),
            format!("expected a time in seconds between 0 and {MAX_S}"),
        ))
    }

    fn interval(&self, table: &str, key: &str, v: f64) -> Result<Duration, ScenarioError> {
        let d = self.time(table, key, v)?;
        if d < Duration::from_millis(1) {
            return Err(self.err(table, Some(key), "expected an interval of at least 0.001 s"));
        }
        Ok(d)
    }

    fn unused<T>(
        &self,
        table: &str,
        key: &str,
        v: &Option<T>,
        kind: RawFaultKind,
    ) -> Result<(), ScenarioError> {
        match v {
            Some(_) => Err(self.err(
                table,
                Some(key),
                format!("not used by faults of kind \"{}\"", kind.as_str()),
            )),
            None => Ok(()),
        }
    }
}

fn uuid_from(prefix: &str, h1: u64, h2: u64) -> String {
    format!(
        "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        h1 >> 32,
        (h1 >> 16) & 0xffff,
        h1 & 0xffff,
        h2 >> 48,
        h2 & 0xffff_ffff_ffff
    )
}

fn valid_bus_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 16
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 11 => *c == b':',
            14 => *c == b'.',
            _ => c.is_ascii_hexdigit(),
        })
}

fn default_bus_id(index: usize) -> String {
    format!("{:08X}:{:02X}:00.0", index / 200, 0x10 + index % 200)
}

/// `(slices, memory in bytes)` of a profile such as `3g.40gb`.
fn parse_profile(p: &str) -> Option<(u32, u64)> {
    let (g, rest) = p.split_once("g.")?;
    let gb = rest.strip_suffix("gb")?;
    let slices: u32 = g.parse().ok()?;
    let gb: u64 = gb.parse().ok()?;
    if !(1..=7).contains(&slices) || !(1..=1024).contains(&gb) {
        return None;
    }
    // The usable memory of a MIG slice is a little below its nominal size (1g.10gb: 9728 MiB).
    Some((slices, gb * 1024 * 95 / 100 * MIB))
}

fn validate(ctx: &Ctx<'_>, raw: RawScenario) -> Result<Scenario, ScenarioError> {
    let node = &raw.node;
    if node.name.trim().is_empty() {
        return Err(ctx.err("node", Some("name"), "expected a non-empty name"));
    }
    let ambient = match node.ambient_celsius {
        Some(a) if a.is_finite() && (-40.0..=60.0).contains(&a) => a,
        Some(_) => {
            return Err(ctx.err(
                "node",
                Some("ambient_celsius"),
                "expected a temperature between -40 and 60",
            ))
        }
        None => 25.0,
    };
    let seed = node.seed;
    let repeat_after = match raw.workload.repeat_after_s {
        Some(v) => Some(ctx.interval("workload", "repeat_after_s", v)?),
        None => None,
    };

    // GPUs.
    let mut gpus: Vec<GpuStatic> = Vec::new();
    let mut models: Vec<GpuModel> = Vec::new();
    for (i, g) in raw.gpus.iter().enumerate() {
        let t = format!("gpus[{i}]");
        let t = t.as_str();
        let count = g.count.unwrap_or(1) as usize;
        if count == 0 || gpus.len() + count > MAX_GPUS {
            return Err(ctx.err(
                t,
                Some("count"),
                format!("expected 1 or more, with at most {MAX_GPUS} GPUs in all"),
            ));
        }
        if g.name.trim().is_empty() {
            return Err(ctx.err(t, Some("name"), "expected a non-empty name"));
        }
        let limit = ctx.positive(t, "power_limit_watts", g.power_limit_watts)?;
        let idle = ctx.positive(t, "idle_power_watts", g.idle_power_watts)?;
        if idle * 1.02 >= limit {
            return Err(ctx.err(
                t,
                Some("idle_power_watts"),
                "expected idle power well below power_limit_watts",
            ));
        }
        let max_power = match g.max_power_watts {
            Some(v) => {
                let v = ctx.positive(t, "max_power_watts", v)?;
                if v <= idle {
                    return Err(ctx.err(
                        t,
                        Some("max_power_watts"),
                        "expected a number above idle_power_watts",
                    ));
                }
                v
            }
            None => limit * 1.05,
        };
        let max_graphics = ctx.positive(t, "max_graphics_clock_hz", g.max_graphics_clock_hz)?;
        let max_sm = match g.max_sm_clock_hz {
            Some(v) => ctx.positive(t, "max_sm_clock_hz", v)?,
            None => max_graphics,
        };
        let max_memory = ctx.positive(t, "max_memory_clock_hz", g.max_memory_clock_hz)?;
        let max_video = ctx.positive(t, "max_video_clock_hz", g.max_video_clock_hz)?;
        let idle_graphics = match g.idle_graphics_clock_hz {
            Some(v) => ctx.positive(t, "idle_graphics_clock_hz", v)?,
            None => max_graphics * 0.175,
        };
        if idle_graphics > max_graphics.min(max_sm) {
            return Err(ctx.err(
                t,
                Some("idle_graphics_clock_hz"),
                "expected a clock at most max_graphics_clock_hz and max_sm_clock_hz",
            ));
        }
        let idle_video = match g.idle_video_clock_hz {
            Some(v) => ctx.positive(t, "idle_video_clock_hz", v)?,
            None => max_video * 0.35,
        };
        if idle_video > max_video {
            return Err(ctx.err(
                t,
                Some("idle_video_clock_hz"),
                "expected a clock at most max_video_clock_hz",
            ));
        }
        let slowdown = ctx.positive(
            t,
            "slowdown_temperature_celsius",
            g.slowdown_temperature_celsius,
        )?;
        if slowdown <= ambient + 5.0 || slowdown > 150.0 {
            return Err(ctx.err(
                t,
                Some("slowdown_temperature_celsius"),
                "expected a temperature above the ambient temperature and at most 150",
            ));
        }
        let shutdown = ctx.positive(
            t,
            "shutdown_temperature_celsius",
            g.shutdown_temperature_celsius,
        )?;
        if shutdown <= slowdown || shutdown > 200.0 {
            return Err(ctx.err(
                t,
                Some("shutdown_temperature_celsius"),
                "expected a temperature above slowdown_temperature_celsius and at most 200",
            ));
        }
        let max_operating = match g.max_operating_temperature_celsius {
            Some(v) => {
                if !(v.is_finite() && v > ambient && v <= slowdown) {
                    return Err(ctx.err(
                        t,
                        Some("max_operating_temperature_celsius"),
                        "expected a temperature above ambient and at most slowdown_temperature_celsius",
                    ));
                }
                v
            }
            None => slowdown - 2.0,
        };
        let thermal_resistance = match g.thermal_resistance_celsius_per_watt {
            Some(v) => ctx.positive(t, "thermal_resistance_celsius_per_watt", v)?,
            // Full power settles 20 C below the slowdown temperature.
            None => ((slowdown - 20.0 - ambient) / limit).max(0.005),
        };
        let tau = match g.thermal_time_constant_s {
            Some(v) => {
                let v = ctx.positive(t, "thermal_time_constant_s", v)?;
                if !(0.5..=3600.0).contains(&v) {
                    return Err(ctx.err(
                        t,
                        Some("thermal_time_constant_s"),
                        "expected a time between 0.5 and 3600 seconds",
                    ));
                }
                v
            }
            None => 30.0,
        };
        let memory_total = g.memory_total_bytes;
        if memory_total == Some(0) {
            return Err(ctx.err(t, Some("memory_total_bytes"), "expected a number > 0"));
        }
        let memory_reserved = match (memory_total, g.memory_reserved_bytes) {
            (None, Some(_)) => {
                return Err(ctx.err(
                    t,
                    Some("memory_reserved_bytes"),
                    "needs memory_total_bytes (unified-memory GPUs report no framebuffer)",
                ))
            }
            (Some(total), Some(r)) => {
                if r > total / 2 {
                    return Err(ctx.err(
                        t,
                        Some("memory_reserved_bytes"),
                        "expected at most half of memory_total_bytes",
                    ));
                }
                Some(r)
            }
            (Some(total), None) => Some(total / 128 / MIB * MIB),
            (None, None) => None,
        };
        let has_mem_sensor = g
            .memory_temperature_sensor
            .unwrap_or(memory_total.is_some());
        let memory_temperature_offset = match (has_mem_sensor, g.memory_temperature_offset_celsius)
        {
            (true, Some(v)) if v.is_finite() && v.abs() <= 50.0 => Some(v),
            (true, Some(_)) => {
                return Err(ctx.err(
                    t,
                    Some("memory_temperature_offset_celsius"),
                    "expected a number between -50 and 50",
                ))
            }
            (true, None) => Some(4.0),
            (false, Some(_)) => {
                return Err(ctx.err(
                    t,
                    Some("memory_temperature_offset_celsius"),
                    "needs memory_temperature_sensor = true",
                ))
            }
            (false, None) => None,
        };
        if g.nvlink_count > 64 {
            return Err(ctx.err(t, Some("nvlink_count"), "expected at most 64 links"));
        }
        if let Some(ids) = &g.pci_bus_ids {
            if ids.len() != count {
                return Err(ctx.err(
                    t,
                    Some("pci_bus_ids"),
                    format!(
                        "expected {count} bus ids, one per GPU (count), got {}",
                        ids.len()
                    ),
                ));
            }
            if let Some(bad) = ids.iter().find(|s| !valid_bus_id(s)) {
                return Err(ctx.err(
                    t,
                    Some("pci_bus_ids"),
                    format!("\"{bad}\" is not a PCI bus id like \"00000000:18:00.0\""),
                ));
            }
        }
        let vbios = g
            .vbios_version
            .clone()
            .unwrap_or_else(|| "96.00.00.00.01".to_string());
        let max_clocks = Clocks {
            graphics_hz: max_graphics,
            sm_hz: max_sm,
            memory_hz: max_memory,
            video_hz: max_video,
        };
        let idle_clocks = Clocks {
            graphics_hz: idle_graphics,
            sm_hz: idle_graphics * max_sm / max_graphics,
            memory_hz: max_memory,
            video_hz: idle_video,
        };
        // Facts the scenario format does not carry, from the architecture: discrete parts have a
        // 128 GiB BAR1 and a x16 link (Gen5 on Hopper and Blackwell, Gen4 before); unified-memory
        // parts (no framebuffer size) have neither.
        let (bar1_total, pcie_link) = if memory_total.is_some() {
            let generation = match g.architecture.as_str() {
                "Hopper" | "Blackwell" => 5,
                _ => 4,
            };
            (
                Some(128 * 1024 * 1024 * 1024),
                Some(crate::types::PcieLink {
                    generation,
                    width: 16,
                }),
            )
        } else {
            (None, None)
        };
        for k in 0..count {
            let index = gpus.len();
            let h1 = noise::hash(seed, 0x0ddc_0ffe, index as u64, 1);
            let h2 = noise::hash(seed, 0x0ddc_0ffe, index as u64, 2);
            let h3 = noise::hash(seed, 0x0ddc_0ffe, index as u64, 3);
            let pci_bus_id = match &g.pci_bus_ids {
                Some(ids) => ids.get(k).cloned().unwrap_or_else(|| default_bus_id(index)),
                None => default_bus_id(index),
            };
            gpus.push(GpuStatic {
                index: index as u32,
                uuid: uuid_from("GPU", h1, h2),
                name: g.name.clone(),
                serial: format!("{}", 1_650_000_000_000u64 + h3 % 1_000_000_000),
                pci_bus_id,
                vbios_version: vbios.clone(),
                minor_number: index as u32,
                architecture: g.architecture.clone(),
                memory_total_bytes: memory_total,
                power_limit_watts: limit,
                idle_power_watts: idle,
                max_clocks,
                nvlink_count: g.nvlink_count,
                slowdown_temperature_celsius: slowdown,
                shutdown_temperature_celsius: shutdown,
                mig: None,
                bar1_total_bytes: bar1_total,
                pcie_link,
            });
            models.push(GpuModel {
                idle_power: idle,
                max_power,
                power_limit: limit,
                idle_clocks,
                max_clocks,
                thermal_resistance,
                time_constant_s: tau,
                max_operating_temperature: max_operating,
                slowdown_temperature: slowdown,
                memory_total,
                memory_reserved,
                memory_temperature_offset,
                fan: g.fan,
                nvlink_count: g.nvlink_count,
            });
        }
    }
    let n_gpus = gpus.len();
    let gpu_index = |t: &str, key: &str, g: u32| -> Result<usize, ScenarioError> {
        let i = g as usize;
        if i < n_gpus {
            Ok(i)
        } else {
            Err(ctx.err(
                t,
                Some(key),
                format!(
                    "GPU index {g} out of range (the scenario has {n_gpus} GPUs: 0..={})",
                    n_gpus.saturating_sub(1)
                ),
            ))
        }
    };

    // MIG.
    for (i, m) in raw.mig.iter().enumerate() {
        let t = format!("mig[{i}]");
        let t = t.as_str();
        let g = gpu_index(t, "gpu", m.gpu)?;
        let Some(total) = models[g].memory_total else {
            return Err(ctx.err(t, Some("gpu"), "MIG needs a GPU with memory_total_bytes"));
        };
        if gpus[g].mig.is_some() {
            return Err(ctx.err(
                t,
                Some("gpu"),
                format!("GPU {g} already has a [[mig]] entry"),
            ));
        }
        if m.profiles.is_empty() {
            return Err(ctx.err(t, Some("profiles"), "expected at least one profile"));
        }
        let mut slices = 0u32;
        let mut memory = 0u64;
        let mut instances = Vec::new();
        for (k, p) in m.profiles.iter().enumerate() {
            let Some((s, bytes)) = parse_profile(p) else {
                return Err(ctx.err(
                    t,
                    Some("profiles"),
                    format!("\"{p}\" is not a MIG profile like \"3g.40gb\""),
                ));
            };
            slices += s;
            memory = memory.saturating_add(bytes);
            let h1 = noise::hash(seed, 0x0316_0316, g as u64, 2 * k as u64);
            let h2 = noise::hash(seed, 0x0316_0316, g as u64, 2 * k as u64 + 1);
            instances.push(MigInstance {
                gpu_instance: k as u32 + 1,
                compute_instance: 0,
                profile: p.clone(),
                uuid: uuid_from("MIG", h1, h2),
                memory_total_bytes: bytes,
            });
        }
        if slices > 7 {
            return Err(ctx.err(
                t,
                Some("profiles"),
                format!("the profiles use {slices} compute slices; a GPU has 7"),
            ));
        }
        let usable = total - models[g].memory_reserved.unwrap_or(0);
        if memory > usable {
            return Err(ctx.err(
                t,
                Some("profiles"),
                format!("the profiles need {memory} bytes; GPU {g} has {usable} usable"),
            ));
        }
        gpus[g].mig = Some(instances);
    }

    // Phases.
    let mut phases = Vec::new();
    for (i, p) in raw.phases.iter().enumerate() {
        let t = format!("phases[{i}]");
        let t = t.as_str();
        let start = ctx.time(t, "start_s", p.start_s)?;
        if let Some(rep) = repeat_after {
            if start >= rep {
                return Err(ctx.err(
                    t,
                    Some("start_s"),
                    "expected a start before workload.repeat_after_s",
                ));
            }
        }
        let gpus_sel = match &p.gpus {
            Some(list) => {
                if list.is_empty() {
                    return Err(ctx.err(t, Some("gpus"), "expected at least one GPU index"));
                }
                for (k, g) in list.iter().enumerate() {
                    gpu_index(t, "gpus", *g)?;
                    if list[..k].contains(g) {
                        return Err(ctx.err(t, Some("gpus"), format!("GPU {g} listed twice")));
                    }
                }
                Some(list.clone())
            }
            None => None,
        };
        let utilization = ctx.ratio(t, "utilization", p.utilization)?;
        let memory = match (p.memory_used_ratio, p.memory_used_bytes) {
            (Some(_), Some(_)) => {
                return Err(ctx.err(
                    t,
                    Some("memory_used_bytes"),
                    "give memory_used_ratio or memory_used_bytes, not both",
                ))
            }
            (Some(r), None) => PhaseMemory::Ratio(ctx.ratio(t, "memory_used_ratio", r)?),
            (None, Some(b)) => {
                let targets: Vec<usize> = match &gpus_sel {
                    Some(list) => list.iter().map(|g| *g as usize).collect(),
                    None => (0..n_gpus).collect(),
                };
                for g in targets {
                    let m = &models[g];
                    if let (Some(total), Some(res)) = (m.memory_total, m.memory_reserved) {
                        if b > total - res {
                            return Err(ctx.err(
                                t,
                                Some("memory_used_bytes"),
                                format!("GPU {g} has only {} usable bytes", total - res),
                            ));
                        }
                    }
                }
                PhaseMemory::Bytes(b)
            }
            (None, None) => PhaseMemory::Ratio(0.0),
        };
        let memory_bandwidth = match p.memory_bandwidth_ratio {
            Some(r) => Some(ctx.ratio(t, "memory_bandwidth_ratio", r)?),
            None => None,
        };
        let pcie_tx = ctx.non_negative(
            t,
            "pcie_tx_bytes_per_second",
            p.pcie_tx_bytes_per_second,
            MAX_RATE,
        )?;
        let pcie_rx = ctx.non_negative(
            t,
            "pcie_rx_bytes_per_second",
            p.pcie_rx_bytes_per_second,
            MAX_RATE,
        )?;
        let nvlink_tx = ctx.non_negative(
            t,
            "nvlink_tx_bytes_per_second",
            p.nvlink_tx_bytes_per_second,
            MAX_RATE,
        )?;
        let nvlink_rx = ctx.non_negative(
            t,
            "nvlink_rx_bytes_per_second",
            p.nvlink_rx_bytes_per_second,
            MAX_RATE,
        )?;
        let ramp = ctx.time(t, "ramp_s", p.ramp_s)?;
        let spread = match p.spread {
            Some(v) => ctx.non_negative(t, "spread", v, 0.5)?,
            None => 0.02,
        };
        let noise = match p.noise {
            Some(v) => ctx.non_negative(t, "noise", v, 0.5)?,
            None => 0.02,
        };
        let _label = &p.name; // for readers of the file only
        phases.push(Phase {
            index: i,
            start,
            ramp,
            gpus: gpus_sel,
            utilization,
            memory,
            memory_bandwidth,
            pcie_tx,
            pcie_rx,
            nvlink_tx,
            nvlink_rx,
            spread,
            noise,
        });
    }
    phases.sort_by_key(|p| p.start);

    // Faults.
    let mut faults = Vec::new();
    for (i, f) in raw.faults.iter().enumerate() {
        let t = format!("faults[{i}]");
        let t = t.as_str();
        let kind = f.kind;
        let gpu = gpu_index(t, "gpu", f.gpu)?;
        let at = ctx.time(t, "at_s", f.at_s)?;
        let repeat = |ctx: &Ctx<'_>| -> Result<Repeat, ScenarioError> {
            let every = match f.repeat_every_s {
                Some(v) => Some(ctx.interval(t, "repeat_every_s", v)?),
                None => None,
            };
            match (every, f.count) {
                (_, Some(0)) => Err(ctx.err(t, Some("count"), "expected a count >= 1")),
                (None, Some(c)) if c > 1 => {
                    Err(ctx.err(t, Some("count"), "a count above 1 needs repeat_every_s"))
                }
                _ => Ok(Repeat {
                    at,
                    every,
                    count: f.count,
                }),
            }
        };
        let recover = |ctx: &Ctx<'_>| -> Result<Option<Duration>, ScenarioError> {
            match f.recover_at_s {
                Some(v) => {
                    let r = ctx.time(t, "recover_at_s", v)?;
                    if r <= at {
                        return Err(ctx.err(t, Some("recover_at_s"), "expected a time after at_s"));
                    }
                    Ok(Some(r))
                }
                None => Ok(None),
            }
        };
        if kind != RawFaultKind::Thermal {
            ctx.unused(t, "until_s", &f.until_s, kind)?;
            ctx.unused(t, "ambient_rise_celsius", &f.ambient_rise_celsius, kind)?;
            ctx.unused(
                t,
                "thermal_resistance_factor",
                &f.thermal_resistance_factor,
                kind,
            )?;
        }
        if kind != RawFaultKind::Ecc {
            ctx.unused(t, "corrected", &f.corrected, kind)?;
            ctx.unused(t, "uncorrected", &f.uncorrected, kind)?;
        }
        match kind {
            RawFaultKind::Xid => {
                let Some(xid) = f.xid else {
                    return Err(ctx.err(t, Some("xid"), "faults of kind \"xid\" need an xid code"));
                };
                if xid == XID_GPU_LOST {
                    ctx.unused(t, "repeat_every_s", &f.repeat_every_s, kind)?;
                    ctx.unused(t, "count", &f.count, kind)?;
                    faults.push(Fault::Lost {
                        gpu,
                        xid,
                        at,
                        recover: recover(ctx)?,
                    });
                } else {
                    if f.recover_at_s.is_some() {
                        return Err(ctx.err(
                            t,
                            Some("recover_at_s"),
                            format!("only used with xid {XID_GPU_LOST} (GPU lost)"),
                        ));
                    }
                    faults.push(Fault::Xid {
                        gpu,
                        xid,
                        when: repeat(ctx)?,
                    });
                }
            }
            RawFaultKind::Lost => {
                ctx.unused(t, "repeat_every_s", &f.repeat_every_s, kind)?;
                ctx.unused(t, "count", &f.count, kind)?;
                faults.push(Fault::Lost {
                    gpu,
                    xid: f.xid.unwrap_or(XID_GPU_LOST),
                    at,
                    recover: recover(ctx)?,
                });
            }
            RawFaultKind::Ecc => {
                ctx.unused(t, "xid", &f.xid, kind)?;
                ctx.unused(t, "recover_at_s", &f.recover_at_s, kind)?;
                let corrected = f.corrected.unwrap_or(0);
                let uncorrected = f.uncorrected.unwrap_or(0);
                if corrected == 0 && uncorrected == 0 {
                    return Err(ctx.err(
                        t,
                        Some("corrected"),
                        "an ecc fault needs corrected or uncorrected > 0",
                    ));
                }
                faults.push(Fault::Ecc {
                    gpu,
                    corrected,
                    uncorrected,
                    when: repeat(ctx)?,
                });
            }
            RawFaultKind::Thermal => {
                ctx.unused(t, "xid", &f.xid, kind)?;
                ctx.unused(t, "recover_at_s", &f.recover_at_s, kind)?;
                ctx.unused(t, "repeat_every_s", &f.repeat_every_s, kind)?;
                ctx.unused(t, "count", &f.count, kind)?;
                let Some(until) = f.until_s else {
                    return Err(ctx.err(
                        t,
                        Some("until_s"),
                        "faults of kind \"thermal\" need until_s",
                    ));
                };
                let until = ctx.time(t, "until_s", until)?;
                if until <= at {
                    return Err(ctx.err(t, Some("until_s"), "expected a time after at_s"));
                }
                let ambient_rise = match f.ambient_rise_celsius {
                    Some(v) => ctx.non_negative(t, "ambient_rise_celsius", v, 100.0)?,
                    None => 15.0,
                };
                let resistance_factor = match f.thermal_resistance_factor {
                    Some(v) => {
                        if !(v.is_finite() && (0.1..=20.0).contains(&v)) {
                            return Err(ctx.err(
                                t,
                                Some("thermal_resistance_factor"),
                                "expected a number between 0.1 and 20",
                            ));
                        }
                        v
                    }
                    None => 2.0,
                };
                faults.push(Fault::Thermal {
                    gpu,
                    at,
                    until,
                    ambient_rise,
                    resistance_factor,
                });
            }
        }
    }

    let driver_version = node
        .driver_version
        .clone()
        .unwrap_or_else(|| "550.54.15".to_string());
    if driver_version.trim().is_empty() {
        return Err(ctx.err(
            "node",
            Some("driver_version"),
            "expected a non-empty version",
        ));
    }
    Ok(Scenario {
        origin: ctx.origin.to_string(),
        name: node.name.clone(),
        description: node.description.trim().to_string(),
        seed,
        driver_version,
        cuda_driver_version: node.cuda_driver_version.unwrap_or(12040),
        ambient_celsius: ambient,
        repeat_after,
        gpus,
        models,
        phases,
        faults,
        cost: raw.cost,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn builtin_lists_agree() {
        assert_eq!(BUILTIN_SCENARIOS.len(), BUILTIN_TEXT.len());
        for (a, (b, _)) in BUILTIN_SCENARIOS.iter().zip(BUILTIN_TEXT) {
            assert_eq!(a, b);
        }
    }

    #[test]
    fn repeat_counts() {
        let r = Repeat {
            at: Duration::from_secs(10),
            every: Some(Duration::from_secs(2)),
            count: Some(3),
        };
        assert_eq!(r.occurrences(Duration::from_millis(9_999)), 0);
        assert_eq!(r.occurrences(Duration::from_secs(10)), 1);
        assert_eq!(r.occurrences(Duration::from_millis(11_999)), 1);
        assert_eq!(r.occurrences(Duration::from_secs(12)), 2);
        assert_eq!(r.occurrences(Duration::from_secs(1000)), 3);
    }

    #[test]
    fn profiles() {
        assert_eq!(parse_profile("1g.10gb"), Some((1, 9728 * MIB)));
        assert_eq!(parse_profile("3g.40gb").map(|p| p.0), Some(3));
        assert_eq!(parse_profile("8g.10gb"), None);
        assert_eq!(parse_profile("1g10gb"), None);
    }

    #[test]
    fn bus_ids() {
        assert!(valid_bus_id("00000000:18:00.0"));
        assert!(!valid_bus_id("0000:18:00.0"));
        assert!(valid_bus_id(&default_bus_id(3)));
    }
}
