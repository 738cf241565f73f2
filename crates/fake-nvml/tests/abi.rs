//! Loads the built `libfake_nvml.so` through nvml-wrapper, exactly as the exporter loads the real
//! library, and checks its answers against the simulator.
//!
//! The fake is per-process state configured from the environment at init, so every test runs
//! its body in a child process (this test binary again, filtered to that one test) with its own
//! `FAKE_NVML_*` variables.
#![allow(clippy::unwrap_used)]

use fake_support::{child, child_test, Fake};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dgx_pixels_sim::labels::{ThrottleReason, ViolationPolicy};
use dgx_pixels_sim::{GpuReadout, GpuState, Node, Scenario};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, PerformancePolicy, TemperatureSensor,
};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlFieldValue_t, nvmlMemory_v2_t, nvmlProcessInfo_t,
};

/// Set in the child processes: run the test body instead of spawning.
const CHILD: &str = "FAKE_NVML_TEST_CHILD";

/// `<target>/<profile>` of this test binary (`<target>/<profile>/deps/abi-HASH`).
fn profile_dir() -> PathBuf {
    fake_support::library::profile_dir().unwrap()
}

/// Runs `body` in a child process with `env` (and no other `FAKE_NVML_*` variable).
fn in_child(test: &str, env: &[(&str, &str)], body: impl FnOnce()) {
    child::in_child(Fake::Nvml, CHILD, test, &["FAKE_NVML_"], env, body);
}

/// The fake through nvml-wrapper, as the exporter opens the real library (from beside this
/// test binary, `<target>/<profile>/libfake_nvml.so`, built by [`in_child`]).
fn open() -> Result<Nvml, NvmlError> {
    let path = Fake::Nvml.path().unwrap();
    Nvml::builder().lib_path(path.as_os_str()).init()
}

fn sim(scenario: &str) -> Node {
    Node::new(Scenario::load(scenario).unwrap())
}

fn ok_reading(node: &mut Node, gpu: usize, t: Duration) -> GpuReadout {
    match node.reading(gpu, t).unwrap() {
        GpuState::Ok(r) => r.readout,
        GpuState::Lost { .. } => panic!("GPU {gpu} is lost at {t:?}"),
    }
}

fn call_count(nvml: &Nvml) -> u64 {
    // SAFETY: the fake exports this symbol with this signature.
    unsafe {
        let f = nvml
            .lib()
            .__library
            .get::<unsafe extern "C" fn() -> u64>(b"fake_nvml_call_count")
            .unwrap();
        f()
    }
}

fn busy_ns(nvml: &Nvml) -> u64 {
    // SAFETY: the fake exports this symbol with this signature.
    unsafe {
        let f = nvml
            .lib()
            .__library
            .get::<unsafe extern "C" fn() -> u64>(b"fake_nvml_busy_ns")
            .unwrap();
        f()
    }
}

fn reset_call_count(nvml: &Nvml) {
    // SAFETY: the fake exports this symbol with this signature.
    unsafe {
        let f = nvml
            .lib()
            .__library
            .get::<unsafe extern "C" fn()>(b"fake_nvml_reset_call_count")
            .unwrap();
        f();
    }
}

/// Raw `nvmlDeviceGetFieldValues` with explicit scopes: `(return, value as u64)` per request.
fn fields(nvml: &Nvml, dev: nvmlDevice_t, req: &[(u32, u32)]) -> Vec<(u32, u32, u64)> {
    let f = nvml.lib().nvmlDeviceGetFieldValues.as_ref().unwrap();
    let mut values: Vec<nvmlFieldValue_t> = req
        .iter()
        .map(|(id, scope)| {
            // SAFETY: plain old data; all-zero is valid.
            let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
            v.fieldId = *id;
            v.scopeId = *scope;
            v
        })
        .collect();
    // SAFETY: `values` holds `req.len()` entries.
    let ret = unsafe { f(dev, req.len() as i32, values.as_mut_ptr()) };
    assert_eq!(ret, 0);
    values
        .iter()
        .map(|v| {
            // SAFETY: read the member `valueType` names.
            let x = unsafe {
                match (v.nvmlReturn, v.valueType) {
                    (0, 1) => u64::from(v.value.uiVal),
                    (0, 3) => v.value.ullVal,
                    (0, _) => u64::MAX,
                    _ => 0,
                }
            };
            (v.nvmlReturn, v.valueType, x)
        })
        .collect()
}

fn round(x: f64) -> u64 {
    x.round() as u64
}

/// NVML's reason bits, as nvml.h numbers them.
fn throttle_bits(r: &GpuReadout) -> u64 {
    let on = |reason| u64::from(r.throttle_reason(reason) == Some(true));
    on(ThrottleReason::GpuIdle)
        | on(ThrottleReason::SwPowerCap) << 2
        | on(ThrottleReason::HwSlowdown) << 3
        | on(ThrottleReason::SwThermalSlowdown) << 5
        | on(ThrottleReason::HwThermalSlowdown) << 6
        | on(ThrottleReason::HwPowerBrakeSlowdown) << 7
}

