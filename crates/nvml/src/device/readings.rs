//! The readings themselves: the slow ones (the energy and PCIe replay counters, PCIe
//! throughput, NVLink state and errors, violation times, ECC mode, retired pages, the MIG layout, the NVLink fabric)
//! on their own cadence, and the fast ones every poll, with one field-values call each. Apart from `device.rs`, which holds the per-GPU reader's
//! state and schedule.

use super::*;
use dgx_pixels_metrics::labels::{FabricHealthFlag, FabricState, RecoveryAction};

mod getters;

use getters::{read_rows, BEFORE_FIELDS, CLOCKS, GETTERS};

/// The slow readings; PCIe throughput only if `pcie` (GPM measures it otherwise), the
/// counters of [`fields::Batch::Slow`] only if `counters` (else every poll reads them).
pub(super) fn read_slow(
    nvml: &Nvml,
    dev: &Device<'_>,
    check: &mut Check<'_>,
    pcie: bool,
    counters: bool,
    nvlink_support: &mut NvlinkSupport,
) -> Slow {
    let counters = if counters {
        read_fields(nvml, dev, fields::Batch::Slow, check)
    } else {
        fields::Fields::default()
    };
    let (pcie_tx, pcie_rx) = if pcie {
        read_pcie_throughput(dev, check)
    } else {
        (None, None)
    };
    let mut nvlinks = read_nvlinks(dev, check, nvlink_support);
    let nvlink_errors = read_nvlink5(nvml, dev, check, nvlink_support, &mut nvlinks);
    let violations = VIOLATION_POLICIES
        .iter()
        .filter_map(|(policy, name)| {
            check
                .call(F::ViolationStatus, &format!("violation_{name}"), || {
                    dev.violation_status(*policy)
                })
                .map(|v| (*name, v.violation_time as f64 / 1e9))
        })
        .collect();
    let ecc_enabled = check
        .call(F::EccMode, "ecc_mode", || dev.is_ecc_enabled())
        .map(|m| m.currently_enabled);
    let retired_pages = read_retired_pages(dev, check);
    let mig = read_mig_layout(dev, check);
    let fabric = read_fabric(dev, check);
    let platform = read_platform(dev, check);
    Slow {
        fabric,
        platform,
        rail: Vec::new(),
        counters,
        pcie_tx,
        pcie_rx,
        nvlinks,
        nvlink_errors,
        violations,
        ecc_enabled,
        retired_pages,
        mig,
    }
}

/// PCIe throughput, transmit and receive: the driver samples each direction for about 20 ms
/// per call.
fn read_pcie_throughput(dev: &Device<'_>, check: &mut Check<'_>) -> (Option<f64>, Option<f64>) {
    let mut throughput = |counter: PcieUtilCounter, what: &str| {
        check
            .call(F::PcieThroughput, what, || dev.pcie_throughput(counter))
            .map(|kb| f64::from(kb) * 1e3)
    };
    (
        throughput(PcieUtilCounter::Send, "pcie_throughput_tx"),
        throughput(PcieUtilCounter::Receive, "pcie_throughput_rx"),
    )
}

/// Each link's state and, where the legacy call is asked, its error counters.
fn read_nvlinks(
    dev: &Device<'_>,
    check: &mut Check<'_>,
    nvlink_support: &mut NvlinkSupport,
) -> Vec<NvlinkReadout> {
    let mut nvlinks = Vec::new();
    for link in 0..MAX_NVLINKS {
        let l = dev.link_wrapper_for(link);
        // A link the GPU does not have answers INVALID_ARGUMENT or NOT_SUPPORTED: stop there.
        let up = match timed(F::NvLinkState, || l.is_active()) {
            Ok(up) => up,
            Err(NvmlError::GpuLost) => {
                check.lost = true;
                break;
            }
            Err(_) => break,
        };
        let mut not_supported = 0;
        // An NVLink 5 GPU's counters are the NVLink 5 ones: the legacy call is not asked.
        let legacy = !nvlink_support.legacy_unsupported && !nvlink_support.nvlink5.nvlink5;
        let errors = NVLINK_ERRORS
            .iter()
            .filter(|_| legacy)
            .filter_map(|(counter, name)| {
                let r = timed(F::NvLinkErrorCounter, || l.error_counter(*counter));
                if matches!(r, Err(NvmlError::NotSupported)) {
                    not_supported += 1;
                }
                check
                    .get(&format!("nvlink_{name}_errors"), r)
                    .map(|v| (*name, v as f64))
            })
            .collect();
        if legacy && link == 0 && not_supported == NVLINK_ERRORS.len() {
            debug!(
                gpu = check.index,
                "no NVLink error counter call; not asked again"
            );
            nvlink_support.legacy_unsupported = true;
        }
        nvlinks.push(NvlinkReadout { link, up, errors });
    }
    nvlinks
}

