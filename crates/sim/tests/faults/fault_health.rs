//! The `fault-health` scenario: each GPU shows its rule, and only its rule, in its window.

use dgx_pixels_sim::labels::{NvlinkErrorType, RecoveryAction, ThrottleReason};
use dgx_pixels_sim::{GpuReadout, GpuState, Node, Scenario};

use super::{ok, secs};

fn throttle(r: &GpuReadout, reason: ThrottleReason) -> bool {
    r.throttle_reason(reason) == Some(true)
}

/// What the health rules read of one GPU, as one comparable line.
fn conditions(r: &GpuReadout) -> Vec<&'static str> {
    let mut out = Vec::new();
    let ecc = r.ecc.unwrap();
    if ecc.volatile_uncorrected > 0.0 {
        out.push("ecc_double_bit");
    }
    if let Some(rows) = r.remapped_rows {
        if rows.failure {
            out.push("row_remap_failure");
        }
        if rows.pending {
            out.push("row_remap_pending");
        }
    }
    if r.retired_pages.is_some_and(|p| p.pending) {
        out.push("retired_pages_pending");
    }
    if r.recovery_action.is_some_and(|a| a != RecoveryAction::None) {
        out.push("driver_recovery_action");
    }
    if r.nvlinks.iter().any(|l| !l.up) {
        out.push("nvlink_down");
    }
    if r.pcie_link_width < r.pcie_link_max_width {
        out.push("pcie_width_degraded");
    }
    if r.pcie_link_generation < r.pcie_link_max_generation {
        out.push("pcie_generation_degraded");
    }
    if throttle(r, ThrottleReason::HwSlowdown) || throttle(r, ThrottleReason::HwPowerBrakeSlowdown)
    {
        out.push("hw_slowdown");
    }
    if throttle(r, ThrottleReason::SwThermalSlowdown)
        || throttle(r, ThrottleReason::HwThermalSlowdown)
    {
        out.push("thermal_slowdown");
    }
    out
}

#[test]
fn fault_health_shows_each_gpus_rule_inside_its_window_only() {
    let mut n = Node::new(Scenario::builtin("fault-health").unwrap());
    assert_eq!(n.gpu_count(), 15);
    assert_eq!(n.gpu(12).unwrap().architecture, "Volta");
    // What holds at 6.5 s, per GPU: the level conditions hold in [3, 12) s; the transient
    // ones (checked below) end by then, except the heat.
    let expected: [(usize, &[&str]); 15] = [
        (0, &[]),
        (1, &[]),
        (2, &["ecc_double_bit", "row_remap_pending"]),
        (3, &[]), // lost: no reading
        (4, &["nvlink_down"]),
        (5, &["pcie_width_degraded"]),
        (6, &[]),
        (7, &[]),
        (8, &[]),
        (9, &["row_remap_pending"]),
        (
            10,
            &["ecc_double_bit", "row_remap_failure", "row_remap_pending"],
        ),
        (11, &["thermal_slowdown"]),
        (12, &["retired_pages_pending"]),
        (13, &["ecc_double_bit", "retired_pages_pending"]),
        (14, &["driver_recovery_action"]),
    ];
    for (g, want) in expected {
        for t in [0.0, 2.9, 20.0, 40.0] {
            let before_or_after = ok(&mut n, g, t);
            let want_after: &[&str] = if g == 10 && t >= 12.0 {
                &["row_remap_failure"]
            } else {
                &[]
            };
            assert_eq!(conditions(&before_or_after), want_after, "GPU {g} at {t} s");
        }
        if g == 3 {
            assert!(matches!(
                n.reading(3, secs(6.5)),
                Some(GpuState::Lost { xid: 79, .. })
            ));
            continue;
        }
        assert_eq!(conditions(&ok(&mut n, g, 6.5)), want, "GPU {g} at 6.5 s");
    }
    // The transient ones, inside their shorter windows.
    assert_eq!(conditions(&ok(&mut n, 6, 4.0)), ["hw_slowdown"]);
    assert_eq!(
        conditions(&ok(&mut n, 8, 4.0)),
        ["pcie_generation_degraded"]
    );
    let errors =
        |n: &mut Node, t: f64, e: NvlinkErrorType| ok(n, 7, t).nvlinks[0].errors.get(e).unwrap();
    assert_eq!(
        [2.9, 3.0, 4.0, 5.0, 30.0].map(|t| errors(&mut n, t, NvlinkErrorType::CrcData)),
        [0.0, 2.0, 4.0, 6.0, 6.0]
    );
    assert_eq!(errors(&mut n, 30.0, NvlinkErrorType::Recovery), 0.0);
    let xids = |n: &mut Node, g: usize, t: f64| ok(n, g, t).xid_counts;
    assert_eq!(xids(&mut n, 1, 3.0), [(13, 1)].into());
    assert_eq!(xids(&mut n, 2, 3.4), Default::default());
    assert_eq!(xids(&mut n, 2, 3.5), [(48, 1)].into());
    assert!(matches!(
        n.reading(3, secs(11.9)),
        Some(GpuState::Lost { .. })
    ));
    assert!(matches!(n.reading(3, secs(12.0)), Some(GpuState::Ok(_))));
    // GPU 11 slows down for heat in software only (a hardware slowdown would be another rule)
    // and cools down soon after the fault.
    for k in 0..=200 {
        let t = f64::from(k) * 0.1;
        let r = ok(&mut n, 11, t);
        assert!(!throttle(&r, ThrottleReason::HwThermalSlowdown), "{t} s");
        let hot = throttle(&r, ThrottleReason::SwThermalSlowdown);
        if (6.0..=7.0).contains(&t) {
            assert!(hot, "not hot at {t} s");
        }
        if !(5.0..8.0).contains(&t) {
            assert!(!hot, "hot at {t} s");
        }
    }
    // The resets leave the counts: GPU 13's page stays retired, no longer pending.
    let r = ok(&mut n, 13, 12.0);
    let pages = r.retired_pages.unwrap();
    assert_eq!((pages.double_bit_ecc, pages.pending), (1.0, false));
    let ecc = r.ecc.unwrap();
    assert_eq!(
        (ecc.volatile_uncorrected, ecc.aggregate_uncorrected),
        (0.0, 1.0)
    );
}