child_test!(
    h100_values_match_the_simulator,
    [
        ("FAKE_NVML_SCENARIO", "dgx-h100"),
        ("FAKE_NVML_TIME", "75.25"),
        ("FAKE_NVML_PCIE_DELAY_MS", "0"),
    ],
    {
        let t = Duration::from_millis(75_250);
        let mut node = sim("dgx-h100");
        let nvml = open().unwrap();
        assert_eq!(nvml.device_count().unwrap(), 8);
        assert_eq!(nvml.sys_driver_version().unwrap(), node.driver_version());
        assert_eq!(
            nvml.sys_cuda_driver_version().unwrap(),
            node.cuda_driver_version() as i32
        );
        assert_eq!(
            nvml.sys_nvml_version().unwrap(),
            format!(
                "{}.{}",
                node.cuda_driver_version() / 1000,
                node.driver_version()
            )
        );
        for i in 0..8u32 {
            let s = node.gpu(i as usize).unwrap().clone();
            let r = ok_reading(&mut node, i as usize, t);
            let dev = nvml.device_by_index(i).unwrap();
            assert_eq!(dev.name().unwrap(), s.name);
            assert_eq!(dev.uuid().unwrap(), s.uuid);
            assert_eq!(dev.serial().unwrap(), s.serial);
            assert_eq!(dev.vbios_version().unwrap(), s.vbios_version);
            assert_eq!(dev.index().unwrap(), i);
            assert_eq!(dev.minor_number().unwrap(), s.minor_number);
            let pci = dev.pci_info().unwrap();
            assert_eq!(pci.bus_id, s.pci_bus_id);
            assert_eq!(pci.pci_device_id, 0x2330_10DE);
            assert_eq!(
                nvml.device_by_uuid(s.uuid.as_str())
                    .unwrap()
                    .index()
                    .unwrap(),
                i
            );

            let u = dev.utilization_rates().unwrap();
            assert_eq!(
                u64::from(u.gpu),
                round(r.utilization_ratio.unwrap() * 100.0)
            );
            assert_eq!(
                u64::from(u.memory),
                round(r.memory_utilization_ratio.unwrap() * 100.0)
            );
            assert_eq!(
                u64::from(dev.power_usage().unwrap()),
                round(r.power_watts.unwrap() * 1000.0)
            );
            assert_eq!(
                u64::from(dev.enforced_power_limit().unwrap()),
                round(s.power_limit_watts * 1000.0)
            );
            assert_eq!(
                dev.total_energy_consumption().unwrap(),
                round(r.energy_joules.unwrap() * 1000.0)
            );
            let m = dev.memory_info().unwrap();
            assert_eq!(Some(m.total), s.memory_total_bytes);
            assert_eq!(Some(m.used as f64), r.memory_used_bytes);
            assert_eq!(Some(m.free as f64), r.memory_free_bytes);
            assert_eq!(Some(m.reserved as f64), r.memory_reserved_bytes);
            assert_eq!(m.total, m.used + m.free + m.reserved);
            assert_eq!(
                u64::from(dev.temperature(TemperatureSensor::Gpu).unwrap()),
                round(r.temperature_gpu_celsius.unwrap())
            );
            for (c, now, max) in [
                (
                    Clock::Graphics,
                    r.clocks.graphics.unwrap(),
                    s.max_clocks.graphics_hz,
                ),
                (Clock::SM, r.clocks.sm.unwrap(), s.max_clocks.sm_hz),
                (
                    Clock::Memory,
                    r.clocks.memory.unwrap(),
                    s.max_clocks.memory_hz,
                ),
                (Clock::Video, r.clocks.video.unwrap(), s.max_clocks.video_hz),
            ] {
                assert_eq!(u64::from(dev.clock_info(c).unwrap()), round(now / 1e6));
                assert_eq!(u64::from(dev.max_clock_info(c).unwrap()), round(max / 1e6));
            }
            assert_eq!(
                dev.performance_state().unwrap().as_c(),
                r.performance_state.unwrap()
            );
            assert_eq!(
                dev.current_throttle_reasons().unwrap().bits(),
                throttle_bits(&r)
            );
            let v = dev.violation_status(PerformancePolicy::Power).unwrap();
            assert_eq!(
                v.violation_time,
                round(r.violation_seconds(ViolationPolicy::Power).unwrap() * 1e9)
            );
            assert!(v.reference_time > 0);
            let v = dev.violation_status(PerformancePolicy::Thermal).unwrap();
            assert_eq!(
                v.violation_time,
                round(r.violation_seconds(ViolationPolicy::Thermal).unwrap() * 1e9)
            );
            assert_eq!(
                u64::from(dev.pcie_throughput(PcieUtilCounter::Send).unwrap()),
                round(r.pcie_transmit_bytes_per_second.unwrap() / 1000.0)
            );
            assert_eq!(
                u64::from(dev.pcie_throughput(PcieUtilCounter::Receive).unwrap()),
                round(r.pcie_receive_bytes_per_second.unwrap() / 1000.0)
            );
            let link = s.pcie_link.unwrap();
            assert_eq!(dev.current_pcie_link_gen().unwrap(), link.generation);
            assert_eq!(dev.current_pcie_link_width().unwrap(), link.width);
            assert_eq!(dev.max_pcie_link_gen().unwrap(), link.generation);
            assert_eq!(dev.max_pcie_link_width().unwrap(), link.width);
            let bar1 = dev.bar1_memory_info().unwrap();
            assert_eq!(Some(bar1.total), s.bar1_total_bytes);
            assert_eq!(Some(bar1.used as f64), r.bar1_used_bytes);
            assert!(dev.is_ecc_enabled().unwrap().currently_enabled);
            assert_eq!(
                dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
                    .unwrap(),
                r.ecc.unwrap().volatile_uncorrected as u64
            );
            assert!(matches!(dev.num_fans(), Err(NvmlError::NotSupported)));
            assert!(matches!(dev.fan_speed(0), Err(NvmlError::NotSupported)));
            assert!(matches!(
                dev.retired_pages(nvml_wrapper::enum_wrappers::device::RetirementCause::MultipleSingleBitEccErrors),
                Err(NvmlError::NotSupported)
            ));
            assert!(dev.link_wrapper_for(0).is_active().unwrap());
            assert!(dev.link_wrapper_for(17).is_active().unwrap());
            assert!(matches!(
                dev.link_wrapper_for(18).is_active(),
                Err(NvmlError::InvalidArg)
            ));

            // Processes, through the wrapper's two-call protocol.
            let procs = dev.running_compute_processes().unwrap();
            let want: Vec<(u32, u64)> = r
                .processes
                .iter()
                .map(|p| (p.pid, p.used_memory_bytes as u64))
                .collect();
            let got: Vec<(u32, u64)> = procs
                .iter()
                .map(|p| match p.used_gpu_memory {
                    nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => (p.pid, b),
                    nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => (p.pid, 0),
                })
                .collect();
            assert_eq!(got, want);
            assert!(dev.running_graphics_processes().unwrap().is_empty());

            // Field values with explicit scopes (NVLink totals need UINT_MAX).
            // SAFETY: only passed back to the library.
            let h = unsafe { dev.handle() };
            let got = fields(
                &nvml,
                h,
                &[
                    (3, 0),
                    (4, 0),
                    (5, 0),
                    (6, 0),
                    (82, 0),
                    (83, 0),
                    (94, 0),
                    (138, u32::MAX),
                    (139, u32::MAX),
                    (138, 0),
                    (139, 17),
                    (142, 0),
                    (143, 0),
                    (144, 0),
                    (145, 0),
                    (186, 0),
                    (9999, 0),
                ],
            );
            let ull = |x: u64| (0, 3, x);
            let uint = |x: u64| (0, 1, x);
            let e = r.ecc.unwrap();
            let rr = r.remapped_rows.unwrap();
            let tx = r.nvlink_transmit_bytes.unwrap() as u64;
            let rx = r.nvlink_receive_bytes.unwrap() as u64;
            let per_link = |total: u64| total / 18 / 1024;
            assert_eq!(
                got,
                vec![
                    ull(e.volatile_corrected as u64),
                    ull(e.volatile_uncorrected as u64),
                    ull(e.aggregate_corrected as u64),
                    ull(e.aggregate_uncorrected as u64),
                    uint(round(r.temperature_memory_celsius.unwrap())),
                    ull(round(r.energy_joules.unwrap() * 1000.0)),
                    uint(0),
                    ull(tx / 1024),
                    ull(rx / 1024),
                    ull(per_link(tx)),
                    ull(per_link(rx)),
                    uint(rr.correctable as u64),
                    uint(rr.uncorrectable as u64),
                    uint(u64::from(rr.pending)),
                    uint(u64::from(rr.failure)),
                    // The instantaneous value, not the 1 s average `power_usage` reads.
                    uint(round(node.power_instant(i as usize, t).unwrap() * 1000.0)),
                    (3, 0, 0),
                ]
            );
            assert!(tx > 0, "the test needs NVLink traffic");
        }
    }
);