/// Pages retired for single- and double-bit errors and whether more are pending; asked in
/// turn, stopping at the first that does not answer.
fn read_retired_pages(dev: &Device<'_>, check: &mut Check<'_>) -> Option<RetiredPages> {
    let mut pages = |cause: RetirementCause| {
        check
            .call(F::RetiredPages, "retired_pages", || {
                dev.retired_pages(cause)
            })
            .map(|v| v.len() as f64)
    };
    let single_bit_ecc = pages(RetirementCause::MultipleSingleBitEccErrors)?;
    let double_bit_ecc = pages(RetirementCause::DoubleBitEccError)?;
    let pending = check.call(
        F::RetiredPagesPendingStatus,
        "retired_pages_pending",
        || dev.are_pages_pending_retired(),
    )?;
    Some(RetiredPages {
        single_bit_ecc,
        double_bit_ecc,
        pending,
    })
}

fn read_mig_layout(
    dev: &Device<'_>,
    check: &mut Check<'_>,
) -> Vec<(u32, u32, String, String, u32)> {
    let enabled = check
        .call(F::MigMode, "mig_mode", || dev.mig_mode())
        .is_some_and(|m| m.current == 1);
    if !enabled {
        return Vec::new();
    }
    let max = check
        .call(F::MaxMigDeviceCount, "mig_device_count", || {
            dev.mig_device_count()
        })
        .unwrap_or(0);
    let mut out = Vec::new();
    for i in 0..max {
        let Ok(mig) = timed(F::MigDeviceHandleByIndex, || dev.mig_device_by_index(i)) else {
            continue; // NOT_FOUND: no instance in this slot.
        };
        let (gi, ci) = mig_ids(&mig);
        let (Some(gi), Some(ci)) = (gi, ci) else {
            continue;
        };
        let name = timed(F::Name, || mig.name()).unwrap_or_default();
        // MIG device names end in "MIG <profile>", e.g. "NVIDIA A100-SXM4-80GB MIG 1g.10gb".
        let profile = name
            .rsplit_once("MIG ")
            .map(|(_, p)| p.trim().to_string())
            .unwrap_or_default();
        let uuid = timed(F::Uuid, || mig.uuid()).unwrap_or_default();
        out.push((gi, ci, profile, uuid, i));
    }
    out
}

/// GPU and compute instance ids of a MIG device (raw calls: nvml-wrapper does not wrap them).
fn mig_ids(mig: &Device<'_>) -> (Option<u32>, Option<u32>) {
    let nvml = mig.nvml();
    // SAFETY: plain getters writing one unsigned int, with a live MIG device handle.
    let handle = unsafe { mig.handle() };
    let read =
        |sym: Result<&unsafe extern "C" fn(_, *mut u32) -> u32, _>, function: F| -> Option<u32> {
            let f = sym.ok()?;
            let mut v = 0u32;
            nvml_try(timed(function, || unsafe { f(handle, &mut v) }))
                .ok()
                .map(|()| v)
        };
    (
        read(
            nvml.lib().nvmlDeviceGetGpuInstanceId.as_ref(),
            F::GpuInstanceId,
        ),
        read(
            nvml.lib().nvmlDeviceGetComputeInstanceId.as_ref(),
            F::ComputeInstanceId,
        ),
    )
}

/// `nvmlGpuFabricInfo_v3` and `_v2` (`sizeof | version << 24`, as nvidia-ml-py has them).
const FABRIC_INFO_V3: u32 = 0x0300_0028;
const FABRIC_INFO_V2: u32 = 0x0200_0024;

