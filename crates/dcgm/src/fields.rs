//! The DCGM fields the exporter knows: their ids and names, how each maps to a catalog metric,
//! the default watch lists, and dcgm-exporter field-list CSV files.

// The other names of the fields are in fields/aliases.rs, the docs page in fields/markdown.rs,
// the tests in fields/tests.rs.

use std::sync::Arc;

use dcgm_sys::fields as f;
use dgx_pixels_metrics::labels::{
    ClockDomain, EccCounter, EccErrorType, RemappedRowCause, TemperatureSensor, ViolationPolicy,
};
use dgx_pixels_metrics::{Kind, Metric, CATALOG};

mod aliases;
mod markdown;

pub use aliases::ALIASES;
pub use markdown::markdown;

/// How a known field becomes a catalog series: the metric, its label values after `gpu` and
/// `uuid`, and the factor from DCGM's unit to the metric's base unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mapping {
    /// The catalog row.
    pub metric: Metric,
    /// Label values after `gpu` and `uuid`.
    pub labels: &'static [&'static str],
    /// Multiplier to the base unit.
    pub scale: f64,
}

/// A DCGM field the exporter knows by id.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KnownField {
    /// `DCGM_FI_*` id.
    pub id: u16,
    /// `DCGM_FI_*` name, as in dcgm-exporter's CSV files.
    pub name: &'static str,
    /// The catalog series it feeds; `None` for fields only exported through a field list.
    pub mapping: Option<Mapping>,
    /// A profiling (DCP) field: needs the profiling module and a watch of at least 100 ms.
    pub profiling: bool,
    /// For a base-unit field (ids 1600-1612, DCGM 4.6.1 and later), the id of the legacy field
    /// it replaces: the same quantity in another unit, under its own id, which DCGM keeps.
    pub replaces: Option<u16>,
}

const MIB: f64 = 1024.0 * 1024.0;

macro_rules! known {
    ($($id:ident $(=> $metric:ident [$($l:expr),*] $scale:expr)? $(; $kw:ident $($legacy:ident)?)?,)*) => {
        /// Every field the exporter knows, by id.
        pub const KNOWN_FIELDS: &[KnownField] = &[$(KnownField {
            id: f::$id,
            name: stringify!($id),
            mapping: known!(@map $($metric [$($l),*] $scale)?),
            profiling: known!(@prof $($kw)?),
            replaces: known!(@legacy $($($legacy)?)?),
        },)*];
    };
    (@map $metric:ident [$($l:expr),*] $scale:expr) => {
        Some(Mapping { metric: Metric::$metric, labels: &[$($l),*], scale: $scale })
    };
    (@map) => { None };
    (@prof prof) => { true };
    (@prof replaces) => { false };
    (@prof) => { false };
    (@legacy $legacy:ident) => { Some(f::$legacy) };
    (@legacy) => { None };
}

