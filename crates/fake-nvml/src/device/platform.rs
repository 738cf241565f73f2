//! Where the GPU sits (`nvmlDeviceGetPlatformInfo`), from the simulator's platform readout.

use std::ffi::c_uint;

use super::reading;
use crate::state::nvml_fn;
use crate::types::*;

nvml_fn! {
    /// Chassis serial number, slot, tray, host and module, in struct v2 (the one whose fields
    /// these are; any other version is `ARGUMENT_VERSION_MISMATCH`); `NOT_SUPPORTED` for a GPU
    /// the scenario places nowhere.
    fn nvmlDeviceGetPlatformInfo(device: Device, info: *mut PlatformInfoV2) {
        if info.is_null() {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller's struct holds at least the version field.
        let version: c_uint = unsafe { info.cast::<c_uint>().read_unaligned() };
        if version != PLATFORM_INFO_V2_VERSION {
            return Err(ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let v = reading(device, |_, r| {
            let p = r.platform.as_ref().ok_or(ERROR_NOT_SUPPORTED)?;
            let mut v = PlatformInfoV2 {
                version,
                slot_number: p.slot,
                tray_index: p.tray,
                host_id: p.host_id,
                module_id: p.module_id,
                ..PlatformInfoV2::default()
            };
            // At most 16 bytes, NUL-padded (a 16-byte serial fills the array unterminated).
            for (d, s) in v.chassis_serial_number.iter_mut().zip(p.chassis_serial.bytes()) {
                *d = s;
            }
            Ok(v)
        })?;
        // SAFETY: the caller's struct is the v2 struct its version names.
        unsafe { info.write_unaligned(v) };
        Ok(())
    }
}
