//! The fake's GPM calls through nvml-wrapper and nvml-wrapper-sys's own struct definitions,
//! loaded as the exporter loads the real library: support, sample buffers, metrics averaged
//! over the samples' interval (checked against the simulator), version and handle checks.
//!
//! Each test runs in a child process with its own `FAKE_NVML_*` variables (the fake is
//! per-process state configured at init), as in `abi.rs`.
#![allow(clippy::unwrap_used)]

use fake_support::{child, child_test, Fake};
use std::time::Duration;

use dgx_pixels_sim::{profile, GpuState, Node, Scenario};
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::{gpm_metrics_get, GpmSample};
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::{
    nvmlGpmMetricsGet_t, nvmlGpmSupport_t, NVML_GPM_METRICS_GET_VERSION, NVML_GPM_SUPPORT_VERSION,
};

const CHILD: &str = "FAKE_NVML_TEST_CHILD";
const MIB: f64 = 1024.0 * 1024.0;

/// Runs `body` in a child process with `env` (and no other `FAKE_NVML_*` variable).
fn in_child(test: &str, env: &[(&str, &str)], body: impl FnOnce()) {
    child::in_child(Fake::Nvml, CHILD, test, &["FAKE_NVML_"], env, body);
}

/// The fake through nvml-wrapper, as the exporter opens the real library (from beside this
/// test binary, `<target>/<profile>/libfake_nvml.so`, built by [`in_child`]).
fn open() -> Nvml {
    Nvml::builder()
        .lib_path(Fake::Nvml.path().unwrap().as_os_str())
        .init()
        .unwrap()
}

fn control(nvml: &Nvml, name: &[u8], sample: Option<&GpmSample<'_>>) -> u64 {
    // SAFETY: the fake exports these symbols with these signatures; the handle is live.
    unsafe {
        match sample {
            Some(s) => {
                let f = nvml
                    .lib()
                    .__library
                    .get::<unsafe extern "C" fn(*mut std::ffi::c_void) -> u64>(name)
                    .unwrap();
                f(s.handle().cast())
            }
            None => {
                let f = nvml
                    .lib()
                    .__library
                    .get::<unsafe extern "C" fn() -> u64>(name)
                    .unwrap();
                f()
            }
        }
    }
}

/// The metrics the fake models, in the order `expected` answers them.
const MODELLED: [GpmMetricId; 12] = [
    GpmMetricId::GraphicsUtil,
    GpmMetricId::SmUtil,
    GpmMetricId::SmOccupancy,
    GpmMetricId::AnyTensorUtil,
    GpmMetricId::DramBwUtil,
    GpmMetricId::Fp64Util,
    GpmMetricId::Fp32Util,
    GpmMetricId::Fp16Util,
    GpmMetricId::PcieTxPerSec,
    GpmMetricId::PcieRxPerSec,
    GpmMetricId::NvlinkTotalRxPerSec,
    GpmMetricId::NvlinkTotalTxPerSec,
];

/// The simulator's profile of `gpu` averaged over `[from, to)` on a 1 ms grid (sample times are
/// whole milliseconds), in GPM units; at one instant, that instant's.
fn expected(node: &mut Node, gpu: usize, from_ns: u64, to_ns: u64) -> Vec<f64> {
    let g = node.gpu(gpu).unwrap().clone();
    let (from, to) = (from_ns / 1_000_000, to_ns / 1_000_000);
    let mut sum = [0.0; 12];
    let grid: Vec<u64> = if to == from {
        vec![from]
    } else {
        (from..to).collect()
    };
    for ms in &grid {
        let Some(GpuState::Ok(r)) = node.reading(gpu, Duration::from_millis(*ms)) else {
            panic!("GPU {gpu} answers at {ms} ms")
        };
        let p = profile(&g, &r);
        let v = [
            p.gr_engine_active * 100.0,
            p.sm_active * 100.0,
            p.sm_occupancy * 100.0,
            p.tensor_active * 100.0,
            p.dram_active * 100.0,
            p.fp64_active * 100.0,
            p.fp32_active * 100.0,
            p.fp16_active * 100.0,
            p.pcie_tx_bytes_per_second / MIB,
            p.pcie_rx_bytes_per_second / MIB,
            p.nvlink_rx_bytes_per_second.unwrap() / MIB,
            p.nvlink_tx_bytes_per_second.unwrap() / MIB,
        ];
        for (s, x) in sum.iter_mut().zip(v) {
            *s += x;
        }
    }
    sum.iter().map(|s| s / grid.len() as f64).collect()
}

child_test!(gpm_is_supported_on_hopper, [("FAKE_NVML_TIME", "60")], {
    let nvml = open();
    for i in 0..nvml.device_count().unwrap() {
        assert!(nvml.device_by_index(i).unwrap().gpm_support().unwrap());
    }
});

