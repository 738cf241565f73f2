//! Validation of the `[[gpus]]` and `[[mig]]` tables.

use super::super::{GpuModel, RawGpu, RawScenario, MAX_GPUS, MIB};
use super::{gpu_indexer, Ctx};
use crate::error::ScenarioError;
use crate::noise;
use crate::types::{Clocks, GpuStatic, MigInstance};

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

pub(in crate::scenario) fn valid_bus_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 16
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 11 => *c == b':',
            14 => *c == b'.',
            _ => c.is_ascii_hexdigit(),
        })
}

pub(in crate::scenario) fn default_bus_id(index: usize) -> String {
    format!("{:08X}:{:02X}:00.0", index / 200, 0x10 + index % 200)
}

/// `(slices, memory in bytes)` of a profile such as `3g.40gb`.
pub(in crate::scenario) fn parse_profile(p: &str) -> Option<(u32, u64)> {
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

/// The power, clock and thermal figures of one `[[gpus]]` table, filled in [`FIGURES`] order.
#[derive(Clone, Copy, Default)]
struct Figures {
    ambient: f64,
    limit: f64,
    idle: f64,
    max_power: f64,
    max_graphics: f64,
    max_sm: f64,
    max_memory: f64,
    max_video: f64,
    idle_graphics: f64,
    idle_video: f64,
    slowdown: f64,
    shutdown: f64,
    max_operating: f64,
    thermal_resistance: f64,
    tau: f64,
}

/// Where a figure's value comes from.
enum Given {
    /// A key every `[[gpus]]` table has.
    Required(fn(&RawGpu) -> f64),
    /// An optional key, and its value when absent, from the figures before it.
    Optional(fn(&RawGpu) -> Option<f64>, fn(&Figures) -> f64),
}

/// What a figure must meet against the figures before it, and the message if it does not.
type Bound = (fn(f64, &Figures) -> bool, &'static str);

/// One figure: a new one is a row here, not a branch in [`gpus`].
struct Figure {
    key: &'static str,
    given: Given,
    /// Whether a given value must be a number > 0.
    positive: bool,
    /// Checked on defaults too, which meet it.
    bound: Option<Bound>,
    slot: fn(&mut Figures) -> &mut f64,
}

/// The figures in the order they are checked: the first problem is the one reported.
const FIGURES: &[Figure] = &[
    Figure {
        key: "power_limit_watts",
        given: Given::Required(|g| g.power_limit_watts),
        positive: true,
        bound: None,
        slot: |f| &mut f.limit,
    },
    Figure {
        key: "idle_power_watts",
        given: Given::Required(|g| g.idle_power_watts),
        positive: true,
        bound: Some((
            |v, f| v * 1.02 < f.limit,
            "expected idle power well below power_limit_watts",
        )),
        slot: |f| &mut f.idle,
    },
    Figure {
        key: "max_power_watts",
        given: Given::Optional(|g| g.max_power_watts, |f| f.limit * 1.05),
        positive: true,
        bound: Some((
            |v, f| v > f.idle,
            "expected a number above idle_power_watts",
        )),
        slot: |f| &mut f.max_power,
    },
    Figure {
        key: "max_graphics_clock_hz",
        given: Given::Required(|g| g.max_graphics_clock_hz),
        positive: true,
        bound: None,
        slot: |f| &mut f.max_graphics,
    },
    Figure {
        key: "max_sm_clock_hz",
        given: Given::Optional(|g| g.max_sm_clock_hz, |f| f.max_graphics),
        positive: true,
        bound: None,
        slot: |f| &mut f.max_sm,
    },
    Figure {
        key: "max_memory_clock_hz",
        given: Given::Required(|g| g.max_memory_clock_hz),
        positive: true,
        bound: None,
        slot: |f| &mut f.max_memory,
    },
    Figure {
        key: "max_video_clock_hz",
        given: Given::Required(|g| g.max_video_clock_hz),
        positive: true,
        bound: None,
        slot: |f| &mut f.max_video,
    },
    Figure {
        key: "idle_graphics_clock_hz",
        given: Given::Optional(|g| g.idle_graphics_clock_hz, |f| f.max_graphics * 0.175),
        positive: true,
        bound: Some((
            |v, f| v <= f.max_graphics.min(f.max_sm),
            "expected a clock at most max_graphics_clock_hz and max_sm_clock_hz",
        )),
        slot: |f| &mut f.idle_graphics,
    },
    Figure {
        key: "idle_video_clock_hz",
        given: Given::Optional(|g| g.idle_video_clock_hz, |f| f.max_video * 0.35),
        positive: true,
        bound: Some((
            |v, f| v <= f.max_video,
            "expected a clock at most max_video_clock_hz",
        )),
        slot: |f| &mut f.idle_video,
    },
    Figure {
        key: "slowdown_temperature_celsius",
        given: Given::Required(|g| g.slowdown_temperature_celsius),
        positive: true,
        bound: Some((
            |v, f| v > f.ambient + 5.0 && v <= 150.0,
            "expected a temperature above the ambient temperature and at most 150",
        )),
        slot: |f| &mut f.slowdown,
    },
    Figure {
        key: "shutdown_temperature_celsius",
        given: Given::Required(|g| g.shutdown_temperature_celsius),
        positive: true,
        bound: Some((
            |v, f| v > f.slowdown && v <= 200.0,
            "expected a temperature above slowdown_temperature_celsius and at most 200",
        )),
        slot: |f| &mut f.shutdown,
    },
    Figure {
        key: "max_operating_temperature_celsius",
        given: Given::Optional(
            |g| g.max_operating_temperature_celsius,
            |f| f.slowdown - 2.0,
        ),
        positive: false,
        bound: Some((
            |v, f| v.is_finite() && v > f.ambient && v <= f.slowdown,
            "expected a temperature above ambient and at most slowdown_temperature_celsius",
        )),
        slot: |f| &mut f.max_operating,
    },
    Figure {
        key: "thermal_resistance_celsius_per_watt",
        // Full power settles 20 C below the slowdown temperature.
        given: Given::Optional(
            |g| g.thermal_resistance_celsius_per_watt,
            |f| ((f.slowdown - 20.0 - f.ambient) / f.limit).max(0.005),
        ),
        positive: true,
        bound: None,
        slot: |f| &mut f.thermal_resistance,
    },
    Figure {
        key: "thermal_time_constant_s",
        given: Given::Optional(|g| g.thermal_time_constant_s, |_| 30.0),
        positive: true,
        bound: Some((
            |v, _| (0.5..=3600.0).contains(&v),
            "expected a time between 0.5 and 3600 seconds",
        )),
        slot: |f| &mut f.tau,
    },
];

/// The [`FIGURES`] of table `t`.
fn figures(ctx: &Ctx<'_>, t: &str, g: &RawGpu, ambient: f64) -> Result<Figures, ScenarioError> {
    let mut fig = Figures {
        ambient,
        ..Figures::default()
    };
    for row in FIGURES {
        let given = |v: f64| match row.positive {
            true => ctx.positive(t, row.key, v),
            false => Ok(v),
        };
        let v = match row.given {
            Given::Required(raw) => given(raw(g))?,
            Given::Optional(raw, default) => match raw(g) {
                Some(v) => given(v)?,
                None => default(&fig),
            },
        };
        if let Some((meets, message)) = row.bound {
            if !meets(v, &fig) {
                return Err(ctx.err(t, Some(row.key), message));
            }
        }
        *(row.slot)(&mut fig) = v;
    }
    Ok(fig)
}

/// The memory of one `[[gpus]]` table: none on a unified-memory GPU.
struct Memory {
    total: Option<u64>,
    reserved: Option<u64>,
    temperature_offset: Option<f64>,
}

fn memory(ctx: &Ctx<'_>, t: &str, g: &RawGpu) -> Result<Memory, ScenarioError> {
    let total = g.memory_total_bytes;
    if total == Some(0) {
        return Err(ctx.err(t, Some("memory_total_bytes"), "expected a number > 0"));
    }
    let reserved = match (total, g.memory_reserved_bytes) {
        (None, Some(_)) => {
            return Err(ctx.err(
                t,
                Some("memory_reserved_bytes"),
                "needs memory_total_bytes (unified-memory GPUs report no framebuffer)",
            ))
        }
        (Some(total), Some(r)) if r > total / 2 => {
            return Err(ctx.err(
                t,
                Some("memory_reserved_bytes"),
                "expected at most half of memory_total_bytes",
            ))
        }
        (Some(_), Some(r)) => Some(r),
        (Some(total), None) => Some(total / 128 / MIB * MIB),
        (None, None) => None,
    };
    let has_sensor = g.memory_temperature_sensor.unwrap_or(total.is_some());
    let key = Some("memory_temperature_offset_celsius");
    let temperature_offset = match (has_sensor, g.memory_temperature_offset_celsius) {
        (true, Some(v)) if v.is_finite() && v.abs() <= 50.0 => Some(v),
        (true, Some(_)) => return Err(ctx.err(t, key, "expected a number between -50 and 50")),
        (true, None) => Some(4.0),
        (false, Some(_)) => return Err(ctx.err(t, key, "needs memory_temperature_sensor = true")),
        (false, None) => None,
    };
    Ok(Memory {
        total,
        reserved,
        temperature_offset,
    })
}

/// `pci_bus_ids`, when given: one valid id per GPU.
fn bus_ids(ctx: &Ctx<'_>, t: &str, g: &RawGpu, count: usize) -> Result<(), ScenarioError> {
    let Some(ids) = &g.pci_bus_ids else {
        return Ok(());
    };
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
    Ok(())
}

/// `platform_chassis_serial`, which the other `platform_*` keys need.
fn chassis_serial(ctx: &Ctx<'_>, t: &str, g: &RawGpu) -> Result<Option<String>, ScenarioError> {
    let Some(s) = &g.platform_chassis_serial else {
        for (key, set) in [
            ("platform_slot_number", g.platform_slot_number.is_some()),
            ("platform_tray_index", g.platform_tray_index.is_some()),
            ("platform_host_id", g.platform_host_id.is_some()),
        ] {
            if set {
                return Err(ctx.err(t, Some(key), "needs platform_chassis_serial"));
            }
        }
        return Ok(None);
    };
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    if s.is_empty() || s.len() > 16 || !s.bytes().all(allowed) {
        return Err(ctx.err(
            t,
            Some("platform_chassis_serial"),
            "expected 1 to 16 ASCII letters, digits, '-', '_' or '.' (NVML's char[16])",
        ));
    }
    Ok(Some(s.clone()))
}

/// Facts the scenario format does not carry, from the architecture: discrete parts have a
/// 128 GiB BAR1 and a x16 link (Gen5 on Hopper and Blackwell, Gen3 on Volta, Turing and
/// Pascal, Gen4 otherwise); unified-memory parts (no framebuffer size) have neither.
fn bar1_and_pcie(g: &RawGpu, memory: &Memory) -> (Option<u64>, Option<crate::types::PcieLink>) {
    if memory.total.is_none() {
        return (None, None);
    }
    let generation = match g.architecture.as_str() {
        "Hopper" | "Blackwell" => 5,
        "Volta" | "Turing" | "Pascal" => 3,
        _ => 4,
    };
    (
        Some(128 * 1024 * 1024 * 1024),
        Some(crate::types::PcieLink {
            generation,
            width: 16,
        }),
    )
}

/// One `[[gpus]]` table, checked: what each of its `count` GPUs is built from.
struct Table<'a> {
    g: &'a RawGpu,
    fig: Figures,
    memory: Memory,
    serial: Option<String>,
    rail_rate: Option<f64>,
}

impl Table<'_> {
    fn max_clocks(&self) -> Clocks {
        let f = &self.fig;
        Clocks {
            graphics_hz: f.max_graphics,
            sm_hz: f.max_sm,
            memory_hz: f.max_memory,
            video_hz: f.max_video,
        }
    }

    /// The `k`th GPU of the table, the node's `index`th.
    fn gpu(&self, seed: u64, index: usize, k: usize) -> GpuStatic {
        let (g, f) = (self.g, &self.fig);
        let h1 = noise::hash(seed, 0x0ddc_0ffe, index as u64, 1);
        let h2 = noise::hash(seed, 0x0ddc_0ffe, index as u64, 2);
        let h3 = noise::hash(seed, 0x0ddc_0ffe, index as u64, 3);
        let pci_bus_id = match &g.pci_bus_ids {
            Some(ids) => ids.get(k).cloned().unwrap_or_else(|| default_bus_id(index)),
            None => default_bus_id(index),
        };
        let (bar1_total_bytes, pcie_link) = bar1_and_pcie(g, &self.memory);
        GpuStatic {
            index: index as u32,
            uuid: uuid_from("GPU", h1, h2),
            name: g.name.clone(),
            serial: format!("{}", 1_650_000_000_000u64 + h3 % 1_000_000_000),
            pci_bus_id,
            vbios_version: g
                .vbios_version
                .clone()
                .unwrap_or_else(|| "96.00.00.00.01".to_string()),
            minor_number: index as u32,
            architecture: g.architecture.clone(),
            memory_total_bytes: self.memory.total,
            power_limit_watts: f.limit,
            idle_power_watts: f.idle,
            max_clocks: self.max_clocks(),
            nvlink_count: g.nvlink_count,
            slowdown_temperature_celsius: f.slowdown,
            shutdown_temperature_celsius: f.shutdown,
            mig: None,
            bar1_total_bytes,
            pcie_link,
            fabric: g
                .fabric_clique_id
                .map(|clique_id| crate::types::FabricStatic {
                    cluster_uuid: uuid_from(
                        "",
                        noise::hash(seed, 0xfab, 0, 1),
                        noise::hash(seed, 0xfab, 0, 2),
                    )
                    .trim_start_matches('-')
                    .to_string(),
                    clique_id,
                }),
            // Module ids count the table's GPUs from 1, as a tray's GPU modules are.
            platform: self
                .serial
                .as_ref()
                .map(|s| dgx_pixels_readout::PlatformReadout {
                    chassis_serial: s.clone(),
                    slot: g.platform_slot_number.unwrap_or(0),
                    tray: g.platform_tray_index.unwrap_or(0),
                    host_id: g.platform_host_id.unwrap_or(0),
                    module_id: u8::try_from(k + 1).unwrap_or(u8::MAX),
                }),
            rail: self.rail_rate.map(|rate| crate::types::RailStatic {
                device: format!("mlx5_{index}"),
                rate_bytes_per_second: rate,
            }),
            process_weights: Vec::new(),
            mps: false,
        }
    }

    /// The model every GPU of the table shares.
    fn model(&self) -> GpuModel {
        let f = &self.fig;
        let max_clocks = self.max_clocks();
        GpuModel {
            idle_power: f.idle,
            max_power: f.max_power,
            power_limit: f.limit,
            idle_clocks: Clocks {
                graphics_hz: f.idle_graphics,
                sm_hz: f.idle_graphics * f.max_sm / f.max_graphics,
                memory_hz: f.max_memory,
                video_hz: f.idle_video,
            },
            max_clocks,
            thermal_resistance: f.thermal_resistance,
            time_constant_s: f.tau,
            max_operating_temperature: f.max_operating,
            slowdown_temperature: f.slowdown,
            memory_total: self.memory.total,
            memory_reserved: self.memory.reserved,
            memory_temperature_offset: self.memory.temperature_offset,
            fan: self.g.fan,
            nvlink_count: self.g.nvlink_count,
        }
    }
}

