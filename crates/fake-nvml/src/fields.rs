//! `nvmlDeviceGetFieldValues`: each entry gets its own return code; unknown ids answer
//! `NOT_SUPPORTED`. Ids are those of drivers before 580.82 (the scenarios' drivers); the ones
//! served here are all below 251, which the 580.82 renumbering does not touch.

use std::ffi::c_int;

use dgx_pixels_sim::labels::NvlinkErrorType;
use dgx_pixels_sim::{GpuReadout, GpuStatic};

use crate::config::Nvlink5Scope;
use crate::device::{celsius, ecc_count, millijoules, milliwatts, nvlink_links, whole};
use crate::state::{self, device_call, nvml_fn, Access};
use crate::types::*;

pub const FI_DEV_ECC_CURRENT: u32 = 1;
pub const FI_DEV_ECC_PENDING: u32 = 2;
pub const FI_DEV_ECC_SBE_VOL_TOTAL: u32 = 3;
pub const FI_DEV_ECC_DBE_VOL_TOTAL: u32 = 4;
pub const FI_DEV_ECC_SBE_AGG_TOTAL: u32 = 5;
pub const FI_DEV_ECC_DBE_AGG_TOTAL: u32 = 6;
pub const FI_DEV_RETIRED_SBE: u32 = 29;
pub const FI_DEV_RETIRED_DBE: u32 = 30;
pub const FI_DEV_RETIRED_PENDING: u32 = 31;
pub const FI_DEV_MEMORY_TEMP: u32 = 82;
pub const FI_DEV_TOTAL_ENERGY_CONSUMPTION: u32 = 83;
pub const FI_DEV_PCIE_REPLAY_COUNTER: u32 = 94;
pub const FI_DEV_NVLINK_THROUGHPUT_DATA_TX: u32 = 138;
pub const FI_DEV_NVLINK_THROUGHPUT_DATA_RX: u32 = 139;
pub const FI_DEV_REMAPPED_COR: u32 = 142;
pub const FI_DEV_REMAPPED_UNC: u32 = 143;
pub const FI_DEV_REMAPPED_PENDING: u32 = 144;
pub const FI_DEV_REMAPPED_FAILURE: u32 = 145;
pub const FI_DEV_POWER_INSTANT: u32 = 186;
pub const FI_DEV_GET_GPU_RECOVERY_ACTION: u32 = 230;
/// `NVML_FI_DEV_NVLINK_COUNT_*` error counters (NVLink 5, Blackwell), per link (`scopeId` the
/// link), with the type each one is in the simulator.
pub const FI_DEV_NVLINK_COUNT_ERRORS: [(u32, NvlinkErrorType); 6] = [
    (208, NvlinkErrorType::Receive),
    (211, NvlinkErrorType::LinkIntegrity),
    (212, NvlinkErrorType::TransmitDiscard),
    (214, NvlinkErrorType::RecoveryFailed),
    (219, NvlinkErrorType::Effective),
    (221, NvlinkErrorType::Symbol),
];

/// `scopeId` for "all links" in the NVLink fields.
pub const SCOPE_ALL_LINKS: u32 = u32::MAX;

/// One field's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Answer {
    Uint(u32),
    Ulonglong(u64),
    Error(NvmlReturn),
}

/// NVLink bytes in KiB for `scope`: the total is split evenly over the active links.
fn nvlink_kib(gpu: &GpuStatic, total_bytes: Option<f64>, scope: u32) -> Answer {
    let links = nvlink_links(gpu);
    let Some(total_bytes) = total_bytes.filter(|_| links > 0).map(whole) else {
        return Answer::Error(ERROR_NOT_SUPPORTED);
    };
    if scope == SCOPE_ALL_LINKS {
        return Answer::Ulonglong(total_bytes / 1024);
    }
    if scope >= links {
        return Answer::Error(ERROR_INVALID_ARGUMENT);
    }
    Answer::Ulonglong(total_bytes / u64::from(links) / 1024)
}

/// An NVLink 5 error counter of link `scope`, or of every link (`SCOPE_ALL_LINKS`, their sum):
/// `NOT_SUPPORTED` on parts without them (before Blackwell) and in a scope the driver refuses
/// (`FAKE_NVML_NVLINK5_SCOPE`), `INVALID_ARGUMENT` for a link the GPU does not have.
fn nvlink_count(
    gpu: &GpuStatic,
    r: &GpuReadout,
    kind: NvlinkErrorType,
    scope: u32,
    scopes: Nvlink5Scope,
) -> Answer {
    if !gpu.nvlink_error_types().contains(&kind) || !scopes.answers(scope) {
        return Answer::Error(ERROR_NOT_SUPPORTED);
    }
    if scope == SCOPE_ALL_LINKS {
        let mut counts = r
            .nvlinks
            .iter()
            .filter_map(|l| l.errors.get(kind))
            .peekable();
        if counts.peek().is_none() {
            return Answer::Error(ERROR_NOT_SUPPORTED);
        }
        return Answer::Ulonglong(counts.map(whole).sum());
    }
    match r.nvlinks.iter().find(|l| l.link == scope) {
        Some(l) => l
            .errors
            .get(kind)
            .map_or(Answer::Error(ERROR_NOT_SUPPORTED), |v| {
                Answer::Ulonglong(whole(v))
            }),
        None => Answer::Error(ERROR_INVALID_ARGUMENT),
    }
}