/// The GPU's NVLink fabric (raw call: nvml-wrapper does not wrap it). Asks for struct v3 and
/// falls back to v2 on a driver that does not know v3 (the fields read are in both); `None`
/// where NVML says not supported, by error or by state.
fn read_fabric(dev: &Device<'_>, check: &mut Check<'_>) -> Option<FabricReadout> {
    use nvml_wrapper_sys::bindings::nvmlGpuFabricInfoV_t;
    let f = dev.nvml().lib().nvmlDeviceGetGpuFabricInfoV.as_ref().ok()?;
    // SAFETY: the handle is only passed back to NVML while `dev` is alive.
    let handle = unsafe { dev.handle() };
    let mut info: nvmlGpuFabricInfoV_t;
    let mut result = Err(NvmlError::NotSupported);
    for version in [FABRIC_INFO_V3, FABRIC_INFO_V2] {
        // SAFETY: a zeroed plain C struct is a valid value.
        info = unsafe { std::mem::zeroed() };
        info.version = version;
        // SAFETY: `info` is a v3 struct, at least as large as the version it names.
        result =
            nvml_try(timed(F::GpuFabricInfo, || unsafe { f(handle, &mut info) })).map(|()| info);
        // NVML_ERROR_ARGUMENT_VERSION_MISMATCH (25), which nvml-wrapper does not name.
        if !matches!(result, Err(NvmlError::UnexpectedVariant(25))) {
            break;
        }
    }
    let info = check.get("fabric_info", result)?;
    let state = FabricState::from_nvml(info.state)?;
    let cluster_uuid = {
        let hex: String = info
            .clusterUuid
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        )
    };
    Some(FabricReadout {
        state: Some(state),
        status: info.status,
        cluster_uuid,
        clique_id: info.cliqueId,
        health: FabricHealthFlag::decode(info.healthMask),
    })
}

/// `nvmlPlatformInfo_v2` (`sizeof | 2 << 24`, 44 bytes, as nvidia-ml-py has it).
const PLATFORM_INFO_V2: u32 = 0x0200_002c;

/// Where the GPU sits (raw call: nvml-wrapper does not wrap it), in struct v2 only: v1 names
/// other things (a rack GUID, a node index) that the series does not carry. `None` where NVML
/// says not supported or knows no v2.
fn read_platform(dev: &Device<'_>, check: &mut Check<'_>) -> Option<PlatformReadout> {
    use nvml_wrapper_sys::bindings::nvmlPlatformInfo_v2_t;
    let f = dev.nvml().lib().nvmlDeviceGetPlatformInfo.as_ref().ok()?;
    // SAFETY: the handle is only passed back to NVML while `dev` is alive.
    let handle = unsafe { dev.handle() };
    // SAFETY: a zeroed plain C struct is a valid value.
    let mut info: nvmlPlatformInfo_v2_t = unsafe { std::mem::zeroed() };
    info.version = PLATFORM_INFO_V2;
    // SAFETY: `info` is the v2 struct its version names.
    let result =
        nvml_try(timed(F::PlatformInfo, || unsafe { f(handle, &mut info) })).map(|()| info);
    let info = check.get("platform_info", result)?;
    Some(PlatformReadout {
        chassis_serial: printable(&info.chassisSerialNumber),
        slot: info.slotNumber,
        tray: info.trayIndex,
        host_id: info.hostId,
        module_id: info.moduleId,
    })
}

/// A C string of at most its array's length, up to its NUL, as a label value: anything but
/// ASCII letters, digits, `-`, `_` and `.` becomes `_`, so a driver's garbage cannot inject.
fn printable(bytes: &[u8]) -> String {
    bytes
        .iter()
        .take_while(|b| **b != 0)
        .map(|&b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.') {
                b as char
            } else {
                '_'
            }
        })
        .collect()
}

