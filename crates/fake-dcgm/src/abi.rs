//! The DCGM ABI as the fake states it: handle and scalar types, the structs it reads and writes,
//! their sizes, offsets and versions, return codes, entity groups, blank sentinels and field ids.
//!
//! Why the fake has its own: the exporter talks to DCGM through `dcgm-sys`, whose header
//! (`crates/dcgm-sys/include/dcgm_subset.h`) we wrote. A fake built on that same header would
//! agree with any mistake in it, and every test would pass against a layout the real library
//! does not have. So nothing here is derived from `dcgm-sys`: every number is a literal taken
//! from NVIDIA's DCGM 4.x headers (`dcgm_structs.h`, `dcgm_fields.h`, `dcgm_agent.h`, 4.6.0;
//! identical in 3.3.9), as the project's DCGM reference notes record them, and the structs are
//! written out field by field from those notes. The compile-time assertions at the bottom pin
//! these structs to the documented sizes and offsets.
//!
//! Where the two statements meet:
//! - at run time, the fake checks the `version` of every struct the exporter hands it against
//!   the literal versions below (which encode the size), answering `DCGM_ST_VER_MISMATCH` to a
//!   struct of another size, and reads and writes memory with these layouts;
//! - `tests/abi_facts.rs` compares every fact here with `dcgm-sys` (sizes, offsets, versions,
//!   codes, constants) and every field id with the exporter's field table, one by one, so a
//!   mistake on either side fails a test that names it.
#![allow(non_snake_case, missing_docs)]

use std::ffi::{c_char, c_int, c_uint};
use std::mem::{offset_of, size_of};

/// `dcgmReturn_t`.
pub type Return = c_int;
/// `dcgmHandle_t` (`uintptr_t`).
pub type Handle = usize;
/// `dcgmGpuGrp_t` (`uintptr_t`).
pub type GpuGroup = usize;
/// `dcgmFieldGrp_t` (`uintptr_t`).
pub type FieldGroup = usize;
/// `dcgm_field_entity_group_t`, `dcgm_field_eid_t`, `dcgmGroupType_t`, `dcgmOperationMode_t`.
pub type Uint = c_uint;

/// Return codes (`dcgmReturn_t`).
pub mod code {
    use super::Return;
    pub const OK: Return = 0;
    pub const BADPARAM: Return = -1;
    pub const GENERIC_ERROR: Return = -3;
    pub const NOT_SUPPORTED: Return = -6;
    pub const UNINITIALIZED: Return = -10;
    pub const VER_MISMATCH: Return = -12;
    pub const NO_DATA: Return = -14;
    pub const STALE_DATA: Return = -15;
    pub const NOT_WATCHED: Return = -16;
    pub const CONNECTION_NOT_VALID: Return = -21;
    pub const REQUIRES_ROOT: Return = -29;
    pub const INSUFFICIENT_SIZE: Return = -31;
    pub const MODULE_NOT_LOADED: Return = -33;
    pub const PROFILING_NOT_SUPPORTED: Return = -36;
}

/// Entity groups (`dcgm_field_entity_group_t`).
pub mod entity {
    use super::Uint;
    pub const NONE: Uint = 0;
    pub const GPU: Uint = 1;
    pub const VGPU: Uint = 2;
    pub const SWITCH: Uint = 3;
    pub const GPU_I: Uint = 4;
    pub const GPU_CI: Uint = 5;
    pub const LINK: Uint = 6;
    pub const CPU: Uint = 7;
    pub const CPU_CORE: Uint = 8;
    pub const CONNECTX: Uint = 9;
}

pub const OPERATION_MODE_AUTO: Uint = 1;
pub const OPERATION_MODE_MANUAL: Uint = 2;
pub const GROUP_DEFAULT: Uint = 0;
pub const GROUP_EMPTY: Uint = 1;
pub const GROUP_ALL_GPUS: Uint = 0x7fff_ffff;
pub const GEGE_FLAG_ONLY_SUPPORTED: Uint = 1;
pub const FV_FLAG_LIVE_DATA: Uint = 1;
pub const MAX_NUM_DEVICES: usize = 32;
pub const MAX_FIELD_IDS_PER_FIELD_GROUP: usize = 128;
pub const MAX_STR_LENGTH: usize = 256;
pub const MAX_BLOB_LENGTH: usize = 4096;
pub const PROF_MAX_NUM_GROUPS_V2: usize = 10;
pub const PROF_MAX_FIELD_IDS_PER_GROUP_V2: usize = 64;