known! {
    DCGM_FI_DRIVER_VERSION,
    DCGM_FI_DEV_NAME,
    DCGM_FI_DEV_UUID,
    DCGM_FI_DEV_PCI_BUSID,
    DCGM_FI_DEV_SM_CLOCK => GpuClock [ClockDomain::Sm.as_str()] 1e6,
    DCGM_FI_DEV_MEM_CLOCK => GpuClock [ClockDomain::Memory.as_str()] 1e6,
    DCGM_FI_DEV_CLOCK_THROTTLE_REASONS,
    DCGM_FI_DEV_MEMORY_TEMP => GpuTemperature [TemperatureSensor::Memory.as_str()] 1.0,
    DCGM_FI_DEV_GPU_TEMP => GpuTemperature [TemperatureSensor::Gpu.as_str()] 1.0,
    DCGM_FI_DEV_POWER_USAGE => GpuPower [] 1.0,
    DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION => GpuEnergy [] 1e-3,
    DCGM_FI_DEV_POWER_USAGE_INSTANT,
    DCGM_FI_DEV_PSTATE => GpuPerformanceState [] 1.0,
    DCGM_FI_DEV_FAN_SPEED => GpuFanSpeed ["0"] 0.01,
    DCGM_FI_DEV_PCIE_REPLAY_COUNTER,
    DCGM_FI_DEV_GPU_UTIL => GpuUtilization [] 0.01,
    DCGM_FI_DEV_MEM_COPY_UTIL => GpuMemoryUtilization [] 0.01,
    DCGM_FI_DEV_ENC_UTIL => GpuEncoderUtilization [] 0.01,
    DCGM_FI_DEV_DEC_UTIL => GpuDecoderUtilization [] 0.01,
    DCGM_FI_DEV_XID_ERRORS,
    DCGM_FI_DEV_POWER_VIOLATION => GpuThrottleViolation [ViolationPolicy::Power.as_str()] 1e-9,
    DCGM_FI_DEV_THERMAL_VIOLATION => GpuThrottleViolation [ViolationPolicy::Thermal.as_str()] 1e-9,
    DCGM_FI_DEV_FB_TOTAL => GpuMemoryTotal [] MIB,
    DCGM_FI_DEV_FB_FREE => GpuMemoryFree [] MIB,
    DCGM_FI_DEV_FB_USED => GpuMemoryUsed [] MIB,
    DCGM_FI_DEV_FB_RESERVED => GpuMemoryReserved [] MIB,
    DCGM_FI_DEV_FB_USED_PERCENT,
    DCGM_FI_DEV_ECC_SBE_VOL_TOTAL => GpuEccErrors [EccErrorType::Corrected.as_str(), EccCounter::Volatile.as_str()] 1.0,
    DCGM_FI_DEV_ECC_DBE_VOL_TOTAL => GpuEccErrors [EccErrorType::Uncorrected.as_str(), EccCounter::Volatile.as_str()] 1.0,
    DCGM_FI_DEV_ECC_SBE_AGG_TOTAL => GpuEccErrors [EccErrorType::Corrected.as_str(), EccCounter::Aggregate.as_str()] 1.0,
    DCGM_FI_DEV_ECC_DBE_AGG_TOTAL => GpuEccErrors [EccErrorType::Uncorrected.as_str(), EccCounter::Aggregate.as_str()] 1.0,
    DCGM_FI_DEV_RETIRED_SBE,
    DCGM_FI_DEV_RETIRED_DBE,
    DCGM_FI_DEV_RETIRED_PENDING,
    DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS => GpuRemappedRows [RemappedRowCause::Uncorrectable.as_str()] 1.0,
    DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS => GpuRemappedRows [RemappedRowCause::Correctable.as_str()] 1.0,
    DCGM_FI_DEV_ROW_REMAP_FAILURE => GpuRemappedRowsFailure [] 1.0,
    DCGM_FI_DEV_ROW_REMAP_PENDING => GpuRemappedRowsPending [] 1.0,
    DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL,
    DCGM_FI_DEV_VGPU_LICENSE_STATUS,
    DCGM_FI_PROF_GR_ENGINE_ACTIVE => GpuGraphicsEngineActive [] 1.0; prof,
    DCGM_FI_PROF_SM_ACTIVE => GpuSmActive [] 1.0; prof,
    DCGM_FI_PROF_SM_OCCUPANCY => GpuSmOccupancy [] 1.0; prof,
    DCGM_FI_PROF_PIPE_TENSOR_ACTIVE => GpuTensorPipeActive [] 1.0; prof,
    DCGM_FI_PROF_DRAM_ACTIVE => GpuDramActive [] 1.0; prof,
    DCGM_FI_PROF_PIPE_FP64_ACTIVE => GpuFp64PipeActive [] 1.0; prof,
    DCGM_FI_PROF_PIPE_FP32_ACTIVE => GpuFp32PipeActive [] 1.0; prof,
    DCGM_FI_PROF_PIPE_FP16_ACTIVE => GpuFp16PipeActive [] 1.0; prof,
    DCGM_FI_PROF_PCIE_TX_BYTES => PcieTransmit [] 1.0; prof,
    DCGM_FI_PROF_PCIE_RX_BYTES => PcieReceive [] 1.0; prof,
    DCGM_FI_PROF_NVLINK_TX_BYTES => NvlinkTransmitRate [] 1.0; prof,
    DCGM_FI_PROF_NVLINK_RX_BYTES => NvlinkReceiveRate [] 1.0; prof,
    // Base-unit fields, ids, names and units from go-dcgm tag v1.4611.0,
    // `pkg/dcgm/dcgm_fields.h` (DCGM 4.6.1), each with the legacy field it replaces (that
    // tag's `pkg/dcgm/base_unit_fields_test.go`); the factor converts their base unit to the
    // metric's, 1 for all of them.
    DCGM_FI_DEV_BAR1_CAPACITY_BYTES => GpuBar1Total [] 1.0; replaces DCGM_FI_DEV_BAR1_TOTAL,
    DCGM_FI_DEV_BAR1_USED_BYTES => GpuBar1Used [] 1.0; replaces DCGM_FI_DEV_BAR1_USED,
    DCGM_FI_DEV_BAR1_FREE_BYTES; replaces DCGM_FI_DEV_BAR1_FREE,
    DCGM_FI_DEV_SM_CLOCK_HERTZ => GpuClock [ClockDomain::Sm.as_str()] 1.0; replaces DCGM_FI_DEV_SM_CLOCK,
    DCGM_FI_DEV_MEMORY_CLOCK_HERTZ => GpuClock [ClockDomain::Memory.as_str()] 1.0; replaces DCGM_FI_DEV_MEM_CLOCK,
    DCGM_FI_DEV_VIDEO_CLOCK_HERTZ => GpuClock [ClockDomain::Video.as_str()] 1.0; replaces DCGM_FI_DEV_VIDEO_CLOCK,
    DCGM_FI_DEV_SM_APP_CLOCK_HERTZ; replaces DCGM_FI_DEV_APP_SM_CLOCK,
    DCGM_FI_DEV_MEMORY_APP_CLOCK_HERTZ; replaces DCGM_FI_DEV_APP_MEM_CLOCK,
    DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ => GpuClockMax [ClockDomain::Sm.as_str()] 1.0; replaces DCGM_FI_DEV_MAX_SM_CLOCK,
    DCGM_FI_DEV_MEMORY_MAX_CLOCK_HERTZ => GpuClockMax [ClockDomain::Memory.as_str()] 1.0; replaces DCGM_FI_DEV_MAX_MEM_CLOCK,
    DCGM_FI_DEV_VIDEO_MAX_CLOCK_HERTZ => GpuClockMax [ClockDomain::Video.as_str()] 1.0; replaces DCGM_FI_DEV_MAX_VIDEO_CLOCK,
    DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL => GpuEnergy [] 1.0; replaces DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
    DCGM_FI_DEV_FAN_SPEED_RATIO => GpuFanSpeed ["0"] 1.0; replaces DCGM_FI_DEV_FAN_SPEED,
}

