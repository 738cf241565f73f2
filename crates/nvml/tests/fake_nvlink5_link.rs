//! Issue 43: a Blackwell driver that answers the NVLink 5 counters per link and refuses the
//! aggregate scope (`FAKE_NVML_NVLINK5_SCOPE=link`): the totals fall back to the links' sum,
//! the link is named, and the aggregate scope is asked again after a growing pause.
#![allow(clippy::unwrap_used)]

mod common;

use common::{calls, nvlink5_totals, nvlink_errors, nvlink_link_errors};

// One test in this file: the fake reads its environment at init, for this process.
#[test]
fn a_driver_refusing_the_aggregate_scope_serves_the_links_sum() {
    let polls = 4;
    let out = common::b200_after_polls(
        "nvlink5-link",
        &[("FAKE_NVML_NVLINK5_SCOPE", "link")],
        polls,
    );
    let gpus = 8;
    assert_eq!(nvlink_errors(&out, "0"), nvlink5_totals(9.0));
    assert_eq!(nvlink_errors(&out, "3"), nvlink5_totals(0.0));
    assert_eq!(
        nvlink_link_errors(&out),
        [("0".into(), "5".into(), "symbol".into(), 9.0)]
    );
    assert_eq!(
        calls("nvmlDeviceGetFieldValues(nvlink per link)"),
        polls * gpus
    );
    assert_eq!(calls("nvmlDeviceGetFieldValues(nvlink)"), 2 * gpus);
    assert_eq!(calls("nvmlDeviceGetNvLinkErrorCounter"), 4 * gpus);
}
