//! MIG: mode, instance handles and their ids.

use std::ffi::c_uint;

use crate::device::mig_capable;
use crate::state::{device_call, nvml_fn, out, Access, Handle};
use crate::types::*;

/// MIG devices a MIG-capable GPU can hold at most.
const MAX_MIG_DEVICES: c_uint = 7;

nvml_fn! {
    /// MIG mode: enabled (current and pending) on GPUs with instances, disabled on other
    /// MIG-capable parts, `NOT_SUPPORTED` elsewhere.
    fn nvmlDeviceGetMigMode(device: Device, current_mode: *mut c_uint, pending_mode: *mut c_uint) {
        // SAFETY: NVML contract for out-parameters.
        let (c, p) = unsafe { (out(current_mode)?, out(pending_mode)?) };
        let mode = device_call(device, Access::Reading, |dev| {
            if dev.handle.mig.is_some() || !mig_capable(dev.gpu) {
                return Err(ERROR_NOT_SUPPORTED);
            }
            Ok(c_uint::from(dev.gpu.mig.is_some()))
        })?;
        *c = mode;
        *p = mode;
        Ok(())
    }
}

nvml_fn! {
    /// Most MIG devices the GPU can hold (7 on MIG-capable parts).
    fn nvmlDeviceGetMaxMigDeviceCount(device: Device, count: *mut c_uint) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(count) }?;
        *p = device_call(device, Access::Reading, |dev| {
            if dev.handle.mig.is_some() || !mig_capable(dev.gpu) {
                return Err(ERROR_NOT_SUPPORTED);
            }
            Ok(MAX_MIG_DEVICES)
        })?;
        Ok(())
    }
}

nvml_fn! {
    /// Handle of MIG device `index` (`NOT_FOUND` past the instances that exist).
    fn nvmlDeviceGetMigDeviceHandleByIndex(device: Device, index: c_uint, mig_device: *mut Device) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(mig_device) }?;
        *p = device_call(device, Access::Reading, |dev| {
            if dev.handle.mig.is_some() {
                return Err(ERROR_INVALID_ARGUMENT);
            }
            if !mig_capable(dev.gpu) {
                return Err(ERROR_NOT_SUPPORTED);
            }
            if index >= MAX_MIG_DEVICES {
                return Err(ERROR_INVALID_ARGUMENT);
            }
            let count = dev.gpu.mig.as_ref().map_or(0, Vec::len);
            if index as usize >= count {
                return Err(ERROR_NOT_FOUND);
            }
            Ok(Handle {
                gpu: dev.handle.gpu,
                mig: Some(index as usize),
            }
            .to_ptr())
        })?;
        Ok(())
    }
}

nvml_fn! {
    /// 1 for a MIG device handle, 0 for a GPU handle.
    fn nvmlDeviceIsMigDeviceHandle(device: Device, is_mig_device: *mut c_uint) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(is_mig_device) }?;
        *p = device_call(device, Access::Identity, |dev| {
            Ok(c_uint::from(dev.handle.mig.is_some()))
        })?;
        Ok(())
    }
}

nvml_fn! {
    /// The GPU a MIG device belongs to (`INVALID_ARGUMENT` for a GPU handle).
    fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig_device: Device, device: *mut Device) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(device) }?;
        *p = device_call(mig_device, Access::Identity, |dev| match dev.handle.mig {
            Some(_) => Ok(Handle {
                gpu: dev.handle.gpu,
                mig: None,
            }
            .to_ptr()),
            None => Err(ERROR_INVALID_ARGUMENT),
        })?;
        Ok(())
    }
}

nvml_fn! {
    /// GPU instance id of a MIG device (`NOT_SUPPORTED` for a GPU handle).
    fn nvmlDeviceGetGpuInstanceId(device: Device, id: *mut c_uint) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(id) }?;
        *p = device_call(device, Access::Reading, |dev| {
            dev.mig.map(|m| m.gpu_instance).ok_or(ERROR_NOT_SUPPORTED)
        })?;
        Ok(())
    }
}

nvml_fn! {
    /// Compute instance id of a MIG device (`NOT_SUPPORTED` for a GPU handle).
    fn nvmlDeviceGetComputeInstanceId(device: Device, id: *mut c_uint) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(id) }?;
        *p = device_call(device, Access::Reading, |dev| {
            dev.mig.map(|m| m.compute_instance).ok_or(ERROR_NOT_SUPPORTED)
        })?;
        Ok(())
    }
}
