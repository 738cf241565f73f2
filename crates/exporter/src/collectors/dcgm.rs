//! The `dcgm` collector: GPU profiling (and optionally device) fields through DCGM.
//!
//! Off by default on real GPUs: an embedded host engine is a heavy, privileged component to
//! start on every node, and DGX OS already runs nv-hostengine (see docs/architecture.md). On a
//! simulated node it selects the simulated profiling families and is on unless turned off (the
//! simulated node serves them; `plan()` asks this descriptor whether it runs).

use dgx_pixels_dcgm::{DcgmOptions, DcgmSettings, DcgmSource};

use super::{
    BuildContext, Built, Collector, Flag, FlagDefault, FlagKind, Planning, RestartKey, Table,
    TableOptions, DEFAULT_INTERVAL, DEFAULT_TIMEOUT,
};
use crate::config::{ConfigError, Settings};

/// `[dcgm]`.
pub type Options = DcgmSettings;

impl TableOptions for DcgmSettings {
    fn check(&self, _: &Settings) -> Result<(), ConfigError> {
        self.validate()?;
        if let Some(path) = &self.field_list {
            crate::config::read_field_list(path)?;
        }
        Ok(())
    }
}

/// The dcgm collector's table in `settings`.
pub fn options(settings: &Settings) -> &DcgmSettings {
    settings.options(&COLLECTOR)
}

const FLAGS: &[Flag] = &[
    Flag {
        name: "dcgm.library",
        key: "dcgm.library",
        value_name: "PATH",
        help: "Path of libdcgm",
        default: FlagDefault::Says(|| {
            "libdcgm.so.4, then libdcgm.so.3, from the loader's search path".into()
        }),
        kind: FlagKind::Path,
        order: 110,
    },
    Flag {
        name: "dcgm.hostengine",
        key: "dcgm.hostengine",
        value_name: "HOST:PORT|/path/to.sock",
        help: "Remote DCGM host engine (nv-hostengine), HOST:PORT or a unix socket path",
        default: FlagDefault::Says(|| "start an embedded host engine".into()),
        kind: FlagKind::Text,
        order: 111,
    },
];

/// The descriptor.
pub const COLLECTOR: Collector = Collector {
    name: "dcgm",
    enabled_by_default: false,
    enabled_in_simulation: true,
    default_interval: DEFAULT_INTERVAL,
    default_timeout: DEFAULT_TIMEOUT,
    interval_setting: None,
    help: "GPU profiling (and optionally device) fields through DCGM (libdcgm.so.4 or .so.3, loaded at run time; embedded host engine unless --dcgm.hostengine; with --simulate, simulated profiling, on unless turned off)",
    // It is the owner: the others drop what it provides.
    yields_owned_series: false,
    derived: false,
    table: Some(Table::of::<Options>()),
    flags: FLAGS,
    build,
    shared_inputs,
};

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    // On a simulated node the node serves the profiling families itself.
    if ctx.simulated.is_some() {
        return Ok(None);
    }
    Ok(Some(Box::new(DcgmSource::new(DcgmOptions {
        library: options(ctx.settings).library.clone(),
        hostengine: options(ctx.settings).hostengine.clone(),
        update_interval: ctx.timing.interval,
        fields: ctx.dcgm_fields.to_vec(),
    }))))
}

/// The fields it watches, after ownership (read once per plan from the field list, so a
/// reload that changes the file restarts the sources it affects).
fn shared_inputs(_: &Settings, planning: &Planning) -> RestartKey {
    Box::new(planning.dcgm_fields.clone())
}