child_test!(
    gpm_is_not_supported_before_hopper,
    [
        ("FAKE_NVML_SCENARIO", "dgx-a100-mig"),
        ("FAKE_NVML_TIME", "60")
    ],
    {
        let nvml = open();
        let dev = nvml.device_by_index(0).unwrap();
        assert!(!dev.gpm_support().unwrap());
        assert!(matches!(dev.gpm_sample(), Err(NvmlError::NotSupported)));
        let mig = dev.mig_device_by_index(0).unwrap();
        assert!(
            !mig.gpm_support().unwrap(),
            "MIG handles: per-instance GPM not served"
        );
        assert_eq!(control(&nvml, b"fake_nvml_gpm_live_samples", None), 0);
    }
);

child_test!(
    gpm_can_be_switched_off,
    [("FAKE_NVML_GPM", "0"), ("FAKE_NVML_TIME", "60")],
    {
        let nvml = open();
        let dev = nvml.device_by_index(0).unwrap();
        assert!(!dev.gpm_support().unwrap());
        assert!(matches!(dev.gpm_sample(), Err(NvmlError::NotSupported)));
    }
);

child_test!(
    gpm_can_be_denied,
    [("FAKE_NVML_GPM", "denied"), ("FAKE_NVML_TIME", "60")],
    {
        let nvml = open();
        let dev = nvml.device_by_index(0).unwrap();
        assert!(dev.gpm_support().unwrap(), "the part has GPM");
        assert!(matches!(dev.gpm_sample(), Err(NvmlError::NoPermission)));
        assert_eq!(control(&nvml, b"fake_nvml_gpm_live_samples", None), 0);
    }
);

child_test!(
    metrics_are_the_profile_averaged_over_the_samples_interval,
    [("FAKE_NVML_START", "61.05")],
    {
        let nvml = open();
        let dev = nvml.device_by_index(3).unwrap();
        let first = dev.gpm_sample().unwrap();
        std::thread::sleep(Duration::from_millis(1300));
        let second = dev.gpm_sample().unwrap();
        let (t1, t2) = (
            control(&nvml, b"fake_nvml_gpm_sample_time_ns", Some(&first)),
            control(&nvml, b"fake_nvml_gpm_sample_time_ns", Some(&second)),
        );
        assert!(t2 >= t1 + 1_300_000_000, "{t1} {t2}");
        let mut ids = MODELLED.to_vec();
        ids.push(GpmMetricId::Nvdec0Util);
        let got = gpm_metrics_get(&nvml, &first, &second, &ids).unwrap();
        let want = expected(
            &mut Node::new(Scenario::builtin("dgx-h100").unwrap()),
            3,
            t1,
            t2,
        );
        for ((id, r), w) in ids.iter().zip(&got).zip(&want) {
            let r = r.as_ref().unwrap();
            assert_eq!(r.metric_id, *id);
            assert!(
                (r.value - w).abs() <= 1e-9 * w.abs().max(1.0),
                "{id:?}: {} vs {w}",
                r.value
            );
            assert!(!r.metric_info.unit.is_empty());
        }
        assert!(
            matches!(got[12], Err(NvmlError::NotSupported)),
            "an id the fake does not model: {:?}",
            got[12]
        );
        // The workload moves within the interval: the average is not the last instant's.
        let last = expected(
            &mut Node::new(Scenario::builtin("dgx-h100").unwrap()),
            3,
            t2,
            t2,
        );
        assert_ne!(got[0].as_ref().unwrap().value, last[0]);
        // Every buffer is freed when dropped.
        assert_eq!(control(&nvml, b"fake_nvml_gpm_live_samples", None), 2);
        drop((first, second));
        assert_eq!(control(&nvml, b"fake_nvml_gpm_live_samples", None), 0);
    }
);

child_test!(
    structs_are_version_checked_and_handles_validated,
    [("FAKE_NVML_TIME", "60")],
    {
        let nvml = open();
        let (d0, d1) = (
            nvml.device_by_index(0).unwrap(),
            nvml.device_by_index(1).unwrap(),
        );
        let lib = nvml.lib();
        // SAFETY: plain calls with live device handles and zeroed, version-set structs.
        unsafe {
            let mut support: nvmlGpmSupport_t = std::mem::zeroed();
            support.version = NVML_GPM_SUPPORT_VERSION + 1;
            assert_eq!(lib.nvmlGpmQueryDeviceSupport(d0.handle(), &mut support), 25);
            assert_eq!(
                lib.nvmlGpmQueryDeviceSupport(d0.handle(), std::ptr::null_mut()),
                2
            );

            let (a, b) = (d0.gpm_sample().unwrap(), d1.gpm_sample().unwrap());
            let mut req: Box<nvmlGpmMetricsGet_t> = Box::new(std::mem::zeroed());
            req.numMetrics = 1;
            req.metrics[0].metricId = 2;
            req.sample1 = a.handle();
            req.sample2 = a.handle();
            req.version = NVML_GPM_METRICS_GET_VERSION + 1;
            assert_eq!(lib.nvmlGpmMetricsGet(&mut *req), 25, "version mismatch");
            req.version = NVML_GPM_METRICS_GET_VERSION;
            assert_eq!(lib.nvmlGpmMetricsGet(&mut *req), 0);
            assert_eq!(req.metrics[0].nvmlReturn, 0);
            req.numMetrics = 211;
            assert_eq!(
                lib.nvmlGpmMetricsGet(&mut *req),
                2,
                "more metrics than exist"
            );
            req.numMetrics = 1;
            req.sample2 = b.handle();
            assert_eq!(lib.nvmlGpmMetricsGet(&mut *req), 2, "samples of two GPUs");
            req.sample2 = 0x1234 as _;
            assert_eq!(lib.nvmlGpmMetricsGet(&mut *req), 2, "not a sample");
            assert_eq!(lib.nvmlGpmMetricsGet(std::ptr::null_mut()), 2);

            // An allocated but never filled buffer, and one freed.
            let mut empty = std::ptr::null_mut();
            assert_eq!(lib.nvmlGpmSampleAlloc(&mut empty), 0);
            req.sample2 = empty;
            assert_eq!(lib.nvmlGpmMetricsGet(&mut *req), 2, "an empty sample");
            assert_eq!(lib.nvmlGpmSampleFree(empty), 0);
            assert_eq!(lib.nvmlGpmSampleFree(empty), 2, "double free");
            assert_eq!(lib.nvmlGpmSampleGet(d0.handle(), empty), 2, "freed");
            assert_eq!(lib.nvmlGpmSampleGet(d0.handle(), std::ptr::null_mut()), 2);
        }
    }
);

