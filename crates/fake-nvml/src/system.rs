//! Init, shutdown, error strings and system-wide queries.

use std::ffi::{c_char, c_int, c_uint, CStr};

use crate::state::{self, nvml_fn, out, write_str};
use crate::types::*;

nvml_fn! {
    /// Opens (or joins) a session; see the crate docs for the environment it reads.
    fn nvmlInit_v2() {
        state::init()
    }
}

nvml_fn! {
    /// Same as `nvmlInit_v2`; the flags (no GPUs, no attach) change nothing here.
    fn nvmlInitWithFlags(flags: c_uint) {
        let _ = flags;
        state::init()
    }
}

nvml_fn! {
    /// Closes one reference of the session.
    fn nvmlShutdown() {
        state::shutdown()
    }
}

/// Static description of a return code.
fn error_text(code: NvmlReturn) -> &'static CStr {
    match code {
        SUCCESS => c"Success",
        ERROR_UNINITIALIZED => c"Uninitialized",
        ERROR_INVALID_ARGUMENT => c"Invalid Argument",
        ERROR_NOT_SUPPORTED => c"Not Supported",
        ERROR_NO_PERMISSION => c"Insufficient Permissions",
        ERROR_ALREADY_INITIALIZED => c"Already Initialized",
        ERROR_NOT_FOUND => c"Not Found",
        ERROR_INSUFFICIENT_SIZE => c"Insufficient Size",
        ERROR_DRIVER_NOT_LOADED => c"Driver Not Loaded",
        ERROR_TIMEOUT => c"Timeout",
        ERROR_FUNCTION_NOT_FOUND => c"Function Not Found",
        ERROR_GPU_IS_LOST => c"GPU is lost",
        ERROR_ARGUMENT_VERSION_MISMATCH => c"Argument Version Mismatch",
        _ => c"Unknown Error",
    }
}

/// A static, NUL-terminated description of `result` (never null).
#[no_mangle]
pub extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    state::CALLS.count();
    error_text(result).as_ptr()
}

nvml_fn! {
    /// Driver version of the scenario, e.g. `550.54.15`.
    fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) {
        let v = state::with_driver(|d, _| Ok(d.node().driver_version().to_string()))?;
        // SAFETY: forwarded caller contract.
        unsafe { write_str(version, length, &v) }
    }
}

nvml_fn! {
    /// NVML version: CUDA major version and driver version, e.g. `12.550.54.15`.
    fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) {
        let v = state::with_driver(|d, _| {
            let n = d.node();
            Ok(format!("{}.{}", n.cuda_driver_version() / 1000, n.driver_version()))
        })?;
        // SAFETY: forwarded caller contract.
        unsafe { write_str(version, length, &v) }
    }
}

/// CUDA driver version in NVML's encoding (12040 for 12.4).
///
/// # Safety
///
/// `version` must be null or valid for writes.
unsafe fn cuda_version(version: *mut c_int) -> Result<(), NvmlReturn> {
    // SAFETY: forwarded caller contract.
    let p = unsafe { out(version) }?;
    *p = state::with_driver(|d, _| {
        c_int::try_from(d.node().cuda_driver_version()).map_err(|_| ERROR_UNKNOWN)
    })?;
    Ok(())
}

nvml_fn! {
    /// CUDA driver version (e.g. 12040 for 12.4).
    fn nvmlSystemGetCudaDriverVersion(cuda_driver_version: *mut c_int) {
        // SAFETY: forwarded caller contract.
        unsafe { cuda_version(cuda_driver_version) }
    }
}

nvml_fn! {
    /// CUDA driver version (e.g. 12040 for 12.4).
    fn nvmlSystemGetCudaDriverVersion_v2(cuda_driver_version: *mut c_int) {
        // SAFETY: forwarded caller contract.
        unsafe { cuda_version(cuda_driver_version) }
    }
}