child_test!(
    raw_abi_errors_and_two_call_protocol,
    [
        ("FAKE_NVML_SCENARIO", "dgx-h100"),
        ("FAKE_NVML_TIME", "75.25")
    ],
    {
        let mut node = sim("dgx-h100");
        let r = ok_reading(&mut node, 0, Duration::from_millis(75_250));
        assert!(!r.processes.is_empty(), "the test needs a running process");
        let nvml = open().unwrap();
        let lib = nvml.lib();
        let dev = nvml.device_by_index(0).unwrap();
        // SAFETY: raw calls with valid or deliberately invalid arguments, as noted.
        unsafe {
            let h = dev.handle();
            // A wrong struct version.
            let mem_v2 = lib.nvmlDeviceGetMemoryInfo_v2.as_ref().unwrap();
            let mut m: nvmlMemory_v2_t = std::mem::zeroed();
            m.version = 0x0100_0028;
            assert_eq!(mem_v2(h, &mut m), 25);
            m.version = 0x0200_0028;
            assert_eq!(mem_v2(h, &mut m), 0);
            assert_eq!(Some(m.used as f64), r.memory_used_bytes);
            // Handles we never gave out, and null out-parameters.
            let power = lib.nvmlDeviceGetPowerUsage.as_ref().unwrap();
            let mut mw = 0;
            assert_eq!(power(0x1234 as nvmlDevice_t, &mut mw), 2);
            assert_eq!(power(std::ptr::null_mut(), &mut mw), 2);
            assert_eq!(power(h, std::ptr::null_mut()), 2);
            assert_eq!(power(h, &mut mw), 0);
            let by_index = lib.nvmlDeviceGetHandleByIndex_v2.as_ref().unwrap();
            let mut other: nvmlDevice_t = std::ptr::null_mut();
            assert_eq!(by_index(8, &mut other), 2);
            let temp = lib.nvmlDeviceGetTemperature.as_ref().unwrap();
            let mut c = 0;
            assert_eq!(temp(h, 1, &mut c), 2);
            // A name buffer one byte too short.
            let name = lib.nvmlDeviceGetName.as_ref().unwrap();
            let mut buf = [0 as std::ffi::c_char; 96];
            let len = node.gpu(0).unwrap().name.len() as u32;
            assert_eq!(name(h, buf.as_mut_ptr(), len), 7);
            assert_eq!(name(h, buf.as_mut_ptr(), len + 1), 0);
            // Processes: NULL, then too small, then enough room.
            let procs = lib
                .nvmlDeviceGetComputeRunningProcesses_v3
                .as_ref()
                .unwrap();
            let mut count = 0u32;
            assert_eq!(procs(h, &mut count, std::ptr::null_mut()), 7);
            assert_eq!(count as usize, r.processes.len());
            let mut infos: Vec<nvmlProcessInfo_t> = vec![std::mem::zeroed(); count as usize + 2];
            let mut small = 0u32;
            assert_eq!(procs(h, &mut small, infos.as_mut_ptr()), 7);
            assert_eq!(small, count);
            let mut room = count + 2;
            assert_eq!(procs(h, &mut room, infos.as_mut_ptr()), 0);
            assert_eq!(room, count);
            assert_eq!(infos[0].pid, r.processes[0].pid);
            assert_eq!(
                infos[0].usedGpuMemory,
                r.processes[0].used_memory_bytes as u64
            );
            assert_eq!(infos[0].gpuInstanceId, u32::MAX);
            // Remapped rows (not wrapped by nvml-wrapper).
            let remapped = lib.nvmlDeviceGetRemappedRows.as_ref().unwrap();
            let (mut a, mut b, mut p, mut f) = (9, 9, 9, 9);
            assert_eq!(remapped(h, &mut a, &mut b, &mut p, &mut f), 0);
            assert_eq!((a, b, p, f), (0, 0, 0, 0));
            // The newer event-reasons name answers like the throttle-reasons one.
            let reasons = lib.nvmlDeviceGetCurrentClocksEventReasons.as_ref().unwrap();
            let mut bits = 0u64;
            assert_eq!(reasons(h, &mut bits), 0);
            assert_eq!(bits, throttle_bits(&r));
            // Error strings are static and never null.
            let text = std::ffi::CStr::from_ptr(lib.nvmlErrorString(15));
            assert_eq!(text.to_str().unwrap(), "GPU is lost");
        }
    }
);

child_test!(
    call_counter_counts_every_call,
    [("FAKE_NVML_TIME", "10")],
    {
        let nvml = open().unwrap();
        // Init and the driver-version query made calls.
        assert!(call_count(&nvml) >= 2);
        reset_call_count(&nvml);
        assert_eq!(call_count(&nvml), 0);
        assert_eq!(busy_ns(&nvml), 0);
        for _ in 0..3 {
            nvml.device_count().unwrap();
        }
        assert_eq!(call_count(&nvml), 3);
        assert!(busy_ns(&nvml) > 0);
        assert!(nvml.device_by_index(99).is_err());
        assert_eq!(call_count(&nvml), 4);
        // Busy time is CPU time: a 300 ms wait for events that never come costs far less.
        let set = nvml.create_event_set().unwrap();
        let set = nvml
            .device_by_index(0)
            .unwrap()
            .register_events(EventTypes::CRITICAL_XID_ERROR, set)
            .unwrap();
        let busy = busy_ns(&nvml);
        let waited = Instant::now();
        assert!(matches!(set.wait(300), Err(NvmlError::Timeout)));
        assert!(waited.elapsed() >= Duration::from_millis(300));
        assert!(busy_ns(&nvml) - busy < 100_000_000);
        assert_eq!(call_count(&nvml), 8);
    }
);

