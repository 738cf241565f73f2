//! Enumeration (count, handles by index and UUID) and identity: name, UUID, serial, VBIOS,
//! index, minor number, board id and PCI information. Answered for a lost GPU too.

use std::ffi::{c_char, c_uint, CStr};

use dgx_pixels_sim::GpuStatic;

use crate::state::{self, device_call, nvml_fn, out, write_str, Access, Dev, Handle};
use crate::types::*;

nvml_fn! {
    /// Number of GPUs in the scenario.
    fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(device_count) }?;
        *p = state::with_driver(|d, _| Ok(d.node().gpu_count() as c_uint))?;
        Ok(())
    }
}

nvml_fn! {
    /// The handle of GPU `index` (`INVALID_ARGUMENT` when out of range). Works for a lost GPU.
    fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut Device) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(device) }?;
        *p = state::gpu_handle_call(|node| {
            let gpu = index as usize;
            node.gpu(gpu).ok_or(ERROR_INVALID_ARGUMENT)?;
            Ok((gpu, Handle { gpu, mig: None }.to_ptr()))
        })?;
        Ok(())
    }
}

nvml_fn! {
    /// The handle of the GPU or MIG instance with this UUID (`NOT_FOUND` when none has it).
    fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut Device) {
        if uuid.is_null() {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: NVML contract: `uuid` is a NUL-terminated string.
        let wanted = unsafe { CStr::from_ptr(uuid) }
            .to_str()
            .map_err(|_| ERROR_INVALID_ARGUMENT)?;
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(device) }?;
        *p = state::gpu_handle_call(|node| {
            for gpu in 0..node.gpu_count() {
                let Some(g) = node.gpu(gpu) else { continue };
                if g.uuid == wanted {
                    return Ok((gpu, Handle { gpu, mig: None }.to_ptr()));
                }
                let mig = g.mig.iter().flatten().position(|m| m.uuid == wanted);
                if let Some(m) = mig {
                    return Ok((gpu, Handle { gpu, mig: Some(m) }.to_ptr()));
                }
            }
            Err(ERROR_NOT_FOUND)
        })?;
        Ok(())
    }
}

/// Writes an identity string of the device.
///
/// # Safety
///
/// `buf` must be null or valid for writes of `len` bytes.
unsafe fn identity_str(
    device: Device,
    buf: *mut c_char,
    len: c_uint,
    f: impl FnOnce(&Dev<'_>) -> Result<String, NvmlReturn>,
) -> Result<(), NvmlReturn> {
    if buf.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    let s = device_call(device, Access::Identity, f)?;
    // SAFETY: forwarded caller contract.
    unsafe { write_str(buf, len, &s) }
}

nvml_fn! {
    /// Product name; a MIG handle answers `<parent name> MIG <profile>`.
    fn nvmlDeviceGetName(device: Device, name: *mut c_char, length: c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            identity_str(device, name, length, |dev| {
                Ok(match dev.mig {
                    Some(m) => format!("{} MIG {}", dev.gpu.name, m.profile),
                    None => dev.gpu.name.clone(),
                })
            })
        }
    }
}

nvml_fn! {
    /// `GPU-...` UUID, or the `MIG-...` UUID of a MIG handle.
    fn nvmlDeviceGetUUID(device: Device, uuid: *mut c_char, length: c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            identity_str(device, uuid, length, |dev| {
                Ok(dev.mig.map_or_else(|| dev.gpu.uuid.clone(), |m| m.uuid.clone()))
            })
        }
    }
}

nvml_fn! {
    /// Board serial number.
    fn nvmlDeviceGetSerial(device: Device, serial: *mut c_char, length: c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { identity_str(device, serial, length, |dev| Ok(dev.gpu.serial.clone())) }
    }
}

nvml_fn! {
    /// VBIOS version.
    fn nvmlDeviceGetVbiosVersion(device: Device, version: *mut c_char, length: c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { identity_str(device, version, length, |dev| Ok(dev.gpu.vbios_version.clone())) }
    }
}

nvml_fn! {
    /// Board part number: not modelled by the simulator.
    fn nvmlDeviceGetBoardPartNumber(device: Device, part_number: *mut c_char, length: c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { identity_str(device, part_number, length, |_| Err(ERROR_NOT_SUPPORTED)) }
    }
}