/// `DCGM_FI_DEV_UUID`: read with every poll for the `uuid` label.
pub const UUID_FIELD: u16 = f::DCGM_FI_DEV_UUID;

/// String fields (identity): not exported as values; `dgx_pixels_gpu_info` carries identity.
pub const STRING_FIELDS: [u16; 4] = [
    f::DCGM_FI_DRIVER_VERSION,
    f::DCGM_FI_DEV_NAME,
    f::DCGM_FI_DEV_UUID,
    f::DCGM_FI_DEV_PCI_BUSID,
];

/// The known field with this id.
pub fn by_id(id: u16) -> Option<&'static KnownField> {
    KNOWN_FIELDS.iter().find(|f| f.id == id)
}

/// The known field with this `DCGM_FI_*` name (aliases included).
pub fn by_name(name: &str) -> Option<&'static KnownField> {
    KNOWN_FIELDS.iter().find(|f| f.name == name).or_else(|| {
        ALIASES
            .iter()
            .find(|(a, _)| *a == name)
            .and_then(|(_, id)| by_id(*id))
    })
}

/// A family outside the catalog, defined from a dcgm-exporter field list (a field the catalog
/// has no row for), labelled `gpu` and `uuid`. Served through the external-families path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraFamily {
    /// Exposed name (a counter's ends in `_total`).
    pub name: String,
    /// Gauge or counter.
    pub kind: Kind,
    /// One-line help text.
    pub help: String,
}