child_test!(
    mig_handles_on_a100,
    [
        ("FAKE_NVML_SCENARIO", "dgx-a100-mig"),
        ("FAKE_NVML_TIME", "150")
    ],
    {
        let t = Duration::from_secs(150);
        let mut node = sim("dgx-a100-mig");
        let nvml = open().unwrap();
        for (gpu, instances) in [(0u32, 7u32), (1, 3)] {
            let s = node.gpu(gpu as usize).unwrap().clone();
            let r = ok_reading(&mut node, gpu as usize, t);
            let dev = nvml.device_by_index(gpu).unwrap();
            let mode = dev.mig_mode().unwrap();
            assert_eq!((mode.current, mode.pending), (1, 1));
            assert_eq!(dev.mig_device_count().unwrap(), 7);
            assert!(!dev.mig_is_mig_device_handle().unwrap());
            // Past the instances: NOT_FOUND; past the most a GPU can hold: INVALID_ARGUMENT.
            if instances < 7 {
                assert!(matches!(
                    dev.mig_device_by_index(instances),
                    Err(NvmlError::NotFound)
                ));
            }
            assert!(matches!(
                dev.mig_device_by_index(7),
                Err(NvmlError::InvalidArg)
            ));
            let procs = dev.running_compute_processes().unwrap();
            assert_eq!(procs.len(), r.processes.len());
            assert!(procs.iter().all(|p| p.gpu_instance_id.is_some()));
            for i in 0..instances {
                let inst = &s.mig.as_ref().unwrap()[i as usize];
                let m = dev.mig_device_by_index(i).unwrap();
                assert!(m.mig_is_mig_device_handle().unwrap());
                assert_eq!(
                    m.name().unwrap(),
                    format!("{} MIG {}", s.name, inst.profile)
                );
                assert_eq!(m.uuid().unwrap(), inst.uuid);
                assert_eq!(m.mig_parent_device().unwrap().index().unwrap(), gpu);
                let mem = m.memory_info().unwrap();
                let used = r
                    .mig
                    .iter()
                    .find(|x| x.gpu_instance == inst.gpu_instance)
                    .unwrap()
                    .memory_used_bytes
                    .unwrap() as u64;
                assert_eq!(mem.total, inst.memory_total_bytes);
                assert_eq!(mem.used, used);
                assert_eq!(mem.free, inst.memory_total_bytes - used);
                // SAFETY: raw calls with a live MIG handle.
                unsafe {
                    let mut id = 99;
                    let gi = nvml.lib().nvmlDeviceGetGpuInstanceId.as_ref().unwrap();
                    assert_eq!(gi(m.handle(), &mut id), 0);
                    assert_eq!(id, inst.gpu_instance);
                    let ci = nvml.lib().nvmlDeviceGetComputeInstanceId.as_ref().unwrap();
                    assert_eq!(ci(m.handle(), &mut id), 0);
                    assert_eq!(id, inst.compute_instance);
                    assert_eq!(gi(dev.handle(), &mut id), 3);
                }
                let by_uuid = nvml.device_by_uuid(inst.uuid.as_str()).unwrap();
                assert!(by_uuid.mig_is_mig_device_handle().unwrap());
                // A MIG handle has no GPU-wide readings.
                assert!(matches!(m.power_usage(), Err(NvmlError::NotSupported)));
            }
        }
        // A MIG-capable GPU without instances, with 12 NVLinks.
        let dev = nvml.device_by_index(2).unwrap();
        let r = ok_reading(&mut node, 2, t);
        assert!(dev.link_wrapper_for(11).is_active().unwrap());
        assert!(matches!(
            dev.link_wrapper_for(12).is_active(),
            Err(NvmlError::InvalidArg)
        ));
        // SAFETY: only passed back to the library.
        let h = unsafe { dev.handle() };
        let got = fields(&nvml, h, &[(138, u32::MAX), (138, 11), (138, 12)]);
        assert_eq!(
            got,
            vec![
                (0, 3, r.nvlink_transmit_bytes.unwrap() as u64 / 1024),
                (0, 3, r.nvlink_transmit_bytes.unwrap() as u64 / 12 / 1024),
                (2, 0, 0),
            ]
        );
        let mode = dev.mig_mode().unwrap();
        assert_eq!((mode.current, mode.pending), (0, 0));
        assert!(matches!(
            dev.mig_device_by_index(0),
            Err(NvmlError::NotFound)
        ));
        assert!(dev.running_compute_processes().unwrap()[0]
            .gpu_instance_id
            .is_none());
    }
);

child_test!(
    spark_answers_not_supported_for_what_it_lacks,
    [
        ("FAKE_NVML_SCENARIO", "dgx-spark"),
        ("FAKE_NVML_TIME", "90")
    ],
    {
        let mut node = sim("dgx-spark");
        let r = ok_reading(&mut node, 0, Duration::from_secs(90));
        let nvml = open().unwrap();
        assert_eq!(nvml.sys_driver_version().unwrap(), "580.95.05");
        let dev = nvml.device_by_index(0).unwrap();
        assert_eq!(dev.name().unwrap(), "NVIDIA GB10");
        assert_eq!(
            u64::from(dev.power_usage().unwrap()),
            round(r.power_watts.unwrap() * 1000.0)
        );
        let unsupported = |res: Result<(), NvmlError>, what: &str| {
            assert!(
                matches!(res, Err(NvmlError::NotSupported)),
                "{what}: {res:?}"
            );
        };
        unsupported(dev.memory_info().map(drop), "memory");
        unsupported(dev.bar1_memory_info().map(drop), "bar1");
        unsupported(dev.num_fans().map(drop), "fans");
        unsupported(dev.fan_speed(0).map(drop), "fan speed");
        unsupported(dev.mig_mode().map(drop), "mig");
        unsupported(dev.current_pcie_link_gen().map(drop), "pcie gen");
        unsupported(dev.max_pcie_link_gen().map(drop), "pcie max gen");
        unsupported(dev.max_pcie_link_width().map(drop), "pcie max width");
        unsupported(dev.link_wrapper_for(0).is_active().map(drop), "nvlink");
        // SAFETY: only passed back to the library.
        let h = unsafe { dev.handle() };
        let got = fields(&nvml, h, &[(82, 0), (138, u32::MAX), (83, 0)]);
        assert_eq!(got[0].0, 3, "no memory temperature sensor");
        assert_eq!(got[1].0, 3, "no NVLink");
        assert_eq!(got[2], (0, 3, round(r.energy_joules.unwrap() * 1000.0)));
    }
);

/// `nvmlDeviceGetRemappedRows` (not wrapped by nvml-wrapper): the return code and
/// `(correctable, uncorrectable, pending, failure)`.
fn remapped_rows(nvml: &Nvml, dev: &nvml_wrapper::Device<'_>) -> (u32, [u32; 4]) {
    let f = nvml.lib().nvmlDeviceGetRemappedRows.as_ref().unwrap();
    let mut v = [9u32; 4];
    let [a, b, c, d] = &mut v;
    // SAFETY: a live handle and four valid out-parameters.
    let rc = unsafe { f(dev.handle(), a, b, c, d) };
    (rc, v)
}