/// Field types (`fieldType`).
pub mod field_type {
    pub const DOUBLE: u8 = b'd';
    pub const INT64: u8 = b'i';
    pub const STRING: u8 = b's';
    pub const BINARY: u8 = b'b';
    pub const TIMESTAMP: u8 = b't';
}

/// Blank sentinels; +1 not found, +2 not supported, +3 not permissioned.
pub const INT32_BLANK: i32 = 0x7fff_fff0;
pub const INT64_BLANK: i64 = 0x7fff_ffff_ffff_fff0;
pub const FP64_BLANK: f64 = 140_737_488_355_328.0;
pub const STR_BLANK: &str = "<<<NULL>>>";

/// `MAKE_DCGM_VERSION(T, v)` for the structs below: the size in the low 24 bits, the version
/// in the top byte, written out.
pub const FIELD_VALUE_V1_SIZE: usize = 4120;
pub const FIELD_VALUE_VERSION1: u32 = 0x0100_1018;
pub const FIELD_VALUE_V2_SIZE: usize = 4128;
pub const FIELD_VALUE_VERSION2: u32 = 0x0200_1020;
pub const GROUP_ENTITY_PAIR_SIZE: usize = 8;
pub const CONNECT_V2_PARAMS_V2_SIZE: usize = 16;
pub const CONNECT_V2_PARAMS_VERSION2: u32 = 0x0200_0010;
pub const PROF_GET_METRIC_GROUPS_V3_SIZE: usize = 1376;
pub const PROF_GET_METRIC_GROUPS_VERSION3: u32 = 0x0300_0560;

/// `dcgmFieldValue_v1`'s documented offsets: `ts` at 16, `value` at 24.
pub const FIELD_VALUE_V1_TS_OFFSET: usize = 16;
pub const FIELD_VALUE_V1_VALUE_OFFSET: usize = 24;

/// The value union of `dcgmFieldValue_v1`/`_v2`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union FieldValueUnion {
    pub i64_: i64,
    pub dbl: f64,
    pub str_: [c_char; MAX_STR_LENGTH],
    pub blob: [c_char; MAX_BLOB_LENGTH],
}

/// `dcgmFieldValue_v2`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FieldValueV2 {
    pub version: u32,
    pub entityGroupId: Uint,
    pub entityId: Uint,
    pub fieldId: u16,
    pub fieldType: u16,
    pub status: c_int,
    pub unused: u32,
    pub ts: i64,
    pub value: FieldValueUnion,
}

/// `dcgmGroupEntityPair_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GroupEntityPair {
    pub entityGroupId: Uint,
    pub entityId: Uint,
}

/// `dcgmConnectV2Params_v2` (= `dcgmConnectV2Params_t`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ConnectV2Params {
    pub version: u32,
    pub persistAfterDisconnect: u32,
    pub timeoutMs: u32,
    pub addressIsUnixSocket: u32,
}

/// `dcgmProfMetricGroupInfo_v2`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ProfMetricGroupInfo {
    pub majorId: u16,
    pub minorId: u16,
    pub numFieldIds: u32,
    pub fieldIds: [u16; PROF_MAX_FIELD_IDS_PER_GROUP_V2],
}

/// `dcgmProfGetMetricGroups_v3` (= `dcgmProfGetMetricGroups_t`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ProfGetMetricGroups {
    pub version: u32,
    pub unused: u32,
    pub gpuId: u32,
    pub numMetricGroups: u32,
    pub metricGroups: [ProfMetricGroupInfo; PROF_MAX_NUM_GROUPS_V2],
}

