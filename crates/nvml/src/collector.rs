//! The `nvml` collector's descriptor: GPU telemetry through NVML, on by default.

use std::sync::Arc;

use dgx_pixels_registry::{
    BuildContext, Built, Check, Collector, Flag, FlagDefault, FlagKind, RestartKey, SettingError,
    Shared, Table, TableOptions, DEFAULT_INTERVAL, DEFAULT_TIMEOUT, MIN_INTERVAL,
};

use crate::{NvmlOptions, NvmlSource, DEFAULT_LIBRARY, GPM_FAMILIES};

impl TableOptions for NvmlOptions {
    fn validate(&self, _: &Check) -> Result<(), SettingError> {
        NvmlOptions::validate(self, MIN_INTERVAL)
    }
}

const FLAGS: &[Flag] = &[
    Flag {
        name: "nvml.library",
        key: "nvml.library",
        value_name: "PATH",
        help: "Path of libnvidia-ml",
        default: FlagDefault::Says(|| format!("{DEFAULT_LIBRARY} from the loader's search path")),
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

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "nvml",
    enabled_by_default: true,
    // A simulated node serves the GPU families itself (see `build`).
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    default_timeout: DEFAULT_TIMEOUT,
    help: "GPU telemetry through NVML (libnvidia-ml.so.1, loaded at run time)",
    yields_owned_series: true,
    derived: false,
    table: Some(Table::of::<NvmlOptions>()),
    flags: FLAGS,
    prepare: None,
    build,
    shared_inputs,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    // The simulated node is the NVML of a simulation: it serves these families itself.
    if ctx.simulated.is_some() {
        return Ok(None);
    }
    // One source per series: GPM's profiling families come from DCGM when its fields provide
    // them all (the ownership filter drops NVML's samples of any it provides), so NVML does not
    // spend a GPM read per GPU and poll on series it would drop.
    let owned = ctx.shared.owned();
    let profiling = GPM_FAMILIES.iter().any(|m| !owned.contains(&(*m, &[][..])));
    Ok(Some(Box::new(
        NvmlSource::with_options(NvmlOptions {
            // Leave the runner's watchdog room: a poll returns before its timeout even when a GPU
            // hangs, and that GPU alone is reported down.
            gpu_deadline: ctx.timing.timeout.mul_f64(0.6),
            procfs: ctx
                .shared
                .procfs
                .clone()
                .unwrap_or_else(|| NvmlOptions::default().procfs),
            profiling,
            ..ctx.options::<NvmlOptions>().clone()
        })
        // XIDs from NVML and from the kernel log (kmsg collector) count once, served here.
        .with_xid_ledger(Arc::clone(&ctx.lasting.xid_ledger)),
    )))
}

/// `[path] procfs`, and the series another collector takes over (their samples are dropped,
/// and GPM is not read when DCGM takes every profiling family).
fn shared_inputs(s: &Shared) -> RestartKey {
    let mut owned: Vec<String> = s
        .owned()
        .iter()
        .map(|(m, labels)| format!("{m:?}{labels:?}"))
        .collect();
    owned.sort_unstable();
    Box::new((s.procfs.clone(), owned))
}
