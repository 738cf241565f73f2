//! The DCGM fields the exporter knows: their ids and names, how each maps to a catalog metric,
//! the default watch lists, and dcgm-exporter field-list CSV files.

// Length: the code (~600 lines) is the known-field table and what reads it (watch lists, field
// lists, the docs table), kept whole; its tests are in fields/tests.rs.

use std::sync::Arc;

use dcgm_sys::fields as f;
use dgx_pixels_metrics::labels::{
    ClockDomain, EccCounter, EccErrorType, RemappedRowCause, TemperatureSensor, ViolationPolicy,
};
use dgx_pixels_metrics::{Kind, Metric, CATALOG};

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
}

const MIB: f64 = 1024.0 * 1024.0;

macro_rules! known {
    ($($id:ident $(=> $metric:ident [$($l:expr),*] $scale:expr)? $(; $prof:ident)?,)*) => {
        /// Every field the exporter knows, by id.
        pub const KNOWN_FIELDS: &[KnownField] = &[$(KnownField {
            id: f::$id,
            name: stringify!($id),
            mapping: known!(@map $($metric [$($l),*] $scale)?),
            profiling: known!(@prof $($prof)?),
        },)*];
    };
    (@map $metric:ident [$($l:expr),*] $scale:expr) => {
        Some(Mapping { metric: Metric::$metric, labels: &[$($l),*], scale: $scale })
    };
    (@map) => { None };
    (@prof prof) => { true };
    (@prof) => { false };
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

/// The names DCGM 4 gave fields above (its `dcgm_fields` keeps the old ones as aliases), as a
/// field list written for DCGM 4 names them: the same ids, so the same values in the same
/// units, exported under the same names as the old spelling.
pub const ALIASES: &[(&str, u16)] = &[
    ("DCGM_FI_DEV_GPU_UTIL_RATIO", f::DCGM_FI_DEV_GPU_UTIL),
    (
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        f::DCGM_FI_DEV_CLOCK_THROTTLE_REASONS,
    ),
    (
        "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",
        f::DCGM_FI_DEV_MEMORY_TEMP,
    ),
    ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", f::DCGM_FI_DEV_GPU_TEMP),
    ("DCGM_FI_DEV_BOARD_POWER_WATTS", f::DCGM_FI_DEV_POWER_USAGE),
    (
        "DCGM_FI_DEV_BOARD_POWER_RAW_WATTS",
        f::DCGM_FI_DEV_POWER_USAGE_INSTANT,
    ),
    ("DCGM_FI_DEV_GPU_PSTATE", f::DCGM_FI_DEV_PSTATE),
    (
        "DCGM_FI_DEV_PCIE_REPLAY_TOTAL",
        f::DCGM_FI_DEV_PCIE_REPLAY_COUNTER,
    ),
    ("DCGM_FI_DEV_XID_ERROR", f::DCGM_FI_DEV_XID_ERRORS),
    ("DCGM_FI_DEV_FB_USED_RATIO", f::DCGM_FI_DEV_FB_USED_PERCENT),
    (
        "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL",
        f::DCGM_FI_DEV_RETIRED_SBE,
    ),
    (
        "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL",
        f::DCGM_FI_DEV_RETIRED_DBE,
    ),
    (
        "DCGM_FI_DEV_PAGE_RETIRED_PENDING",
        f::DCGM_FI_DEV_RETIRED_PENDING,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
        f::DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL",
        f::DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILED",
        f::DCGM_FI_DEV_ROW_REMAP_FAILURE,
    ),
    (
        "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL",
        f::DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL,
    ),
    (
        "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
        f::DCGM_FI_PROF_GR_ENGINE_ACTIVE,
    ),
    ("DCGM_FI_PROF_SM_UTIL_RATIO", f::DCGM_FI_PROF_SM_ACTIVE),
    (
        "DCGM_FI_PROF_SM_OCCUPANCY_RATIO",
        f::DCGM_FI_PROF_SM_OCCUPANCY,
    ),
    (
        "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
        f::DCGM_FI_PROF_PIPE_TENSOR_ACTIVE,
    ),
    ("DCGM_FI_PROF_DRAM_UTIL_RATIO", f::DCGM_FI_PROF_DRAM_ACTIVE),
    (
        "DCGM_FI_PROF_FP64_UTIL_RATIO",
        f::DCGM_FI_PROF_PIPE_FP64_ACTIVE,
    ),
    (
        "DCGM_FI_PROF_FP32_UTIL_RATIO",
        f::DCGM_FI_PROF_PIPE_FP32_ACTIVE,
    ),
    (
        "DCGM_FI_PROF_FP16_UTIL_RATIO",
        f::DCGM_FI_PROF_PIPE_FP16_ACTIVE,
    ),
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
/// `device_metrics` (DCGM then provides the device metrics instead of NVML).
pub fn default_fields(device_metrics: bool) -> Vec<FieldChoice> {
    KNOWN_FIELDS
        .iter()
        .filter(|f| f.profiling || device_metrics)
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

/// Parses a dcgm-exporter field-list CSV (`DCGM_FI_NAME, type, help`; `#` comments). Known
/// fields with a catalog row map to it (the CSV's type and help are then ignored); other
/// known fields become `dgx_pixels_dcgm_*` families with the CSV's type and help. Names whose
/// id this exporter does not know, and `label` rows, are skipped with a reason. Malformed lines
/// are errors naming the file and line.
pub fn parse_field_list(text: &str, file: &str) -> Result<FieldList, FieldListError> {
    let mut out = FieldList::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let at = format!("{file}:{}", i + 1);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.splitn(3, ',');
        let name = parts.next().unwrap_or_default().trim();
        let kind = parts
            .next()
            .map(str::trim)
            .ok_or_else(|| FieldListError::Malformed {
                file: file.to_string(),
                line: i + 1,
                text: line.to_string(),
            })?;
        let help = parts.next().unwrap_or_default().trim();
        if !name.starts_with("DCGM_FI_")
            || !name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(FieldListError::NotAFieldName {
                file: file.to_string(),
                line: i + 1,
                name: name.to_string(),
            });
        }
        let kind = match kind {
            "gauge" => Kind::Gauge,
            "counter" => Kind::Counter,
            "label" => {
                out.skipped.push(format!(
                    "{at}: {name} is a label row; labels come from gpu_info here"
                ));
                continue;
            }
            other => {
                return Err(FieldListError::UnknownType {
                    file: file.to_string(),
                    line: i + 1,
                    kind: other.to_string(),
                    name: name.to_string(),
                })
            }
        };
        let Some(known) = by_name(name) else {
            out.skipped.push(format!(
                "{at}: {name} is not a field this exporter knows the id of"
            ));
            continue;
        };
        if STRING_FIELDS.contains(&known.id) {
            out.skipped.push(format!(
                "{at}: {name} is a string; identity is in dgx_pixels_gpu_info"
            ));
            continue;
        }
        if out.fields.iter().any(|f| f.id == known.id) {
            continue;
        }
        let choice = match catalog_choice(known) {
            Some(c) => c,
            None => FieldChoice {
                id: known.id,
                name: known.name,
                profiling: known.profiling,
                target: Target::Extra(Arc::new(
                    // Named after the field, not the spelling: a DCGM 4 alias gives the same
                    // family as the old name.
                    ExtraFamily::new(&extra_name(known.name, kind), kind, help).map_err(
                        |source| FieldListError::Family {
                            file: file.to_string(),
                            line: i + 1,
                            source,
                        },
                    )?,
                )),
            },
        };
        out.fields.push(choice);
    }
    if out.fields.is_empty() {
        return Err(FieldListError::Empty {
            file: file.to_string(),
        });
    }
    Ok(out)
}

/// How fresh DCGM readings are (in docs/dcgm-fields.md).
const FRESHNESS: &str = "
## How fresh DCGM readings are

The `dcgm` source watches its fields with an update interval equal to
`--collector.dcgm.interval` (default 1 s), or 100 ms for profiling fields when the interval is
shorter (DCGM's minimum), and reads the latest sample of every GPU and field in one
`dcgmEntitiesGetLatestValues` call per poll. Profiling values are averages over DCGM's sample
period. A poll that fails (host engine gone, library missing, struct version refused) drops all
DCGM series until the source reconnects; nothing is served stale.

Every sample carries DCGM's timestamp. A sample older than 3 update intervals (at least 2 s)
means DCGM stopped refreshing that watch: it is left out, not served as current, and counted in
`dgx_pixels_gpu_stale_readings{source=\"dcgm\"}` for its GPU. After 3 polls in a row with stale
samples the source re-creates its groups and watches (at most once a minute) and logs the field
ids. `DCGM_FI_DEV_XID_ERRORS` is exempt: its timestamp is the time of the last XID. With a
remote host engine on another machine, the two clocks must agree to within that margin.
";

/// The Markdown table of docs/dcgm-fields.md: every known field and what it is exported as.
pub fn markdown() -> String {
    let mut out = String::from(
        "# DCGM fields\n\n\
         Generated from `crates/dcgm/src/fields.rs` by \
         `cargo run -p dgx-pixels-exporter -- docs dcgm-fields > docs/dcgm-fields.md`; a test \
         fails when this file is stale.\n\n\
         How each DCGM field that dcgm-exporter's field lists name is exported. Fields with a \
         catalog metric are converted to its base unit; the others, when a field list (`[dcgm] \
         field_list`) names them, are exported as `dgx_pixels_dcgm_<name>` in DCGM's own unit \
         with the type and help the CSV gives (`_total` added to counters). Blank values (DCGM's \
         sentinels for no data, not found, not supported, no permission) are never exported.\n\n\
         By default the `dcgm` collector watches the profiling fields; with `[dcgm] \
         device_metrics = true` (the default when the `nvml` collector is off) it also provides \
         the device metrics below instead of NVML.\n",
    );
    out.push_str(FRESHNESS);
    out.push_str(
        "\nA field list may use the names DCGM 4 gave these fields (dcgm-exporter 4.x writes \
         them): each is the same field id as the old name in the table, so the same value in \
         the same unit, exported as the table says: a name ending in `_RATIO` keeps the unit of \
         its id (`DCGM_FI_DEV_GPU_UTIL_RATIO` is field 203 in DCGM 4's own field table, \
         `dcgm_fields.py`, a percentage, converted like `DCGM_FI_DEV_GPU_UTIL`). Contested: a \
         description of DCGM 4.7 lists a ratio 0-1 of type double under a new id, 1613, which \
         this table does not read; issue 47 settles it against DCGM 4.7's own headers.\n\n\
         | DCGM 4 name | Id | Old name |\n|---|---|---|\n",
    );
    for (alias, id) in ALIASES {
        let old = by_id(*id).map_or("-", |f| f.name);
        out.push_str(&format!("| `{alias}` | {id} | `{old}` |\n"));
    }
    out.push_str("\n| Id | DCGM field | Exported as | Labels | Factor |\n|---|---|---|---|---|\n");
    for f in KNOWN_FIELDS {
        let (name, labels, scale) = match f.mapping {
            Some(m) => {
                let def = m.metric.def();
                let labels = def.labels[2..]
                    .iter()
                    .zip(m.labels)
                    .map(|(k, v)| format!("`{k}=\"{v}\"`"))
                    .collect::<Vec<_>>()
                    .join(", ");
                (format!("`{}`", def.name), labels, format!("{}", m.scale))
            }
            None if STRING_FIELDS.contains(&f.id) => (
                "not exported (a string; identity is in `dgx_pixels_gpu_info`)".to_string(),
                String::new(),
                "-".into(),
            ),
            None => (
                format!(
                    "`{}` (field list only; `_total` added for a counter)",
                    extra_name(f.name, Kind::Gauge)
                ),
                "`gpu`, `uuid`".to_string(),
                "1".into(),
            ),
        };
        let prof = if f.profiling { " (profiling)" } else { "" };
        out.push_str(&format!(
            "| {} | `{}`{prof} | {name} | {labels} | {scale} |\n",
            f.id, f.name
        ));
    }
    out
}

#[cfg(test)]
mod tests;
