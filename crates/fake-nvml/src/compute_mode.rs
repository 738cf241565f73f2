//! Compute mode (`nvmlDeviceGetComputeMode`): DEFAULT unless `FAKE_NVML_COMPUTE_MODE` sets a
//! GPU's, so the probe worker's refusal of exclusive and prohibited GPUs can be tested.

use std::ffi::c_uint;

use crate::state::{device_call, nvml_fn, out, Access};
use crate::types::*;

/// NVML's `nvmlComputeMode_t` values.
const DEFAULT: c_uint = 0;
const EXCLUSIVE_THREAD: c_uint = 1;
const PROHIBITED: c_uint = 2;
const EXCLUSIVE_PROCESS: c_uint = 3;

/// The mode `FAKE_NVML_COMPUTE_MODE` (`INDEX=MODE,...`, MODE one of `default`,
/// `exclusive_thread`, `prohibited`, `exclusive_process`) gives GPU `index`; read at each
/// call, so a test can change it while a session is open. A malformed entry is an error.
fn configured(index: u32) -> Result<c_uint, NvmlReturn> {
    let Ok(spec) = std::env::var("FAKE_NVML_COMPUTE_MODE") else {
        return Ok(DEFAULT);
    };
    for entry in spec.split(',').filter(|e| !e.trim().is_empty()) {
        let parsed = entry.split_once('=').and_then(|(i, m)| {
            let mode = match m.trim() {
                "default" => DEFAULT,
                "exclusive_thread" => EXCLUSIVE_THREAD,
                "prohibited" => PROHIBITED,
                "exclusive_process" => EXCLUSIVE_PROCESS,
                _ => return None,
            };
            Some((i.trim().parse::<u32>().ok()?, mode))
        });
        match parsed {
            Some((i, mode)) if i == index => return Ok(mode),
            Some(_) => {}
            None => {
                eprintln!("fake-nvml: FAKE_NVML_COMPUTE_MODE: bad entry {entry:?}");
                return Err(ERROR_UNKNOWN);
            }
        }
    }
    Ok(DEFAULT)
}

nvml_fn! {
    /// The GPU's compute mode (a MIG handle answers its parent's).
    fn nvmlDeviceGetComputeMode(device: Device, mode: *mut c_uint) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(mode) }?;
        *p = device_call(device, Access::Reading, |dev| configured(dev.gpu.index))?;
        Ok(())
    }
}
