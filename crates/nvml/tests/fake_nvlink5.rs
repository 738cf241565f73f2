//! Against the fake libnvidia-ml on a Blackwell node (dgx-b200 with symbol errors on GPU 0's
//! link 5) whose driver answers the NVLink 5 counters in both scopes: the totals are read for
//! the GPU as a whole (aggregate scope, as DCGM reads them) and per link (which names the link),
//! one call each per GPU and slow reading, and served in place of the legacy types, whose call
//! the GPU answered "not supported" once and is not asked again.
#![allow(clippy::unwrap_used)]

mod common;

use common::{calls, nvlink5_totals, nvlink_errors, nvlink_link_errors};

// One test in this file: the fake reads its environment at init, for this process.
#[test]
fn blackwell_serves_the_nvlink5_counters_of_the_gpu_and_its_links() {
    let polls = 3;
    let out = common::b200_after_polls("nvlink5", &[], polls);
    let gpus = 8;
    assert_eq!(nvlink_errors(&out, "0"), nvlink5_totals(9.0));
    assert_eq!(nvlink_errors(&out, "1"), nvlink5_totals(0.0));
    // The link is named where it counted errors.
    assert_eq!(
        nvlink_link_errors(&out),
        [("0".into(), "5".into(), "symbol".into(), 9.0)]
    );
    // One call per scope, GPU and slow reading; the legacy call only for link 0 of the first.
    assert_eq!(calls("nvmlDeviceGetFieldValues(nvlink)"), polls * gpus);
    assert_eq!(
        calls("nvmlDeviceGetFieldValues(nvlink per link)"),
        polls * gpus
    );
    assert_eq!(calls("nvmlDeviceGetNvLinkErrorCounter"), 4 * gpus);
}
