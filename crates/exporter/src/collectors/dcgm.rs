//! The `dcgm` collector: GPU profiling (and optionally device) fields through DCGM.
//!
//! Off by default on real GPUs: an embedded host engine is a heavy, privileged component to
//! start on every node, and DGX OS already runs nv-hostengine (see docs/architecture.md). On a
//! simulated node it selects the simulated profiling families and is on unless turned off (the
//! simulated node serves them; `plan()` asks this descriptor whether it runs).

use dgx_pixels_dcgm::fields::FieldChoice;
use dgx_pixels_dcgm::{DcgmOptions, DcgmSource};

use super::{BuildContext, Built, Collector, RestartKey, DEFAULT_INTERVAL, DEFAULT_TIMEOUT};
use crate::config::Settings;

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "dcgm",
    enabled_by_default: false,
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    default_timeout: DEFAULT_TIMEOUT,
    help: "GPU profiling (and optionally device) fields through DCGM (libdcgm.so.4 or .so.3, loaded at run time; embedded host engine unless --dcgm.hostengine; with --simulate, simulated profiling, on unless turned off)",
    // It is the owner: the others drop what it provides.
    yields_owned_series: false,
    derived: false,
    build,
    restart_key,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    // On a simulated node the node serves the profiling families itself.
    if ctx.simulated.is_some() {
        return Ok(None);
    }
    Ok(Some(Box::new(DcgmSource::new(DcgmOptions {
        library: ctx.settings.dcgm.library.clone(),
        hostengine: ctx.settings.dcgm.hostengine.clone(),
        update_interval: ctx.timing.interval,
        fields: ctx.dcgm_fields.to_vec(),
    }))))
}

/// The fields DCGM watches on real GPUs, after ownership (read again from the field list, so a
/// reload that changes the file restarts the sources it affects); `None` when it does not run
/// (or the list cannot be read, which fails the plan before any comparison).
pub fn watched_fields(s: &Settings) -> Option<Vec<FieldChoice>> {
    if !COLLECTOR.enabled(s, false) {
        return None;
    }
    crate::ownership::dcgm_fields(s)
        .ok()
        .map(|(fields, _)| fields)
}

/// `[dcgm]` and the fields it watches.
fn restart_key(s: &Settings) -> RestartKey {
    Box::new((s.dcgm.clone(), watched_fields(s)))
}