/// The `[[gpus]]` tables: each gives `count` GPUs, with their static facts and their models.
pub(super) fn gpus(
    ctx: &Ctx<'_>,
    raw: &RawScenario,
    ambient: f64,
    seed: u64,
) -> Result<(Vec<GpuStatic>, Vec<GpuModel>), ScenarioError> {
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
        let fig = figures(ctx, t, g, ambient)?;
        let memory = memory(ctx, t, g)?;
        if g.nvlink_count > 64 {
            return Err(ctx.err(t, Some("nvlink_count"), "expected at most 64 links"));
        }
        bus_ids(ctx, t, g, count)?;
        let serial = chassis_serial(ctx, t, g)?;
        let rail_rate = match g.rail_rate_bytes_per_second {
            Some(v) => Some(ctx.positive(t, "rail_rate_bytes_per_second", v)?),
            None => None,
        };
        let table = Table {
            g,
            fig,
            memory,
            serial,
            rail_rate,
        };
        for k in 0..count {
            gpus.push(table.gpu(seed, gpus.len(), k));
            models.push(table.model());
        }
    }
    Ok((gpus, models))
}

/// The `[[mig]]` tables: the MIG layout of GPUs defined by `[[gpus]]`.
pub(super) fn mig(
    ctx: &Ctx<'_>,
    raw: &RawScenario,
    seed: u64,
    gpus: &mut [GpuStatic],
    models: &[GpuModel],
) -> Result<(), ScenarioError> {
    let gpu_index = gpu_indexer(ctx, gpus.len());
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

    Ok(())
}
