//! The `health` collector's descriptor: a verdict and recommended action per GPU, from the
//! rules of docs/health.md over what the other sources serve, and the idle time of GPUs that a
//! pod or job holds but leaves idle ([`HealthSource`], reading the current generation's device
//! view). On by default, also on a simulated node: it reads no device and needs no privilege.

use std::time::Duration;

use dgx_pixels_registry::{
    no_shared_inputs, BuildContext, Built, Check, Collector, SettingError, Table, TableOptions,
    DEFAULT_INTERVAL, DEFAULT_TIMEOUT,
};

use crate::{HealthMemory, HealthSettings, HealthSource};

impl TableOptions for HealthSettings {
    fn validate(&self, _: &Check) -> Result<(), SettingError> {
        HealthSettings::validate(self)
    }
}

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "health",
    enabled_by_default: true,
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    default_timeout: DEFAULT_TIMEOUT,
    help: "a health verdict and recommended action per GPU from the rules of docs/health.md over the other sources' readings, and the idle time of GPUs held by pods or jobs ([health])",
    yields_owned_series: false,
    // It judges what the others read: alone it has nothing to say.
    derived: true,
    table: Some(Table::of::<HealthSettings>()),
    flags: &[],
    prepare: None,
    build,
    shared_inputs: no_shared_inputs,
};

/// A simulated node's `[health] idle_after` where the config leaves it unset: the demo's late
/// rank leaves its held GPU idle for 20 s (GPU 7 of `dgx-h100` from 30 to 50 s), which a real
/// node's 10 minutes would never count, and the demo shows its waste within a minute.
pub const SIMULATED_IDLE_AFTER: Duration = Duration::from_secs(10);

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    let mut options = ctx.options::<HealthSettings>().clone();
    if ctx.simulated.is_some() && options.idle_after.is_none() {
        options.idle_after = Some(SIMULATED_IDLE_AFTER);
    }
    Ok(Some(Box::new(HealthSource::new(
        ctx.views(),
        &options,
        // The verdicts outlive a reload of [health] (a new XID policy).
        ctx.kept::<HealthMemory>(),
    ))))
}