impl ExtraFamily {
    /// A family, checked against the catalog's naming rules: a valid name under `dgx_pixels_`,
    /// no clash with a catalog row, `_total` on counters and only on them, a one-line help.
    pub fn new(name: &str, kind: Kind, help: &str) -> Result<ExtraFamily, FamilyError> {
        let valid = name.starts_with("dgx_pixels_")
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(FamilyError::InvalidName(name.to_string()));
        }
        if CATALOG
            .iter()
            .any(|d| d.name == name || d.family_name() == name)
        {
            return Err(FamilyError::CatalogClash(name.to_string()));
        }
        if (kind == Kind::Counter) != name.ends_with("_total") {
            return Err(FamilyError::TotalSuffix(name.to_string()));
        }
        let help = help.trim();
        if help.contains(['\n', '\\']) {
            return Err(FamilyError::Help(name.to_string()));
        }
        Ok(ExtraFamily {
            name: name.to_string(),
            kind,
            help: if help.is_empty() {
                name.to_string()
            } else {
                help.to_string()
            },
        })
    }
}

/// Why a run-time family was refused ([`ExtraFamily::new`]); the message names the family.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FamilyError {
    /// Not a metric name under `dgx_pixels_`.
    #[error("{0:?} is not a valid dgx_pixels_ metric name")]
    InvalidName(String),
    /// The name is a catalog family or series.
    #[error("{0} is already a catalog metric")]
    CatalogClash(String),
    /// A counter without `_total`, or a gauge with it.
    #[error("{0}: counters and only counters end in _total")]
    TotalSuffix(String),
    /// The help text spans lines or holds a backslash.
    #[error("{0}: help must be one line without backslashes")]
    Help(String),
}

/// Why a field list was refused ([`parse_field_list`]); the message names the file and, for
/// a bad line, the line number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldListError {
    /// A line without the `type` column.
    #[error("field list {file}:{line}: expected `DCGM_FI_NAME, type, help`, got {text:?}")]
    Malformed {
        /// The file name given to the parser.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The (trimmed) line.
        text: String,
    },
    /// The first column is not a `DCGM_FI_` name.
    #[error("field list {file}:{line}: {name:?} is not a DCGM field name (DCGM_FI_...)")]
    NotAFieldName {
        /// The file name given to the parser.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The first column.
        name: String,
    },
    /// The type column is not gauge, counter or label.
    #[error("field list {file}:{line}: type {kind:?} of {name}; expected gauge, counter or label")]
    UnknownType {
        /// The file name given to the parser.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The type column.
        kind: String,
        /// The field's name.
        name: String,
    },
    /// The field's run-time family is refused.
    #[error("field list {file}:{line}: {source}")]
    Family {
        /// The file name given to the parser.
        file: String,
        /// 1-based line number.
        line: usize,
        /// Why the family was refused.
        source: FamilyError,
    },
    /// No line names a field this exporter can watch.
    #[error("field list {file}: no usable DCGM field")]
    Empty {
        /// The file name given to the parser.
        file: String,
    },
}

