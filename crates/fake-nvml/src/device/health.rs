//! ECC mode and counters, retired pages, remapped rows.

use std::ffi::{c_uint, c_ulonglong};

use dgx_pixels_sim::labels::{EccCounter, EccErrorType, RetiredPageCause};
use dgx_pixels_sim::GpuReadout;

use super::{read_into, reading, supported, whole};
use crate::state::{self, nvml_fn, out};
use crate::types::*;

nvml_fn! {
    /// ECC mode, current and pending (the same: a mode change is not modelled).
    fn nvmlDeviceGetEccMode(device: Device, current: *mut c_uint, pending: *mut c_uint) {
        // SAFETY: NVML contract for out-parameters.
        let (c, p) = unsafe { (out(current)?, out(pending)?) };
        let enabled = reading(device, |_, r| supported(r.ecc_enabled))?;
        let mode = if enabled { FEATURE_ENABLED } else { FEATURE_DISABLED };
        *c = mode;
        *p = mode;
        Ok(())
    }
}

/// The ECC counter for `(error type, counter type)`.
pub fn ecc_count(
    r: &GpuReadout,
    error_type: c_uint,
    counter_type: c_uint,
) -> Result<c_ulonglong, NvmlReturn> {
    let error_type = match error_type {
        MEMORY_ERROR_CORRECTED => EccErrorType::Corrected,
        MEMORY_ERROR_UNCORRECTED => EccErrorType::Uncorrected,
        _ => return Err(ERROR_INVALID_ARGUMENT),
    };
    let counter = match counter_type {
        ECC_VOLATILE => EccCounter::Volatile,
        ECC_AGGREGATE => EccCounter::Aggregate,
        _ => return Err(ERROR_INVALID_ARGUMENT),
    };
    Ok(whole(supported(r.ecc)?.get(error_type, counter)))
}

nvml_fn! {
    /// Total ECC errors of one type and counter.
    fn nvmlDeviceGetTotalEccErrors(device: Device, error_type: c_uint, counter_type: c_uint, ecc_counts: *mut c_ulonglong) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, ecc_counts, |_, r| ecc_count(r, error_type, counter_type))
        }
    }
}

nvml_fn! {
    /// ECC errors by memory location: all simulated errors are in device memory.
    fn nvmlDeviceGetMemoryErrorCounter(device: Device, error_type: c_uint, counter_type: c_uint, location_type: c_uint, count: *mut c_ulonglong) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, count, |_, r| {
                let total = ecc_count(r, error_type, counter_type)?;
                match location_type {
                    MEMORY_LOCATION_DEVICE_MEMORY => Ok(total),
                    l if l < MEMORY_LOCATION_COUNT => Ok(0),
                    _ => Err(ERROR_INVALID_ARGUMENT),
                }
            })
        }
    }
}

/// Retired pages, on the parts that retire pages (before Ampere), with NVML's two-call
/// protocol: `*page_count` in is the room in `addresses` (and `timestamps`), out the number of
/// pages; too little room answers `INSUFFICIENT_SIZE` with the number needed. Addresses are
/// made up (distinct per cause and page), timestamps are the time of the call.
///
/// # Safety
///
/// `page_count` must be null or valid for reads and writes; `addresses` and `timestamps` null
/// or valid for `*page_count` writes.
unsafe fn retired_pages(
    device: Device,
    cause: c_uint,
    page_count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> Result<(), NvmlReturn> {
    // SAFETY: forwarded caller contract.
    let n = unsafe { out(page_count) }?;
    let cause = match cause {
        PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS => RetiredPageCause::SingleBitEcc,
        PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR => RetiredPageCause::DoubleBitEcc,
        _ => return Err(ERROR_INVALID_ARGUMENT),
    };
    let pages = reading(device, |_, r| Ok(supported(r.retired_pages)?.get(cause)))?;
    let needed = c_uint::try_from(whole(pages)).unwrap_or(c_uint::MAX);
    if needed == 0 {
        *n = 0;
        return Ok(());
    }
    if *n < needed {
        *n = needed;
        return Err(ERROR_INSUFFICIENT_SIZE);
    }
    if addresses.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    let base: c_ulonglong = match cause {
        RetiredPageCause::SingleBitEcc => 0x1_0000_0000,
        RetiredPageCause::DoubleBitEcc => 0x2_0000_0000,
    };
    let now = state::unix_micros();
    for i in 0..needed as usize {
        // SAFETY: the caller gave room for `*n >= needed` entries in each non-null array.
        unsafe {
            addresses.add(i).write(base + 0x1000 * i as c_ulonglong);
            if !timestamps.is_null() {
                timestamps.add(i).write(now);
            }
        }
    }
    *n = needed;
    Ok(())
}

nvml_fn! {
    /// Retired page addresses (`NOT_SUPPORTED` on Ampere and later, which remap rows).
    fn nvmlDeviceGetRetiredPages(device: Device, cause: c_uint, page_count: *mut c_uint, addresses: *mut c_ulonglong) {
        // SAFETY: forwarded caller contract.
        unsafe { retired_pages(device, cause, page_count, addresses, std::ptr::null_mut()) }
    }
}

nvml_fn! {
    /// Retired page addresses and timestamps (`NOT_SUPPORTED` on Ampere and later).
    fn nvmlDeviceGetRetiredPages_v2(device: Device, cause: c_uint, page_count: *mut c_uint, addresses: *mut c_ulonglong, timestamps: *mut c_ulonglong) {
        // SAFETY: forwarded caller contract.
        unsafe { retired_pages(device, cause, page_count, addresses, timestamps) }
    }
}

nvml_fn! {
    /// Whether pages are pending retirement (`NOT_SUPPORTED` on Ampere and later).
    fn nvmlDeviceGetRetiredPagesPendingStatus(device: Device, is_pending: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            read_into(device, is_pending, |_, r| {
                Ok(c_uint::from(supported(r.retired_pages)?.pending))
            })
        }
    }
}

nvml_fn! {
    /// Remapped rows (Ampere and later with ECC memory).
    fn nvmlDeviceGetRemappedRows(device: Device, corr_rows: *mut c_uint, unc_rows: *mut c_uint, is_pending: *mut c_uint, failure_occurred: *mut c_uint) {
        // SAFETY: NVML contract for out-parameters.
        let (c, u, p, f) = unsafe {
            (out(corr_rows)?, out(unc_rows)?, out(is_pending)?, out(failure_occurred)?)
        };
        let rows = reading(device, |_, r| supported(r.remapped_rows))?;
        *c = c_uint::try_from(whole(rows.correctable)).unwrap_or(c_uint::MAX);
        *u = c_uint::try_from(whole(rows.uncorrectable)).unwrap_or(c_uint::MAX);
        *p = c_uint::from(rows.pending);
        *f = c_uint::from(rows.failure);
        Ok(())
    }
}
