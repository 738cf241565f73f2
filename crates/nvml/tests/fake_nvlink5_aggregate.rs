//! Issue 43: a Blackwell driver that answers the NVLink 5 counters only for the GPU as a whole
//! (aggregate scope, `UINT_MAX`, as DCGM reads them) and refuses them per link
//! (`FAKE_NVML_NVLINK5_SCOPE=aggregate`). Before, the counters were read per link only and the
//! refusal switched them off for good: this node served no NVLink error at all. Now the totals
//! are served, no link is named, and the per-link scope is asked again after a growing pause.
#![allow(clippy::unwrap_used)]

mod common;

use common::{calls, nvlink5_totals, nvlink_errors, nvlink_link_errors};

// One test in this file: the fake reads its environment at init, for this process.
#[test]
fn a_driver_refusing_per_link_scopes_still_serves_the_gpu_totals() {
    let polls = 4;
    let out = common::b200_after_polls(
        "nvlink5-aggregate",
        &[("FAKE_NVML_NVLINK5_SCOPE", "aggregate")],
        polls,
    );
    let gpus = 8;
    assert_eq!(nvlink_errors(&out, "0"), nvlink5_totals(9.0));
    assert_eq!(nvlink_errors(&out, "7"), nvlink5_totals(0.0));
    // The driver names no link.
    assert_eq!(nvlink_link_errors(&out), []);
    // Every reading asks for the totals; the refused per-link scope is asked at the first
    // reading and again at the fourth (after 2 skipped), not every reading nor never again.
    assert_eq!(calls("nvmlDeviceGetFieldValues(nvlink)"), polls * gpus);
    assert_eq!(calls("nvmlDeviceGetFieldValues(nvlink per link)"), 2 * gpus);
    // One set of types: the legacy call is not asked after the first reading.
    assert_eq!(calls("nvmlDeviceGetNvLinkErrorCounter"), 4 * gpus);
}
