//! NVML's full device telemetry: violation time, processes, remapped rows, retired pages.

use dgx_pixels_sim::labels::{ThrottleReason, ViolationPolicy};
use dgx_pixels_sim::{Node, Scenario};

use super::{node, ok, GPU};

#[test]
fn violation_time_accumulates_only_while_throttled() {
    let mut n = node("fault-thermal");
    // Before the cooling failure at 20 s there is no thermal violation.
    assert_eq!(
        ok(&mut n, 5, 19.0)
            .violation_seconds(ViolationPolicy::Thermal)
            .unwrap(),
        0.0
    );
    let a = ok(&mut n, 5, 60.0)
        .violation_seconds(ViolationPolicy::Thermal)
        .unwrap();
    let b = ok(&mut n, 5, 90.0)
        .violation_seconds(ViolationPolicy::Thermal)
        .unwrap();
    assert!(a > 0.0);
    assert!(
        (b - a - 30.0).abs() < 0.11,
        "throttled throughout: {a} -> {b}"
    );
    let end = ok(&mut n, 5, 300.0)
        .violation_seconds(ViolationPolicy::Thermal)
        .unwrap();
    let later = ok(&mut n, 5, 400.0)
        .violation_seconds(ViolationPolicy::Thermal)
        .unwrap();
    assert_eq!(end, later, "no thermal violation after cooling is restored");
    assert_eq!(
        ok(&mut n, 0, 300.0)
            .violation_seconds(ViolationPolicy::Thermal)
            .unwrap(),
        0.0
    );

    // dgx-h100 training demands more than the 700 W limit: power violation grows with time capped.
    let mut h = node("dgx-h100");
    let mut prev = 0.0;
    for t in [60.0, 90.0, 120.0] {
        let r = ok(&mut h, 0, t);
        assert_eq!(r.throttle_reason(ThrottleReason::SwPowerCap), Some(true));
        assert!(
            r.violation_seconds(ViolationPolicy::Power).unwrap() > prev,
            "at {t}"
        );
        prev = r.violation_seconds(ViolationPolicy::Power).unwrap();
    }
}

#[test]
fn processes_hold_the_memory_in_use() {
    let mut h = node("dgx-h100");
    let r = ok(&mut h, 3, 60.0);
    assert_eq!(r.processes.len(), 1);
    assert_eq!(Some(r.processes[0].used_memory_bytes), r.memory_used_bytes);
    assert_eq!(r.processes[0].gpu_instance, None);

    let mut m = node("dgx-a100-mig");
    let r = ok(&mut m, 1, 60.0);
    assert_eq!(r.processes.len(), 3, "one per busy MIG instance");
    for (p, inst) in r.processes.iter().zip(&r.mig) {
        assert_eq!(p.gpu_instance, Some(inst.gpu_instance));
        assert_eq!(Some(p.used_memory_bytes), inst.memory_used_bytes);
    }
    let pids: std::collections::HashSet<u32> = r.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids.len(), 3);
}

#[test]
fn remapped_rows_follow_uncorrectable_errors() {
    let mut n = node("fault-ecc");
    let before = ok(&mut n, 2, 89.9);
    assert_eq!(before.remapped_rows, Some(Default::default()));
    assert_eq!(
        before.retired_pages, None,
        "Hopper remaps rows, retires no pages"
    );
    let after = ok(&mut n, 2, 90.0).remapped_rows.unwrap();
    assert_eq!(after.uncorrectable, 1.0);
    assert!(after.pending && !after.failure);
}

#[test]
fn parts_before_ampere_retire_pages_instead_of_remapping_rows() {
    let text = format!("{GPU}\n").replace("\"Hopper\"", "\"Volta\"");
    let mut n = Node::new(Scenario::from_toml_str(&text, "volta.toml").unwrap());
    let r = ok(&mut n, 0, 10.0);
    assert_eq!(r.remapped_rows, None);
    assert_eq!(r.retired_pages, Some(Default::default()));
}
