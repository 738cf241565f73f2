//! Issue 43: a Blackwell driver that answers both the NVLink 5 counters and the legacy
//! per-link error counter call (`FAKE_NVML_NVLINK_LEGACY=1`). The GPU serves one set of NVLink
//! error types, the NVLink 5 one, not both; the legacy call is asked at the first reading only
//! (before the GPU is known to answer NVLink 5).
#![allow(clippy::unwrap_used)]

mod common;

use common::{calls, nvlink5_totals, nvlink_errors};
use dgx_pixels_metrics::Source;

// One test in this file: the fake reads its environment at init, for this process.
#[test]
fn blackwell_answering_both_families_serves_only_nvlink5() {
    let lib = common::fake_library();
    let path = common::b200_with_symbol_errors("nvlink5-one-set");
    std::env::set_var("FAKE_NVML_SCENARIO", &path);
    std::env::set_var("FAKE_NVML_NVLINK_LEGACY", "1");
    std::env::set_var("FAKE_NVML_TIME", "60");
    std::env::set_var("FAKE_NVML_PCIE_DELAY_MS", "0");
    let mut s = common::every_poll_slow(lib);
    let first = s.poll().unwrap().samples;
    let second = s.poll().unwrap().samples;
    std::fs::remove_file(&path).unwrap();
    // Already at the first reading, which asked both.
    assert_eq!(nvlink_errors(&first, "0"), nvlink5_totals(9.0));
    assert_eq!(nvlink_errors(&second, "0"), nvlink5_totals(9.0));
    let gpus = 8;
    // 18 links x 4 types at the first reading, none after.
    assert_eq!(calls("nvmlDeviceGetNvLinkErrorCounter"), gpus * 18 * 4);
}