child_test!(
    health_faults_answer_as_the_simulator_says,
    [
        ("FAKE_NVML_SCENARIO", "fault-health"),
        ("FAKE_NVML_TIME", "4"),
        ("FAKE_NVML_PCIE_DELAY_MS", "0"),
    ],
    {
        use nvml_wrapper::enum_wrappers::device::RetirementCause;
        use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;

        let t = Duration::from_secs(4);
        let mut node = sim("fault-health");
        let nvml = open().unwrap();
        assert_eq!(nvml.device_count().unwrap(), 15);
        let dev = |i: u32| nvml.device_by_index(i).unwrap();
        // GPU 4: link 2 down, the others up.
        let active: Vec<bool> = (0..18)
            .map(|l| dev(4).link_wrapper_for(l).is_active().unwrap())
            .collect();
        assert_eq!(active.iter().filter(|a| !**a).count(), 1);
        assert!(!active[2]);
        // GPU 5: x8 of x16; GPU 8: Gen4 of Gen5; the maximum stays.
        assert_eq!(dev(5).current_pcie_link_width().unwrap(), 8);
        assert_eq!(dev(5).max_pcie_link_width().unwrap(), 16);
        assert_eq!(dev(8).current_pcie_link_gen().unwrap(), 4);
        assert_eq!(dev(8).max_pcie_link_gen().unwrap(), 5);
        // GPU 6: the power brake, as nvml.h numbers the bits.
        let r = ok_reading(&mut node, 6, t);
        let bits = dev(6).current_throttle_reasons().unwrap().bits();
        assert_eq!(bits, throttle_bits(&r));
        assert_eq!(bits & (1 << 3 | 1 << 7), 1 << 3 | 1 << 7);
        // GPU 7: two data CRC errors per occurrence, at 3 and 4 s; no recovery.
        let gpu7 = dev(7);
        let link = gpu7.link_wrapper_for(0);
        assert_eq!(link.error_counter(ErrorCounter::DlCrcData).unwrap(), 4);
        assert_eq!(link.error_counter(ErrorCounter::DlRecovery).unwrap(), 0);
        // GPU 10: more uncorrectable errors than spare rows; GPU 9: a row retired after
        // corrected errors, pending.
        assert_eq!(remapped_rows(&nvml, &dev(10)), (0, [0, 512, 1, 1]));
        assert_eq!(remapped_rows(&nvml, &dev(9)), (0, [1, 0, 1, 0]));
        // GPUs 12 and 13 (V100, Gen3): pages retired, pending until the reset; no row remapping.
        assert_eq!(dev(12).max_pcie_link_gen().unwrap(), 3);
        assert_eq!(remapped_rows(&nvml, &dev(12)).0, 3, "NOT_SUPPORTED");
        for (gpu, cause, pages) in [
            (12, RetirementCause::MultipleSingleBitEccErrors, 1),
            (12, RetirementCause::DoubleBitEccError, 0),
            (13, RetirementCause::MultipleSingleBitEccErrors, 0),
            (13, RetirementCause::DoubleBitEccError, 1),
        ] {
            let got = dev(gpu).retired_pages(cause).unwrap();
            assert_eq!(got.len(), pages, "GPU {gpu} {cause:?}");
            assert!(got.iter().all(|p| p.address > 0 && p.timestamp > 0));
            assert!(dev(gpu).are_pages_pending_retired().unwrap());
        }
        assert_eq!(
            dev(0)
                .link_wrapper_for(0)
                .error_counter(ErrorCounter::DlRecovery)
                .unwrap(),
            0
        );
        assert!(matches!(
            dev(0).retired_pages(RetirementCause::DoubleBitEccError),
            Err(NvmlError::NotSupported)
        ));
    }
);

child_test!(
    health_faults_clear_as_the_simulator_says,
    [
        ("FAKE_NVML_SCENARIO", "fault-health"),
        ("FAKE_NVML_TIME", "13"),
        ("FAKE_NVML_PCIE_DELAY_MS", "0"),
    ],
    {
        use nvml_wrapper::enum_wrappers::device::RetirementCause;

        let nvml = open().unwrap();
        let dev = |i: u32| nvml.device_by_index(i).unwrap();
        assert!(dev(4).link_wrapper_for(2).is_active().unwrap());
        assert_eq!(dev(5).current_pcie_link_width().unwrap(), 16);
        assert_eq!(
            dev(6).current_throttle_reasons().unwrap().bits() & (1 << 7),
            0
        );
        // The resets at 12 s: volatile counters from 0, aggregate ones kept, remaps and
        // retirements applied.
        let volatile = dev(2)
            .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .unwrap();
        let aggregate = dev(2)
            .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate)
            .unwrap();
        assert_eq!((volatile, aggregate), (0, 1));
        assert_eq!(remapped_rows(&nvml, &dev(2)), (0, [0, 1, 0, 0]));
        assert_eq!(remapped_rows(&nvml, &dev(10)), (0, [0, 512, 0, 1]));
        assert!(!dev(13).are_pages_pending_retired().unwrap());
        assert_eq!(
            dev(13)
                .retired_pages(RetirementCause::DoubleBitEccError)
                .unwrap()
                .len(),
            1
        );
    }
);

child_test!(
    lost_gpu_answers_gpu_is_lost_and_reports_its_xid_once,
    [
        ("FAKE_NVML_SCENARIO", "fault-gpu-lost"),
        ("FAKE_NVML_START", "29.5"),
        ("FAKE_NVML_PCIE_DELAY_MS", "0"),
    ],
    {
        let nvml = open().unwrap();
        let started = Instant::now();
        let lost = nvml.device_by_index(3).unwrap();
        let healthy = nvml.device_by_index(2).unwrap();
        assert!(lost.temperature(TemperatureSensor::Gpu).is_ok());
        let set = nvml.create_event_set().unwrap();
        let set = lost
            .register_events(EventTypes::CRITICAL_XID_ERROR, set)
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(400),
            "too slow to test"
        );
        // No event before the loss.
        assert!(matches!(set.wait(100), Err(NvmlError::Timeout)));
        std::thread::sleep(Duration::from_millis(800).saturating_sub(started.elapsed()));

        assert!(matches!(
            lost.temperature(TemperatureSensor::Gpu),
            Err(NvmlError::GpuLost)
        ));
        assert!(matches!(lost.memory_info(), Err(NvmlError::GpuLost)));
        assert!(matches!(lost.power_usage(), Err(NvmlError::GpuLost)));
        assert!(matches!(
            lost.field_values_for(&[FieldId(83)]),
            Err(NvmlError::GpuLost)
        ));
        // Identity still answers, as does the handle lookup.
        let node = sim("fault-gpu-lost");
        assert_eq!(lost.uuid().unwrap(), node.gpu(3).unwrap().uuid);
        assert!(lost.name().is_ok() && lost.pci_info().is_ok() && lost.serial().is_ok());
        assert_eq!(nvml.device_by_index(3).unwrap().index().unwrap(), 3);
        // The other GPUs are unaffected.
        assert!(healthy.power_usage().unwrap() > 0);
        assert!(healthy.memory_info().is_ok());

        let e = set.wait(1000).unwrap();
        // SAFETY: handles are only compared.
        assert_eq!(unsafe { e.device.handle() }, unsafe { lost.handle() });
        assert!(e.event_type.contains(EventTypes::CRITICAL_XID_ERROR));
        assert!(matches!(e.event_data, Some(XidError::Value(79))));
        assert!(matches!(set.wait(200), Err(NvmlError::Timeout)));
    }
);

