//! The `dcgm` collector's descriptor: GPU profiling (and optionally device) fields through
//! DCGM.
//!
//! Off by default on real GPUs: an embedded host engine is a heavy, privileged component to
//! start on every node, and DGX OS already runs nv-hostengine (see docs/architecture.md). On a
//! simulated node it selects the simulated profiling families and is on unless turned off (the
//! simulated node serves them and asks whether this collector runs).
//!
//! One source per series when NVML and DCGM both run: the field choice ([`field_choice`],
//! read once per plan) decides which catalog series DCGM provides (a metric and its labels
//! after `gpu` and `uuid`, e.g. `gpu_clock_hertz{clock="sm"}`), and the daemon drops the other
//! collectors' samples of those, so no series is served twice while NVML keeps the ones DCGM
//! does not read (`clock="graphics"`). By default DCGM provides the profiling metrics and NVML
//! the device metrics; `[dcgm] device_metrics = true` hands the device metrics DCGM can read to
//! DCGM (the default when the nvml collector is off).

use std::path::Path;
use std::sync::Arc;

use dgx_pixels_registry::{
    BuildContext, Built, Check, Collector, Flag, FlagDefault, FlagKind, Owned, PrepareContext,
    Prepared, RestartKey, SettingError, Shared, Table, TableOptions, DEFAULT_INTERVAL,
    DEFAULT_TIMEOUT,
};
use dgx_pixels_settings::file::{read_regular, MAX_CONFIG_FILE_BYTES};

use crate::fields::{default_fields, parse_field_list, FieldChoice, FieldList, Target};
use crate::{DcgmOptions, DcgmSettings, DcgmSource};

impl TableOptions for DcgmSettings {
    fn validate(&self, _: &Check) -> Result<(), SettingError> {
        DcgmSettings::validate(self)?;
        if let Some(path) = &self.field_list {
            read_field_list(path)?;
        }
        Ok(())
    }
}

