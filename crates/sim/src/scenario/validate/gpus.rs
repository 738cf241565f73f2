//! Validation of the `[[gpus]]` and `[[mig]]` tables.

use super::super::{GpuModel, RawScenario, MAX_GPUS, MIB};
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
        // 128 GiB BAR1 and a x16 link (Gen5 on Hopper and Blackwell, Gen3 on Volta, Turing and
        // Pascal, Gen4 otherwise); unified-memory parts (no framebuffer size) have neither.
        let (bar1_total, pcie_link) = if memory_total.is_some() {
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
        } else {
            (None, None)
        };
        let serial = match &g.platform_chassis_serial {
            Some(s)
                if s.is_empty()
                    || s.len() > 16
                    || !s
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) =>
            {
                return Err(ctx.err(
                    t,
                    Some("platform_chassis_serial"),
                    "expected 1 to 16 ASCII letters, digits, '-', '_' or '.' (NVML's char[16])",
                ));
            }
            other => other.clone(),
        };
        if serial.is_none() {
            for (key, set) in [
                ("platform_slot_number", g.platform_slot_number.is_some()),
                ("platform_tray_index", g.platform_tray_index.is_some()),
                ("platform_host_id", g.platform_host_id.is_some()),
            ] {
                if set {
                    return Err(ctx.err(t, Some(key), "needs platform_chassis_serial"));
                }
            }
        }
        let rail_rate = match g.rail_rate_bytes_per_second {
            Some(v) => Some(ctx.positive(t, "rail_rate_bytes_per_second", v)?),
            None => None,
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
                platform: serial
                    .as_ref()
                    .map(|s| dgx_pixels_readout::PlatformReadout {
                        chassis_serial: s.clone(),
                        slot: g.platform_slot_number.unwrap_or(0),
                        tray: g.platform_tray_index.unwrap_or(0),
                        host_id: g.platform_host_id.unwrap_or(0),
                        module_id: u8::try_from(k + 1).unwrap_or(u8::MAX),
                    }),
                rail: rail_rate.map(|rate| crate::types::RailStatic {
                    device: format!("mlx5_{index}"),
                    rate_bytes_per_second: rate,
                }),
                process_weights: Vec::new(),
                mps: false,
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
