//! A GPU whose XIDs nobody observes is `unknown` (`xid_unobserved`), never healthy.

use crate::common;

use std::time::Duration;

use common::*;

/// Issue 28, item 17: with NVML's XID events refused (`FAKE_NVML_XID_EVENTS=0`) and the kmsg
/// collector off, every GPU says its XIDs are not observed (`dgx_pixels_gpu_xid_observed` 0,
/// served in the default profile) and is `unknown` with reason `xid_unobserved`, never
/// `healthy`, also in an XID storm (fault-xid-storm: GPU 2 storms XID 13). With the events
/// accepted, no such series is served in the default profile and a quiet GPU is healthy.
#[test]
fn a_gpu_whose_xids_nobody_observes_is_never_healthy() {
    for (scenario, events) in [
        ("fault-xid-storm", "0"),
        ("dgx-h100", "0"),
        ("dgx-h100", "1"),
    ] {
        let d = start_with_env(
            &["--nvml.library", fake_nvml_library()],
            &[
                ("FAKE_NVML_SCENARIO", scenario),
                ("FAKE_NVML_START", "40"),
                ("FAKE_NVML_XID_EVENTS", events),
                ("FAKE_NVML_PCIE_DELAY_MS", "0"),
            ],
        );
        let check = |b: &str| {
            (0..4).all(|g| {
                let g = g.to_string();
                let state = |s: &str| {
                    value(
                        b,
                        "dgx_pixels_gpu_health_state",
                        &[("gpu", g.as_str()), ("state", s)],
                    )
                };
                let observed = value(b, "dgx_pixels_gpu_xid_observed", &[("gpu", g.as_str())]);
                if events == "0" {
                    observed == Some(0.0)
                        && state("unknown") == Some(1.0)
                        && value(
                            b,
                            "dgx_pixels_gpu_health_action_info",
                            &[("gpu", g.as_str()), ("reason", "xid_unobserved")],
                        ) == Some(1.0)
                } else {
                    observed.is_none() && state("healthy") == Some(1.0)
                }
            })
        };
        let (body, _) = wait_until(d.port, Duration::from_secs(15), check);
        assert!(
            check(&body),
            "{scenario} events={events}:\n{}",
            body.lines()
                .filter(|l| l.contains("health") || l.contains("xid_observed"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert!(
            series(&body, "dgx_pixels_gpu_health_state")
                .iter()
                .all(|l| !l.contains("state=\"healthy\"") || events == "1"),
            "{scenario}: no GPU is healthy while its XIDs are unseen"
        );
    }
}