child_test!(
    xid_events_match_the_simulator_counts,
    [
        ("FAKE_NVML_SCENARIO", "fault-xid-storm"),
        ("FAKE_NVML_START", "19.5"),
    ],
    {
        // GPU 2 reports XID 13 every 2 s from 10 s, GPUs 4 and 6 XID 31 every 7 s from 15 and
        // 16 s. From 19.5 s to about 22.5 s: XID 13 at 20 and 22 s, XID 31 on GPU 4 at 22 s;
        // nothing from before 19.5 s.
        let nvml = open().unwrap();
        let started = Instant::now();
        let mut set = nvml.create_event_set().unwrap();
        let mut handles = BTreeMap::new();
        for i in 0..8 {
            let dev = nvml.device_by_index(i).unwrap();
            // SAFETY: handles are only compared.
            handles.insert(unsafe { dev.handle() } as usize, i as usize);
            set = dev
                .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                .unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_millis(300),
            "too slow to test"
        );
        let mut got: BTreeMap<(usize, u32), u64> = BTreeMap::new();
        while started.elapsed() < Duration::from_secs(3) {
            match set.wait(100) {
                Ok(e) => {
                    // SAFETY: handles are only compared.
                    let gpu = handles[&(unsafe { e.device.handle() } as usize)];
                    let Some(XidError::Value(xid)) = e.event_data else {
                        panic!("XID event without a value")
                    };
                    *got.entry((gpu, xid as u32)).or_default() += 1;
                }
                Err(NvmlError::Timeout) => {}
                Err(e) => panic!("wait: {e}"),
            }
        }
        assert!(
            started.elapsed() < Duration::from_millis(3400),
            "too slow to test"
        );
        let mut node = sim("fault-xid-storm");
        let mut want = BTreeMap::new();
        for gpu in 0..8 {
            let before = ok_reading(&mut node, gpu, Duration::from_millis(19_500)).xid_counts;
            let after = ok_reading(&mut node, gpu, Duration::from_millis(22_500)).xid_counts;
            for (xid, n) in after {
                let grew = n - before.get(&xid).copied().unwrap_or(0);
                if grew > 0 {
                    want.insert((gpu, xid), grew);
                }
            }
        }
        assert_eq!(want, BTreeMap::from([((2, 13), 2), ((4, 31), 1)]));
        assert_eq!(got, want);
    }
);

child_test!(
    uninitialized_window_needs_a_new_init,
    [("FAKE_NVML_UNINITIALIZED", "1.0:2.0")],
    {
        let before = Instant::now();
        let nvml = open().unwrap();
        let init = nvml.lib().nvmlInit_v2.as_ref().unwrap();
        assert_eq!(nvml.device_count().unwrap(), 8);
        assert!(
            before.elapsed() < Duration::from_millis(800),
            "too slow to test"
        );
        std::thread::sleep(Duration::from_millis(1300).saturating_sub(before.elapsed()));
        assert!(matches!(nvml.device_count(), Err(NvmlError::Uninitialized)));
        // SAFETY: raw init call.
        assert_eq!(unsafe { init() }, 1, "init fails during the reset");
        std::thread::sleep(Duration::from_millis(2300).saturating_sub(before.elapsed()));
        // The reset ended the old session: calls fail until a new init.
        assert!(matches!(nvml.device_count(), Err(NvmlError::Uninitialized)));
        // SAFETY: raw init call.
        assert_eq!(unsafe { init() }, 0);
        assert_eq!(nvml.device_count().unwrap(), 8);
    }
);

child_test!(
    hung_gpu_blocks_only_its_own_calls,
    [
        ("FAKE_NVML_TIME", "10"),
        ("FAKE_NVML_HANG_GPU", "1"),
        ("FAKE_NVML_HANG_AFTER", "5"),
    ],
    {
        let nvml: &'static Nvml = Box::leak(Box::new(open().unwrap()));
        assert!(nvml.device_by_index(0).unwrap().power_usage().is_ok());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = nvml.device_by_index(1).map(|d| d.power_usage());
            let _ = tx.send(r.is_ok());
        });
        assert!(matches!(
            rx.recv_timeout(Duration::from_millis(500)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        ));
        // The driver lock is not held by the hung call.
        assert!(nvml.device_by_index(2).unwrap().power_usage().is_ok());
    }
);

child_test!(
    unloadable_scenario_fails_init,
    [("FAKE_NVML_SCENARIO", "/nonexistent/scenario.toml")],
    {
        assert!(matches!(open(), Err(NvmlError::Unknown)));
    }
);

/// `fault-gpu-lost` with GPU 3 coming back at 30.8 s, written to a file next to this binary.
fn recovering_scenario() -> PathBuf {
    let text = Scenario::builtin_text("fault-gpu-lost").unwrap();
    let path = profile_dir().join("fake-nvml-test-recovering.toml");
    // The XID 79 fault is the file's last table.
    std::fs::write(&path, format!("{text}\nrecover_at_s = 30.8\n")).unwrap();
    path
}

#[test]
fn recovered_gpu_answers_again_without_a_second_loss_event() {
    let path = recovering_scenario();
    let path = path.to_str().unwrap();
    in_child(
        "recovered_gpu_answers_again_without_a_second_loss_event",
        &[("FAKE_NVML_SCENARIO", path), ("FAKE_NVML_START", "29.8")],
        || {
            let mut node = Node::new(Scenario::load(path).unwrap());
            assert!(node
                .reading(3, Duration::from_millis(30_300))
                .unwrap()
                .ok()
                .is_none());
            assert!(node
                .reading(3, Duration::from_millis(31_300))
                .unwrap()
                .ok()
                .is_some());
            let nvml = open().unwrap();
            let started = Instant::now();
            let dev = nvml.device_by_index(3).unwrap();
            let set = nvml.create_event_set().unwrap();
            let set = dev
                .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                .unwrap();
            assert!(
                started.elapsed() < Duration::from_millis(150),
                "too slow to test"
            );
            std::thread::sleep(Duration::from_millis(500).saturating_sub(started.elapsed()));
            assert!(matches!(dev.power_usage(), Err(NvmlError::GpuLost)));
            let e = set.wait(100).unwrap();
            assert!(matches!(e.event_data, Some(XidError::Value(79))));
            std::thread::sleep(Duration::from_millis(1500).saturating_sub(started.elapsed()));
            assert!(dev.power_usage().unwrap() > 0);
            // The simulator now counts XID 79 once; it was delivered already.
            assert!(matches!(set.wait(200), Err(NvmlError::Timeout)));
        },
    );
}

// FAKE_NVML_LATENCY: a listed function takes its latency, others the `*` one, and calls for
// two GPUs on two threads overlap (the sleep is outside the driver lock), as on a real driver.
child_test!(
    latency_applies_per_function_and_calls_of_two_gpus_overlap,
    [
        ("FAKE_NVML_SCENARIO", "dgx-h100"),
        ("FAKE_NVML_TIME", "60"),
        ("FAKE_NVML_LATENCY", "nvmlDeviceGetPowerUsage=40000,*=0")
    ],
    {
        let nvml = open().unwrap();
        let (d0, d1) = (
            nvml.device_by_index(0).unwrap(),
            nvml.device_by_index(1).unwrap(),
        );
        let t = Instant::now();
        d0.temperature(TemperatureSensor::Gpu).unwrap();
        assert!(t.elapsed() < Duration::from_millis(20), "{:?}", t.elapsed());
        let t = Instant::now();
        d0.power_usage().unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );
        let busy = busy_ns(&nvml);
        let t = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| d0.power_usage().unwrap());
            s.spawn(|| d1.power_usage().unwrap());
        });
        let both = t.elapsed();
        assert!(
            both >= Duration::from_millis(40) && both < Duration::from_millis(75),
            "two GPUs' calls took {both:?}: they did not overlap"
        );
        assert!(
            busy_ns(&nvml) - busy < 20_000_000,
            "the latency is a sleep, not busy time"
        );
    }
);