/// Writes an identity number of the device.
///
/// # Safety
///
/// `p` must be null or valid for writes.
unsafe fn identity_uint(
    device: Device,
    p: *mut c_uint,
    f: impl FnOnce(&Dev<'_>) -> Result<c_uint, NvmlReturn>,
) -> Result<(), NvmlReturn> {
    // SAFETY: forwarded caller contract.
    let p = unsafe { out(p) }?;
    *p = device_call(device, Access::Identity, f)?;
    Ok(())
}

nvml_fn! {
    /// NVML index (a MIG handle answers its parent's).
    fn nvmlDeviceGetIndex(device: Device, index: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { identity_uint(device, index, |dev| Ok(dev.gpu.index)) }
    }
}

nvml_fn! {
    /// Minor number of `/dev/nvidiaN`.
    fn nvmlDeviceGetMinorNumber(device: Device, minor_number: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe { identity_uint(device, minor_number, |dev| Ok(dev.gpu.minor_number)) }
    }
}

/// `(domain, bus, device, function)` of an NVML bus id such as `00000000:18:00.0`.
pub fn parse_bus_id(id: &str) -> Option<(u32, u32, u32, u32)> {
    let (domain, rest) = id.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    Some((hex(domain)?, hex(bus)?, hex(device)?, hex(function)?))
}

/// PCI device id (`device << 16 | 0x10DE`) of known products; 0 for others.
fn pci_device_id(gpu: &GpuStatic) -> c_uint {
    const IDS: &[(&str, u32)] = &[
        ("H100 80GB HBM3", 0x2330),
        ("A100-SXM4-80GB", 0x20B2),
        ("A100-SXM4-40GB", 0x20B0),
    ];
    IDS.iter()
        .find(|(n, _)| gpu.name.contains(n))
        .map_or(0, |(_, id)| (id << 16) | 0x10DE)
}

nvml_fn! {
    /// Board id: derived from the PCI location, unique per GPU of a scenario.
    fn nvmlDeviceGetBoardId(device: Device, board_id: *mut c_uint) {
        // SAFETY: forwarded caller contract.
        unsafe {
            identity_uint(device, board_id, |dev| {
                let (domain, bus, d, _) =
                    parse_bus_id(&dev.gpu.pci_bus_id).ok_or(ERROR_UNKNOWN)?;
                Ok((domain << 16) | (bus << 8) | d)
            })
        }
    }
}

fn fill_chars(dst: &mut [c_char], s: &str) {
    for (d, b) in dst.iter_mut().zip(s.bytes().chain(std::iter::repeat(0))) {
        *d = b as c_char;
    }
    if let Some(last) = dst.last_mut() {
        *last = 0;
    }
}

nvml_fn! {
    /// PCI location and ids.
    fn nvmlDeviceGetPciInfo_v3(device: Device, pci: *mut PciInfo) {
        // SAFETY: NVML contract for out-parameters.
        let p = unsafe { out(pci) }?;
        *p = device_call(device, Access::Identity, |dev| {
            let (domain, bus, d, function) =
                parse_bus_id(&dev.gpu.pci_bus_id).ok_or(ERROR_UNKNOWN)?;
            let id = pci_device_id(dev.gpu);
            let mut info = PciInfo {
                bus_id_legacy: [0; 16],
                domain,
                bus,
                device: d,
                pci_device_id: id,
                pci_sub_system_id: id,
                bus_id: [0; 32],
            };
            let legacy = format!("{:04X}:{bus:02X}:{d:02X}.{function:X}", domain & 0xFFFF);
            fill_chars(&mut info.bus_id_legacy, &legacy);
            fill_chars(&mut info.bus_id, &dev.gpu.pci_bus_id);
            Ok(info)
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_parse() {
        assert_eq!(parse_bus_id("00000000:18:00.0"), Some((0, 0x18, 0, 0)));
        assert_eq!(parse_bus_id("0000000F:01:00.1"), Some((0xF, 1, 0, 1)));
        assert_eq!(parse_bus_id("garbage"), None);
    }
}