/// Offsets in `dcgmFieldValue_v2`, as documented: `(field, offset)`.
pub const FIELD_VALUE_V2_OFFSETS: [(&str, usize); 9] = [
    ("version", 0),
    ("entityGroupId", 4),
    ("entityId", 8),
    ("fieldId", 12),
    ("fieldType", 14),
    ("status", 16),
    ("unused", 20),
    ("ts", 24),
    ("value", 32),
];

// Our structs have the documented layout (a typo above fails the build, not a test).
const _: () = {
    assert!(size_of::<FieldValueV2>() == FIELD_VALUE_V2_SIZE);
    assert!(offset_of!(FieldValueV2, entityGroupId) == 4);
    assert!(offset_of!(FieldValueV2, entityId) == 8);
    assert!(offset_of!(FieldValueV2, fieldId) == 12);
    assert!(offset_of!(FieldValueV2, fieldType) == 14);
    assert!(offset_of!(FieldValueV2, status) == 16);
    assert!(offset_of!(FieldValueV2, unused) == 20);
    assert!(offset_of!(FieldValueV2, ts) == 24);
    assert!(offset_of!(FieldValueV2, value) == 32);
    assert!(size_of::<FieldValueUnion>() == MAX_BLOB_LENGTH);
    assert!(size_of::<GroupEntityPair>() == GROUP_ENTITY_PAIR_SIZE);
    assert!(size_of::<ConnectV2Params>() == CONNECT_V2_PARAMS_V2_SIZE);
    assert!(size_of::<ProfMetricGroupInfo>() == 136);
    assert!(size_of::<ProfGetMetricGroups>() == PROF_GET_METRIC_GROUPS_V3_SIZE);
    assert!(offset_of!(ProfGetMetricGroups, metricGroups) == 16);
    // The versions encode the sizes: MAKE_DCGM_VERSION(T, v) = sizeof(T) | v << 24.
    assert!(FIELD_VALUE_VERSION1 == (FIELD_VALUE_V1_SIZE as u32 | 1 << 24));
    assert!(FIELD_VALUE_VERSION2 == (FIELD_VALUE_V2_SIZE as u32 | 2 << 24));
    assert!(CONNECT_V2_PARAMS_VERSION2 == (CONNECT_V2_PARAMS_V2_SIZE as u32 | 2 << 24));
    assert!(PROF_GET_METRIC_GROUPS_VERSION3 == (PROF_GET_METRIC_GROUPS_V3_SIZE as u32 | 3 << 24));
};

macro_rules! field_ids {
    ($($name:ident = $id:literal $upstream:literal,)*) => {
        /// Field ids the fake serves (`DCGM_FI_*`), as numbers.
        pub mod field {
            $(pub const $name: u16 = $id;)*
        }
        /// `(id, upstream macro name)` of every field in [`field`], for comparison with the
        /// exporter's field table.
        pub const FIELD_NAMES: &[(u16, &str)] = &[$(($id, $upstream),)*];
    };
}

