//! The other names of known fields: DCGM 4's renames of the same ids, and dcgm-exporter
//! 4.10.0's names of the PCIe and NVLink profiling rates.
//!
//! DCGM 4 renames: NVIDIA/DCGM tag v4.6.0, `dcgmlib/dcgm_fields.h` (the `DCGM_DEPRECATED` block
//! that defines each old name as the new one), and go-dcgm tag v1.4611.0,
//! `pkg/dcgm/dcgm_fields.h` (DCGM 4.6.1). `DCGM_FI_DEV_GPU_UTIL_RATIO` is 203 in both (and
//! DCGM v4.6.0's `dcgmlib/src/dcgm_fields.cpp` still registers 203 as an integer percentage):
//! the id 1613 a third-party description of DCGM 4.7 gives it is in no NVIDIA header we could
//! read, so it is not here (docs/dcgm-fields.md, "Open questions").

use dcgm_sys::fields as f;

/// The names DCGM 4 gave fields of the table (its `dcgm_fields` keeps the old ones as aliases),
/// as a field list written for DCGM 4 names them: the same ids, so the same values in the same
/// units, exported under the same names as the old spelling. Then the names dcgm-exporter
/// 4.10.0 gives the four PCIe and NVLink profiling rates.
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
    // dcgm-exporter 4.10.0 (which ships DCGM 4.8.0) renamed these four in its collectors:
    // "All four still use bytes per second, and custom collectors can still use the old
    // names" (release notes, github.com/NVIDIA/dcgm-exporter/releases/tag/4.10.0). Read as
    // the same ids 1009-1012: no DCGM 4.8 header (or go-dcgm v1.4801) was available to
    // confirm that DCGM 4.8 did not give them new ids; the release notes say the unit stays.
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND",
        f::DCGM_FI_PROF_PCIE_TX_BYTES,
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND",
        f::DCGM_FI_PROF_PCIE_RX_BYTES,
    ),
    (
        "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND",
        f::DCGM_FI_PROF_NVLINK_TX_BYTES,
    ),
    (
        "DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND",
        f::DCGM_FI_PROF_NVLINK_RX_BYTES,
    ),
];
