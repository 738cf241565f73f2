//! dcgm-exporter's shipped field lists (`etc/default-counters.csv` and
//! `etc/dcp-metrics-included.csv`, every version of both from tag 3.3.7-3.5.0 to 4.5.3-4.8.2;
//! tests/data/dcgm-exporter/README.md says where they come from) read as they are: every
//! active line is watched as the field id NVIDIA's headers give its name, and the only lines
//! skipped are the `label` rows, which this exporter serves as `dgx_pixels_gpu_info` labels.
#![allow(clippy::unwrap_used)]

use dgx_pixels_dcgm::fields::{parse_field_list, Target};

/// The tags whose two lists are in tests/data/dcgm-exporter/, one per distinct pair of files.
const TAGS: [&str; 5] = [
    "3.3.9-3.6.1",
    "4.2.3-4.2.0",
    "4.4.1-4.5.2",
    "4.4.2-4.7.0",
    "4.5.3-4.8.2",
];

/// Every name the lists' active rows use and its id, written out from NVIDIA/DCGM tags v3.3.9
/// and v4.6.0, `dcgmlib/dcgm_fields.h` (in 4.6.0 most are the deprecated spelling of a renamed
/// field, same id), not from the exporter's tables.
const IDS: [(&str, u16); 26] = [
    ("DCGM_FI_DRIVER_VERSION", 1),
    ("DCGM_FI_DEV_SM_CLOCK", 100),
    ("DCGM_FI_DEV_MEM_CLOCK", 101),
    ("DCGM_FI_DEV_MEMORY_TEMP", 140),
    ("DCGM_FI_DEV_GPU_TEMP", 150),
    ("DCGM_FI_DEV_POWER_USAGE", 155),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 156),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 202),
    ("DCGM_FI_DEV_GPU_UTIL", 203),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", 204),
    ("DCGM_FI_DEV_ENC_UTIL", 206),
    ("DCGM_FI_DEV_DEC_UTIL", 207),
    ("DCGM_FI_DEV_XID_ERRORS", 230),
    ("DCGM_FI_DEV_FB_FREE", 251),
    ("DCGM_FI_DEV_FB_USED", 252),
    ("DCGM_FI_DEV_FB_RESERVED", 253),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 393),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 394),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 395),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 449),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", 526),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1001),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1004),
    ("DCGM_FI_PROF_DRAM_ACTIVE", 1005),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", 1009),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", 1010),
];

/// Fields of these lists without a catalog metric: exported as `dgx_pixels_dcgm_*` families
/// with the list's type and help (replays, last XID, NVLink total, vGPU licence).
const FAMILIES: [u16; 4] = [202, 230, 449, 526];

/// An active row: (1-based line, name, type), split the way dcgm-exporter reads it (a line
/// starting with `#` is a comment; fields trimmed of spaces).
fn active_rows(text: &str) -> Vec<(usize, &str, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|(i, l)| {
            let mut cols = l.split(',').map(str::trim);
            (i + 1, cols.next().unwrap(), cols.next().unwrap())
        })
        .collect()
}

#[test]
fn every_shipped_list_reads_whole() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/dcgm-exporter");
    let mut lists = 0;
    for tag in TAGS {
        for file in ["default-counters.csv", "dcp-metrics-included.csv"] {
            let path = format!("{dir}/{tag}/{file}");
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let rows = active_rows(&text);
            assert!(rows.len() >= 20, "{path}: {} active rows", rows.len());
            let mut want_ids = Vec::new();
            let mut want_skipped = Vec::new();
            for (line, name, kind) in rows {
                let id = IDS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .unwrap_or_else(|| panic!("{path}:{line}: {name} is not in IDS"))
                    .1;
                if kind == "label" {
                    want_skipped.push(format!(
                        "{path}:{line}: {name} is a label row; labels come from gpu_info here"
                    ));
                } else {
                    assert!(!want_ids.contains(&id), "{path}:{line}: {name} twice");
                    want_ids.push(id);
                }
            }
            let list = parse_field_list(&text, &path).unwrap();
            let ids: Vec<u16> = list.fields.iter().map(|f| f.id).collect();
            assert_eq!(ids, want_ids, "{path}");
            assert_eq!(list.skipped, want_skipped, "{path}");
            for f in &list.fields {
                let family = matches!(f.target, Target::Extra(_));
                assert_eq!(family, FAMILIES.contains(&f.id), "{path}: {}", f.name);
                assert_eq!(
                    f.profiling,
                    (1001..=1012).contains(&f.id),
                    "{path}: {}",
                    f.name
                );
            }
            lists += 1;
        }
    }
    assert_eq!(lists, 10);
}
