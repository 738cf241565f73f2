//! The C ABI: return codes, enum values and `#[repr(C)]` structs, written from the layout facts in
//! `shared/reference/nvml.md` (x86_64; every member is `unsigned int`, `unsigned long long` or a
//! char array). The size assertions at the bottom pin each struct to the size NVML expects.

use std::ffi::{c_char, c_uint, c_ulonglong};

/// `nvmlReturn_t`.
pub type NvmlReturn = c_uint;

pub const SUCCESS: NvmlReturn = 0;
pub const ERROR_UNINITIALIZED: NvmlReturn = 1;
pub const ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
pub const ERROR_NOT_SUPPORTED: NvmlReturn = 3;
pub const ERROR_NO_PERMISSION: NvmlReturn = 4;
pub const ERROR_ALREADY_INITIALIZED: NvmlReturn = 5;
pub const ERROR_NOT_FOUND: NvmlReturn = 6;
pub const ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
pub const ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
pub const ERROR_TIMEOUT: NvmlReturn = 10;
pub const ERROR_FUNCTION_NOT_FOUND: NvmlReturn = 13;
pub const ERROR_GPU_IS_LOST: NvmlReturn = 15;
pub const ERROR_ARGUMENT_VERSION_MISMATCH: NvmlReturn = 25;
pub const ERROR_UNKNOWN: NvmlReturn = 999;

/// `nvmlDevice_t`: an opaque pointer; ours encode the GPU and MIG slot (see `state::Handle`).
pub type Device = *mut std::ffi::c_void;
/// `nvmlEventSet_t`: an opaque pointer; ours encode an id.
pub type EventSet = *mut std::ffi::c_void;

/// `nvmlEnableState_t`.
pub const FEATURE_DISABLED: c_uint = 0;
pub const FEATURE_ENABLED: c_uint = 1;

/// `nvmlTemperatureSensors_t`: the only sensor.
pub const TEMPERATURE_GPU: c_uint = 0;

/// `nvmlClockType_t`.
pub const CLOCK_GRAPHICS: c_uint = 0;
pub const CLOCK_SM: c_uint = 1;
pub const CLOCK_MEM: c_uint = 2;
pub const CLOCK_VIDEO: c_uint = 3;

/// `nvmlClockId_t`.
pub const CLOCK_ID_CURRENT: c_uint = 0;
pub const CLOCK_ID_CUSTOMER_BOOST_MAX: c_uint = 3;

/// `nvmlPcieUtilCounter_t`.
pub const PCIE_UTIL_TX: c_uint = 0;
pub const PCIE_UTIL_RX: c_uint = 1;

/// `nvmlMemoryErrorType_t`.
pub const MEMORY_ERROR_CORRECTED: c_uint = 0;
pub const MEMORY_ERROR_UNCORRECTED: c_uint = 1;

/// `nvmlEccCounterType_t`.
pub const ECC_VOLATILE: c_uint = 0;
pub const ECC_AGGREGATE: c_uint = 1;

/// `nvmlMemoryLocation_t`: device memory (DRAM), the only location the simulator counts.
pub const MEMORY_LOCATION_DEVICE_MEMORY: c_uint = 2;
/// Number of memory locations (`L1_CACHE` 0 .. `SRAM` 7).
pub const MEMORY_LOCATION_COUNT: c_uint = 8;

/// `nvmlPageRetirementCause_t`: multiple single-bit errors.
pub const PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: c_uint = 0;
/// `nvmlPageRetirementCause_t`: a double-bit error.
pub const PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: c_uint = 1;

/// `nvmlPerfPolicyType_t`.
pub const PERF_POLICY_POWER: c_uint = 0;
pub const PERF_POLICY_THERMAL: c_uint = 1;
/// Largest valid policy (`TOTAL_BASE_CLOCKS`).
pub const PERF_POLICY_MAX: c_uint = 11;

/// `nvmlNvLinkErrorCounter_t`: replay 0, recovery 1, CRC flit 2, CRC data 3, ECC data 4.
pub const NVLINK_ERROR_COUNTER_COUNT: c_uint = 5;
/// `NVML_NVLINK_MAX_LINKS`.
pub const NVLINK_MAX_LINKS: u32 = 18;