/// Where a watched field's values go.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A catalog series.
    Catalog(Mapping),
    /// A run-time family `dgx_pixels_dcgm_*`, value in DCGM's unit.
    Extra(Arc<ExtraFamily>),
}

/// A field to watch and where its values go.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldChoice {
    /// `DCGM_FI_*` id.
    pub id: u16,
    /// `DCGM_FI_*` name.
    pub name: &'static str,
    /// A profiling field.
    pub profiling: bool,
    /// Where the values go.
    pub target: Target,
}

impl FieldChoice {
    /// The catalog metric it feeds, if any.
    pub fn metric(&self) -> Option<Metric> {
        match &self.target {
            Target::Catalog(m) => Some(m.metric),
            Target::Extra(_) => None,
        }
    }
}

fn catalog_choice(f: &'static KnownField) -> Option<FieldChoice> {
    f.mapping.map(|m| FieldChoice {
        id: f.id,
        name: f.name,
        profiling: f.profiling,
        target: Target::Catalog(m),
    })
}

/// The default fields: every profiling field, plus every device field with a catalog row when
/// `device_metrics` (DCGM then provides the device metrics instead of NVML). Base-unit fields
/// are left out: DCGM before 4.6.1 has no such ids, and their legacy fields, which every
/// version has, give the same series.
pub fn default_fields(device_metrics: bool) -> Vec<FieldChoice> {
    KNOWN_FIELDS
        .iter()
        .filter(|f| f.profiling || device_metrics)
        .filter(|f| f.replaces.is_none())
        .filter_map(catalog_choice)
        .collect()
}

/// Name of the run-time family for a field the catalog has no row for:
/// `dgx_pixels_dcgm_` and the field name in lower case without `DCGM_FI_`, plus `_total` for a
/// counter.
pub fn extra_name(field_name: &str, kind: Kind) -> String {
    let base = field_name
        .strip_prefix("DCGM_FI_")
        .unwrap_or(field_name)
        .to_ascii_lowercase();
    match kind {
        Kind::Counter => format!("dgx_pixels_dcgm_{base}_total"),
        // Field lists declare gauges and counters only.
        Kind::Gauge | Kind::Histogram => format!("dgx_pixels_dcgm_{base}"),
    }
}

/// The result of reading a field list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldList {
    /// Fields to watch, in file order.
    pub fields: Vec<FieldChoice>,
    /// Lines skipped, each `FILE:LINE: why` (logged once at start).
    pub skipped: Vec<String>,
}

/// One line of a field list that is neither blank nor a comment.
enum Row<'a> {
    /// A known field, with the CSV's type and help.
    Field {
        known: &'static KnownField,
        kind: Kind,
        help: &'a str,
    },
    /// A line not watched, and why.
    Skip(String),
}

/// Reads one line (`DCGM_FI_NAME, type, help`, trimmed, not a comment) of `file`.
fn parse_row<'a>(line: &'a str, file: &str, n: usize) -> Result<Row<'a>, FieldListError> {
    let mut parts = line.splitn(3, ',');
    let name = parts.next().unwrap_or_default().trim();
    let kind = parts
        .next()
        .map(str::trim)
        .ok_or_else(|| FieldListError::Malformed {
            file: file.to_string(),
            line: n,
            text: line.to_string(),
        })?;
    let help = parts.next().unwrap_or_default().trim();
    let exporters_own = name.starts_with("DCGM_EXP_");
    if !(name.starts_with("DCGM_FI_") || exporters_own)
        || !name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(FieldListError::NotAFieldName {
            file: file.to_string(),
            line: n,
            name: name.to_string(),
        });
    }
    let kind = match kind {
        "gauge" => Kind::Gauge,
        "counter" => Kind::Counter,
        "label" => {
            return Ok(Row::Skip(format!(
                "{name} is a label row; labels come from gpu_info here"
            )))
        }
        other => {
            return Err(FieldListError::UnknownType {
                file: file.to_string(),
                line: n,
                kind: other.to_string(),
                name: name.to_string(),
            })
        }
    };
    if exporters_own {
        return Ok(Row::Skip(format!(
            "{name} is a dcgm-exporter metric, not a DCGM field"
        )));
    }
    let Some(known) = by_name(name) else {
        return Ok(Row::Skip(format!(
            "{name} is not a field this exporter knows the id of"
        )));
    };
    if STRING_FIELDS.contains(&known.id) {
        return Ok(Row::Skip(format!(
            "{name} is a string; identity is in dgx_pixels_gpu_info"
        )));
    }
    Ok(Row::Field { known, kind, help })
}