/// `nvmlDeviceGetGpuFabricInfoV` with the struct versions of NVIDIA's header. The layout the
/// fake writes and nvml-wrapper-sys reads is pinned to what nvidia-ml-py 13.615.71 (NVIDIA's
/// own Python binding, `c_nvmlGpuFabricInfo_v2_t`/`_v3_t` and `nvmlGpuFabricInfo_v2`/`_v3`)
/// says: v2 36 bytes, v3 40, healthMask at 32, healthSummary at 36, versions 0x02000024 and
/// 0x03000028 (`tests/pynvml_structs.py` prints them).
#[test]
fn fabric_structs_are_nvidia_ml_py_layouts() {
    use nvml_wrapper_sys::bindings::{nvmlGpuFabricInfo_v2_t, nvmlGpuFabricInfo_v3_t};
    assert_eq!(std::mem::size_of::<nvmlGpuFabricInfo_v2_t>(), 36);
    assert_eq!(std::mem::size_of::<nvmlGpuFabricInfo_v3_t>(), 40);
    assert_eq!(std::mem::offset_of!(nvmlGpuFabricInfo_v3_t, healthMask), 32);
    assert_eq!(
        std::mem::offset_of!(nvmlGpuFabricInfo_v3_t, healthSummary),
        36
    );
    // The version words as NVML builds them from these structs (`sizeof | v << 24`) are
    // nvidia-ml-py's `nvmlGpuFabricInfo_v2`/`_v3`, in its decimal (issue 43: this compared
    // two spellings of one literal).
    let version = |size: usize, v: u32| u32::try_from(size).unwrap() | v << 24;
    assert_eq!(
        version(std::mem::size_of::<nvmlGpuFabricInfo_v2_t>(), 2),
        33_554_468
    );
    assert_eq!(
        version(std::mem::size_of::<nvmlGpuFabricInfo_v3_t>(), 3),
        50_331_688
    );
}

child_test!(
    fabric_info_answers_in_the_header_struct_versions,
    [
        ("FAKE_NVML_SCENARIO", "fault-fabric"),
        ("FAKE_NVML_TIME", "5")
    ],
    {
        use dgx_pixels_sim::labels::{FabricHealthFlag, FabricState};
        use nvml_wrapper_sys::bindings::{nvmlGpuFabricInfo_v2_t, nvmlGpuFabricInfo_v3_t};
        let nvml = open().unwrap();
        let mut node = sim("fault-fabric");
        let lib = nvml.lib();
        let get = lib.nvmlDeviceGetGpuFabricInfoV.as_ref().unwrap();
        for gpu in 0..4u32 {
            let r = ok_reading(&mut node, gpu as usize, Duration::from_secs(5));
            let f = r.fabric.unwrap();
            let dev = nvml.device_by_index(gpu).unwrap();
            // SAFETY: a live handle and structs of the size their version says.
            unsafe {
                let h = dev.handle();
                let mut v3: nvmlGpuFabricInfo_v3_t = std::mem::zeroed();
                v3.version = 0x0400_0030; // a version this driver does not know
                assert_eq!(get(h, &mut v3), 25);
                v3.version = 0x0300_0028;
                assert_eq!(get(h, &mut v3), 0);
                assert_eq!(FabricState::from_nvml(v3.state), f.state);
                assert_eq!(v3.status, 0);
                // GPU 0 is in another clique at 5 s (fault-fabric's clique_id fault); GPU 1,
                // still registering, answers a zeroed clique (and cluster) as the driver does.
                assert_eq!(v3.cliqueId, f.clique_id);
                assert_eq!(v3.cliqueId, [32767, 0, 32766, 32766][gpu as usize]);
                assert_eq!(FabricHealthFlag::decode(v3.healthMask), f.health);
                let hex: String = v3.clusterUuid.iter().map(|b| format!("{b:02x}")).collect();
                assert_eq!(hex, f.cluster_uuid.replace('-', ""));
                // GPU 2's unhealthy route: summary unhealthy; GPU 3's bandwidth: limited.
                let summary = [1, 1, 2, 3][gpu as usize];
                assert_eq!(v3.healthSummary, summary, "GPU {gpu}");
                // A v2 caller gets the same, and nothing past its 36 bytes.
                let mut buf = [0xAAu8; 40];
                buf[..4].copy_from_slice(&0x0200_0024u32.to_ne_bytes());
                let p = buf.as_mut_ptr().cast::<nvmlGpuFabricInfo_v2_t>();
                assert_eq!(get(h, p.cast()), 0);
                let v2 = p.read_unaligned();
                assert_eq!(v2.healthMask, v3.healthMask);
                assert_eq!(v2.state, v3.state);
                assert_eq!(buf[36..], [0xAA; 4]);
            }
        }
        let f1 = ok_reading(&mut node, 1, Duration::from_secs(5))
            .fabric
            .unwrap();
        assert_eq!(f1.state, Some(FabricState::InProgress));
    }
);

// No fabric on the part: Hopper answers success with state NOT_SUPPORTED (0), Volta the error
// NOT_SUPPORTED (3).
child_test!(
    fabric_info_without_a_fabric_is_not_supported,
    [
        ("FAKE_NVML_SCENARIO", "fault-health"),
        ("FAKE_NVML_TIME", "1")
    ],
    {
        use nvml_wrapper_sys::bindings::nvmlGpuFabricInfo_v3_t;
        let nvml = open().unwrap();
        let get = nvml.lib().nvmlDeviceGetGpuFabricInfoV.as_ref().unwrap();
        for (gpu, code) in [(0u32, 0u32), (12, 3)] {
            let dev = nvml.device_by_index(gpu).unwrap();
            // SAFETY: a live handle and a v3 struct.
            unsafe {
                let mut v3: nvmlGpuFabricInfo_v3_t = std::mem::zeroed();
                v3.version = 0x0300_0028;
                assert_eq!(get(dev.handle(), &mut v3), code, "GPU {gpu}");
                assert_eq!(v3.state, 0);
            }
        }
    }
);

/// `nvmlDeviceGetPlatformInfo`'s struct as nvidia-ml-py 13.615.71 has it
/// (`c_nvmlPlatformInfo_v1_t`/`_v2_t`, `nvmlPlatformInfo_v1`/`_v2`, printed by
/// `tests/pynvml_structs.py`): both 44 bytes; v2 has chassisSerialNumber at 20, slotNumber 36,
/// trayIndex 37, hostId 38, peerType 39, moduleId 40; versions 0x0100002c and 0x0200002c.
#[test]
fn platform_structs_are_nvidia_ml_py_layouts() {
    use nvml_wrapper_sys::bindings::{nvmlPlatformInfo_v1_t, nvmlPlatformInfo_v2_t};
    use std::mem::{offset_of, size_of};
    assert_eq!(size_of::<nvmlPlatformInfo_v1_t>(), 44);
    assert_eq!(size_of::<nvmlPlatformInfo_v2_t>(), 44);
    assert_eq!(offset_of!(nvmlPlatformInfo_v2_t, chassisSerialNumber), 20);
    assert_eq!(offset_of!(nvmlPlatformInfo_v2_t, slotNumber), 36);
    assert_eq!(offset_of!(nvmlPlatformInfo_v2_t, trayIndex), 37);
    assert_eq!(offset_of!(nvmlPlatformInfo_v2_t, hostId), 38);
    assert_eq!(offset_of!(nvmlPlatformInfo_v2_t, peerType), 39);
    assert_eq!(offset_of!(nvmlPlatformInfo_v2_t, moduleId), 40);
    // nvidia-ml-py's `nvmlPlatformInfo_v1`/`_v2`, in its decimal, from these structs' sizes.
    let version = |size: usize, v: u32| u32::try_from(size).unwrap() | v << 24;
    assert_eq!(version(size_of::<nvmlPlatformInfo_v1_t>(), 1), 16_777_260);
    assert_eq!(version(size_of::<nvmlPlatformInfo_v2_t>(), 2), 33_554_476);
}