/// `nvmlEventType*`: the only event type the fake delivers.
pub const EVENT_TYPE_XID_CRITICAL_ERROR: c_ulonglong = 8;

/// `nvmlClocksEventReasons*` / `nvmlClocksThrottleReasons*` bits.
pub const REASON_GPU_IDLE: c_ulonglong = 0x1;
pub const REASON_APPLICATIONS_CLOCKS_SETTING: c_ulonglong = 0x2;
pub const REASON_SW_POWER_CAP: c_ulonglong = 0x4;
pub const REASON_HW_SLOWDOWN: c_ulonglong = 0x8;
pub const REASON_SYNC_BOOST: c_ulonglong = 0x10;
pub const REASON_SW_THERMAL_SLOWDOWN: c_ulonglong = 0x20;
pub const REASON_HW_THERMAL_SLOWDOWN: c_ulonglong = 0x40;
pub const REASON_HW_POWER_BRAKE_SLOWDOWN: c_ulonglong = 0x80;
/// Every reason above: what the simulated parts support.
pub const REASONS_SUPPORTED: c_ulonglong = REASON_GPU_IDLE
    | REASON_APPLICATIONS_CLOCKS_SETTING
    | REASON_SW_POWER_CAP
    | REASON_HW_SLOWDOWN
    | REASON_SYNC_BOOST
    | REASON_SW_THERMAL_SLOWDOWN
    | REASON_HW_THERMAL_SLOWDOWN
    | REASON_HW_POWER_BRAKE_SLOWDOWN;

/// `nvmlValueType_t`.
pub const VALUE_TYPE_UNSIGNED_INT: c_uint = 1;
pub const VALUE_TYPE_UNSIGNED_LONG_LONG: c_uint = 3;

/// `NVML_STRUCT_VERSION(Memory, 2)`: `sizeof(nvmlMemory_v2_t) | 2 << 24`.
pub const MEMORY_V2_VERSION: c_uint = 0x0200_0028;

/// `nvmlGpuFabricInfo_v2`: `sizeof(nvmlGpuFabricInfo_v2_t) | 2 << 24` (nvidia-ml-py: 33554468).
pub const GPU_FABRIC_INFO_V2_VERSION: c_uint = 0x0200_0024;
/// `nvmlGpuFabricInfo_v3`: `sizeof(nvmlGpuFabricInfo_v3_t) | 3 << 24` (nvidia-ml-py: 50331688).
pub const GPU_FABRIC_INFO_V3_VERSION: c_uint = 0x0300_0028;
/// `NVML_GPU_FABRIC_STATE_NOT_SUPPORTED`.
pub const GPU_FABRIC_STATE_NOT_SUPPORTED: u8 = 0;
/// `NVML_GPU_FABRIC_HEALTH_SUMMARY_*`.
pub const GPU_FABRIC_HEALTH_SUMMARY_HEALTHY: u8 = 1;
pub const GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY: u8 = 2;
pub const GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY: u8 = 3;

/// `nvmlGpuFabricInfo_v3_t` (`nvmlGpuFabricInfoV_t`); a v2 caller's struct is its first 36
/// bytes (no `health_summary`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct GpuFabricInfoV3 {
    pub version: c_uint,
    pub cluster_uuid: [u8; 16],
    pub status: NvmlReturn,
    pub clique_id: c_uint,
    pub state: u8,
    pub health_mask: c_uint,
    pub health_summary: u8,
}

/// `nvmlPlatformInfo_v2`: `sizeof(nvmlPlatformInfo_v2_t) | 2 << 24` (nvidia-ml-py: 0x0200002c).
pub const PLATFORM_INFO_V2_VERSION: c_uint = 0x0200_002c;

/// `nvmlPlatformInfo_v2_t`: 44 bytes (v1 is as large, with other fields: a rack GUID where v2
/// has the chassis serial number).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PlatformInfoV2 {
    pub version: c_uint,
    pub ib_guid: [u8; 16],
    pub chassis_serial_number: [u8; 16],
    pub slot_number: u8,
    pub tray_index: u8,
    pub host_id: u8,
    pub peer_type: u8,
    pub module_id: u8,
}