/// The NVLink 5 counters of a GPU with links: its totals (returned) and those of the links
/// found (into their errors), in the scopes due (see `nvlink5.rs`). Where the GPU answers
/// them, they replace the legacy types: one set of NVLink error types per GPU.
fn read_nvlink5(
    nvml: &Nvml,
    dev: &Device<'_>,
    check: &mut Check<'_>,
    support: &mut NvlinkSupport,
    nvlinks: &mut [NvlinkReadout],
) -> NvlinkErrors {
    if nvlinks.is_empty() {
        return NvlinkErrors::default();
    }
    let mut errors = vec![NvlinkErrors::default(); nvlinks.len()];
    // SAFETY: the handle is only passed back to NVML while `dev` is alive.
    let handle = unsafe { dev.handle() };
    match crate::nvlink5::read(nvml, handle, &mut support.nvlink5, &mut errors) {
        Ok(reading) => {
            if support.nvlink5.nvlink5 {
                // The first reading of an NVLink 5 GPU also asked the legacy call: drop it.
                for (l, e) in nvlinks.iter_mut().zip(errors) {
                    l.errors = e;
                }
            }
            if !reading.answered {
                // Logged once; the scopes are asked again later (see `nvlink5.rs`).
                check.get::<()>("nvlink5_counters", Err(NvmlError::NotSupported));
            }
            reading.totals
        }
        Err(e) => {
            check.get::<()>("nvlink5_field_values", Err(e));
            NvlinkErrors::default()
        }
    }
}

/// One field-values batch; a field NVML does not answer is logged once and left out.
fn read_fields(
    nvml: &Nvml,
    dev: &Device<'_>,
    batch: fields::Batch,
    check: &mut Check<'_>,
) -> fields::Fields {
    // SAFETY: the handle is only passed back to NVML while `dev` is alive.
    let handle = unsafe { dev.handle() };
    match fields::read(nvml, handle, batch) {
        Ok((f, unanswered)) => {
            for id in unanswered {
                check.get::<()>(&format!("field_{id}"), Err(NvmlError::NotSupported));
            }
            f
        }
        Err(e) => {
            check.get::<()>("field_values", Err(e));
            fields::Fields::default()
        }
    }
}

/// The readings of every poll: the getters' rows ([`getters`]), the field-values batch, and what the static
/// and slow readings hold.
pub(super) fn read_fast(
    nvml: &Nvml,
    dev: &Device<'_>,
    st: &Static,
    slow: &Slow,
    batch: fields::Batch,
    check: &mut Check<'_>,
) -> GpuReadout {
    let mut out = GpuReadout {
        up: true,
        ..GpuReadout::default()
    };
    read_rows(dev, check, BEFORE_FIELDS, &mut out);
    let f = read_fields(nvml, dev, batch, check);
    // The counters come from this poll's batch when it holds them, else from the slow reading.
    let counters = if batch == fields::Batch::All {
        &f
    } else {
        &slow.counters
    };
    read_rows(dev, check, CLOCKS, &mut out);
    out.fan_speed_ratios = (0..st.fans)
        .filter_map(|i| check.call(F::FanSpeed, "fan_speed", || dev.fan_speed(i)))
        .map(|p| f64::from(p) / 100.0)
        .collect();
    out.ecc = read_ecc(dev, &f, slow, check);
    out.mig = mig_memory(dev, slow);
    read_rows(dev, check, GETTERS, &mut out);
    from_fields(&f, counters, &mut out);
    from_static_and_slow(st, slow, &mut out);
    out
}

/// What the field-values batch `f` (and `counters`, this poll's or the slow reading's) says.
fn from_fields(f: &fields::Fields, counters: &fields::Fields, out: &mut GpuReadout) {
    out.energy_joules = counters.energy_millijoules.map(|mj| mj / 1e3);
    out.pcie_replays = counters.pcie_replays;
    out.temperature_memory_celsius = f.memory_temperature_celsius;
    out.remapped_rows = match (
        f.remapped_correctable,
        f.remapped_uncorrectable,
        f.remapped_pending,
        f.remapped_failure,
    ) {
        (Some(c), Some(u), Some(p), Some(x)) => Some(RemappedRowsReadout {
            correctable: c,
            uncorrectable: u,
            pending: p > 0.0,
            failure: x > 0.0,
        }),
        _ => None,
    };
    // A value this build does not know is left out rather than guessed.
    out.recovery_action = f
        .recovery_action
        .and_then(|v| u32::try_from(v as u64).ok())
        .and_then(RecoveryAction::from_nvml);
    // NVLink fields are in KiB.
    out.nvlink_transmit_bytes = f.nvlink_tx_kib.map(|k| k * 1024.0);
    out.nvlink_receive_bytes = f.nvlink_rx_kib.map(|k| k * 1024.0);
}