child_test!(
    one_gpu_can_be_made_to_fail,
    [("FAKE_NVML_GPM_FAIL_GPU", "1"), ("FAKE_NVML_TIME", "60")],
    {
        let nvml = open();
        let failing = nvml.device_by_index(1).unwrap();
        assert!(
            failing.gpm_support().unwrap(),
            "supported, but sampling fails"
        );
        assert!(matches!(failing.gpm_sample(), Err(NvmlError::Unknown)));
        let ok = nvml.device_by_index(0).unwrap();
        let (a, b) = (ok.gpm_sample().unwrap(), ok.gpm_sample().unwrap());
        let got = gpm_metrics_get(&nvml, &a, &b, &[GpmMetricId::SmUtil]).unwrap();
        let t = control(&nvml, b"fake_nvml_gpm_sample_time_ns", Some(&a));
        let want = expected(
            &mut Node::new(Scenario::builtin("dgx-h100").unwrap()),
            0,
            t,
            t,
        );
        assert!((got[0].as_ref().unwrap().value - want[1]).abs() < 1e-9);
        drop((a, b));
        assert_eq!(
            control(&nvml, b"fake_nvml_gpm_live_samples", None),
            0,
            "the failed buffer is freed too"
        );
    }
);

/// The example H100 MIG scenario (GPM on Hopper, MIG on both GPUs).
const H100_MIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/scenarios/h100-mig.toml"
);

child_test!(
    a_mig_instance_is_sampled_through_its_gpu_and_answers_its_own_activity,
    [("FAKE_NVML_SCENARIO", H100_MIG), ("FAKE_NVML_TIME", "60")],
    {
        let nvml = open();
        let dev = nvml.device_by_index(0).unwrap();
        assert!(dev.gpm_support().unwrap());
        let (a, b) = (
            dev.gpm_mig_sample(1).unwrap(),
            dev.gpm_mig_sample(1).unwrap(),
        );
        let got = gpm_metrics_get(&nvml, &a, &b, &MODELLED).unwrap();
        // The frozen clock: one instant, that instant's instance activity.
        let mut node = Node::new(Scenario::load(H100_MIG).unwrap());
        let Some(GpuState::Ok(r)) = node.reading(0, Duration::from_secs(60)) else {
            panic!()
        };
        let active = r.readout.mig[0].graphics_engine_active_ratio.unwrap();
        let gr = got[0].as_ref().unwrap().value;
        assert!((gr - active * 100.0).abs() < 1e-9, "{gr} vs {active}");
        assert!(got[1].as_ref().unwrap().value > 0.0, "SM activity");
        // PCIe and NVLink are the GPU's, not an instance's.
        assert!(got[8..]
            .iter()
            .all(|r| matches!(r, Err(NvmlError::NotSupported))));
        // Another instance differs; one the GPU lacks is refused; samples of two instances,
        // or of an instance and the whole GPU, do not make an interval.
        let (c, d) = (
            dev.gpm_mig_sample(2).unwrap(),
            dev.gpm_mig_sample(2).unwrap(),
        );
        let other = gpm_metrics_get(&nvml, &c, &d, &MODELLED).unwrap();
        assert_ne!(other[0].as_ref().unwrap().value, gr);
        assert!(matches!(dev.gpm_mig_sample(9), Err(NvmlError::InvalidArg)));
        assert!(gpm_metrics_get(&nvml, &a, &d, &MODELLED).is_err());
        let whole = dev.gpm_sample().unwrap();
        assert!(gpm_metrics_get(&nvml, &a, &whole, &MODELLED).is_err());
        drop((a, b, c, d, whole));
        assert_eq!(control(&nvml, b"fake_nvml_gpm_live_samples", None), 0);
    }
);