/// `gpuInstanceId` / `computeInstanceId` when not applicable.
pub const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryV2 {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlUtilization_t` (percent).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Utilization {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlBAR1Memory_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Bar1Memory {
    pub bar1_total: c_ulonglong,
    pub bar1_free: c_ulonglong,
    pub bar1_used: c_ulonglong,
}

/// `nvmlPciInfo_t` (the `_v3` layout).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PciInfo {
    pub bus_id_legacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub bus_id: [c_char; 32],
}

/// `nvmlProcessInfo_t` (= `nvmlProcessInfo_v2_t`), used by the `_v2` and `_v3` process queries.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessInfo {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// The value union of `nvmlFieldValue_t` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub union Value {
    pub d_val: f64,
    pub si_val: i32,
    pub ui_val: c_uint,
    pub ul_val: std::ffi::c_ulong,
    pub ull_val: c_ulonglong,
    pub sll_val: i64,
    pub us_val: u16,
}

/// `nvmlFieldValue_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FieldValue {
    pub field_id: c_uint,
    pub scope_id: c_uint,
    pub timestamp: i64,
    pub latency_usec: i64,
    pub value_type: c_uint,
    pub nvml_return: NvmlReturn,
    pub value: Value,
}

/// `nvmlEventData_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EventData {
    pub device: Device,
    pub event_type: c_ulonglong,
    pub event_data: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// `nvmlProcessUtilizationSample_t` (percent).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessUtilizationSample {
    pub pid: c_uint,
    pub time_stamp: c_ulonglong,
    pub sm_util: c_uint,
    pub mem_util: c_uint,
    pub enc_util: c_uint,
    pub dec_util: c_uint,
}

/// `nvmlViolationTime_t`: reference time in microseconds, violation time in nanoseconds.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ViolationTime {
    pub reference_time: c_ulonglong,
    pub violation_time: c_ulonglong,
}

/// `nvmlAccountingStats_t` (declared for completeness of the accounting symbols' signature).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AccountingStats {
    pub gpu_utilization: c_uint,
    pub memory_utilization: c_uint,
    pub max_memory_usage: c_ulonglong,
    pub time: c_ulonglong,
    pub start_time: c_ulonglong,
    pub is_running: c_uint,
    pub reserved: [c_uint; 5],
}

#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::size_of;
    assert!(size_of::<Memory>() == 24);
    assert!(size_of::<MemoryV2>() == 40);
    assert!(size_of::<MemoryV2>() as c_uint | (2 << 24) == MEMORY_V2_VERSION);
    assert!(size_of::<Utilization>() == 8);
    assert!(size_of::<Bar1Memory>() == 24);
    assert!(size_of::<PciInfo>() == 68);
    assert!(size_of::<ProcessInfo>() == 24);
    assert!(size_of::<FieldValue>() == 40);
    assert!(size_of::<EventData>() == 32);
    assert!(size_of::<ProcessUtilizationSample>() == 32);
    assert!(size_of::<ViolationTime>() == 16);
    assert!(size_of::<AccountingStats>() == 56);
    assert!(size_of::<GpuFabricInfoV3>() == 40);
    assert!(size_of::<PlatformInfoV2>() == 44);
    assert!(size_of::<PlatformInfoV2>() as c_uint | (2 << 24) == PLATFORM_INFO_V2_VERSION);
    assert!(std::mem::offset_of!(PlatformInfoV2, chassis_serial_number) == 20);
    assert!(std::mem::offset_of!(PlatformInfoV2, module_id) == 40);
    assert!(size_of::<GpuFabricInfoV3>() as c_uint | (3 << 24) == GPU_FABRIC_INFO_V3_VERSION);
    assert!(std::mem::offset_of!(GpuFabricInfoV3, health_mask) == 32);
    assert!(
        (std::mem::offset_of!(GpuFabricInfoV3, health_mask) + 4) as c_uint | (2 << 24)
            == GPU_FABRIC_INFO_V2_VERSION
    );
};