/// The answer for field `id` with `scope` from a GPU's static facts and reading, its
/// instantaneous power where it answers that field, and the NVLink 5 scopes the driver answers.
pub fn answer(
    gpu: &GpuStatic,
    r: &GpuReadout,
    power_instant: Option<f64>,
    id: u32,
    scope: u32,
    scopes: Nvlink5Scope,
) -> Answer {
    let ecc = |e: u32, c: u32| match ecc_count(r, e, c) {
        Ok(v) => Answer::Ulonglong(v),
        Err(code) => Answer::Error(code),
    };
    let uint = |v: Option<f64>| match v {
        Some(v) => Answer::Uint(u32::try_from(whole(v)).unwrap_or(u32::MAX)),
        None => Answer::Error(ERROR_NOT_SUPPORTED),
    };
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    let rows = r.remapped_rows;
    let pages = r.retired_pages;
    match id {
        FI_DEV_ECC_CURRENT | FI_DEV_ECC_PENDING => Answer::Uint(FEATURE_ENABLED),
        FI_DEV_ECC_SBE_VOL_TOTAL => ecc(MEMORY_ERROR_CORRECTED, ECC_VOLATILE),
        FI_DEV_ECC_DBE_VOL_TOTAL => ecc(MEMORY_ERROR_UNCORRECTED, ECC_VOLATILE),
        FI_DEV_ECC_SBE_AGG_TOTAL => ecc(MEMORY_ERROR_CORRECTED, ECC_AGGREGATE),
        FI_DEV_ECC_DBE_AGG_TOTAL => ecc(MEMORY_ERROR_UNCORRECTED, ECC_AGGREGATE),
        FI_DEV_RETIRED_SBE => uint(pages.map(|p| p.single_bit_ecc)),
        FI_DEV_RETIRED_DBE => uint(pages.map(|p| p.double_bit_ecc)),
        FI_DEV_RETIRED_PENDING => uint(pages.map(|p| flag(p.pending))),
        FI_DEV_MEMORY_TEMP => r
            .temperature_memory_celsius
            .map_or(Answer::Error(ERROR_NOT_SUPPORTED), |c| {
                Answer::Uint(celsius(c))
            }),
        FI_DEV_TOTAL_ENERGY_CONSUMPTION => r
            .energy_joules
            .map_or(Answer::Error(ERROR_NOT_SUPPORTED), |j| {
                Answer::Ulonglong(millijoules(j))
            }),
        FI_DEV_PCIE_REPLAY_COUNTER => Answer::Uint(0),
        FI_DEV_NVLINK_THROUGHPUT_DATA_TX => nvlink_kib(gpu, r.nvlink_transmit_bytes, scope),
        FI_DEV_NVLINK_THROUGHPUT_DATA_RX => nvlink_kib(gpu, r.nvlink_receive_bytes, scope),
        FI_DEV_REMAPPED_COR => uint(rows.map(|r| r.correctable)),
        FI_DEV_REMAPPED_UNC => uint(rows.map(|r| r.uncorrectable)),
        FI_DEV_REMAPPED_PENDING => uint(rows.map(|r| flag(r.pending))),
        FI_DEV_REMAPPED_FAILURE => uint(rows.map(|r| flag(r.failure))),
        // The model's instantaneous power; `nvmlDeviceGetPowerUsage` reads its 1 s average.
        FI_DEV_POWER_INSTANT => power_instant.map_or(Answer::Error(ERROR_NOT_SUPPORTED), |w| {
            Answer::Uint(milliwatts(w))
        }),
        FI_DEV_GET_GPU_RECOVERY_ACTION => r
            .recovery_action
            .map_or(Answer::Error(ERROR_NOT_SUPPORTED), |a| {
                Answer::Uint(a.to_nvml())
            }),
        _ => match FI_DEV_NVLINK_COUNT_ERRORS.iter().find(|(f, _)| *f == id) {
            Some((_, kind)) => nvlink_count(gpu, r, *kind, scope, scopes),
            None => Answer::Error(ERROR_NOT_SUPPORTED),
        },
    }
}

fn store(v: &mut FieldValue, a: Answer, timestamp: i64) {
    v.timestamp = timestamp;
    v.latency_usec = 0;
    match a {
        Answer::Uint(x) => {
            v.value_type = VALUE_TYPE_UNSIGNED_INT;
            v.nvml_return = SUCCESS;
            v.value = Value { ull_val: 0 };
            v.value.ui_val = x;
        }
        Answer::Ulonglong(x) => {
            v.value_type = VALUE_TYPE_UNSIGNED_LONG_LONG;
            v.nvml_return = SUCCESS;
            v.value = Value { ull_val: x };
        }
        Answer::Error(code) => {
            v.nvml_return = code;
            v.value = Value { ull_val: 0 };
        }
    }
}

nvml_fn! {
    /// Reads `values_count` fields in place; MIG handles answer `NOT_SUPPORTED` per field.
    fn nvmlDeviceGetFieldValues(device: Device, values_count: c_int, values: *mut FieldValue) {
        let n = usize::try_from(values_count).map_err(|_| ERROR_INVALID_ARGUMENT)?;
        if n == 0 || values.is_null() {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: NVML contract: `values` holds `values_count` entries.
        let values = unsafe { std::slice::from_raw_parts_mut(values, n) };
        // What the asked fields cost the GPU, outside the driver lock like every call's latency.
        crate::latency::delay_fields(values.iter().map(|v| v.field_id));
        let timestamp = i64::try_from(state::unix_micros()).unwrap_or(i64::MAX);
        let scopes = state::with_driver(|d, _| Ok(d.config.nvlink5_scope))?;
        device_call(device, Access::Reading, |dev| {
            let r = dev.r()?;
            for v in values.iter_mut() {
                let a = match dev.handle.mig {
                    Some(_) => Answer::Error(ERROR_NOT_SUPPORTED),
                    None => answer(dev.gpu, r, dev.power_instant_watts, v.field_id, v.scope_id, scopes),
                };
                store(v, a, timestamp);
            }
            Ok(())
        })
    }
}
