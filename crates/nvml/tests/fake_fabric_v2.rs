//! Issue 43: a driver that knows `nvmlGpuFabricInfo` struct v2 only (`FAKE_NVML_FABRIC_V3=0`
//! answers v3 `ARGUMENT_VERSION_MISMATCH`): the source asks again with v2 and serves the
//! fabric, its state and its health flags as with v3.
#![allow(clippy::unwrap_used)]

mod common;

use dgx_pixels_metrics::{Metric, Source};

// One test in this file: the fake reads its environment at init, for this process.
#[test]
fn a_driver_without_fabric_info_v3_still_serves_the_fabric() {
    let lib = common::fake_library();
    std::env::set_var("FAKE_NVML_SCENARIO", "gb200-nvl72-tray");
    std::env::set_var("FAKE_NVML_FABRIC_V3", "0");
    std::env::set_var("FAKE_NVML_TIME", "60");
    std::env::set_var("FAKE_NVML_PCIE_DELAY_MS", "0");
    let mut s = common::every_poll_slow(lib);
    let out = s.poll().unwrap().samples;
    let of = |m: Metric| out.iter().filter(move |x| x.metric == m);
    // The tray's four GPUs, one clique.
    let cliques: Vec<_> = of(Metric::GpuFabricInfo)
        .map(|x| x.label("clique_id").unwrap())
        .collect();
    assert_eq!(cliques, ["32766"; 4]);
    let states: Vec<_> = of(Metric::GpuFabricState)
        .filter(|x| x.value == 1.0)
        .map(|x| x.label("state").unwrap())
        .collect();
    assert_eq!(states, ["completed"; 4]);
    // The health mask is in v2: every flag is served.
    assert!(of(Metric::GpuFabricHealth).count() >= 4);
    // v3 was asked and refused, then v2: two calls per GPU.
    assert_eq!(common::calls("nvmlDeviceGetGpuFabricInfoV"), 2 * 4);
}