/// What was read once (the maxima) and on the slow cadence, as of this poll.
fn from_static_and_slow(st: &Static, slow: &Slow, out: &mut GpuReadout) {
    out.max_clocks = st.max_clocks;
    out.pcie_link_max_generation = st.pcie_max_generation;
    out.pcie_link_max_width = st.pcie_max_width;
    out.ecc_enabled = slow.ecc_enabled;
    out.retired_pages = slow.retired_pages;
    out.throttle_violations = slow.violations.clone();
    out.pcie_transmit_bytes_per_second = slow.pcie_tx;
    out.pcie_receive_bytes_per_second = slow.pcie_rx;
    out.nvlinks = slow.nvlinks.clone();
    out.nvlink_errors = slow.nvlink_errors;
    out.fabric = slow.fabric.clone();
    out.platform = slow.platform.clone();
    out.rail_ports = slow.rail.clone();
}

/// The ECC totals where ECC is on: from the field batch, else (old drivers, no field API)
/// from the getter.
fn read_ecc(
    dev: &Device<'_>,
    f: &fields::Fields,
    slow: &Slow,
    check: &mut Check<'_>,
) -> Option<EccTotals> {
    if slow.ecc_enabled != Some(true) {
        return None;
    }
    let totals = |vc, vu, ac, au| EccTotals {
        volatile_corrected: vc,
        volatile_uncorrected: vu,
        aggregate_corrected: ac,
        aggregate_uncorrected: au,
    };
    if let (Some(vc), Some(vu), Some(ac), Some(au)) = (
        f.ecc_sbe_volatile,
        f.ecc_dbe_volatile,
        f.ecc_sbe_aggregate,
        f.ecc_dbe_aggregate,
    ) {
        return Some(totals(vc, vu, ac, au));
    }
    let mut total = |e: MemoryError, c: EccCounter, what: &str| {
        check
            .call(F::TotalEccErrors, what, || dev.total_ecc_errors(e, c))
            .map(|v| v as f64)
    };
    match (
        total(MemoryError::Corrected, EccCounter::Volatile, "ecc_cv"),
        total(MemoryError::Uncorrected, EccCounter::Volatile, "ecc_uv"),
        total(MemoryError::Corrected, EccCounter::Aggregate, "ecc_ca"),
        total(MemoryError::Uncorrected, EccCounter::Aggregate, "ecc_ua"),
    ) {
        (Some(vc), Some(vu), Some(ac), Some(au)) => Some(totals(vc, vu, ac, au)),
        _ => None,
    }
}

/// The MIG instances of the slow reading's layout, with their memory as of this poll.
fn mig_memory(dev: &Device<'_>, slow: &Slow) -> Vec<MigReadout> {
    slow.mig
        .iter()
        .map(|(gi, ci, profile, uuid, slot)| {
            let memory = timed(F::MigDeviceHandleByIndex, || dev.mig_device_by_index(*slot))
                .and_then(|m| timed(F::MemoryInfo, || m.memory_info()))
                .ok();
            MigReadout {
                gpu_instance: *gi,
                compute_instance: *ci,
                profile: profile.clone(),
                mig_uuid: uuid.clone(),
                // Engine activity per instance needs DCGM profiling; NVML has none.
                graphics_engine_active_ratio: None,
                memory_used_bytes: memory.as_ref().map(|m| m.used as f64),
                memory_total_bytes: memory.as_ref().map(|m| m.total as f64),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn a_chassis_serial_is_cut_at_its_nul_and_made_a_safe_label_value() {
        let mut raw = [0u8; 16];
        raw[..7].copy_from_slice(b"18231-A");
        assert_eq!(printable(&raw), "18231-A");
        // Unterminated: all 16 bytes.
        assert_eq!(printable(b"0123456789abcdef"), "0123456789abcdef");
        assert_eq!(printable(b"a\"b\n}\xff"), "a_b___");
    }
}