/// Reads and parses `dcgm.field_list`: a regular file (a FIFO in its place must not hang a
/// reload), of a sane size, in UTF-8.
pub fn read_field_list(path: &Path) -> Result<FieldList, SettingError> {
    const KEY: &str = "dcgm.field_list";
    let cannot = |e: String| SettingError::new(KEY, format!("cannot read {}: {e}", path.display()));
    let bytes = read_regular(path, MAX_CONFIG_FILE_BYTES).map_err(|e| cannot(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| cannot("not valid UTF-8".into()))?;
    parse_field_list(&text, &path.display().to_string())
        .map_err(|e| SettingError::new(KEY, e.to_string()))
}

/// The DCGM fields to watch, after ownership: with `device_metrics` off (by default while the
/// nvml collector runs), device fields with a catalog row are left to NVML (named in the
/// returned notes, logged at start).
pub fn field_choice(
    dcgm: &DcgmSettings,
    nvml_runs: bool,
) -> Result<(Vec<FieldChoice>, Vec<String>), SettingError> {
    let device_metrics = dcgm.device_metrics.unwrap_or(!nvml_runs);
    let (mut fields, mut notes) = match &dcgm.field_list {
        Some(path) => {
            let list = read_field_list(path)?;
            (list.fields, list.skipped)
        }
        None => (default_fields(device_metrics), Vec::new()),
    };
    if !device_metrics {
        let left: Vec<&str> = fields
            .iter()
            .filter(|f| !f.profiling && f.metric().is_some())
            .map(|f| f.name)
            .collect();
        if !left.is_empty() {
            notes.push(format!(
                "{} come from NVML ([dcgm] device_metrics = true to read them through DCGM)",
                left.join(", ")
            ));
        }
        fields.retain(|f| f.profiling || f.metric().is_none());
    }
    Ok((fields, notes))
}

/// The catalog series a DCGM field provides on every GPU.
pub fn series_of(field: &FieldChoice) -> Option<Owned> {
    match &field.target {
        Target::Catalog(m) => Some((m.metric, m.labels)),
        Target::Extra(_) => None,
    }
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
    help: "GPU profiling (and optionally device) fields through DCGM (libdcgm.so.4 or .so.3, loaded at run time; embedded host engine unless --dcgm.hostengine; with --simulate, simulated profiling, on unless turned off)",
    // It is the owner: the others drop what it provides.
    yields_owned_series: false,
    derived: false,
    table: Some(Table::of::<DcgmSettings>()),
    flags: FLAGS,
    prepare: Some(prepare),
    build,
    shared_inputs,
};

/// The fields to watch, read once per plan (so a reload that changes the field list restarts
/// the sources it affects); nothing on a simulated node, which serves the profiling families
/// itself.
fn prepare(ctx: &PrepareContext<'_>) -> anyhow::Result<Prepared> {
    let fields = if ctx.simulated {
        Vec::new()
    } else {
        let (fields, notes) =
            field_choice(ctx.options::<DcgmSettings>(), ctx.running.contains(&"nvml"))?;
        for note in notes {
            tracing::info!("dcgm field list: {note}");
        }
        fields
    };
    Ok(Prepared {
        owns: fields.iter().filter_map(series_of).collect(),
        value: Arc::new(fields),
    })
}

fn build(ctx: &BuildContext<'_>) -> anyhow::Result<Built> {
    // On a simulated node the node serves the profiling families itself.
    if ctx.simulated.is_some() {
        return Ok(None);
    }
    let options = ctx.options::<DcgmSettings>();
    Ok(Some(Box::new(DcgmSource::new(DcgmOptions {
        library: options.library.clone(),
        hostengine: options.hostengine.clone(),
        update_interval: ctx.timing.interval,
        fields: fields(ctx.shared),
    }))))
}

/// The fields it watches, after ownership.
fn fields(shared: &Shared) -> Vec<FieldChoice> {
    shared
        .prepared::<Vec<FieldChoice>>(COLLECTOR.name)
        .cloned()
        .unwrap_or_default()
}

/// The fields it watches.
fn shared_inputs(s: &Shared) -> RestartKey {
    Box::new(fields(s))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use dgx_pixels_metrics::Metric;
    use std::io::Write;

    #[test]
    fn by_default_dcgm_provides_profiling_and_nvml_the_device_metrics() {
        let dcgm = DcgmSettings::default();
        let (fields, _) = field_choice(&dcgm, true).unwrap();
        assert!(!fields.is_empty() && fields.iter().all(|f| f.profiling));
        // Without NVML, DCGM provides the device metrics too.
        let (fields, _) = field_choice(&dcgm, false).unwrap();
        assert!(fields
            .iter()
            .any(|f| f.metric() == Some(Metric::GpuUtilization)));
    }

    #[test]
    fn a_field_list_keeps_device_fields_with_nvml_unless_told_otherwise() {
        let mut csv = tempfile::NamedTempFile::new().unwrap();
        writeln!(csv, "DCGM_FI_DEV_GPU_UTIL, gauge, util\nDCGM_FI_DEV_XID_ERRORS, gauge, xid\nDCGM_FI_PROF_SM_ACTIVE, gauge, sm").unwrap();
        let dcgm = DcgmSettings {
            field_list: Some(csv.path().to_path_buf()),
            ..DcgmSettings::default()
        };
        let (fields, notes) = field_choice(&dcgm, true).unwrap();
        let ids: Vec<u16> = fields.iter().map(|f| f.id).collect();
        assert_eq!(ids, [230, 1002]);
        assert!(
            notes[0].starts_with("DCGM_FI_DEV_GPU_UTIL come from NVML"),
            "{notes:?}"
        );
        let missing = DcgmSettings {
            field_list: Some("/nonexistent/fields.csv".into()),
            ..DcgmSettings::default()
        };
        let e = field_choice(&missing, true).unwrap_err().to_string();
        assert!(
            e.starts_with("dcgm.field_list: cannot read /nonexistent/fields.csv"),
            "{e}"
        );
    }
}