/// Where a known field's values go: its catalog series, or a run-time family named after the
/// field (not the spelling: an alias gives the same family as the name) with the CSV's type
/// and help.
fn choose(known: &'static KnownField, kind: Kind, help: &str) -> Result<FieldChoice, FamilyError> {
    if let Some(c) = catalog_choice(known) {
        return Ok(c);
    }
    Ok(FieldChoice {
        id: known.id,
        name: known.name,
        profiling: known.profiling,
        target: Target::Extra(Arc::new(ExtraFamily::new(
            &extra_name(known.name, kind),
            kind,
            help,
        )?)),
    })
}

/// Parses a dcgm-exporter field-list CSV (`DCGM_FI_NAME, type, help`; `#` comments). Known
/// fields with a catalog row map to it (the CSV's type and help are then ignored); other
/// known fields become `dgx_pixels_dcgm_*` families with the CSV's type and help. Names whose
/// id this exporter does not know, dcgm-exporter's own `DCGM_EXP_*` rows and `label` rows are
/// skipped with a reason. A field named twice is watched once; a base-unit field and the
/// legacy field it replaces are never both watched: the base-unit one wins, wherever it is,
/// and the legacy line is skipped. Malformed lines are errors naming the file and line.
pub fn parse_field_list(text: &str, file: &str) -> Result<FieldList, FieldListError> {
    let mut out = FieldList::default();
    // The line of each chosen field.
    let mut lines: Vec<usize> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (known, kind, help) = match parse_row(line, file, i + 1)? {
            Row::Skip(why) => {
                out.skipped.push(format!("{file}:{}: {why}", i + 1));
                continue;
            }
            Row::Field { known, kind, help } => (known, kind, help),
        };
        if out.fields.iter().any(|f| f.id == known.id) {
            continue;
        }
        let replaced_by = |id: u16| by_id(id).and_then(|f| f.replaces) == Some(known.id);
        if let Some(k) = out.fields.iter().position(|f| replaced_by(f.id)) {
            let note = replaced(known.name, known.id, &out.fields[k], file, lines[k]);
            out.skipped.push(format!("{file}:{}: {note}", i + 1));
            continue;
        }
        let choice = choose(known, kind, help).map_err(|source| FieldListError::Family {
            file: file.to_string(),
            line: i + 1,
            source,
        })?;
        if let Some(k) = out.fields.iter().position(|f| Some(f.id) == known.replaces) {
            let (old, at) = (out.fields.remove(k), lines.remove(k));
            let note = replaced(old.name, old.id, &choice, file, i + 1);
            out.skipped.push(format!("{file}:{at}: {note}"));
        }
        out.fields.push(choice);
        lines.push(i + 1);
    }
    if out.fields.is_empty() {
        return Err(FieldListError::Empty {
            file: file.to_string(),
        });
    }
    Ok(out)
}

/// Why a legacy field's line is skipped: `by`, its base-unit replacement, is named at `line`.
fn replaced(name: &str, id: u16, by: &FieldChoice, file: &str, line: usize) -> String {
    format!(
        "{name} ({id}) is served by {} ({}), its base-unit replacement, named at {file}:{line}",
        by.name, by.id
    )
}

#[cfg(test)]
mod tests;