field_ids! {
    DRIVER_VERSION = 1 "DCGM_FI_DRIVER_VERSION",
    NAME = 50 "DCGM_FI_DEV_NAME",
    UUID = 54 "DCGM_FI_DEV_UUID",
    PCI_BUSID = 57 "DCGM_FI_DEV_PCI_BUSID",
    SM_CLOCK = 100 "DCGM_FI_DEV_SM_CLOCK",
    MEM_CLOCK = 101 "DCGM_FI_DEV_MEM_CLOCK",
    MEMORY_TEMP = 140 "DCGM_FI_DEV_MEMORY_TEMP",
    GPU_TEMP = 150 "DCGM_FI_DEV_GPU_TEMP",
    POWER_USAGE = 155 "DCGM_FI_DEV_POWER_USAGE",
    TOTAL_ENERGY = 156 "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    POWER_USAGE_INSTANT = 157 "DCGM_FI_DEV_POWER_USAGE_INSTANT",
    PSTATE = 190 "DCGM_FI_DEV_PSTATE",
    FAN_SPEED = 191 "DCGM_FI_DEV_FAN_SPEED",
    GPU_UTIL = 203 "DCGM_FI_DEV_GPU_UTIL",
    MEM_COPY_UTIL = 204 "DCGM_FI_DEV_MEM_COPY_UTIL",
    ENC_UTIL = 206 "DCGM_FI_DEV_ENC_UTIL",
    DEC_UTIL = 207 "DCGM_FI_DEV_DEC_UTIL",
    POWER_VIOLATION = 240 "DCGM_FI_DEV_POWER_VIOLATION",
    THERMAL_VIOLATION = 241 "DCGM_FI_DEV_THERMAL_VIOLATION",
    FB_TOTAL = 250 "DCGM_FI_DEV_FB_TOTAL",
    FB_FREE = 251 "DCGM_FI_DEV_FB_FREE",
    FB_USED = 252 "DCGM_FI_DEV_FB_USED",
    FB_RESERVED = 253 "DCGM_FI_DEV_FB_RESERVED",
    ECC_SBE_VOL = 310 "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    ECC_DBE_VOL = 311 "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    ECC_SBE_AGG = 312 "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    ECC_DBE_AGG = 313 "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    ROW_REMAP_UNCORRECTABLE = 393 "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    ROW_REMAP_CORRECTABLE = 394 "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    ROW_REMAP_FAILURE = 395 "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    ROW_REMAP_PENDING = 396 "DCGM_FI_DEV_ROW_REMAP_PENDING",
    PROF_GR_ENGINE_ACTIVE = 1001 "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    PROF_SM_ACTIVE = 1002 "DCGM_FI_PROF_SM_ACTIVE",
    PROF_SM_OCCUPANCY = 1003 "DCGM_FI_PROF_SM_OCCUPANCY",
    PROF_PIPE_TENSOR_ACTIVE = 1004 "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    PROF_DRAM_ACTIVE = 1005 "DCGM_FI_PROF_DRAM_ACTIVE",
    PROF_PIPE_FP64_ACTIVE = 1006 "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
    PROF_PIPE_FP32_ACTIVE = 1007 "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    PROF_PIPE_FP16_ACTIVE = 1008 "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
    PROF_PCIE_TX_BYTES = 1009 "DCGM_FI_PROF_PCIE_TX_BYTES",
    PROF_PCIE_RX_BYTES = 1010 "DCGM_FI_PROF_PCIE_RX_BYTES",
    PROF_NVLINK_TX_BYTES = 1011 "DCGM_FI_PROF_NVLINK_TX_BYTES",
    PROF_NVLINK_RX_BYTES = 1012 "DCGM_FI_PROF_NVLINK_RX_BYTES",
    // Base-unit fields: go-dcgm tag v1.4611.0, pkg/dcgm/dcgm_fields.h (DCGM 4.6.1). The
    // application clocks (1606, 1607) are left out: the simulator has none.
    BAR1_CAPACITY_BYTES = 1600 "DCGM_FI_DEV_BAR1_CAPACITY_BYTES",
    BAR1_USED_BYTES = 1601 "DCGM_FI_DEV_BAR1_USED_BYTES",
    BAR1_FREE_BYTES = 1602 "DCGM_FI_DEV_BAR1_FREE_BYTES",
    SM_CLOCK_HERTZ = 1603 "DCGM_FI_DEV_SM_CLOCK_HERTZ",
    MEMORY_CLOCK_HERTZ = 1604 "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ",
    VIDEO_CLOCK_HERTZ = 1605 "DCGM_FI_DEV_VIDEO_CLOCK_HERTZ",
    SM_MAX_CLOCK_HERTZ = 1608 "DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ",
    MEMORY_MAX_CLOCK_HERTZ = 1609 "DCGM_FI_DEV_MEMORY_MAX_CLOCK_HERTZ",
    VIDEO_MAX_CLOCK_HERTZ = 1610 "DCGM_FI_DEV_VIDEO_MAX_CLOCK_HERTZ",
    GPU_ENERGY_JOULES_TOTAL = 1611 "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
    FAN_SPEED_RATIO = 1612 "DCGM_FI_DEV_FAN_SPEED_RATIO",
}
