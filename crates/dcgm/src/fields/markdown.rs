//! docs/dcgm-fields.md, generated from the field table: the prose says how fields are read,
//! the tables say what each name and id is exported as.

use dgx_pixels_metrics::Kind;

use super::{by_id, extra_name, KnownField, ALIASES, KNOWN_FIELDS, STRING_FIELDS};

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

/// Other names (docs/dcgm-fields.md), before the alias table.
const OTHER_NAMES: &str = "
## Other names of the same fields

A field list may use the names DCGM 4 gave these fields (dcgm-exporter 4.x writes them): each
is the same field id as the name in the table, so the same value in the same unit, exported as
the table says. A name ending in `_RATIO` keeps the unit of its id: `DCGM_FI_DEV_GPU_UTIL_RATIO`
is field 203 in DCGM 4.6.0's `dcgm_fields.h` and in go-dcgm v1.4611.0's copy of DCGM 4.6.1's, an
integer percentage, converted like `DCGM_FI_DEV_GPU_UTIL` (see the open question below).

dcgm-exporter 4.10.0 (shipped with DCGM 4.8.0) names the PCIe and NVLink profiling rates
`DCGM_FI_PROF_{PCIE,NVLINK}_{TX,RX}_BYTES_PER_SECOND`; its release notes say all four still use
bytes per second and that the old names still work. They are read as fields 1009-1012, the old
names' ids; no DCGM 4.8 header was available to confirm that the ids did not change.

| Other name | Id | Name in the table |
|---|---|---|
";

/// Base-unit fields and the open questions (docs/dcgm-fields.md), after the alias table.
const BASE_UNITS: &str = "
## Base-unit fields (1600-1612)

DCGM 4.6.1 (go-dcgm v1.4611.0's copy of `dcgm_fields.h`; not in DCGM 4.6.0) added fields
1600-1612: each is the quantity of a legacy field in a base unit (bytes, hertz, joules, a 0-1
ratio) under a new id, and the legacy field stays, under its own id, in its own unit. A field
list may name either; both are exported under the same metric, converted from their own unit
(the Factor column). When a list names a base-unit field and the legacy field it replaces, the
base-unit field is watched and the legacy line is skipped with a note naming both lines, so no
series is served twice. The default watch lists use the legacy ids, which every DCGM version
has; a list naming a base-unit field needs DCGM 4.6.1 or later. dcgm-exporter 4.9.0's release
notes (it ships with DCGM 4.7.0) say its default list moved to DCGM 4.7's names, eleven of them
in base units.

## Open questions

- `DCGM_FI_DEV_GPU_UTIL_RATIO` in DCGM 4.7. DCGM 4.6.0's `dcgm_fields.h` and go-dcgm
  v1.4611.0's (DCGM 4.6.1) define it as 203, and DCGM 4.6.0's `dcgm_fields.cpp` registers 203
  as an integer percentage. dcgm-exporter 4.9.0's release notes (for DCGM 4.7) say its
  utilization fields change from a percentage to a 0-1 ratio, and a third-party description
  of DCGM 4.7.0 gives `DCGM_FI_DEV_GPU_UTIL_RATIO` a new id, 1613, a double from 0 to 1, with
  203 kept as a percentage. No NVIDIA header of DCGM 4.7 or later was available, so this
  table has no field 1613 (nor the other ids above 1612 that description lists): the name
  reads field 203 and converts it from a percentage, right for as long as 203 stays one.
- dcgm-exporter's own field lists after tag 4.5.3-4.8.2 (4.6.0-4.8.3, 4.8.4, 4.9.0, 4.10.0)
  could not be read, so they are not in the import test of its shipped lists
  (`crates/dcgm/tests/dcgm_exporter_lists.rs`, which reads every version of
  `default-counters.csv` and `dcp-metrics-included.csv` from tag 3.3.7-3.5.0 to 4.5.3-4.8.2).
";

/// The Markdown of docs/dcgm-fields.md: how fields are read, every other name, every known
/// field and what it is exported as.
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
    out.push_str(OTHER_NAMES);
    for (alias, id) in ALIASES {
        let old = by_id(*id).map_or("-", |f| f.name);
        out.push_str(&format!("| `{alias}` | {id} | `{old}` |\n"));
    }
    out.push_str(BASE_UNITS);
    out.push_str("\n## Every field\n\n| Id | DCGM field | Exported as | Labels | Factor |\n|---|---|---|---|---|\n");
    for f in KNOWN_FIELDS {
        out.push_str(&row(f));
    }
    out
}

/// One field's row of the table.
fn row(f: &KnownField) -> String {
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
    let note = match (f.profiling, f.replaces) {
        (true, _) => " (profiling)".to_string(),
        (false, Some(legacy)) => format!(" (base unit, DCGM 4.6.1+; replaces {legacy})"),
        (false, None) => String::new(),
    };
    format!(
        "| {} | `{}`{note} | {name} | {labels} | {scale} |\n",
        f.id, f.name
    )
}
