//! The `nvml` collector: GPU telemetry through NVML, on by default.

use std::collections::HashSet;

use dgx_pixels_nvml::{NvmlOptions, NvmlSource, GPM_FAMILIES};

use super::{
    BuildContext, Built, Collector, Flag, FlagDefault, FlagKind, Planning, RestartKey, Table,
    TableOptions, DEFAULT_INTERVAL, DEFAULT_TIMEOUT, MIN_INTERVAL,
};
use crate::config::{ConfigError, Settings};

/// `[nvml]`: the nvml crate's own options (`library`, `slow_interval`, `processes_per_gpu`,
/// `xid_quiet_period`, `power_sample_interval`, `power_window`).
pub type Options = NvmlOptions;

impl TableOptions for NvmlOptions {
    fn check(&self, _: &Settings) -> Result<(), ConfigError> {
        Ok(self.validate(MIN_INTERVAL)?)
    }
}

/// The nvml collector's table in `settings`.
pub fn options(settings: &Settings) -> &NvmlOptions {
    settings.options(&COLLECTOR)
}

const FLAGS: &[Flag] = &[
    Flag {
        name: "nvml.library",
        key: "nvml.library",
        value_name: "PATH",
        help: "Path of libnvidia-ml",
        default: FlagDefault::Says(|| {
            format!("{} from the loader's search path", dgx_pixels_nvml::DEFAULT_LIBRARY)
        }),
        kind: FlagKind::Path,
        order: 90,
    },
    Flag {
        name: "nvml.power-sample-interval",
        key: "nvml.power_sample_interval",
        value_name: "DURATION",
        help: "How often each GPU's board power is sampled between polls, for the power histogram, peak and minimum (docs/power.md); 0s turns fast power sampling off",
        default: FlagDefault::Says(|| {
            humantime::format_duration(NvmlOptions::default().power_sample_interval).to_string()
        }),
        kind: FlagKind::Duration,
        order: 91,
    },
    Flag {
        name: "nvml.power-window",
        key: "nvml.power_window",
        value_name: "DURATION",
        help: "How much recent time the power peak and minimum cover",
        default: FlagDefault::Says(|| {
            humantime::format_duration(NvmlOptions::default().power_window).to_string()
        }),
        kind: FlagKind::Duration,
        order: 92,
    },
];
use crate::ownership;

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "nvml",
    enabled_by_default: true,
    // A simulated node serves the GPU families itself (see `build`).
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    default_timeout: DEFAULT_TIMEOUT,
    interval_setting: None,
    help: "GPU telemetry through NVML (libnvidia-ml.so.1, loaded at run time)",
    yields_owned_series: true,
    derived: false,
    table: Some(Table::of::<Options>()),
    flags: FLAGS,
    build,
    shared_inputs,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    // The simulated node is the NVML of a simulation: it serves these families itself.
    if ctx.simulated.is_some() {
        return Ok(None);
    }
    let settings = ctx.settings;
    // One source per series: GPM's profiling families come from DCGM when its fields provide
    // them all (the ownership filter drops NVML's samples of any it provides), so NVML does not
    // spend a GPM read per GPU and poll on series it would drop.
    let owned: HashSet<ownership::Owned> = ctx
        .dcgm_fields
        .iter()
        .filter_map(ownership::series_of)
        .collect();
    let profiling = GPM_FAMILIES.iter().any(|m| !owned.contains(&(*m, &[][..])));
    Ok(Some(Box::new(
        NvmlSource::with_options(NvmlOptions {
            // Leave the runner's watchdog room: a poll returns before its timeout even when a GPU
            // hangs, and that GPU alone is reported down.
            gpu_deadline: ctx.timing.timeout.mul_f64(0.6),
            procfs: settings
                .path
                .procfs
                .clone()
                .unwrap_or_else(|| NvmlOptions::default().procfs),
            profiling,
            ..options(settings).clone()
        })
        // XIDs from NVML and from the kernel log (kmsg collector) count once, served here.
        .with_xid_ledger(std::sync::Arc::clone(ctx.xid_ledger)),
    )))
}

/// `[path]`, and the series DCGM takes over (its samples of them are dropped, and GPM is not
/// read when DCGM takes every profiling family).
fn shared_inputs(s: &Settings, planning: &Planning) -> RestartKey {
    Box::new((s.path.clone(), planning.dcgm_fields.clone()))
}