child_test!(
    platform_info_answers_struct_v2_from_the_scenario,
    [
        ("FAKE_NVML_SCENARIO", "gb200-nvl72-tray"),
        ("FAKE_NVML_TIME", "5")
    ],
    {
        use nvml_wrapper_sys::bindings::nvmlPlatformInfo_v2_t;
        let nvml = open().unwrap();
        let get = nvml.lib().nvmlDeviceGetPlatformInfo.as_ref().unwrap();
        for gpu in 0..4u32 {
            let dev = nvml.device_by_index(gpu).unwrap();
            // SAFETY: a live handle and a v2 struct.
            unsafe {
                let mut v: nvmlPlatformInfo_v2_t = std::mem::zeroed();
                v.version = 0x0100_002c; // v1: other fields, refused
                assert_eq!(get(dev.handle(), &mut v), 25);
                v.version = 0x0200_002c;
                assert_eq!(get(dev.handle(), &mut v), 0);
                // The scenario's values (crates/sim/scenarios/gb200-nvl72-tray.toml).
                let serial: Vec<u8> = v
                    .chassisSerialNumber
                    .iter()
                    .copied()
                    .take_while(|b| *b != 0)
                    .collect();
                assert_eq!(serial, b"1823124000137");
                assert_eq!((v.slotNumber, v.trayIndex, v.hostId), (12, 5, 1));
                assert_eq!(v.moduleId, gpu as u8 + 1);
            }
        }
    }
);

child_test!(
    platform_info_without_a_place_is_not_supported,
    [("FAKE_NVML_SCENARIO", "dgx-h100"), ("FAKE_NVML_TIME", "1")],
    {
        use nvml_wrapper_sys::bindings::nvmlPlatformInfo_v2_t;
        let nvml = open().unwrap();
        let get = nvml.lib().nvmlDeviceGetPlatformInfo.as_ref().unwrap();
        let dev = nvml.device_by_index(0).unwrap();
        // SAFETY: a live handle and a v2 struct.
        unsafe {
            let mut v: nvmlPlatformInfo_v2_t = std::mem::zeroed();
            v.version = 0x0200_002c;
            assert_eq!(get(dev.handle(), &mut v), 3);
        }
    }
);

/// `dgx-b200` with 9 symbol errors on GPU 0's link 5 from 1 s, written next to this binary.
fn nvlink5_scenario() -> PathBuf {
    let text = Scenario::builtin_text("dgx-b200").unwrap();
    let path = profile_dir().join("fake-nvml-test-nvlink5.toml");
    let fault = "[[faults]]\nkind = \"nvlink_errors\"\ngpu = 0\nlink = 5\n\
                 error_type = \"symbol\"\nerrors = 9\nat_s = 1\n";
    std::fs::write(&path, format!("{text}\n{fault}")).unwrap();
    path
}

#[test]
fn blackwell_answers_nvlink5_error_fields_per_link_and_not_the_legacy_call() {
    let path = nvlink5_scenario();
    let path = path.to_str().unwrap();
    in_child(
        "blackwell_answers_nvlink5_error_fields_per_link_and_not_the_legacy_call",
        &[("FAKE_NVML_SCENARIO", path), ("FAKE_NVML_TIME", "5")],
        || {
            use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
            let nvml = open().unwrap();
            let dev = nvml.device_by_index(0).unwrap();
            // SAFETY: only passed back to the library.
            let h = unsafe { dev.handle() };
            // Symbol errors (221) of links 5 and 4, receive errors (208) of link 5, and a link
            // the 18-link GPU lacks.
            let got = fields(&nvml, h, &[(221, 5), (221, 4), (208, 5), (221, 18)]);
            assert_eq!(got, vec![(0, 3, 9), (0, 3, 0), (0, 3, 0), (2, 0, 0)]);
            assert!(matches!(
                dev.link_wrapper_for(0)
                    .error_counter(ErrorCounter::DlReplay),
                Err(NvmlError::NotSupported)
            ));
        },
    );
}

child_test!(
    hopper_answers_the_legacy_nvlink_call_and_not_the_nvlink5_fields,
    [("FAKE_NVML_SCENARIO", "dgx-h100"), ("FAKE_NVML_TIME", "1")],
    {
        use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
        let nvml = open().unwrap();
        let dev = nvml.device_by_index(0).unwrap();
        // SAFETY: only passed back to the library.
        let h = unsafe { dev.handle() };
        assert_eq!(fields(&nvml, h, &[(221, 0), (208, 0)]), vec![(3, 0, 0); 2]);
        let replays = dev
            .link_wrapper_for(0)
            .error_counter(ErrorCounter::DlReplay);
        assert_eq!(replays.unwrap(), 0);
    }
);

child_test!(
    mps_clients_are_listed_by_the_mps_call_only,
    [
        ("FAKE_NVML_SCENARIO", "dgx-a100-mig"),
        ("FAKE_NVML_TIME", "60")
    ],
    {
        let nvml = open().unwrap();
        let mut node = sim("dgx-a100-mig");
        // GPU 5 is shared through MPS: its two processes are MPS clients only.
        let r = ok_reading(&mut node, 5, Duration::from_secs(60));
        let dev = nvml.device_by_index(5).unwrap();
        let mut clients: Vec<u32> = dev
            .mps_running_compute_processes()
            .unwrap()
            .iter()
            .map(|p| p.pid)
            .collect();
        clients.sort_unstable();
        let want: Vec<u32> = r.processes.iter().map(|p| p.pid).collect();
        assert_eq!(want.len(), 2);
        assert_eq!(clients, want);
        assert!(dev.running_compute_processes().unwrap().is_empty());
        // GPU 4 is time-sliced: compute processes, no MPS client.
        let dev = nvml.device_by_index(4).unwrap();
        assert_eq!(dev.running_compute_processes().unwrap().len(), 2);
        assert!(dev.mps_running_compute_processes().unwrap().is_empty());
    }
);

child_test!(
    without_mps_support_the_mps_call_is_not_supported,
    [
        ("FAKE_NVML_SCENARIO", "dgx-a100-mig"),
        ("FAKE_NVML_TIME", "60"),
        ("FAKE_NVML_MPS", "0")
    ],
    {
        let nvml = open().unwrap();
        let dev = nvml.device_by_index(5).unwrap();
        assert!(matches!(
            dev.mps_running_compute_processes(),
            Err(NvmlError::NotSupported)
        ));
    }
);
